//! MMIO regions: 32/64-bit little-endian register access at byte offsets.

use std::ptr::NonNull;
use std::sync::Mutex;

use volatile::VolatilePtr;

/// An MMIO access that could not be performed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MmioError {
    #[error("offset {offset:#x} (+{width} bytes) is outside the region of {size:#x} bytes")]
    OutOfRange { offset: u64, width: u8, size: u64 },
    #[error("offset {offset:#x} is not aligned to {width} bytes")]
    Misaligned { offset: u64, width: u8 },
    /// The access was refused before reaching the device (see `reason`).
    #[error("write to offset {offset:#x} refused: {reason}")]
    Refused { offset: u64, reason: &'static str },
    /// The device cannot be reached any more (a device served by another process whose
    /// connection ended): nothing was read or written.
    #[error("access at offset {offset:#x}: the device is unreachable (its connection is gone)")]
    Lost { offset: u64 },
}

/// A region of device registers (a BAR, or part of one).
///
/// Accesses are little-endian, naturally aligned, and may have side effects
/// (that is the point of registers). Implementations check bounds and alignment
/// and never panic.
pub trait Mmio: Send + Sync {
    /// Size of the region in bytes.
    fn size(&self) -> u64;
    /// Read the 32-bit register at `offset`.
    fn read32(&self, offset: u64) -> Result<u32, MmioError>;
    /// Write the 32-bit register at `offset`.
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError>;
    /// Read 64 bits at `offset` (default: low word, then high word).
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        check(offset, 8, self.size())?;
        let lo = self.read32(offset)? as u64;
        let hi = self.read32(offset + 4)? as u64;
        Ok(lo | (hi << 32))
    }
    /// Write 64 bits at `offset` (default: low word, then high word).
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        check(offset, 8, self.size())?;
        self.write32(offset, value as u32)?;
        self.write32(offset + 4, (value >> 32) as u32)
    }
}

/// Bounds and alignment check shared by implementations.
pub fn check(offset: u64, width: u8, size: u64) -> Result<(), MmioError> {
    if !offset.is_multiple_of(width as u64) {
        return Err(MmioError::Misaligned { offset, width });
    }
    match offset.checked_add(width as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MmioError::OutOfRange { offset, width, size }),
    }
}

/// Volatile access to a mapped BAR (an mmap of a VFIO region).
pub struct VolatileMmio {
    base: NonNull<u8>,
    size: u64,
}

// SAFETY: the region is device memory accessed only through volatile reads and
// writes of naturally aligned words; the hardware serialises concurrent accesses,
// and the creator of a VolatileMmio guarantees the mapping outlives it.
unsafe impl Send for VolatileMmio {}
// SAFETY: as above; no Rust references into the region are ever handed out.
unsafe impl Sync for VolatileMmio {}

impl VolatileMmio {
    /// Wrap a mapped region.
    ///
    /// # Safety
    /// `base` must point to a mapping of at least `size` bytes that stays valid
    /// (not unmapped) for the lifetime of the returned value, and that is only
    /// accessed through volatile operations.
    pub unsafe fn new(base: NonNull<u8>, size: u64) -> Self {
        Self { base, size }
    }

    fn ptr<T>(&self, offset: u64) -> VolatilePtr<'_, T> {
        // SAFETY: callers checked `offset + size_of::<T>() <= self.size` and alignment,
        // and `new`'s contract keeps the mapping alive while `self` lives.
        unsafe {
            let p = self.base.as_ptr().add(offset as usize) as *mut T;
            VolatilePtr::new(NonNull::new_unchecked(p))
        }
    }
}

impl Mmio for VolatileMmio {
    fn size(&self) -> u64 {
        self.size
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        check(offset, 4, self.size)?;
        Ok(u32::from_le(self.ptr::<u32>(offset).read()))
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        check(offset, 4, self.size)?;
        self.ptr::<u32>(offset).write(value.to_le());
        Ok(())
    }
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        check(offset, 8, self.size)?;
        Ok(u64::from_le(self.ptr::<u64>(offset).read()))
    }
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        check(offset, 8, self.size)?;
        self.ptr::<u64>(offset).write(value.to_le());
        Ok(())
    }
}

/// A plain RAM-backed region: registers without side effects. Used to decode
/// register dumps and to test typed register access.
pub struct MemMmio {
    words: Mutex<Vec<u32>>,
    size: u64,
}

impl MemMmio {
    /// A zero-filled region of `size` bytes (rounded up to 4).
    pub fn new(size: u64) -> Self {
        let n = size.div_ceil(4) as usize;
        Self { words: Mutex::new(vec![0; n]), size: n as u64 * 4 }
    }
}

impl Mmio for MemMmio {
    fn size(&self) -> u64 {
        self.size
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        check(offset, 4, self.size)?;
        let w = crate::sync::lock(&self.words);
        Ok(w[(offset / 4) as usize])
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        check(offset, 4, self.size)?;
        let mut w = crate::sync::lock(&self.words);
        w[(offset / 4) as usize] = value;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_alignment() {
        let m = MemMmio::new(16);
        assert_eq!(m.read32(16), Err(MmioError::OutOfRange { offset: 16, width: 4, size: 16 }));
        assert_eq!(m.read32(2), Err(MmioError::Misaligned { offset: 2, width: 4 }));
        assert!(m.read64(12).is_err());
        assert!(m.read32(u64::MAX - 3).is_err());
        m.write64(8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(m.read32(8).unwrap(), 0x5566_7788);
        assert_eq!(m.read32(12).unwrap(), 0x1122_3344);
        assert_eq!(m.read64(8).unwrap(), 0x1122_3344_5566_7788);
    }

    #[test]
    fn volatile_over_heap() {
        let mut backing = vec![0u64; 4];
        let base = NonNull::new(backing.as_mut_ptr() as *mut u8).unwrap();
        {
            // SAFETY: `backing` outlives `m` (scope) and is only accessed through `m` here.
            let m = unsafe { VolatileMmio::new(base, 32) };
            m.write32(4, 0xdead_beef).unwrap();
            m.write64(8, 0x0102_0304_0506_0708).unwrap();
            assert_eq!(m.read32(4).unwrap(), 0xdead_beef);
            assert_eq!(m.read64(8).unwrap(), 0x0102_0304_0506_0708);
            assert!(m.write32(32, 1).is_err());
        }
        assert_eq!(backing[0] >> 32, 0xdead_beef);
    }
}
