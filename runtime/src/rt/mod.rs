//! The runtime: libnrt's lifecycle, load/unload, tensors and execute over hal devices.
//!
//! - [`Runtime::init`] / [`Runtime::close`] with the NRT_INIT_STATE guard on every call
//!   (before init → NRT_UNINITIALIZED 13, after close → NRT_CLOSED 14, a forked child is
//!   fenced).
//! - [`Runtime::load`]: NEFF gates → vNC admission (NEURON_RT_VISIBLE_CORES; too few →
//!   NRT_LOAD_NOT_ENOUGH_NC 9, "Insufficient number of pncs, required: %u, available: %u")
//!   → staging per NC ([`crate::stage`]). A failed load unwinds everything it made.
//! - [`Runtime::execute`] (sync): bind inputs (DMA), stage the DMA rings, kick off each NC
//!   with one MMIO write, run the one-step completion engine until done, copy outputs back.
//! - [`Runtime::execute_async`]: the same through the NC's execution unit (XU) worker.
//! - Fail-stop: a fatal status poisons the model — it stays RUNNING, later executes return
//!   NRT_EXEC_UNIT_UNRECOVERABLE (101) like libnrt's FATAL_SHUTDOWN XU, unload works, and a
//!   fresh load on the same NCs runs.

//!
//! | module | holds |
//! |---|---|
//! | [`tensor`] | [`Tensor`], [`TensorSet`], [`Runtime::alloc_tensor`] |
//! | [`admission`] | vNC admission (NEURON_RT_VISIBLE_CORES, NRT_LOAD_NOT_ENOUGH_NC) |
//! | [`load`] | [`Runtime::load`], [`Runtime::share`], [`Runtime::unload`], teardown |
//! | [`execute`] | [`Runtime::execute`], [`Runtime::execute_repeat`]: bind inputs, kick, complete, read outputs |
//! | [`async_exec`] | [`Runtime::execute_async`] and the execution-unit glue ([`AsyncReq`], [`AsyncTok`], [`XuExec`]) |
//! | [`tensor_ops`] | tensor operations beyond read/write (slices, caller buffers, copies, fills; also `crate::tensor_ops`) |
//!
//! What `init` builds (devices, configuration, placement counts, lanes, the session's
//! observers) is one [`Session`], made in one place (`Session::open`), installed as one unit and
//! read as one: callers clone its `Arc` under a read lock held for nothing else
//! ([`crate::locks`] holds the order of the runtime's locks).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hal::Device;
use neff::{NrtStatus, TensorInfo};
use platform::Platform;

use crate::completion::ExecTracker;
use crate::locks::{Rank, Ranked, RankedRw};
use crate::observe::{Attach, Observers};
use crate::stage::StagedNc;
use crate::state::{ModelLifecycle, RuntimeState};
use crate::xu::Xu;

pub mod admission;
pub mod async_exec;
pub mod execute;
pub mod load;
mod ncs;
pub mod tensor;
pub mod tensor_ops;

pub use crate::error::{RtError, RtErrorKind};
pub use async_exec::{AsyncReq, AsyncTok, XuExec};
pub use load::GlobalPlacement;
pub use tensor::{Tensor, TensorMem, TensorSet};

/// The devices a runtime opens, each with its options ([`Runtime::init_devices`]).
pub type Devices = Vec<(Arc<dyn Platform>, hal::DeviceOptions)>;

/// What this process owns of one shared device: its leased NCs (device-local), the device
/// memory granted to it as (HBM channel, device address, bytes), and the device's firmware
/// mailbox as its owner serves it.
pub type Owned = (std::ops::Range<usize>, Vec<(usize, u64, u64)>, Arc<dyn hal::FirmwareGate>);

