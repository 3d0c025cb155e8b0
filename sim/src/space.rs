//! The device's address spaces: the device (chip) address map its engines use (host memory
//! through the IOMMU, HBM, state buffers, CSRs) and the host's view of BAR0 (registers and
//! state-buffer windows) and BAR4 (HBM apertures).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use platform::{Mmio, MmioError};

use crate::device::{Dev, State};
use crate::iommu::{translate, DmaFault, Mapping};

/// One piece of a device access.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg {
    /// Raw memory (host through the IOMMU, HBM, or state buffer).
    Mem(usize, usize),
    /// BAR0 register space at this offset.
    Csr(u64, usize),
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
            return translate(maps, iova, len, write, &mut |h, l| out.push(Seg::Mem(h, l)));
        }
        if let Some((k, off)) = self.arch.dev_to_hbm(addr) {
            let end = off.checked_add(len).ok_or(DmaFault::Decode { addr })?;
            let mem = self.hbm.get(k as usize).ok_or(DmaFault::Decode { addr })?;
            if end > self.hbm_bytes {
                return Err(DmaFault::Decode { addr: addr + (self.hbm_bytes.saturating_sub(off)) });
            }
            out.push(Seg::Mem(mem.as_ptr() as usize + off as usize, len as usize));
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
        let maps = self.iommu.maps.read().unwrap_or_else(|e| e.into_inner());
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
                    Seg::Mem(p, l) => {
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
                    Seg::Mem(p, l) => {
                        // SAFETY: as in `dev_read`; the destination is device-writable memory.
                        unsafe { std::ptr::copy_nonoverlapping(data[o..o + l].as_ptr(), p as *mut u8, l) };
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
            (off >= b && off + len <= b + d.hbm_bytes).then(|| (k as usize, (off - b) as usize))
        })
    }
}

impl Mmio for Bar4 {
    fn size(&self) -> u64 {
        self.0.layout.bar4_size
    }
    fn read32(&self, off: u64) -> Result<u32, MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        match self.at(off, 4) {
            Some((k, o)) => Ok(self.0.hbm[k].read_u32(o).unwrap_or(0)),
            None => {
                self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
                Ok(0)
            }
        }
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        match self.at(off, 4) {
            Some((k, o)) => {
                let _ = self.0.hbm[k].write_u32(o, v);
            }
            None => {
                self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
    fn read64(&self, off: u64) -> Result<u64, MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        Ok(self.at(off, 8).map(|(k, o)| self.0.hbm[k].read_u64(o).unwrap_or(0)).unwrap_or(0))
    }
    fn write64(&self, off: u64, v: u64) -> Result<(), MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        if let Some((k, o)) = self.at(off, 8) {
            let _ = self.0.hbm[k].write_u64(o, v);
        }
        Ok(())
    }
}
