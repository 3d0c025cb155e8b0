//! An open VFIO device: regions (info, capabilities, mmap, pread/pwrite), config space,
//! interrupts to eventfds, reset — the same API whether it was opened through the legacy
//! container or through iommufd and the device cdev.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::EfdFlags;
use platform::{Mmio, MmioError, VolatileMmio};
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_irq_info, vfio_region_info, VFIO_DEVICE_FLAGS_AMBA, VFIO_DEVICE_FLAGS_AP,
    VFIO_DEVICE_FLAGS_CAPS, VFIO_DEVICE_FLAGS_CCW, VFIO_DEVICE_FLAGS_CDX, VFIO_DEVICE_FLAGS_FSL_MC,
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_PLATFORM, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_INFO_AUTOMASKED,
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_INFO_NORESIZE, VFIO_IRQ_SET_ACTION_MASK,
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_REGION_INFO_FLAG_CAPS, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::dma::DmaSpace;
use crate::error::{Error, Result};
use crate::iommu::{Backend, Inner, Iommu, IommuInfo};
use crate::iova::{IovaAllocator, IovaRange};
pub use crate::options::OpenOptions;
use crate::sysfs::{PciAddress, Sysfs};
use crate::uapi;

/// Region index of PCI config space.
pub const CONFIG_REGION: u32 = 7;
/// IRQ indexes of a PCI device.
pub const IRQ_INTX: u32 = 0;
pub const IRQ_MSI: u32 = 1;
pub const IRQ_MSIX: u32 = 2;

const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
const CAP_SPARSE_MMAP: u16 = 1;
const CAP_TYPE: u16 = 2;

bitflags::bitflags! {
    /// `flags` of `struct vfio_device_info`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DeviceFlags: u32 {
        /// VFIO_DEVICE_RESET is supported.
        const RESET = VFIO_DEVICE_FLAGS_RESET;
        const PCI = VFIO_DEVICE_FLAGS_PCI;
        const PLATFORM = VFIO_DEVICE_FLAGS_PLATFORM;
        const AMBA = VFIO_DEVICE_FLAGS_AMBA;
        const CCW = VFIO_DEVICE_FLAGS_CCW;
        const AP = VFIO_DEVICE_FLAGS_AP;
        const FSL_MC = VFIO_DEVICE_FLAGS_FSL_MC;
        /// The info struct has a capability chain.
        const CAPS = VFIO_DEVICE_FLAGS_CAPS;
        const CDX = VFIO_DEVICE_FLAGS_CDX;
    }
}

bitflags::bitflags! {
    /// `flags` of `struct vfio_region_info`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RegionFlags: u32 {
        const READ = VFIO_REGION_INFO_FLAG_READ;
        const WRITE = VFIO_REGION_INFO_FLAG_WRITE;
        const MMAP = VFIO_REGION_INFO_FLAG_MMAP;
        /// The info struct has a capability chain.
        const CAPS = VFIO_REGION_INFO_FLAG_CAPS;
    }
}

bitflags::bitflags! {
    /// `flags` of `struct vfio_irq_info`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct IrqInfoFlags: u32 {
        /// Vectors can be signalled through eventfds.
        const EVENTFD = VFIO_IRQ_INFO_EVENTFD;
        /// Vectors can be masked and unmasked.
        const MASKABLE = VFIO_IRQ_INFO_MASKABLE;
        /// The kernel masks a vector when it fires (INTx).
        const AUTOMASKED = VFIO_IRQ_INFO_AUTOMASKED;
        /// The vector count cannot change once enabled.
        const NORESIZE = VFIO_IRQ_INFO_NORESIZE;
    }
}

bitflags::bitflags! {
    /// `flags` of `struct vfio_irq_set`: one data type and one action.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct IrqSetFlags: u32 {
        const DATA_NONE = VFIO_IRQ_SET_DATA_NONE;
        const DATA_BOOL = VFIO_IRQ_SET_DATA_BOOL;
        const DATA_EVENTFD = VFIO_IRQ_SET_DATA_EVENTFD;
        const ACTION_MASK = VFIO_IRQ_SET_ACTION_MASK;
        const ACTION_UNMASK = VFIO_IRQ_SET_ACTION_UNMASK;
        const ACTION_TRIGGER = VFIO_IRQ_SET_ACTION_TRIGGER;
    }
}

