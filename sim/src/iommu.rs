//! The simulator's IOMMU: every device-initiated access to host memory is translated
//! through the mappings the driver registered with `Platform::dma_map`. Anything else
//! is a DMA fault.

use std::collections::BTreeMap;
use std::sync::RwLock;

/// One live mapping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapping {
    pub len: u64,
    /// Host virtual address (from `HostMem::as_ptr`); valid until unmapped.
    pub host: usize,
    pub readable: bool,
    pub writable: bool,
}

/// Why a device access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaFault {
    /// No mapping covers the IOVA.
    Unmapped { iova: u64 },
    /// The mapping does not grant the access (write to a device-read-only buffer, ...).
    Permission { iova: u64, write: bool },
    /// The device address decodes to nothing (neither host window, HBM, nor a BAR0 window).
    Decode { addr: u64 },
}

/// IOVA → host translations, plus the IOVA allocator used by `dma_map`.
pub(crate) struct Iommu {
    pub maps: RwLock<BTreeMap<u64, Mapping>>,
    free: std::sync::Mutex<BTreeMap<u64, u64>>,
}

impl Iommu {
    /// An IOMMU with IOVAs allocatable in `[lo, hi)`.
    pub fn new(lo: u64, hi: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(lo, hi - lo);
        Self { maps: RwLock::new(BTreeMap::new()), free: std::sync::Mutex::new(free) }
    }

    /// Allocate `len` bytes (4 KiB aligned) of IOVA space.
    pub fn alloc_iova(&self, len: u64) -> Option<u64> {
        let len = len.div_ceil(4096) * 4096;
        let mut free = platform::sync::lock(&self.free);
        let (&start, &size) = free.iter().find(|(_, &s)| s >= len)?;
        free.remove(&start);
        if size > len {
            free.insert(start + len, size - len);
        }
        Some(start)
    }

    /// Return IOVA space (coalescing with neighbours).
    pub fn free_iova(&self, start: u64, len: u64) {
        let len = len.div_ceil(4096) * 4096;
        let mut free = platform::sync::lock(&self.free);
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = free.range(..start).next_back() {
            if ps + pl == start {
                free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = free.get(&(start + len)) {
            free.remove(&(start + len));
            l += nl;
        }
        free.insert(s, l);
    }

    pub fn map(&self, iova: u64, m: Mapping) {
        platform::sync::write(&self.maps).insert(iova, m);
    }

    pub fn unmap(&self, iova: u64) -> Option<Mapping> {
        platform::sync::write(&self.maps).remove(&iova)
    }

    /// Number of live mappings and their total bytes.
    pub fn usage(&self) -> (u64, u64) {
        let m = platform::sync::read(&self.maps);
        (m.len() as u64, m.values().map(|x| x.len).sum())
    }
}

/// Translate `[iova, iova+len)` under a held read guard into host pieces.
pub(crate) fn translate(
    maps: &BTreeMap<u64, Mapping>,
    iova: u64,
    len: u64,
    write: bool,
    out: &mut impl FnMut(usize, usize),
) -> Result<(), DmaFault> {
    let mut cur = iova;
    let end = iova.checked_add(len).ok_or(DmaFault::Unmapped { iova })?;
    while cur < end {
        let (&base, m) = maps.range(..=cur).next_back().ok_or(DmaFault::Unmapped { iova: cur })?;
        if cur >= base + m.len {
            return Err(DmaFault::Unmapped { iova: cur });
        }
        if (write && !m.writable) || (!write && !m.readable) {
            return Err(DmaFault::Permission { iova: cur, write });
        }
        let n = (end - cur).min(base + m.len - cur);
        out(m.host + (cur - base) as usize, n as usize);
        cur += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iova_alloc_and_coalesce() {
        let io = Iommu::new(0x10000, 0x100000);
        let a = io.alloc_iova(100).unwrap();
        let b = io.alloc_iova(8192).unwrap();
        assert_eq!(a, 0x10000);
        assert_eq!(b, 0x11000);
        io.free_iova(a, 100);
        io.free_iova(b, 8192);
        assert_eq!(io.alloc_iova(0xF0000), Some(0x10000));
        assert_eq!(io.alloc_iova(1), None);
    }

    #[test]
    fn translation_spans_and_faults() {
        let mut maps = BTreeMap::new();
        maps.insert(0x1000, Mapping { len: 0x1000, host: 0x7000_0000, readable: true, writable: true });
        maps.insert(0x2000, Mapping { len: 0x1000, host: 0x9000_0000, readable: true, writable: false });
        let mut out = vec![];
        translate(&maps, 0x1ff0, 0x20, false, &mut |h, l| out.push((h, l))).unwrap();
        assert_eq!(out, vec![(0x7000_0ff0, 0x10), (0x9000_0000, 0x10)]);
        out.clear();
        assert_eq!(
            translate(&maps, 0x1ff0, 0x20, true, &mut |h, l| out.push((h, l))),
            Err(DmaFault::Permission { iova: 0x2000, write: true })
        );
        assert_eq!(translate(&maps, 0x2ff0, 0x20, false, &mut |_, _| ()), Err(DmaFault::Unmapped { iova: 0x3000 }));
        assert_eq!(translate(&maps, 0x500, 4, false, &mut |_, _| ()), Err(DmaFault::Unmapped { iova: 0x500 }));
    }
}
