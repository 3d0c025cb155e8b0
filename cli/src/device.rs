//! Device selection and opening: `--device sim[:ARCH[:N]] | <PCI BDF>`; without it, the
//! first Neuron device bound to vfio-pci, else the simulator (with a notice on stderr).
//!
//! Environment (for fabricated trees in tests and for appliance images):
//! - `NEURON_VFIO_SYSFS`: sysfs root (default `/sys`);
//! - `NEURON_VFIO_DEVDIR`: device-node root checked for VFIO (default `/dev`);
//! - `NEURON_VFIO_STATE_DIR`: where `bind` records the driver it replaced (default
//!   `/run/neuron-vfio`).

use csr_maps::Arch;
use hal::{Device, DeviceOptions};
use vfio::{PciAddress, PciFunction, Sysfs};

use crate::report::CliError;

pub use select::{Spec as DeviceSpec, VFIO_PCI};

/// Parse the `--device` value.
pub fn parse(s: Option<&str>) -> Result<DeviceSpec, CliError> {
    Ok(DeviceSpec::parse(s)?)
}

/// How the simulator runs device work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimTiming {
    /// Device work runs inside the MMIO write that triggers it (default: deterministic,
    /// no thread wake-ups).
    Inline,
    /// One device thread per NeuronCore.
    Threaded,
}

impl From<SimTiming> for select::SimTiming {
    fn from(t: SimTiming) -> Self {
        match t {
            SimTiming::Inline => select::SimTiming::Inline,
            SimTiming::Threaded => select::SimTiming::Threaded,
        }
    }
}

/// The sysfs tree to use (NEURON_VFIO_SYSFS).
pub fn sysfs() -> Sysfs {
    select::sysfs()
}

/// The /dev root to check for VFIO nodes (NEURON_VFIO_DEVDIR).
pub fn dev_dir() -> std::path::PathBuf {
    select::dev_dir()
}

/// Every Neuron PCI function in sysfs (any driver), sorted by address.
pub fn neuron_functions(sys: &Sysfs) -> Result<Vec<PciFunction>, CliError> {
    Ok(select::neuron_functions(sys)?)
}

/// The arch of a PCI function, if it is a Neuron device csr-maps knows.
pub fn arch_of(f: &PciFunction) -> Option<&'static Arch> {
    select::arch_of(f)
}

/// One PCI function by address, with the error lines the CLI promises.
pub fn function(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, CliError> {
    Ok(select::function(sys, addr)?)
}

/// Where `Default` resolves to (prints the fallback notice on stderr).
pub fn resolve_default(sys: &Sysfs) -> Result<DeviceSpec, CliError> {
    let (spec, notice) = select::resolve_default(sys)?;
    if let Some(n) = notice {
        eprintln!("notice: {n}");
    }
    Ok(spec)
}

/// An opened device (device 0 of a simulated topology).
pub struct Opened {
    /// The device commands act on.
    pub dev: Device,
    /// Whether the device is simulated.
    simulated: bool,
    /// `sim:0` or the BDF.
    pub label: String,
}

impl Opened {
    /// Whether this is the simulator.
    pub fn is_sim(&self) -> bool {
        self.simulated
    }
    /// `nc` if the device has it, else the error line naming how many it has.
    pub fn check_nc(&self, nc: usize) -> Result<usize, CliError> {
        if nc < self.dev.nc_count() {
            return Ok(nc);
        }
        Err(CliError::invalid(format!(
            "NeuronCore {nc} does not exist ({} has {})",
            self.dev.arch().name,
            self.dev.nc_count()
        )))
    }
}

/// Open what `spec` names (a `Default` spec is resolved first): device 0 of a simulated
/// topology, or the PCI function through VFIO.
pub fn open(spec: &DeviceSpec, timing: SimTiming) -> Result<Opened, CliError> {
    let spec = match spec {
        DeviceSpec::Default => resolve_default(&sysfs())?,
        s => s.clone(),
    };
    let opened = select::open_platforms(&spec, timing.into())?;
    let simulated = opened.is_sim();
    let first = opened.platforms.first().cloned().ok_or_else(|| CliError::failure("no device opened"))?;
    let label = match &spec {
        DeviceSpec::Pci(a) => a.to_string(),
        _ => "sim:0".into(),
    };
    let dev = Device::open(first, DeviceOptions::default())?;
    dev.init()?;
    if simulated {
        tracing::debug!(n = opened.platforms.len(), "opened the simulator");
    } else {
        tracing::debug!(bdf = %label, "opened through VFIO");
    }
    Ok(Opened { dev, simulated, label })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::NrtStatus;

    #[test]
    fn bad_specs_are_invalid_input() {
        assert_eq!(parse(Some("sim:cayman")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::CAYMAN, n: 1 }));
        for bad in ["sim:inf1", "sim:sunda:17", "gpu0"] {
            assert_eq!(parse(Some(bad)).err().map(|e| e.status), Some(NrtStatus::Invalid), "{bad}");
        }
    }
}
