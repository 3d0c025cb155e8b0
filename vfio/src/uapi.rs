//! The kernel ABI pieces not covered by `vfio-bindings`: ioctl numbers, the iommufd structs,
//! and parsing of the capability chains that VFIO appends to its info structs.
//!
//! Numbers and layouts follow `include/uapi/linux/vfio.h` and `include/uapi/linux/iommufd.h`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// `';'`, the ioctl type shared by VFIO and iommufd.
const IOC_TYPE: u64 = b';' as u64;
const VFIO_BASE: u64 = 100;

/// `_IO(';', nr)`: VFIO and iommufd encode no size or direction in their numbers.
const fn io(nr: u64) -> u64 {
    (IOC_TYPE << 8) | nr
}

pub const VFIO_GET_API_VERSION: u64 = io(VFIO_BASE);
pub const VFIO_CHECK_EXTENSION: u64 = io(VFIO_BASE + 1);
pub const VFIO_SET_IOMMU: u64 = io(VFIO_BASE + 2);
pub const VFIO_GROUP_GET_STATUS: u64 = io(VFIO_BASE + 3);
pub const VFIO_GROUP_SET_CONTAINER: u64 = io(VFIO_BASE + 4);
pub const VFIO_GROUP_GET_DEVICE_FD: u64 = io(VFIO_BASE + 6);
pub const VFIO_DEVICE_GET_INFO: u64 = io(VFIO_BASE + 7);
pub const VFIO_DEVICE_GET_REGION_INFO: u64 = io(VFIO_BASE + 8);
pub const VFIO_DEVICE_GET_IRQ_INFO: u64 = io(VFIO_BASE + 9);
pub const VFIO_DEVICE_SET_IRQS: u64 = io(VFIO_BASE + 10);
pub const VFIO_DEVICE_RESET: u64 = io(VFIO_BASE + 11);
pub const VFIO_IOMMU_GET_INFO: u64 = io(VFIO_BASE + 12);
pub const VFIO_DEVICE_BIND_IOMMUFD: u64 = io(VFIO_BASE + 18);
pub const VFIO_DEVICE_ATTACH_IOMMUFD_PT: u64 = io(VFIO_BASE + 19);

pub const IOMMU_DESTROY: u64 = io(0x80);
pub const IOMMU_IOAS_ALLOC: u64 = io(0x81);
pub const IOMMU_IOAS_IOVA_RANGES: u64 = io(0x84);
pub const IOMMU_IOAS_MAP: u64 = io(0x85);
pub const IOMMU_IOAS_UNMAP: u64 = io(0x86);

pub const IOMMU_IOAS_MAP_FIXED_IOVA: u32 = 1 << 0;
pub const IOMMU_IOAS_MAP_WRITEABLE: u32 = 1 << 1;
pub const IOMMU_IOAS_MAP_READABLE: u32 = 1 << 2;

/// `VFIO_GROUP_FLAGS_VIABLE` of `struct vfio_group_status`.
pub const VFIO_GROUP_FLAGS_VIABLE: u32 = 1 << 0;

/// `struct vfio_group_status`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct VfioGroupStatus {
    pub argsz: u32,
    pub flags: u32,
}

/// `struct iommu_destroy`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IommuDestroy {
    pub size: u32,
    pub id: u32,
}

/// `struct iommu_ioas_alloc`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IommuIoasAlloc {
    pub size: u32,
    pub flags: u32,
    pub out_ioas_id: u32,
}

/// `struct iommu_iova_range` (inclusive `last`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IommuIovaRange {
    pub start: u64,
    pub last: u64,
}

/// `struct iommu_ioas_iova_ranges`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IommuIoasIovaRanges {
    pub size: u32,
    pub ioas_id: u32,
    pub num_iovas: u32,
    pub reserved: u32,
    pub allowed_iovas: u64,
    pub out_iova_alignment: u64,
}

/// `struct iommu_ioas_map`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IommuIoasMap {
    pub size: u32,
    pub flags: u32,
    pub ioas_id: u32,
    pub reserved: u32,
    pub user_va: u64,
    pub length: u64,
    pub iova: u64,
}

/// `struct iommu_ioas_unmap`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IommuIoasUnmap {
    pub size: u32,
    pub ioas_id: u32,
    pub iova: u64,
    pub length: u64,
}

/// `struct vfio_device_bind_iommufd` up to `out_devid` (the kernel accepts this minimum size).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct VfioDeviceBindIommufd {
    pub argsz: u32,
    pub flags: u32,
    pub iommufd: i32,
    pub out_devid: u32,
}

/// `struct vfio_device_attach_iommufd_pt` up to `pt_id`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct VfioDeviceAttachIommufdPt {
    pub argsz: u32,
    pub flags: u32,
    pub pt_id: u32,
}

