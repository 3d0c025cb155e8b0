//! The device's address spaces: the device (chip) address map its engines use (host memory
//! through the IOMMU, HBM, state buffers, CSRs) and the host's view of BAR0 (registers and
//! state-buffer windows) and BAR4 (HBM apertures).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use platform::{Mmio, MmioError};

use super::{Dev, State};
use crate::iommu::{translate, DmaFault, Mapping};

/// One piece of a device access.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg {
    /// Raw memory (host through the IOMMU, or a state buffer): host address, length.
    Mem(usize, usize),
    /// HBM stack `k` at an offset, length: written through [`crate::hbm::store`].
    Hbm(usize, usize, usize),
    /// BAR0 register space at this offset.
    Csr(u64, usize),
}

impl Dev {
    /// Host address and length of a memory piece (`None` for registers).
    #[inline]
    pub(crate) fn seg_mem(&self, s: Seg) -> Option<(usize, usize)> {
        match s {
            Seg::Mem(p, l) => Some((p, l)),
            Seg::Hbm(k, off, l) => self.hbm.get(k).map(|h| (h.base() + off, l)),
            Seg::Csr(..) => None,
        }
    }

    /// Write `n` bytes from `src` into memory piece `dst` at `at` bytes into it (a register
    /// piece is not memory: nothing is written).
    ///
    /// # Safety
    /// `src..src + n` must be readable, `at + n` within the piece, and the piece one that
    /// [`Dev::resolve`] made under the IOMMU guard still held (host pieces stay mapped).
    #[inline]
    pub(crate) unsafe fn put(&self, st: &mut State, dst: Seg, at: usize, src: *const u8, n: usize) {
        match dst {
            Seg::Hbm(k, off, _) => {
                if let Some(h) = self.hbm.get(k) {
                    // SAFETY: the range is inside the stack (resolve checked it, the caller
                    // keeps `at + n` within the piece); the source is readable (caller).
                    unsafe { crate::hbm::store(h, &mut st.hbm_written, k, off + at, src, n) }
                }
            }
            // SAFETY: `p + at .. p + at + n` lies in live device-writable memory (caller); the
            // ranges may alias only if the driver asked for an overlapping copy, for which
            // `copy` (memmove) is used.
            Seg::Mem(p, _) => unsafe { std::ptr::copy(src, (p + at) as *mut u8, n) },
            Seg::Csr(..) => {}
        }
    }
}

impl Dev {
    /// Resolve `[addr, addr+len)` of the device address space into pieces.
    /// Host pieces are translated under `maps` (a held IOMMU read guard).
    pub fn resolve(
        &self,
        maps: &BTreeMap<u64, Mapping>,
        addr: u64,
        len: u64,
        write: bool,
        out: &mut Vec<Seg>,
    ) -> Result<(), DmaFault> {
        if len == 0 {
            return Ok(());
        }
        if let Some(iova) = self.arch.dev_to_host_iova(addr) {
            // On a fault the caller discards `out` (the access aborts).
            return translate(maps, iova, len, write, &mut |h, l| push_seg(out, Seg::Mem(h, l)));
        }
        if let Some((k, off)) = self.arch.dev_to_hbm(addr) {
            let end = off.checked_add(len).ok_or(DmaFault::Decode { addr })?;
            if self.hbm.get(k as usize).is_none() {
                return Err(DmaFault::Decode { addr });
            }
            if end > self.hbm_bytes {
                return Err(DmaFault::Decode { addr: addr + (self.hbm_bytes.saturating_sub(off)) });
            }
            push_seg(out, Seg::Hbm(k as usize, off as usize, len as usize));
            return Ok(());
        }
        if let Some(bar) = self.arch.dev_to_bar0(addr) {
            if let Some((nc, rel)) = self.sbuf_of(bar) {
                if rel + len > self.sbuf[nc].len() as u64 {
                    return Err(DmaFault::Decode { addr });
                }
                out.push(Seg::Mem(self.sbuf[nc].as_ptr() as usize + rel as usize, len as usize));
                return Ok(());
            }
            if self.arch.dev_to_bar0(addr + len - 1) != Some(bar + len - 1) {
                return Err(DmaFault::Decode { addr });
            }
            out.push(Seg::Csr(bar, len as usize));
            return Ok(());
        }
        Err(DmaFault::Decode { addr })
    }

    /// NC and offset of a BAR0 offset inside a state buffer.
    #[inline]
    pub fn sbuf_of(&self, bar_off: u64) -> Option<(usize, u64)> {
        let l = &self.layout;
        if bar_off < l.sbuf_span.0 || bar_off >= l.sbuf_span.1 {
            return None;
        }
        l.sbuf_bases.iter().enumerate().find_map(|(i, b)| {
            let b = (*b)?;
            (bar_off >= b && bar_off - b < l.sbuf.size).then(|| (i, bar_off - b))
        })
    }

    /// Resolve `[addr, addr+len)` into a pooled segment list and run `f` on it while the
    /// IOMMU read guard is held (host pieces stay mapped for the whole access).
    fn with_segs<R>(
        &self,
        st: &mut State,
        addr: u64,
        len: u64,
        write: bool,
        f: impl FnOnce(&mut State, &[Seg]) -> R,
    ) -> Result<R, DmaFault> {
        let maps = platform::sync::read(&self.iommu.maps);
        let mut segs = st.seg_pool.take();
        let r = self.resolve(&maps, addr, len, write, &mut segs).map(|()| f(st, &segs));
        st.seg_pool.give(segs);
        r
    }

