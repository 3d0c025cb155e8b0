//! Typed register access over an [`Mmio`] region, with each register's access rights in its
//! type.
//!
//! A [`Reg<'a, T, A>`](Reg) is one register of value type `T`; `A` is its access, the
//! `access` attribute of its description (`blocks/*.toml`) as a marker type: [`ReadWrite`],
//! [`ReadOnly`], [`WriteOnly`], [`W1c`], [`W0c`] or [`W1s`]. The operations a register offers
//! follow from `A`:
//!
//! | access | [`read`](Reg::read) | [`write`](Reg::write), [`write_with`](Reg::write_with) | [`modify`](Reg::modify) | other |
//! |---|---|---|---|---|
//! | `rw` | yes | yes | yes | |
//! | `ro` | yes | | | |
//! | `wo` | | yes | | |
//! | `w1c`, `w0c` | yes | | | [`clear`](Reg::clear), [`clear_all`](Reg::clear_all) |
//! | `w1s` | yes | | | [`set`](Reg::set) |
//!
//! A misuse does not build. Writing a read-only register:
//!
//! ```
//! # use csr_maps::blocks::nc_intc_g0::{Block, Status, Mask};
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! g0.mask().write(Mask(0))?; // `mask` is read-write
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//! ```compile_fail,E0599
//! # use csr_maps::blocks::nc_intc_g0::{Block, Status, Mask};
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! g0.status().write(Status(0))?; // `status` is read-only
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//!
//! Reading a write-only register:
//!
//! ```
//! # use csr_maps::blocks::nc_intc_g0::Block;
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! let _ = g0.mask().read()?; // `mask` is read-write
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//! ```compile_fail,E0599
//! # use csr_maps::blocks::nc_intc_g0::Block;
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! let _ = g0.mask_clear().read()?; // `mask_clear` is write-only
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//!
//! Read-modify-write of a clear-on-write register (write-0-to-clear, then write-1-to-clear):
//! a `modify` would write back the bits it read and so clear (w1c) or keep (w0c) exactly the
//! wrong ones; such a register offers [`clear`](Reg::clear) instead.
//!
//! ```
//! # use csr_maps::blocks::nc_intc_g0::Block;
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! g0.mask().modify(|m| m.with_seq_fatal(1))?; // `mask` is read-write
//! g0.cause().clear(g0.cause().read()?)?; // `cause` is w0c
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//! ```compile_fail,E0599
//! # use csr_maps::blocks::nc_intc_g0::Block;
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! g0.cause().modify(|c| c.with_seq_fatal(0))?; // `cause` is w0c
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//! ```
//! # use csr_maps::blocks::nc_regions::Block;
//! # let bar = platform::MemMmio::new(0x1000);
//! let t = Block::at(&bar, 0);
//! t.oob_status().clear(t.oob_status().read()?)?; // `oob_status` is w1c
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//! ```compile_fail,E0599
//! # use csr_maps::blocks::nc_regions::Block;
//! # let bar = platform::MemMmio::new(0x1000);
//! let t = Block::at(&bar, 0);
//! t.oob_status().modify(|s| s.with_latched(0))?; // `oob_status` is w1c
//! # Ok::<(), csr_maps::CsrError>(())
//! ```
//!
//! Nor does a plain `write` of a clear-on-write register (its value would be read as a
//! clear mask):
//!
//! ```compile_fail,E0599
//! # use csr_maps::blocks::nc_intc_g0::{Block, Cause};
//! # let bar = platform::MemMmio::new(0x100);
//! let g0 = Block::at(&bar, 0);
//! g0.cause().write(Cause(0))?; // `cause` is w0c: `clear_all()` says what this does
//! # Ok::<(), csr_maps::CsrError>(())
//! ```

use std::marker::PhantomData;

use platform::Mmio;

use crate::meta;
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

mod sealed {
    pub trait Sealed {}
}

/// A register access marker: what the hardware does on a read and on a write.
pub trait Access: sealed::Sealed {
    /// The same access as run-time metadata.
    const ACCESS: meta::Access;
}

/// A read returns the register's content.
pub trait Readable: Access {}

/// A write stores the written value (plain write semantics).
pub trait Writable: Access {}

/// A write clears the latched bits it names: [`W1c`] and [`W0c`].
pub trait ClearOnWrite: Access {
    /// The raw value to write to clear the bits of `mask` (and no other) in a register of
    /// `width` bits.
    fn clear_value(mask: u64, width: u8) -> u64;
}

