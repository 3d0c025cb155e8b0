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

/// A notification source could not read the device (an MMIO or host-memory failure while
/// harvesting a ring). The completion engine ends the execution with [`SourceError::status`]
/// instead of waiting for a timeout.
#[derive(Debug, Error)]
pub enum SourceError {
    /// Reading TPB engine `engine`'s INFER_STATUS ring failed.
    #[error("INFER_STATUS ring of engine {engine}: {source}")]
    InferRing {
        engine: usize,
        #[source]
        source: hal::HalError,
    },
    /// Reading the TPB error ring failed.
    #[error("error ring: {source}")]
    ErrorRing {
        #[source]
        source: hal::HalError,
    },
}

impl SourceError {
    /// The device failure behind the error.
    pub fn hal(&self) -> &hal::HalError {
        match self {
            SourceError::InferRing { source, .. } | SourceError::ErrorRing { source } => source,
        }
    }
    /// The status the execution ends with: the device failure's own
    /// ([`hal::HalError::status`]; NRT_EXEC_HW_ERR_DMA_ABORT for an aborted DMA engine).
    pub fn status(&self) -> NrtStatus {
        self.hal().status()
    }
}

/// What the device layer provides per NC.
pub trait NotificationSource {
    /// Append up to `max` new INFER_STATUS records of TPB engine `engine`, oldest first.
    /// Must not allocate in steady state (`out` is reused and has capacity `max`). Records are
    /// consumed from the ring by this call; every record appended is processed. A device
    /// failure is an `Err` (the records appended by the failed call are not processed).
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) -> Result<(), SourceError>;
    /// The engine completed: flush whatever remains in its INFER_STATUS ring (`notification_drain`).
    fn drain_infer(&mut self, engine: usize) -> Result<(), SourceError>;
    /// Append up to `max` new records of the NC's TPB error ring.
    fn poll_errors(&mut self, out: &mut Vec<TpbErrorRecord>, max: usize) -> Result<(), SourceError>;
    /// INTC cause bit 29 (software NQ overflow). Probed on timeout / out-of-order records, and
    /// in flight at most every [`SIGNAL_PROBE_INTERVAL`].
    fn nq_overflow(&mut self) -> bool;
    /// Fatal hardware causes latched since the last clear. Read once per NC at FINALIZE.
    fn fatal_causes(&mut self) -> FatalCauses;
    /// Collectives barrier-proxy status.
    fn barrier_proxy(&mut self) -> ProxyPoll;
    /// Collectives network-proxy status.
    fn network_proxy(&mut self) -> ProxyPoll;
    /// [`NotificationSource::network_proxy`] polled by a sweep at `now` (the step's clock): a
    /// source that rate-limits its register reads uses it instead of reading the clock again.
    fn network_proxy_at(&mut self, now: Instant) -> ProxyPoll {
        let _ = now;
        self.network_proxy()
    }
}

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

fn opt(ts: u64) -> Option<u64> {
    (ts != 0).then_some(ts)
}

/// Earliest-wins slot update with libnrt's "0 = unset" encoding (`slot − 1 ≥ ts`).
fn keep_earliest(slot: &mut u64, ts: u64) {
    if slot.wrapping_sub(1) >= ts {
        *slot = ts;
    }
}