/// One region's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    pub index: u32,
    pub flags: RegionFlags,
    pub size: u64,
    /// Offset of the region in the device fd.
    pub offset: u64,
    /// mmap-able areas `(offset, size)` within the region; the whole region when the
    /// MMAP flag is set without a sparse capability, empty when not mmap-able.
    pub mmap_areas: Vec<(u64, u64)>,
    /// `(type, subtype)` from the type capability, if any.
    pub region_type: Option<(u32, u32)>,
}

impl RegionInfo {
    pub fn readable(&self) -> bool {
        self.flags.contains(RegionFlags::READ)
    }
    pub fn writable(&self) -> bool {
        self.flags.contains(RegionFlags::WRITE)
    }
    pub fn mmappable(&self) -> bool {
        self.flags.contains(RegionFlags::MMAP)
    }
}

/// Parse a `VFIO_DEVICE_GET_REGION_INFO` buffer (struct + capability chain).
pub fn parse_region_info(buf: &[u8]) -> RegionInfo {
    let flags = RegionFlags::from_bits_retain(uapi::u32_at(buf, 4).unwrap_or(0));
    let size = uapi::u64_at(buf, 16).unwrap_or(0);
    let mut info = RegionInfo {
        index: uapi::u32_at(buf, 8).unwrap_or(0),
        flags,
        size,
        offset: uapi::u64_at(buf, 24).unwrap_or(0),
        mmap_areas: Vec::new(),
        region_type: None,
    };
    let mut sparse = None;
    if flags.contains(RegionFlags::CAPS) {
        for cap in uapi::capabilities(buf, uapi::u32_at(buf, 12).unwrap_or(0)) {
            match cap.id {
                CAP_SPARSE_MMAP => sparse = Some(uapi::pairs_after_count(cap.data)),
                CAP_TYPE => info.region_type = uapi::u32_at(cap.data, 0).zip(uapi::u32_at(cap.data, 4)),
                _ => {}
            }
        }
    }
    if flags.contains(RegionFlags::MMAP) {
        info.mmap_areas = match sparse {
            Some(areas) => {
                areas.into_iter().filter(|&(o, s)| s > 0 && o.checked_add(s).is_some_and(|e| e <= size)).collect()
            }
            None if size > 0 => vec![(0, size)],
            None => Vec::new(),
        };
    }
    info
}

/// One interrupt index's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqInfo {
    pub index: u32,
    pub flags: IrqInfoFlags,
    /// Number of vectors (0 = not supported).
    pub count: u32,
}

pub(crate) enum DevFd {
    Group(vfio_ioctls::VfioDevice),
    Cdev(File),
    NoIommu(File),
}