/// `platforms` with their options — `base`, narrowed on a shared device to what this process
/// owns (`owned(i)` for platform `i`) — and `cfg` whose visible cores are the `leased` ones
/// when the cores are leased (docs/sharing.md).
pub fn device_setup(
    platforms: &[Arc<dyn Platform>],
    owned: impl Fn(usize) -> Option<Owned>,
    leased: Option<Vec<usize>>,
    mut cfg: RuntimeConfig,
    base: hal::DeviceOptions,
) -> (Devices, RuntimeConfig) {
    let devices = platforms
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut o = base.clone();
            if let Some((ncs, hbm, firmware)) = owned(i) {
                o.owned_ncs = Some(ncs);
                o.firmware_gate = Some(firmware);
                o.hbm_ranges =
                    Some(hbm.into_iter().map(|(chan, addr, len)| hal::HbmRange { chan, addr, len }).collect());
            }
            (p.clone(), o)
        })
        .collect();
    if let Some(cores) = leased {
        cfg.visible_cores = Some(cores);
    }
    (devices, cfg)
}

/// How the host waits between completion steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollPolicy {
    /// Spin, then yield (default): no syscalls on the fast path.
    Spin,
    /// `usleep(1)` between steps, as libnrt's synchronous driver does.
    Usleep1,
    /// Sleep on the NC's interrupt eventfd where the platform offers one (the simulator
    /// raises it on every notification record), else spin.
    Interrupt,
}

/// Runtime configuration (environment knobs are read by [`RuntimeConfig::from_env`]).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Model execution timeout (NEURON_RT_EXEC_TIMEOUT, seconds).
    pub exec_timeout: Duration,
    /// Logical NeuronCores the runtime may use (NEURON_RT_VISIBLE_CORES, global logical ids:
    /// [`crate::cores`]); None = all.
    pub visible_cores: Option<Vec<usize>>,
    /// NEURON_RT_NUM_CORES: how many logical cores the process takes when `visible_cores`
    /// names none — the first ones of a private device, any free ones of a shared device
    /// (None: all).
    pub num_cores: Option<usize>,
    /// The logical NeuronCore size asked for (NEURON_LOGICAL_NC_CONFIG /
    /// NEURON_RT_VIRTUAL_CORE_SIZE); None: the arch's default ([`crate::cores::resolve_lnc`]).
    pub lnc: Option<crate::env::LncRequest>,
    /// NEURON_RT_ALLOW_LEGACY_NEFF: load NEFFs compiled for an older arch.
    pub allow_legacy: bool,
    pub poll: PollPolicy,
    /// XU queue capacity for async executes.
    pub async_capacity: usize,
    /// Verify the NEFF digest at load (NEURON_RT_VALIDATE_HASH; off by default, as libnrt:
    /// a corrupted payload is still caught by the loader's structural checks).
    pub verify: bool,
    /// First warning threshold of the collectives barrier wait (libnrt: 120 s, doubled after
    /// every warning, never fatal); `NEURON_VFIO_BARRIER_WARN_MS`. Tests shorten it.
    pub barrier_warn: Duration,
    /// Time the phases of every execute ([`ExecTimings::bind_ns`] … `completion_ns`): three
    /// more clock reads per execute (inputs bound, kicked off, outputs in place). Off by
    /// default (the fields are then 0); `bench exec` turns it on for its breakdown pass only.
    pub phase_timings: bool,
    /// Tests only: skip the loader's confinement checks (raw and out-of-range addresses,
    /// the WRITE allow-list, state-buffer fit, virtual-var backing), so that a test can show
    /// the device's own ownership check (the NC's region table) stopping a hostile model
    /// with NRT_EXEC_OOB. Exists only with the test-only `unchecked-loader` feature, so a
    /// normal build cannot turn confinement off (docs/trust.md).
    #[cfg(feature = "unchecked-loader")]
    #[doc(hidden)]
    pub unchecked_loader_for_tests: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            exec_timeout: crate::env::core_timeout(600) / 1000,
            visible_cores: None,
            num_cores: None,
            lnc: None,
            allow_legacy: false,
            poll: PollPolicy::Spin,
            async_capacity: DEFAULT_ASYNC_CAPACITY,
            verify: false,
            barrier_warn: crate::completion::BARRIER_WARN_INITIAL,
            phase_timings: false,
            #[cfg(feature = "unchecked-loader")]
            unchecked_loader_for_tests: false,
        }
    }
}

/// The XU queue's depth per NC when NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS is unset or 0.
pub const DEFAULT_ASYNC_CAPACITY: usize = 64;

