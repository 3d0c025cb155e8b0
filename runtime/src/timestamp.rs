//! Device → CPU timestamp rescale (docs/facts/libnrt-runtime-model.md §B.3 "Per-engine timestamp decode", docs/facts/libnrt.md §5.4).
//!
//! Per engine the device keeps `{init_timestamp, actual_timestamp_inc, expected_timestamp_inc}`:
//!
//! ```text
//! delta     = device_ts - init_timestamp
//! scaled    = expected_inc / actual_inc × delta          (device ps, drift-corrected)
//! device_ns = scaled / 1000
//! cpu_ns    = sync.cpu_ns + (device_ns - sync.device_ns)  (anchored at a sync point)
//! ```
//!
//! The engine triple is selected by `(tag + 26) & 0x1F` ∈ {0 PE, 4 ACT, 8 POOL, 0xC DVE,
//! 0x10 SP}; those are exactly the EXPLICIT notification types 0x06/0x0A/0x0E/0x12/0x16
//! ([`engine_for_tag`]).
//!
//! Interpretations: a `device_ts` earlier than `init_timestamp` (which would wrap in the
//! original's u64 arithmetic) is an error here; the sync-point mapping (`sync_point_dev_ts_to_cpu_ts`,
//! not detailed in docs/facts/libnrt-runtime-model.md §B.3) is modelled as a plain offset from one (device ns, CPU ns) pair.

use thiserror::Error;

/// Rescale errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TimestampError {
    /// `actual_inc == 0`.
    #[error("engine clock has a zero actual increment")]
    ZeroIncrement,
    /// `device_ts < init_timestamp`.
    #[error("device timestamp {ts} precedes the engine's init timestamp {init}")]
    BeforeInit { ts: u64, init: u64 },
    /// Engine index out of range.
    #[error("no clock for engine {0}")]
    NoEngine(usize),
}

/// One engine's clock triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineClock {
    /// `init_timestamp`.
    pub init_ts: u64,
    /// `expected_timestamp_inc`.
    pub expected_inc: u64,
    /// `actual_timestamp_inc`.
    pub actual_inc: u64,
}

impl EngineClock {
    /// A clock running at its nominal rate from `init_ts`.
    pub fn nominal(init_ts: u64) -> Self {
        Self { init_ts, expected_inc: 1, actual_inc: 1 }
    }
}

/// `expected_inc / actual_inc × (device_ts − init_ts)`, in device units (ps).
pub fn rescale(device_ts: u64, clock: &EngineClock) -> Result<f64, TimestampError> {
    if clock.actual_inc == 0 {
        return Err(TimestampError::ZeroIncrement);
    }
    let delta = device_ts
        .checked_sub(clock.init_ts)
        .ok_or(TimestampError::BeforeInit { ts: device_ts, init: clock.init_ts })?;
    if clock.expected_inc == clock.actual_inc {
        // A clock at its nominal rate: the ratio is exactly 1.0, so the product is `delta`
        // itself (bit for bit what the formula gives), without the division.
        return Ok(delta as f64);
    }
    Ok(clock.expected_inc as f64 / clock.actual_inc as f64 * delta as f64)
}

/// [`rescale`] then `/ 1000` (ps → ns), truncated.
pub fn rescale_ns(device_ts: u64, clock: &EngineClock) -> Result<u64, TimestampError> {
    Ok((rescale(device_ts, clock)? / 1000.0) as u64)
}

/// Engine index for a notification tag via libnrt's `(tag + 26) & 0x1F` selector (defined
/// with the record format: `csr_maps::formats::notify::ntype::timestamp_engine`).
pub fn engine_for_tag(tag: u8) -> Option<usize> {
    csr_maps::formats::notify::ntype::timestamp_engine(tag)
}

/// A sync point: the same instant on the device (ns, after rescale) and on the CPU (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncPoint {
    pub device_ns: u64,
    pub cpu_ns: u64,
}

impl SyncPoint {
    /// Map a rescaled device time to CPU time (saturating at 0).
    pub fn to_cpu_ns(&self, device_ns: u64) -> u64 {
        if device_ns >= self.device_ns {
            self.cpu_ns.saturating_add(device_ns - self.device_ns)
        } else {
            self.cpu_ns.saturating_sub(self.device_ns - device_ns)
        }
    }
}

/// Per-NC clock set (five TPB engines) plus a sync point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampSync {
    pub clocks: [EngineClock; csr_maps::Engine::COUNT],
    pub sync: SyncPoint,
}

impl TimestampSync {
    /// Device timestamp of `engine` → CPU ns.
    pub fn to_cpu_ns(&self, engine: usize, device_ts: u64) -> Result<u64, TimestampError> {
        let clock = self.clocks.get(engine).ok_or(TimestampError::NoEngine(engine))?;
        Ok(self.sync.to_cpu_ns(rescale_ns(device_ts, clock)?))
    }
    /// Device → CPU for a record whose tag selects the engine.
    pub fn to_cpu_ns_by_tag(&self, tag: u8, device_ts: u64) -> Result<u64, TimestampError> {
        let engine = engine_for_tag(tag).ok_or(TimestampError::NoEngine(tag as usize))?;
        self.to_cpu_ns(engine, device_ts)
    }
}
