//! Sequencers: five engines per NC (PE, ACT, POOL, DVE, SP) fetch 64-byte slots from the
//! instruction-fetch queue the driver programmed (`seq.eng[e]`), honour each slot's
//! events block (wait on a semaphore; update it on completion), execute the slot, and
//! post INST_START / INST_END records (debug_cmd trace bits) into their INFER_STATUS
//! ring. Unknown or malformed slots post a SEQUENCER_FATAL error record and stop the
//! engine. Also the Q7 control-block hooks and the DGE gate.

use std::sync::atomic::Ordering;

use csr_maps::consts::{q7 as q7c, seq as seqc, seq::error_mask};
use csr_maps::formats::dge::{allowed_channels, DgeMailbox, MAILBOXES};
use csr_maps::formats::error::ErrorId;
use csr_maps::formats::notify::{custom, ntype, Subtype};
use csr_maps::formats::ucpl::{UcplHeader, HEADER_BYTES, MAX_IMAGE_BYTES};
use isa::device_ops::{CollectiveOp, NotifyOp, WriteOp, UPDATE_DEC_COMPLETE};
use isa::slot::{
    Dma2d, Dma2dLeg, Events, Instruction, Opcode, TraceMode, UpdateMode, WaitMode, SLOT_BYTES, SLOT_WORDS,
};

use csr_maps::blocks::{q7, seq, seq_engine as se};
use csr_maps::RegId;

use crate::decode::Hit;

use super::fault::FaultKind;
use super::hub::{Arrival, Delivery};
use super::mpu::{self, Access, Source};
use super::records::code;
use super::records::{eng_regs, fault_engine, flood, post_error, post_infer, timestamp};
use super::{Dev, State};

/// NX engine cores per NC and the POOL engine's index (`al_hal_tpb_eng_type`).
const NX_CORES: u64 = 5;
const NX_POOL: u64 = 2;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SeqEng {
    pub state: u32,
    pub pc: u32,
    pub passes: u32,
    pub fault_code: u8,
    pub hang: bool,
    pub started: bool,
    pub coll_wait: bool,
    pub coll_done: bool,
    /// The semaphore it waits on and its generation when the wait was last unsatisfied.
    pub wait_sem: u8,
    pub wait_gen: u32,
}

/// Whether an engine fetches instructions (enabled: running, or waiting on a semaphore).
fn fetching(s: &SeqEng) -> bool {
    matches!(s.state, seqc::STATE_RUNNING | seqc::STATE_WAITING)
}

/// Engines enabled (running or waiting) over every NC.
pub(crate) fn enabled_engines(st: &State) -> u64 {
    st.seq.iter().flatten().filter(|s| fetching(s)).count() as u64
}

/// Memory at device addresses `[addr, addr + len)` is going away (host memory unmapped, or
/// device memory freed): count the enabled engines whose instruction-fetch queue lies (partly)
/// in it. An engine left enabled fetches whatever the memory holds next; a driver resets the
/// engine before freeing its program.
pub(crate) fn dangling_fetches(dev: &Dev, st: &State, addr: u64, len: u64) -> u64 {
    let mut n = 0;
    for (nc, engs) in st.seq.iter().enumerate() {
        for (e, s) in engs.iter().enumerate() {
            if !fetching(s) {
                continue;
            }
            let Some(r) = eng_regs(dev, nc, e) else { continue };
            let base = dev.stored(st, r.ifq_base_lo().offset(), 0) as u64
                | ((dev.stored(st, r.ifq_base_hi().offset(), 0) as u64) << 32);
            let bytes = se::IfqLen(dev.stored(st, r.ifq_len().offset(), 0)).slots() as u64 * SLOT_BYTES as u64;
            if bytes > 0 && base < addr.saturating_add(len) && addr < base.saturating_add(bytes) {
                tracing::warn!(
                    nc,
                    engine = e,
                    ifq = format_args!("{base:#x}"),
                    "sim: memory freed while an enabled engine's instruction-fetch queue points into it"
                );
                n += 1;
            }
        }
    }
    n
}