impl RuntimeConfig {
    /// The defaults at LNC=1, as if `NEURON_LOGICAL_NC_CONFIG=1`: each logical NeuronCore is
    /// one physical core (sunda's only size; on cayman and mariana, the size LNC=1 NEFFs need).
    pub fn physical() -> Self {
        Self { lnc: Some(crate::env::LncRequest::physical()), ..Self::default() }
    }

    /// Defaults overridden by the environment ([`crate::env::RtEnv`]).
    pub fn from_env() -> Result<Self, RtError> {
        let env = crate::env::RtEnv::from_env()?;
        // Validated here (nrt_init fails with NRT_INVALID on a bad value, as libnrt); the
        // front ends apply them.
        crate::env::log::LogConfig::from_env(crate::env::DEFAULT_LOG_LEVEL)?;
        crate::env::numerical_errors_from_env()?;
        crate::env::hw_err_log_from_env()?;
        let barrier_warn = crate::env::barrier_warn_from_env()?.unwrap_or(crate::completion::BARRIER_WARN_INITIAL);
        Ok(Self {
            barrier_warn,
            exec_timeout: Duration::from_secs(env.exec_timeout_secs as u64),
            visible_cores: env.visible_cores.map(|v| v.into_iter().map(|c| c as usize).collect()),
            num_cores: env.num_cores.map(|n| n as usize),
            lnc: env.lnc,
            verify: env.validate_hash,
            allow_legacy: env.allow_legacy,
            async_capacity: env.async_inflight.map_or(DEFAULT_ASYNC_CAPACITY, |n| n as usize),
            ..Self::default()
        })
    }
}

/// Timings of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecTimings {
    /// Host wall time of the execution: from the call's API checks passed to its outputs in
    /// place (the end of the harvest when every output was bound by address, else after the
    /// copies back).
    pub total_ns: u64,
    /// Device time of NC 0: latest END − earliest START (device timestamps, ns).
    pub device_ns: u64,
    /// Completion-engine steps taken.
    pub steps: u64,
    /// "Waiting on barrier proxy task" warnings this execution emitted (its collectives
    /// barrier was outstanding past the warning threshold; docs/faults.md).
    pub barrier_warnings: u32,
    /// `exec_fatal_status` of a failed execution: the causes flagged on any of its NCs
    /// (empty for an execution that completed).
    pub fatal: crate::state::FatalFlags,
    /// From the last END record's device timestamp (rescaled to host time through the sync
    /// point taken at load) to the host observing completion, ns. Never clamped: a negative
    /// value means the two clocks' offset is off by more than the lag. None for a failed
    /// execution or one with no END record.
    pub completion_lag_ns: Option<i64>,
    /// Host time breakdown of `total_ns` (a successful execution, with
    /// [`RuntimeConfig::phase_timings`] on; 0 otherwise): from entry to the inputs
    /// bound and the rings staged (API checks, lane, model lock, bind) ...
    pub bind_ns: u64,
    /// ... the kickoff MMIO writes (with an inline simulator: including the device work) ...
    pub kick_ns: u64,
    /// ... stepping the completion engine (harvesting notifications) until it is done ...
    pub harvest_ns: u64,
    /// ... and completion: status, timings, outputs read back, counters.
    pub completion_ns: u64,
}

/// An executing model's device state (one lock: executions of a model are serialized).
struct ExecState {
    ncs: Vec<StagedNc>,
    /// NC 0's interrupt (PollPolicy::Interrupt).
    irq: Option<hal::Irq>,
    tracker: ExecTracker,
    seq: u64,
    /// Device → host time of NC 0 (docs/facts/libnrt-runtime-model.md §B timestamp rescale), taken at load.
    sync: crate::timestamp::TimestampSync,
}

/// What a lane records about the model armed on its NC.
#[derive(Clone)]
pub(crate) struct Armed {
    id: u64,
    model: Weak<Model>,
}

/// The runtime's execution lanes (one per global NC).
pub(crate) type NcLanes = crate::lanes::Lanes<Armed>;

/// Tickets on a model's lanes, given back when dropped. `L` reaches the lanes: a borrow for a
/// synchronous execute (no reference count touched on the shared lanes object), an `Arc` where
/// the tickets outlive the call (async requests, loads).
pub(crate) struct Held<L: std::ops::Deref<Target = NcLanes> = Arc<NcLanes>> {
    lanes: L,
    t: crate::lanes::Tickets,
    /// [`Rank::Lane`] while this thread waited for and holds the tickets (not for tickets
    /// queued without waiting, which an execution unit's worker polls); dropped after them.
    rank: Option<crate::locks::RankHold>,
}

