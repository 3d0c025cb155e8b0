//! `nrtpy._nrtpy`: the native half of the `nrtpy` Python package (docs/python.md).
//!
//! It binds the runtime's Rust API — the [`runtime::Runtime`] libnrt.so's `nrt_*` calls drive,
//! opened on the device `nrt_init` would open (`select::env`: `NEURON_VFIO_DEVICE`, the
//! simulator by default, `NEURON_VFIO_SIM_FAULT`) — not libnrt's C ABI: errors arrive typed
//! with their `NRT_STATUS` and message, tensors are Rust objects whose bytes move straight
//! between a NumPy array's buffer and device memory, and no raw handle crosses a boundary.
//!
//! The documented classes (`NrtpyModel`, `NrtpyTensor`, `BenchmarkResult`) are Python, in
//! `python/nrtpy/__init__.py`; this module gives them:
//! - the process's one runtime, created on first use and closed by [`reset`]; every object
//!   remembers the runtime session (generation) it was made in, and using it after `reset()`
//!   raises `NrtpyError`;
//! - [`NrtTensor`]: device memory of one logical NeuronCore, written from and read into any
//!   C-contiguous buffer (the NumPy array itself: one copy, the device transfer);
//! - [`NrtModel`]: a loaded NEFF, executed with the GIL released, its per-execution host and
//!   device times, and the execution trace of one call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use neff::{NrtStatus, TensorInfo};
use platform::sync::lock;
use runtime::profile::{self, Collector};
use runtime::{ModelHandle, RtError, Runtime, RuntimeConfig, Tensor, TensorSet};
use select::env::{self as device, DeviceEnvError};

/// What can go wrong below Python; each becomes `nrtpy.NrtError` (an `NRT_STATUS`),
/// `nrtpy.NrtpyError` (misuse of nrtpy's objects) or `ValueError` (a bad argument).
#[derive(Debug, thiserror::Error)]
enum Error {
    /// The runtime refused or failed: `what` failed with the runtime's status and message.
    #[error("{what}: {}", source.message())]
    Nrt {
        what: &'static str,
        #[source]
        source: RtError,
    },
    /// An execution that ran and ended with a status other than NRT_SUCCESS.
    #[error("Failed to execute model {model}")]
    Exec { model: String, status: NrtStatus },
    /// The NEFF file could not be read (NRT_FAILURE, as nrtpy reports a file it cannot load).
    #[error("Failed to load model: {path}: {source}")]
    NeffFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A request this runtime refuses before calling into it, with the status libnrt returns.
    #[error("{message}")]
    Refused { status: NrtStatus, message: String },
    /// An object from a runtime session that `nrtpy.reset()` closed.
    #[error("{what} belongs to a runtime closed by nrtpy.reset(); create it again")]
    Stale { what: String },
    /// A tensor whose device memory was freed.
    #[error("tensor `{name}` was freed")]
    Freed { name: String },
    /// `configure()` while the runtime is active.
    #[error("the runtime is already active: call nrtpy.reset() before nrtpy.configure()")]
    Active,
    /// A buffer that does not fit the tensor.
    #[error("{0}")]
    Buffer(String),
    /// Writing the execution trace failed.
    #[error("write trace {path}: {source}")]
    Trace {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    fn nrt(what: &'static str) -> impl FnOnce(RtError) -> Error {
        move |source| Error::Nrt { what, source }
    }

    /// The `NRT_STATUS` of an error that has one.
    fn status(&self) -> Option<NrtStatus> {
        match self {
            Error::Nrt { source, .. } => Some(source.status),
            Error::Exec { status, .. } | Error::Refused { status, .. } => Some(*status),
            Error::NeffFile { .. } | Error::Trace { .. } => Some(NrtStatus::Failure),
            Error::Stale { .. } | Error::Freed { .. } | Error::Active | Error::Buffer(_) => None,
        }
    }
}

/// The Python exception of `e`: `NrtError(status, name, message)` for an error with a status,
/// `NrtpyError` for misuse of nrtpy's objects, `ValueError` for a buffer that does not fit.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let made = match (&e, e.status()) {
        (Error::Buffer(m), _) => return PyValueError::new_err(m.clone()),
        (_, Some(s)) => {
            py.import("nrtpy._errors").and_then(|m| m.getattr("NrtError")?.call1((s.code(), s.name(), e.to_string())))
        }
        (_, None) => py.import("nrtpy._errors").and_then(|m| m.getattr("NrtpyError")?.call1((e.to_string(),))),
    };
    match made {
        Ok(obj) => PyErr::from_value(obj),
        // The errors module is part of the package: only a broken install gets here.
        Err(err) => PyRuntimeError::new_err(format!("{e} (and nrtpy._errors failed: {err})")),
    }
}