pub(crate) fn reg_read(dev: &Dev, st: &mut State, hit: &Hit, nc: u32, r: seq::RegId) -> u32 {
    let nc = nc as usize;
    match r {
        seq::RegId::TsLo => {
            let now = timestamp(dev, st, nc);
            // Reading the low half latches the high half.
            st.regs.insert(hit.leaf_base(r.offset()) + seq::TS_HI_OFFSET, (now >> 32) as u32);
            now as u32
        }
        seq::RegId::Eng(e, er) => {
            let Some(s) = st.seq.get(nc).and_then(|x| x.get(e as usize)).copied() else { return 0 };
            match er {
                se::RegId::Status => se::Status(0).with_state(s.state).with_fault_code(s.fault_code as u32).0,
                se::RegId::Pc => s.pc,
                se::RegId::Passes => s.passes,
                _ => dev.generic_read(st, hit),
            }
        }
        _ => dev.generic_read(st, hit),
    }
}

pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, nc: u32, r: seq::RegId, val: u32) {
    let nc = nc as usize;
    let (seq::RegId::Eng(e, se::RegId::Ctrl), true) = (r, nc < st.seq.len()) else {
        return dev.generic_write(st, hit, val);
    };
    let e = e as usize;
    let ctrl = se::Ctrl(val);
    if ctrl.reset() != 0 {
        st.seq[nc][e] = SeqEng::default();
        st.regs.insert(hit.off, 0);
        return;
    }
    st.regs.insert(hit.off, val);
    let s = &mut st.seq[nc][e];
    if ctrl.enable() != 0 {
        if matches!(s.state, seqc::STATE_IDLE | seqc::STATE_HALTED) {
            *s = SeqEng { state: seqc::STATE_RUNNING, passes: s.passes, ..SeqEng::default() };
            st.pending[nc] = true;
        }
    } else {
        s.state = seqc::STATE_IDLE;
    }
}

/// Q7 / NX control block writes: the loadable-library staging check on `ll_size`.
pub(crate) fn q7_write(dev: &Dev, st: &mut State, hit: &Hit, val: u32) {
    dev.generic_write(st, hit, val);
    let (RegId::Q7(_, r @ q7::RegId::LlSize) | RegId::Nx(_, r @ q7::RegId::LlSize)) = hit.id else { return };
    let q = q7::Block::at(&dev.null, hit.leaf_base(r.offset()));
    let claim = dev.stored(st, q.claim().offset(), 0);
    let addr =
        dev.stored(st, q.ll_addr().offset(), 0) as u64 | ((dev.stored(st, q.ll_addr().offset() + 4, 0) as u64) << 32);
    let mut hdr = [0u8; HEADER_BYTES];
    let status = if claim != q7c::CLAIMED {
        q7c::ERR_INVALID
    } else if val as u64 > MAX_IMAGE_BYTES {
        q7c::ERR_TOO_LARGE
    } else if dev.dev_read(st, addr, &mut hdr).is_err() {
        q7c::ERR_INVALID
    } else {
        match UcplHeader::decode(&hdr) {
            Ok(h) if h.image_size() > MAX_IMAGE_BYTES => q7c::ERR_TOO_LARGE,
            Ok(h) if h.image_size() == val as u64 => 1,
            _ => q7c::ERR_INVALID,
        }
    };
    st.regs.insert(q.ll_status().offset(), status);
}

/// Run the engines of `nc` until none can make progress. Returns whether any did.
pub(crate) fn run(dev: &Dev, st: &mut State, nc: usize, out: &mut Vec<Delivery>) -> bool {
    if dev.barriers.gated(nc) {
        // Held back until the NC's collectives barrier clears ([`super::barrier`]).
        return false;
    }
    let mut any = false;
    loop {
        let mut progress = false;
        for e in 0..seqc::Engine::COUNT {
            // A bounded burst per engine keeps the engines interleaved.
            for _ in 0..64 {
                if !step(dev, st, nc, e, out) {
                    break;
                }
                progress = true;
            }
        }
        any |= progress;
        if !progress {
            return any;
        }
    }
}

fn wait_ok(st: &State, nc: usize, ev: &Events) -> Option<bool> {
    let s = st.sems[nc].get(ev.wait_idx as usize).copied()?;
    let v = ev.semaphore_value as i32;
    Some(match ev.wait_mode {
        WaitMode::None => true,
        WaitMode::EqImm => s == v,
        WaitMode::GtImm => s > v,
        WaitMode::GeImm => s >= v,
        WaitMode::Reg81
        | WaitMode::Reg82
        | WaitMode::Reg83
        | WaitMode::Reg84
        | WaitMode::Reg85
        | WaitMode::Other(_) => return None,
    })
}

