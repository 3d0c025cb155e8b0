//! `neuron-vfio load MODEL` and `neuron-vfio run MODEL --input NAME=FILE …`: the runtime
//! on the selected device (the simulator by default).

use std::path::PathBuf;

use clap::Args;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use select::Opened;
use serde_json::{json, Value};

use crate::device::{self, DeviceSpec, SimTiming};
use crate::report::CliError;

/// Arguments of `load`.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The NEFF file.
    pub model: PathBuf,
    /// First NeuronCore, logical: an index into NEURON_RT_VISIBLE_CORES (default: the
    /// least-loaded ones).
    #[arg(long)]
    pub nc: Option<usize>,
}

/// Arguments of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The NEFF file.
    pub model: PathBuf,
    /// NAME=FILE: raw bytes or a .npy file per model input.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Write each output to DIR/NAME.bin.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Execute N times (stops at the first failure).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// First NeuronCore, logical: an index into NEURON_RT_VISIBLE_CORES (default: the
    /// least-loaded ones).
    #[arg(long)]
    pub nc: Option<usize>,
    /// Inject a simulator fault before running (e.g. nq-overflow@nc0, hang@nc0:pe); `ncN`
    /// is a logical core, like --nc.
    #[arg(long = "sim-fault", value_name = "SPEC")]
    pub sim_faults: Vec<String>,
    /// Execution timeout in seconds (default: NEURON_RT_EXEC_TIMEOUT or 600; faults that
    /// hang the device need a short one).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Place input/output tensors in device memory instead of host DMA memory.
    #[arg(long)]
    pub device_tensors: bool,
    /// How the host waits for completion: spin (default), usleep (usleep(1) between steps,
    /// as libnrt), interrupt (sleep on NC 0's interrupt: MSI-X on VFIO).
    #[arg(long, value_enum, default_value = "spin")]
    pub poll: Poll,
    /// After loading and binding, print `run: loaded, waiting for a line on stdin` to stderr
    /// and wait for one before executing (e.g. to inject a fault into a served device at a
    /// known point).
    #[arg(long)]
    pub pause_before_exec: bool,
    /// After executing, with the device still open, print `run: executed, waiting for a line
    /// on stdin` to stderr and wait for one (e.g. to read /proc/interrupts while the
    /// interrupt vectors are still allocated).
    #[arg(long)]
    pub pause_after_exec: bool,
    /// Write the run's trace into DIR: `trace.json` (a timeline for Perfetto or
    /// chrome://tracing: a track per NeuronCore engine, its executions, the runtime calls) and
    /// `sys_trace_pid<PID>.json` (libnrt's system trace). Also on with
    /// NEURON_RT_INSPECT_ENABLE=1 (into NEURON_RT_INSPECT_OUTPUT_DIR, default ./output).
    #[arg(long, value_name = "DIR")]
    pub profile: Option<PathBuf>,
}

fn pause(what: &str) -> Result<(), CliError> {
    eprintln!("run: {what}, waiting for a line on stdin");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| CliError::failure(format!("stdin: {e}")))?;
    Ok(())
}

/// `--poll`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    Spin,
    Usleep,
    Interrupt,
}

impl From<Poll> for runtime::PollPolicy {
    fn from(p: Poll) -> Self {
        match p {
            Poll::Spin => runtime::PollPolicy::Spin,
            Poll::Usleep => runtime::PollPolicy::Usleep1,
            Poll::Interrupt => runtime::PollPolicy::Interrupt,
        }
    }
}

/// Platforms behind `--device` (every device of a simulated topology) and the simulators,
/// reserving `reserve` on shared devices (`sim:shared…`, docs/sharing.md).
pub fn platforms_reserving(
    spec: Option<&str>,
    timing: SimTiming,
    reserve: &select::Reserve,
    lnc: Option<u32>,
) -> Result<Opened, CliError> {
    let spec = match device::parse(spec)? {
        DeviceSpec::Default => device::resolve_default(&device::sysfs())?,
        s => s,
    };
    Ok(select::open_reserving(&spec, timing.into(), reserve, lnc)?)
}

