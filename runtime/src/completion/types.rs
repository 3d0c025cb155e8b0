//! The engine's verdicts, states, configuration and the timings it records.

use super::*;

/// One-step verdict (values = libnrt's return codes, = `ERP_STEP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// 0: complete; see [`ExecTracker::status`] (success, or a Band-B "completed with" flag).
    Done,
    /// 1: still in flight; call again.
    InFlight,
    /// 2: complete with an error; [`ExecTracker::status`] holds it.
    DoneWithError,
}

impl Step {
    /// libnrt's integer return.
    pub fn code(self) -> u32 {
        self.erp().value()
    }
    /// As `ERP_STEP`.
    pub fn erp(self) -> ErpStep {
        match self {
            Step::Done => ErpStep::Done,
            Step::InFlight => ErpStep::Continue,
            Step::DoneWithError => ErpStep::Fatal,
        }
    }
    /// Not in flight.
    pub fn is_done(self) -> bool {
        self != Step::InFlight
    }
}

/// Per-engine sub-state of the matcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EngineState {
    /// Waiting for START.
    StartPending = 0,
    /// Waiting for END.
    EndPending = 1,
    /// Done (or not expected).
    Complete = 2,
}

/// Configuration errors.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TrackerError {
    #[error("an execution covers at least one NC")]
    NoNc,
    #[error("at least one engine must be expected")]
    NoEngines,
    #[error("{0} must be at least 1")]
    ZeroLimit(&'static str),
}

/// Tracker parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerConfig {
    /// Architecture (CUSTOM tag fix-up; error decode).
    pub arch: &'static Arch,
    /// Core-phase timeout (`1000 × model timeout seconds` ms; see [`crate::env::core_timeout`]).
    pub timeout: Duration,
    /// Engines expected to report START/END, per NC (all five in libnrt).
    pub engines: [bool; Engine::COUNT],
    /// Records read per engine per sweep.
    pub reads_per_sweep: usize,
    /// Error records requested per `poll_errors` call.
    pub error_batch: usize,
    /// Upper bound of error records consumed per NC per FINALIZE (guards a runaway source).
    pub max_error_records: usize,
    /// Preallocated tensor-completion records.
    pub tensor_capacity: usize,
    /// First barrier-proxy warning threshold.
    pub barrier_warn: Duration,
    /// Error decode parameters.
    pub decode: ErrorDecodeConfig,
    /// The clock [`ExecTracker::step`] is given (precise by default; the runtime steps the
    /// engine on the coarse clock, `platform::clock::coarse_now`). The timeout and the barrier
    /// warning are measured as [`platform::clock::Interval`]s on it, so neither comes early by
    /// the precise clock, however far a coarse reading lags.
    pub clock: ClockKind,
}

impl TrackerConfig {
    /// libnrt defaults for `arch` and `timeout`.
    pub fn new(arch: &'static Arch, timeout: Duration) -> Self {
        Self {
            arch,
            timeout,
            engines: [true; Engine::COUNT],
            reads_per_sweep: DEFAULT_READS_PER_SWEEP,
            error_batch: DEFAULT_READS_PER_SWEEP,
            max_error_records: 1 << 16,
            tensor_capacity: 64,
            barrier_warn: BARRIER_WARN_INITIAL,
            decode: ErrorDecodeConfig::default(),
            clock: ClockKind::Precise,
        }
    }
}

/// A CUSTOM sub-id 7 (tensor completion) or 8 (debug-tensor read) record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorEvent {
    pub nc: usize,
    pub engine: usize,
    /// Variable id: the record's 20-bit line field (`+0 u16 | (byte 2 & 0xF) << 16`).
    pub var_id: u32,
    /// Device timestamp.
    pub timestamp: u64,
    /// Notification tag (byte 3 & 0x1F), after the non-SUNDA engine-2 fix-up.
    pub tag: u8,
}

/// Earliest START / latest END of one engine (device timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineTiming {
    pub start: Option<u64>,
    pub end: Option<u64>,
}

impl EngineTiming {
    /// `end − start` when both are known.
    pub fn duration(&self) -> Option<u64> {
        Some(self.end?.saturating_sub(self.start?))
    }
}

/// One NC's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NcTiming {
    pub engines: [EngineTiming; Engine::COUNT],
    pub cc_start: Option<u64>,
    pub cc_end: Option<u64>,
}

impl NcTiming {
    /// Earliest START over the engines.
    pub fn start(&self) -> Option<u64> {
        self.engines.iter().filter_map(|e| e.start).min()
    }
    /// Latest END over the engines.
    pub fn end(&self) -> Option<u64> {
        self.engines.iter().filter_map(|e| e.end).max()
    }
    /// Per-NC duration (latest END − earliest START).
    pub fn duration(&self) -> Option<u64> {
        Some(self.end()?.saturating_sub(self.start()?))
    }
    /// CC end − CC start.
    pub fn cc_duration(&self) -> Option<u64> {
        Some(self.cc_end?.saturating_sub(self.cc_start?))
    }
}

pub(super) fn opt(ts: u64) -> Option<u64> {
    (ts != 0).then_some(ts)
}

/// Earliest-wins slot update with libnrt's "0 = unset" encoding (`slot − 1 ≥ ts`).
pub(super) fn keep_earliest(slot: &mut u64, ts: u64) {
    if slot.wrapping_sub(1) >= ts {
        *slot = ts;
    }
}

/// Latest-wins slot update (`slot < ts || slot == 0`).
pub(super) fn keep_latest(slot: &mut u64, ts: u64) {
    if *slot < ts || *slot == 0 {
        *slot = ts;
    }
}