/// Put engine `e` in WAITING on semaphore `sem` (re-evaluated when that semaphore changes).
fn park(st: &mut State, nc: usize, e: usize, sem: u8) {
    let g = st.sem_gen[nc].get(sem as usize).copied().unwrap_or(0);
    let w = &mut st.seq[nc][e];
    w.state = seqc::STATE_WAITING;
    w.wait_sem = sem;
    w.wait_gen = g;
}

fn bump(st: &mut State, nc: usize, i: u8) {
    if let Some(g) = st.sem_gen.get_mut(nc).and_then(|g| g.get_mut(i as usize)) {
        *g = g.wrapping_add(1);
    }
}

fn apply_update(st: &mut State, nc: usize, ev: &Events) -> bool {
    if ev.update_mode != UpdateMode::None {
        bump(st, nc, ev.update_idx);
    }
    let Some(s) = st.sems[nc].get_mut(ev.update_idx as usize) else { return false };
    match ev.update_mode {
        UpdateMode::None => {}
        UpdateMode::IncRead | UpdateMode::IncComplete => *s = s.wrapping_add(1),
        UpdateMode::AddImmComplete => *s = s.wrapping_add(ev.semaphore_value as i32),
        UpdateMode::Other(UPDATE_DEC_COMPLETE) => *s = s.wrapping_sub(1),
        _ => return false,
    }
    true
}

