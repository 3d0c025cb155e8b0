//! Device selection shared by every front end (the CLI's `--device`, the C ABI's
//! `NEURON_VFIO_DEVICE`): `sim[:ARCH[:N]] | <PCI BDF>`, or by default the first Neuron device
//! bound to vfio-pci, else the simulator.
//!
//! The simulator is behind the cargo feature `sim` (default on). Built without it, nothing
//! links the sim crate: a `sim` spec, and the default when no Neuron device is bound to
//! vfio-pci, are [`SelectError::NoSimulator`].
//!
//! Environment (for fabricated trees in tests and for appliance images): `NEURON_VFIO_SYSFS`
//! (sysfs root, default `/sys`) and `NEURON_VFIO_DEVDIR` (device-node root, default `/dev`).
//! `NEURON_VFIO_BACKEND` chooses the VFIO interface: `container` (legacy `/dev/vfio/vfio`),
//! `iommufd` (`/dev/iommu` + the VFIO device cdev) or `auto` (default: the container where the
//! kernel has it, else iommufd — kernels built without CONFIG_VFIO_CONTAINER), or `noiommu`:
//! the explicit, UNSAFE opt-in for hosts whose IOMMU does not translate the device (e.g. VMs
//! without a virtual IOMMU): vfio's no-IOMMU mode (loaded with enable_unsafe_noiommu_mode=1),
//! DMA at physical addresses, no isolation; a device behind a real IOMMU still uses it.
//! `NEURON_VFIO_MMIO_TRACE=FILE` traces every BAR access by name ([`trace`]).
//!
//! The libnrt front ends (`libnrt.so`'s `nrt_init`, nrtpy) take their device from the
//! environment alone: [`env`] (`NEURON_VFIO_DEVICE`, `NEURON_VFIO_SIM_TIMING`,
//! `NEURON_VFIO_SIM_FAULT`), one implementation for both.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use csr_maps::Arch;
use nrt_status::{NrtStatus, Status};
use platform::Platform;
use vfio::{Backend, Filter, PciAddress, PciFunction, Sysfs, VfioSupport};

pub mod env;
pub mod shared;
pub mod trace;
pub use trace::{mmio_trace_path, set_mmio_trace, wrap as wrap_traced, TraceSink, TracedMmio};

/// The driver a device must be bound to.
pub const VFIO_PCI: &str = "vfio-pci";

