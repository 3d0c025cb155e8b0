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
    server.run().map_err(CliError::failure)?;
    println!("sim-serve: client disconnected");
    Ok(())
}