/// Latest-wins slot update (`slot < ts || slot == 0`).
fn keep_latest(slot: &mut u64, ts: u64) {
    if *slot < ts || *slot == 0 {
        *slot = ts;
    }
}

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

    fn step_barrier<S: NotificationSource>(&mut self, sources: &mut [S], now: Instant) -> Step {
        let mut pending = false;
        for nc in 0..self.ncs.len() {
            if self.ncs[nc].barrier_done {
                continue;
            }
            match sources[nc].barrier_proxy() {
                ProxyPoll::Done => self.ncs[nc].barrier_done = true,
                ProxyPoll::Pending => pending = true,
                ProxyPoll::Failed => {
                    // libnrt finalizes with the barrier check's own status: the network
                    // proxy's when the transport to the other ranks failed (the device latched
                    // `net_proxy_fail`), else the collectives'.
                    let rc = if sources[nc].fatal_causes().contains(FatalCauses::NET_PROXY) {
                        NrtStatus::NetworkProxyFailure
                    } else {
                        NrtStatus::ExecHwErrCollectives
                    };
                    cold::barrier_failed(nc, rc);
                    let n = &mut self.ncs[nc];
                    n.fatal.set(ExecFatalStatus::Barrier);
                    n.ret = rc;
                    return self.finalize(sources, rc);
                }
            }
        }
        if pending {
            self.barrier_start.begin_once(now, self.cfg.clock);
            if self.barrier_start.elapsed(now) >= self.barrier_thresh {
                cold::barrier_warning(self.barrier_thresh);
                self.barrier_warnings = self.barrier_warnings.saturating_add(1);
                BARRIER_WARNINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.barrier_thresh = self.barrier_thresh.saturating_mul(2);
            }
            return Step::InFlight;
        }
        let expected = self.cfg.engines;
        for n in &mut self.ncs {
            for (e, st) in n.engines.iter_mut().enumerate() {
                *st = if expected[e] { EngineState::StartPending } else { EngineState::Complete };
            }
        }
        self.core_start.begin(now, self.cfg.clock);
        self.state = ExecState::WaitCore;
        Step::InFlight
    }

    fn step_core<S: NotificationSource>(&mut self, sources: &mut [S], now: Instant) -> Step {
        for nc in 0..self.ncs.len() {
            if !self.ncs[nc].network_done {
                match sources[nc].network_proxy_at(now) {
                    ProxyPoll::Done => self.ncs[nc].network_done = true,
                    ProxyPoll::Pending => {}
                    ProxyPoll::Failed => {
                        cold::network_proxy_failed(nc);
                        let n = &mut self.ncs[nc];
                        n.fatal.set(ExecFatalStatus::NetworkProxy);
                        n.ret = NrtStatus::NetworkProxyFailure;
                        return self.finalize(sources, NrtStatus::NetworkProxyFailure);
                    }
                }
            }
            if let Err(cause) = self.consume_nc(nc, &mut sources[nc]) {
                return self.finalize(sources, cause);
            }
        }
        let complete = |n: &NcState| n.engines.iter().all(|&e| e == EngineState::Complete);
        if self.ncs.iter().all(complete) {
            // Nothing outstanding: no deadline to look at.
            return self.finalize(sources, NrtStatus::Success);
        }
        // Some engine is outstanding from here on.
        let elapsed = self.core_start.elapsed(now);
        let mut cause = NrtStatus::Success;
        let timeout = self.cfg.timeout;
        // `elapsed` is never more than the true time on either clock (TrackerConfig::clock).
        // Between sweeps, at most every SIGNAL_PROBE_INTERVAL: a device that raised the NQ
        // overflow line or latched a cause the engines cannot finish after ends the execution
        // now, through the same path (and so with the same status) as the timeout would.
        let probe =
            elapsed < timeout && self.probed.is_none_or(|p| now.saturating_duration_since(p) >= SIGNAL_PROBE_INTERVAL);
        if probe {
            self.probed = Some(now);
        }
        for (nc, (n, src)) in self.ncs.iter_mut().zip(sources.iter_mut()).enumerate() {
            if complete(n) {
                continue;
            }
            let signalled = probe && (src.nq_overflow() || stuck(&src.fatal_causes()));
            if elapsed >= timeout || signalled {
                if src.nq_overflow() {
                    cold::nq_overflow(nc);
                    n.fatal.set(ExecFatalStatus::SwNqOverflow);
                    n.ret = NrtStatus::ExecSwNqOverflow;
                } else if signalled {
                    cold::fatal_while_waiting(nc);
                    n.fatal.set(ExecFatalStatus::Timeout);
                    n.ret = NrtStatus::Timeout;
                } else {
                    cold::timeout(nc, timeout);
                    n.fatal.set(ExecFatalStatus::Timeout);
                    n.ret = NrtStatus::Timeout;
                }
                cause = n.ret;
            }
        }
        if cause != NrtStatus::Success {
            return self.finalize(sources, cause);
        }
        Step::InFlight
    }

    /// Sweep one NC's expected, incomplete engines. `Err(cause)` = matcher fault.
    fn consume_nc<S: NotificationSource>(&mut self, nc: usize, src: &mut S) -> Result<(), NrtStatus> {
        let mut buf = std::mem::take(&mut self.infer_buf);
        let mut result = Ok(());
        'engines: for engine in 0..Engine::COUNT {
            if self.ncs[nc].engines[engine] == EngineState::Complete {
                continue;
            }
            buf.clear();
            if let Err(e) = src.poll_infer(engine, &mut buf, self.cfg.reads_per_sweep) {
                result = Err(self.source_failed(nc, &e));
                break 'engines;
            }
            for rec in buf.iter() {
                if self.ncs[nc].engines[engine] == EngineState::Complete {
                    self.ncs[nc].discarded += 1;
                    continue;
                }
                if let Err(cause) = self.match_record(nc, engine, rec, src) {
                    result = Err(cause);
                    break 'engines;
                }
                if self.ncs[nc].engines[engine] == EngineState::Complete {
                    if let Err(e) = src.drain_infer(engine) {
                        result = Err(self.source_failed(nc, &e));
                        break 'engines;
                    }
                }
            }
        }
        buf.clear();
        self.infer_buf = buf;
        result
    }

    /// A source failure on NC `nc`: logged, merged into the NC's result; its status.
    #[cold]
    #[inline(never)]
    fn source_failed(&mut self, nc: usize, e: &SourceError) -> NrtStatus {
        let status = e.status();
        tracing::error!(nc, error = %e, "notification harvest failed");
        let n = &mut self.ncs[nc];
        n.ret = worse(n.ret, status);
        status
    }

    #[cold]
    #[inline(never)]
    fn out_of_order<S: NotificationSource>(&mut self, nc: usize, engine: usize, what: &str, src: &mut S) -> NrtStatus {
        let got = self.ncs[nc].engines[engine] as u8;
        if src.nq_overflow() {
            tracing::error!(nc, engine, got, "Expected state to be {what} pending [overflow detected]");
            let n = &mut self.ncs[nc];
            n.fatal.set(ExecFatalStatus::SwNqOverflow);
            n.ret = NrtStatus::ExecSwNqOverflow;
            NrtStatus::ExecSwNqOverflow
        } else {
            tracing::error!(nc, engine, got, "Expected state to be {what} pending");
            NrtStatus::Failure
        }
    }

    fn match_record<S: NotificationSource>(
        &mut self,
        nc: usize,
        engine: usize,
        rec: &InferStatus,
        src: &mut S,
    ) -> Result<(), NrtStatus> {
        match rec.hint {
            0 => {}
            1 => self.ncs[nc].drain_hints += 1,
            h => {
                cold::unexpected_hint(nc, engine, h, rec.subtype);
                return Err(NrtStatus::Failure);
            }
        }
        let ts = rec.timestamp;
        match rec.kind() {
            Subtype::Start => {
                if self.ncs[nc].engines[engine] != EngineState::StartPending {
                    return Err(self.out_of_order(nc, engine, "start", src));
                }
                let n = &mut self.ncs[nc];
                keep_earliest(&mut n.start_ts[engine], ts);
                n.engines[engine] = EngineState::EndPending;
            }
            Subtype::End => {
                if self.ncs[nc].engines[engine] != EngineState::EndPending {
                    return Err(self.out_of_order(nc, engine, "end", src));
                }
                let n = &mut self.ncs[nc];
                keep_latest(&mut n.end_ts[engine], ts);
                n.engines[engine] = EngineState::Complete;
            }
            Subtype::CcStart => keep_earliest(&mut self.ncs[nc].cc_start, ts),
            Subtype::CcEnd => keep_latest(&mut self.ncs[nc].cc_end, ts),
            Subtype::Custom => return self.custom(nc, engine, rec),
            Subtype::Unexpected(t) => {
                cold::unexpected_notification(nc, engine, rec.hint, t);
                return Err(NrtStatus::Failure);
            }
        }
        Ok(())
    }

    #[inline(never)]
    fn custom(&mut self, nc: usize, engine: usize, rec: &InferStatus) -> Result<(), NrtStatus> {
        let mut tag = rec.tag;
        if *self.cfg.arch != csr_maps::SUNDA && engine == TAG_FIXUP_ENGINE.index() {
            tag = TAG_FIXUP_VALUE;
        }
        let line = u32::from(rec.line) | (u32::from(rec.line_hi) << 16);
        let event = TensorEvent { nc, engine, var_id: line, timestamp: rec.timestamp, tag };
        match rec.sub_id {
            s if custom::is_out_of_bounds(s) => {
                tracing::error!(nc, engine, sub_id = rec.sub_id, isa_line = line, tag, "out-of-bounds access");
                let n = &mut self.ncs[nc];
                n.fatal.set(ExecFatalStatus::Oob);
                n.ret = NrtStatus::ExecOob;
                Err(NrtStatus::ExecOob)
            }
            custom::DEBUG => {
                tracing::info!(nc, engine, value = line, tag, "custom debug notification");
                self.ncs[nc].debug_notifications += 1;
                Ok(())
            }
            custom::TENSOR_COMPLETION => {
                tracing::trace!(nc, engine, var_id = line, "tensor completion");
                self.tensor_completions.push(event);
                Ok(())
            }
            custom::DEBUG_TENSOR_READ => {
                tracing::debug!(nc, engine, var_id = line, "debug tensor read");
                self.debug_tensor_reads.push(event);
                Ok(())
            }
            other => {
                tracing::error!(nc, engine, sub_id = other, "unknown custom notification type");
                self.ncs[nc].ret = NrtStatus::HwError;
                Err(NrtStatus::HwError)
            }
        }
    }

    /// Sweep NC `nc`'s error ring; `false` if the source failed.
    fn sweep_errors<S: NotificationSource>(&mut self, nc: usize, src: &mut S) -> bool {
        let mut buf = std::mem::take(&mut self.error_buf);
        let mut consumed = 0usize;
        let mut ok = true;
        loop {
            buf.clear();
            if let Err(e) = src.poll_errors(&mut buf, self.cfg.error_batch) {
                self.source_failed(nc, &e);
                ok = false;
                break;
            }
            if buf.is_empty() {
                break;
            }
            for rec in buf.iter() {
                self.ncs[nc].errors.consume(rec, self.cfg.arch, &self.cfg.decode);
            }
            consumed += buf.len();
            if consumed >= self.cfg.max_error_records {
                cold::many_errors(nc, consumed);
                break;
            }
        }
        buf.clear();
        self.error_buf = buf;
        ok
    }

    fn classify_causes(n: &mut NcState) {
        let c = n.causes;
        if c.is_empty() {
            // Nothing latched (every clean execution): nothing to classify.
            return;
        }
        if c.contains(FatalCauses::HBM_UE) || c.contains(FatalCauses::HBM_UE_REPAIRABLE) {
            tracing::error!("(FATAL-RT-UNDEFINED-STATE) Uncorrectable HBM memory error is detected");
        }
        if n.fatal.get(ExecFatalStatus::Timeout) {
            // exec_request_process_errors, timeout branch: only 1201 is tested (docs/facts/libnrt-runtime-model.md §B.4 (COMPLETE-1)).
            let chosen = if c.contains(FatalCauses::HBM_UE) {
                Some(NrtStatus::ExecHwErrHbmUe)
            } else if c.contains(FatalCauses::DMA_ABORT) {
                Some(NrtStatus::ExecHwErrDmaAbort)
            } else if c.contains(FatalCauses::CC_ERROR) {
                tracing::error!("(FATAL-RT-UNDEFINED-STATE) Suspected hang in collectives");
                Some(NrtStatus::ExecHwErrCollectives)
            } else {
                None
            };
            if let Some(s) = chosen {
                // The classification replaces a plain timeout; anything else merges by priority.
                n.ret = if n.ret == NrtStatus::Timeout { s } else { worse(n.ret, s) };
            }
        } else {
            for (set, s) in [
                (c.contains(FatalCauses::HBM_UE), NrtStatus::ExecHwErrHbmUe),
                (c.contains(FatalCauses::HBM_UE_REPAIRABLE), NrtStatus::ExecHwErrRepairableHbmUe),
                (c.contains(FatalCauses::DMA_ABORT), NrtStatus::ExecHwErrDmaAbort),
                (c.contains(FatalCauses::CC_ERROR), NrtStatus::ExecHwErrCollectives),
            ] {
                if set {
                    n.ret = worse(n.ret, s);
                }
            }
        }
        // 1202 is the error ring's verdict (the ECC record, consumed in the sweep); the NC-UE
        // interrupt line only ends the wait. A line with no record (the record lost, e.g. to an
        // overflowing error ring) still reports 1202.
        if c.contains(FatalCauses::NC_UE) && !n.errors.nc_ue {
            tracing::error!(
                "(FATAL-RT-UNDEFINED-STATE) Uncorrectable memory error is detected (interrupt, no error record)"
            );
            n.ret = worse(n.ret, NrtStatus::ExecHwErrNcUe);
        }
        if c.contains(FatalCauses::NET_PROXY) {
            n.ret = worse(n.ret, NrtStatus::NetworkProxyFailure);
        }
    }

    fn finalize<S: NotificationSource>(&mut self, sources: &mut [S], cause: NrtStatus) -> Step {
        let mut hw_fault = false;
        let nc_count = self.ncs.len();
        for (nc, src) in sources.iter_mut().enumerate().take(nc_count) {
            // A failed sweep is fatal like a latched cause (the NC's result holds its status).
            hw_fault |= !self.sweep_errors(nc, src);
            let causes = src.fatal_causes();
            let n = &mut self.ncs[nc];
            if let Some(s) = n.errors.status {
                n.ret = worse(n.ret, s);
            }
            n.causes = causes;
            hw_fault |= classified(&causes);
            Self::classify_causes(n);
        }
        let best = worst(self.ncs.iter().map(|n| n.ret));
        let (status, verdict) = if cause == NrtStatus::Success && !hw_fault {
            (best, Step::Done)
        } else if best != NrtStatus::Success {
            (best, Step::DoneWithError)
        } else {
            (NrtStatus::Failure, Step::DoneWithError)
        };
        self.state = ExecState::Done;
        self.status = status;
        self.verdict = Some(verdict);
        verdict
    }
}