/// The cores a process reserves on shared devices, as libnrt decides at `nrt_init`:
/// NEURON_RT_VISIBLE_CORES, else NEURON_RT_NUM_CORES (any free ones), else all.
pub fn reserve_of(cfg: &RuntimeConfig) -> select::Reserve {
    match (&cfg.visible_cores, cfg.num_cores) {
        (Some(v), _) => select::Reserve::Cores(v.clone()),
        (None, Some(n)) => select::Reserve::Count(n),
        (None, None) => select::Reserve::All,
    }
}

/// Each opened device with its options (on a shared device: the NCs and memory this process
/// leased), and the configuration whose visible cores are the leased ones.
pub fn device_setup(
    opened: &Opened,
    cfg: RuntimeConfig,
    base: hal::DeviceOptions,
) -> (runtime::Devices, RuntimeConfig) {
    runtime::device_setup(
        &opened.platforms,
        |i| opened.ownership(i).map(|o| (o.ncs, o.hbm, o.firmware)),
        opened.leased_cores(),
        cfg,
        base,
    )
}

fn rt_err(e: runtime::RtError) -> CliError {
    CliError::new(e.status, e.message())
}

/// Model files below this load without a progress bar.
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// Whether a load of a `total`-byte model file shows a progress bar: only on a terminal, not
/// under --json, and only for large models.
pub fn shows_load_progress(total: u64, stderr_is_terminal: bool, json: bool) -> bool {
    stderr_is_terminal && !json && total >= PROGRESS_MIN_BYTES
}

/// The model file, opened for a streaming load: the NEFF is read as it is inflated and its
/// weights go to the device in bounded pieces ([`Runtime::load_reader`]), so host memory does
/// not grow with the model.
struct ModelFile {
    file: std::fs::File,
    len: u64,
}

/// A reader that moves a progress bar by the bytes read. With a streaming load the time goes
/// into reading the file (inflate, digest and weights DMA on the same pass), so the bar
/// follows the file.
struct Progressed<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: std::io::Read> std::io::Read for Progressed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.bar.inc(k as u64);
        Ok(k)
    }
}

/// `rt.load_reader` over the model file, with a bar on stderr while a large file is read and
/// its weights written to the device (a terminal only; nothing is printed otherwise).
fn load_with_progress(
    rt: &Runtime,
    model: ModelFile,
    nc: Option<usize>,
    json: bool,
) -> Result<runtime::ModelHandle, CliError> {
    use std::io::IsTerminal;
    let ModelFile { file, len } = model;
    let src = std::io::BufReader::with_capacity(1 << 20, file);
    if !shows_load_progress(len, std::io::stderr().is_terminal(), json) {
        return rt.load_reader(src, len, nc, None).map_err(rt_err);
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(st) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(st.progress_chars("=> "));
    }
    bar.set_message("loading model");
    let r = rt.load_reader(Progressed { inner: src, bar: bar.clone() }, len, nc, None);
    bar.finish_and_clear();
    r.map_err(rt_err)
}

fn start(device: Option<&str>, timing: SimTiming, cfg: RuntimeConfig) -> Result<(Runtime, Opened), CliError> {
    let opened = platforms_reserving(device, timing, &reserve_of(&cfg), cfg.lnc.map(|l| l.size))?;
    let rt = Runtime::with_observers(runtime::monitoring());
    let (devices, cfg) = device_setup(&opened, cfg, hal::DeviceOptions::default());
    rt.init_devices(devices, cfg).map_err(rt_err)?;
    Ok((rt, opened))
}

/// `--sim-fault` specs, parsed before anything is opened.
#[cfg(feature = "sim")]
fn parse_faults(specs: &[String]) -> Result<Vec<sim::FaultSpec>, CliError> {
    specs.iter().map(|s| s.parse().map_err(CliError::invalid)).collect()
}

