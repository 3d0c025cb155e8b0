//! Memory: host DMA memory, device memory (HBM) and moving bytes between them — reads,
//! writes, copies and zeroing through an NC's host-transfer ring.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Device;
use crate::error::{HalError, Result};
use crate::mem::{DevAllocator, DevBuf, HostBuf};
use crate::ring::Xfer;

impl Device {
    /// Host DMA memory.
    pub fn alloc_host(&self, len: usize, align: usize) -> Result<HostBuf> {
        self.inner.pool.alloc(len, align)
    }

    /// Device address of a host buffer (host window bit ORed in).
    pub fn host_addr(&self, b: &HostBuf) -> u64 {
        self.arch().host_dev_addr(b.iova())
    }

    /// Device memory on HBM channel `chan`.
    ///
    /// The memory is zeroed before it is returned (by DMA from a zeroed host buffer), so a new
    /// owner never sees an earlier owner's bytes. This is an allocation-time cost only.
    pub fn alloc_device(&self, chan: usize, len: u64, align: u64) -> Result<DevBuf> {
        let m = self.inner.hbm.alloc(chan, len, align)?;
        // Zero through an NC of this process (on a shared device another process drives the
        // other NCs' host-transfer queues): one on the channel if it has one.
        let ncs = self.owned_ncs().unwrap_or(0..self.nc_count());
        let nc = ncs.clone().find(|&n| self.hbm_for_nc(n) == chan).unwrap_or(ncs.start);
        self.zero_device(nc, m.addr(), m.len())?;
        Ok(m)
    }

    /// Device memory on HBM channel `chan` that is **not** zeroed: it may hold an earlier
    /// owner's bytes. For a caller that overwrites all of it before anything else can read it
    /// (streamed weights: every byte is written by DMA, the rest zeroed with
    /// [`Device::zero_device`]), saving the zeroing write of [`Device::alloc_device`]. Freed
    /// memory is zeroed again by the next [`Device::alloc_device`], so a caller that fails
    /// midway never hands stale bytes out by dropping the buffer; it must not expose the
    /// address before every byte is written.
    pub fn alloc_device_for_overwrite(&self, chan: usize, len: u64, align: u64) -> Result<DevBuf> {
        self.inner.hbm.alloc(chan, len, align)
    }

    /// Zero `len` bytes of device memory at `addr` through NC `nc`'s host-to-device ring.
    pub fn zero_device(&self, nc: usize, addr: u64, len: u64) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20) as u64;
        let zeros = self.alloc_host(chunk.min(len.max(1)) as usize, 64)?;
        let src = self.host_addr(&zeros);
        let mut off = 0u64;
        while off < len {
            let n = chunk.min(len - off);
            let dst = addr.checked_add(off).ok_or(HalError::DeviceRange { addr, len })?;
            self.copy(nc, &[Xfer { src, dst, len: n }])?;
            self.inner.dev_zeroed.fetch_add(n, Ordering::Relaxed);
            off += n;
        }
        Ok(())
    }

    /// Bytes zeroed so far for new owners: (device memory, recycled host memory). What a
    /// benchmark reads around an execute loop to show that executing zeroes nothing.
    pub fn zeroed_bytes(&self) -> (u64, u64) {
        (self.inner.dev_zeroed.load(Ordering::Relaxed), self.inner.pool.zeroed_bytes())
    }

    /// The device-memory allocator.
    pub fn allocator(&self) -> &Arc<DevAllocator> {
        &self.inner.hbm
    }

    /// Default HBM channel of NC `nc` (V2: NC h ↔ HBM h; V3/V4: NCs 2h, 2h+1 ↔ HBM h).
    pub fn hbm_for_nc(&self, nc: usize) -> usize {
        let c = &self.arch().counts;
        ((nc as u64 * c.hbm_stacks) / c.ncs.max(1)).min(c.hbm_stacks.saturating_sub(1)) as usize
    }

    /// Unmap idle host chunks.
    pub fn trim(&self) {
        self.inner.pool.trim();
    }

    /// Copy between device addresses (host buffers, HBM, state buffer) on NC `nc`'s
    /// host-facing engine; waits for completion. An aborted queue is recovered and the
    /// abort returned.
    pub fn copy(&self, nc: usize, xfers: &[Xfer]) -> Result<()> {
        platform::failpoint::hit("hal.dma.copy")?;
        let ring = self.h2t_ring(nc)?;
        let mut r = platform::sync::lock(&ring);
        let regs = self.regs();
        match r.copy(&regs, xfers) {
            Err(e @ HalError::DmaAbort { .. }) | Err(e @ HalError::DmaTimeout { .. }) => {
                r.recover(&regs)?;
                Err(e)
            }
            other => other,
        }
    }

    /// Write `data` to device address `addr` (through bounce buffers).
    pub fn write_device(&self, nc: usize, addr: u64, data: &[u8]) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20);
        let bounce = self.alloc_host(chunk.min(data.len().max(1)), 64)?;
        for (i, c) in data.chunks(chunk).enumerate() {
            bounce.write(0, c)?;
            self.copy(
                nc,
                &[Xfer { src: self.host_addr(&bounce), dst: addr + (i * chunk) as u64, len: c.len() as u64 }],
            )?;
        }
        Ok(())
    }

    /// Read device address `addr` into `out`.
    pub fn read_device(&self, nc: usize, addr: u64, out: &mut [u8]) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20);
        let bounce = self.alloc_host(chunk.min(out.len().max(1)), 64)?;
        for (i, c) in out.chunks_mut(chunk).enumerate() {
            self.copy(
                nc,
                &[Xfer { src: addr + (i * chunk) as u64, dst: self.host_addr(&bounce), len: c.len() as u64 }],
            )?;
            bounce.read(0, c)?;
        }
        Ok(())
    }

    /// Copy out host DMA memory of this device's pool at device address `addr` (a host-window
    /// address, as programmed into a notification slot): `Ok(false)` when the range is not in
    /// a shared chunk of the pool. Reads only; no DMA, no MMIO.
    pub fn read_host(&self, addr: u64, out: &mut [u8]) -> Result<bool> {
        match self.arch().dev_to_host_iova(addr) {
            Some(iova) => self.inner.pool.read_iova(iova, out),
            None => Ok(false),
        }
    }
}
