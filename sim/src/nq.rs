//! Notification queues: the device writes 16-byte records at the tail of a ring the
//! driver programmed (base, size in bytes); the phase bit (header bit 7) toggles on
//! every wrap; a full ring drops the record, counts it, marks the next written record
//! with the software-overflow bit, and raises NC INTC line 61 (group 1 bit 29).

use std::sync::atomic::Ordering;

use csr_maps::blocks::notific_slot as ns;
use csr_maps::formats::notify::{NotifRecord, RECORD_BYTES};

use crate::decode::{Hit, Kind};
use crate::device::{Dev, State};

/// Device-side state of one NQ slot (keyed by the slot's BAR0 base).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NqSlot {
    pub tail: u64,
    pub phase: bool,
    pub overflow_pending: bool,
    pub overflowed: bool,
    pub dropped: u32,
}

impl Default for NqSlot {
    fn default() -> Self {
        Self { tail: 0, phase: true, overflow_pending: false, overflowed: false, dropped: 0 }
    }
}

/// BAR0 offset of slot register 0 for a hit inside a notific slot.
fn slot_base(hit: &Hit<'_>, off: u64) -> u64 {
    off - hit.reg.def.offset
}

pub(crate) fn reg_read(dev: &Dev, st: &mut State, hit: &Hit<'_>, off: u64) -> u32 {
    let s = st.nq.get(&slot_base(hit, off)).copied().unwrap_or_default();
    match hit.reg.name() {
        "tail" => s.tail as u32,
        "status" => ns::Status(0).with_overflow(s.overflowed as u32).with_dropped(s.dropped.min(u16::MAX as u32)).0,
        _ => dev.generic_read(st, hit, off),
    }
}

pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit<'_>, off: u64, val: u32) {
    match hit.reg.name() {
        "base_lo" | "base_hi" | "size" => {
            dev.generic_write(st, hit, off, val);
            st.nq.insert(slot_base(hit, off), NqSlot::default());
        }
        _ => dev.generic_write(st, hit, off, val),
    }
}

/// BAR0 base of NOTIFIC slot `slot` of NC `nc`.
pub(crate) fn nc_slot(dev: &Dev, nc: usize, slot: u64) -> Option<u64> {
    let r = dev.regs();
    r.notific(nc as u64).ok()?.nq(slot).ok().map(|s| s.base_lo().offset())
}

/// Write `rec` to the NQ whose slot registers start at `slot_off` (owned by NC `nc`).
/// Returns false if the record was dropped.
pub(crate) fn post(dev: &Dev, st: &mut State, nc: usize, slot_off: u64, mut rec: [u8; RECORD_BYTES]) -> bool {
    let Some(hit) = dev.dec.decode(slot_off) else { return false };
    debug_assert!(matches!(hit.kind, Kind::Notific | Kind::NotificTopsp | Kind::Sdma));
    let lo = dev.stored(st, slot_off, 0) as u64;
    let hi = dev.stored(st, slot_off + 4, 0) as u64;
    let size = dev.stored(st, slot_off + 8, 0) as u64;
    let head = dev.stored(st, slot_off + 12, 0) as u64;
    let base = lo | (hi << 32);
    let s = st.nq.entry(slot_off).or_default();
    if size < RECORD_BYTES as u64 || !size.is_power_of_two() || base == 0 {
        // Halted queue: the record goes nowhere.
        s.dropped = s.dropped.saturating_add(1);
        dev.n.dropped_records.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let next = (s.tail + RECORD_BYTES as u64) % size;
    if next == head % size {
        s.dropped = s.dropped.saturating_add(1);
        s.overflowed = true;
        s.overflow_pending = true;
        dev.n.dropped_records.fetch_add(1, Ordering::Relaxed);
        dev.intc(st, nc, 1, "sw_nq_overflow");
        return false;
    }
    let mut r = NotifRecord::decode(&rec);
    r.sw_overflow = s.overflow_pending;
    r.phase = s.phase;
    rec = r.encode();
    let at = base + s.tail;
    let (tail, phase) = (s.tail, s.phase);
    // Body first, header byte (with the phase bit) last, so a consumer polling the phase
    // never sees a half-written record: the body goes out with the stale phase.
    let mut body = rec;
    body[3] = NotifRecord { phase: !phase, ..Default::default() }.header();
    let ok = dev.dev_write(st, at, &body).is_ok() && dev.dev_write(st, at + 3, &rec[3..4]).is_ok();
    if !ok {
        dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
        dev.intc(st, nc, 0, "dma_fault");
        return false;
    }
    let s = st.nq.entry(slot_off).or_default();
    s.overflow_pending = false;
    s.tail = tail + RECORD_BYTES as u64;
    if s.tail >= size {
        s.tail = 0;
        s.phase = !phase;
    }
    dev.n.nq_records.fetch_add(1, Ordering::Relaxed);
    dev.raise_irq(nc as u32);
    true
}