impl Held {
    /// Queue on `ncs` (global) without waiting.
    pub(crate) fn enqueue(lanes: &Arc<NcLanes>, ncs: &[usize]) -> Self {
        Self { lanes: lanes.clone(), t: lanes.enqueue(ncs), rank: None }
    }
    /// Queue on `ncs` and wait for the turn.
    pub(crate) fn acquire(lanes: &Arc<NcLanes>, ncs: &[usize]) -> Self {
        let rank = Some(crate::locks::hold(Rank::Lane));
        let mut h = Self::enqueue(lanes, ncs);
        h.rank = rank;
        h.lanes.wait(&h.t);
        h
    }
}

impl<'a> Held<&'a NcLanes> {
    /// No tickets yet, borrowing the lanes ([`Held::take`] fills it where it lives).
    pub(crate) fn none(lanes: &'a NcLanes) -> Self {
        Self { lanes, t: crate::lanes::Tickets::default(), rank: None }
    }
    /// Queue on `ncs` and wait for the turn; whether model `id` is the one armed on every NC
    /// ([`crate::lanes::Lanes::acquire_into`]). Tickets held before are given back first.
    pub(crate) fn take(&mut self, ncs: &[usize], id: u64) -> bool {
        if !self.t.is_empty() {
            self.lanes.release(&mut self.t);
        }
        self.rank = None;
        self.rank = Some(crate::locks::hold(Rank::Lane));
        self.lanes.acquire_into(&mut self.t, ncs, |a| a.id == id)
    }
}

impl<L: std::ops::Deref<Target = NcLanes>> Held<L> {
    pub(crate) fn ready(&self) -> bool {
        self.lanes.ready(&self.t)
    }
}

impl<L: std::ops::Deref<Target = NcLanes>> Drop for Held<L> {
    fn drop(&mut self) {
        self.lanes.release(&mut self.t);
    }
}

/// A loaded model.
pub struct Model {
    pub id: u64,
    pub name: String,
    /// The NEFF header's UUID.
    pub uuid: [u8; 16],
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    /// Global NC indices.
    pub ncs: Vec<usize>,
    /// The vNCs it occupies as the caller numbers them (index into the visible logical cores:
    /// NEURON_RT_VISIBLE_CORES), one per logical core — `ncs` holds LNC physical cores each.
    pub vncs: Vec<usize>,
    lifecycle: Lifecycle,
    exec: Ranked<Option<ExecState>>,
    poll: PollPolicy,
    /// [`RuntimeConfig::phase_timings`] at load.
    phase_timings: bool,
    devices: Vec<Device>,
    lanes: Arc<NcLanes>,
    epoch: Instant,
    /// Who is told about this model's executions (monitoring; [`crate::observe`]), and the
    /// device bytes staging took per NC.
    pub(crate) observers: Observers,
    pub(crate) staged_bytes: Vec<u64>,
}

impl Model {
    /// Report an execution of this model that ended with `status` to the observers of the
    /// session it was loaded in (the caller holds the model's lanes).
    pub(crate) fn count_execution(
        &self,
        status: NrtStatus,
        latency_ns: u64,
        busy_ns: u64,
        barrier_warnings: u32,
        end: Instant,
    ) {
        let e = crate::observe::ExecutionEnd { status, latency_ns, busy_ns, barrier_warnings, end };
        self.observers.execution(&self.ncs, &e);
    }

    /// The model as listings name it.
    pub(crate) fn desc(&self) -> crate::observe::ModelDesc<'_> {
        crate::observe::ModelDesc {
            id: self.id,
            name: &self.name,
            uuid: self.uuid,
            ncs: &self.ncs,
            bytes_per_nc: &self.staged_bytes,
        }
    }
}

/// Device memory used now on the HBM channel serving `dev`'s NC `nc`, bytes.
pub(crate) fn hbm_used(dev: &Device, nc: usize) -> u64 {
    dev.allocator().usage(dev.hbm_for_nc(nc)).map(|u| u.used).unwrap_or(0)
}