/// Built without the simulator, there is nothing to inject faults into.
#[cfg(not(feature = "sim"))]
fn parse_faults(specs: &[String]) -> Result<Vec<std::convert::Infallible>, CliError> {
    match specs.first() {
        None => Ok(Vec::new()),
        Some(s) => {
            Err(CliError::invalid(format!("--sim-fault {s}: built without the simulator (cargo feature `sim`)")))
        }
    }
}

/// Inject the faults into the first simulated device.
#[cfg(feature = "sim")]
fn inject(rt: &Runtime, opened: &Opened, faults: Vec<sim::FaultSpec>) -> Result<(), CliError> {
    for mut f in faults {
        // `@ncN` names a core as every other option does: logically (an index into
        // NEURON_RT_VISIBLE_CORES); the device takes its own NC index.
        let global = rt.global_nc(f.nc).map_err(|e| CliError::invalid(format!("--sim-fault: {e}")))?;
        let (s, local) = opened
            .sim_of_nc(global)
            .ok_or_else(|| CliError::invalid(format!("--sim-fault: no simulated device serves NC {}", f.nc)))?;
        f.nc = local;
        s.inject(f);
    }
    Ok(())
}

#[cfg(not(feature = "sim"))]
fn inject(_: &Runtime, _: &Opened, faults: Vec<std::convert::Infallible>) -> Result<(), CliError> {
    if let Some(f) = faults.into_iter().next() {
        match f {}
    }
    Ok(())
}

