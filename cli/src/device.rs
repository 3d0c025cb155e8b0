//! Device selection and opening: `--device sim[:ARCH[:N]] | <PCI BDF>`; without it, the
//! first Neuron device bound to vfio-pci, else the simulator (with a notice on stderr).
//!
//! Environment (for fabricated trees in tests and for appliance images):
//! - `NEURON_VFIO_SYSFS`: sysfs root (default `/sys`);
//! - `NEURON_VFIO_DEVDIR`: device-node root checked for VFIO (default `/dev`);
//! - `NEURON_VFIO_STATE_DIR`: where `bind` records the driver it replaced (default
//!   `/run/neuron-vfio`).

use std::path::PathBuf;
use std::sync::Arc;

use csr_maps::Arch;
use hal::{Device, DeviceOptions};
use sim::{SimConfig, SimDevice, SimTopology, Timing};
use vfio::{Filter, PciAddress, PciFunction, Sysfs};

use crate::report::CliError;
#[cfg(test)]
use crate::report::NrtStatus;

/// The driver a device must be bound to for this tool.
pub const VFIO_PCI: &str = "vfio-pci";

/// What `--device` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Nothing: the first Neuron device on vfio-pci, else the simulator.
    Default,
    /// `sim[:ARCH[:N]]`: a topology of `n` simulated devices.
    Sim { arch: &'static Arch, n: usize },
    /// A PCI function.
    Pci(PciAddress),
}

impl DeviceSpec {
    /// Parse the `--device` value.
    pub fn parse(s: Option<&str>) -> Result<Self, CliError> {
        let Some(s) = s.map(str::trim) else { return Ok(Self::Default) };
        if s == "sim" || s.starts_with("sim:") {
            let mut it = s.split(':').skip(1);
            let arch = match it.next() {
                None | Some("") => &csr_maps::SUNDA,
                Some(a) => Arch::by_name(a)?,
            };
            let n = match it.next() {
                None => 1,
                Some(n) => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| CliError::invalid(format!("bad device count `{n}` in `{s}` (1 to 16)")))?,
            };
            if it.next().is_some() {
                return Err(CliError::invalid(format!("bad device `{s}`: expected sim[:ARCH[:N]] or a PCI address")));
            }
            return Ok(Self::Sim { arch, n });
        }
        s.parse::<PciAddress>().map(Self::Pci).map_err(|_| {
            CliError::invalid(format!(
                "bad device `{s}`: expected sim[:ARCH[:N]] or a PCI address (DDDD:BB:DD.F or BB:DD.F)"
            ))
        })
    }
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

impl From<SimTiming> for Timing {
    fn from(t: SimTiming) -> Self {
        match t {
            SimTiming::Inline => Timing::Inline,
            SimTiming::Threaded => Timing::Threaded,
        }
    }
}

/// The sysfs tree to use.
pub fn sysfs() -> Sysfs {
    Sysfs::new(std::env::var_os("NEURON_VFIO_SYSFS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/sys")))
}

/// The /dev root to check for VFIO nodes.
pub fn dev_dir() -> PathBuf {
    std::env::var_os("NEURON_VFIO_DEVDIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/dev"))
}

