//! Notification queues in host memory: a ring programmed into a NOTIFIC slot, and the
//! harvest reader (phase tracking, head write-back) — docs/facts/hardware.md §4,
//! docs/facts/libnrt.md §5. The slot's register sequences are [`crate::nq`]'s; its
//! ownership (and the halt when the ring goes away) is [`crate::park::Parking`]'s.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use csr_maps::blocks::notific_slot as ns;
use csr_maps::formats::notify::RECORD_BYTES;
use csr_maps::regs::{ReadWrite, RegAt};
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};
use crate::mem::{HostBuf, HostPool};
use crate::nq::{self, NqOwner};
use crate::park::Parking;

/// A notification ring in host memory, read by the host. Dropping it halts the slot and
/// lets in-flight records drain before the ring memory is freed ([`Parking`]).
pub struct NqRing {
    park: Arc<Parking>,
    /// This ring's id for slot ownership ([`Parking`]).
    id: u64,
    /// When the slot was last halted (None: programmed onto this ring).
    halted: Mutex<Option<Instant>>,
    buf: HostBuf,
    size: u64,
    owner: NqOwner,
    slot: u64,
    head: u64,
    phase: bool,
    head_reg: RegAt<ns::Head, ReadWrite>,
    /// Head value last written to the device.
    head_written: u64,
}

impl NqRing {
    /// Allocate a ring of `records` entries (a power of two) and program slot `slot`
    /// (order: base_hi, base_lo, size).
    pub fn new(park: &Arc<Parking>, pool: &HostPool, owner: NqOwner, slot: u64, records: u64) -> Result<Self> {
        platform::failpoint::hit("hal.nq.program")?;
        let arch = park.arch();
        let regs = park.regs();
        let size = records.checked_mul(RECORD_BYTES as u64).ok_or(HalError::NqSize(records))?;
        if records == 0 || !size.is_power_of_two() {
            return Err(HalError::NqSize(size));
        }
        let buf = pool.alloc(size as usize, 4096.min(size as usize))?;
        buf.fill(0, size as usize, 0)?;
        let head_reg = nq::head_reg(&regs, owner, slot)?;
        nq::program_slot(&regs, owner, slot, arch.host_dev_addr(buf.iova()), size)?;
        let id = park.new_id();
        park.claim_nq(owner, slot, id);
        Ok(Self {
            park: park.clone(),
            id,
            halted: Mutex::new(None),
            buf,
            size,
            owner,
            slot,
            head: 0,
            phase: true,
            head_reg,
            head_written: 0,
        })
    }

    /// NOTIFIC slot.
    pub fn slot(&self) -> u64 {
        self.slot
    }
    /// Owner block.
    pub fn owner(&self) -> NqOwner {
        self.owner
    }
    /// Ring size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Append up to `max` new records (oldest first). The consumer head is written back to
    /// the device only once a quarter of the ring has been consumed since the last write
    /// (the device needs it to detect a full ring), so a harvest normally makes no MMIO
    /// access at all; [`NqRing::sync_head`] writes it explicitly. No allocation when `out`
    /// has capacity; no syscalls.
    pub fn poll(&mut self, regs: &Regs<'_>, out: &mut Vec<[u8; RECORD_BYTES]>, max: usize) -> Result<usize> {
        let mut n = 0;
        while n < max {
            let off = self.head as usize;
            // The header byte (with the phase bit) is written last by the device.
            let w = self.buf.atomic_u32(off)?.load(Ordering::Acquire);
            let phase = (w >> 31) & 1 == 1;
            if phase != self.phase {
                break;
            }
            let mut rec = [0u8; RECORD_BYTES];
            self.buf.read(off, &mut rec)?;
            out.push(rec);
            n += 1;
            self.head += RECORD_BYTES as u64;
            if self.head == self.size {
                self.head = 0;
                self.phase = !self.phase;
            }
        }
        // The ring size is a power of two (checked at construction): a mask, not a division.
        let unwritten = (self.head + self.size - self.head_written) & (self.size - 1);
        if unwritten >= self.size / 4 {
            self.sync_head(regs)?;
        }
        Ok(n)
    }

    /// Write the consumer head to the device if it moved.
    pub fn sync_head(&mut self, regs: &Regs<'_>) -> Result<()> {
        if self.head_written != self.head {
            self.head_reg.on(regs.mmio).write(ns::Head(self.head as u32))?;
            self.head_written = self.head;
        }
        Ok(())
    }

    /// Program the slot again onto this ring, emptied (the NC was handed to another model
    /// or reset): base_hi, base_lo, size, head 0; the reader starts over at phase 1.
    pub fn rearm(&mut self, arch: &'static Arch, regs: &Regs<'_>) -> Result<()> {
        platform::failpoint::hit("hal.nq.rearm")?;
        self.buf.fill(0, self.size as usize, 0)?;
        nq::program_slot(regs, self.owner, self.slot, arch.host_dev_addr(self.buf.iova()), self.size)?;
        self.head = 0;
        self.phase = true;
        self.head_written = 0;
        *platform::sync::lock(&self.halted) = None;
        self.park.claim_nq(self.owner, self.slot, self.id);
        Ok(())
    }

    /// Whether a record is waiting at the consumer head (host memory only: no MMIO).
    pub fn pending(&self) -> bool {
        self.buf
            .atomic_u32(self.head as usize)
            .map(|w| ((w.load(Ordering::Acquire) >> 31) & 1 == 1) == self.phase)
            .unwrap_or(false)
    }

    /// Halt the slot ([`nq::halt_slot`]); the ring keeps its memory until dropped.
    pub fn halt(&self, regs: &Regs<'_>) -> Result<()> {
        nq::halt_slot(regs, self.owner, self.slot)?;
        platform::sync::lock(&self.halted).get_or_insert_with(Instant::now);
        Ok(())
    }
}

impl Drop for NqRing {
    /// Halt the slot (unless already halted) and wait for in-flight records to drain before
    /// the ring memory is freed (`nnq_destroy_nc`: halt, 1 ms, free) — if this ring still
    /// owns the slot: a slot since programmed onto another ring is left alone.
    fn drop(&mut self) {
        let halted = *platform::sync::lock(&self.halted);
        if let Err(err) = self.park.release_nq(self.owner, self.slot, self.id, halted) {
            tracing::warn!(slot = self.slot, %err, "could not halt a notification queue");
        }
    }
}
