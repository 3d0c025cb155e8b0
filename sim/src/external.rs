//! DMA memory and interrupt lines owned outside this process: what a device served to a VM
//! (vfio-user, the `sim-serve` crate) is given by its client. The client names IOVAs and
//! hands shared memory for them; the device's accesses to those IOVAs resolve into it through
//! the same IOMMU model as in-process `Platform::dma_map` mappings. Interrupt lines are the
//! client's eventfds, posted by the same device code. The `SimDevice` operations that map
//! them (`map_external`, `set_irq_eventfd`, …) are in [`crate::handle`]; this module is a leaf.

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
