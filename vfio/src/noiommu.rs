//! VFIO no-IOMMU mode: a device without an IOMMU, opened only when asked for explicitly
//! ([`crate::OpenOptions::allow_noiommu`]) and when the vfio module's
//! `enable_unsafe_noiommu_mode` parameter is on.
//!
//! There is no DMA translation and no isolation: the device is given host physical
//! addresses and can reach all memory. DMA buffers are pinned (mlock), translated through
//! `/proc/self/pagemap` (which shows physical frame numbers only with CAP_SYS_ADMIN) and
//! must be physically contiguous: a hugepage-backed buffer up to the hugepage size, or a
//! single 4 KiB page.

use std::ffi::c_void;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::options::OpenOptions;
use crate::pci::PciAddress;
use crate::sysfs::Sysfs;
use crate::uapi;

/// The vfio module parameter that enables no-IOMMU groups, relative to the sysfs root.
pub const PARAM: &str = "module/vfio/parameters/enable_unsafe_noiommu_mode";
/// The name the kernel gives the IOMMU groups it fabricates for no-IOMMU devices.
pub const GROUP_NAME: &str = "vfio-noiommu";
/// `VFIO_NOIOMMU_IOMMU`: the container IOMMU type of no-IOMMU groups.
pub const VFIO_NOIOMMU_IOMMU: std::ffi::c_ulong =
    vfio_bindings::bindings::vfio::VFIO_NOIOMMU_IOMMU as std::ffi::c_ulong;

const PAGE: u64 = 4096;
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// The state of the module parameter: `Some(true)` for Y, `Some(false)` for N, `None` when
/// the kernel has no such parameter (built without CONFIG_VFIO_NOIOMMU, or vfio not loaded).
pub fn param_enabled(sysfs: &Sysfs) -> Option<bool> {
    let text = std::fs::read_to_string(sysfs.root().join(PARAM)).ok()?;
    Some(matches!(text.trim(), "Y" | "y" | "1"))
}

/// Whether IOMMU group `group` is one the kernel fabricated for a no-IOMMU device.
pub fn group_is_noiommu(sysfs: &Sysfs, group: u32) -> bool {
    std::fs::read_to_string(sysfs.root().join("kernel/iommu_groups").join(group.to_string()).join("name"))
        .is_ok_and(|n| n.trim() == GROUP_NAME)
}

/// `/dev/vfio/noiommu-N` for a no-IOMMU group.
pub fn group_node(dev: &Path, group: u32) -> PathBuf {
    dev.join("vfio").join(format!("noiommu-{group}"))
}

/// Decide how to open `addr` (already bound to vfio-pci): its group and the backend to use.
///
/// A function with a real IOMMU group is opened through `opts.backend`. A function without
/// one (no group, or a group the kernel made for no-IOMMU mode) is only opened when
/// `opts.allow_noiommu` is set and the vfio module parameter is Y; then the backend is
/// [`Backend::NoIommu`]. Asking for [`Backend::NoIommu`] for a function that has an IOMMU
/// is refused: its DMA would be translated and physical addresses would not work.
pub fn select_backend(sysfs: &Sysfs, addr: PciAddress, opts: &OpenOptions) -> Result<(Backend, u32)> {
    let f = sysfs.function(addr)?;
    let noiommu_group = f.iommu_group.filter(|&g| group_is_noiommu(sysfs, g));
    match (f.iommu_group, noiommu_group) {
        (Some(g), None) => {
            if opts.backend == Backend::NoIommu {
                return Err(Error::NoIommuUnavailable {
                    addr,
                    reason: format!("it is in IOMMU group {g}: open it through the container or iommufd backend"),
                });
            }
            Ok((opts.backend, g))
        }
        (_, group) => {
            if !opts.allow_noiommu {
                return Err(Error::NoIommu(addr));
            }
            let param = sysfs.root().join(PARAM);
            match param_enabled(sysfs) {
                None => {
                    return Err(Error::NoIommuUnavailable {
                        addr,
                        reason: format!(
                            "{} does not exist: the kernel's vfio has no no-IOMMU mode (CONFIG_VFIO_NOIOMMU) or vfio is not loaded",
                            param.display()
                        ),
                    })
                }
                Some(false) => {
                    return Err(Error::NoIommuUnavailable {
                        addr,
                        reason: format!(
                            "{} is N: load vfio with enable_unsafe_noiommu_mode=1 (or write Y there) and bind the device to vfio-pci again",
                            param.display()
                        ),
                    })
                }
                Some(true) => {}
            }
            let group = group.ok_or_else(|| Error::NoIommuUnavailable {
                addr,
                reason: "no IOMMU group although enable_unsafe_noiommu_mode is Y: it was bound to vfio-pci before the parameter was set; bind it again".into(),
            })?;
            Ok((Backend::NoIommu, group))
        }
    }
}

