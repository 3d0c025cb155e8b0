//! How to open a device ([`OpenOptions`]): read by the backend selection ([`crate::noiommu`])
//! and by [`crate::Device::open`].

use std::path::PathBuf;

use crate::backend::Backend;
use crate::iova::IovaRange;
use crate::sysfs::Sysfs;

/// How to open a device.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Kernel interface to use.
    pub backend: Backend,
    /// sysfs root (normally `/sys`).
    pub sysfs: Sysfs,
    /// /dev root (normally `/dev`).
    pub dev: PathBuf,
    /// Restrict IOVAs to this window (for devices with a narrow DMA mask).
    pub iova_window: Option<IovaRange>,
    /// Open a device that no IOMMU translates in VFIO no-IOMMU mode ([`Backend::NoIommu`])
    /// instead of failing with [`Error::NoIommu`]. UNSAFE: the device gets physical
    /// addresses and can reach all memory. Needs the vfio module parameter
    /// `enable_unsafe_noiommu_mode=1` (set before binding to vfio-pci), CAP_SYS_RAWIO for the
    /// group node and CAP_SYS_ADMIN for physical addresses. Devices with an IOMMU are opened
    /// through `backend` as usual. Default: false.
    pub allow_noiommu: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            backend: Backend::Container,
            sysfs: Sysfs::default(),
            dev: "/dev".into(),
            iova_window: None,
            allow_noiommu: false,
        }
    }
}