/// Why a device cannot be selected or opened. [`SelectError::status`] is the status every
/// front end reports for it (the CLI's `--json` status, libnrt.so's `nrt_init` return).
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The selection (`--device` / `NEURON_VFIO_DEVICE`) does not parse.
    #[error("bad device `{spec}`: {problem}")]
    BadSpec { spec: String, problem: SpecProblem },
    /// Nothing sits at that PCI address.
    #[error("no PCI device {addr} (nothing at {})", path.display())]
    NoSuchDevice { addr: PciAddress, path: PathBuf },
    /// The PCI function is not a Neuron device csr-maps knows.
    #[error("{addr} is not a Neuron device (PCI id {vendor:04x}:{device:04x})")]
    NotNeuron { addr: PciAddress, vendor: u16, device: u16 },
    /// The device is bound to another driver than vfio-pci.
    #[error("{addr} is bound to {driver}; run: neuron-vfio bind {addr}")]
    BoundToOther { addr: PciAddress, driver: String },
    /// The device is bound to no driver.
    #[error("{addr} is not bound to any driver; run: neuron-vfio bind {addr}")]
    Unbound { addr: PciAddress },
    /// `NEURON_VFIO_BACKEND` names no backend.
    #[error("NEURON_VFIO_BACKEND={requested:?}: expected auto, container, iommufd or noiommu")]
    UnknownBackend { requested: String },
    /// The VFIO interface the backend needs is missing on this host.
    #[error("{0}")]
    BackendMissing(MissingBackend),
    /// sysfs or VFIO failed (discovery, availability, group viability, open); `addr` is the
    /// device when one was named.
    #[error("{}{source}", addr.map(|a| format!("{a}: ")).unwrap_or_default())]
    Vfio {
        addr: Option<PciAddress>,
        #[source]
        source: vfio::Error,
    },
    /// The simulator could not be created.
    #[cfg(feature = "sim")]
    #[error("simulator: {0}")]
    Simulator(#[source] sim::SimError),
    /// The broker refused or failed a request for a shared device (docs/sharing.md).
    #[error("{0}")]
    Broker(#[source] Box<broker_client::ClientError>),
    /// A shared device's cores or data path cannot be set up as asked.
    #[error("shared device: {0}")]
    SharedCores(String),
    /// The MMIO trace file (`NEURON_VFIO_MMIO_TRACE`) cannot be created.
    #[error("MMIO trace {}: {source}", path.display())]
    Trace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The simulator was selected (or is the only fallback: the reason is given) but this
    /// build has no simulator (the `sim` cargo feature is off).
    #[error("{0}: built without the simulator (cargo feature `sim`)")]
    NoSimulator(String),
}

impl SelectError {
    /// The `NRT_STATUS` every front end reports: a selection that names something malformed
    /// or absent (or a simulator this build lacks) is NRT_INVALID; a device that exists but
    /// cannot be used (binding, VFIO, IOMMU group, open failure) is NRT_FAILURE. Exhaustive:
    /// a new variant must choose.
    pub fn status(&self) -> NrtStatus {
        match self {
            SelectError::BadSpec { .. }
            | SelectError::NoSuchDevice { .. }
            | SelectError::NotNeuron { .. }
            | SelectError::UnknownBackend { .. }
            | SelectError::Trace { .. }
            | SelectError::NoSimulator(_) => NrtStatus::Invalid,
            SelectError::BoundToOther { .. }
            | SelectError::Unbound { .. }
            | SelectError::BackendMissing(_)
            | SelectError::Vfio { .. } => NrtStatus::Failure,
            #[cfg(feature = "sim")]
            SelectError::Simulator(_) => NrtStatus::Failure,
            SelectError::Broker(e) => e.status(),
            SelectError::SharedCores(_) => NrtStatus::Failure,
        }
    }
}

impl Status for SelectError {
    fn status(&self) -> NrtStatus {
        SelectError::status(self)
    }
}

/// Why a device selection does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecProblem {
    /// `sim:ARCH` names no arch.
    #[error("{0}")]
    Arch(csr_maps::CsrError),
    /// `sim:ARCH:N` with N outside 1..=16.
    #[error("device count `{0}` is not 1 to 16")]
    Count(String),
    /// More fields than `sim[:shared][:ARCH[:N]]`.
    #[error("expected sim[:shared][:ARCH[:N]] or a PCI address")]
    TrailingFields,
    /// Neither a simulator spec nor a PCI address.
    #[error("expected sim[:ARCH[:N]] or a PCI address (DDDD:BB:DD.F or BB:DD.F)")]
    NotAnAddress,
}

/// Which VFIO interface a backend needs and the host lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MissingBackend {
    /// Neither the container nor iommufd (auto).
    #[error("neither /dev/vfio/vfio nor /dev/iommu exists: modprobe vfio-pci (and iommufd)")]
    Any,
    /// `NEURON_VFIO_BACKEND=container` without `/dev/vfio/vfio`.
    #[error(
        "NEURON_VFIO_BACKEND=container but /dev/vfio/vfio is missing (kernel without \
         CONFIG_VFIO_CONTAINER, or vfio not loaded); use iommufd or auto"
    )]
    Container,
    /// `NEURON_VFIO_BACKEND=iommufd` without `/dev/iommu`.
    #[error(
        "NEURON_VFIO_BACKEND=iommufd but /dev/iommu is missing (modprobe iommufd; the kernel \
         needs CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV)"
    )]
    Iommufd,
    /// `NEURON_VFIO_BACKEND=noiommu` without `/dev/vfio/vfio`.
    #[error(
        "NEURON_VFIO_BACKEND=noiommu needs /dev/vfio/vfio: modprobe vfio enable_unsafe_noiommu_mode=1 \
         && modprobe vfio-pci"
    )]
    NoIommu,
}

