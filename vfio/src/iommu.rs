//! The IOMMU side of a VFIO device: the legacy type1v2 container, an iommufd IOAS, or no
//! IOMMU at all (no-IOMMU mode: pinned memory at its physical address), behind one
//! interface (map, unmap, valid IOVA ranges).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use platform::DmaPerm;
use vfio_bindings::bindings::vfio::{
    vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_iommu_type1_info, VFIO_DMA_MAP_FLAG_READ,
    VFIO_DMA_MAP_FLAG_WRITE, VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES,
};

pub use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::iova::IovaRange;
use crate::uapi;

const CAP_IOVA_RANGE: u16 = 1;
const CAP_DMA_AVAIL: u16 = 3;

/// What the IOMMU reports about its address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuInfo {
    /// Valid IOVA ranges (everything else is reserved, e.g. the MSI window).
    pub valid: Vec<IovaRange>,
    /// Supported IOMMU page sizes as a bitmap (bit n = 2^n bytes); 0 when unknown. Type1
    /// reports it; iommufd only reports the IOVA alignment it requires, so there every power
    /// of two from that alignment up is set.
    pub page_sizes: u64,
    /// DMA mappings still available (type1's limit), when reported.
    pub dma_avail: Option<u32>,
}

pub(crate) enum Inner {
    Container(Arc<vfio_ioctls::VfioContainer>),
    Iommufd {
        fd: OwnedFd,
        ioas: u32,
    },
    /// The group fd keeps the container set; `pins` maps each mapping's physical address to
    /// its pinned `(vaddr, len)`.
    NoIommu {
        container: OwnedFd,
        _group: OwnedFd,
        pins: Mutex<HashMap<u64, (u64, u64)>>,
    },
}

/// An IOMMU address space shared by the devices opened in it.
pub struct Iommu {
    pub(crate) inner: Inner,
    /// The address space belongs to another process (the broker that passed its descriptor):
    /// this one maps and unmaps in it but does not destroy it.
    pub(crate) borrowed: bool,
}

/// Parse `VFIO_IOMMU_GET_INFO`'s buffer (struct + capability chain).
pub fn parse_type1_info(buf: &[u8]) -> IommuInfo {
    let flags = uapi::u32_at(buf, 4).unwrap_or(0);
    let page_sizes = if flags & VFIO_IOMMU_INFO_PGSIZES != 0 { uapi::u64_at(buf, 8).unwrap_or(0) } else { 0 };
    let mut info = IommuInfo { valid: Vec::new(), page_sizes, dma_avail: None };
    if flags & VFIO_IOMMU_INFO_CAPS != 0 {
        for cap in uapi::capabilities(buf, uapi::u32_at(buf, 16).unwrap_or(0)) {
            match cap.id {
                CAP_IOVA_RANGE => {
                    info.valid = uapi::pairs_after_count(cap.data)
                        .into_iter()
                        .map(|(start, last)| IovaRange { start, last })
                        .collect()
                }
                CAP_DMA_AVAIL => info.dma_avail = uapi::u32_at(cap.data, 0),
                _ => {}
            }
        }
    }
    if info.valid.is_empty() {
        // Kernels before 5.4 report no ranges: assume the 48-bit space minus nothing.
        info.valid.push(IovaRange { start: 0, last: (1 << 48) - 1 });
    }
    info
}

impl Iommu {
    pub(crate) fn backend(&self) -> Backend {
        match self.inner {
            Inner::Container(_) => Backend::Container,
            Inner::Iommufd { .. } => Backend::Iommufd,
            Inner::NoIommu { .. } => Backend::NoIommu,
        }
    }

    /// The container or iommufd, valid while `self` lives (the raw ioctl wrappers take it).
    fn fd(&self) -> RawFd {
        match &self.inner {
            Inner::Container(c) => c.as_raw_fd(),
            Inner::Iommufd { fd, .. } => fd.as_raw_fd(),
            Inner::NoIommu { container, .. } => container.as_raw_fd(),
        }
    }