impl DevFd {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            // SAFETY: the VfioDevice owns the fd and outlives the borrow (behind &self).
            DevFd::Group(d) => unsafe { BorrowedFd::borrow_raw(d.as_raw_fd()) },
            DevFd::Cdev(f) | DevFd::NoIommu(f) => f.as_fd(),
        }
    }
    /// Read all of `buf` at `off` (pread, retried on EINTR and short reads).
    fn pread(&self, mut buf: &mut [u8], mut off: u64) -> std::io::Result<()> {
        while !buf.is_empty() {
            match nix::sys::uio::pread(self.fd(), buf, file_offset(off)?) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    off += n as u64;
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
    /// Write all of `buf` at `off` (pwrite, retried on EINTR and short writes).
    fn pwrite(&self, mut buf: &[u8], mut off: u64) -> std::io::Result<()> {
        while !buf.is_empty() {
            match nix::sys::uio::pwrite(self.fd(), buf, file_offset(off)?) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    off += n as u64;
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A device fd offset as `off_t` (VFIO region offsets are below 2^63).
fn file_offset(off: u64) -> std::io::Result<nix::libc::off_t> {
    nix::libc::off_t::try_from(off).map_err(|_| std::io::Error::from(Errno::EINVAL))
}

/// An eventfd for interrupt delivery (non-blocking, close-on-exec).
#[derive(Debug)]
pub struct EventFd(nix::sys::eventfd::EventFd);

impl EventFd {
    /// A new non-blocking eventfd.
    pub fn new() -> Result<Self> {
        let fd = nix::sys::eventfd::EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(std::io::Error::from)?;
        Ok(Self(fd))
    }
    /// Wait up to `timeout` for the counter to become non-zero; return and reset it
    /// (0 on timeout).
    pub fn wait(&self, timeout: Duration) -> Result<u64> {
        if poll_in(self.0.as_fd(), timeout).map_err(std::io::Error::from)? {
            self.take()
        } else {
            Ok(0)
        }
    }
    /// Read and reset the counter without waiting (0 if nothing arrived).
    pub fn take(&self) -> Result<u64> {
        match self.0.read() {
            Ok(v) => Ok(v),
            Err(Errno::EAGAIN) => Ok(0),
            Err(e) => Err(Error::Io(e.into())),
        }
    }
    /// A second handle to the same eventfd.
    pub fn try_clone(&self) -> Result<OwnedFd> {
        Ok(self.0.as_fd().try_clone_to_owned()?)
    }
}

/// Wait up to `timeout` (whole milliseconds, at most `i32::MAX`) for `fd` to become readable.
pub fn poll_in(fd: BorrowedFd<'_>, timeout: Duration) -> nix::Result<bool> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    Ok(nix::poll::poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX))? > 0)
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// An open VFIO device.
pub struct Device {
    // Drop order: mappings of regions hold their own Arc<DevFd>.
    fd: Arc<DevFd>,
    dma: Arc<DmaSpace>,
    address: PciAddress,
    flags: DeviceFlags,
    num_regions: u32,
    num_irqs: u32,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("address", &self.address)
            .field("backend", &self.backend())
            .field("flags", &self.flags)
            .finish()
    }
}

fn cdev_node(sysfs: &Sysfs, dev: &Path, addr: PciAddress) -> Result<PathBuf> {
    let dir = sysfs.device_path(addr).join("vfio-dev");
    let rd = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::IommufdUnavailable(format!("{}: {e} (kernel without CONFIG_VFIO_DEVICE_CDEV?)", dir.display()))
        }
        _ => Error::Sysfs { path: dir.clone(), source: e },
    })?;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("vfio") {
            return Ok(dev.join("vfio/devices").join(name));
        }
    }
    Err(Error::IommufdUnavailable(format!("{}: no vfioN entry", dir.display())))
}

