//! Errors of the vfio crate: each says what went wrong and, where there is one, what to do.

use std::path::PathBuf;

use crate::backend::Backend;
use crate::pci::PciAddress;

/// Everything that can go wrong in discovery, binding, opening and using a VFIO device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Sysfs { path: PathBuf, source: std::io::Error },
    #[error("{}: cannot parse {what} from {text:?}", path.display())]
    Parse { path: PathBuf, what: &'static str, text: String },
    #[error("invalid PCI address {0:?} (expected DDDD:BB:DD.F or BB:DD.F)")]
    BadAddress(String),
    #[error("no PCI function {0} in sysfs")]
    NoSuchDevice(PciAddress),
    #[error("{0}: no IOMMU translates its DMA (no IOMMU group, or only the one the kernel fabricates for no-IOMMU mode); boot with intel_iommu=on / amd_iommu=on and check the firmware's VT-d/AMD-Vi. No-IOMMU mode (unprotected DMA to physical addresses) is only used when asked for explicitly: load vfio with enable_unsafe_noiommu_mode=1 (modprobe vfio enable_unsafe_noiommu_mode=1, /sys/module/vfio/parameters/enable_unsafe_noiommu_mode), bind the device to vfio-pci after that, and open it with OpenOptions::allow_noiommu")]
    NoIommu(PciAddress),
    #[error("{addr}: no-IOMMU mode was allowed but is unavailable: {reason}")]
    NoIommuUnavailable { addr: PciAddress, reason: String },
    #[error("no-IOMMU DMA needs physical addresses, which /proc/self/pagemap shows only to processes with CAP_SYS_ADMIN{}", cause.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    PagemapDenied { cause: Option<std::io::Error> },
    #[error("pagemap of the buffer at {vaddr:#x}: {reason}")]
    Pagemap { vaddr: u64, reason: String },
    #[error("no-IOMMU DMA needs physically contiguous memory: the {len:#x}-byte buffer at {vaddr:#x} is not contiguous from offset {offset:#x}; use a hugepage-backed buffer no larger than one hugepage, or a single 4 KiB page")]
    NotContiguous { vaddr: u64, len: u64, offset: u64 },
    #[error("no-IOMMU mode: the IOVA of a mapping is the physical address ({phys:#x}), {iova:#x} cannot be chosen")]
    NoIommuIova { iova: u64, phys: u64 },
    #[error("{addr}: IOMMU group {group} is not viable: every member must be bound to vfio-pci (or have no driver); bind or unbind these first: {}", others.iter().map(|(a, d)| format!("{a} (driver {d})")).collect::<Vec<_>>().join(", "))]
    GroupNotViable { addr: PciAddress, group: u32, others: Vec<(PciAddress, String)> },
    #[error("{} is missing: load the VFIO modules first (modprobe vfio-pci && modprobe vfio_iommu_type1; vfio-pci brings vfio, vfio-pci-core and irqbypass)", path.display())]
    VfioMissing { path: PathBuf },
    #[error("driver vfio-pci is not registered (/sys/bus/pci/drivers/vfio-pci missing): modprobe vfio-pci")]
    VfioPciMissing,
    #[error("{addr}: binding to vfio-pci did not take effect (driver now: {now}); see dmesg")]
    BindFailed { addr: PciAddress, now: String },
    #[error("RLIMIT_MEMLOCK is {limit} bytes but pinning {requested} more bytes (with {locked} already pinned) needs {needed}; raise it (ulimit -l {} or LimitMEMLOCK=) or run with CAP_IPC_LOCK", needed.div_ceil(1024))]
    MemlockTooLow { limit: u64, locked: u64, requested: u64, needed: u64 },
    #[error("iommufd path unavailable: {0}")]
    IommufdUnavailable(String),
    #[error("{}: {source}", path.display())]
    DeviceNode { path: PathBuf, source: std::io::Error },
    #[error("{op}: {source}")]
    Ioctl { op: &'static str, source: std::io::Error },
    #[error("vfio-ioctls: {0}")]
    VfioIoctls(#[from] vfio_ioctls::VfioError),
    #[error("region {index}: {reason}")]
    Region { index: u32, reason: String },
    #[error("interrupt index {index}: {reason}")]
    Irq { index: u32, reason: String },
    #[error("the device does not support VFIO_DEVICE_RESET (no FLR, PM or bus reset available)")]
    ResetUnsupported,
    #[error("IOVA space exhausted: no free range of {len:#x} bytes aligned to {align:#x} in the valid IOVA ranges")]
    IovaExhausted { len: u64, align: u64 },
    #[error("host memory: {0}")]
    HostMem(#[from] platform::HostMemError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("a device opened through the {0} backend cannot be handed to another process: open it through the iommufd backend")]
    Unshareable(Backend),
    #[error("descriptors from another process: {0}")]
    BadHandoff(String),
}

impl Error {
    pub(crate) fn ioctl(op: &'static str, source: impl Into<std::io::Error>) -> Self {
        Error::Ioctl { op, source: source.into() }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