/// Vendor IDs of the arches csr-maps knows.
fn neuron_vendors() -> Vec<u16> {
    let mut v: Vec<u16> = csr_maps::ARCHES.iter().map(|a| a.pci_vendor).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every Neuron PCI function in sysfs (any driver), sorted by address. A sysfs without a
/// PCI bus (a container) has none.
pub fn neuron_functions(sys: &Sysfs) -> Result<Vec<PciFunction>, CliError> {
    if !sys.root().join("bus/pci/devices").is_dir() {
        tracing::debug!(root = %sys.root().display(), "no PCI bus in sysfs");
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for v in neuron_vendors() {
        out.extend(sys.find(&Filter::ids(v, None)).map_err(CliError::failure)?);
    }
    out.sort_by_key(|f| f.address);
    Ok(out)
}

/// The arch of a PCI function, if it is a Neuron device csr-maps knows.
pub fn arch_of(f: &PciFunction) -> Option<&'static Arch> {
    Arch::by_pci_id(f.vendor, f.device)
}

/// One PCI function by address, with the error lines the CLI promises.
pub fn function(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, CliError> {
    match sys.function(addr) {
        Ok(f) => Ok(f),
        Err(vfio::Error::NoSuchDevice(_)) => {
            Err(CliError::invalid(format!("no PCI device {addr} (nothing at {})", sys.device_path(addr).display())))
        }
        Err(e) => Err(CliError::failure(e)),
    }
}

/// Where `Default` resolves to.
pub fn resolve_default(sys: &Sysfs) -> Result<DeviceSpec, CliError> {
    let fs = neuron_functions(sys)?;
    if let Some(f) = fs.iter().find(|f| f.driver.as_deref() == Some(VFIO_PCI) && arch_of(f).is_some()) {
        tracing::info!(bdf = %f.address, "using the first Neuron device bound to vfio-pci");
        return Ok(DeviceSpec::Pci(f.address));
    }
    let why = if fs.is_empty() {
        "no Neuron device found".to_string()
    } else {
        format!("{} Neuron device(s) found, none bound to vfio-pci (neuron-vfio bind <BDF>)", fs.len())
    };
    eprintln!("notice: {why}; using the simulator (--device sim)");
    Ok(DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 1 })
}

/// An opened device (device 0 of a simulated topology).
pub struct Opened {
    /// The device commands act on.
    pub dev: Device,
    /// The simulated devices (empty on VFIO); kept alive for the device's lifetime.
    pub sims: Vec<SimDevice>,
    /// `sim:0` or the BDF.
    pub label: String,
}

impl Opened {
    /// Whether this is the simulator.
    pub fn is_sim(&self) -> bool {
        !self.sims.is_empty()
    }
}

/// Open what `spec` names (a `Default` spec is resolved first).
pub fn open(spec: &DeviceSpec, timing: SimTiming) -> Result<Opened, CliError> {
    match spec {
        DeviceSpec::Default => open(&resolve_default(&sysfs())?, timing),
        DeviceSpec::Sim { arch, n } => {
            let topo = SimTopology::new(SimConfig::new(arch).timing(timing.into()), *n).map_err(CliError::failure)?;
            let first = topo.devices.first().cloned().ok_or_else(|| CliError::failure("empty simulated topology"))?;
            let dev = Device::open(Arc::new(first), DeviceOptions::default())?;
            dev.init()?;
            tracing::debug!(arch = arch.name, n, "opened the simulator");
            Ok(Opened { dev, sims: topo.devices, label: "sim:0".into() })
        }
        DeviceSpec::Pci(addr) => {
            let sys = sysfs();
            let (f, _arch) = check_usable(&sys, *addr)?;
            let opts = vfio::OpenOptions { sysfs: sys.clone(), dev: dev_dir(), ..Default::default() };
            let p =
                vfio::VfioPlatform::open(f.address, &opts).map_err(|e| CliError::failure(format!("{addr}: {e}")))?;
            let dev = Device::open(Arc::new(p), DeviceOptions::default())?;
            dev.init()?;
            tracing::debug!(bdf = %addr, "opened through VFIO");
            Ok(Opened { dev, sims: Vec::new(), label: addr.to_string() })
        }
    }
}

/// Everything checkable before opening a PCI function: it exists, is a Neuron device,
/// is bound to vfio-pci, VFIO is there and its IOMMU group is viable.
pub fn check_usable(sys: &Sysfs, addr: PciAddress) -> Result<(PciFunction, &'static Arch), CliError> {
    let f = function(sys, addr)?;
    let arch = arch_of(&f).ok_or_else(|| {
        CliError::invalid(format!("{addr} is not a Neuron device (PCI id {:04x}:{:04x})", f.vendor, f.device))
    })?;
    match f.driver.as_deref() {
        Some(VFIO_PCI) => {}
        Some(d) => {
            return Err(CliError::failure(format!("{addr} is bound to {d}; run: neuron-vfio bind {addr}")));
        }
        None => {
            return Err(CliError::failure(format!("{addr} is not bound to any driver; run: neuron-vfio bind {addr}")));
        }
    }
    vfio::check_vfio_available(sys, &dev_dir()).map_err(CliError::failure)?;
    sys.check_group_viable(addr).map_err(CliError::failure)?;
    Ok((f, arch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(DeviceSpec::parse(None).ok(), Some(DeviceSpec::Default));
        assert_eq!(DeviceSpec::parse(Some("sim")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 1 }));
        assert_eq!(DeviceSpec::parse(Some("sim:cayman")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::CAYMAN, n: 1 }));
        assert_eq!(
            DeviceSpec::parse(Some("sim:mariana:2")).ok(),
            Some(DeviceSpec::Sim { arch: &csr_maps::MARIANA, n: 2 })
        );
        assert_eq!(DeviceSpec::parse(Some("sim::3")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 3 }));
        assert!(matches!(DeviceSpec::parse(Some("3b:00.1")), Ok(DeviceSpec::Pci(_))));
        for bad in ["sim:inf1", "sim:sunda:0", "sim:sunda:17", "sim:sunda:2:1", "0000:zz:00.0", "gpu0"] {
            let e = DeviceSpec::parse(Some(bad)).err();
            assert_eq!(e.map(|e| e.status), Some(NrtStatus::Invalid), "{bad}");
        }
    }
}
