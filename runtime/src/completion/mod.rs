//! The completion engine: libnrt's `exec_request_progress_one_step` (docs/facts/libnrt-runtime-model.md §B.1–§B.5, docs/facts/libnrt-runtime-model.md §A
//! §4.3–§5.4, docs/facts/libnrt.md §5.4–§5.6).
//!
//! [`ExecTracker::step`] is a non-blocking one-step function with the `{1 in flight, 0 done,
//! 2 done-with-error}` contract ([`Step`]):
//!
//! * **INIT** → arm the barrier-proxy wait (warn threshold 120 s) → WAIT_BARRIER_PROXY; in flight.
//! * **WAIT_BARRIER_PROXY**: poll every NC's barrier proxy. A failure flags
//!   `EXEC_FATAL_STATUS_BARRIER` and finalizes with `NRT_EXEC_HW_ERR_COLLECTIVES`, or with
//!   `NRT_NETWORK_PROXY_FAILURE` when the NC latched `net_proxy_fail` (the transport to the other
//!   ranks failed: the barrier check's own status, as libnrt's `FINALIZE(rc)`). While any is
//!   pending: once the wait reaches the threshold, warn and double the threshold (never fatal).
//!   When all clear: every expected engine of every NC becomes START_PENDING, the core start
//!   time is captured (the timeout is measured from here) → WAIT_CORE; in flight.
//! * **WAIT_CORE**: per NC, poll the network proxy (failure → `EXEC_FATAL_STATUS_NETWORK_PROXY`,
//!   1206), then per expected, incomplete engine read at most `reads_per_sweep` (16) INFER_STATUS
//!   records and run the matcher:
//!   - debug hint (byte 2 >> 4): 0 nothing, 1 drain-to-subscriber (counted), other → generic fault;
//!   - START: START_PENDING → END_PENDING, earliest START kept; END: END_PENDING → COMPLETE,
//!     latest END kept; an out-of-order START/END probes the NQ-overflow cause bit →
//!     `NRT_EXEC_SW_NQ_OVERFLOW` (flag SW_NQ_OVERFLOW) or the generic fault;
//!   - CC_START / CC_END: earliest / latest into the NC's CC slots;
//!   - CUSTOM by sub-id: 0–5, 9, 10 OOB → `NRT_EXEC_OOB` (flag OOB); 6 debug (logged);
//!     7 tensor completion (recorded); 8 debug-tensor read (recorded); other → `NRT_HW_ERROR`.
//!     On non-SUNDA arches a CUSTOM record on engine index 2 gets its tag forced to 0xE first;
//!   - any other subtype → generic fault.
//!
//!   Once an engine is COMPLETE it is drained ([`NotificationSource::drain_infer`]) and its
//!   remaining records in the batch are discarded. After the sweep: all complete → FINALIZE(0);
//!   else if `now − core start ≥ timeout`, per incomplete NC probe the overflow bit → 1204 (flag
//!   SW_NQ_OVERFLOW) or `NRT_TIMEOUT` (flag TIMEOUT) and FINALIZE. Before the timeout, at most
//!   every [`SIGNAL_PROBE_INTERVAL`], the same branch is taken at once for an NC whose device
//!   raised the overflow line or latched a cause its engines cannot finish after ([`stuck`]:
//!   sequencer fatal, DMA abort / fault), so those faults are reported when they happen with
//!   the status the timeout would give; a hang (no signal) still waits for the timeout.
//! * **FINALIZE** (on every path): per NC sweep the whole error ring ([`crate::error_decode`]) and
//!   merge its status by priority; read the latched fatal causes: on the timeout branch
//!   (`NRT_TIMEOUT`) HBM UE → 1201 else DMA abort → 1203 else collectives → 1200 *replace* the
//!   timeout (a repairable HBM UE is not propagated there, reproducing libnrt 2.31 — docs/facts/libnrt-runtime-model.md §B.4
//!   (COMPLETE-1)); otherwise HBM UE 1201, repairable HBM UE 1205, DMA abort 1203, collectives
//!   1200 merge by priority; NC UE 1202 and network proxy 1206 merge by priority on both paths.
//!   The NC results are reconciled with [`crate::status::worst`].
//!
//! A source that cannot read the device ([`SourceError`]: an MMIO or host-memory failure in
//! [`NotificationSource::poll_infer`], `drain_infer` or `poll_errors`) ends the execution at
//! once through FINALIZE with [`SourceError::status`] (NRT_FAILURE unless a more specific
//! status applies) merged into that NC's result — an error, never a silent timeout.
//!
//! "Generic fault" = a fault that does not set the NC's result; FINALIZE then falls back to
//! `NRT_FAILURE` unless another NC/error-ring status is set (docs/facts/libnrt-runtime-model.md §B.1: a failure with no status set).
//!
//! Verdict: [`Step::Done`] when the harvest completed normally and no hardware cause was latched
//! (the status may still be 1003/1004 — Band B flags the result, it is not fatal);
//! [`Step::DoneWithError`] otherwise.
//!
//! Steady state allocates nothing: record buffers are sized in [`ExecTracker::new`] and reused,
//! and [`ExecTracker::reset`] rearms the tracker for the next execution. (Tensor-completion
//! records beyond the preallocated capacity grow their vector.)

