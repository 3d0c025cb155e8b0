//! Which device `nrt_init` opens: `NEURON_VFIO_DEVICE=sim[:ARCH[:N]] | <PCI BDF>`; unset, the
//! first Neuron device bound to vfio-pci, else the simulator — the same choice as the CLI's
//! `--device` (cli/src/device.rs), reproduced here because the CLI is a binary crate.
//!
//! Other knobs, as in the CLI: `NEURON_VFIO_SYSFS` (sysfs root, default `/sys`),
//! `NEURON_VFIO_DEVDIR` (device-node root, default `/dev`) and, for the simulator,
//! `NEURON_VFIO_SIM_TIMING=inline|threaded` (default `inline`).

use std::path::PathBuf;
use std::sync::Arc;

use csr_maps::Arch;
use neff::NrtStatus;
use platform::Platform;
use runtime::RtError;
use sim::{SimConfig, SimTopology, Timing};
use vfio::{Filter, PciAddress, PciFunction, Sysfs};

/// The device-selection environment variable.
pub const DEVICE_VAR: &str = "NEURON_VFIO_DEVICE";
/// The simulator-timing environment variable.
pub const SIM_TIMING_VAR: &str = "NEURON_VFIO_SIM_TIMING";

const VFIO_PCI: &str = "vfio-pci";

/// What `NEURON_VFIO_DEVICE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Unset: the first Neuron device on vfio-pci, else the simulator.
    Default,
    /// `n` simulated devices of `arch`.
    Sim { arch: &'static Arch, n: usize },
    /// One PCI function through VFIO.
    Pci(PciAddress),
}

fn invalid(msg: impl Into<String>) -> RtError {
    RtError::new(NrtStatus::Invalid, msg)
}

impl DeviceSpec {
    /// Parse a `NEURON_VFIO_DEVICE` value (None or empty = [`DeviceSpec::Default`]).
    pub fn parse(s: Option<&str>) -> Result<Self, RtError> {
        let s = match s.map(str::trim) {
            None | Some("") => return Ok(Self::Default),
            Some(s) => s,
        };
        if s == "sim" || s.starts_with("sim:") {
            let mut it = s.split(':').skip(1);
            let arch = match it.next() {
                None | Some("") => &csr_maps::SUNDA,
                Some(a) => Arch::by_name(a).map_err(|e| invalid(format!("{DEVICE_VAR}={s}: {e}")))?,
            };
            let n = match it.next() {
                None => 1,
                Some(n) => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| invalid(format!("{DEVICE_VAR}={s}: bad device count `{n}` (1 to 16)")))?,
            };
            if it.next().is_some() {
                return Err(invalid(format!("{DEVICE_VAR}={s}: expected sim[:ARCH[:N]] or a PCI address")));
            }
            return Ok(Self::Sim { arch, n });
        }
        s.parse::<PciAddress>()
            .map(Self::Pci)
            .map_err(|_| invalid(format!("{DEVICE_VAR}={s}: expected sim[:ARCH[:N]] or a PCI address")))
    }

    /// The spec named by the environment.
    pub fn from_env() -> Result<Self, RtError> {
        match std::env::var(DEVICE_VAR) {
            Ok(v) => Self::parse(Some(&v)),
            Err(std::env::VarError::NotPresent) => Ok(Self::Default),
            Err(std::env::VarError::NotUnicode(_)) => Err(invalid(format!("{DEVICE_VAR} is not UTF-8"))),
        }
    }

    /// [`DeviceSpec::Default`] resolved against sysfs; other specs unchanged.
    pub fn resolve(self) -> Result<Self, RtError> {
        match self {
            Self::Default => resolve_default(&sysfs()),
            s => Ok(s),
        }
    }

    /// NeuronCores behind this (resolved) spec, without opening anything.
    pub fn nc_count(&self) -> Result<usize, RtError> {
        match self {
            Self::Default => self.clone().resolve()?.nc_count(),
            Self::Sim { arch, n } => Ok(arch.counts.ncs as usize * n),
            Self::Pci(addr) => {
                let f = function(&sysfs(), *addr)?;
                let arch = arch_of(&f).ok_or_else(|| invalid(format!("{addr} is not a Neuron device")))?;
                Ok(arch.counts.ncs as usize)
            }
        }
    }

    /// Open the platforms (every device of a simulated topology).
    pub fn platforms(&self) -> Result<Vec<Arc<dyn Platform>>, RtError> {
        match self {
            Self::Default => self.clone().resolve()?.platforms(),
            Self::Sim { arch, n } => {
                let cfg = SimConfig::new(arch).timing(sim_timing()?);
                let topo = SimTopology::new(cfg, *n).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?;
                Ok(topo.devices.into_iter().map(|d| Arc::new(d) as Arc<dyn Platform>).collect())
            }
            Self::Pci(addr) => {
                let sys = sysfs();
                let f = check_usable(&sys, *addr)?;
                let opts = vfio::OpenOptions { sysfs: sys.clone(), dev: dev_dir(), ..Default::default() };
                let p = vfio::VfioPlatform::open(f.address, &opts)
                    .map_err(|e| RtError::new(NrtStatus::Failure, format!("{addr}: {e}")))?;
                Ok(vec![Arc::new(p) as Arc<dyn Platform>])
            }
        }
    }
}