/// `Result` with [`Error`], raised in Python by [`Raise::raise`].
type Res<T> = Result<T, Error>;

trait Raise<T> {
    fn raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> Raise<T> for Res<T> {
    fn raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

// ------------------------------------------------------------------ the runtime singleton

/// The open runtime, the session it belongs to and the devices it was opened on (on a shared
/// device, this process's leases: given back when the session is dropped).
struct Session {
    rt: Arc<Runtime>,
    generation: u64,
    opened: select::Opened,
}

/// The process's runtime, opened on first use (nrtpy's singleton).
static SESSION: Mutex<Option<Session>> = Mutex::new(None);
/// Sessions opened so far: an object made in session `g` is usable while `g` is open.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The runtime and its generation, opening it as `nrt_init` does if none is open: the
/// `NEURON_RT_*` knobs ([`RuntimeConfig::from_env`]), the device of `NEURON_VFIO_DEVICE`
/// and the simulator faults of `NEURON_VFIO_SIM_FAULT` (`select::env`, as `nrt_init`).
fn session() -> Res<(Arc<Runtime>, u64)> {
    let mut g = lock(&SESSION);
    if let Some(s) = &*g {
        return Ok((s.rt.clone(), s.generation));
    }
    const INIT: &str = "Failed to initialize the runtime";
    let env = |e: DeviceEnvError| Error::Nrt { what: INIT, source: RtError::frontend(e) };
    let rt = Arc::new(Runtime::with_observers(runtime::monitoring()));
    let cfg = RuntimeConfig::from_env().map_err(Error::nrt(INIT))?;
    let faults = device::sim_faults().map_err(env)?;
    let spec = device::spec().map_err(env)?;
    // A shared device (`sim:shared`): the cores are leased here, as nrt_init leases them, and
    // held until reset() (docs/sharing.md).
    let reserve = device::reserve(cfg.visible_cores.as_deref(), cfg.num_cores);
    let opened = device::open(&spec, &reserve, cfg.lnc.map(|l| l.size), log_line).map_err(env)?;
    let owned = |i| opened.ownership(i).map(|o| (o.ncs, o.hbm, o.firmware));
    let (devices, cfg) =
        runtime::device_setup(&opened.platforms, owned, opened.leased_cores(), cfg, hal::DeviceOptions::default());
    rt.init_devices(devices, cfg).map_err(Error::nrt(INIT))?;
    // Simulator faults of NEURON_VFIO_SIM_FAULT: a bad spec undoes the init.
    if let Err(e) = device::arm(&opened, faults, |nc| rt.global_nc(nc)) {
        let _ = rt.close();
        return Err(env(e));
    }
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    *g = Some(Session { rt: rt.clone(), generation, opened });
    Ok((rt, generation))
}

/// One error line of libnrt's log, as `libnrt.so` writes it (`NEURON_RT_LOG_LEVEL`,
/// `NEURON_RT_LOG_LOCATION`; `NEURON_VFIO_NRT_QUIET=1` silences it): the device selection's
/// lines when a shared device's cores are refused.
fn log_line(line: &str) {
    use runtime::env::log::{LogConfig, LogSink};
    if std::env::var("NEURON_VFIO_NRT_QUIET").is_ok_and(|v| v == "1") {
        return;
    }
    // A bad logging variable already failed the init (RuntimeConfig::from_env) before any
    // line is written.
    let Ok(cfg) = LogConfig::from_env(tracing::Level::ERROR) else { return };
    if cfg.enabled("capi", tracing::Level::ERROR) {
        LogSink::new(cfg.location, "nrt").write_line(tracing::Level::ERROR, &format!("nrt: {line}"));
    }
}

/// The runtime if session `generation` is still open.
fn live(generation: u64, what: impl FnOnce() -> String) -> Res<Arc<Runtime>> {
    match &*lock(&SESSION) {
        Some(s) if s.generation == generation => Ok(s.rt.clone()),
        _ => Err(Error::Stale { what: what() }),
    }
}

/// Whether the runtime is open (`configure()` is refused then).
#[pyfunction]
fn is_active() -> bool {
    lock(&SESSION).is_some()
}

/// Raise `NrtpyError` if the runtime is open (`configure()`'s check).
#[pyfunction]
fn check_inactive(py: Python<'_>) -> PyResult<()> {
    if is_active() {
        return Err(to_py(py, Error::Active));
    }
    Ok(())
}

/// Open the runtime now (it opens on first use anyway); the number of visible NeuronCores.
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<usize> {
    let (rt, _) = py.detach(session).raise(py)?;
    Ok(rt.visible_logical().len())
}

/// `nrtpy.reset()`: close the runtime (unloading every model, releasing the devices); every
/// object made before is stale. Nothing to do if it is not open.
#[pyfunction]
fn reset(py: Python<'_>) -> PyResult<()> {
    let Some(s) = lock(&SESSION).take() else { return Ok(()) };
    let closed = py.detach(|| s.rt.close());
    // The devices are closed: give a shared device's cores back.
    drop(s.opened);
    closed.map_err(Error::nrt("Failed to close the runtime")).raise(py)
}

// ------------------------------------------------------------------ tensors

/// A C-contiguous buffer's bytes (a NumPy array viewed as `uint8`).
fn contiguous(buf: &PyBuffer<u8>) -> Res<std::ptr::NonNull<[u8]>> {
    buf.as_slice_ptr().ok_or_else(|| Error::Buffer("the buffer is not C-contiguous".into()))
}

/// Device memory of one logical NeuronCore (nrtpy's `NrtTensor`, the `tensor_ref` of an
/// `NrtpyTensor`). `free()` gives the memory back at once; otherwise it goes with the object.
#[pyclass(module = "nrtpy._nrtpy", name = "NrtTensor", frozen)]
struct NrtTensor {
    tensor: Mutex<Option<Arc<Tensor>>>,
    generation: u64,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    size: u64,
    #[pyo3(get)]
    core_id: usize,
}

impl NrtTensor {
    /// The live tensor (not freed, its session open).
    fn get(&self) -> Res<Arc<Tensor>> {
        live(self.generation, || format!("tensor `{}`", self.name))?;
        lock(&self.tensor).clone().ok_or_else(|| Error::Freed { name: self.name.clone() })
    }
}

#[pymethods]
impl NrtTensor {
    /// Allocate `size` bytes of device memory (zeroed) for logical NeuronCore `core_id`.
    #[staticmethod]
    fn allocate(py: Python<'_>, name: String, size: u64, core_id: usize) -> PyResult<Self> {
        let (t, generation) = py
            .detach(|| {
                let (rt, generation) = session()?;
                let t = rt.alloc_tensor(&name, size, true, core_id).map_err(Error::nrt("Failed to allocate tensor"))?;
                Ok((t, generation))
            })
            .raise(py)?;
        Ok(Self { tensor: Mutex::new(Some(t)), generation, name, size, core_id })
    }

    /// Copy a C-contiguous byte buffer of exactly `size` bytes into the tensor.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = PyBuffer::<u8>::get(data)?;
        let r = (|| {
            let t = self.get()?;
            let p = contiguous(&buf)?;
            if p.len() as u64 != self.size {
                return Err(Error::Buffer(format!(
                    "{} bytes do not fit tensor `{}` of {} bytes",
                    p.len(),
                    self.name,
                    self.size
                )));
            }
            // SAFETY: `p` is the exporter's C-contiguous memory of `p.len()` bytes, held by
            // `buf` (the export pins it: the array cannot be resized or freed) until `buf` is
            // dropped after this call; the GIL is held throughout, so no Python code runs
            // meanwhile. The bytes are only read.
            let bytes = unsafe { p.as_ref() };
            t.write(0, bytes).map_err(Error::nrt("Failed to write tensor"))
        })();
        r.raise(py)
    }

    /// Copy the tensor into a writable C-contiguous byte buffer of exactly `size` bytes.
    fn read_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = PyBuffer::<u8>::get(out)?;
        let r = (|| {
            let t = self.get()?;
            if buf.readonly() {
                return Err(Error::Buffer("the output buffer is read-only".into()));
            }
            let mut p = contiguous(&buf)?;
            if p.len() as u64 != self.size {
                return Err(Error::Buffer(format!(
                    "tensor `{}` of {} bytes does not fit a buffer of {} bytes",
                    self.name,
                    self.size,
                    p.len()
                )));
            }
            // SAFETY: `p` is the exporter's writable (checked above), C-contiguous memory of
            // `p.len()` bytes, pinned by `buf` until it is dropped after this call; the GIL is
            // held throughout, so nothing else reads or writes it meanwhile.
            let bytes = unsafe { p.as_mut() };
            t.read(0, bytes).map_err(Error::nrt("Failed to read tensor"))
        })();
        r.raise(py)
    }

