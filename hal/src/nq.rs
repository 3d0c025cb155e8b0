//! NOTIFIC, the hardware block: the register sequences on a notification-queue slot —
//! program it onto a ring, halt it — written once, here (docs/facts/hardware.md §4). The
//! host-memory ring and its reader are `nq_ring::NqRing`; slot ownership (and the halt
//! when the owning ring goes away) is `park::Parking`'s. This module names neither.

use std::time::Duration;

use csr_maps::blocks::notific_slot as ns;
use csr_maps::consts::nq as nqc;
use csr_maps::Regs;

use crate::error::Result;

/// Which NOTIFIC block a ring lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NqOwner {
    /// The NC-level block of a NeuronCore.
    Nc(usize),
    /// A TOP_SP block.
    TopSp(usize),
}

/// The registers of slot `slot` of `owner`.
fn slot_regs<'a>(regs: &Regs<'a>, owner: NqOwner, slot: u64) -> Result<csr_maps::blocks::notific_slot::Block<'a>> {
    Ok(match owner {
        NqOwner::Nc(nc) => regs.notific(nc as u64)?.nq(slot)?,
        NqOwner::TopSp(t) => regs.notific_topsp(t as u64)?.nq(slot)?,
    })
}

/// Program slot `slot` of `owner` onto a ring of `size` bytes at device address `addr`,
/// emptied: base high, base low, size (the kmod's `nnq_set_hwaddr_v2` order), then head 0.
pub fn program_slot(regs: &Regs<'_>, owner: NqOwner, slot: u64, addr: u64, size: u64) -> Result<()> {
    let s = slot_regs(regs, owner, slot)?;
    s.base_hi().write(ns::BaseHi((addr >> 32) as u32))?;
    s.base_lo().write(ns::BaseLo(addr as u32))?;
    s.size().write(ns::Size(size as u32))?;
    s.head().write(ns::Head(0))?;
    Ok(())
}

/// BAR0 offset of slot `slot`'s consumer-head register (written on the harvest path).
pub fn head_offset(regs: &Regs<'_>, owner: NqOwner, slot: u64) -> Result<u64> {
    Ok(slot_regs(regs, owner, slot)?.head().offset())
}

/// The slot's consumer-head register, resolved for the harvest path ([`csr_maps::regs::RegAt::on`]).
pub fn head_reg(
    regs: &Regs<'_>,
    owner: NqOwner,
    slot: u64,
) -> Result<csr_maps::regs::RegAt<ns::Head, csr_maps::regs::ReadWrite>> {
    Ok(slot_regs(regs, owner, slot)?.head().at())
}

/// Halt slot `slot` of `owner`: base high, base low and size 0 (the kmod's `nnq_halt`
/// through `nnq_set_hwaddr`). The device writes no record after it; records already in
/// flight still land (wait [`DRAIN`] before freeing the ring's memory).
pub fn halt_slot(regs: &Regs<'_>, owner: NqOwner, slot: u64) -> Result<()> {
    let s = slot_regs(regs, owner, slot)?;
    s.base_hi().write(ns::BaseHi(0))?;
    s.base_lo().write(ns::BaseLo(0))?;
    s.size().write(ns::Size(0))?;
    Ok(())
}

/// The pointers and status of one NOTIFIC slot, as the device shows them (the CLI's `nq` and
/// the runtime's debug endpoint list them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotState {
    pub slot: u64,
    /// The ring's device address (base high and low).
    pub base: u64,
    /// The ring's size in bytes (0: the slot is halted).
    pub size: u64,
    /// The consumer head and the producer tail, byte offsets.
    pub head: u64,
    pub tail: u64,
    /// The slot's overflow flag and dropped-record count.
    pub overflow: bool,
    pub dropped: u32,
}

impl SlotState {
    /// Whether the slot is programmed onto a ring (a base or a size is set).
    pub fn programmed(&self) -> bool {
        self.size != 0 || self.base != 0
    }
}

/// Read slot `slot` of `owner` (register reads only: nothing changes on the device).
pub fn slot_state(regs: &Regs<'_>, owner: NqOwner, slot: u64) -> Result<SlotState> {
    let s = slot_regs(regs, owner, slot)?;
    let st = s.status().read()?;
    Ok(SlotState {
        slot,
        base: ((s.base_hi().read()?.0 as u64) << 32) | s.base_lo().read()?.0 as u64,
        size: s.size().read()?.0 as u64,
        head: s.head().read()?.0 as u64,
        tail: s.tail().read()?.0 as u64,
        overflow: st.overflow() != 0,
        dropped: st.dropped(),
    })
}

/// The programmed slots among the first `slots` of `owner` ([`SlotState::programmed`]).
pub fn programmed_slots(regs: &Regs<'_>, owner: NqOwner, slots: u64) -> Result<Vec<SlotState>> {
    let mut out = Vec::new();
    for slot in 0..slots {
        let s = slot_state(regs, owner, slot)?;
        if s.programmed() {
            out.push(s);
        }
    }
    Ok(out)
}

/// How long records in flight take to land after a halt (`nnq_destroy_nc`: halt, 1 ms, free).
pub const DRAIN: Duration = Duration::from_millis(nqc::DRAIN_MS);

/// Halt every slot of NC `nc`'s NOTIFIC block (teardown, §4.3).
pub fn halt_all(regs: &Regs<'_>, nc: usize, slots: u64) -> Result<()> {
    for s in 0..slots {
        halt_slot(regs, NqOwner::Nc(nc), s)?;
    }
    Ok(())
}