/// How the simulator runs device work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimTiming {
    /// Device work runs inside the MMIO write that triggers it (deterministic, no thread
    /// wake-ups).
    #[default]
    Inline,
    /// One device thread per NeuronCore.
    Threaded,
}

#[cfg(feature = "sim")]
impl From<SimTiming> for sim::Timing {
    fn from(t: SimTiming) -> Self {
        match t {
            SimTiming::Inline => sim::Timing::Inline,
            SimTiming::Threaded => sim::Timing::Threaded,
        }
    }
}

/// Whether this build includes the simulator (cargo feature `sim`).
pub const HAS_SIMULATOR: bool = cfg!(feature = "sim");

/// A device selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// Nothing given: the first Neuron device on vfio-pci, else the simulator.
    Default,
    /// `sim[:ARCH[:N]]`: a topology of `n` simulated devices, private to this process.
    Sim { arch: &'static Arch, n: usize },
    /// `sim:shared[:ARCH[:N]]`: devices 0..n of the host's shared simulated devices of `arch`
    /// (one set per host and user), reached through the broker (docs/sharing.md).
    SimShared { arch: &'static Arch, n: usize },
    /// A PCI function through VFIO.
    Pci(PciAddress),
}

impl Spec {
    /// Parse a selection (None or empty = [`Spec::Default`]).
    pub fn parse(s: Option<&str>) -> Result<Self, SelectError> {
        let s = match s.map(str::trim) {
            None | Some("") => return Ok(Self::Default),
            Some(s) => s,
        };
        let bad = |problem: SpecProblem| SelectError::BadSpec { spec: s.to_string(), problem };
        if s == "sim" || s.starts_with("sim:") {
            let mut it = s.split(':').skip(1).peekable();
            let shared = it.next_if_eq(&"shared").is_some();
            let arch = match it.next() {
                None | Some("") => &csr_maps::SUNDA,
                Some(a) => Arch::by_name(a).map_err(|e| bad(SpecProblem::Arch(e)))?,
            };
            let n = match it.next() {
                None => 1,
                Some(n) => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| bad(SpecProblem::Count(n.to_string())))?,
            };
            if it.next().is_some() {
                return Err(bad(SpecProblem::TrailingFields));
            }
            if !HAS_SIMULATOR {
                return Err(SelectError::NoSimulator(format!("device `{s}`")));
            }
            return Ok(if shared { Self::SimShared { arch, n } } else { Self::Sim { arch, n } });
        }
        s.parse::<PciAddress>().map(Self::Pci).map_err(|_| bad(SpecProblem::NotAnAddress))
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

/// The arch of a PCI function, if it is a Neuron device csr-maps knows.
pub fn arch_of(f: &PciFunction) -> Option<&'static Arch> {
    Arch::by_pci_id(f.vendor, f.device)
}

/// Every Neuron PCI function in sysfs (any driver), sorted by address. A sysfs without a PCI
/// bus (a container) has none.
pub fn neuron_functions(sys: &Sysfs) -> Result<Vec<PciFunction>, SelectError> {
    if !sys.root().join("bus/pci/devices").is_dir() {
        return Ok(Vec::new());
    }
    let mut vendors: Vec<u16> = csr_maps::ARCHES.iter().map(|a| a.pci_vendor).collect();
    vendors.sort_unstable();
    vendors.dedup();
    let mut out = Vec::new();
    for v in vendors {
        out.extend(sys.find(&Filter::ids(v, None)).map_err(|source| SelectError::Vfio { addr: None, source })?);
    }
    out.sort_by_key(|f| f.address);
    Ok(out)
}

/// One PCI function by address.
pub fn function(sys: &Sysfs, addr: PciAddress) -> Result<PciFunction, SelectError> {
    match sys.function(addr) {
        Ok(f) => Ok(f),
        Err(vfio::Error::NoSuchDevice(_)) => Err(SelectError::NoSuchDevice { addr, path: sys.device_path(addr) }),
        Err(source) => Err(SelectError::Vfio { addr: Some(addr), source }),
    }
}

/// What [`Spec::Default`] resolves to, with the notice to show when it falls back to the
/// simulator (built without it: [`SelectError::NoSimulator`] naming why no device was usable).
pub fn resolve_default(sys: &Sysfs) -> Result<(Spec, Option<String>), SelectError> {
    let fs = neuron_functions(sys)?;
    if let Some(f) = fs.iter().find(|f| f.driver.as_deref() == Some(VFIO_PCI) && arch_of(f).is_some()) {
        tracing::info!(bdf = %f.address, "using the first Neuron device bound to vfio-pci");
        return Ok((Spec::Pci(f.address), None));
    }
    let why = if fs.is_empty() {
        "no Neuron device found".to_string()
    } else {
        format!("{} Neuron device(s) found, none bound to vfio-pci (neuron-vfio bind <BDF>)", fs.len())
    };
    if !HAS_SIMULATOR {
        return Err(SelectError::NoSimulator(why));
    }
    Ok((Spec::Sim { arch: &csr_maps::SUNDA, n: 1 }, Some(format!("{why}; using the simulator (--device sim)"))))
}

/// Everything checkable before opening a PCI function: it exists, is a Neuron device, is
/// bound to vfio-pci, VFIO is there and its IOMMU group is viable.
pub fn check_usable(sys: &Sysfs, addr: PciAddress) -> Result<(PciFunction, &'static Arch), SelectError> {
    let f = function(sys, addr)?;
    let arch = arch_of(&f).ok_or(SelectError::NotNeuron { addr, vendor: f.vendor, device: f.device })?;
    match f.driver.as_deref() {
        Some(VFIO_PCI) => {}
        Some(d) => return Err(SelectError::BoundToOther { addr, driver: d.to_string() }),
        None => return Err(SelectError::Unbound { addr }),
    }
    vfio::check_vfio_available(sys, &dev_dir()).map_err(|source| SelectError::Vfio { addr: None, source })?;
    sys.check_group_viable(addr).map_err(|source| SelectError::Vfio { addr: None, source })?;
    Ok((f, arch))
}

/// The VFIO backend for `requested` (`NEURON_VFIO_BACKEND`: None or `auto`, `container`,
/// `iommufd`, `noiommu`) given what the system offers, and whether no-IOMMU mode is allowed.
pub fn choose_backend(requested: Option<&str>, support: &VfioSupport) -> Result<(Backend, bool), SelectError> {
    let missing = |m: MissingBackend| Err(SelectError::BackendMissing(m));
    match requested.map(str::trim) {
        None | Some("") | Some("auto") if support.container => Ok((Backend::Container, false)),
        None | Some("") | Some("auto") if support.iommufd => Ok((Backend::Iommufd, false)),
        None | Some("") | Some("auto") => missing(MissingBackend::Any),
        Some("container") if support.container => Ok((Backend::Container, false)),
        Some("container") => missing(MissingBackend::Container),
        Some("iommufd") if support.iommufd => Ok((Backend::Iommufd, false)),
        Some("iommufd") => missing(MissingBackend::Iommufd),
        // vfio picks no-IOMMU mode only for a device no IOMMU translates (and refuses it
        // unless vfio was loaded with enable_unsafe_noiommu_mode=1); others use the container.
        Some("noiommu") if support.container => Ok((Backend::Container, true)),
        Some("noiommu") => missing(MissingBackend::NoIommu),
        Some(other) => Err(SelectError::UnknownBackend { requested: other.to_string() }),
    }
}

/// Platforms to hand to a driver or runtime, and the simulators among them.
pub struct Opened {
    /// One per device: every device of a simulated topology, or the VFIO device; on shared
    /// devices, the devices this process leased cores on.
    pub platforms: Vec<Arc<dyn Platform>>,
    /// The simulated devices behind `platforms` (empty on VFIO and on shared devices, which
    /// live in the broker), for fault injection and statistics.
    #[cfg(feature = "sim")]
    pub sims: Vec<sim::SimDevice>,
    /// Shared devices: the broker session and this process's leases (given back when
    /// dropped, after the platforms).
    pub shared: Option<shared::SharedLease>,
}

/// What a process owns of a shared device (for `hal::DeviceOptions::owned_ncs`,
/// `hbm_ranges` and `firmware_gate`).
#[derive(Clone)]
pub struct Ownership {
    /// Leased NCs (device-local).
    pub ncs: std::ops::Range<usize>,
    /// Device memory granted: (HBM channel, device address, bytes).
    pub hbm: Vec<(usize, u64, u64)>,
    /// The device's firmware mailbox, reached through the broker.
    pub firmware: Arc<dyn hal::FirmwareGate>,
}

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership").field("ncs", &self.ncs).field("hbm", &self.hbm).finish_non_exhaustive()
    }
}

