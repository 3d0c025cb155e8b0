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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::notify::InferStatus;
use hal::{DevBuf, Device, HostBuf, Xfer};
use neff::{Neff, NrtStatus, ReadOptions, TensorInfo};
use platform::Platform;

use crate::completion::{ExecTracker, FatalCauses, NotificationSource, ProxyPoll, Step, TrackerConfig};
use crate::stage::{stage_graph, GraphPlacement, StagedNc};
use crate::state::{ModelLifecycle, RuntimeState, Unload};
use crate::xu::{Executor, Ticket, Xu, XuId};

/// An API failure: the status libnrt returns and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}", status = status.name())]
pub struct RtError {
    pub status: NrtStatus,
    pub message: String,
}

impl RtError {
    pub fn new(status: NrtStatus, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
}

impl From<crate::state::StateError> for RtError {
    fn from(e: crate::state::StateError) -> Self {
        Self::new(e.status(), e.to_string())
    }
}

impl From<hal::HalError> for RtError {
    fn from(e: hal::HalError) -> Self {
        let status = match &e {
            hal::HalError::OutOfDeviceMemory { .. } => NrtStatus::Resource,
            hal::HalError::HostMem(_) => NrtStatus::FailHostMemAlloc,
            _ => NrtStatus::Failure,
        };
        Self::new(status, e.to_string())
    }
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
    /// Global NC indices the runtime may use (NEURON_RT_VISIBLE_CORES); None = all.
    pub visible_cores: Option<Vec<usize>>,
    pub poll: PollPolicy,
    /// XU queue capacity for async executes.
    pub async_capacity: usize,
    /// Verify the NEFF digest at load.
    pub verify: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            exec_timeout: crate::env::core_timeout(600) / 1000,
            visible_cores: None,
            poll: PollPolicy::Spin,
            async_capacity: 64,
            verify: true,
        }
    }
}

impl RuntimeConfig {
    /// Defaults overridden by NEURON_RT_EXEC_TIMEOUT and NEURON_RT_VISIBLE_CORES.
    pub fn from_env() -> Result<Self, RtError> {
        let env = crate::env::RtEnv::from_env().map_err(|e| RtError::new(NrtStatus::Invalid, e.to_string()))?;
        Ok(Self {
            exec_timeout: Duration::from_secs(env.exec_timeout_secs as u64),
            visible_cores: env.visible_cores.map(|v| v.into_iter().map(|c| c as usize).collect()),
            ..Self::default()
        })
    }
}

/// Where a tensor lives.
pub enum TensorMem {
    Host(HostBuf),
    Device(DevBuf),
    /// A view of another tensor's bytes (`nrt_tensor_allocate_slice`).
    Slice {
        parent: Arc<Tensor>,
        offset: u64,
    },
    /// Caller memory (`nrt_tensor_attach_buffer`): no device address.
    User(crate::tensor_ops::UserBuf),
    /// No storage (`nrt_tensor_allocate_empty`).
    Empty,
}

/// A tensor: named bytes in host DMA memory or device memory.
pub struct Tensor {
    pub name: String,
    pub size: u64,
    pub(crate) mem: TensorMem,
    pub(crate) dev: Device,
    /// NC (local to `dev`) the tensor was allocated for.
    pub(crate) nc: usize,
    /// Executions that wrote this tensor as an output (`nrt_tensor_check_output_completion`).
    pub(crate) completions: AtomicU64,
}