/// Open the model file (not read: the load streams it).
fn read_model(p: &PathBuf) -> Result<ModelFile, CliError> {
    let bad = |e: std::io::Error| CliError::invalid(format!("{}: {e}", p.display()));
    let file = std::fs::File::open(p).map_err(bad)?;
    let meta = file.metadata().map_err(bad)?;
    if meta.is_dir() {
        return Err(bad(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory")));
    }
    Ok(ModelFile { file, len: meta.len() })
}

fn tensor_json(t: &neff::TensorInfo) -> Value {
    json!({"name": t.name, "dtype": t.dtype, "shape": t.shape, "size": t.size})
}

/// `load`: validate and stage the model, print its tensors.
pub fn load(a: LoadArgs, device: Option<&str>, timing: SimTiming, json_out: bool) -> Result<(), CliError> {
    let model = read_model(&a.model)?;
    let cfg = RuntimeConfig::from_env().map_err(rt_err)?;
    let (rt, _opened) = start(device, timing, cfg)?;
    let m = load_with_progress(&rt, model, a.nc, json_out)?;
    if json_out {
        println!(
            "{}",
            json!({
                "status": NrtStatus::Success.name(), "code": 0, "name": m.name, "ncs": m.ncs,
                "inputs": m.inputs.iter().map(tensor_json).collect::<Vec<_>>(),
                "outputs": m.outputs.iter().map(tensor_json).collect::<Vec<_>>(),
            })
        );
    } else {
        println!("model {} loaded on NC {:?}", m.name, m.ncs);
        for (kind, ts) in [("input", &m.inputs), ("output", &m.outputs)] {
            for t in ts.iter() {
                println!("  {kind:<6} {:<20} {:<9} {:?} ({} bytes)", t.name, t.dtype, t.shape, t.size);
            }
        }
    }
    rt.unload(&m).map_err(rt_err)?;
    rt.close().map_err(rt_err)
}

fn input_bytes(path: &str) -> Result<Vec<u8>, CliError> {
    let b = std::fs::read(path).map_err(|e| CliError::invalid(format!("{path}: {e}")))?;
    if path.ends_with(".npy") {
        let r = neff::npy::npy_data_range(&b).map_err(|e| CliError::invalid(format!("{path}: {e}")))?;
        return Ok(b[r].to_vec());
    }
    Ok(b)
}

/// The mean completion lag as text: ns, or `n/a` with the reason (no execute harvested an END
/// record: it failed; or the END record's time is after the host saw completion — the
/// device's and the host's clocks disagree, as across a shared device's processes — so the
/// signed figure, which `--json` keeps, is no lag).
fn lag_text(mean_lag: Option<i64>) -> String {
    match mean_lag {
        None => "n/a (no execute harvested an END record)".into(),
        Some(l) if l < 0 => {
            "n/a (the END records are timed after completion was seen: device and host clocks disagree)".into()
        }
        Some(l) => format!("{l} ns"),
    }
}

/// `run`: load, bind inputs, execute (`--repeat` times), write outputs, print status.
pub fn run(a: RunArgs, device: Option<&str>, timing: SimTiming, json_out: bool) -> Result<(), CliError> {
    let model = read_model(&a.model)?;
    let mut cfg = RuntimeConfig::from_env().map_err(rt_err)?;
    if let Some(t) = a.timeout {
        if !(t > 0.0 && t.is_finite()) {
            return Err(CliError::invalid(format!("bad --timeout {t}")));
        }
        cfg.exec_timeout = std::time::Duration::from_secs_f64(t);
    }
    cfg.poll = a.poll.into();
    let faults = parse_faults(&a.sim_faults)?;
    let capture = crate::profile_out::Capture::begin(a.profile.as_deref())?;
    let (rt, opened) = start(device, timing, cfg)?;
    if !faults.is_empty() && !opened.is_sim() {
        return Err(CliError::invalid("--sim-fault needs a simulated device (--device sim…)"));
    }
    let m = load_with_progress(&rt, model, a.nc, json_out)?;
    let nc = m.vncs.first().copied().unwrap_or(0);
    let mut given: Vec<(String, Vec<u8>)> = Vec::new();
    for s in &a.inputs {
        let (name, path) =
            s.split_once('=').ok_or_else(|| CliError::invalid(format!("bad --input `{s}`: expected NAME=FILE")))?;
        given.push((name.to_string(), input_bytes(path)?));
    }
    // A name the model does not have is the likelier mistake than a missing one: name it first.
    if let Some((n, _)) = given.iter().find(|(n, _)| !m.inputs.iter().any(|t| t.name == *n)) {
        return Err(CliError::invalid(format!(
            "model has no input `{n}` (inputs: {})",
            m.inputs.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut ins = TensorSet::new();
    for t in &m.inputs {
        let data = given.iter().find(|(n, _)| *n == t.name).map(|(_, d)| d).ok_or_else(|| {
            CliError::new(
                NrtStatus::ExecBadInput,
                format!("no --input for model input `{}` ({} bytes)", t.name, t.size),
            )
        })?;
        if data.len() as u64 != t.size {
            return Err(CliError::new(
                NrtStatus::ExecBadInput,
                format!("input `{}`: {} bytes given, model expects {}", t.name, data.len(), t.size),
            ));
        }
        let tensor = rt.alloc_tensor(&t.name, t.size, a.device_tensors, nc).map_err(rt_err)?;
        tensor.write(0, data).map_err(rt_err)?;
        ins.add(&t.name, tensor);
    }
    let mut outs = TensorSet::new();
    for t in &m.outputs {
        outs.add(&t.name, rt.alloc_tensor(&t.name, t.size, a.device_tensors, nc).map_err(rt_err)?);
    }
    inject(&rt, &opened, faults)?;
    if a.pause_before_exec {
        pause("loaded")?;
    }
    let executed = rt.execute_repeat(&m, &ins, &outs, a.repeat.max(1)).map_err(rt_err);
    // The trace is written whatever the status (a failed run's is the one to look at).
    if let Some(c) = capture {
        for p in c.finish(rt.lnc())? {
            eprintln!("profile: wrote {}", p.display());
        }
    }
    let (status, timings) = executed?;
    if a.pause_after_exec {
        pause("executed")?;
    }
    let mut outputs = serde_json::Map::new();
    if status == NrtStatus::Success {
        if let Some(dir) = &a.output_dir {
            std::fs::create_dir_all(dir).map_err(|e| CliError::invalid(format!("{}: {e}", dir.display())))?;
        }
        for t in &m.outputs {
            let Some(tensor) = outs.get(&t.name) else { continue };
            let data = tensor.to_vec().map_err(rt_err)?;
            let mut o = json!({"size": data.len(), "dtype": t.dtype, "shape": t.shape});
            if let Some(dir) = &a.output_dir {
                let p = dir.join(format!("{}.bin", t.name));
                std::fs::write(&p, &data).map_err(|e| CliError::failure(format!("{}: {e}", p.display())))?;
                o["path"] = json!(p.display().to_string());
            }
            if t.dtype == "float32" && data.len() <= 4096 {
                let v: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                o["values"] = json!(v);
            }
            outputs.insert(t.name.clone(), o);
        }
    }
    let n = timings.len().max(1) as u64;
    let mean = |f: fn(&runtime::ExecTimings) -> u64| timings.iter().map(f).sum::<u64>() / n;
    // Signed, over the executions that have one (failed ones have none).
    let lags: Vec<i64> = timings.iter().filter_map(|t| t.completion_lag_ns).collect();
    let mean_lag = (!lags.is_empty()).then(|| lags.iter().sum::<i64>() / lags.len() as i64);
    let tj = json!({
        "executions": timings.len(),
        "mean_total_ns": mean(|t| t.total_ns),
        "mean_device_ns": mean(|t| t.device_ns),
        "mean_completion_lag_ns": mean_lag,
    });
    if json_out {
        let mut v = json!({"status": status.name(), "code": status.code(), "model": m.name, "ncs": m.ncs, "outputs": outputs, "timings": tj});
        if status != NrtStatus::Success {
            // A failure carries the documented {"status","code","error"} keys like every other.
            v["error"] = json!(format!(
                "execution {} of {} on NC {:?} ended with {}",
                timings.len(),
                a.repeat.max(1),
                m.ncs,
                status.name()
            ));
        }
        println!("{v}");
    } else {
        println!(
            "{} ({}) — model {} on NC {:?}, {} execution(s)",
            status.name(),
            status.code(),
            m.name,
            m.ncs,
            timings.len()
        );
        for (name, o) in &outputs {
            let vals = o.get("values").map(|v| v.to_string()).unwrap_or_default();
            let path = o.get("path").and_then(|p| p.as_str()).map(|p| format!(" → {p}")).unwrap_or_default();
            println!("  output {name}: {} bytes{path} {vals}", o["size"]);
        }
        println!(
            "  timings: mean total {} ns, device {} ns, completion lag {}",
            tj["mean_total_ns"],
            tj["mean_device_ns"],
            lag_text(mean_lag)
        );
    }
    let _ = rt.unload(&m);
    let _ = rt.close();
    if status != NrtStatus::Success {
        // The report was printed; exit non-zero with the status.
        std::process::exit(CliError::new(status, "").exit_code());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_progress_only_on_a_terminal_for_large_weights() {
        assert!(shows_load_progress(PROGRESS_MIN_BYTES, true, false));
        assert!(!shows_load_progress(PROGRESS_MIN_BYTES, false, false));
        assert!(!shows_load_progress(PROGRESS_MIN_BYTES, true, true));
        assert!(!shows_load_progress(PROGRESS_MIN_BYTES - 1, true, false));
    }

    #[test]
    fn completion_lag_is_never_printed_negative_or_null() {
        assert_eq!(lag_text(Some(1200)), "1200 ns");
        assert_eq!(lag_text(Some(0)), "0 ns");
        assert!(lag_text(None).starts_with("n/a (no execute"));
        let neg = lag_text(Some(-969857));
        assert!(neg.starts_with("n/a (") && !neg.contains('-'), "{neg}");
    }
}