/// Print the warning that goes with every no-IOMMU open.
pub(crate) fn warn(addr: PciAddress) {
    eprintln!(
        "vfio: WARNING: {addr} opened in UNSAFE no-IOMMU mode: its DMA is not translated or \
         isolated, the device can read and write all host memory and the kernel is tainted"
    );
}

/// Open the container and the no-IOMMU group of `group`, set the no-IOMMU type and get the
/// device fd of `addr`. Returns `(container, group, device)`.
pub(crate) fn open(dev: &Path, group: u32, addr: PciAddress) -> Result<(OwnedFd, OwnedFd, File)> {
    let rw = |p: &Path| {
        std::fs::OpenOptions::new().read(true).write(true).open(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::VfioMissing { path: p.to_path_buf() },
            _ => Error::DeviceNode { path: p.to_path_buf(), source: e },
        })
    };
    let container = OwnedFd::from(rw(&dev.join("vfio/vfio"))?);
    // SAFETY: a container fd; VFIO_GET_API_VERSION takes no argument.
    let version = unsafe { uapi::vfio_get_api_version(container.as_raw_fd()) }
        .map_err(|e| Error::ioctl("VFIO_GET_API_VERSION", e))?;
    if version != 0 {
        return Err(Error::ioctl(
            "VFIO_GET_API_VERSION",
            std::io::Error::other(format!("API version {version}, expected 0")),
        ));
    }
    let has = uapi::container_ioctl(container.as_fd(), uapi::ContainerValueIoctl::CheckExtension, VFIO_NOIOMMU_IOMMU)
        .map_err(|e| Error::ioctl("VFIO_CHECK_EXTENSION", e))?;
    if has != 1 {
        return Err(Error::NoIommuUnavailable {
            addr,
            reason: "the VFIO container does not offer VFIO_NOIOMMU_IOMMU (enable_unsafe_noiommu_mode off?)".into(),
        });
    }
    let group_fd = OwnedFd::from(rw(&group_node(dev, group))?);
    let mut status = uapi::VfioGroupStatus { argsz: std::mem::size_of::<uapi::VfioGroupStatus>() as u32, flags: 0 };
    // SAFETY: a group fd; VFIO_GROUP_GET_STATUS takes a struct vfio_group_status, which
    // `status` is, its argsz its own size.
    unsafe { uapi::vfio_group_get_status(group_fd.as_raw_fd(), &mut status) }
        .map_err(|e| Error::ioctl("VFIO_GROUP_GET_STATUS", e))?;
    if !uapi::GroupFlags::from_bits_retain(status.flags).contains(uapi::GroupFlags::VIABLE) {
        return Err(Error::GroupNotViable { addr, group, others: Vec::new() });
    }
    let cfd: std::ffi::c_int = container.as_raw_fd();
    // SAFETY: a group fd; VFIO_GROUP_SET_CONTAINER reads one int (the container fd) from the
    // pointer.
    unsafe { uapi::vfio_group_set_container(group_fd.as_raw_fd(), &cfd) }
        .map_err(|e| Error::ioctl("VFIO_GROUP_SET_CONTAINER", e))?;
    uapi::container_ioctl(container.as_fd(), uapi::ContainerValueIoctl::SetIommu, VFIO_NOIOMMU_IOMMU)
        .map_err(|e| Error::ioctl("VFIO_SET_IOMMU(VFIO_NOIOMMU_IOMMU)", e))?;
    let mut name = addr.to_string().into_bytes();
    name.push(0);
    // SAFETY: a group fd; VFIO_GROUP_GET_DEVICE_FD reads a NUL-terminated device name, which
    // `name` is; the kernel does not write to it.
    let fd = unsafe { uapi::vfio_group_get_device_fd(group_fd.as_raw_fd(), name.as_ptr().cast()) }
        .map_err(|e| Error::ioctl("VFIO_GROUP_GET_DEVICE_FD", e))?;
    // SAFETY: the ioctl succeeded, so `fd` is a new fd that nothing else owns.
    let device = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok((container, group_fd, device))
}