macro_rules! access {
    ($(#[$doc:meta] $name:ident => $meta:ident: $($tr:ident),*;)*) => {$(
        #[$doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {}
        impl sealed::Sealed for $name {}
        impl Access for $name {
            const ACCESS: meta::Access = meta::Access::$meta;
        }
        $(impl $tr for $name {})*
    )*};
}

access! {
    /// `rw`: read, write, read-modify-write.
    ReadWrite => ReadWrite: Readable, Writable;
    /// `ro`: read only; a write has no effect.
    ReadOnly => ReadOnly: Readable;
    /// `wo`: write only; a read returns nothing meaningful.
    WriteOnly => WriteOnly: Writable;
    /// `w1c`: readable latched bits; writing a 1 to a bit clears it, a 0 has no effect.
    W1c => WriteOneToClear: Readable;
    /// `w0c`: readable latched bits; writing a 0 to a bit clears it, a 1 has no effect.
    W0c => WriteZeroToClear: Readable;
    /// `w1s`: readable bits; writing a 1 to a bit sets it, a 0 has no effect.
    W1s => WriteOneToSet: Readable;
}

/// All ones in a register of `width` bits.
fn ones(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

impl ClearOnWrite for W1c {
    fn clear_value(mask: u64, width: u8) -> u64 {
        mask & ones(width)
    }
}

impl ClearOnWrite for W0c {
    fn clear_value(mask: u64, width: u8) -> u64 {
        !mask & ones(width)
    }
}

/// One register instance at a fixed offset of an MMIO region; `A` is its access (see the
/// [module documentation](self)).
pub struct Reg<'a, T, A> {
    mmio: &'a dyn Mmio,
    offset: u64,
    _t: PhantomData<(T, A)>,
}

// By hand: derived impls would demand `T: Clone` and `A: Clone`.
impl<T, A> Clone for Reg<'_, T, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, A> Copy for Reg<'_, T, A> {}

impl<'a, T: RegValue, A: Access> Reg<'a, T, A> {
    /// The register at byte `offset` of `mmio`.
    pub fn new(mmio: &'a dyn Mmio, offset: u64) -> Self {
        Self { mmio, offset, _t: PhantomData }
    }
    /// Absolute byte offset in the BAR.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The register's access.
    pub fn access(&self) -> meta::Access {
        A::ACCESS
    }
    fn store(&self, bits: u64) -> Result<(), CsrError> {
        if T::WIDTH == 64 {
            self.mmio.write64(self.offset, bits)?;
        } else {
            self.mmio.write32(self.offset, bits as u32)?;
        }
        Ok(())
    }
}

impl<T: RegValue, A: Readable> Reg<'_, T, A> {
    /// Read the register.
    pub fn read(&self) -> Result<T, CsrError> {
        let bits = if T::WIDTH == 64 { self.mmio.read64(self.offset)? } else { self.mmio.read32(self.offset)? as u64 };
        Ok(T::from_bits(bits))
    }
}

impl<T: RegValue, A: Writable> Reg<'_, T, A> {
    /// Write the register.
    pub fn write(&self, v: T) -> Result<(), CsrError> {
        self.store(v.bits())
    }
    /// Write `f(reset value)`.
    pub fn write_with(&self, f: impl FnOnce(T) -> T) -> Result<(), CsrError> {
        self.write(f(T::from_bits(T::RESET)))
    }
}

impl<T: RegValue> Reg<'_, T, ReadWrite> {
    /// Read, transform, write back.
    pub fn modify(&self, f: impl FnOnce(T) -> T) -> Result<(), CsrError> {
        let v = self.read()?;
        self.write(f(v))
    }
}

impl<T: RegValue, A: ClearOnWrite> Reg<'_, T, A> {
    /// Clear the bits set in `mask` and no other: writes `mask` to a w1c register, its
    /// complement to a w0c one.
    pub fn clear(&self, mask: T) -> Result<(), CsrError> {
        self.store(A::clear_value(mask.bits(), T::WIDTH))
    }
    /// Clear every bit (all ones to a w1c register, zero to a w0c one).
    pub fn clear_all(&self) -> Result<(), CsrError> {
        self.store(A::clear_value(u64::MAX, T::WIDTH))
    }
}

impl<T: RegValue> Reg<'_, T, W1s> {
    /// Set the bits set in `mask` and leave the others (writes `mask`).
    pub fn set(&self, mask: T) -> Result<(), CsrError> {
        self.store(mask.bits())
    }
}

/// A register's place without the region: what a hot path resolves once and keeps (a
/// kickoff's semaphore increment, a notification queue's head), then binds to its BAR for
/// each access ([`RegAt::on`]) — the same typed value and the same access rights as the
/// [`Reg`] it came from, with no name lookup or bounds check left on the path.
pub struct RegAt<T, A> {
    offset: u64,
    _t: PhantomData<(T, A)>,
}

