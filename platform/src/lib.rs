//! The Platform boundary between the driver (hal) and a device backend
//! (the `vfio` crate for real hardware, the `sim` crate for the simulator).
//!
//! A backend offers exactly what a userspace driver has on VFIO:
//! - BARs as [`Mmio`] regions (32/64-bit reads and writes at byte offsets);
//! - DMA mapping of host memory ([`HostMem`]) to device-visible IOVAs ([`DmaMapping`]),
//!   with the device's access as a [`DmaPerm`] set;
//! - interrupt eventfds (waited on through [`Irq`]);
//! - device reset.
//!
//! This crate knows nothing of Neuron. `unsafe` lives only in [`mmio::VolatileMmio`]
//! (volatile access to a mapped BAR) and [`dma::HostMem`] (raw copies and atomics on
//! anonymous `memmap2` mappings shared with a device) and [`shm::ShmWords`] (atomic words in a
//! file mapping shared with other processes) and [`published::SharedWords`] (atomic words in a
//! sealed memfd shared with other processes) and [`fork`] (registering a `pthread_atfork` child
//! handler); [`Irq`] waits on an eventfd through `nix`.

pub mod clock;
pub mod dma;
pub mod failpoint;
pub mod fork;
pub mod irq;
pub mod mmio;
pub mod published;
pub mod seqlock;
pub mod shm;
pub mod sync;

/// The atomics [`seqlock`] is written against (std here; its loom model substitutes loom's).
mod atomic {
    pub use std::sync::atomic::{fence, AtomicU32, Ordering};

    /// A busy-wait step.
    pub fn pause() {
        std::hint::spin_loop();
    }
}

pub use dma::{DmaDir, DmaMapping, DmaPerm, DmaUnmap, HostMem, HostMemError, PageSize};
pub use irq::Irq;
pub use mmio::{MemMmio, Mmio, MmioError, VolatileMmio};
pub use published::{Publisher, SharedMemError, SharedWords, Subscriber, Writers};
pub use shm::{ShmError, ShmWords};

use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Errors a platform backend reports.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    #[error("BAR{0} is not present on this device")]
    NoSuchBar(u8),
    #[error("DMA mapping failed: {0}")]
    DmaMap(String),
    #[error("IOVA space exhausted: no free range of {len} bytes")]
    IovaExhausted { len: u64 },
    #[error("host memory: {0}")]
    HostMem(#[from] HostMemError),
    #[error("interrupt vector {vector} unavailable: {reason}")]
    Irq { vector: u32, reason: String },
    #[error("reset failed: {0}")]
    Reset(String),
    #[error("MMIO: {0}")]
    Mmio(#[from] MmioError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
    /// A failure injected by a test ([`failpoint`]; only with the `failpoints` feature).
    #[error("injected failure at failpoint {point} (step {hit})")]
    Injected { point: &'static str, hit: u64 },
}

/// Identity of the device behind a platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// PCI revision ID.
    pub revision: u8,
    /// PCI address (`0000:00:1e.0`) or a simulator label (`sim0`).
    pub location: String,
}

/// A device as seen from userspace: BARs, DMA, interrupts, reset.
pub trait Platform: Send + Sync {
    /// Vendor/device IDs and location.
    fn identity(&self) -> DeviceIdentity;

    /// The MMIO region of BAR `index`.
    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError>;

    /// Map `mem` for device access and return the mapping (IOVA chosen by the
    /// platform). Unmapped when the returned [`DmaMapping`] is dropped.
    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError>;

    /// An eventfd signalled when interrupt `vector` fires, or `Ok(None)` when the
    /// platform delivers no interrupts for it (callers then poll).
    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError>;

    /// Reset the whole function (FLR or equivalent).
    fn reset(&self) -> Result<(), PlatformError>;

    /// Bookkeeping hook: the driver's device-memory allocator reports bytes allocated
    /// (positive) or freed (negative). Hardware ignores it; the simulator audits it so
    /// tests can prove that nothing leaks.
    fn account_device_memory(&self, _delta: i64) {}

    /// Bookkeeping hook: the driver's device-memory allocator is about to free `len` bytes at
    /// device address `addr`. Hardware ignores it; the simulator checks that nothing enabled
    /// still points there (an engine's instruction fetch).
    fn device_memory_freed(&self, _addr: u64, _len: u64) {}

    /// The largest buffer one [`Platform::dma_map`] can cover, when the platform limits it
    /// (`None`: any size). VFIO's no-IOMMU mode gives the device physical addresses, so a
    /// mapping must be physically contiguous: one hugepage at most.
    fn max_dma_mapping(&self) -> Option<usize> {
        None
    }

    /// Whether the driver may write registers whose placement or layout is modeled (a
    /// project choice where the public sources are silent) rather than documented. A
    /// simulator answers `true` (it implements the model); real hardware answers `false`
    /// unless the operator opted in, because a modeled offset may be something else on the
    /// device. The default is the safe answer.
    fn modeled_writes_allowed(&self) -> bool {
        false
    }

    /// Whether the device can still be reached. A platform whose device sits behind a
    /// connection (vfio-user: a served device, a shared device's broker) answers `false` once
    /// the connection is gone, so that a wait on memory the device writes (a notification
    /// queue in shared memory) does not outlast the device until its timeout. Asked rarely,
    /// during long waits. The default: always reachable.
    fn reachable(&self) -> bool {
        true
    }
}

/// The operator's opt-in for writes to modeled registers on real hardware
/// ([`Platform::modeled_writes_allowed`]): set to `1` for bring-up of the modeled blocks. A
/// hardware platform reads it when it is created ([`allow_modeled_from_env`]).
pub const ALLOW_MODELED_ENV: &str = "NEURON_VFIO_ALLOW_MODELED";

/// Whether [`ALLOW_MODELED_ENV`] is set to `1`.
pub fn allow_modeled_from_env() -> bool {
    std::env::var(ALLOW_MODELED_ENV).is_ok_and(|v| v.trim() == "1")
}