impl Opened {
    /// What this process owns of platform `i` when it is a shared device (`None`: the
    /// device is the process's alone).
    pub fn ownership(&self, i: usize) -> Option<Ownership> {
        let l = self.shared.as_ref()?;
        l.devices.get(i).map(|d| Ownership { ncs: d.ncs.clone(), hbm: d.hbm.clone(), firmware: l.firmware(d) })
    }

    /// On shared devices, the leased cores as the runtime numbers them (its visible cores).
    pub fn leased_cores(&self) -> Option<Vec<usize>> {
        self.shared.as_ref().map(|l| l.visible_cores())
    }

    /// Whether the platforms are simulated devices.
    pub fn is_sim(&self) -> bool {
        #[cfg(feature = "sim")]
        return !self.sims.is_empty();
        #[cfg(not(feature = "sim"))]
        return false;
    }

    /// The simulated device serving global NC `global` (devices in order, each with its arch's
    /// NC count) and the NC's index on it — where a `KIND@ncN` fault spec is armed.
    #[cfg(feature = "sim")]
    pub fn sim_of_nc(&self, global: usize) -> Option<(&sim::SimDevice, usize)> {
        let mut base = 0;
        for s in &self.sims {
            let n = s.arch().counts.ncs as usize;
            if global < base + n {
                return Some((s, global - base));
            }
            base += n;
        }
        None
    }
}