/// The engine's logging, out of line: the sweep runs right after the device did (with an
/// inline device, its code has just pushed the host's out of the instruction cache), so the
/// hot path is kept to the lines it needs and the log sites (large macro expansions) live
/// here. The texts are libnrt's where it has one.
mod cold {
    use std::time::Duration;

    use neff::NrtStatus;

    #[cold]
    #[inline(never)]
    pub(super) fn too_few_sources(sources: usize, ncs: usize) {
        tracing::error!(sources, ncs, "fewer notification sources than NCs");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn barrier_failed(nc: usize, rc: NrtStatus) {
        tracing::error!(nc, status = rc.code(), "(FATAL-RT-UNDEFINED-STATE) collectives barrier proxy failed");
    }
    /// libnrt's text; the threshold in whole seconds (and in ms, for shortened ones).
    #[cold]
    #[inline(never)]
    pub(super) fn barrier_warning(thresh: Duration) {
        tracing::warn!(
            threshold_ms = thresh.as_millis() as u64,
            "Timeout exceeded: Waiting on barrier proxy task: {} sec",
            thresh.as_secs()
        );
    }
    #[cold]
    #[inline(never)]
    pub(super) fn network_proxy_failed(nc: usize) {
        tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) collectives network proxy failed");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn nq_overflow(nc: usize) {
        tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) notification queue overflow detected");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn fatal_while_waiting(nc: usize) {
        tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) fatal device error while waiting for execution completion");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn timeout(nc: usize, timeout: Duration) {
        tracing::error!(
            nc,
            timeout_ms = timeout.as_millis() as u64,
            "(FATAL-RT-UNDEFINED-STATE) execution timeout, waiting for execution completion notification"
        );
    }
    #[cold]
    #[inline(never)]
    pub(super) fn unexpected_hint(nc: usize, engine: usize, hint: u8, subtype: u16) {
        tracing::error!(nc, engine, hint, subtype, "unexpected debug hint");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn unexpected_notification(nc: usize, engine: usize, hint: u8, notification_type: u16) {
        tracing::error!(nc, engine, hint, notification_type, "Received unexpected notification");
    }
    #[cold]
    #[inline(never)]
    pub(super) fn many_errors(nc: usize, count: usize) {
        tracing::warn!(nc, count, "Received an unusually large number of error notifications");
    }
}