/// Execute (at most) one slot of engine `e`. Returns whether anything changed.
fn step(dev: &Dev, st: &mut State, nc: usize, e: usize, out: &mut Vec<Delivery>) -> bool {
    let s = st.seq[nc][e];
    if !matches!(s.state, seqc::STATE_RUNNING | seqc::STATE_WAITING) || s.hang {
        return false;
    }
    // Nothing it waits on changed since it last checked: do not refetch.
    let gen = |st: &State, i: u8| st.sem_gen[nc].get(i as usize).copied().unwrap_or(0);
    if s.state == seqc::STATE_WAITING && s.wait_gen == gen(st, s.wait_sem) && !(s.coll_wait && s.coll_done) {
        return false;
    }
    let Some(r) = eng_regs(dev, nc, e) else { return false };
    let base = dev.stored(st, r.ifq_base_lo().offset(), 0) as u64
        | ((dev.stored(st, r.ifq_base_hi().offset(), 0) as u64) << 32);
    let len = se::IfqLen(dev.stored(st, r.ifq_len().offset(), 0)).slots();
    let looped = se::Ctrl(dev.stored(st, r.ctrl().offset(), 0)).loop_en() != 0;
    if len == 0 || s.pc >= len {
        st.seq[nc][e].state = seqc::STATE_HALTED;
        return true;
    }
    let mut b = [0u8; SLOT_BYTES];
    let at = base.wrapping_add(s.pc as u64 * SLOT_BYTES as u64);
    if !mpu::allowed(dev, st, nc, Access::Fetch, at, SLOT_BYTES as u64) {
        mpu::refuse(dev, st, nc, Source::Seq(e), Access::Fetch, at);
        fault_engine(dev, st, nc, e, code::FETCH, None);
        return true;
    }
    if let Err(f) = dev.dev_read(st, at, &mut b) {
        fault_engine(dev, st, nc, e, code::FETCH, Some(f));
        return true;
    }
    let ins = Instruction::decode(&b);
    let hdr = ins.header();
    let ev = ins.events();
    if hdr.inst_word_len != SLOT_WORDS {
        fault_engine(dev, st, nc, e, code::MALFORMED, None);
        return true;
    }
    match wait_ok(st, nc, &ev) {
        None => {
            fault_engine(dev, st, nc, e, code::WAIT_MODE, None);
            return true;
        }
        Some(false) => {
            park(st, nc, e, ev.wait_idx);
            return false;
        }
        Some(true) => {}
    }
    // Injected faults that fire when the engine executes its next slot.
    if let Some(i) = st.faults.iter().position(|f| f.nc == nc && f.engine == Some(e) && f.kind.per_engine()) {
        let f = st.faults.remove(i);
        match f.kind {
            FaultKind::Hang => {
                st.seq[nc][e].hang = true;
                return true;
            }
            FaultKind::SeqFatal => {
                fault_engine(dev, st, nc, e, code::INJECTED, None);
                return true;
            }
            FaultKind::FpNan => {
                post_error(dev, st, nc, e, ErrorId::FpNan, error_mask::NAN_RESULT, s.pc, code::INJECTED)
            }
            FaultKind::Transient => {
                post_error(dev, st, nc, e, ErrorId::SequencerNonfatal, error_mask::NONE, s.pc, code::INJECTED)
            }
            FaultKind::SemaphoreError => {
                post_error(dev, st, nc, e, ErrorId::SemaphoreError, error_mask::NONE, s.pc, code::INJECTED)
            }
            FaultKind::OutOfOrder => {
                post_infer(dev, st, nc, e, (ntype::INST_END, Subtype::End, 0, s.pc));
            }
            FaultKind::Oob => {
                post_infer(dev, st, nc, e, (ntype::EXPLICIT, Subtype::Custom, custom::OOB_INDIRECT_SCATTER, s.pc));
            }
            FaultKind::NqOverflow => flood(dev, st, nc, e, s.pc),
            FaultKind::NcUe => super::fault::nc_ue(dev, st, nc, e, s.pc),
            _ => {}
        }
    }
    st.seq[nc][e].state = seqc::STATE_RUNNING;
    let trace = hdr.trace_mode();
    if matches!(trace, TraceMode::OnStart | TraceMode::Both) && !st.seq[nc][e].started {
        post_infer(dev, st, nc, e, (ntype::INST_START, Subtype::Start, 0, s.pc));
    }
    st.seq[nc][e].started = true;
    let mut halt = false;
    match hdr.op() {
        Opcode::Nop | Opcode::EventSemaphore | Opcode::ExtendedInst => {}
        Opcode::EventWait | Opcode::EventSet | Opcode::EventClear | Opcode::SemaphoreTestAndSet => {}
        Opcode::Sync => halt = true,
        Opcode::Write => {
            let w = WriteOp::decode(&b);
            if !mpu::allowed(dev, st, nc, Access::Write, w.addr, 4) {
                // Not performed; the program goes on (the execution reports 1006).
                mpu::refuse(dev, st, nc, Source::Seq(e), Access::Write, w.addr);
            } else if let Err(f) = dev.dev_write(st, w.addr, &w.value.to_le_bytes()) {
                fault_engine(dev, st, nc, e, code::MEMORY, Some(f));
                return true;
            }
        }
        Opcode::Notify | Opcode::SeqNotify => {
            let n = NotifyOp::decode(&b);
            post_infer(dev, st, nc, e, (ntype::EXPLICIT, Subtype::Custom, n.sub_id, n.value));
        }
        Opcode::DmaMemcpy => {
            if let Err(c) = dma2d(dev, st, nc, e, &Dma2d::decode(&b)) {
                if c != code::DGE_GATE {
                    fault_engine(dev, st, nc, e, c, None);
                    return true;
                }
            }
        }
        Opcode::Sb2sbCollective => {
            let eng = st.seq[nc][e];
            if !eng.coll_wait {
                let c = CollectiveOp::decode(&b);
                if super::fault::collective_fault(dev, st, nc).is_some() {
                    // The transfer failed (or its proxy went silent): it never completes and
                    // the engine keeps waiting on it. Its sequence number is used up, so the
                    // NC's next collective does not pair with this one's peers.
                    let seq = st.coll_seq.entry((nc as u32, c.comm_id)).or_insert(0);
                    *seq = seq.wrapping_add(1);
                    st.seq[nc][e].coll_wait = true;
                    st.seq[nc][e].state = seqc::STATE_WAITING;
                    return true;
                }
                if let Some((a, at)) = collective_refused(dev, st, nc, &c) {
                    // Not performed (no arrival): the engine goes on as if it completed.
                    mpu::refuse(dev, st, nc, Source::Seq(e), a, at);
                } else {
                    match arrive(dev, st, nc, e, &c, out) {
                        Ok(()) => {}
                        Err(code) => {
                            fault_engine(dev, st, nc, e, code, None);
                            return true;
                        }
                    }
                    st.seq[nc][e].coll_wait = true;
                    st.seq[nc][e].state = seqc::STATE_WAITING;
                    return true;
                }
            } else {
                if !eng.coll_done {
                    park(st, nc, e, ev.wait_idx);
                    return false;
                }
                st.seq[nc][e].coll_wait = false;
                st.seq[nc][e].coll_done = false;
                dev.n.collectives.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {
            fault_engine(dev, st, nc, e, code::UNKNOWN_OPCODE, None);
            return true;
        }
    }
    if !apply_update(st, nc, &ev) {
        fault_engine(dev, st, nc, e, code::UPDATE_MODE, None);
        return true;
    }
    if matches!(trace, TraceMode::OnEnd | TraceMode::Both) {
        post_infer(dev, st, nc, e, (ntype::INST_END, Subtype::End, 0, s.pc));
    }
    dev.n.slots.fetch_add(1, Ordering::Relaxed);
    if dev.cfg.op_latency_ns > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(dev.cfg.op_latency_ns));
    }
    let eng = &mut st.seq[nc][e];
    eng.started = false;
    if halt {
        eng.state = seqc::STATE_HALTED;
        eng.pc += 1;
        return true;
    }
    eng.pc += 1;
    if eng.pc >= len {
        eng.passes = eng.passes.wrapping_add(1);
        if looped {
            eng.pc = 0;
        } else {
            eng.state = seqc::STATE_HALTED;
        }
    }
    true
}

