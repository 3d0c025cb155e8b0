//! Which kernel interface a device is opened through: a leaf the options, the errors and the
//! IOMMU code all name.

/// Which kernel interface a device was opened through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `/dev/vfio/vfio` + `/dev/vfio/N` (type1v2 IOMMU).
    Container,
    /// `/dev/iommu` + `/dev/vfio/devices/vfioN`.
    Iommufd,
    /// `/dev/vfio/vfio` + `/dev/vfio/noiommu-N` with the VFIO_NOIOMMU_IOMMU type: no DMA
    /// translation or isolation, IOVAs are physical addresses. Only with
    /// [`crate::OpenOptions::allow_noiommu`]; see [`crate::noiommu`].
    NoIommu,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Container => "container",
            Backend::Iommufd => "iommufd",
            Backend::NoIommu => "noiommu",
        })
    }
}