/// A model's lifecycle under its lock, with whether the model may execute (RUNNING and not
/// poisoned) published in an atomic on every change: the execute path reads that flag without
/// taking the lock (a snapshot, as a check under the lock released at once would be).
pub(crate) struct Lifecycle {
    lc: Ranked<ModelLifecycle>,
    runnable: AtomicBool,
}

impl Lifecycle {
    fn new(lc: ModelLifecycle) -> Self {
        let runnable = AtomicBool::new(Self::may_run(&lc));
        Self { lc: Ranked::new(Rank::Lifecycle, lc), runnable }
    }
    fn may_run(lc: &ModelLifecycle) -> bool {
        lc.check_executable().is_ok() && lc.poisoned().is_none()
    }
    /// Change the lifecycle under its lock (the flag follows).
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut ModelLifecycle) -> R) -> R {
        let mut g = self.lc.lock();
        let r = f(&mut g);
        self.runnable.store(Self::may_run(&g), Ordering::Release);
        r
    }
    /// Read the lifecycle under its lock.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&ModelLifecycle) -> R) -> R {
        f(&self.lc.lock())
    }
    /// Whether the model may execute (no lock).
    pub(crate) fn runnable(&self) -> bool {
        self.runnable.load(Ordering::Acquire)
    }
}

/// Times any of the runtime's mutexes (runtime state, models, per-model locks) or an NC
/// lane's lock was found held by another thread, process-wide: a contention count for
/// benchmarks (a shared lock on the hot path shows here as executes from several threads).
pub fn lock_contentions() -> u64 {
    crate::locks::contentions() + crate::lanes::contentions()
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("id", &self.id).field("name", &self.name).field("ncs", &self.ncs).finish()
    }
}

/// A handle to a loaded model (libnrt's `nrt_model_t*`).
pub type ModelHandle = Arc<Model>;

struct NcXu {
    xu: Xu<XuExec>,
}

/// Everything `init` makes, built in one place ([`Session::open`]) from the platforms, the
/// device options and the configuration the front end read once (`RuntimeConfig::from_env`),
/// then installed in the runtime as one unit and read as one (`Runtime::session`). Only the
/// placement counts change while it is installed.
pub(crate) struct Session {
    devices: Vec<Device>,
    /// The devices' arch.
    arch: &'static csr_maps::Arch,
    cfg: RuntimeConfig,
    /// The logical NeuronCore size ([`crate::cores::resolve_lnc`]).
    lnc: usize,
    /// Models placed on each global NC (its length is the NC count).
    placed: Ranked<Vec<usize>>,
    lanes: Arc<NcLanes>,
    observers: Observers,
}

impl Session {
    /// Open and initialise a device on each platform (global NC order: the platforms'), then
    /// the lanes and placement counts of their NCs and the session's observers.
    fn open(platforms: Devices, cfg: RuntimeConfig, attachers: &[Arc<dyn Attach>]) -> Result<Self, RtError> {
        let mut devices = Vec::with_capacity(platforms.len());
        for (p, opts) in platforms {
            // On a shared device (the NCs this process leased) init brings up only those.
            let d = Device::open(p, opts)?;
            d.init()?;
            devices.push(d);
        }
        let arch = devices.first().map(|d| d.arch()).ok_or_else(|| RtError::from(RtErrorKind::NoDevices))?;
        let lnc = crate::cores::resolve_lnc(arch, cfg.lnc)?;
        let ncs: usize = devices.iter().map(|d| d.nc_count()).sum();
        let observers = Observers::attach(attachers, &devices);
        Ok(Self {
            placed: Ranked::new(Rank::Placed, vec![0; ncs]),
            lanes: Arc::new(NcLanes::new(ncs)),
            observers,
            devices,
            arch,
            cfg,
            lnc,
        })
    }

    /// Global physical NCs of the session's devices.
    fn nc_count(&self) -> usize {
        self.lanes.len()
    }

    /// [`Runtime::visible_logical`] of this session.
    fn visible_logical(&self) -> Vec<usize> {
        let n = self.nc_count() / self.lnc.max(1);
        match &self.cfg.visible_cores {
            Some(v) => v.iter().copied().filter(|&c| c < n).collect(),
            None => (0..n).take(self.cfg.num_cores.unwrap_or(usize::MAX)).collect(),
        }
    }