/// The first access of collective `c` the NC's region table refuses (its source read or its
/// destination write), if any.
fn collective_refused(dev: &Dev, st: &mut State, nc: usize, c: &CollectiveOp) -> Option<(Access, u64)> {
    use isa::device_ops::{ctype, AllToAllV};
    let es = isa::device_ops::dtype::size(c.dtype)? as u64;
    let bytes = c.num_elements.checked_mul(es)?;
    // What it writes: all-gather every rank's input, all-to-allv its output count.
    let out = match c.ctype {
        ctype::ALL_GATHER => bytes.checked_mul(u64::from(c.group_size))?,
        ctype::ALL_TO_ALLV => c.out_elements.checked_mul(es)?,
        _ => bytes,
    };
    if !mpu::allowed(dev, st, nc, Access::Read, c.src, bytes) {
        return Some((Access::Read, c.src));
    }
    if c.ctype == ctype::ALL_TO_ALLV {
        let m = AllToAllV::meta_bytes(usize::from(c.group_size)) as u64;
        if !mpu::allowed(dev, st, nc, Access::Read, c.meta, m) {
            return Some((Access::Read, c.meta));
        }
    }
    if !mpu::allowed(dev, st, nc, Access::Write, c.dst, out) {
        return Some((Access::Write, c.dst));
    }
    None
}

fn arrive(dev: &Dev, st: &mut State, nc: usize, e: usize, c: &CollectiveOp, out: &mut Vec<Delivery>) -> Result<(), u8> {
    let es = isa::device_ops::dtype::size(c.dtype).ok_or(code::COLLECTIVE)?;
    let bytes = (c.num_elements as usize).checked_mul(es).filter(|&b| b <= 1 << 30).ok_or(code::COLLECTIVE)?;
    let mut data = dev.hub.take_bytes(bytes);
    if dev.dev_read(st, c.src, &mut data).is_err() {
        dev.hub.put_bytes(data);
        return Err(code::MEMORY);
    }
    if super::fault::hbm_ue_on_read(dev, st, [(c.src, bytes as u64)].into_iter()) {
        super::fault::damage(&mut data);
    }
    // All-to-allv: this rank's counts and displacements (4 rows of group-size u32).
    let mut meta = Vec::new();
    if c.ctype == isa::device_ops::ctype::ALL_TO_ALLV {
        let mut raw = vec![0u8; isa::device_ops::AllToAllV::meta_bytes(usize::from(c.group_size))];
        if dev.dev_read(st, c.meta, &mut raw).is_err() {
            dev.hub.put_bytes(data);
            return Err(code::MEMORY);
        }
        meta = raw.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    }
    let out_len = (c.out_elements as usize).checked_mul(es).filter(|&b| b <= 1 << 30).ok_or(code::COLLECTIVE)?;
    let seq = st.coll_seq.entry((nc as u32, c.comm_id)).or_insert(0);
    let my = *seq;
    *seq = seq.wrapping_add(1);
    dev.hub
        .arrive(
            Arrival {
                comm: c.comm_id,
                seq: my,
                rank: c.rank as usize,
                size: c.group_size as usize,
                op: c.op,
                dtype: c.dtype,
                ctype: c.ctype,
                peer: c.peer,
                meta,
                out_len,
                dev: dev.me.clone(),
                nc,
                engine: e,
                dst: c.dst,
                data,
            },
            out,
        )
        .map_err(|_| code::COLLECTIVE)
}

fn leg_elems(l: &Dma2dLeg) -> impl Iterator<Item = u64> + '_ {
    let es = l.elem_bytes();
    (0..l.num_elem[0] as i64).flat_map(move |i| {
        (0..l.num_elem[1] as i64).map(move |j| {
            let idx = i * l.step_elem[0] as i64 + j * l.step_elem[1] as i64;
            l.start_addr.wrapping_add((idx as u64).wrapping_mul(es))
        })
    })
}