/// Open the platforms behind a resolved `spec` (every device of a simulated topology) and
/// the simulators among them. `Spec::Default` is resolved first (its notice is logged). On a
/// shared device (`sim:shared…`, or a VFIO device while a broker runs) every core is leased.
pub fn open_platforms(spec: &Spec, timing: SimTiming) -> Result<Opened, SelectError> {
    open_reserving(spec, timing, &Reserve::All, None)
}

/// A VFIO device: through the broker when one runs (it owns the device; docs/sharing.md),
/// else opened by this process alone.
fn open_pci(addr: PciAddress, reserve: &Reserve, lnc: Option<u32>) -> Result<Opened, SelectError> {
    let sys = sysfs();
    let (f, arch) = check_usable(&sys, addr)?;
    if let Some(session) = shared::running_broker()? {
        tracing::info!(bdf = %f.address, broker = session.broker_pid(), "opening through the broker");
        let (platforms, lease) = shared::open_pci(session, arch, f.address, reserve, lnc)?;
        return traced(Opened {
            platforms,
            #[cfg(feature = "sim")]
            sims: Vec::new(),
            shared: Some(lease),
        });
    }
    let dev = dev_dir();
    let requested = std::env::var("NEURON_VFIO_BACKEND").ok();
    let (backend, allow_noiommu) = choose_backend(requested.as_deref(), &vfio::probe_support(&sys, &dev))?;
    tracing::info!(bdf = %f.address, %backend, allow_noiommu, "opening through VFIO");
    let opts = vfio::OpenOptions { backend, sysfs: sys.clone(), dev, allow_noiommu, ..Default::default() };
    let p =
        vfio::VfioPlatform::open(f.address, &opts).map_err(|source| SelectError::Vfio { addr: Some(addr), source })?;
    traced(Opened {
        platforms: vec![Arc::new(p) as Arc<dyn Platform>],
        #[cfg(feature = "sim")]
        sims: Vec::new(),
        shared: None,
    })
}