impl Tensor {
    /// Device address (host window bit included for host tensors).
    pub fn dev_addr(&self) -> u64 {
        match &self.mem {
            TensorMem::Host(b) => self.dev.host_addr(b),
            TensorMem::Device(d) => d.addr(),
            TensorMem::Slice { parent, offset } => parent.dev_addr() + offset,
            TensorMem::User(_) | TensorMem::Empty => 0,
        }
    }
    /// Whether the tensor is in host memory.
    pub fn is_host(&self) -> bool {
        match &self.mem {
            TensorMem::Host(_) | TensorMem::User(_) => true,
            TensorMem::Slice { parent, .. } => parent.is_host(),
            TensorMem::Device(_) | TensorMem::Empty => false,
        }
    }
    /// Write `data` at `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), RtError> {
        if off.checked_add(data.len() as u64).is_none_or(|e| e > self.size) {
            return Err(RtError::new(
                NrtStatus::Invalid,
                format!("write of {} bytes at {off} outside tensor {} ({} bytes)", data.len(), self.name, self.size),
            ));
        }
        match &self.mem {
            TensorMem::Host(b) => b.write(off as usize, data)?,
            TensorMem::Device(d) => self.dev.write_device(0, d.addr() + off, data)?,
            TensorMem::Slice { parent, offset } => parent.write(offset + off, data)?,
            TensorMem::User(u) => u.write(off, data)?,
            TensorMem::Empty => {}
        }
        Ok(())
    }
    /// Read into `out` from `off`.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), RtError> {
        if off.checked_add(out.len() as u64).is_none_or(|e| e > self.size) {
            return Err(RtError::new(
                NrtStatus::Invalid,
                format!("read of {} bytes at {off} outside tensor {} ({} bytes)", out.len(), self.name, self.size),
            ));
        }
        match &self.mem {
            TensorMem::Host(b) => b.read(off as usize, out)?,
            TensorMem::Device(d) => self.dev.read_device(0, d.addr() + off, out)?,
            TensorMem::Slice { parent, offset } => parent.read(offset + off, out)?,
            TensorMem::User(u) => u.read(off, out)?,
            TensorMem::Empty => {}
        }
        Ok(())
    }
    /// The whole tensor.
    pub fn to_vec(&self) -> Result<Vec<u8>, RtError> {
        let mut v = vec![0u8; self.size as usize];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

/// Named tensors bound to a model's inputs or outputs.
#[derive(Default, Clone)]
pub struct TensorSet {
    tensors: Vec<(String, Arc<Tensor>)>,
}

impl TensorSet {
    pub fn new() -> Self {
        Self::default()
    }
    /// Bind `t` under `name` (replacing an earlier binding).
    pub fn add(&mut self, name: &str, t: Arc<Tensor>) {
        self.tensors.retain(|(n, _)| n != name);
        self.tensors.push((name.to_string(), t));
    }
    /// The tensor bound to `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tensor>> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// Timings of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecTimings {
    /// Host wall time of the whole call.
    pub total_ns: u64,
    /// Device time of NC 0: latest END − earliest START (device timestamps, ns).
    pub device_ns: u64,
    /// Completion-engine steps taken.
    pub steps: u64,
    /// From the last END record's device timestamp (rescaled to host time) to the host
    /// observing completion, ns.
    pub completion_lag_ns: u64,
}

/// An executing model's device state (one lock: executions of a model are serialized).
struct ExecState {
    ncs: Vec<StagedNc>,
    /// NC 0's interrupt (PollPolicy::Interrupt).
    irq: Option<hal::Irq>,
    tracker: ExecTracker,
    seq: u64,
    /// Device → host time of NC 0 (seed 001 timestamp rescale), taken at load.
    sync: crate::timestamp::TimestampSync,
    /// An async execution has been kicked off and is not complete yet.
    busy: bool,
}

/// A loaded model.
pub struct Model {
    pub id: u64,
    pub name: String,
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    /// Global NC indices.
    pub ncs: Vec<usize>,
    lifecycle: Mutex<ModelLifecycle>,
    exec: Mutex<Option<ExecState>>,
    poll: PollPolicy,
    devices: Vec<Device>,
    epoch: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// The runtime (libnrt's global state, as an object).
pub struct Runtime {
    state: Mutex<RuntimeState>,
    devices: Mutex<Vec<Device>>,
    cfg: Mutex<RuntimeConfig>,
    owners: Mutex<Vec<Option<u64>>>,
    models: Mutex<HashMap<u64, Arc<Model>>>,
    xus: Mutex<HashMap<usize, Arc<NcXu>>>,
    next_id: AtomicU64,
    pid: AtomicU64,
    closed_devices: AtomicBool,
    epoch: Instant,
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl Runtime {
    /// A runtime in NRT_STATE_START.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(RuntimeState::new()),
            devices: Mutex::new(Vec::new()),
            cfg: Mutex::new(RuntimeConfig::default()),
            owners: Mutex::new(Vec::new()),
            models: Mutex::new(HashMap::new()),
            xus: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            pid: AtomicU64::new(std::process::id() as u64),
            closed_devices: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    fn guard(&self) -> Result<(), RtError> {
        Ok(lock(&self.state).guard(std::process::id())?)
    }

    /// `nrt_init`: open and initialise the devices behind `platforms`.
    pub fn init(
        &self,
        platforms: Vec<Arc<dyn Platform>>,
        cfg: RuntimeConfig,
        opts: hal::DeviceOptions,
    ) -> Result<(), RtError> {
        let mut st = lock(&self.state);
        st.init(std::process::id())?;
        let mut devs = Vec::new();
        for p in platforms {
            let d = Device::open(p, opts.clone()).and_then(|d| d.init().map(|_| d));
            match d {
                Ok(d) => devs.push(d),
                Err(e) => {
                    let _ = st.close(std::process::id());
                    *st = RuntimeState::new();
                    return Err(e.into());
                }
            }
        }
        let ncs: usize = devs.iter().map(|d| d.nc_count()).sum();
        *lock(&self.owners) = vec![None; ncs];
        *lock(&self.devices) = devs;
        *lock(&self.cfg) = cfg;
        self.pid.store(std::process::id() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// `nrt_close`: unload everything, stop workers, release the devices.
    pub fn close(&self) -> Result<(), RtError> {
        self.guard()?;
        let xus: Vec<Arc<NcXu>> = lock(&self.xus).drain().map(|(_, x)| x).collect();
        for x in xus {
            if let Ok(x) = Arc::try_unwrap(x) {
                let _ = x.xu.shutdown();
            }
        }
        let models: Vec<Arc<Model>> = lock(&self.models).drain().map(|(_, m)| m).collect();
        for m in models {
            self.teardown(&m);
        }
        for d in lock(&self.devices).drain(..) {
            d.close();
        }
        self.closed_devices.store(true, Ordering::Relaxed);
        Ok(lock(&self.state).close(std::process::id())?)
    }

    /// Global NCs of the runtime's devices.
    pub fn nc_count(&self) -> usize {
        lock(&self.owners).len()
    }

    /// The device of global NC `global_nc` and the NC's index on it.
    pub fn device_of(&self, global_nc: usize) -> Option<(Device, usize)> {
        let devs = lock(&self.devices);
        let mut base = 0;
        for d in devs.iter() {
            if global_nc < base + d.nc_count() {
                return Some((d.clone(), global_nc - base));
            }
            base += d.nc_count();
        }
        None
    }

    /// Allocate a tensor on the device of global NC `nc` (host DMA memory or HBM).
    pub fn alloc_tensor(&self, name: &str, size: u64, on_device: bool, nc: usize) -> Result<Arc<Tensor>, RtError> {
        self.guard()?;
        let (dev, local) = self.device_of(nc).ok_or_else(|| RtError::new(NrtStatus::Invalid, format!("no NC {nc}")))?;
        let mem = if on_device {
            TensorMem::Device(dev.alloc_device(dev.hbm_for_nc(local), size.max(1), 64)?)
        } else {
            TensorMem::Host(dev.alloc_host(size.max(1) as usize, 64)?)
        };
        Ok(Arc::new(Tensor { name: name.to_string(), size, mem, dev, nc: local, completions: AtomicU64::new(0) }))
    }

    /// `nrt_load`: parse and stage `neff` on `nc_count` NCs starting at `start_nc`
    /// (None = the first free visible NCs). `nc_count` None = one NC per graph.
    pub fn load(&self, bytes: &[u8], start_nc: Option<usize>, nc_count: Option<usize>) -> Result<ModelHandle, RtError> {
        self.guard()?;
        let cfg = lock(&self.cfg).clone();
        let devices = lock(&self.devices).clone();
        let first = devices.first().ok_or_else(|| RtError::new(NrtStatus::Failure, "no devices"))?;
        let arch = match first.arch().nc_version {
            2 => neff::Arch::Sunda,
            3 => neff::Arch::Cayman,
            _ => neff::Arch::Mariana,
        };
        let opts = ReadOptions { verify: cfg.verify, arch: Some(arch), ..ReadOptions::default() };
        let n = Neff::parse(bytes, &opts).map_err(|e| RtError::new(e.status(), e.to_string()))?;
        let required = nc_count.unwrap_or(n.graphs.len()).max(n.graphs.len());
        // vNC admission.
        let picked: Vec<usize> = {
            let owners = lock(&self.owners);
            let visible: Vec<usize> = match &cfg.visible_cores {
                Some(v) => v.iter().copied().filter(|&c| c < owners.len()).collect(),
                None => (0..owners.len()).collect(),
            };
            let free: Vec<usize> = visible.iter().copied().filter(|&c| owners[c].is_none()).collect();
            let cand: Vec<usize> = match start_nc {
                Some(s) => (s..s + required).filter(|c| free.contains(c)).collect(),
                None => free.iter().copied().take(required).collect(),
            };
            if cand.len() < required {
                return Err(RtError::new(
                    NrtStatus::LoadNotEnoughNc,
                    format!(
                        "Insufficient number of pncs, required: {required}, available: {}",
                        if start_nc.is_some() { cand.len() } else { free.len() }
                    ),
                ));
            }
            cand
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut owners = lock(&self.owners);
            for &c in &picked {
                owners[c] = Some(id);
            }
        }
        let mut life = ModelLifecycle::new();
        life.begin_load()?;
        let mut staged: Vec<StagedNc> = Vec::new();
        let mut devs = Vec::new();
        let comm_id = (id as u32).wrapping_mul(2654435761) ^ (std::process::id() << 8);
        let res: Result<(), RtError> = (|| {
            for (rank, g) in n.graphs.iter().enumerate() {
                let (dev, local) =
                    self.device_of(picked[rank]).ok_or_else(|| RtError::new(NrtStatus::Failure, "NC vanished"))?;
                let s = stage_graph(&dev, g, &GraphPlacement { nc: local, rank, comm_id })
                    .map_err(|e| RtError::new(e.status, format!("graph {}: {}", g.name, e.message)))?;
                staged.push(s);
                devs.push(dev);
            }
            Ok(())
        })();
        if let Err(e) = res {
            for (s, d) in staged.into_iter().zip(devs.iter()) {
                drop(s.teardown(d));
            }
            let _ = life.load_failed();
            {
                let mut owners = lock(&self.owners);
                for &c in &picked {
                    owners[c] = None;
                }
            }
            self.release_idle();
            return Err(e);
        }
        let mut tc = TrackerConfig::new(arch, cfg.exec_timeout);
        tc.reads_per_sweep = crate::stage::RING_RECORDS as usize;
        let tracker =
            ExecTracker::new(staged.len(), tc).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?;
        let t0 = staged.first().map(|s| s.dev.device_time(s.nc)).transpose()?.unwrap_or(0);
        let sync = crate::timestamp::TimestampSync {
            clocks: [crate::timestamp::EngineClock::nominal(t0); 5],
            sync: crate::timestamp::SyncPoint { device_ns: 0, cpu_ns: self.epoch.elapsed().as_nanos() as u64 },
        };
        let irq = match (cfg.poll, staged.first()) {
            (PollPolicy::Interrupt, Some(s)) => s.dev.irq(s.nc)?,
            _ => None,
        };
        life.load_succeeded()?;
        let model = Arc::new(Model {
            id,
            name: n.header.name_str().to_string(),
            inputs: n.inputs.clone(),
            outputs: n.outputs.clone(),
            ncs: picked,
            lifecycle: Mutex::new(life),
            exec: Mutex::new(Some(ExecState { irq, ncs: staged, tracker, seq: 0, sync, busy: false })),
            poll: cfg.poll,
            devices: devs,
            epoch: self.epoch,
        });
        lock(&self.models).insert(id, model.clone());
        Ok(model)
    }

    /// Take another reference on a loaded model (a shared model is torn down at zero).
    pub fn share(&self, m: &ModelHandle) -> Result<ModelHandle, RtError> {
        self.guard()?;
        lock(&m.lifecycle).acquire()?;
        Ok(m.clone())
    }

    /// `nrt_unload`.
    pub fn unload(&self, m: &ModelHandle) -> Result<(), RtError> {
        self.guard()?;
        match lock(&m.lifecycle).unload()? {
            Unload::StillReferenced { .. } => return Ok(()),
            Unload::Teardown => {}
        }
        lock(&self.models).remove(&m.id);
        self.retire_workers();
        self.teardown(m);
        let _ = lock(&m.lifecycle).finish_teardown();
        self.release_idle();
        Ok(())
    }

    /// Devices with no model loaded release their host-transfer rings and idle DMA memory.
    fn release_idle(&self) {
        let devs = lock(&self.devices).clone();
        let models = lock(&self.models);
        for d in &devs {
            if !models.values().any(|x| x.devices.iter().any(|y| y.same(d))) {
                d.close();
            }
        }
    }

    fn teardown(&self, m: &Model) {
        let poisoned = lock(&m.lifecycle).poisoned().is_some();
        if let Some(ex) = lock(&m.exec).take() {
            for (s, d) in ex.ncs.into_iter().zip(m.devices.iter()) {
                let nc = s.nc;
                drop(s.teardown(d));
                // libnrt leaves a faulted core to the management firmware; we reset the NCs of
                // a poisoned model through the firmware at unload so the next load on them
                // starts clean. Healthy NCs only get their latched causes cleared.
                if poisoned {
                    if let Err(e) = d.reset_nc(nc) {
                        tracing::warn!("NC {nc}: reset after a fatal execution failed: {e}");
                    }
                }
                let _ = d.clear_causes(nc);
            }
        }
        for d in &m.devices {
            d.trim();
        }
        let mut owners = lock(&self.owners);
        for &c in &m.ncs {
            if owners.get(c).copied().flatten() == Some(m.id) {
                owners[c] = None;
            }
        }
    }

    /// `nrt_execute` (synchronous): returns the execution's status (NRT_SUCCESS or the
    /// error) and timings; API misuse is an `Err`.
    pub fn execute(
        &self,
        m: &ModelHandle,
        inputs: &TensorSet,
        outputs: &TensorSet,
    ) -> Result<(NrtStatus, ExecTimings), RtError> {
        self.guard()?;
        lock(&m.lifecycle).check_executable()?;
        if lock(&m.lifecycle).poisoned().is_some() {
            return Ok((NrtStatus::ExecUnitUnrecoverable, ExecTimings::default()));
        }
        let t0 = Instant::now();
        // Executions of a model are serialized: wait for an async execution in flight.
        let mut g = lock(&m.exec);
        while g.as_ref().is_some_and(|e| e.busy) {
            drop(g);
            if t0.elapsed() > lock(&self.cfg).exec_timeout {
                return Ok((NrtStatus::ExecNcBusy, ExecTimings::default()));
            }
            std::thread::yield_now();
            g = lock(&m.exec);
        }
        let ex = g.as_mut().ok_or_else(|| RtError::new(NrtStatus::InvalidHandle, "model unloaded"))?;
        bind_inputs(m, ex, inputs, outputs)?;
        if let Some(irq) = &ex.irq {
            irq.drain();
        }
        kick(ex)?;
        let mut steps = 0u64;
        let step = loop {
            steps += 1;
            match ex.tracker.step(&mut ex.ncs, Instant::now()) {
                Step::InFlight => match (&ex.irq, m.poll) {
                    // Bounded sleep: a device that never raises still reaches the timeout.
                    (Some(irq), PollPolicy::Interrupt) => {
                        irq.wait(Duration::from_millis(1));
                    }
                    _ => wait(m.poll, steps),
                },
                s => break s,
            }
        };
        let observed = m.epoch.elapsed().as_nanos() as u64;
        let status = ex.tracker.status();
        if crate::profile::active() {
            let t = ex.tracker.timings();
            crate::profile::record_exec(m.id, &m.name, &m.ncs, ex.seq, t0, m.epoch, status, &t, &ex.sync);
        }
        if step == Step::DoneWithError {
            drop(g);
            lock(&m.lifecycle).poison(status);
            let timings = ExecTimings { total_ns: t0.elapsed().as_nanos() as u64, steps, ..Default::default() };
            return Ok((status, timings));
        }
        let timing = ex.tracker.timing(0).unwrap_or_default();
        let device_ns = timing.duration().unwrap_or(0) / 1000;
        let last_end = timing.engines.iter().enumerate().filter_map(|(e, t)| t.end.map(|v| (e, v))).max_by_key(|x| x.1);
        let completion_lag_ns = last_end
            .and_then(|(e, ts)| ex.sync.to_cpu_ns(e, ts).ok())
            .map(|end| observed.saturating_sub(end))
            .unwrap_or(0);
        read_outputs(m, ex, outputs)?;
        Ok((status, ExecTimings { total_ns: t0.elapsed().as_nanos() as u64, device_ns, steps, completion_lag_ns }))
    }

    /// `nrt_execute_repeat`: `n` executions; stops at the first non-success status.
    pub fn execute_repeat(
        &self,
        m: &ModelHandle,
        inputs: &TensorSet,
        outputs: &TensorSet,
        n: u32,
    ) -> Result<(NrtStatus, Vec<ExecTimings>), RtError> {
        let mut t = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (s, tm) = self.execute(m, inputs, outputs)?;
            t.push(tm);
            if s != NrtStatus::Success {
                return Ok((s, t));
            }
        }
        Ok((NrtStatus::Success, t))
    }

    /// Asynchronous execute through the execution unit of the model's first NC. The
    /// ticket yields the status; outputs are written when it completes.
    pub fn execute_async(&self, m: &ModelHandle, inputs: &TensorSet, outputs: &TensorSet) -> Result<Ticket, RtError> {
        self.guard()?;
        lock(&m.lifecycle).check_executable()?;
        let nc = m.ncs.first().copied().ok_or_else(|| RtError::new(NrtStatus::InvalidHandle, "model has no NC"))?;
        let xu = {
            let mut xus = lock(&self.xus);
            if let Some(x) = xus.get(&nc) {
                x.clone()
            } else {
                let id =
                    XuId::compute(0, (nc % 256) as u8).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?;
                let cap = lock(&self.cfg).async_capacity;
                let xu = Xu::spawn(id, cap, XuExec).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?;
                let x = Arc::new(NcXu { xu });
                xus.insert(nc, x.clone());
                x
            }
        };
        xu.xu
            .submit(AsyncReq { model: m.clone(), inputs: inputs.clone(), outputs: outputs.clone() })
            .map_err(|s| RtError::new(s, "execution unit refused the request"))
    }

    /// Models currently loaded.
    pub fn loaded_models(&self) -> usize {
        lock(&self.models).len()
    }

    /// Status of an async execution: its result, or NRT_QUEUE_EMPTY while it is not done.
    pub fn poll(&self, t: &Ticket) -> NrtStatus {
        t.poll().unwrap_or(NrtStatus::QueueEmpty)
    }

    /// Execution-unit worker threads alive.
    pub fn workers(&self) -> usize {
        lock(&self.xus).len()
    }

    /// Stop the execution units that no loaded model uses (their workers exit).
    fn retire_workers(&self) {
        let used: Vec<usize> = lock(&self.models).values().filter_map(|m| m.ncs.first().copied()).collect();
        let idle: Vec<Arc<NcXu>> = {
            let mut xus = lock(&self.xus);
            let keys: Vec<usize> = xus.keys().copied().filter(|k| !used.contains(k)).collect();
            keys.into_iter().filter_map(|k| xus.remove(&k)).collect()
        };
        for x in idle {
            if let Ok(x) = Arc::try_unwrap(x) {
                let _ = x.xu.shutdown();
            }
        }
    }
}

impl Model {
    /// Whether a fatal status poisoned the model (and which).
    pub fn poisoned(&self) -> Option<NrtStatus> {
        lock(&self.lifecycle).poisoned()
    }
}

fn wait(p: PollPolicy, steps: u64) {
    match p {
        PollPolicy::Spin => {
            // Spin (no syscalls) for the fast path; yield only once an execution has been
            // in flight for a long while (≈ 2^16 steps), so a long model does not burn a core
            // without ever letting others run.
            if steps > 1 << 16 && steps.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        PollPolicy::Usleep1 => std::thread::sleep(Duration::from_micros(1)),
        PollPolicy::Interrupt => std::hint::spin_loop(),
    }
}

fn bind_inputs(m: &Model, ex: &mut ExecState, inputs: &TensorSet, outputs: &TensorSet) -> Result<(), RtError> {
    for (k, s) in ex.ncs.iter_mut().enumerate() {
        for b in s.bind.iter_mut() {
            *b = None;
        }
        // Consumed ring space is handed back to the device by the harvest itself once a
        // quarter of a ring is consumed (hal::NqRing::poll), so binding makes no MMIO access.
        for info in &m.inputs {
            let t = inputs
                .get(&info.name)
                .ok_or_else(|| RtError::new(NrtStatus::ExecBadInput, format!("input {} is not bound", info.name)))?;
            let Some(i) = s.var_index(&info.name) else { continue };
            let v = &s.vars[i];
            crate::tensor_ops::check_dma(t)?;
            if t.size != v.size {
                return Err(RtError::new(
                    NrtStatus::ExecBadInput,
                    format!("input {}: tensor of {} bytes, model expects {}", info.name, t.size, v.size),
                ));
            }
            if s.dma_only[i] {
                // The model reads the input only through DMA: point the descriptors at the tensor.
                s.bind[i] = Some(t.dev_addr());
            } else {
                let (src, dst, len) = (t.dev_addr(), v.addr, v.size);
                m.devices[k].copy(s.nc, &[Xfer { src, dst, len }])?;
            }
        }
        if k == 0 {
            for info in &m.outputs {
                let Some(t) = outputs.get(&info.name) else { continue };
                let Some(i) = s.var_index(&info.name) else { continue };
                crate::tensor_ops::check_dma(t)?;
                if t.size != s.vars[i].size {
                    return Err(RtError::new(
                        NrtStatus::ExecBadInput,
                        format!("output {}: tensor of {} bytes, model produces {}", info.name, t.size, s.vars[i].size),
                    ));
                }
                if s.dma_only[i] {
                    s.bind[i] = Some(t.dev_addr());
                }
            }
        }
        s.stage_rings()?;
    }
    ex.tracker.reset();
    ex.seq += 1;
    Ok(())
}

/// The kickoff: one MMIO write per NC.
fn kick(ex: &ExecState) -> Result<(), RtError> {
    for s in &ex.ncs {
        s.dev.bar0().write32(s.kick_off, 1).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?;
    }
    Ok(())
}

/// Copy outputs that were not bound by address.
fn read_outputs(m: &Model, ex: &mut ExecState, outputs: &TensorSet) -> Result<(), RtError> {
    let Some(s) = ex.ncs.first() else { return Ok(()) };
    for info in &m.outputs {
        let Some(t) = outputs.get(&info.name) else { continue };
        let Some(i) = s.var_index(&info.name) else { continue };
        if s.bind[i].is_none() {
            let v = &s.vars[i];
            m.devices[0].copy(s.nc, &[Xfer { src: v.addr, dst: t.dev_addr(), len: v.size }])?;
        }
        t.completions.fetch_add(1, Ordering::AcqRel);
    }
    Ok(())
}

// ------------------------------------------------------------------ completion source

impl NotificationSource for StagedNc {
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) {
        let regs = self.dev.regs();
        self.raw.clear();
        if let Some(r) = self.infer_rings.get_mut(engine) {
            let _ = r.poll(&regs, &mut self.raw, max);
        }
        out.extend(self.raw.iter().map(InferStatus::decode));
    }
    fn drain_infer(&mut self, engine: usize) {
        let regs = self.dev.regs();
        self.raw.clear();
        if let Some(r) = self.infer_rings.get_mut(engine) {
            let cap = self.raw.capacity();
            let _ = r.poll(&regs, &mut self.raw, cap);
        }
    }
    fn poll_errors(&mut self, out: &mut Vec<TpbErrorRecord>, max: usize) {
        let regs = self.dev.regs();
        self.raw.clear();
        let _ = self.err_ring.poll(&regs, &mut self.raw, max);
        out.extend(self.raw.iter().map(TpbErrorRecord::decode));
    }
    fn nq_overflow(&mut self) -> bool {
        self.dev.nq_overflow(self.nc).unwrap_or(false)
    }
    fn fatal_causes(&mut self) -> FatalCauses {
        let c = self.dev.fatal_causes(self.nc).unwrap_or_default();
        FatalCauses {
            hbm_ue: c.hbm_ue,
            repairable_hbm_ue: c.hbm_ue_repairable,
            nc_ue: c.nc_ue,
            dma_abort: c.dma_abort,
            collectives: c.cc_error,
            network_proxy: c.net_proxy,
        }
    }
    fn barrier_proxy(&mut self) -> ProxyPoll {
        ProxyPoll::Done
    }
    fn network_proxy(&mut self) -> ProxyPoll {
        ProxyPoll::Done
    }
}

// ------------------------------------------------------------------ async executor

/// An async request.
pub struct AsyncReq {
    model: Arc<Model>,
    inputs: TensorSet,
    outputs: TensorSet,
}

/// An in-flight async execution.
pub struct AsyncTok {
    req: AsyncReq,
    /// Bound and kicked off (the first step does it, so executions of a model never overlap).
    started: bool,
    /// A bind/kick failure to report.
    error: Option<NrtStatus>,
    /// When it was kicked off (profiling).
    t0: Instant,
}

/// The XU's executor. The XU submits every scheduled request before stepping the oldest;
/// since a model's rings and completion state serve one execution at a time, the bind and
/// the kickoff happen at a request's first step (when it is the oldest in flight).
pub struct XuExec;

impl Executor for XuExec {
    type Request = AsyncReq;
    type Token = AsyncTok;

    fn submit(&mut self, req: AsyncReq, _seq_id: u64) -> Result<AsyncTok, NrtStatus> {
        if lock(&req.model.lifecycle).poisoned().is_some() {
            return Err(NrtStatus::ExecUnitUnrecoverable);
        }
        Ok(AsyncTok { req, started: false, error: None, t0: Instant::now() })
    }

    fn step(&mut self, tok: &mut AsyncTok) -> Step {
        if tok.error.is_some() {
            return Step::DoneWithError;
        }
        let m = tok.req.model.clone();
        let mut g = lock(&m.exec);
        let Some(ex) = g.as_mut() else {
            tok.error = Some(NrtStatus::InvalidHandle);
            return Step::DoneWithError;
        };
        if !tok.started {
            if ex.busy {
                return Step::InFlight;
            }
            let r = bind_inputs(&m, ex, &tok.req.inputs, &tok.req.outputs).and_then(|_| {
                if let Some(irq) = &ex.irq {
                    irq.drain();
                }
                kick(ex)
            });
            if let Err(e) = r {
                tok.error = Some(e.status);
                return Step::DoneWithError;
            }
            ex.busy = true;
            tok.started = true;
            tok.t0 = Instant::now();
            return Step::InFlight;
        }
        ex.tracker.step(&mut ex.ncs, Instant::now())
    }

    fn complete(&mut self, tok: AsyncTok) -> NrtStatus {
        let m = &tok.req.model;
        let mut g = lock(&m.exec);
        let Some(ex) = g.as_mut() else { return NrtStatus::InvalidHandle };
        if tok.started {
            ex.busy = false;
        }
        if let Some(s) = tok.error {
            return s;
        }
        let status = ex.tracker.status();
        if crate::profile::active() {
            let t = ex.tracker.timings();
            crate::profile::record_exec(m.id, &m.name, &m.ncs, ex.seq, tok.t0, m.epoch, status, &t, &ex.sync);
        }
        if ex.tracker.verdict() == Some(Step::DoneWithError) {
            drop(g);
            lock(&m.lifecycle).poison(status);
            return status;
        }
        match read_outputs(m, ex, &tok.req.outputs) {
            Ok(()) => status,
            Err(e) => e.status,
        }
    }

    fn abandon(&mut self, tok: AsyncTok) {
        if tok.started {
            if let Some(ex) = lock(&tok.req.model.exec).as_mut() {
                ex.busy = false;
            }
        }
    }
}
