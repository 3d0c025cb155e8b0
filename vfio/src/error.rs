//! Errors of the vfio crate: each says what went wrong and, where there is one, what to do.

use std::path::PathBuf;

use crate::sysfs::PciAddress;

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
    #[error("{0}: no IOMMU group; the kernel has no IOMMU for it (boot with intel_iommu=on / amd_iommu=on, check the firmware's VT-d/AMD-Vi). No-IOMMU mode is unsafe and only used when asked for explicitly")]
    NoIommu(PciAddress),
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
}

impl Error {
    pub(crate) fn ioctl(op: &'static str, source: std::io::Error) -> Self {
        Error::Ioctl { op, source }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