/// One `/proc/PID/pagemap` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagemapEntry {
    pub present: bool,
    pub swapped: bool,
    /// The page frame number; 0 when the reader lacks CAP_SYS_ADMIN.
    pub pfn: u64,
}

/// Decode a pagemap entry (bit 63 present, bit 62 swapped, bits 0–54 the PFN).
pub fn parse_pagemap_entry(raw: u64) -> PagemapEntry {
    let present = raw & PM_PRESENT != 0;
    let swapped = raw & PM_SWAPPED != 0;
    PagemapEntry { present, swapped, pfn: if present { raw & PM_PFN_MASK } else { 0 } }
}

/// The physical address of the first of a run of 4 KiB pages whose pagemap entries are
/// `entries`, if they are present and physically contiguous.
pub fn contiguous_phys(vaddr: u64, entries: &[u64]) -> Result<u64> {
    let len = entries.len() as u64 * PAGE;
    let mut first = None;
    for (i, &raw) in entries.iter().enumerate() {
        let offset = i as u64 * PAGE;
        let e = parse_pagemap_entry(raw);
        if !e.present {
            return Err(Error::Pagemap {
                vaddr,
                reason: format!(
                    "page at offset {offset:#x} is not resident{}",
                    if e.swapped { " (swapped)" } else { "" }
                ),
            });
        }
        if e.pfn == 0 {
            return Err(Error::PagemapDenied { cause: None });
        }
        match first {
            None => first = Some(e.pfn),
            Some(f) if e.pfn != f + i as u64 => return Err(Error::NotContiguous { vaddr, len, offset }),
            Some(_) => {}
        }
    }
    first.map(|pfn| pfn * PAGE).ok_or(Error::Pagemap { vaddr, reason: "empty range".into() })
}

/// Read the pagemap entries of `[vaddr, vaddr + len)` from `pagemap` (normally
/// `/proc/self/pagemap`).
pub fn read_pagemap(pagemap: &Path, vaddr: u64, len: u64) -> Result<Vec<u64>> {
    if !vaddr.is_multiple_of(PAGE) || len == 0 {
        return Err(Error::Pagemap { vaddr, reason: format!("{len:#x} bytes: not page-aligned or empty") });
    }
    let f = File::open(pagemap).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::PagemapDenied { cause: Some(e) },
        _ => Error::Sysfs { path: pagemap.to_path_buf(), source: e },
    })?;
    let pages = len.div_ceil(PAGE) as usize;
    let mut buf = vec![0u8; pages * 8];
    f.read_exact_at(&mut buf, vaddr / PAGE * 8).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::PagemapDenied { cause: Some(e) },
        _ => Error::Sysfs { path: pagemap.to_path_buf(), source: e },
    })?;
    Ok(buf.chunks_exact(8).filter_map(|c| uapi::u64_at(c, 0)).collect())
}

