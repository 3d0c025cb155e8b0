//! Notification queues: the device writes 16-byte records at the tail of a ring the
//! driver programmed (base, size in bytes); the phase bit (header bit 7) toggles on
//! every wrap; a full ring drops the record, counts it, marks the next written record
//! with the software-overflow bit, and raises NC INTC line 61 (group 1 bit 29).

use std::sync::atomic::Ordering;

use csr_maps::blocks::notific_slot as ns;
use csr_maps::formats::notify::{NotifRecord, RECORD_BYTES};

use super::intc::Line;
use super::{Dev, State};
use crate::decode::Hit;

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

pub(crate) fn reg_read(dev: &Dev, st: &mut State, hit: &Hit, r: ns::RegId) -> u32 {
    let s = st.nq.get(&hit.leaf_base(r.offset())).copied().unwrap_or_default();
    match r {
        ns::RegId::Tail => s.tail as u32,
        ns::RegId::Status => {
            ns::Status(0).with_overflow(s.overflowed as u32).with_dropped(s.dropped.min(u16::MAX as u32)).0
        }
        _ => dev.generic_read(st, hit),
    }
}

pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, r: ns::RegId, val: u32) {
    dev.generic_write(st, hit, val);
    if matches!(r, ns::RegId::BaseLo | ns::RegId::BaseHi | ns::RegId::Size) {
        // Reprogramming the ring restarts the device side.
        st.nq.insert(hit.leaf_base(r.offset()), NqSlot::default());
    }
}

/// Host memory `[iova, iova + len)` is being unmapped: count the programmed NQ slots (size
/// and base non-zero) whose ring lies (partly) in it. The kmod halts a slot (base 0, size 0)
/// and lets it drain before freeing the ring (`nnq_destroy_nc`, `neuron_nq.c`).
pub(crate) fn dangling_slots(dev: &Dev, st: &State, iova: u64, len: u64) -> u64 {
    let mut n = 0;
    for &slot_off in st.nq.keys() {
        let lo = dev.stored(st, slot_off + ns::BASE_LO_OFFSET, 0) as u64;
        let hi = dev.stored(st, slot_off + ns::BASE_HI_OFFSET, 0) as u64;
        let size = dev.stored(st, slot_off + ns::SIZE_OFFSET, 0) as u64;
        let base = lo | (hi << 32);
        if size == 0 || base == 0 {
            continue;
        }
        let Some(ring) = dev.arch.dev_to_host_iova(base) else { continue };
        if ring < iova.saturating_add(len) && iova < ring.saturating_add(size) {
            tracing::warn!(
                slot = format_args!("{slot_off:#x}"),
                ring = format_args!("{ring:#x}"),
                "sim: host memory unmapped while a notification queue still points into it"
            );
            n += 1;
        }
    }
    n
}

/// NQ slots programmed (base and size non-zero).
pub(crate) fn programmed_slots(dev: &Dev, st: &State) -> u64 {
    st.nq
        .keys()
        .filter(|&&o| {
            let base = dev.stored(st, o + ns::BASE_LO_OFFSET, 0) | dev.stored(st, o + ns::BASE_HI_OFFSET, 0);
            base != 0 && dev.stored(st, o + ns::SIZE_OFFSET, 0) != 0
        })
        .count() as u64
}

/// BAR0 base of NOTIFIC slot `slot` of NC `nc`.
pub(crate) fn nc_slot(dev: &Dev, nc: usize, slot: u64) -> Option<u64> {
    dev.notific(nc)?.nq(slot).ok().map(|s| s.base())
}

/// Write `rec` to the NQ whose slot registers start at BAR0 offset `slot_off` (owned by NC
/// `nc`). Returns false if the record was dropped.
pub(crate) fn post(dev: &Dev, st: &mut State, nc: usize, slot_off: u64, mut rec: [u8; RECORD_BYTES]) -> bool {
    let lo = dev.stored(st, slot_off + ns::BASE_LO_OFFSET, 0) as u64;
    let hi = dev.stored(st, slot_off + ns::BASE_HI_OFFSET, 0) as u64;
    let size = dev.stored(st, slot_off + ns::SIZE_OFFSET, 0) as u64;
    let head = dev.stored(st, slot_off + ns::HEAD_OFFSET, 0) as u64;
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
        dev.intc(st, nc, Line::SwNqOverflow);
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
        dev.intc(st, nc, Line::DmaFault);
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
