//! Record posting shared by the blocks: INFER_STATUS records of an engine (`post_infer`), TPB
//! error-ring records (`post_error`, `post_ecc_uncorrectable`) and stopping an engine with a
//! SEQUENCER_FATAL record (`fault_engine`). A leaf below the sequencer: it names only the
//! device state, the notification queues and the interrupt controller, so fault, mpu and hub
//! post records without importing the sequencer (layout: docs/records.md).

use csr_maps::consts::{seq as seqc, seq::error_mask};
use csr_maps::formats::error::{ErrorId, TpbErrorRecord};
use csr_maps::formats::notify::{custom, ntype, InferStatus, Subtype};

use super::intc::Line;
use super::{Dev, State};
use crate::iommu::DmaFault;

pub(crate) use csr_maps::consts::seq::fault as code;

/// The register block of engine `e` of `nc`.
pub(crate) fn eng_regs(dev: &Dev, nc: usize, e: usize) -> Option<csr_maps::blocks::seq_engine::Block<'_>> {
    dev.seq(nc)?.eng(e as u64).ok()
}

pub(crate) fn timestamp(dev: &Dev, st: &State, nc: usize) -> u64 {
    let per = dev.seq(nc).map(|s| dev.reg_value(st, s.ts_per_ns().offset())).unwrap_or(1);
    dev.now_ns().wrapping_mul(per as u64)
}

/// (notific kind, subtype, custom sub-id, line) of an INFER_STATUS record.
type Rec = (u8, Subtype, u16, u32);

pub(crate) fn post_infer(dev: &Dev, st: &mut State, nc: usize, e: usize, (kind, subtype, sub_id, line): Rec) -> bool {
    let Some(r) = eng_regs(dev, nc, e) else { return false };
    let slot = dev.stored(st, r.nq_infer_slot().offset(), 0) as u64;
    let rec = InferStatus {
        line: line as u16,
        line_hi: ((line >> 16) & 0xF) as u8,
        tag: ntype::engine(e as u8, kind),
        sub_id,
        subtype: subtype.to_u16(),
        timestamp: timestamp(dev, st, nc),
        ..Default::default()
    };
    match super::nq::nc_slot(dev, nc, slot) {
        Some(off) => super::nq::post(dev, st, nc, off, rec.encode()),
        None => false,
    }
}

/// Injected `nq-overflow`: engine `e` posts debug notifications (CUSTOM sub-id 6, non-fatal)
/// into its INFER_STATUS ring faster than the host consumes them, until the ring is really
/// full and a record is dropped. The host writes its consumer head back only every quarter
/// ring and cannot while the device runs, so the ring fills from where the device last saw
/// the head; the drop sets the overflow status, the next record's overflow bit and NC INTC
/// line 61 (g1 bit 29) through the ring's ordinary full check ([`super::nq::post`]). The
/// slot's own START / END then find the ring full as well.
pub(crate) fn flood(dev: &Dev, st: &mut State, nc: usize, e: usize, pc: u32) {
    let Some(r) = eng_regs(dev, nc, e) else { return };
    let slot = dev.stored(st, r.nq_infer_slot().offset(), 0) as u64;
    let Some(off) = super::nq::nc_slot(dev, nc, slot) else { return };
    let records = dev.stored(st, off + csr_maps::blocks::notific_slot::SIZE_OFFSET, 0) as u64
        / csr_maps::formats::notify::RECORD_BYTES as u64;
    for _ in 0..=records {
        if !post_infer(dev, st, nc, e, (ntype::EXPLICIT, Subtype::Custom, custom::DEBUG, pc)) {
            break;
        }
    }
}

/// Post a TPB error record on the NC's error ring (layout: docs/records.md). `mask` is the
/// record's error mask (bits 23:8, `metadata_lo`: the NaN mask of FP_NAN, the memory mask of
/// MEMORY_ERROR, [`error_mask::NONE`] otherwise); the sequencer metadata carries the engine as
/// its block id (modeled), the slot's program counter and `info`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_error(dev: &Dev, st: &mut State, nc: usize, e: usize, id: ErrorId, mask: u16, pc: u32, info: u8) {
    post_error_record(dev, st, nc, e, (ntype::ERROR, id.to_u8(), mask), pc, info);
}

/// Post an uncorrectable NC memory ECC record (`ntype::ECC`, modeled; docs/records.md §1)
/// for engine `e` at `pc` on the NC's error ring.
pub(crate) fn post_ecc_uncorrectable(dev: &Dev, st: &mut State, nc: usize, e: usize, pc: u32) {
    post_error_record(dev, st, nc, e, (ntype::ECC, 0, error_mask::ECC_UNCORRECTABLE), pc, code::INJECTED);
}

/// Post an error-ring record of notific type `kind.0`, error id `kind.1` and mask `kind.2`.
fn post_error_record(dev: &Dev, st: &mut State, nc: usize, e: usize, kind: (u8, u8, u16), pc: u32, info: u8) {
    let Some(s) = dev.seq(nc) else { return };
    let slot = dev.reg_value(st, s.err_nq_slot().offset()) as u64;
    let (ty, error_id, mask) = kind;
    let rec = TpbErrorRecord {
        error_id,
        metadata_lo: mask,
        header: ty,
        metadata_hi: TpbErrorRecord::seq_metadata(e as u8, (pc & 0xFFF) as u16, info),
        timestamp: timestamp(dev, st, nc),
    };
    if let Some(off) = super::nq::nc_slot(dev, nc, slot) {
        super::nq::post(dev, st, nc, off, rec.encode());
    }
}

/// Stop engine `e` of `nc` with a SEQUENCER_FATAL record.
pub(crate) fn fault_engine(dev: &Dev, st: &mut State, nc: usize, e: usize, code: u8, _f: Option<DmaFault>) {
    let pc = st.seq.get(nc).map(|s| s[e].pc).unwrap_or(0);
    post_error(dev, st, nc, e, ErrorId::SequencerFatal, error_mask::NONE, pc, code);
    if let Some(s) = st.seq.get_mut(nc).and_then(|s| s.get_mut(e)) {
        s.state = seqc::STATE_FAULT;
        s.fault_code = code;
    }
    dev.intc(st, nc, Line::SeqFatal);
}