    /// Read device memory (not CSRs) at a device address.
    pub fn dev_read(&self, st: &mut State, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        self.with_segs(st, addr, buf.len() as u64, false, |st, segs| {
            let mut o = 0;
            for &s in segs {
                match s {
                    Seg::Mem(..) | Seg::Hbm(..) => {
                        let Some((p, l)) = self.seg_mem(s) else { continue };
                        // SAFETY: `p..p+l` lies inside a live HostMem (HBM, state buffer, or a
                        // host buffer kept mapped by the IOMMU read guard `with_segs` holds);
                        // `buf` is distinct.
                        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, buf[o..o + l].as_mut_ptr(), l) };
                        o += l;
                    }
                    Seg::Csr(off, l) => {
                        for w in 0..l.div_ceil(4) {
                            let v = self.reg_read(st, off + 4 * w as u64).to_le_bytes();
                            let n = (l - 4 * w).min(4);
                            buf[o + 4 * w..o + 4 * w + n].copy_from_slice(&v[..n]);
                        }
                        o += l;
                    }
                }
            }
        })?;
        std::sync::atomic::fence(Ordering::Acquire);
        Ok(())
    }

    /// Write at a device address (memory or CSRs).
    pub fn dev_write(&self, st: &mut State, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.with_segs(st, addr, data.len() as u64, true, |st, segs| {
            let mut o = 0;
            for &s in segs {
                match s {
                    Seg::Mem(_, l) | Seg::Hbm(_, _, l) => {
                        // SAFETY: `data[o..o + l]` is a live slice; the piece was resolved
                        // under the IOMMU guard `with_segs` holds.
                        unsafe { self.put(st, s, 0, data[o..o + l].as_ptr(), l) };
                        o += l;
                    }
                    Seg::Csr(off, l) => {
                        write_csr_bytes(self, st, off, &data[o..o + l]);
                        o += l;
                    }
                }
            }
        })?;
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }
}

/// Append a piece, merged into the last one when it continues it: a packet's descriptors over
/// contiguous memory become one piece, so HBM sees the packet's whole run at once (what lets a
/// zero fill give whole runs of pages back, [`crate::hbm`]).
fn push_seg(out: &mut Vec<Seg>, s: Seg) {
    match (out.last_mut(), s) {
        (Some(Seg::Mem(p, l)), Seg::Mem(q, m)) if *p + *l == q => *l += m,
        (Some(Seg::Hbm(k, o, l)), Seg::Hbm(j, p, m)) if *k == j && *o + *l == p => *l += m,
        _ => out.push(s),
    }
}

/// Register writes coming from the device side (DMA to a CSR, WRITE instruction): 4 bytes at a
/// time, a partial last word zero-padded.
pub(crate) fn write_csr_bytes(dev: &Dev, st: &mut State, off: u64, data: &[u8]) {
    for (w, chunk) in data.chunks(4).enumerate() {
        let mut b = [0u8; 4];
        b[..chunk.len()].copy_from_slice(chunk);
        dev.reg_write(st, off + 4 * w as u64, u32::from_le_bytes(b));
    }
}
/// BAR0 as the host sees it: registers, and the state-buffer windows.
pub(crate) struct Bar0(pub Arc<Dev>);
/// BAR4 as the host sees it: the HBM apertures.
pub(crate) struct Bar4(pub Arc<Dev>);

impl Mmio for Bar0 {
    fn size(&self) -> u64 {
        self.0.dec.bar0_size
    }
    fn read32(&self, off: u64) -> Result<u32, MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        let d = &self.0;
        if let Some((nc, rel)) = d.sbuf_of(off) {
            return Ok(d.sbuf[nc].read_u32(rel as usize).unwrap_or(0));
        }
        let mut st = d.lock();
        Ok(d.reg_read(&mut st, off))
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        let d = &self.0;
        if let Some((nc, rel)) = d.sbuf_of(off) {
            let _ = d.sbuf[nc].write_u32(rel as usize, v);
            return Ok(());
        }
        let mut st = d.lock();
        d.reg_write(&mut st, off, v);
        d.after(st);
        Ok(())
    }
}

impl Bar4 {
    fn at(&self, off: u64, len: u64) -> Option<(usize, usize)> {
        let d = &self.0;
        let r = d.layout.hbm;
        (0..r.count()).find_map(|k| {
            let b = r.base(k)?;
            (off >= b && off + len <= b + d.hbm_bytes && (k as usize) < d.hbm.len())
                .then(|| (k as usize, (off - b) as usize))
        })
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        match self.at(off, buf.len() as u64) {
            Some((k, o)) => self.0.hbm[k].read(o as u64, buf).is_some(),
            None => false,
        }
    }

    /// An aperture write: through the same store (and under the same lock) as DMA.
    fn write(&self, off: u64, data: &[u8]) -> bool {
        let d = &self.0;
        let Some((k, o)) = self.at(off, data.len() as u64) else { return false };
        let mut st = d.lock();
        // SAFETY: `data` is a live slice; `at` checked the range against the stack.
        unsafe { crate::hbm::store(&d.hbm[k], &mut st.hbm_written, k, o, data.as_ptr(), data.len()) };
        true
    }
}

impl Mmio for Bar4 {
    fn size(&self) -> u64 {
        self.0.layout.bar4_size
    }
    fn read32(&self, off: u64) -> Result<u32, MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        let mut b = [0u8; 4];
        if !self.read(off, &mut b) {
            self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(u32::from_le_bytes(b))
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        if !self.write(off, &v.to_le_bytes()) {
            self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn read64(&self, off: u64) -> Result<u64, MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        Ok(u64::from_le_bytes(b))
    }
    fn write64(&self, off: u64, v: u64) -> Result<(), MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        self.write(off, &v.to_le_bytes());
        Ok(())
    }
}