    /// Give the device memory back now; later use raises `NrtpyError`.
    fn free(&self) {
        lock(&self.tensor).take();
    }

    /// Whether the tensor was freed or its runtime closed.
    #[getter]
    fn freed(&self) -> bool {
        self.get().is_err()
    }

    fn __repr__(&self) -> String {
        format!("NrtTensor(name={:?}, size={}, core_id={})", self.name, self.size, self.core_id)
    }
}

// ------------------------------------------------------------------ models

/// A loaded model (nrtpy's model handle). Unloaded when the object goes (or by `reset()`).
#[pyclass(module = "nrtpy._nrtpy", name = "NrtModel", frozen)]
struct NrtModel {
    model: ModelHandle,
    generation: u64,
    #[pyo3(get)]
    core_id: usize,
}

/// Host ns and the runtime's device ns of each timed execution, and the system trace's
/// `nc_exec_running` spans (ns) of those executions.
type Timed = (Vec<u64>, Vec<u64>, Vec<u64>);

/// The device span of every `nc_exec_running` start/stop pair in the system-trace records of
/// `events` (`runtime::sys_trace::records`, what `nrt_sys_trace_fetch_events` returns): the
/// stop's `data.nc_timestamp_ns` − the start's, pairs matched by tracking id, in stop order.
fn nc_exec_spans(events: &[profile::Event], logical: &dyn Fn(usize) -> usize) -> Vec<u64> {
    use runtime::sys_trace::{records, Phase, Value, NC_EXEC_RUNNING};
    let mut starts = std::collections::HashMap::new();
    let mut spans = Vec::new();
    for r in events.iter().flat_map(|e| records(e, logical)) {
        if r.event_type != NC_EXEC_RUNNING {
            continue;
        }
        let ts = r.data.iter().find_map(|(k, v)| match v {
            Value::U64(t) if *k == "nc_timestamp_ns" => Some(*t),
            _ => None,
        });
        let Some(ts) = ts else { continue };
        match r.phase {
            Phase::Start => {
                starts.insert(r.tracking_id, ts);
            }
            Phase::Stop => {
                if let Some(s) = starts.remove(&r.tracking_id) {
                    spans.push(ts.saturating_sub(s));
                }
            }
            Phase::Instant => {}
        }
    }
    spans
}

