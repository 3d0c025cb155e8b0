//! `neuron-vfio`: bring-up, debug and run tool for AWS Neuron devices without the kmod.
//!
//! Two binaries share this code: `neuron-vfio` (system allocator) and `neuron-vfio-bench`,
//! which runs the `bench` commands under a counting global allocator
//! ([`alloc_count::Counting`]). `neuron-vfio bench …` runs `neuron-vfio-bench` when it is
//! installed next to it, else runs the benchmark itself without allocation counting.

// Doc comments on the argument types are clap's --help text, written for a terminal
// (`sim[:ARCH[:N]]`, `<PCI BDF>`), not rustdoc Markdown.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

pub mod alloc_count;
mod cmd_bench;
#[cfg(feature = "sim")]
mod cmd_bench_shared;
#[cfg(feature = "sim")]
mod cmd_broker;
#[cfg(feature = "fabric")]
mod cmd_collectives;
mod cmd_csr;
mod cmd_dev;
mod cmd_dma;
mod cmd_monitor;
mod cmd_neff;
mod cmd_nq;
mod cmd_run;
#[cfg(feature = "sim")]
mod cmd_serve;
#[cfg(feature = "sim")]
mod cmd_sim_host;
mod device;
mod follow;
mod host;
pub mod procs;
mod profile_out;
pub mod report;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use device::{DeviceSpec, SimTiming};
use report::CliError;