/// The opened platforms, wrapped for the MMIO trace when one is configured ([`trace`]).
fn traced(mut o: Opened) -> Result<Opened, SelectError> {
    o.platforms = trace::wrap(o.platforms)?;
    Ok(o)
}

#[cfg(feature = "sim")]
fn open_sim(arch: &'static Arch, n: usize, timing: SimTiming) -> Result<Opened, SelectError> {
    let topo =
        sim::SimTopology::new(sim::SimConfig::new(arch).timing(timing.into()), n).map_err(SelectError::Simulator)?;
    let platforms = topo.devices.iter().map(|d| Arc::new(d.clone()) as Arc<dyn Platform>).collect();
    Ok(Opened { platforms, sims: topo.devices, shared: None })
}

/// Which cores a process reserves on shared devices (libnrt's `nrt_init`): every core
/// unless a count or a range is named.
pub use shared::Reserve;

/// [`open_platforms`], reserving `reserve` when the spec names shared devices (`nrt_init`:
/// `NEURON_RT_VISIBLE_CORES`, else `NEURON_RT_NUM_CORES`, else all). `reserve` counts logical
/// NeuronCores of the size `lnc` asks for (None: the arch's default; a size the arch does not
/// have leases physical cores, and the runtime's init refuses the size).
pub fn open_reserving(
    spec: &Spec,
    timing: SimTiming,
    reserve: &Reserve,
    lnc: Option<u32>,
) -> Result<Opened, SelectError> {
    match spec {
        Spec::Default => {
            let (s, notice) = resolve_default(&sysfs())?;
            if let Some(n) = notice {
                tracing::info!("{n}");
            }
            open_reserving(&s, timing, reserve, lnc)
        }
        Spec::Sim { arch, n } => open_sim(arch, *n, timing).and_then(traced),
        #[cfg(feature = "sim")]
        Spec::SimShared { arch, n } => {
            let (platforms, lease) = shared::open(arch, *n, reserve, lnc)?;
            traced(Opened { platforms, sims: Vec::new(), shared: Some(lease) })
        }
        #[cfg(not(feature = "sim"))]
        Spec::SimShared { arch, n } => Err(SelectError::NoSimulator(format!("device `sim:shared:{}:{n}`", arch.name))),
        Spec::Pci(addr) => open_pci(*addr, reserve, lnc),
    }
}