/// `(name, dtype, shape, size)` of each tensor, in the NEFF's order.
type InfoTuple = (String, String, Vec<u64>, u64);

fn info(t: &[TensorInfo]) -> Vec<InfoTuple> {
    t.iter().map(|i| (i.name.clone(), i.dtype.clone(), i.shape.clone(), i.size)).collect()
}

/// The tensors a call binds, checked against the model's names (an unknown name is
/// NRT_INVALID, as nrtpy reports a name the NEFF does not have).
fn bind(side: &'static str, names: &[TensorInfo], given: &[(String, Py<NrtTensor>)]) -> Res<TensorSet> {
    let mut set = TensorSet::new();
    for (name, t) in given {
        if !names.iter().any(|i| &i.name == name) {
            let known: Vec<&str> = names.iter().map(|i| i.name.as_str()).collect();
            return Err(Error::Refused {
                status: NrtStatus::Invalid,
                message: format!("model has no {side} `{name}` (its {side}s: {})", known.join(", ")),
            });
        }
        set.add(name, t.get().get()?);
    }
    Ok(set)
}

impl NrtModel {
    fn rt(&self) -> Res<Arc<Runtime>> {
        live(self.generation, || format!("model `{}`", self.model.name))
    }

    /// One execution: its status as an error, else (host ns, device ns).
    fn run(&self, rt: &Runtime, ins: &TensorSet, outs: &TensorSet) -> Res<(u64, u64)> {
        let t0 = Instant::now();
        let (status, timings) = rt.execute(&self.model, ins, outs).map_err(Error::nrt("Failed to execute model"))?;
        let host = t0.elapsed().as_nanos() as u64;
        if status != NrtStatus::Success {
            return Err(Error::Exec { model: self.model.name.clone(), status });
        }
        Ok((host, timings.device_ns))
    }
}