/// DMAMEMCPY / DIRECT2D: a 2-D strided copy through one of the NC's DMA channels chosen
/// by the DGE mailbox gate, then `$S[semaphore] += sem_increment`.
fn dma2d(dev: &Dev, st: &mut State, nc: usize, e: usize, d: &Dma2d) -> Result<(), u8> {
    if d.src.start_addr >> 56 != 0 || d.dst.start_addr >> 56 != 0 || d.op != 0 {
        return Err(code::MALFORMED); // only immediate addresses and plain copies are modelled
    }
    let total = d.src.total_bytes();
    if total != d.dst.total_bytes() || total > 1 << 30 {
        return Err(code::MALFORMED);
    }
    let prio = d.priority_class();
    let channel = if prio == 0 {
        0
    } else {
        let q = dev.nx((nc as u64 * NX_CORES + NX_POOL) as usize).ok_or(code::MALFORMED)?;
        let mbs: Vec<DgeMailbox> = (0..MAILBOXES as u64)
            .filter_map(|i| q.dge_mailbox(i).ok())
            .map(|r| DgeMailbox::decode(dev.stored(st, r.offset(), csr_maps::formats::dge::MAILBOX_RESET as u64)))
            .collect();
        let allowed = allowed_channels(prio, &mbs);
        if allowed == 0 {
            let pc = st.seq[nc][e].pc;
            post_error(dev, st, nc, e, ErrorId::SequencerNonfatal, error_mask::NONE, pc, code::DGE_GATE);
            return Err(code::DGE_GATE);
        }
        allowed.trailing_zeros() as usize
    };
    if let Some((a, at)) = dma2d_refused(dev, st, nc, d) {
        // Not performed; its semaphore increment still happens so the program goes on (the
        // execution reports 1006).
        mpu::refuse(dev, st, nc, Source::Seq(e), a, at);
    } else {
        copy2d(dev, st, d, total)?;
        if let Some(c) = st.dge_bytes.get_mut(channel) {
            *c += total;
        }
    }
    if d.sem_increment > 0 {
        if let Some(s) = st.sems[nc].get_mut(d.semaphore as usize) {
            *s = s.wrapping_add(d.sem_increment as i32);
        }
        bump(st, nc, d.semaphore);
    }
    Ok(())
}

/// The first element of `d` the NC's region table refuses (a source read or a destination
/// write), if any. The whole span of a leg is tried first; only a leg whose span is not
/// covered is checked element by element (a strided pattern may skip what it does not own).
fn dma2d_refused(dev: &Dev, st: &mut State, nc: usize, d: &Dma2d) -> Option<(Access, u64)> {
    if !mpu::enabled(dev, st, nc) {
        return None;
    }
    for (l, a) in [(&d.src, Access::Read), (&d.dst, Access::Write)] {
        let (lo, hi) = l.span();
        let first = l.start_addr.wrapping_add(lo as u64);
        let whole = u64::try_from(hi - lo).ok();
        if whole.is_some_and(|n| {
            l.start_addr.checked_add_signed(lo as i64).is_some() && mpu::allowed(dev, st, nc, a, first, n)
        }) {
            continue;
        }
        for at in leg_elems(l) {
            if !mpu::allowed(dev, st, nc, a, at, l.elem_bytes()) {
                return Some((a, at));
            }
        }
    }
    None
}

/// The copy of a DMAMEMCPY: every source element, then every destination element.
fn copy2d(dev: &Dev, st: &mut State, d: &Dma2d, total: u64) -> Result<(), u8> {
    let mut buf = vec![0u8; total as usize];
    let ses = d.src.elem_bytes() as usize;
    for (k, a) in leg_elems(&d.src).enumerate() {
        dev.dev_read(st, a, &mut buf[k * ses..(k + 1) * ses]).map_err(|_| code::MEMORY)?;
    }
    if super::fault::hbm_ue_on_read(dev, st, leg_elems(&d.src).map(|a| (a, ses as u64))) {
        super::fault::damage(&mut buf);
    }
    let des = d.dst.elem_bytes() as usize;
    for (k, a) in leg_elems(&d.dst).enumerate() {
        dev.dev_write(st, a, &buf[k * des..(k + 1) * des]).map_err(|_| code::MEMORY)?;
    }
    Ok(())
}