impl Device {
    /// Open `addr` (already bound to vfio-pci) through `opts.backend`, or, for a device
    /// without an IOMMU and only with `opts.allow_noiommu`, in no-IOMMU mode (with a warning
    /// on stderr).
    pub fn open(addr: PciAddress, opts: &OpenOptions) -> Result<Self> {
        let f = opts.sysfs.function(addr)?;
        let (backend, group) = crate::noiommu::select_backend(&opts.sysfs, addr, opts)?;
        if f.driver.as_deref() != Some("vfio-pci") {
            return Err(Error::BindFailed { addr, now: f.driver.unwrap_or_else(|| "none".into()) });
        }
        let (fd, iommu) = match backend {
            Backend::NoIommu => {
                crate::noiommu::warn(addr);
                let (container, group_fd, dev) = crate::noiommu::open(&opts.dev, group, addr)?;
                (DevFd::NoIommu(dev), Iommu::noiommu(container, group_fd))
            }
            Backend::Container => {
                opts.sysfs.check_group_viable(addr)?;
                let node = opts.dev.join("vfio/vfio");
                if !node.exists() {
                    return Err(Error::VfioMissing { path: node });
                }
                if !crate::bind::group_node(&opts.dev, group).exists() {
                    return Err(Error::VfioMissing { path: crate::bind::group_node(&opts.dev, group) });
                }
                let container = Arc::new(vfio_ioctls::VfioContainer::new(None)?);
                let dev = vfio_ioctls::VfioDevice::new(&opts.sysfs.device_path(addr), container.clone(), false)?;
                (DevFd::Group(dev), Iommu { inner: Inner::Container(container), borrowed: false })
            }
            Backend::Iommufd => {
                let iommu = Iommu::open_iommufd(&opts.dev)?;
                let node = cdev_node(&opts.sysfs, &opts.dev, addr)?;
                let file =
                    std::fs::OpenOptions::new().read(true).write(true).open(&node).map_err(|e| match e.kind() {
                        // sysfs lists the cdev but /dev lacks it (no devtmpfs, no udev).
                        std::io::ErrorKind::NotFound => {
                            Error::IommufdUnavailable(format!("{}: {e} (no device node)", node.display()))
                        }
                        _ => Error::DeviceNode { path: node.clone(), source: e },
                    })?;
                let Inner::Iommufd { fd: ifd, ioas } = &iommu.inner else {
                    return Err(Error::IommufdUnavailable("not an iommufd context".into()));
                };
                let mut bind = uapi::VfioDeviceBindIommufd {
                    argsz: std::mem::size_of::<uapi::VfioDeviceBindIommufd>() as u32,
                    flags: 0,
                    iommufd: ifd.as_raw_fd(),
                    out_devid: 0,
                };
                // SAFETY: `file` is a device cdev; `bind` is the (minimum-size) struct
                // VFIO_DEVICE_BIND_IOMMUFD takes, its argsz its own size.
                unsafe { uapi::vfio_device_bind_iommufd(file.as_raw_fd(), &mut bind) }
                    .map_err(|e| Error::ioctl("VFIO_DEVICE_BIND_IOMMUFD", e))?;
                let mut attach = uapi::VfioDeviceAttachIommufdPt {
                    argsz: std::mem::size_of::<uapi::VfioDeviceAttachIommufdPt>() as u32,
                    flags: 0,
                    pt_id: *ioas,
                };
                // SAFETY: `file` is a bound device cdev; `attach` is the (minimum-size) struct
                // VFIO_DEVICE_ATTACH_IOMMUFD_PT takes, its argsz its own size.
                unsafe { uapi::vfio_device_attach_iommufd_pt(file.as_raw_fd(), &mut attach) }
                    .map_err(|e| Error::ioctl("VFIO_DEVICE_ATTACH_IOMMUFD_PT", e))?;
                (DevFd::Cdev(file), iommu)
            }
        };
        Self::assemble(fd, iommu, addr, opts.iova_window)
    }

    /// A device from its open descriptor and address space: query it, set up its IOVAs.
    fn assemble(fd: DevFd, iommu: Iommu, addr: PciAddress, window: Option<IovaRange>) -> Result<Self> {
        let mut info = vfio_device_info { argsz: std::mem::size_of::<vfio_device_info>() as u32, ..Default::default() };
        // SAFETY: `info` is the struct VFIO_DEVICE_GET_INFO takes, its argsz its own size; on
        // a descriptor that is not a VFIO device the ioctl fails (ENOTTY) and writes nothing.
        unsafe { uapi::vfio_device_get_info(fd.fd().as_raw_fd(), &mut info) }
            .map_err(|e| Error::ioctl("VFIO_DEVICE_GET_INFO", e))?;
        let iinfo = iommu.info()?;
        let alloc = IovaAllocator::new(&iinfo.valid, window);
        let dma = Arc::new(DmaSpace::new(iommu, iinfo, alloc));
        Ok(Self {
            fd: Arc::new(fd),
            dma,
            address: addr,
            flags: DeviceFlags::from_bits_retain(info.flags),
            num_regions: info.num_regions,
            num_irqs: info.num_irqs,
        })
    }