fn sim_timing() -> Result<Timing, RtError> {
    match std::env::var(SIM_TIMING_VAR).as_deref() {
        Err(_) | Ok("") | Ok("inline") => Ok(Timing::Inline),
        Ok("threaded") => Ok(Timing::Threaded),
        Ok(v) => Err(invalid(format!("{SIM_TIMING_VAR}={v}: expected inline or threaded"))),
    }
}

fn sysfs() -> Sysfs {
    Sysfs::new(std::env::var_os("NEURON_VFIO_SYSFS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/sys")))
}

fn dev_dir() -> PathBuf {
    std::env::var_os("NEURON_VFIO_DEVDIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/dev"))
}

fn arch_of(f: &PciFunction) -> Option<&'static Arch> {
    Arch::by_pci_id(f.vendor, f.device)
}

fn function(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, RtError> {
    sys.function(addr).map_err(|e| match e {
        vfio::Error::NoSuchDevice(_) => invalid(format!("no PCI device {addr}")),
        e => RtError::new(NrtStatus::Failure, format!("{addr}: {e}")),
    })
}

/// Every Neuron PCI function in sysfs (any driver), sorted by address.
fn neuron_functions(sys: &Sysfs) -> Result<Vec<PciFunction>, RtError> {
    if !sys.root().join("bus/pci/devices").is_dir() {
        return Ok(Vec::new());
    }
    let mut vendors: Vec<u16> = csr_maps::ARCHES.iter().map(|a| a.pci_vendor).collect();
    vendors.sort_unstable();
    vendors.dedup();
    let mut out = Vec::new();
    for v in vendors {
        out.extend(sys.find(&Filter::ids(v, None)).map_err(|e| RtError::new(NrtStatus::Failure, e.to_string()))?);
    }
    out.sort_by_key(|f| f.address);
    Ok(out)
}

fn resolve_default(sys: &Sysfs) -> Result<DeviceSpec, RtError> {
    let fs = neuron_functions(sys)?;
    if let Some(f) = fs.iter().find(|f| f.driver.as_deref() == Some(VFIO_PCI) && arch_of(f).is_some()) {
        tracing::info!(bdf = %f.address, "using the first Neuron device bound to vfio-pci");
        return Ok(DeviceSpec::Pci(f.address));
    }
    tracing::info!(found = fs.len(), "no Neuron device on vfio-pci; using the simulator");
    Ok(DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 1 })
}

/// The function exists, is a Neuron device bound to vfio-pci, VFIO is usable.
fn check_usable(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, RtError> {
    let f = function(sys, addr)?;
    if arch_of(&f).is_none() {
        return Err(invalid(format!("{addr} is not a Neuron device (PCI id {:04x}:{:04x})", f.vendor, f.device)));
    }
    match f.driver.as_deref() {
        Some(VFIO_PCI) => {}
        Some(d) => {
            return Err(RtError::new(NrtStatus::Failure, format!("{addr} is bound to {d}, not {VFIO_PCI}")));
        }
        None => return Err(RtError::new(NrtStatus::Failure, format!("{addr} is not bound to {VFIO_PCI}"))),
    }
    let fail = |e: vfio::Error| RtError::new(NrtStatus::Failure, format!("{addr}: {e}"));
    vfio::check_vfio_available(sys, &dev_dir()).map_err(fail)?;
    sys.check_group_viable(addr).map_err(fail)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(DeviceSpec::parse(None).ok(), Some(DeviceSpec::Default));
        assert_eq!(DeviceSpec::parse(Some("")).ok(), Some(DeviceSpec::Default));
        assert_eq!(DeviceSpec::parse(Some("sim")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 1 }));
        assert_eq!(DeviceSpec::parse(Some("sim:cayman")).ok(), Some(DeviceSpec::Sim { arch: &csr_maps::CAYMAN, n: 1 }));
        assert_eq!(
            DeviceSpec::parse(Some("sim:mariana:2")).ok(),
            Some(DeviceSpec::Sim { arch: &csr_maps::MARIANA, n: 2 })
        );
        assert!(matches!(DeviceSpec::parse(Some("0000:3b:00.1")), Ok(DeviceSpec::Pci(_))));
        for bad in ["sim:inf1", "sim:sunda:0", "sim:sunda:17", "sim:sunda:2:1", "gpu0"] {
            let e = DeviceSpec::parse(Some(bad)).err().map(|e| e.status);
            assert_eq!(e, Some(NrtStatus::Invalid), "{bad}");
        }
    }

    #[test]
    fn sim_nc_count_without_opening() {
        let s = DeviceSpec::Sim { arch: &csr_maps::SUNDA, n: 2 };
        assert_eq!(s.nc_count().ok(), Some(csr_maps::SUNDA.counts.ncs as usize * 2));
    }
}