#[pymethods]
impl NrtModel {
    /// Load the NEFF at `path` on logical NeuronCore `core_id` (streamed from the file into
    /// device memory). `world_size` > 1 (a collective group spanning processes) is refused.
    #[staticmethod]
    #[pyo3(signature = (path, core_id=0, cc_enabled=false, rank_id=0, world_size=1))]
    fn load(
        py: Python<'_>,
        path: PathBuf,
        core_id: usize,
        cc_enabled: bool,
        rank_id: u32,
        world_size: u32,
    ) -> PyResult<Self> {
        py.detach(|| {
            if cc_enabled && world_size > 1 {
                return Err(Error::Refused {
                    status: NrtStatus::Invalid,
                    message: format!(
                        "Failed to load model: rank {rank_id} of {world_size}: collectives across processes \
                         are not supported by nrtpy here; load with world_size=1 (collectives between the \
                         NeuronCores of one model run)"
                    ),
                });
            }
            let file = std::fs::File::open(&path)
                .map_err(|source| Error::NeffFile { path: path.display().to_string(), source })?;
            let len =
                file.metadata().map_err(|source| Error::NeffFile { path: path.display().to_string(), source })?.len();
            let (rt, generation) = session()?;
            let model = rt
                .load_reader(std::io::BufReader::new(file), len, Some(core_id), None)
                .map_err(Error::nrt("Failed to load model"))?;
            Ok(Self { model, generation, core_id })
        })
        .raise(py)
    }

    /// The NEFF's model name.
    #[getter]
    fn neff_name(&self) -> String {
        self.model.name.clone()
    }

    /// `(name, dtype, shape, size)` of each input.
    fn inputs(&self) -> Vec<InfoTuple> {
        info(&self.model.inputs)
    }

    /// `(name, dtype, shape, size)` of each output.
    fn outputs(&self) -> Vec<InfoTuple> {
        info(&self.model.outputs)
    }

    /// Logical NeuronCores the model runs on (indices into the visible cores).
    #[getter]
    fn ncs(&self) -> Vec<usize> {
        self.model.vncs.clone()
    }

    /// The same NeuronCores as the device numbers them (NEURON_RT_VISIBLE_CORES=2,3: logical
    /// 0 is global 2).
    #[getter]
    fn global_ncs(&self) -> Vec<usize> {
        self.model.ncs.clone()
    }