    /// [`Runtime::global_nc`] of this session.
    fn global_nc(&self, vnc: usize) -> Result<usize, RtError> {
        let v = self.visible_logical();
        v.get(vnc)
            .map(|&l| crate::cores::physical(l, self.lnc).start)
            .ok_or_else(|| RtError::from(RtErrorKind::NoLogicalNc { nc: vnc, visible: v.len() }))
    }

    /// [`Runtime::logical_nc`] of this session.
    fn logical_nc(&self, global_nc: usize) -> Option<usize> {
        let l = crate::cores::logical(global_nc, self.lnc);
        self.visible_logical().iter().position(|&g| g == l)
    }

    /// [`Runtime::device_of`] of this session.
    fn device_of(&self, global_nc: usize) -> Option<(Device, usize)> {
        let mut base = 0;
        for d in self.devices.iter() {
            if global_nc < base + d.nc_count() {
                return Some((d.clone(), global_nc - base));
            }
            base += d.nc_count();
        }
        None
    }

    /// Count one more model on each of `ncs`.
    fn place(&self, ncs: &[usize]) {
        let mut placed = self.placed.lock();
        for &c in ncs {
            if let Some(p) = placed.get_mut(c) {
                *p += 1;
            }
        }
    }

    /// Count one model fewer on each of `ncs`.
    fn unplace(&self, ncs: &[usize]) {
        let mut placed = self.placed.lock();
        for &c in ncs {
            if let Some(p) = placed.get_mut(c) {
                *p = p.saturating_sub(1);
            }
        }
    }
}

