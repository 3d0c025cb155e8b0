//! DMA: pin host memory and map it at IOVAs from an allocator bounded by the IOMMU's valid
//! ranges (in no-IOMMU mode: pin it and use its physical address, see [`crate::noiommu`]). Every mapping is undone when its [`DmaMapping`] drops (also on error paths and
//! panics), before its memory is freed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use platform::{DmaDir, DmaMapping, DmaUnmap, HostMem};

use crate::error::{Error, Result};
use crate::iommu::{Backend, Iommu, IommuInfo};
use crate::iova::IovaAllocator;

/// The IOVA space of one device (or of the devices sharing its IOMMU context).
pub struct DmaSpace {
    iommu: Iommu,
    info: IommuInfo,
    alloc: Mutex<IovaAllocator>,
    pinned: AtomicU64,
    ioctls: AtomicU64,
}

impl DmaSpace {
    pub(crate) fn new(iommu: Iommu, info: IommuInfo, alloc: IovaAllocator) -> Self {
        Self { iommu, info, alloc: Mutex::new(alloc), pinned: AtomicU64::new(0), ioctls: AtomicU64::new(0) }
    }

    pub(crate) fn iommu(&self) -> &Iommu {
        &self.iommu
    }

    /// What the IOMMU reported.
    pub fn info(&self) -> &IommuInfo {
        &self.info
    }

    /// Bytes pinned through this space now.
    pub fn pinned(&self) -> u64 {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Map and unmap ioctls issued so far.
    pub fn ioctl_count(&self) -> u64 {
        self.ioctls.load(Ordering::Relaxed)
    }

    /// Allocate `len` bytes of host memory (hugepages when available) and map it.
    pub fn alloc_map(self: &Arc<Self>, len: usize, dir: DmaDir) -> Result<DmaMapping> {
        self.map(HostMem::alloc(len)?, dir)
    }

    /// Pin `mem` and map it at a fresh IOVA (aligned to its page size, so the IOMMU can use
    /// large pages). On failure `mem` is freed and nothing stays mapped.
    pub fn map(self: &Arc<Self>, mem: HostMem, dir: DmaDir) -> Result<DmaMapping> {
        let len = mem.len() as u64;
        crate::bind::check_memlock(self.pinned(), len)?;
        if self.iommu.backend() == Backend::NoIommu {
            // SAFETY: as below; `mem` was just handed to us, nobody else accesses it.
            let phys = unsafe { self.iommu.map_phys(mem.as_ptr() as u64, len) }?;
            self.pinned.fetch_add(len, Ordering::Relaxed);
            return Ok(DmaMapping::new(mem, phys, dir, self.clone()));
        }
        let align = (mem.page_size().bytes() as u64).max(4096);
        let iova = platform::sync::lock(&self.alloc).alloc(len, align)?;
        // SAFETY: `mem` moves into the DmaMapping returned below, which unmaps this IOVA range
        // (DmaUnmap::unmap) before freeing the memory; HostMem gives out no references.
        let mapped = unsafe { self.iommu.map(mem.as_ptr() as u64, iova, len, dir.perm()) };
        self.ioctls.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = mapped {
            platform::sync::lock(&self.alloc).free(iova);
            return Err(e);
        }
        self.pinned.fetch_add(len, Ordering::Relaxed);
        Ok(DmaMapping::new(mem, iova, dir, self.clone()))
    }

    /// Map raw memory at a chosen IOVA outside the allocator (for callers that manage their own
    /// layout, e.g. page-by-page mapping in benchmarks). The IOVA block is reserved first.
    ///
    /// # Safety
    /// `[vaddr, vaddr + len)` must stay mapped until [`unmap_raw`](Self::unmap_raw) of the same
    /// range and be accessed only through raw pointers meanwhile.
    pub unsafe fn map_raw(&self, vaddr: u64, iova: u64, len: u64, dir: DmaDir) -> Result<()> {
        // SAFETY: forwarded from the caller.
        let r = unsafe { self.iommu.map(vaddr, iova, len, dir.perm()) };
        self.ioctls.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// Undo [`map_raw`](Self::map_raw).
    pub fn unmap_raw(&self, iova: u64, len: u64) -> Result<()> {
        self.ioctls.fetch_add(1, Ordering::Relaxed);
        self.iommu.unmap(iova, len)
    }

    /// Reserve an IOVA block without mapping it (e.g. a guard range).
    pub fn reserve_iova(&self, len: u64, align: u64) -> Result<u64> {
        platform::sync::lock(&self.alloc).alloc(len, align)
    }

    /// Release a block from [`reserve_iova`](Self::reserve_iova).
    pub fn release_iova(&self, iova: u64) -> Result<()> {
        if platform::sync::lock(&self.alloc).free(iova) {
            Ok(())
        } else {
            Err(Error::IovaExhausted { len: 0, align: 0 })
        }
    }
}

impl DmaUnmap for DmaSpace {
    fn unmap(&self, iova: u64, len: u64) {
        self.ioctls.fetch_add(1, Ordering::Relaxed);
        // An unmap can only fail if the device (and with it the IOMMU domain) is already
        // gone, in which case the kernel dropped the mapping itself.
        let _ = self.iommu.unmap(iova, len);
        // No-IOMMU mappings sit at physical addresses, not in the allocator.
        if self.iommu.backend() != Backend::NoIommu {
            platform::sync::lock(&self.alloc).free(iova);
        }
        self.pinned.fetch_sub(len.min(self.pinned()), Ordering::Relaxed);
    }
}