#[derive(Parser)]
#[command(
    name = "neuron-vfio",
    version,
    about = "Userspace driver and runtime for AWS Neuron devices (VFIO or the built-in simulator)",
    after_help = "Logging: NEURON_RT_LOG_LEVEL=QUIET|ERROR|WARNING|INFO|DEBUG|TRACE (default warning), \
NEURON_RT_LOG_LEVEL_<TDRV|NRT|NMGR|KMGR>, NEURON_RT_LOG_LOCATION=console|syslog (docs/environment.md).\n\
                  Environment: NEURON_VFIO_SYSFS (sysfs root), NEURON_VFIO_DEVDIR (/dev root), \
                  NEURON_VFIO_STATE_DIR (where bind records the replaced driver), \
                  NEURON_VFIO_BACKEND=auto|container|iommufd|noiommu (the VFIO interface; auto: \
                  the container where the kernel has it, else iommufd; noiommu: UNSAFE opt-in to \
                  vfio's no-IOMMU mode for a device no IOMMU translates, e.g. in a VM without a vIOMMU)."
)]
struct Cli {
    /// Machine-readable JSON output (errors too: {"status","code","error"}).
    #[arg(long, global = true)]
    json: bool,
    /// sim[:ARCH[:N]] | sim:shared[:ARCH[:N]] | <PCI BDF> (default: the first Neuron device
    /// bound to vfio-pci, else the simulator with a notice). `sim:mariana:2` is a topology of
    /// 2 devices: `ls` lists them all, other commands act on device 0; `sim:shared:…` are the
    /// host's shared simulated devices, reached through the broker (docs/sharing.md).
    #[arg(long, global = true, value_name = "DEVICE")]
    device: Option<String>,
    /// How the simulator runs device work.
    #[arg(long, global = true, value_enum, default_value = "inline")]
    sim_timing: SimTiming,
    /// Trace every BAR read/write the driver makes into FILE, timestamped and decoded to
    /// register and field names (also NEURON_VFIO_MMIO_TRACE=FILE).
    #[arg(long, global = true, value_name = "FILE")]
    mmio_trace: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List Neuron devices (BDF or name, arch, logical and physical NCs, HBM, driver, IOMMU
    /// group) and the processes using each (pid, cores, command); neuron-ls's flags too.
    Ls(LsArgs),
    /// Identity, counts, firmware, HBM, ECC counters and engine states of the device.
    Info,
    /// Bind a device to vfio-pci (remembering its driver for `unbind`); `--all`: every
    /// Neuron device (or those with the `--ids` PCI ids).
    Bind {
        /// PCI address (DDDD:BB:DD.F or BB:DD.F).
        #[arg(required_unless_present_any = ["all", "ids"], conflicts_with_all = ["all", "ids"])]
        bdf: Option<String>,
        /// Bind every Neuron device in sysfs (default ids: every arch's Neuron vendor:device).
        #[arg(long)]
        all: bool,
        /// With --all (implied): only devices with these PCI ids, VVVV:DDDD[,VVVV:DDDD…]; each
        /// must be a Neuron id.
        #[arg(long, value_name = "IDS", value_delimiter = ',')]
        ids: Vec<String>,
    },
    /// Give a device back to its original driver (or clear driver_override and reprobe).
    Unbind {
        /// PCI address.
        bdf: String,
    },
    /// Registers: list, decode (offline); read/write/dump/watch on a device.
    #[command(subcommand)]
    Csr(cmd_csr::CsrCmd),
    /// Notification queues: programmed slots and decoded records.
    #[command(subcommand)]
    Nq(cmd_nq::NqCmd),
    /// DMA: copy files to/from device memory; bandwidth benchmark.
    #[command(subcommand)]
    Dma(cmd_dma::DmaCmd),
    /// NEFF model files: inspect, disassemble.
    #[command(subcommand)]
    Neff(cmd_neff::NeffCmd),
    /// Validate and stage a NEFF on the device; print its tensors.
    Load(cmd_run::LoadArgs),
    /// Load a NEFF, bind inputs, execute, write outputs; print status and timings.
    Run(cmd_run::RunArgs),
    /// Periodic reports of every NeuronCore in use on this machine: utilization, executions,
    /// latency, memory, errors (--json: one object per line; --prometheus: /metrics).
    Monitor(cmd_monitor::MonitorArgs),
    /// Live per-NeuronCore view of the device (--once: one frame as text).
    Top(cmd_monitor::TopArgs),
    /// Benchmarks (commands that print figures).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Serve a simulated device over vfio-user (a virtual Neuron device for a VM: QEMU's
    /// `-device vfio-user-pci` connects to the socket); runs until the client disconnects.
    #[cfg(feature = "sim")]
    SimServe(cmd_serve::SimServeArgs),
    /// Send one line to a served device's control socket (`sim-serve --control PATH`): a fault
    /// spec, `stats`, or `mark TEXT`; prints the reply.
    #[cfg(feature = "sim")]
    SimControl(cmd_serve::SimControlArgs),
    /// The device broker: owns the shared devices (`--device sim:shared…`) for every process
    /// of this user — core leases, device memory, cleanup of dead processes (docs/sharing.md).
    /// Started on demand by the first client; exits when idle.
    #[cfg(feature = "sim")]
    Broker(cmd_broker::BrokerArgs),
    /// A shared simulated device in a process of its own (the device host the broker starts,
    /// so the device outlives the broker); internal.
    #[cfg(feature = "sim")]
    #[command(hide = true)]
    SimHost(cmd_sim_host::SimHostArgs),
    /// The Neuron SDK's collectives benchmark, as the `nccom-test` binary (docs/collectives.md).
    #[cfg(feature = "sim")]
    #[command(name = "nccom-test", disable_help_flag = true)]
    NccomTest {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
    /// The Kubernetes device plugin (docs/kubernetes.md): hands out the NeuronCores and devices
    /// of `--device sim:shared[:ARCH[:N]]` or `--device <PCI BDF>` (default:
    /// NEURON_VFIO_DEVICE) to pods through the kubelet's device plugin API, the cores leased
    /// through the broker; the same as the `neuron-vfio-k8s-device-plugin` binary.
    #[cfg(feature = "k8s")]
    K8sDevicePlugin(k8s::daemon::PluginArgs),
}

/// `ls`'s flags: neuron-ls's, so `neuron-vfio ls -j` is `neuron-ls -j`.
#[derive(clap::Args)]
struct LsArgs {
    /// JSON output (as --json): neuron-ls -j's fields per device, and this tool's.
    #[arg(short = 'j', long = "json-output")]
    json_output: bool,
    /// neuron-ls's wide table: each device's processes (pid, command, runtime version).
    #[arg(short, long)]
    wide: bool,
    /// Every process using a device (always so here; accepted as neuron-ls takes it).
    #[arg(short = 'a', long)]
    show_all_procs: bool,
    /// neuron-ls's table with its topology note (links between devices: the kmod's only).
    #[arg(short, long)]
    topology: bool,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Streaming load of a NEFF with 1 GiB of weights (into simulated device memory) vs raw
    /// inflate of its gzip payload; `--sizes` for a sweep.
    NeffLoad(cmd_neff::BenchNeffLoadArgs),
    /// Load a model with one large variable (default 8 GiB) into the simulator: load time and
    /// peak host RSS.
    LargeVar(cmd_neff::BenchLargeVarArgs),
    /// Host overhead, completion latency (spin vs usleep(1)), allocations and syscalls per execute.
    Exec(cmd_bench::ExecBenchArgs),
    /// Many NCs at once: N simulated devices, one model per NC, executes from 1, 2, … threads.
    Scale(cmd_bench::ScaleBenchArgs),
    /// A process on a shared simulated device (the broker): attach/lease time, execute host
    /// time interleaved against a private simulator, syscalls per execute (strace), cleanup
    /// time after SIGKILL.
    #[cfg(feature = "sim")]
    Shared(cmd_bench_shared::SharedBenchArgs),
    /// Collective bandwidth between rank processes over libfabric (nccom-test style).
    #[cfg(feature = "fabric")]
    Collectives(cmd_collectives::CollectivesArgs),
}

/// Whether to colour output on a stream: only on a terminal, and never when `NO_COLOR` is set
/// to a non-empty value (<https://no-color.org>).
pub fn use_colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Logs as libnrt's logging knobs say (runtime::env::log): `NEURON_RT_LOG_LEVEL` (default
/// warn here; QUIET: nothing), the per-component `NEURON_RT_LOG_LEVEL_<comp>`, and
/// `NEURON_RT_LOG_LOCATION` (console = stderr, coloured only on a terminal; syslog). Then one
/// line for each `NEURON_RT_*` variable that is set but not applied.
fn init_logging() {
    init_logging_at(None)
}

/// A `tracing` writer onto a [`runtime::env::log::LogSink`]: each event is one line.
struct SinkWriter(std::sync::Arc<runtime::env::log::LogSink>, tracing::Level, Vec<u8>);

impl std::io::Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.2.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SinkWriter {
    fn drop(&mut self) {
        if !self.2.is_empty() {
            self.0.write_line(self.1, &String::from_utf8_lossy(&self.2));
        }
    }
}

struct SinkMaker(std::sync::Arc<runtime::env::log::LogSink>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SinkMaker {
    type Writer = SinkWriter;
    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter(self.0.clone(), tracing::Level::INFO, Vec::new())
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SinkWriter {
        SinkWriter(self.0.clone(), *meta.level(), Vec::new())
    }
}

/// Logs at `level` if given (a `-v` count), else as [`init_logging`].
fn init_logging_at(level: Option<&'static str>) {
    use runtime::env::log::{LogConfig, LogLocation, LogSink};
    use std::io::IsTerminal;
    let (cfg, bad) = match LogConfig::from_env(tracing::Level::WARN) {
        Ok(c) => (c, None),
        Err(e) => (
            LogConfig {
                level: Some(tracing::Level::WARN),
                level_set: false,
                components: Vec::new(),
                location: LogLocation::Console,
            },
            Some(e),
        ),
    };
    let filter = match level {
        Some(l) => l.to_string(),
        None => cfg.filter(),
    };
    let env_filter = tracing_subscriber::EnvFilter::new(filter);
    let _ = match cfg.location {
        LogLocation::Syslog => tracing_subscriber::fmt()
            .with_writer(SinkMaker(std::sync::Arc::new(LogSink::new(LogLocation::Syslog, "neuron-vfio"))))
            .with_ansi(false)
            .without_time()
            .with_env_filter(env_filter)
            .with_target(false)
            .try_init(),
        LogLocation::Console => tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(use_colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref()))
            .with_env_filter(env_filter)
            .with_target(false)
            .try_init(),
    };
    if let Some(e) = bad {
        tracing::warn!("{e}; logging at warn");
    }
    for line in runtime::env::documented::notices_from_env() {
        tracing::warn!("{line}");
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let json = cli.json;
    if let Some(p) = &cli.mmio_trace {
        select::set_mmio_trace(p);
    }
    let spec = || DeviceSpec::parse(cli.device.as_deref());
    let t = cli.sim_timing;
    match cli.cmd {
        Cmd::Ls(a) => {
            let json = json || a.json_output;
            let opts = cmd_dev::LsOpts {
                show_all_procs: true,
                neuron_ls_text: a.wide || a.topology,
                wide: a.wide,
                topology: a.topology,
            };
            cmd_dev::ls_with(&spec()?, t, json, opts)
        }
        Cmd::Info => cmd_dev::info(&spec()?, t, json),
        Cmd::Bind { bdf: Some(bdf), .. } => cmd_dev::bind(&bdf, json),
        Cmd::Bind { bdf: None, ids, .. } => cmd_dev::bind_all(&ids, json),
        Cmd::Unbind { bdf } => cmd_dev::unbind(&bdf, json),
        Cmd::Csr(c) => cmd_csr::run(c, &spec()?, t, json),
        Cmd::Nq(c) => cmd_nq::run(c, &spec()?, t, json),
        Cmd::Dma(c) => cmd_dma::run(c, &spec()?, t, json),
        Cmd::Neff(c) => cmd_neff::run_neff(c, json),
        Cmd::Load(a) => cmd_run::load(a, cli.device.as_deref(), t, json),
        Cmd::Run(a) => cmd_run::run(a, cli.device.as_deref(), t, json),
        Cmd::Monitor(a) => cmd_monitor::monitor(a, json),
        Cmd::Top(a) => cmd_monitor::top(a, &spec()?, json),
        #[cfg(feature = "sim")]
        Cmd::SimServe(a) => cmd_serve::run(a),
        #[cfg(feature = "sim")]
        Cmd::SimControl(a) => cmd_serve::control(a),
        #[cfg(feature = "sim")]
        Cmd::Broker(a) => cmd_broker::run(a),
        #[cfg(feature = "sim")]
        Cmd::SimHost(a) => cmd_sim_host::run(a),
        #[cfg(feature = "sim")]
        Cmd::NccomTest { args } => {
            // `--device` names the device the workers share, as NEURON_VFIO_DEVICE would.
            if let Some(d) = &cli.device {
                std::env::set_var(nccom::worker::DEVICE_VAR, d);
            }
            std::process::exit(nccom::main(args, &[OsString::from("nccom-test")]))
        }
        #[cfg(feature = "k8s")]
        Cmd::K8sDevicePlugin(a) => k8s::daemon::run(cli.device.as_deref(), &a).map_err(|e| {
            if e.is_usage() {
                CliError::invalid(e)
            } else {
                CliError::failure(e)
            }
        }),
        Cmd::Bench(BenchCmd::NeffLoad(a)) => cmd_neff::bench_neff_load(a, json),
        Cmd::Bench(BenchCmd::LargeVar(a)) => cmd_neff::bench_large_var(a, json),
        Cmd::Bench(BenchCmd::Exec(a)) => cmd_bench::exec_bench(a, json),
        Cmd::Bench(BenchCmd::Scale(a)) => cmd_bench::scale_bench(a, json),
        #[cfg(feature = "sim")]
        Cmd::Bench(BenchCmd::Shared(a)) => cmd_bench_shared::run(a, json),
        #[cfg(feature = "fabric")]
        Cmd::Bench(BenchCmd::Collectives(a)) => cmd_collectives::run(a, json),
    }
}

/// Subcommand paths that never open a device: their help leaves out `--device` and
/// `--sim-timing` (still accepted, as global options are, and ignored).
const DEVICELESS: &[&[&str]] = &[
    &["neff"],
    &["bind"],
    &["unbind"],
    &["bench"],
    &["csr", "list"],
    &["csr", "decode"],
    &["csr", "diff"],
    &["monitor"],
    &["sim-serve"],
    &["sim-control"],
    &["broker"],
    &["sim-host"],
];

/// The command line definition, with the device options hidden from the help of the
/// commands that do not use a device: those get hidden copies of the global options before
/// clap propagates them (propagation skips a subcommand that already has the option), so
/// `--device` is still accepted there (and ignored).
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let hidden: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.get_id() == "device" || a.get_id() == "sim_timing")
        .map(|a| a.clone().hide(true))
        .collect();
    for path in DEVICELESS {
        let mut c = Some(&mut cmd);
        for name in *path {
            c = c.and_then(|c| c.find_subcommand_mut(name));
        }
        if let Some(c) = c {
            for a in &hidden {
                *c = std::mem::take(c).arg(a.clone());
            }
        }
    }
    cmd
}

fn parse_cli(cmd: clap::Command) -> Cli {
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The benchmark binary, installed next to `neuron-vfio`.
pub const BENCH_BIN: &str = "neuron-vfio-bench";

/// `neuron-vfio-bench` next to the running executable, if installed.
fn bench_binary() -> Option<PathBuf> {
    let p = std::env::current_exe().ok()?.with_file_name(BENCH_BIN);
    p.is_file().then_some(p)
}

/// Run `bench …` in `neuron-vfio-bench` (replacing this process) so allocations are
/// counted; returns only when that is not possible, with the reason.
fn exec_bench_binary(args: &[OsString]) -> String {
    use std::os::unix::process::CommandExt;
    match bench_binary() {
        Some(p) => {
            let e = std::process::Command::new(&p).args(args).exec();
            format!("cannot run {}: {e}", p.display())
        }
        None => format!("{BENCH_BIN} is not installed next to this executable"),
    }
}

/// Restore the default SIGPIPE disposition: die quietly on a closed stdout
/// (`neuron-vfio csr list | head`) like other CLI tools.
fn default_sigpipe() {
    // SAFETY: `signal` with SIG_DFL installs no handler and touches no Rust state; called
    // first thing in `main`, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn finish(cli: Cli) {
    let json = cli.json;
    if let Err(e) = run(cli) {
        e.report(json);
        std::process::exit(e.exit_code());
    }
}

/// `neuron-vfio`'s `main`.
pub fn main() {
    default_sigpipe();
    let cli = parse_cli(command());
    init_logging_at(daemon_log_level(&cli));
    if matches!(cli.cmd, Cmd::Bench(_)) && !alloc_count::active() {
        let args: Vec<OsString> = std::env::args_os().skip(1).collect();
        let why = exec_bench_binary(&args);
        eprintln!("notice: {why}; benchmarking without allocation counting");
    }
    finish(cli)
}

/// A daemon's log says what it does (the device plugin's registrations and allocations): info,
/// unless `NEURON_RT_LOG_LEVEL` says otherwise; other commands log as [`init_logging`].
fn daemon_log_level(cli: &Cli) -> Option<&'static str> {
    #[cfg(feature = "k8s")]
    if matches!(cli.cmd, Cmd::K8sDevicePlugin(_)) && std::env::var_os(runtime::env::LOG_LEVEL_VAR).is_none() {
        return Some("info");
    }
    let _ = cli;
    None
}

/// `neuron-vfio-bench`'s `main` (its global allocator is [`alloc_count::Counting`]): the
/// `bench` commands only, with `neuron-vfio`'s arguments.
pub fn main_bench() {
    default_sigpipe();
    let cli = parse_cli(command().name(BENCH_BIN).bin_name(BENCH_BIN));
    init_logging();
    if !matches!(cli.cmd, Cmd::Bench(_)) {
        let e = CliError::invalid(format!("{BENCH_BIN} runs only the `bench` commands; use neuron-vfio"));
        e.report(cli.json);
        std::process::exit(e.exit_code());
    }
    finish(cli)
}

/// Report `r`'s error (if any) as `neuron-vfio` does and exit non-zero.
fn exit_on(r: Result<(), CliError>, json: bool) {
    if let Err(e) = r {
        e.report(json);
        std::process::exit(e.exit_code());
    }
}

/// `neuron-ls`: the devices with AWS neuron-ls's flags, over the code of `ls`.
#[derive(Parser)]
#[command(name = "neuron-ls", version, about = "Neuron devices and the processes using them (neuron-ls's flags)")]
struct NeuronLsCli {
    /// JSON output: an object per device, neuron-ls's fields and this tool's.
    #[arg(short = 'j', long = "json-output")]
    json_output: bool,
    /// The wide table: each device's processes (pid, command, runtime version).
    #[arg(short, long)]
    wide: bool,
    /// Every process using a device, not only those running a Neuron runtime.
    #[arg(short = 'a', long)]
    show_all_procs: bool,
    /// Topology: the connected devices column (links between devices are known to the kmod
    /// only: empty here).
    #[arg(short, long)]
    topology: bool,
    /// sim[:ARCH[:N]] | sim:shared[:ARCH[:N]] | <PCI BDF> (default: every device of this host,
    /// else the simulator).
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
}

/// `neuron-ls`'s `main`.
pub fn main_neuron_ls() {
    default_sigpipe();
    let a = NeuronLsCli::parse();
    init_logging();
    let opts =
        cmd_dev::LsOpts { show_all_procs: a.show_all_procs, neuron_ls_text: true, wide: a.wide, topology: a.topology };
    let r = DeviceSpec::parse(a.device.as_deref())
        .map_err(CliError::from)
        .and_then(|spec| cmd_dev::ls_with(&spec, SimTiming::Inline, a.json_output, opts));
    exit_on(r, a.json_output)
}

/// `neuron-monitor`: `monitor` in neuron-monitor's format with its flags.
#[derive(Parser)]
#[command(
    name = "neuron-monitor",
    version,
    about = "neuron-monitor's report of every Neuron application on this host, one JSON object per line"
)]
struct NeuronMonitorCli {
    /// A neuron-monitor configuration file (default: every metric group, every 5 seconds).
    #[arg(short = 'c', long = "config-file", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// 0-4: diagnostics on stderr (0: as NEURON_RT_LOG_LEVEL, default warnings; 4: everything).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    verbose: u8,
    /// Number of reports (default: until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// Also serve AWS's exporter metrics at http://ADDR:PORT/metrics (no value: 0.0.0.0:8000).
    #[arg(long, value_name = "[ADDR:]PORT", num_args = 0..=1, default_missing_value = "0.0.0.0:8000")]
    prometheus: Option<String>,
}