/// The runtime (libnrt's global state, as an object).
///
/// Its locks, in the order they are taken ([`crate::locks::Rank`], docs/architecture.md
/// "Locks"): `state`, `xus`, `models`, `load_progress`, a model's `exec` and its lifecycle,
/// the session's `placed`, and last `session` (held only to clone or swap the `Arc`).
pub struct Runtime {
    state: Ranked<RuntimeState>,
    /// The current session: None before init and after close.
    session: RankedRw<Option<Arc<Session>>>,
    models: Ranked<HashMap<u64, Arc<Model>>>,
    xus: Ranked<HashMap<usize, Arc<NcXu>>>,
    next_id: AtomicU64,
    pid: AtomicU64,
    /// [`platform::fork::forks`] at init (u64::MAX: not known, ask for the pid).
    forks_at_init: AtomicU64,
    /// The state is INIT in the process that initialised the runtime: [`Runtime::guard`]'s
    /// lock-free fast path (set last by `init`, cleared first by `close`; every other case —
    /// a forked child, an unknown fork count — takes the state mutex).
    live: AtomicBool,
    epoch: Instant,
    /// What the front end installed to observe each init…close session (monitoring).
    attachers: Vec<Arc<dyn Attach>>,
    /// Told how far each load has got writing weights (`set_load_progress`).
    load_progress: Ranked<Option<crate::stage::LoadProgressFn>>,
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl Runtime {
    /// A runtime in NRT_STATE_START, observed by nobody.
    pub fn new() -> Self {
        Self::with_observers(Vec::new())
    }

    /// A runtime in NRT_STATE_START whose every init…close session is observed by what
    /// `attachers` make of it ([`crate::observe`]; the CLI and libnrt.so pass
    /// [`crate::monitoring`]).
    pub fn with_observers(attachers: Vec<Arc<dyn Attach>>) -> Self {
        Self {
            state: Ranked::new(Rank::State, RuntimeState::new()),
            session: RankedRw::new(Rank::Session, None),
            models: Ranked::new(Rank::Models, HashMap::new()),
            xus: Ranked::new(Rank::Xus, HashMap::new()),
            next_id: AtomicU64::new(1),
            pid: AtomicU64::new(std::process::id() as u64),
            forks_at_init: AtomicU64::new(u64::MAX),
            live: AtomicBool::new(false),
            epoch: Instant::now(),
            attachers,
            load_progress: Ranked::new(Rank::LoadProgress, None),
        }
    }

    /// The current session (None before init and after close): its `Arc`, cloned under the
    /// session's read lock, which is released at once.
    pub(crate) fn session(&self) -> Option<Arc<Session>> {
        self.session.read().clone()
    }

    /// The current session, or NRT_FAILURE's "no devices" when there is none (a call racing
    /// `close`; the API guard refuses every call before init and after close).
    pub(crate) fn current(&self) -> Result<Arc<Session>, RtError> {
        self.session().ok_or_else(|| RtError::from(RtErrorKind::NoDevices))
    }

    /// The NRT_INIT_STATE guard at the top of every API entry: Ok in INIT for the process
    /// that ran `init`; before init NRT_UNINITIALIZED (13), after close NRT_CLOSED (14), in a
    /// forked child NRT_UNINITIALIZED.
    ///
    /// No syscall on the common path: a fork is detected by [`platform::fork::forks`] (a
    /// `pthread_atfork` child handler) against the count seen at init; only then, or when the
    /// handler could not be registered, is the pid asked for.
    pub fn guard(&self) -> Result<(), RtError> {
        let same = platform::fork::forks().is_some_and(|f| f == self.forks_at_init.load(Ordering::Relaxed));
        // INIT seen by its owner needs no state change: no shared lock on the execute path.
        if same && self.live.load(Ordering::Acquire) {
            return Ok(());
        }
        let pid = if same { self.pid.load(Ordering::Relaxed) as u32 } else { std::process::id() };
        Ok(self.state.lock().guard(pid)?)
    }

    /// Whether [`Runtime::init`] may proceed now (START or CLOSED), so a front end can
    /// refuse early, before it opens any device. Same errors as `init`'s state check.
    pub fn check_init(&self) -> Result<(), RtError> {
        Ok(self.state.lock().check_init(std::process::id())?)
    }

    /// `nrt_init`: open and initialise the devices behind `platforms`.
    pub fn init(
        &self,
        platforms: Vec<Arc<dyn Platform>>,
        cfg: RuntimeConfig,
        opts: hal::DeviceOptions,
    ) -> Result<(), RtError> {
        self.init_devices(platforms.into_iter().map(|p| (p, opts.clone())).collect(), cfg)
    }

    /// `nrt_init` with each device's own options (a shared device: the NCs and device memory
    /// this process leased, [`hal::DeviceOptions::owned_ncs`]).
    pub fn init_devices(&self, platforms: Devices, cfg: RuntimeConfig) -> Result<(), RtError> {
        let mut st = self.state.lock();
        st.init(std::process::id())?;
        let session = match Session::open(platforms, cfg, &self.attachers) {
            Ok(s) => s,
            Err(e) => {
                let _ = st.close(std::process::id());
                *st = RuntimeState::new();
                return Err(e);
            }
        };
        self.install(session);
        self.pid.store(std::process::id() as u64, Ordering::Relaxed);
        self.forks_at_init.store(platform::fork::forks().unwrap_or(u64::MAX), Ordering::Relaxed);
        self.live.store(true, Ordering::Release);
        Ok(())
    }

    /// Make `s` the runtime's session (init, under the state lock).
    fn install(&self, s: Session) {
        s.observers.logical_nc_config(s.lnc);
        *self.session.write() = Some(Arc::new(s));
    }

    /// Call `f` as every later [`Runtime::load`] writes the model's initial data (weights) to
    /// the device: once with `done` 0, then after every chunk (16 MiB at most); `None` stops.
    /// The callback runs on the loading thread; it should return quickly.
    pub fn set_load_progress(&self, f: Option<crate::stage::LoadProgressFn>) {
        *self.load_progress.lock() = f;
    }

    /// The shared-memory counters segment this runtime publishes for monitors
    /// (docs/monitoring.md), while initialized with the counters observer installed
    /// ([`crate::monitoring`]) and publishing (`NEURON_VFIO_COUNTERS=0` turns it off).
    pub fn counters_path(&self) -> Option<std::path::PathBuf> {
        self.observer_path(crate::observe::COUNTERS)
    }

    /// Where the current session's observer of `kind` ([`crate::observe::Observer::kind`])
    /// publishes.
    pub fn observer_path(&self, kind: &str) -> Option<std::path::PathBuf> {
        self.session()?.observers.path_of(kind)
    }

    /// `nrt_close`: unload everything, stop workers, release the devices.
    pub fn close(&self) -> Result<(), RtError> {
        self.guard()?;
        self.live.store(false, Ordering::Release);
        let xus: Vec<Arc<NcXu>> = self.xus.lock().drain().map(|(_, x)| x).collect();
        for x in xus {
            if let Ok(x) = Arc::try_unwrap(x) {
                let _ = x.xu.shutdown();
            }
        }
        let models: Vec<Arc<Model>> = self.models.lock().drain().map(|(_, m)| m).collect();
        for m in models {
            self.teardown(&m);
        }
        let session = self.session.write().take();
        if let Some(s) = &session {
            // Observers stop using the devices (the debug endpoint stops serving other
            // processes) before the devices go.
            s.observers.close();
            for d in &s.devices {
                d.close();
            }
        }
        drop(session);
        Ok(self.state.lock().close(std::process::id())?)
    }

    /// Global physical NCs of the runtime's devices.
    pub fn nc_count(&self) -> usize {
        self.session().map_or(0, |s| s.nc_count())
    }

    /// The logical NeuronCore size of the session ([`crate::cores`]; 1 before init).
    pub fn lnc(&self) -> usize {
        self.session().map_or(1, |s| s.lnc.max(1))
    }

    /// Logical NeuronCores of the runtime's devices (`nrt_get_total_vnc_count` once
    /// initialised).
    pub fn logical_count(&self) -> usize {
        self.session().map_or(0, |s| s.nc_count() / s.lnc.max(1))
    }

    /// The logical cores a caller may name, in order: NEURON_RT_VISIBLE_CORES (or every core),
    /// the first NEURON_RT_NUM_CORES of them when that is set instead.
    pub fn visible_logical(&self) -> Vec<usize> {
        self.session().map_or_else(Vec::new, |s| s.visible_logical())
    }

    /// The global physical NCs a caller may use, in logical order: vNC `i` is physical cores
    /// `visible_ncs()[i·LNC .. (i+1)·LNC]` (NEURON_RT_VISIBLE_CORES=3,4 at LNC=1 → vNC 0, 1
    /// are global 3, 4; NEURON_RT_VISIBLE_CORES=1 at LNC=2 → vNC 0 is global 2, 3).
    pub fn visible_ncs(&self) -> Vec<usize> {
        self.session().map_or_else(Vec::new, |s| crate::cores::expand(&s.visible_logical(), s.lnc))
    }

    /// The first global physical NC behind vNC `vnc` (the one tensors of that vNC live near).
    pub fn global_nc(&self, vnc: usize) -> Result<usize, RtError> {
        match self.session() {
            Some(s) => s.global_nc(vnc),
            None => Err(RtError::from(RtErrorKind::NoLogicalNc { nc: vnc, visible: 0 })),
        }
    }

    /// The vNC (index into the visible logical cores) of global physical NC `global_nc`, if
    /// it is visible.
    pub fn logical_nc(&self, global_nc: usize) -> Option<usize> {
        self.session()?.logical_nc(global_nc)
    }

    /// The device serving vNC `vnc` and its first physical NC's index on it.
    pub fn device_of_vnc(&self, vnc: usize) -> Result<(Device, usize), RtError> {
        let g = self.global_nc(vnc)?;
        self.device_of(g).ok_or_else(|| RtError::from(RtErrorKind::NoDeviceForNc { nc: g }))
    }

    /// Models placed on each vNC.
    pub fn models_per_nc(&self) -> Vec<usize> {
        let Some(s) = self.session() else { return Vec::new() };
        let placed = s.placed.lock();
        s.visible_logical()
            .into_iter()
            .map(|l| placed.get(crate::cores::physical(l, s.lnc).start).copied().unwrap_or(0))
            .collect()
    }

    /// The device of global NC `global_nc` and the NC's index on it.
    pub fn device_of(&self, global_nc: usize) -> Option<(Device, usize)> {
        self.session()?.device_of(global_nc)
    }

    /// Models currently loaded.
    pub fn loaded_models(&self) -> usize {
        self.models.lock().len()
    }
}

impl Model {
    /// Whether a fatal status poisoned the model (and which).
    pub fn poisoned(&self) -> Option<NrtStatus> {
        self.lifecycle.read(|lc| lc.poisoned())
    }
}
