//! Semaphores, events and kick slots of an NC's TPB semaphore block.

use csr_maps::blocks::tpb_sem as ts;
use csr_maps::regs::{RegAt, WriteOnly};

use super::Device;
use crate::error::{HalError, Result};

/// A semaphore increment register resolved for the hot path ([`Device::kick_slot`],
/// [`Device::kick`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KickSlot {
    nc: usize,
    sem: u64,
    reg: RegAt<ts::SemInc, WriteOnly>,
}

impl KickSlot {
    /// The NeuronCore.
    pub fn nc(&self) -> usize {
        self.nc
    }
    /// The semaphore index.
    pub fn sem(&self) -> u64 {
        self.sem
    }
}

impl Device {
    /// Semaphore `i` of NC `nc`.
    pub fn sem_read(&self, nc: usize, i: u64) -> Result<i32> {
        Ok(self.regs().tpb_sem(nc as u64)?.sem_read(i)?.read()?.0 as i32)
    }

    /// Assign.
    pub fn sem_set(&self, nc: usize, i: u64, v: i32) -> Result<()> {
        platform::failpoint::hit("hal.sem.set")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_set(i)?.write(ts::SemSet(v as u32))?)
    }

    /// Add (the kickoff: one MMIO write).
    pub fn sem_inc(&self, nc: usize, i: u64, v: u32) -> Result<()> {
        platform::failpoint::hit("hal.sem.inc")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_inc(i)?.write(ts::SemInc(v))?)
    }

    /// Subtract.
    pub fn sem_dec(&self, nc: usize, i: u64, v: u32) -> Result<()> {
        platform::failpoint::hit("hal.sem.dec")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_dec(i)?.write(ts::SemDec(v))?)
    }

    /// BAR0 offset of semaphore `i`'s increment register (for precomputed kickoffs).
    pub fn sem_inc_offset(&self, nc: usize, i: u64) -> Result<u64> {
        Ok(self.regs().tpb_sem(nc as u64)?.sem_inc(i)?.offset())
    }

    /// A kickoff handle: semaphore `i`'s increment register on NC `nc`, resolved once (at
    /// load) so that [`Device::kick`] is a single MMIO write.
    pub fn kick_slot(&self, nc: usize, i: u64) -> Result<KickSlot> {
        self.check_nc(nc)?;
        Ok(KickSlot { nc, sem: i, reg: self.regs().tpb_sem(nc as u64)?.sem_inc(i)?.at() })
    }

    /// The kickoff: increment the semaphore behind `k` by one. One 32-bit MMIO write — no
    /// allocation, no syscall, no lock.
    pub fn kick(&self, k: &KickSlot) -> Result<()> {
        platform::failpoint::hit("hal.kick")?;
        Ok(k.reg.on(self.inner.bar0.as_ref()).write(ts::SemInc(1))?)
    }

    /// Device address of semaphore `i`'s increment register (a DMA or WRITE target).
    pub fn sem_inc_dev_addr(&self, nc: usize, i: u64) -> Result<u64> {
        let off = self.sem_inc_offset(nc, i)?;
        self.arch().bar0_to_dev(off).ok_or(HalError::DeviceRange { addr: off, len: 4 })
    }

    /// Event `i` (0/1).
    pub fn event(&self, nc: usize, i: u64) -> Result<bool> {
        Ok(self.regs().tpb_sem(nc as u64)?.event(i)?.read()?.0 & 1 != 0)
    }

    /// Set or clear event `i`.
    pub fn set_event(&self, nc: usize, i: u64, on: bool) -> Result<()> {
        platform::failpoint::hit("hal.event.set")?;
        Ok(self.regs().tpb_sem(nc as u64)?.event(i)?.write(ts::Event(on as u32))?)
    }
}