impl<T, A> Clone for RegAt<T, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, A> Copy for RegAt<T, A> {}

impl<T, A> PartialEq for RegAt<T, A> {
    fn eq(&self, o: &Self) -> bool {
        self.offset == o.offset
    }
}
impl<T, A> Eq for RegAt<T, A> {}

impl<T, A> core::fmt::Debug for RegAt<T, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RegAt({:#x})", self.offset)
    }
}

impl<T: RegValue, A: Access> RegAt<T, A> {
    /// The register at the same offset of `mmio` (the region it was resolved in).
    #[inline]
    pub fn on<'a>(&self, mmio: &'a dyn Mmio) -> Reg<'a, T, A> {
        Reg::new(mmio, self.offset)
    }
    /// Absolute byte offset in the BAR.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl<T: RegValue, A: Access> Reg<'_, T, A> {
    /// This register's place, to bind again later ([`RegAt::on`]).
    pub fn at(&self) -> RegAt<T, A> {
        RegAt { offset: self.offset, _t: PhantomData }
    }
}

/// A bounds-checked register array; `A` is the access of every element.
pub struct RegArray<'a, T, A> {
    mmio: &'a dyn Mmio,
    base: u64,
    count: u64,
    stride: u64,
    name: &'static str,
    _t: PhantomData<(T, A)>,
}

impl<'a, T: RegValue, A: Access> RegArray<'a, T, A> {
    /// `count` registers of `stride` bytes from `base`.
    pub fn new(mmio: &'a dyn Mmio, base: u64, count: u64, stride: u64, name: &'static str) -> Self {
        Self { mmio, base, count, stride, name, _t: PhantomData }
    }
    /// Element `i`.
    pub fn get(&self, i: u64) -> Result<Reg<'a, T, A>, CsrError> {
        if i >= self.count {
            return Err(CsrError::Index { what: self.name, index: i, count: self.count });
        }
        Ok(Reg::new(self.mmio, self.base + i * self.stride))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{nc_intc_g0, nc_regions};
    use platform::MemMmio;

    #[test]
    fn w0c_clear_writes_the_complement_of_the_mask() {
        let bar = MemMmio::new(0x100);
        let g0 = nc_intc_g0::Block::at(&bar, 0);
        g0.cause().clear(nc_intc_g0::Cause(0b101)).unwrap();
        assert_eq!(bar.read32(g0.cause().offset()).unwrap(), !0b101u32);
        g0.cause().clear_all().unwrap();
        assert_eq!(bar.read32(g0.cause().offset()).unwrap(), 0);
    }

    #[test]
    fn w1c_clear_writes_the_mask() {
        let bar = MemMmio::new(0x1000);
        let t = nc_regions::Block::at(&bar, 0);
        let s = t.oob_status();
        s.clear(nc_regions::OobStatus(0).with_latched(1)).unwrap();
        assert_eq!(bar.read32(s.offset()).unwrap() as u64, nc_regions::OobStatus(0).with_latched(1).0 as u64);
        s.clear_all().unwrap();
        assert_eq!(bar.read32(s.offset()).unwrap(), u32::MAX);
    }

    #[test]
    fn a_register_kept_by_place_binds_again_with_its_type_and_rights() {
        let (a, b) = (MemMmio::new(0x1000), MemMmio::new(0x1000));
        let t = nc_regions::Block::at(&a, 0);
        let at = t.oob_status().at();
        assert_eq!(at.offset(), t.oob_status().offset());
        // Bound to another region of the same layout: the same register, still w1c.
        at.on(&b).clear(nc_regions::OobStatus(0).with_latched(1)).unwrap();
        assert_eq!(b.read32(at.offset()).unwrap(), 1);
        assert_eq!(a.read32(at.offset()).unwrap(), 0);
        assert_eq!(at.on(&b).access(), t.oob_status().access());
        assert_eq!(at, t.oob_status().at());
    }

    #[test]
    fn access_markers_match_the_metadata() {
        let bar = MemMmio::new(0x100);
        let g0 = nc_intc_g0::Block::at(&bar, 0);
        for (reg, access) in [
            (g0.cause().offset(), g0.cause().access()),
            (g0.mask().offset(), g0.mask().access()),
            (g0.mask_clear().offset(), g0.mask_clear().access()),
            (g0.status().offset(), g0.status().access()),
        ] {
            let Some(id) = nc_intc_g0::RegId::at(reg) else { panic!("no register at {reg:#x}") };
            assert_eq!(id.def().access, access, "{}", id.def().name);
        }
    }
}