/// Issue `ioctl(fd, req, arg)` and turn -1 into the errno.
///
/// # Safety
/// `arg` must point to a value of the type (and size) that `req` expects, valid for the
/// duration of the call, and writable when the ioctl writes back.
pub unsafe fn ioctl<T>(fd: BorrowedFd<'_>, req: u64, arg: *mut T) -> std::io::Result<i32> {
    // SAFETY: forwarded from the caller's contract.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Issue an ioctl that takes an integer argument (or none).
pub fn ioctl_val(fd: BorrowedFd<'_>, req: u64, val: libc::c_ulong) -> std::io::Result<i32> {
    // SAFETY: the requests used with this helper take an integer, not a pointer, so the
    // kernel reads nothing from our memory.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, val) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// One capability found in a VFIO info buffer: its id, version and payload (the bytes
/// after the 8-byte header, up to the next capability or the end of the buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability<'a> {
    pub id: u16,
    pub version: u16,
    pub data: &'a [u8],
}

/// Walk the capability chain of a VFIO info buffer starting at `first` (0 = none).
/// Offsets are relative to the start of `buf`. Malformed chains (out-of-range offsets,
/// loops) end the walk instead of panicking.
pub fn capabilities(buf: &[u8], first: u32) -> Vec<Capability<'_>> {
    let mut out = Vec::new();
    let mut off = first as usize;
    let mut seen = std::collections::HashSet::new();
    while off != 0 && off + 8 <= buf.len() && seen.insert(off) {
        let id = u16::from_ne_bytes([buf[off], buf[off + 1]]);
        let version = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]);
        let next = u32::from_ne_bytes([buf[off + 4], buf[off + 5], buf[off + 6], buf[off + 7]]) as usize;
        // A capability's payload runs to the next one when it follows, else to the end.
        let end = if next > off && next <= buf.len() { next } else { buf.len() };
        out.push(Capability { id, version, data: &buf[off + 8..end] });
        off = next;
    }
    out
}

/// Read a native-endian u32 at `off` of `data`, if present.
pub fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    data.get(off..off + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Read a native-endian u64 at `off` of `data`, if present.
pub fn u64_at(data: &[u8], off: usize) -> Option<u64> {
    data.get(off..off + 8).map(|b| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_ne_bytes(a)
    })
}

/// `(u32 count, u32 reserved, count × (u64, u64))`: the shape shared by the IOVA-range
/// capability and the sparse-mmap capability.
pub fn pairs_after_count(data: &[u8]) -> Vec<(u64, u64)> {
    let n = u32_at(data, 0).unwrap_or(0) as usize;
    (0..n)
        .map_while(|i| {
            let base = 8 + i * 16;
            Some((u64_at(data, base)?, u64_at(data, base + 8)?))
        })
        .collect()
}

/// A zeroed, 8-byte aligned buffer of at least `len` bytes for variable-size ioctls.
pub struct IoctlBuf {
    words: Vec<u64>,
    len: usize,
}

impl IoctlBuf {
    pub fn new(len: usize) -> Self {
        Self { words: vec![0; len.div_ceil(8)], len }
    }
    pub fn as_mut_ptr<T>(&mut self) -> *mut T {
        self.words.as_mut_ptr() as *mut T
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the Vec holds `words.len() * 8 >= len` initialised bytes; u8 has no alignment needs.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
    pub fn put_u32(&mut self, off: usize, v: u32) {
        // SAFETY: the Vec holds at least `len` initialised bytes, borrowed mutably through `self`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) };
        if let Some(d) = bytes.get_mut(off..off + 4) {
            d.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(buf: &mut Vec<u8>, id: u16, next: u32, payload: &[u8]) {
        buf.extend_from_slice(&id.to_ne_bytes());
        buf.extend_from_slice(&1u16.to_ne_bytes());
        buf.extend_from_slice(&next.to_ne_bytes());
        buf.extend_from_slice(payload);
    }

    #[test]
    fn ioctl_numbers_match_the_uapi() {
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
        assert_eq!(VFIO_DEVICE_BIND_IOMMUFD, 0x3b76);
        assert_eq!(IOMMU_IOAS_MAP, 0x3b85);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_SET_CONTAINER, 0x3b68);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(std::mem::size_of::<VfioGroupStatus>(), 8);
        assert_eq!(std::mem::size_of::<IommuIoasMap>(), 40);
        assert_eq!(std::mem::size_of::<IommuIoasIovaRanges>(), 32);
        assert_eq!(std::mem::size_of::<IommuIoasUnmap>(), 24);
    }

    #[test]
    fn walks_a_capability_chain() {
        let mut buf = vec![0u8; 24];
        let mut payload = vec![];
        payload.extend_from_slice(&2u32.to_ne_bytes());
        payload.extend_from_slice(&0u32.to_ne_bytes());
        for (a, b) in [(0u64, 0xfedf_ffffu64), (0xfef0_0000, 0x7f_ffff_ffff)] {
            payload.extend_from_slice(&a.to_ne_bytes());
            payload.extend_from_slice(&b.to_ne_bytes());
        }
        let second = 24 + 8 + payload.len() as u32;
        cap(&mut buf, 1, second, &payload);
        cap(&mut buf, 3, 0, &65535u32.to_ne_bytes());
        let caps = capabilities(&buf, 24);
        assert_eq!(caps.len(), 2);
        assert_eq!(caps[0].id, 1);
        assert_eq!(pairs_after_count(caps[0].data), vec![(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)]);
        assert_eq!(caps[1].id, 3);
        assert_eq!(u32_at(caps[1].data, 0), Some(65535));
    }

    #[test]
    fn malformed_chains_end_the_walk() {
        let mut buf = vec![0u8; 8];
        cap(&mut buf, 1, 8, &[]); // points at itself
        assert_eq!(capabilities(&buf, 8).len(), 1);
        assert!(capabilities(&buf, 1000).is_empty());
        // A count larger than the payload yields only the pairs present.
        let mut p = 5u32.to_ne_bytes().to_vec();
        p.extend_from_slice(&[0; 4]);
        p.extend_from_slice(&[1; 16]);
        assert_eq!(pairs_after_count(&p).len(), 1);
    }
}
