//! The `modeled` guard: on a platform that does not implement this project's model of the
//! blocks the public sources leave undocumented (real hardware), writes to registers whose
//! placement or layout is modeled are refused before they reach the device, unless the
//! operator opted in (the platform's [`platform::Platform::modeled_writes_allowed`]).
//! Reads pass through.

use std::sync::Arc;

use csr_maps::Arch;
use platform::{Mmio, MmioError};

/// Why a write was refused.
pub const MODELED_REFUSED: &str = "the register's placement is modeled (not documented by a public source); \
     set NEURON_VFIO_ALLOW_MODELED=1 for bring-up of the modeled blocks on real hardware";

/// BAR0 with writes to modeled spans refused.
pub struct ModeledGuard {
    arch: &'static Arch,
    inner: Arc<dyn Mmio>,
}

impl ModeledGuard {
    /// Guard `inner` (the arch's BAR0).
    pub fn new(arch: &'static Arch, inner: Arc<dyn Mmio>) -> Self {
        // Computed once per arch; done here so the first write pays nothing.
        let _ = arch.modeled_spans();
        Self { arch, inner }
    }

    fn check(&self, offset: u64, width: u64) -> Result<(), MmioError> {
        if self.arch.is_modeled(offset, width) {
            return Err(MmioError::Refused { offset, reason: MODELED_REFUSED });
        }
        Ok(())
    }
}

impl Mmio for ModeledGuard {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        self.inner.read32(offset)
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        self.check(offset, 4)?;
        self.inner.write32(offset, value)
    }
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        self.inner.read64(offset)
    }
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        self.check(offset, 8)?;
        self.inner.write64(offset, value)
    }
}