    /// Rebuild a device another process opened from the descriptors it passed
    /// ([`Device::share`], sent with [`crate::shared::send_device`]), with this process's
    /// IOVAs restricted to `window` (each process sharing an address space gets its own).
    pub fn from_fds(fds: crate::shared::DeviceFds, window: IovaRange) -> Result<Self> {
        let crate::shared::DeviceFds { address, device, iommu } = fds;
        let (fd, iommu) = match iommu {
            crate::shared::IommuFds::Iommufd { iommufd, ioas } => {
                (DevFd::Cdev(File::from(device)), Iommu::borrowed_iommufd(iommufd, ioas))
            }
            crate::shared::IommuFds::NoIommu { container, group } => {
                (DevFd::NoIommu(File::from(device)), Iommu::noiommu(container, group))
            }
        };
        Self::assemble(fd, iommu, address, Some(window))
    }

    /// Duplicates of this device's descriptors for another process (see
    /// [`crate::shared`]). A device opened through the legacy container cannot be shared
    /// ([`Error::Unshareable`]): open it through iommufd.
    pub fn share(&self) -> Result<crate::shared::DeviceFds> {
        let iommu = self.dma.iommu().share()?.ok_or(Error::Unshareable(self.backend()))?;
        let device = match self.fd.as_ref() {
            DevFd::Cdev(f) | DevFd::NoIommu(f) => OwnedFd::from(f.try_clone()?),
            DevFd::Group(_) => return Err(Error::Unshareable(self.backend())),
        };
        Ok(crate::shared::DeviceFds { address: self.address, device, iommu })
    }

    /// PCI address.
    pub fn address(&self) -> PciAddress {
        self.address
    }
    /// The interface it was opened through.
    pub fn backend(&self) -> Backend {
        self.dma.iommu().backend()
    }
    /// Number of regions and IRQ indexes.
    pub fn counts(&self) -> (u32, u32) {
        (self.num_regions, self.num_irqs)
    }
    /// Whether VFIO_DEVICE_RESET is available.
    pub fn can_reset(&self) -> bool {
        self.flags.contains(DeviceFlags::RESET)
    }
    /// The DMA address space of this device.
    pub fn dma(&self) -> &Arc<DmaSpace> {
        &self.dma
    }
    /// What the IOMMU reported when the device was opened.
    pub fn iommu_info(&self) -> &IommuInfo {
        self.dma.info()
    }

    /// Region info with capabilities.
    pub fn region_info(&self, index: u32) -> Result<RegionInfo> {
        let mut len = std::mem::size_of::<vfio_region_info>();
        loop {
            let mut buf = uapi::IoctlBuf::new(len);
            buf.put_u32(0, len as u32);
            buf.put_u32(8, index);
            // SAFETY: a device fd; the buffer holds `len` bytes (8-byte aligned) starting with a
            // struct vfio_region_info whose argsz is `len`; the kernel writes at most argsz bytes.
            unsafe { uapi::vfio_device_get_region_info(self.fd.fd().as_raw_fd(), buf.as_mut_ptr()) }
                .map_err(|e| Error::Region { index, reason: format!("VFIO_DEVICE_GET_REGION_INFO: {e}") })?;
            let need = uapi::u32_at(buf.bytes(), 0).unwrap_or(0) as usize;
            if need > len && len < (1 << 20) {
                len = need;
                continue;
            }
            return Ok(parse_region_info(buf.bytes()));
        }
    }

    /// Read `buf.len()` bytes at `offset` of region `index` (pread on the device fd).
    pub fn region_read(&self, index: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.region_info(index)?;
        check_span(&r, offset, buf.len())?;
        self.fd.pread(buf, r.offset + offset).map_err(|e| Error::Region { index, reason: format!("pread: {e}") })
    }

    /// Write `buf` at `offset` of region `index` (pwrite on the device fd).
    pub fn region_write(&self, index: u32, offset: u64, buf: &[u8]) -> Result<()> {
        let r = self.region_info(index)?;
        check_span(&r, offset, buf.len())?;
        self.fd.pwrite(buf, r.offset + offset).map_err(|e| Error::Region { index, reason: format!("pwrite: {e}") })
    }

