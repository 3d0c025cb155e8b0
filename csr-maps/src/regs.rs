//! Typed register access over an [`Mmio`] region.

use std::marker::PhantomData;

use platform::Mmio;

use crate::CsrError;

/// A register's value type (generated per register).
pub trait RegValue: Copy {
    /// 32 or 64.
    const WIDTH: u8;
    /// Reset value.
    const RESET: u64;
    /// From raw bits (truncated to the width).
    fn from_bits(bits: u64) -> Self;
    /// Raw bits.
    fn bits(&self) -> u64;
}

/// One register instance at a fixed offset of an MMIO region.
#[derive(Clone, Copy)]
pub struct Reg<'a, T> {
    mmio: &'a dyn Mmio,
    offset: u64,
    _t: PhantomData<T>,
}

impl<'a, T: RegValue> Reg<'a, T> {
    /// The register at byte `offset` of `mmio`.
    pub fn new(mmio: &'a dyn Mmio, offset: u64) -> Self {
        Self { mmio, offset, _t: PhantomData }
    }
    /// Absolute byte offset in the BAR.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Read the register.
    pub fn read(&self) -> Result<T, CsrError> {
        let bits = if T::WIDTH == 64 { self.mmio.read64(self.offset)? } else { self.mmio.read32(self.offset)? as u64 };
        Ok(T::from_bits(bits))
    }
    /// Write the register.
    pub fn write(&self, v: T) -> Result<(), CsrError> {
        if T::WIDTH == 64 {
            self.mmio.write64(self.offset, v.bits())?;
        } else {
            self.mmio.write32(self.offset, v.bits() as u32)?;
        }
        Ok(())
    }
    /// Read, transform, write back.
    pub fn modify(&self, f: impl FnOnce(T) -> T) -> Result<(), CsrError> {
        let v = self.read()?;
        self.write(f(v))
    }
    /// Write `f(reset value)`.
    pub fn write_with(&self, f: impl FnOnce(T) -> T) -> Result<(), CsrError> {
        self.write(f(T::from_bits(T::RESET)))
    }
}

/// A bounds-checked register array.
pub struct RegArray<'a, T> {
    mmio: &'a dyn Mmio,
    base: u64,
    count: u64,
    stride: u64,
    name: &'static str,
    _t: PhantomData<T>,
}

impl<'a, T: RegValue> RegArray<'a, T> {
    /// `count` registers of `stride` bytes from `base`.
    pub fn new(mmio: &'a dyn Mmio, base: u64, count: u64, stride: u64, name: &'static str) -> Self {
        Self { mmio, base, count, stride, name, _t: PhantomData }
    }
    /// Element `i`.
    pub fn get(&self, i: u64) -> Result<Reg<'a, T>, CsrError> {
        if i >= self.count {
            return Err(CsrError::Index { what: self.name, index: i, count: self.count });
        }
        Ok(Reg::new(self.mmio, self.base + i * self.stride))
    }
}
