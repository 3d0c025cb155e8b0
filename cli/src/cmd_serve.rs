//! `sim-serve`: the simulator as a vfio-user server (docs/virtual-device.md).

use std::path::PathBuf;

use clap::Args;
use csr_maps::Arch;

use crate::report::CliError;

/// Arguments of `sim-serve`.
#[derive(Args, Debug)]
pub struct SimServeArgs {
    /// The simulated arch: sunda, cayman or mariana (or an alias: trn1, trn2, …).
    #[arg(long, default_value = "sunda")]
    pub arch: String,
    /// The vfio-user socket to create (QEMU: -device
    /// '{"driver":"vfio-user-pci","socket":{"path":"PATH","type":"unix"}}').
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Arm a simulator fault before the client connects (e.g. hbm-ue@nc0); repeatable.
    #[arg(long = "sim-fault", value_name = "SPEC")]
    pub sim_faults: Vec<String>,
    /// A control socket: each line written to it is a fault spec injected at once (or
    /// `stats`); the reply is `ok SPEC` or `error: …`.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Bytes of HBM served through BAR4 (a power of two; the arch's BAR4 spans all HBM).
    #[arg(long, value_name = "BYTES", default_value_t = sim_serve::DEFAULT_BAR4_WINDOW)]
    pub bar4_window: u64,
}

/// Arguments of `sim-control`.
#[derive(Args, Debug)]
pub struct SimControlArgs {
    /// The control socket of a running `sim-serve --control PATH`.
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
    /// The line to send: a fault spec (`hbm-ue@nc0`), `stats`, or `mark TEXT` (a mark in the
    /// server's MMIO trace).
    #[arg(required = true, num_args = 1.., value_name = "LINE")]
    pub line: Vec<String>,
}

/// `sim-control`: one line to a served device's control socket; its reply on stdout (an
/// `error: …` reply fails the command).
pub fn control(a: SimControlArgs) -> Result<(), CliError> {
    let line = a.line.join(" ");
    let reply = sim_serve::control_send(&a.control, &line)
        .map_err(|e| CliError::failure(format!("{}: {e}", a.control.display())))?;
    println!("{reply}");
    if let Some(why) = reply.strip_prefix("error: ") {
        return Err(CliError::failure(format!("{line}: {why}")));
    }
    Ok(())
}

pub fn run(a: SimServeArgs) -> Result<(), CliError> {
    let arch = Arch::by_name(&a.arch).map_err(CliError::invalid)?;
    let faults = a
        .sim_faults
        .iter()
        .map(|s| s.parse::<sim::FaultSpec>().map_err(CliError::invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let mut cfg = sim_serve::ServeConfig::new(arch, &a.socket);
    cfg.faults = faults;
    cfg.control = a.control.clone();
    cfg.bar4_window = a.bar4_window;
    // `neuron-vfio --mmio-trace FILE sim-serve`: every BAR access the client makes, named, and
    // the control socket's `mark TEXT` lines as comments between them.
    if let Some(path) = select::mmio_trace_path() {
        let sink = select::TraceSink::create(&path)
            .map_err(|e| CliError::failure(format!("MMIO trace {}: {e}", path.display())))?;
        let s = sink.clone();
        cfg.bar_wrap = Some(std::sync::Arc::new(move |bar, inner| {
            std::sync::Arc::new(select::TracedMmio::new(inner, bar, 0, Some(arch), s.clone()))
                as std::sync::Arc<dyn platform::Mmio>
        }));
        cfg.marks = Some(std::sync::Arc::new(move |text: &str| sink.mark(text)));
    }
    let server = sim_serve::SimServer::new(&cfg).map_err(CliError::invalid)?;
    let b = server.backend();
    let id = platform::Platform::identity(b.device());
    println!(
        "sim-serve: {} ({:04x}:{:04x}) on {}; BAR{} {:#x}, BAR{} {:#x} (HBM window), MSI-X {} vectors (BAR{}){}",
        arch.name,
        id.vendor,
        id.device,
        a.socket.display(),
        arch.bars.apb,
        b.region_size(arch.bars.apb as u32),
        arch.bars.dram,
        b.region_size(arch.bars.dram as u32),
        b.device().irq_vectors(),
        sim_serve::MSIX_BAR,
        a.control.as_ref().map(|c| format!("; control {}", c.display())).unwrap_or_default()
    );
    let sim = b.device().clone();
    server.run().map_err(CliError::failure)?;
    println!("sim-serve: client disconnected; stats {:?}", sim.stats());
    Ok(())
}
