//! DMA memory and interrupt lines owned outside this process: what a device served to a VM
//! (vfio-user, the `sim-serve` crate) is given by its client. The client names IOVAs and
//! hands shared memory for them; the device's accesses to those IOVAs resolve into it through
//! the same IOMMU model as in-process `Platform::dma_map` mappings. Interrupt lines are the
//! client's eventfds, posted by the same device code.

use std::os::fd::OwnedFd;

use crate::handle::SimDevice;
use crate::iommu::Mapping;

/// Memory the client maps for device access (e.g. a guest RAM region mmapped from the
/// client's file descriptor). The device reads and writes `[as_ptr(), as_ptr() + len())`
/// while it is mapped; the object is dropped (and may unmap itself) once the IOVA range is
/// unmapped and no device access uses it.
pub trait ExternalDma: Send + Sync {
    /// Start of the memory.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why an external mapping or interrupt line was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExternalError {
    #[error("DMA mapping of {len:#x} bytes at IOVA {iova:#x}: empty, or it wraps the address space")]
    BadRange { iova: u64, len: u64 },
    #[error("interrupt vector {vector}: the device raises vectors 0..{count} (one per NC)")]
    NoSuchVector { vector: u32, count: u32 },
}

impl SimDevice {
    /// Map `[iova, iova + mem.len())` to `mem` for device accesses (readable/writable by
    /// the device as given). Mappings the range overlaps are removed first (a client remaps
    /// by replacing). Returns how many were replaced.
    pub fn map_external(
        &self,
        iova: u64,
        mem: Box<dyn ExternalDma>,
        readable: bool,
        writable: bool,
    ) -> Result<usize, ExternalError> {
        let len = mem.len() as u64;
        if len == 0 || iova.checked_add(len).is_none() {
            return Err(ExternalError::BadRange { iova, len });
        }
        let replaced = self.unmap_external(iova, len);
        let mut ext = platform::sync::lock(&self.dev.ext);
        self.dev.iommu.map(iova, Mapping { len, host: mem.as_ptr() as usize, readable, writable });
        ext.insert(iova, mem);
        Ok(replaced)
    }

    /// Remove every external mapping overlapping `[iova, iova + len)`. Device accesses in
    /// flight finish first (they hold the IOMMU's read lock); the memory objects are dropped
    /// after. Returns how many mappings were removed.
    pub fn unmap_external(&self, iova: u64, len: u64) -> usize {
        let end = iova.saturating_add(len);
        let mut ext = platform::sync::lock(&self.dev.ext);
        let hit: Vec<u64> =
            ext.iter().filter(|(&s, m)| s < end && s.saturating_add(m.len() as u64) > iova).map(|(&s, _)| s).collect();
        let mut dropped = Vec::with_capacity(hit.len());
        for s in &hit {
            // The write lock waits for every access holding a translation into this memory.
            self.dev.iommu.unmap(*s);
            if let Some(m) = ext.remove(s) {
                dropped.push(m);
            }
        }
        drop(ext);
        drop(dropped);
        hit.len()
    }

    /// How many external mappings overlap `range` (e.g. a client's IOVA window: what its
    /// connection still has mapped).
    pub fn external_mappings_in(&self, range: std::ops::Range<u64>) -> usize {
        let ext = platform::sync::lock(&self.dev.ext);
        ext.iter().filter(|(&s, m)| s < range.end && s.saturating_add(m.len() as u64) > range.start).count()
    }

    /// Remove every external mapping.
    pub fn unmap_all_external(&self) -> usize {
        self.unmap_external(0, u64::MAX)
    }

    /// Number of interrupt vectors the device raises (one per NC).
    pub fn irq_vectors(&self) -> u32 {
        self.dev.ncs() as u32
    }

    /// Post interrupt `vector` to `fd` (an eventfd the client owns) from now on, or to
    /// nothing with `None`.
    pub fn set_irq_eventfd(&self, vector: u32, fd: Option<OwnedFd>) -> Result<(), ExternalError> {
        let count = self.irq_vectors();
        if vector >= count {
            return Err(ExternalError::NoSuchVector { vector, count });
        }
        let mut m = platform::sync::lock(&self.dev.irq);
        match fd {
            Some(fd) => {
                m.insert(vector, fd.into());
            }
            None => {
                m.remove(&vector);
            }
        }
        Ok(())
    }

    /// Forget every interrupt eventfd.
    pub fn clear_irq_eventfds(&self) {
        platform::sync::lock(&self.dev.irq).clear();
    }
}