/// `neuron-monitor`'s `main`.
pub fn main_neuron_monitor() {
    default_sigpipe();
    let a = NeuronMonitorCli::parse();
    init_logging_at(match a.verbose {
        0 => None,
        1 => Some("warn"),
        2 => Some("info"),
        3 => Some("debug"),
        _ => Some("trace"),
    });
    let mut m = cmd_monitor::MonitorArgs::neuron_monitor(a.config_file);
    m.count = a.count;
    m.prometheus = a.prometheus;
    // Errors go to stderr as text: stdout carries only reports.
    exit_on(cmd_monitor::monitor(m, true), false)
}

/// `neuron-top`: `top` under the tool's name.
#[derive(Parser)]
#[command(name = "neuron-top", version, about = "Live per-NeuronCore view (neuron-top); --once prints one frame")]
struct NeuronTopCli {
    #[command(flatten)]
    top: cmd_monitor::TopArgs,
    /// sim[:ARCH[:N]] | sim:shared[:ARCH[:N]] | <PCI BDF>: the device whose NeuronCores are shown.
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
}

/// `neuron-top`'s `main`.
pub fn main_neuron_top() {
    default_sigpipe();
    let a = NeuronTopCli::parse();
    init_logging();
    let r = DeviceSpec::parse(a.device.as_deref())
        .map_err(CliError::from)
        .and_then(|spec| cmd_monitor::top(a.top, &spec, false));
    exit_on(r, false)
}