    /// Open a new iommufd context with one IOAS.
    pub(crate) fn open_iommufd(dev: &std::path::Path) -> Result<Self> {
        let path = dev.join("iommu");
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::IommufdUnavailable(format!(
                "{}: {e} (kernel without CONFIG_IOMMUFD, or the iommufd module not loaded)",
                path.display()
            )),
            _ => Error::DeviceNode { path: path.clone(), source: e },
        })?;
        let fd = OwnedFd::from(file);
        let mut alloc =
            uapi::IommuIoasAlloc { size: std::mem::size_of::<uapi::IommuIoasAlloc>() as u32, ..Default::default() };
        // SAFETY: `fd` is an iommufd; IOMMU_IOAS_ALLOC takes a struct iommu_ioas_alloc, which
        // `alloc` is, its size field its own size.
        unsafe { uapi::iommu_ioas_alloc(fd.as_raw_fd(), &mut alloc) }
            .map_err(|e| Error::ioctl("IOMMU_IOAS_ALLOC", e))?;
        Ok(Self { inner: Inner::Iommufd { fd, ioas: alloc.out_ioas_id }, borrowed: false })
    }

    pub(crate) fn noiommu(container: OwnedFd, group: OwnedFd) -> Self {
        Self { inner: Inner::NoIommu { container, _group: group, pins: Mutex::new(HashMap::new()) }, borrowed: false }
    }

    /// An iommufd address space `ioas` another process allocated and passed (`fd`): mapped
    /// into, never destroyed, here.
    pub(crate) fn borrowed_iommufd(fd: OwnedFd, ioas: u32) -> Self {
        Self { inner: Inner::Iommufd { fd, ioas }, borrowed: true }
    }

    /// Duplicates of the descriptors that make up this address space, for another process:
    /// (iommufd, IOAS id) or (container, group) in no-IOMMU mode. A legacy type1 container's
    /// group is held inside `vfio-ioctls` and cannot be handed on: `None`.
    pub(crate) fn share(&self) -> std::io::Result<Option<crate::shared::IommuFds>> {
        Ok(match &self.inner {
            Inner::Iommufd { fd, ioas } => {
                Some(crate::shared::IommuFds::Iommufd { iommufd: fd.try_clone()?, ioas: *ioas })
            }
            Inner::NoIommu { container, _group, .. } => {
                Some(crate::shared::IommuFds::NoIommu { container: container.try_clone()?, group: _group.try_clone()? })
            }
            Inner::Container(_) => None,
        })
    }

    /// The valid IOVA ranges and page sizes.
    pub fn info(&self) -> Result<IommuInfo> {
        match &self.inner {
            // No translation: IOVAs are physical addresses (52 bits on x86-64), any page size.
            Inner::NoIommu { .. } => Ok(IommuInfo {
                valid: vec![IovaRange { start: 0, last: (1 << 52) - 1 }],
                page_sizes: 0,
                dma_avail: None,
            }),
            Inner::Container(_) => {
                let mut len = std::mem::size_of::<vfio_iommu_type1_info>();
                loop {
                    let mut buf = uapi::IoctlBuf::new(len);
                    buf.put_u32(0, len as u32);
                    // SAFETY: a container fd; the buffer holds `len` bytes (8-byte aligned),
                    // argsz says so, and starts with a struct vfio_iommu_type1_info; the kernel
                    // writes at most argsz bytes.
                    unsafe { uapi::vfio_iommu_get_info(self.fd(), buf.as_mut_ptr()) }
                        .map_err(|e| Error::ioctl("VFIO_IOMMU_GET_INFO", e))?;
                    let need = uapi::u32_at(buf.bytes(), 0).unwrap_or(0) as usize;
                    if need > len && len < (1 << 20) {
                        len = need;
                        continue;
                    }
                    return Ok(parse_type1_info(buf.bytes()));
                }
            }
            Inner::Iommufd { fd, ioas } => {
                let mut q = uapi::IommuIoasIovaRanges {
                    size: std::mem::size_of::<uapi::IommuIoasIovaRanges>() as u32,
                    ioas_id: *ioas,
                    ..Default::default()
                };
                let mut ranges: Vec<uapi::IommuIovaRange> = Vec::new();
                for _ in 0..4 {
                    q.num_iovas = ranges.len() as u32;
                    q.allowed_iovas = ranges.as_mut_ptr() as u64;
                    // SAFETY: an iommufd; `q` is a struct iommu_ioas_iova_ranges whose
                    // allowed_iovas points at `num_iovas` writable iommu_iova_range entries.
                    match unsafe { uapi::iommu_ioas_iova_ranges(fd.as_raw_fd(), &mut q) } {
                        Ok(_) => {
                            ranges.truncate(q.num_iovas as usize);
                            let valid = ranges.iter().map(|r| IovaRange { start: r.start, last: r.last }).collect();
                            let align = q.out_iova_alignment.max(4096);
                            return Ok(IommuInfo { valid, page_sizes: !(align - 1), dma_avail: None });
                        }
                        Err(Errno::EMSGSIZE) => {
                            ranges = vec![uapi::IommuIovaRange::default(); q.num_iovas as usize];
                        }
                        Err(e) => return Err(Error::ioctl("IOMMU_IOAS_IOVA_RANGES", e)),
                    }
                }
                Err(Error::ioctl("IOMMU_IOAS_IOVA_RANGES", Errno::EMSGSIZE))
            }
        }
    }

    /// Map `[vaddr, vaddr + len)` at `iova`.
    ///
    /// # Safety
    /// The host range must stay mapped (not munmapped or remapped) until [`Iommu::unmap`] of the
    /// same IOVA range, and is only accessed through raw pointers meanwhile (the device may
    /// access it at any time).
    pub unsafe fn map(&self, vaddr: u64, iova: u64, len: u64, perm: DmaPerm) -> Result<()> {
        match &self.inner {
            Inner::NoIommu { .. } => {
                // SAFETY: forwarded from the caller.
                let phys = unsafe { self.map_phys(vaddr, len) }?;
                if phys != iova {
                    self.unmap(phys, len)?;
                    return Err(Error::NoIommuIova { iova, phys });
                }
            }
            Inner::Container(_) => {
                let mut flags = 0;
                if perm.contains(DmaPerm::READ) {
                    flags |= VFIO_DMA_MAP_FLAG_READ;
                }
                if perm.contains(DmaPerm::WRITE) {
                    flags |= VFIO_DMA_MAP_FLAG_WRITE;
                }
                let m = vfio_iommu_type1_dma_map {
                    argsz: std::mem::size_of::<vfio_iommu_type1_dma_map>() as u32,
                    flags,
                    vaddr,
                    iova,
                    size: len,
                };
                // SAFETY: a container fd; `m` is the struct VFIO_IOMMU_MAP_DMA takes (argsz its own
                // size); the caller keeps the host range mapped until the unmap.
                unsafe { uapi::vfio_iommu_map_dma(self.fd(), &m) }
                    .map_err(|e| Error::ioctl("VFIO_IOMMU_MAP_DMA", e))?;
            }
            Inner::Iommufd { fd, ioas } => {
                let mut flags = uapi::IoasMapFlags::FIXED_IOVA;
                flags.set(uapi::IoasMapFlags::READABLE, perm.contains(DmaPerm::READ));
                flags.set(uapi::IoasMapFlags::WRITEABLE, perm.contains(DmaPerm::WRITE));
                let mut m = uapi::IommuIoasMap {
                    size: std::mem::size_of::<uapi::IommuIoasMap>() as u32,
                    flags: flags.bits(),
                    ioas_id: *ioas,
                    reserved: 0,
                    user_va: vaddr,
                    length: len,
                    iova,
                };
                // SAFETY: an iommufd; `m` is the struct IOMMU_IOAS_MAP takes (size its own size);
                // the caller keeps the host range mapped until the unmap.
                unsafe { uapi::iommu_ioas_map(fd.as_raw_fd(), &mut m) }
                    .map_err(|e| Error::ioctl("IOMMU_IOAS_MAP", e))?;
            }
        }
        Ok(())
    }

    /// No-IOMMU mode: pin `[vaddr, vaddr + len)` and return its physical address, the
    /// IOVA the device must use. The range must be physically contiguous.
    ///
    /// # Safety
    /// As for [`Iommu::map`]; besides, nobody else may access the range during the call.
    pub unsafe fn map_phys(&self, vaddr: u64, len: u64) -> Result<u64> {
        let Inner::NoIommu { pins, .. } = &self.inner else {
            return Err(Error::ioctl("map_phys", std::io::Error::other("not in no-IOMMU mode")));
        };
        // SAFETY: forwarded from the caller.
        let phys = unsafe { crate::noiommu::pin_and_translate(vaddr, len) }?;
        platform::sync::lock(pins).insert(phys, (vaddr, len));
        Ok(phys)
    }

    /// Unmap `[iova, iova + len)`.
    pub fn unmap(&self, iova: u64, len: u64) -> Result<()> {
        match &self.inner {
            Inner::NoIommu { pins, .. } => {
                // Nothing is mapped anywhere: only the pin is undone.
                if let Some((vaddr, plen)) = platform::sync::lock(pins).remove(&iova) {
                    crate::noiommu::unpin(vaddr, plen);
                }
            }
            Inner::Container(_) => {
                let mut u = vfio_iommu_type1_dma_unmap {
                    argsz: std::mem::size_of::<vfio_iommu_type1_dma_unmap>() as u32,
                    flags: 0,
                    iova,
                    size: len,
                    ..Default::default()
                };
                // SAFETY: a container fd; `u` is the struct VFIO_IOMMU_UNMAP_DMA takes (argsz its
                // own size, no bitmap requested).
                unsafe { uapi::vfio_iommu_unmap_dma(self.fd(), &mut u) }
                    .map_err(|e| Error::ioctl("VFIO_IOMMU_UNMAP_DMA", e))?;
            }
            Inner::Iommufd { fd, ioas } => {
                let mut u = uapi::IommuIoasUnmap {
                    size: std::mem::size_of::<uapi::IommuIoasUnmap>() as u32,
                    ioas_id: *ioas,
                    iova,
                    length: len,
                };
                // SAFETY: an iommufd; `u` is the struct IOMMU_IOAS_UNMAP takes (size its own size).
                unsafe { uapi::iommu_ioas_unmap(fd.as_raw_fd(), &mut u) }
                    .map_err(|e| Error::ioctl("IOMMU_IOAS_UNMAP", e))?;
            }
        }
        Ok(())
    }
}