use crate::error_decode::{ErrorBlock, ErrorDecodeConfig, INFER_ERROR_SUBTYPE_MAX};
use crate::state::{ErpStep, ExecFatalStatus, ExecState, FatalFlags};
use crate::status::{worse, worst, NrtStatus};
use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::notify::{custom, InferStatus, Subtype};
use csr_maps::Engine;
use neff::Arch;
use platform::clock::{ClockKind, Interval};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Records read per engine per sweep in libnrt.
pub const DEFAULT_READS_PER_SWEEP: usize = 16;
/// Initial barrier-proxy warning threshold.
pub const BARRIER_WARN_INITIAL: Duration = Duration::from_secs(120);
/// The engine whose CUSTOM records get their tag rewritten on non-SUNDA arches.
pub const TAG_FIXUP_ENGINE: Engine = Engine::Pool;
/// The tag forced on those records.
pub const TAG_FIXUP_VALUE: u8 = csr_maps::formats::notify::ntype::engine(
    TAG_FIXUP_ENGINE.index() as u8,
    csr_maps::formats::notify::ntype::EXPLICIT,
);

/// Barrier-proxy warnings emitted in this process, by every tracker.
static BARRIER_WARNINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// "Timeout exceeded: Waiting on barrier proxy task" warnings emitted in this process so far
/// (every execution's; [`ExecTracker::barrier_warnings`] counts one execution's).
pub fn barrier_warnings_total() -> u64 {
    BARRIER_WARNINGS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Result of a proxy (collectives barrier / network) poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyPoll {
    /// Not finished yet.
    Pending,
    /// Finished (single-NC, non-collective models report this immediately).
    Done,
    /// The proxy task failed.
    Failed,
}

/// Fatal hardware causes latched for an NC: the device's own record ([`hal::FatalCauses`]).
/// FINALIZE classifies six of them: `HBM_UE` → 1201, `HBM_UE_REPAIRABLE` → 1205, `NC_UE` →
/// 1202, `DMA_ABORT` → 1203, `CC_ERROR` → 1200, `NET_PROXY` → 1206 ([`classified`]).
pub use hal::FatalCauses;

/// Whether any cause FINALIZE classifies is latched (`SEQ_FATAL` and `DMA_FAULT` are reported
/// through the notification and error rings instead).
pub fn classified(c: &FatalCauses) -> bool {
    c.intersects(
        FatalCauses::HBM_UE
            | FatalCauses::HBM_UE_REPAIRABLE
            | FatalCauses::NC_UE
            | FatalCauses::DMA_ABORT
            | FatalCauses::CC_ERROR
            | FatalCauses::NET_PROXY,
    )
}

mod cold;
mod finalize;
mod harvest;
mod source;
mod types;

pub use source::{NotificationSource, SourceError};
pub use types::*;

#[derive(Debug, Clone)]
struct NcState {
    engines: [EngineState; Engine::COUNT],
    start_ts: [u64; Engine::COUNT],
    end_ts: [u64; Engine::COUNT],
    cc_start: u64,
    cc_end: u64,
    ret: NrtStatus,
    fatal: FatalFlags,
    errors: ErrorBlock,
    causes: FatalCauses,
    barrier_done: bool,
    network_done: bool,
    discarded: u64,
    drain_hints: u64,
    debug_notifications: u64,
}

impl NcState {
    fn new() -> Self {
        Self {
            engines: [EngineState::StartPending; Engine::COUNT],
            start_ts: [0; Engine::COUNT],
            end_ts: [0; Engine::COUNT],
            cc_start: 0,
            cc_end: 0,
            ret: NrtStatus::Success,
            fatal: FatalFlags::default(),
            errors: ErrorBlock::new(),
            causes: FatalCauses::default(),
            barrier_done: false,
            network_done: false,
            discarded: 0,
            drain_hints: 0,
            debug_notifications: 0,
        }
    }
}

/// One in-flight execution over 1..N NCs.
#[derive(Debug, Clone)]
pub struct ExecTracker {
    cfg: TrackerConfig,
    state: ExecState,
    ncs: Vec<NcState>,
    barrier_start: Interval,
    barrier_thresh: Duration,
    barrier_warnings: u32,
    core_start: Interval,
    infer_buf: Vec<InferStatus>,
    error_buf: Vec<TpbErrorRecord>,
    tensor_completions: Vec<TensorEvent>,
    debug_tensor_reads: Vec<TensorEvent>,
    verdict: Option<Step>,
    status: NrtStatus,
    /// When the device's fatal-error signals were last probed (WAIT_CORE).
    probed: Option<Instant>,
}

/// How often WAIT_CORE probes the device's fatal-error signals while an execution is in
/// flight (two register reads per NC), so a stuck execution is reported within about this
/// long instead of at the timeout.
pub const SIGNAL_PROBE_INTERVAL: Duration = Duration::from_millis(1);

/// Latched causes after which the engines cannot finish (a sequencer stopped on a fatal
/// instruction, an aborted or faulted DMA queue that will never signal its semaphore, a
/// collective the collectives hardware failed, which its engine waits on forever).
pub fn stuck(c: &FatalCauses) -> bool {
    c.intersects(FatalCauses::SEQ_FATAL | FatalCauses::DMA_ABORT | FatalCauses::DMA_FAULT | FatalCauses::CC_ERROR)
}

impl ExecTracker {
    /// A tracker for an execution over `nc_count` NCs, state INIT. All buffers are sized here.
    pub fn new(nc_count: usize, cfg: TrackerConfig) -> Result<Self, TrackerError> {
        if nc_count == 0 {
            return Err(TrackerError::NoNc);
        }
        if !cfg.engines.iter().any(|&e| e) {
            return Err(TrackerError::NoEngines);
        }
        if cfg.reads_per_sweep == 0 {
            return Err(TrackerError::ZeroLimit("reads_per_sweep"));
        }
        if cfg.error_batch == 0 {
            return Err(TrackerError::ZeroLimit("error_batch"));
        }
        Ok(Self {
            state: ExecState::Init,
            ncs: vec![NcState::new(); nc_count],
            barrier_start: Interval::default(),
            barrier_thresh: cfg.barrier_warn,
            barrier_warnings: 0,
            core_start: Interval::default(),
            infer_buf: Vec::with_capacity(cfg.reads_per_sweep),
            error_buf: Vec::with_capacity(cfg.error_batch),
            tensor_completions: Vec::with_capacity(cfg.tensor_capacity),
            debug_tensor_reads: Vec::with_capacity(cfg.tensor_capacity),
            verdict: None,
            status: NrtStatus::Success,
            probed: None,
            cfg,
        })
    }

    /// Rearm for the next execution (state INIT), keeping every buffer.
    pub fn reset(&mut self) {
        self.state = ExecState::Init;
        for nc in &mut self.ncs {
            *nc = NcState::new();
        }
        self.barrier_start.clear();
        self.barrier_thresh = self.cfg.barrier_warn;
        self.barrier_warnings = 0;
        self.core_start.clear();
        self.infer_buf.clear();
        self.error_buf.clear();
        self.tensor_completions.clear();
        self.debug_tensor_reads.clear();
        self.verdict = None;
        self.status = NrtStatus::Success;
        self.probed = None;
    }

    /// Configuration.
    pub fn config(&self) -> &TrackerConfig {
        &self.cfg
    }
    /// Current `exec_state`.
    pub fn state(&self) -> ExecState {
        self.state
    }
    /// NCs covered.
    pub fn nc_count(&self) -> usize {
        self.ncs.len()
    }
    /// The final verdict, once done.
    pub fn verdict(&self) -> Option<Step> {
        self.verdict
    }
    /// Final status reconciled across NCs (NRT_SUCCESS while in flight).
    pub fn status(&self) -> NrtStatus {
        self.status
    }
    /// One NC's own result (`exec_rets[nc]`).
    pub fn nc_status(&self, nc: usize) -> Option<NrtStatus> {
        self.ncs.get(nc).map(|n| n.ret)
    }
    /// One NC's `exec_fatal_status` row.
    pub fn fatal_flags(&self, nc: usize) -> Option<FatalFlags> {
        self.ncs.get(nc).map(|n| n.fatal)
    }
    /// One NC's `infer_error_flags` (error subtypes seen in its error ring).
    pub fn infer_errors(&self, nc: usize) -> Option<[bool; INFER_ERROR_SUBTYPE_MAX]> {
        self.ncs.get(nc).map(|n| n.errors.flags)
    }
    /// Fatal causes read for an NC at FINALIZE.
    pub fn fatal_causes(&self, nc: usize) -> Option<FatalCauses> {
        self.ncs.get(nc).map(|n| n.causes)
    }
    /// Matcher sub-state of an engine.
    pub fn engine_state(&self, nc: usize, engine: usize) -> Option<EngineState> {
        self.ncs.get(nc).and_then(|n| n.engines.get(engine).copied())
    }
    /// Barrier-proxy warnings emitted so far.
    pub fn barrier_warnings(&self) -> u32 {
        self.barrier_warnings
    }
    /// Current barrier-proxy warning threshold.
    pub fn barrier_threshold(&self) -> Duration {
        self.barrier_thresh
    }
    /// When the barrier cleared (start of the core timeout), on the clock the steps were given
    /// (the runtime's is the coarse clock: not comparable with `Instant::now()`; on it the
    /// start is the first reading after the clear that shows the clock moved,
    /// [`platform::clock::Interval`]).
    pub fn core_start(&self) -> Option<Instant> {
        self.core_start.start()
    }
    /// Sub-id 7 records seen, in arrival order.
    pub fn tensor_completions(&self) -> &[TensorEvent] {
        &self.tensor_completions
    }
    /// Sub-id 8 records seen.
    pub fn debug_tensor_reads(&self) -> &[TensorEvent] {
        &self.debug_tensor_reads
    }
    /// Sub-id 6 (debug) records seen on an NC.
    pub fn debug_notifications(&self, nc: usize) -> Option<u64> {
        self.ncs.get(nc).map(|n| n.debug_notifications)
    }
    /// Records with debug hint 1 (drain to subscriber) seen on an NC.
    pub fn drain_hints(&self, nc: usize) -> Option<u64> {
        self.ncs.get(nc).map(|n| n.drain_hints)
    }
    /// Records discarded because their engine had already completed.
    pub fn discarded(&self, nc: usize) -> Option<u64> {
        self.ncs.get(nc).map(|n| n.discarded)
    }
    /// One NC's timings (device timestamps).
    pub fn timing(&self, nc: usize) -> Option<NcTiming> {
        let n = self.ncs.get(nc)?;
        let mut t = NcTiming { cc_start: opt(n.cc_start), cc_end: opt(n.cc_end), ..Default::default() };
        for (e, et) in t.engines.iter_mut().enumerate() {
            *et = EngineTiming { start: opt(n.start_ts[e]), end: opt(n.end_ts[e]) };
        }
        Some(t)
    }
    /// NC `nc`'s device span without building its [`NcTiming`]: the duration (latest END −
    /// earliest START, as [`NcTiming::duration`]) and the engine whose END is the latest with
    /// that END (the last such engine on a tie, as `max_by_key`).
    pub fn device_span(&self, nc: usize) -> (Option<u64>, Option<(usize, u64)>) {
        let Some(n) = self.ncs.get(nc) else { return (None, None) };
        let mut start: Option<u64> = None;
        let mut last: Option<(usize, u64)> = None;
        for e in 0..Engine::COUNT {
            if let Some(s) = opt(n.start_ts[e]) {
                start = Some(start.map_or(s, |m| m.min(s)));
            }
            if let Some(t) = opt(n.end_ts[e]) {
                if last.is_none_or(|(_, m)| t >= m) {
                    last = Some((e, t));
                }
            }
        }
        let duration = match (start, last) {
            (Some(s), Some((_, e))) => Some(e.saturating_sub(s)),
            _ => None,
        };
        (duration, last)
    }
    /// All NCs' timings.
    pub fn timings(&self) -> Vec<NcTiming> {
        (0..self.ncs.len()).filter_map(|nc| self.timing(nc)).collect()
    }

    /// Advance as far as possible without blocking. `sources[nc]` serves NC `nc`; `now` is the
    /// injectable clock (every call of one execution on the same clock, of the resolution
    /// [`TrackerConfig::clock`] says). Once done, further calls return the same
    /// verdict and touch nothing.
    pub fn step<S: NotificationSource>(&mut self, sources: &mut [S], now: Instant) -> Step {
        if let Some(v) = self.verdict {
            return v;
        }
        if sources.len() < self.ncs.len() {
            cold::too_few_sources(sources.len(), self.ncs.len());
            self.state = ExecState::Done;
            self.status = NrtStatus::Invalid;
            self.verdict = Some(Step::DoneWithError);
            return Step::DoneWithError;
        }
        match self.state {
            ExecState::Init => {
                self.state = ExecState::WaitBarrierProxy;
                self.barrier_thresh = self.cfg.barrier_warn;
                self.barrier_start.begin(now, self.cfg.clock);
                Step::InFlight
            }
            ExecState::WaitBarrierProxy => self.step_barrier(sources, now),
            ExecState::WaitCore => self.step_core(sources, now),
            ExecState::Done => self.verdict.unwrap_or(Step::DoneWithError),
        }
    }
}