    /// Read a 16-bit config space register.
    pub fn config_read16(&self, offset: u64) -> Result<u16> {
        let mut b = [0u8; 2];
        self.region_read(CONFIG_REGION, offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    /// Read a 32-bit config space register.
    pub fn config_read32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.region_read(CONFIG_REGION, offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    /// Write a 16-bit config space register.
    pub fn config_write16(&self, offset: u64, v: u16) -> Result<()> {
        self.region_write(CONFIG_REGION, offset, &v.to_le_bytes())
    }
    /// Write a 32-bit config space register.
    pub fn config_write32(&self, offset: u64, v: u32) -> Result<()> {
        self.region_write(CONFIG_REGION, offset, &v.to_le_bytes())
    }
    /// Set or clear Bus Master Enable in the command register (vfio-pci leaves it clear).
    pub fn set_bus_master(&self, on: bool) -> Result<()> {
        let cmd = self.config_read16(PCI_COMMAND)?;
        let new = if on { cmd | PCI_COMMAND_MASTER } else { cmd & !PCI_COMMAND_MASTER };
        if new != cmd {
            self.config_write16(PCI_COMMAND, new)?;
        }
        Ok(())
    }

    /// Map region `index` as an [`Mmio`]: mmap-able areas are accessed with volatile loads
    /// and stores, the rest (or all of a non-mmap-able region) with pread/pwrite.
    pub fn map_region(&self, index: u32) -> Result<Arc<RegionMmio>> {
        let info = self.region_info(index)?;
        if info.size == 0 {
            return Err(Error::Region { index, reason: "region is absent (size 0)".into() });
        }
        let mut areas = Vec::new();
        // Shared mappings of the device fd: read-write for a read-write region, read-only for
        // a read-only one. A region that is not readable is accessed through pread/pwrite
        // only (vfio-pci refuses a mapping with more access than the region's flags allow).
        let writable = info.writable();
        let areas_to_map = if info.readable() { info.mmap_areas.as_slice() } else { &[] };
        for &(off, size) in areas_to_map {
            let len = usize::try_from(size).map_err(|_| Error::Region { index, reason: "area too large".into() })?;
            let file_off = info.offset.checked_add(off).ok_or_else(|| Error::Region {
                index,
                reason: format!("area at {off:#x} overflows the fd offset {:#x}", info.offset),
            })?;
            let mut opts = memmap2::MmapOptions::new();
            opts.offset(file_off).len(len);
            let fd = self.fd.fd();
            let mapped = if writable { opts.map_raw(&fd) } else { opts.map_raw_read_only(&fd) };
            let map = mapped
                .map_err(|e| Error::Region { index, reason: format!("mmap of {size:#x} bytes at {off:#x}: {e}") })?;
            let ptr = NonNull::new(map.as_mut_ptr())
                .ok_or_else(|| Error::Region { index, reason: "mmap returned null".into() })?;
            // SAFETY: `ptr` maps `size` bytes owned by `map`, which MmapArea keeps (and so
            // keeps mapped) as long as `mmio`; the area is only accessed through `mmio`.
            let mmio = unsafe { VolatileMmio::new(ptr, size) };
            areas.push(MmapArea { mmio, _map: map, offset: off });
        }
        Ok(Arc::new(RegionMmio { fd: self.fd.clone(), index, file_offset: info.offset, size: info.size, areas }))
    }

    /// Interrupt index info.
    pub fn irq_info(&self, index: u32) -> Result<IrqInfo> {
        let mut i = vfio_irq_info { argsz: std::mem::size_of::<vfio_irq_info>() as u32, index, ..Default::default() };
        // SAFETY: a device fd; `i` is the struct VFIO_DEVICE_GET_IRQ_INFO takes, its argsz its
        // own size.
        unsafe { uapi::vfio_device_get_irq_info(self.fd.fd().as_raw_fd(), &mut i) }
            .map_err(|e| Error::Irq { index, reason: format!("VFIO_DEVICE_GET_IRQ_INFO: {e}") })?;
        Ok(IrqInfo { index, flags: IrqInfoFlags::from_bits_retain(i.flags), count: i.count })
    }

    fn set_irqs(&self, index: u32, flags: IrqSetFlags, start: u32, count: u32, data: &[u8]) -> Result<()> {
        const HDR: usize = 20;
        let mut buf = uapi::IoctlBuf::new(HDR + data.len());
        buf.put_u32(0, (HDR + data.len()) as u32);
        buf.put_u32(4, flags.bits());
        buf.put_u32(8, index);
        buf.put_u32(12, start);
        buf.put_u32(16, count);
        for (i, chunk) in data.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            buf.put_u32(HDR + i * 4, u32::from_ne_bytes(w));
        }
        // SAFETY: a device fd; the buffer (8-byte aligned) is a struct vfio_irq_set followed by
        // `data`, and argsz covers exactly both; the kernel only reads it.
        unsafe { uapi::vfio_device_set_irqs(self.fd.fd().as_raw_fd(), buf.as_mut_ptr()) }
            .map_err(|e| Error::Irq { index, reason: format!("VFIO_DEVICE_SET_IRQS: {e}") })?;
        Ok(())
    }

    /// Route vectors `start..start + fds.len()` of `index` to eventfds (enables MSI/MSI-X/INTx).
    pub fn enable_irq(&self, index: u32, start: u32, fds: &[BorrowedFd<'_>]) -> Result<()> {
        let info = self.irq_info(index)?;
        let end = start as u64 + fds.len() as u64;
        if fds.is_empty() || end > info.count as u64 {
            return Err(Error::Irq {
                index,
                reason: format!("vectors {start}..{end} but the device has {}", info.count),
            });
        }
        let data: Vec<u8> = fds.iter().flat_map(|f| f.as_raw_fd().to_ne_bytes()).collect();
        self.set_irqs(index, IrqSetFlags::DATA_EVENTFD | IrqSetFlags::ACTION_TRIGGER, start, fds.len() as u32, &data)
    }

    /// Disable all vectors of `index`.
    pub fn disable_irq(&self, index: u32) -> Result<()> {
        self.set_irqs(index, IrqSetFlags::DATA_NONE | IrqSetFlags::ACTION_TRIGGER, 0, 0, &[])
    }

    /// Mask vectors `start..start + count` (INTx only on vfio-pci; MSI/MSI-X return an error).
    pub fn mask_irq(&self, index: u32, start: u32, count: u32) -> Result<()> {
        self.set_irqs(index, IrqSetFlags::DATA_NONE | IrqSetFlags::ACTION_MASK, start, count, &[])
    }

    /// Unmask vectors `start..start + count` (INTx is auto-masked on delivery).
    pub fn unmask_irq(&self, index: u32, start: u32, count: u32) -> Result<()> {
        self.set_irqs(index, IrqSetFlags::DATA_NONE | IrqSetFlags::ACTION_UNMASK, start, count, &[])
    }

    /// Reset the function (VFIO_DEVICE_RESET: FLR, PM or bus reset, as the kernel can).
    pub fn reset(&self) -> Result<()> {
        if !self.can_reset() {
            return Err(Error::ResetUnsupported);
        }
        // SAFETY: a device fd; VFIO_DEVICE_RESET takes no argument.
        unsafe { uapi::vfio_device_reset(self.fd.fd().as_raw_fd()) }
            .map_err(|e| Error::ioctl("VFIO_DEVICE_RESET", e))?;
        Ok(())
    }
}

fn check_span(r: &RegionInfo, offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= r.size => Ok(()),
        _ => Err(Error::Region {
            index: r.index,
            reason: format!("{len} bytes at {offset:#x} exceed size {:#x}", r.size),
        }),
    }
}

/// One mmap'd area of a region. Field order matters: `mmio` drops before `_map`, whose drop
/// unmaps the area.
struct MmapArea {
    mmio: VolatileMmio,
    _map: memmap2::MmapRaw,
    offset: u64,
}

/// A device region as an [`Mmio`]: volatile access to its mmap'd areas, pread/pwrite elsewhere.
///
/// A pread/pwrite that the kernel refuses reads as all ones and drops the write, as a PCI
/// master abort would; bounds and alignment are checked before.
pub struct RegionMmio {
    fd: Arc<DevFd>,
    index: u32,
    file_offset: u64,
    size: u64,
    areas: Vec<MmapArea>,
}

impl RegionMmio {
    /// Region index.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// Whether `[offset, offset+width)` goes through an mmap (else pread/pwrite).
    pub fn is_mapped(&self, offset: u64, width: u64) -> bool {
        self.area(offset, width).is_some()
    }
    fn area(&self, offset: u64, width: u64) -> Option<&MmapArea> {
        self.areas.iter().find(|a| offset >= a.offset && offset + width <= a.offset + a.mmio.size())
    }
    fn slow_read<const N: usize>(&self, offset: u64) -> [u8; N] {
        let mut b = [0xffu8; N];
        if self.fd.pread(&mut b, self.file_offset + offset).is_err() {
            b = [0xff; N];
        }
        b
    }
}

impl Mmio for RegionMmio {
    fn size(&self) -> u64 {
        self.size
    }
    fn read32(&self, offset: u64) -> std::result::Result<u32, MmioError> {
        platform::mmio::check(offset, 4, self.size)?;
        match self.area(offset, 4) {
            Some(a) => a.mmio.read32(offset - a.offset),
            None => Ok(u32::from_le_bytes(self.slow_read::<4>(offset))),
        }
    }
    fn write32(&self, offset: u64, value: u32) -> std::result::Result<(), MmioError> {
        platform::mmio::check(offset, 4, self.size)?;
        match self.area(offset, 4) {
            Some(a) => a.mmio.write32(offset - a.offset, value),
            None => {
                let _ = self.fd.pwrite(&value.to_le_bytes(), self.file_offset + offset);
                Ok(())
            }
        }
    }
    fn read64(&self, offset: u64) -> std::result::Result<u64, MmioError> {
        platform::mmio::check(offset, 8, self.size)?;
        match self.area(offset, 8) {
            Some(a) => a.mmio.read64(offset - a.offset),
            None => Ok(u64::from_le_bytes(self.slow_read::<8>(offset))),
        }
    }
    fn write64(&self, offset: u64, value: u64) -> std::result::Result<(), MmioError> {
        platform::mmio::check(offset, 8, self.size)?;
        match self.area(offset, 8) {
            Some(a) => a.mmio.write64(offset - a.offset, value),
            None => {
                let _ = self.fd.pwrite(&value.to_le_bytes(), self.file_offset + offset);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_info_sparse_and_plain() {
        let mut b = vec![0u8; 32];
        let flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;
        b[4..8].copy_from_slice(&flags.to_ne_bytes());
        b[16..24].copy_from_slice(&0x10_0000u64.to_ne_bytes());
        b[24..32].copy_from_slice(&0x4_0000_0000u64.to_ne_bytes());
        let plain = parse_region_info(&b);
        assert_eq!(plain.mmap_areas, vec![(0, 0x10_0000)]);
        assert!(plain.readable() && plain.writable() && plain.mmappable());
        assert_eq!(plain.offset, 0x4_0000_0000);
        // With a sparse cap: two areas (the MSI-X table page is carved out) plus a bogus one.
        b[4..8].copy_from_slice(&(flags | VFIO_REGION_INFO_FLAG_CAPS).to_ne_bytes());
        b[12..16].copy_from_slice(&32u32.to_ne_bytes());
        b.extend_from_slice(&CAP_SPARSE_MMAP.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&3u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for v in [0u64, 0x1000, 0x2000, 0xf_e000, 0xf_f000, 0x10_0000] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let sparse = parse_region_info(&b);
        assert_eq!(sparse.mmap_areas, vec![(0, 0x1000), (0x2000, 0xf_e000)]);
        // Not mmap-able: no areas even with a sparse cap.
        b[4..8].copy_from_slice(&(VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_CAPS).to_ne_bytes());
        assert!(parse_region_info(&b).mmap_areas.is_empty());
    }

    #[test]
    fn eventfd_counts() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.wait(Duration::from_millis(1)).unwrap(), 0);
        let w = e.try_clone().unwrap();
        assert_eq!(nix::unistd::write(&w, &1u64.to_ne_bytes()).unwrap(), 8);
        assert_eq!(e.wait(Duration::from_millis(100)).unwrap(), 1);
        assert_eq!(e.take().unwrap(), 0);
    }
}