#[cfg(not(feature = "sim"))]
fn open_sim(arch: &'static Arch, n: usize, _timing: SimTiming) -> Result<Opened, SelectError> {
    Err(SelectError::NoSimulator(format!("device `sim:{}:{n}`", arch.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "sim")]
    #[test]
    fn parses_specs() {
        assert_eq!(Spec::parse(None).ok(), Some(Spec::Default));
        assert_eq!(Spec::parse(Some(" ")).ok(), Some(Spec::Default));
        assert_eq!(Spec::parse(Some("sim")).ok(), Some(Spec::Sim { arch: &csr_maps::SUNDA, n: 1 }));
        assert_eq!(Spec::parse(Some("sim:cayman")).ok(), Some(Spec::Sim { arch: &csr_maps::CAYMAN, n: 1 }));
        assert_eq!(Spec::parse(Some("sim:mariana:2")).ok(), Some(Spec::Sim { arch: &csr_maps::MARIANA, n: 2 }));
        assert_eq!(Spec::parse(Some("sim::3")).ok(), Some(Spec::Sim { arch: &csr_maps::SUNDA, n: 3 }));
        assert_eq!(Spec::parse(Some("sim:shared")).ok(), Some(Spec::SimShared { arch: &csr_maps::SUNDA, n: 1 }));
        assert_eq!(
            Spec::parse(Some("sim:shared:cayman:2")).ok(),
            Some(Spec::SimShared { arch: &csr_maps::CAYMAN, n: 2 })
        );
        assert!(matches!(Spec::parse(Some("3b:00.1")), Ok(Spec::Pci(_))));
        for bad in [
            "sim:inf1",
            "sim:sunda:0",
            "sim:sunda:17",
            "sim:sunda:2:1",
            "sim:shared:cayman:2:1",
            "sim:shared:shared",
            "0000:zz:00.0",
            "gpu0",
        ] {
            assert!(matches!(Spec::parse(Some(bad)), Err(SelectError::BadSpec { .. })), "{bad}");
        }
    }

    #[test]
    fn chooses_the_vfio_backend() {
        let s = |container, iommufd| VfioSupport { container, iommufd, vfio_pci: true };
        assert_eq!(choose_backend(None, &s(true, true)).ok(), Some((Backend::Container, false)));
        assert_eq!(choose_backend(Some("auto"), &s(false, true)).ok(), Some((Backend::Iommufd, false)));
        assert_eq!(choose_backend(Some("iommufd"), &s(true, true)).ok(), Some((Backend::Iommufd, false)));
        assert_eq!(choose_backend(Some("container"), &s(true, false)).ok(), Some((Backend::Container, false)));
        assert_eq!(choose_backend(Some("noiommu"), &s(true, false)).ok(), Some((Backend::Container, true)));
        let missing = |r: Result<(Backend, bool), SelectError>| match r {
            Err(SelectError::BackendMissing(m)) => Some(m),
            _ => None,
        };
        assert_eq!(missing(choose_backend(Some("noiommu"), &s(false, true))), Some(MissingBackend::NoIommu));
        assert_eq!(missing(choose_backend(None, &s(false, false))), Some(MissingBackend::Any));
        assert_eq!(missing(choose_backend(Some("container"), &s(false, true))), Some(MissingBackend::Container));
        assert!(MissingBackend::Container.to_string().contains("CONFIG_VFIO_CONTAINER"));
        assert_eq!(missing(choose_backend(Some("iommufd"), &s(true, false))), Some(MissingBackend::Iommufd));
        assert!(MissingBackend::Iommufd.to_string().contains("/dev/iommu"));
        let e = choose_backend(Some("type1"), &s(true, true)).unwrap_err();
        assert!(matches!(&e, SelectError::UnknownBackend { requested } if requested == "type1"), "{e:?}");
        assert_eq!(e.status(), NrtStatus::Invalid);
        assert_eq!(SelectError::BackendMissing(MissingBackend::Any).status(), NrtStatus::Failure);
    }

    #[cfg(feature = "sim")]
    #[test]
    fn opens_a_simulated_topology() {
        let o = open_platforms(&Spec::Sim { arch: &csr_maps::CAYMAN, n: 2 }, SimTiming::Inline).unwrap();
        assert_eq!((o.platforms.len(), o.sims.len()), (2, 2));
        assert!(o.is_sim());
        assert_eq!(o.platforms[1].identity().location, "sim1");
    }

    #[cfg(not(feature = "sim"))]
    #[test]
    fn without_the_simulator_sim_specs_are_refused() {
        for spec in ["sim", "sim:cayman", "sim:mariana:2"] {
            let e = Spec::parse(Some(spec)).unwrap_err();
            assert!(matches!(&e, SelectError::NoSimulator(_)), "{spec}: {e:?}");
            assert!(e.to_string().contains("built without the simulator"), "{e}");
        }
        // Malformed sim specs are still bad input.
        assert!(matches!(
            Spec::parse(Some("sim:inf1")),
            Err(SelectError::BadSpec { problem: SpecProblem::Arch(_), .. })
        ));
        let e = open_platforms(&Spec::Sim { arch: &csr_maps::SUNDA, n: 1 }, SimTiming::Inline).err();
        assert!(matches!(e, Some(SelectError::NoSimulator(_))));
        let e = resolve_default(&Sysfs::new("/nonexistent-sysfs-root")).unwrap_err();
        assert!(matches!(&e, SelectError::NoSimulator(m) if m == "no Neuron device found"), "{e:?}");
    }

    #[cfg(feature = "sim")]
    #[test]
    fn empty_sysfs_falls_back_to_the_simulator() {
        let sys = Sysfs::new("/nonexistent-sysfs-root");
        let (s, notice) = resolve_default(&sys).unwrap();
        assert_eq!(s, Spec::Sim { arch: &csr_maps::SUNDA, n: 1 });
        assert!(notice.unwrap().contains("no Neuron device found"));
    }
}