/// Pin `[vaddr, vaddr + len)` (fault every page in for writing, then mlock) and return its
/// physical address, which must be contiguous.
///
/// # Safety
/// The range must be mapped, writable, and not accessed by anyone else during the call (each
/// page's first byte is read and written back).
pub unsafe fn pin_and_translate(vaddr: u64, len: u64) -> Result<u64> {
    for off in (0..len).step_by(PAGE as usize) {
        let p = (vaddr + off) as *mut u8;
        // SAFETY: the caller guarantees the range is mapped, writable and ours alone; the
        // write of the same value faults in a private page (not the shared zero page).
        unsafe { p.write_volatile(p.read_volatile()) };
    }
    let addr = NonNull::new(vaddr as *mut c_void).ok_or(Error::Io(nix::errno::Errno::ENOMEM.into()))?;
    // SAFETY: mlock only changes the residency of the caller's mapped range.
    unsafe { nix::sys::mman::mlock(addr, len as usize) }.map_err(|e| Error::Io(e.into()))?;
    let phys = read_pagemap(Path::new("/proc/self/pagemap"), vaddr, len).and_then(|e| contiguous_phys(vaddr, &e));
    if phys.is_err() {
        unpin(vaddr, len);
    }
    phys
}

/// Undo the mlock of [`pin_and_translate`].
pub fn unpin(vaddr: u64, len: u64) {
    let Some(addr) = NonNull::new(vaddr as *mut c_void) else { return };
    // SAFETY: munlock only changes residency; an unmapped range just returns ENOMEM (ignored:
    // there is nothing left to unpin then).
    let _ = unsafe { nix::sys::mman::munlock(addr, len as usize) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::fake::FakeSysfs;

    fn present(pfn: u64) -> u64 {
        PM_PRESENT | pfn
    }

    #[test]
    fn pagemap_entries() {
        assert_eq!(
            parse_pagemap_entry(PM_PRESENT | (1 << 55) | 0x1234),
            PagemapEntry { present: true, swapped: false, pfn: 0x1234 }
        );
        assert_eq!(parse_pagemap_entry(PM_SWAPPED | 0x77), PagemapEntry { present: false, swapped: true, pfn: 0 });
        assert_eq!(parse_pagemap_entry(0), PagemapEntry { present: false, swapped: false, pfn: 0 });
        assert_eq!(parse_pagemap_entry(PM_PRESENT | PM_PFN_MASK).pfn, PM_PFN_MASK);
    }

    #[test]
    fn contiguity() {
        assert_eq!(contiguous_phys(0x1000, &[present(0x200)]).unwrap(), 0x20_0000);
        let huge: Vec<u64> = (0..512).map(|i| present(0x4_0000 + i)).collect();
        assert_eq!(contiguous_phys(0x7f00_0000_0000, &huge).unwrap(), 0x4000_0000);
        let e = contiguous_phys(0x10_0000, &[present(5), present(6), present(9)]).unwrap_err();
        assert!(matches!(e, Error::NotContiguous { offset: 0x2000, len: 0x3000, .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("physically contiguous") && msg.contains("hugepage") && msg.contains("0x2000"), "{msg}");
        let e = contiguous_phys(0x10_0000, &[present(5), PM_SWAPPED]).unwrap_err();
        assert!(e.to_string().contains("offset 0x1000 is not resident (swapped)"), "{e}");
        // Present but PFN hidden: the reader lacks CAP_SYS_ADMIN.
        let e = contiguous_phys(0x10_0000, &[PM_PRESENT]).unwrap_err();
        assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");
        assert!(contiguous_phys(0, &[]).is_err());
    }

    #[test]
    fn pagemap_file_reading() {
        let t = FakeSysfs::new("pagemap");
        let pm = t.dir.join("pagemap");
        let mut b = vec![0u8; 8 * 16];
        b[8 * 3..8 * 4].copy_from_slice(&present(0x99).to_ne_bytes());
        b[8 * 4..8 * 5].copy_from_slice(&present(0x9a).to_ne_bytes());
        std::fs::write(&pm, &b).unwrap();
        let e = read_pagemap(&pm, 3 * PAGE, 2 * PAGE).unwrap();
        assert_eq!(contiguous_phys(3 * PAGE, &e).unwrap(), 0x99 * PAGE);
        assert!(read_pagemap(&pm, 3 * PAGE + 1, PAGE).is_err());
        assert!(read_pagemap(&pm, 15 * PAGE, 2 * PAGE).is_err());
    }

    #[test]
    fn own_memory_translates_or_says_why() {
        // Anonymous memory of this process: with CAP_SYS_ADMIN a single page translates;
        // without it the error names the capability.
        let mem = platform::HostMem::alloc_with(4096, platform::PageSize::Base4K).unwrap();
        // SAFETY: `mem` is ours, mapped and writable, and unused by anyone else.
        match unsafe { pin_and_translate(mem.as_ptr() as u64, 4096) } {
            Ok(phys) => {
                assert_eq!(phys % PAGE, 0);
                unpin(mem.as_ptr() as u64, 4096);
            }
            Err(e) => {
                assert!(matches!(e, Error::PagemapDenied { .. } | Error::Io(_)) && !e.to_string().is_empty(), "{e}")
            }
        }
    }

    fn opts(allow: bool) -> OpenOptions {
        OpenOptions { allow_noiommu: allow, ..Default::default() }
    }

    #[test]
    fn backend_selection() {
        let t = FakeSysfs::new("noiommu");
        let s = t.sysfs();
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), Some(3));
        t.add("0000:80:00.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), None);
        let with_iommu: PciAddress = "0000:00:03.0".parse().unwrap();
        let without: PciAddress = "0000:80:00.0".parse().unwrap();

        // A real group: the requested backend, flag or not.
        assert_eq!(select_backend(&s, with_iommu, &opts(false)).unwrap(), (Backend::Container, 3));
        assert_eq!(select_backend(&s, with_iommu, &opts(true)).unwrap(), (Backend::Container, 3));
        let o = OpenOptions { backend: Backend::Iommufd, ..opts(true) };
        assert_eq!(select_backend(&s, with_iommu, &o).unwrap(), (Backend::Iommufd, 3));
        let o = OpenOptions { backend: Backend::NoIommu, ..opts(true) };
        assert!(matches!(select_backend(&s, with_iommu, &o), Err(Error::NoIommuUnavailable { .. })));

        // No group, no flag: the NoIommu error says how to opt in.
        let e = select_backend(&s, without, &opts(false)).unwrap_err();
        assert!(matches!(e, Error::NoIommu(a) if a == without));
        let msg = e.to_string();
        assert!(msg.contains("enable_unsafe_noiommu_mode") && msg.contains("allow_noiommu"), "{msg}");

        // Flag but no module parameter (kernel without CONFIG_VFIO_NOIOMMU).
        let e = select_backend(&s, without, &opts(true)).unwrap_err();
        assert!(e.to_string().contains("CONFIG_VFIO_NOIOMMU"), "{e}");
        // Parameter N.
        let p = t.dir.join(PARAM);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "N\n").unwrap();
        assert_eq!(param_enabled(&s), Some(false));
        let e = select_backend(&s, without, &opts(true)).unwrap_err();
        assert!(e.to_string().contains("is N") && e.to_string().contains("enable_unsafe_noiommu_mode=1"), "{e}");
        // Parameter Y but the device was bound before: still no group.
        std::fs::write(&p, "Y\n").unwrap();
        let e = select_backend(&s, without, &opts(true)).unwrap_err();
        assert!(e.to_string().contains("bind it again"), "{e}");

        // The kernel's fabricated group: no-IOMMU only with the flag.
        t.add("0000:81:00.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), Some(7));
        std::fs::write(t.dir.join("kernel/iommu_groups/7/name"), "vfio-noiommu\n").unwrap();
        let fake: PciAddress = "0000:81:00.0".parse().unwrap();
        assert!(group_is_noiommu(&s, 7) && !group_is_noiommu(&s, 3));
        assert!(matches!(select_backend(&s, fake, &opts(false)), Err(Error::NoIommu(_))));
        assert_eq!(select_backend(&s, fake, &opts(true)).unwrap(), (Backend::NoIommu, 7));
        assert_eq!(group_node(Path::new("/dev"), 7), Path::new("/dev/vfio/noiommu-7"));
    }
}