impl Drop for Iommu {
    fn drop(&mut self) {
        if let (Inner::Iommufd { fd, ioas }, false) = (&self.inner, self.borrowed) {
            let d = uapi::IommuDestroy { size: std::mem::size_of::<uapi::IommuDestroy>() as u32, id: *ioas };
            // SAFETY: an iommufd; `d` is the struct IOMMU_DESTROY takes (size its own size).
            // Closing the fd would free the IOAS anyway.
            let _ = unsafe { uapi::iommu_destroy(fd.as_raw_fd(), &d) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type1_info_with_and_without_caps() {
        // struct (24 bytes) + IOVA range cap at 24 + DMA avail cap.
        let mut b = vec![0u8; 24];
        b[4..8].copy_from_slice(&(VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS).to_ne_bytes());
        b[8..16].copy_from_slice(&0x4020_1000u64.to_ne_bytes());
        b[16..20].copy_from_slice(&24u32.to_ne_bytes());
        let next = 24 + 8 + 8 + 32;
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&(next as u32).to_ne_bytes());
        b.extend_from_slice(&2u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for v in [0u64, 0xfedf_ffff, 0xfef0_0000, 0x7f_ffff_ffff] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&3u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&65535u32.to_ne_bytes());
        let i = parse_type1_info(&b);
        assert_eq!(i.page_sizes, 0x4020_1000);
        assert_eq!(
            i.valid,
            vec![IovaRange { start: 0, last: 0xfedf_ffff }, IovaRange { start: 0xfef0_0000, last: 0x7f_ffff_ffff }]
        );
        assert_eq!(i.dma_avail, Some(65535));
        let bare = parse_type1_info(&[0u8; 24]);
        assert_eq!(bare.valid.len(), 1);
        assert_eq!(bare.dma_avail, None);
    }
}