    /// Execute once with the GIL released; with `trace` the execution's timeline (per NC and
    /// engine, and the runtime calls meanwhile) is written there as a Chrome / Perfetto JSON
    /// trace, as `nrt_profile_stop` writes it. Returns (host ns, device ns).
    #[pyo3(signature = (inputs, outputs, trace=None))]
    fn execute(
        &self,
        py: Python<'_>,
        inputs: Vec<(String, Py<NrtTensor>)>,
        outputs: Vec<(String, Py<NrtTensor>)>,
        trace: Option<PathBuf>,
    ) -> PyResult<(u64, u64)> {
        let r = (|| {
            let rt = self.rt()?;
            let ins = bind("input", &self.model.inputs, &inputs)?;
            let outs = bind("output", &self.model.outputs, &outputs)?;
            let Some(path) = trace else { return py.detach(|| self.run(&rt, &ins, &outs)) };
            let sink = Arc::new(Collector::new(Some(self.model.id)));
            let id = profile::subscribe(sink.clone());
            let r = py.detach(|| self.run(&rt, &ins, &outs));
            profile::unsubscribe(id);
            let t = r?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|source| Error::Trace { path: path.display().to_string(), source })?;
            }
            std::fs::write(&path, profile::chrome_trace(&sink.take()))
                .map_err(|source| Error::Trace { path: path.display().to_string(), source })?;
            Ok(t)
        })();
        r.raise(py)
    }

    /// `warmup` executions, then `iters` timed ones (GIL released). Returns, for the timed
    /// executions: each one's host time (the execute call's wall time) and the runtime's own
    /// device time of it (`ExecTimings::device_ns`, NC 0), and — with `trace` — the device
    /// span of every `nc_exec_running` start/stop pair the system trace recorded for them (one
    /// per NeuronCore of the model and execution; `data.nc_timestamp_ns` stop − start, matched
    /// by tracking id, as clients of libnrt's `nrt_sys_trace_fetch_events` time them).
    #[pyo3(signature = (inputs, outputs, warmup, iters, trace=false))]
    fn execute_timed(
        &self,
        py: Python<'_>,
        inputs: Vec<(String, Py<NrtTensor>)>,
        outputs: Vec<(String, Py<NrtTensor>)>,
        warmup: u32,
        iters: u32,
        trace: bool,
    ) -> PyResult<Timed> {
        let r: Res<Timed> = (|| {
            let rt = self.rt()?;
            let ins = bind("input", &self.model.inputs, &inputs)?;
            let outs = bind("output", &self.model.outputs, &outputs)?;
            py.detach(|| {
                for _ in 0..warmup {
                    self.run(&rt, &ins, &outs)?;
                }
                let sink = trace.then(|| Arc::new(Collector::new(Some(self.model.id))));
                let id = sink.as_ref().map(|s| profile::subscribe(s.clone()));
                let timed: Res<Vec<(u64, u64)>> = (0..iters).map(|_| self.run(&rt, &ins, &outs)).collect();
                if let Some(id) = id {
                    profile::unsubscribe(id);
                }
                let (host, device) = timed?.into_iter().unzip();
                let logical = |g: usize| rt.logical_nc(g).unwrap_or(g);
                let spans = sink.map(|s| nc_exec_spans(&s.take(), &logical)).unwrap_or_default();
                Ok((host, device, spans))
            })
        })();
        r.raise(py)
    }

    fn __repr__(&self) -> String {
        format!("NrtModel(name={:?}, ncs={:?})", self.model.name, self.model.vncs)
    }
}

impl Drop for NrtModel {
    fn drop(&mut self) {
        // A model of a closed session was unloaded by the close.
        if let Ok(rt) = self.rt() {
            if let Err(e) = rt.unload(&self.model) {
                eprintln!("nrtpy: unloading model `{}`: {e}", self.model.name);
            }
        }
    }
}

/// The status names and codes (`NRT_STATUS`), for `nrtpy.NrtError.status` lookups.
#[pyfunction]
fn statuses() -> Vec<(String, u32)> {
    NrtStatus::ALL.iter().map(|s| (s.name().to_string(), s.code())).collect()
}

#[pymodule]
fn _nrtpy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NrtTensor>()?;
    m.add_class::<NrtModel>()?;
    m.add_function(wrap_pyfunction!(is_active, m)?)?;
    m.add_function(wrap_pyfunction!(check_inactive, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(reset, m)?)?;
    m.add_function(wrap_pyfunction!(statuses, m)?)?;
    Ok(())
}
