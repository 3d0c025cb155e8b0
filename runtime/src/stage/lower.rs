//! Step 4, lower programs: the engine programs the NC runs for one execution.
//!
//! # Lowering (the device forms are defined once in `isa::device_ops`)
//!
//! | NEFF slot | becomes |
//! |---|---|
//! | PSEUDO_DMA_TRIGGER `q block` | two WRITEs: the queue's S2M tail-increment register, then its M2S one, each by the block's descriptor-pair count (the first keeps the slot's wait, the second its update). The block's descriptors are staged in the ring, in trigger order, before every execution. |
//! | PSEUDO_TRIGGER_COLLECTIVE | SB2SB_COLLECTIVE with var ids relocated to device addresses (+ element offsets), the replica group's size and this graph's rank, and the load's communicator id |
//! | PSEUDO_DMA_DIRECT2D (dge_op DIRECT2D), DMAMEMCPY | DMAMEMCPY (0xB8) with PSEUDO_ADDR8 addresses (marker bit 0x10: var id in bits 32..48, byte offset in bits 0..32) relocated and bounds-checked |
//! | EVENT_SEMAPHORE, NOP, WRITE (allow-listed destination), semaphore ops, EXTENDED_INST | unchanged (trace bits cleared) |
//! | NOTIFY (0x6A / 0xA6) with sub-id debug (6), tensor completion (7) or debug-tensor read (8) | unchanged (trace bits cleared); any other sub-id — an out-of-bounds report or one libnrt does not know — is refused (NRT_INVALID) |
//! | anything else | load error NRT_INVALID ("Unsupported hardware operator code") |
//!
//! Every engine program is wrapped so that one MMIO write starts an execution and the
//! device cleans up after itself (semaphores `$S[250..=255]` are reserved):
//!
//! - SP (the sync engine) runs a runtime-generated program: take one token of `$S[KICK]`
//!   (wait ≥ 1, decrement) (`INST_START`); hand one start token to each of PE, ACT, POOL, DVE
//!   (`$S[START_e] += 1`); wait until all four report done (`$S[DONE] ≥ 4`); reset every
//!   semaphore the model uses and `$S[DONE]` to 0 (WRITEs to the `sem_set` window)
//!   (`INST_END`). The NEFF's own sp.bin (8-byte SP ISA) is not executed.
//! - PE/ACT/POOL/DVE: take their start token (`INST_START`) → the lowered program →
//!   `$S[DONE] += 1` (`INST_END`).
//!
//! All programs loop, so the next kickoff re-runs them without reprogramming.

use std::collections::BTreeSet;

use csr_maps::consts::addr8;
use csr_maps::formats::notify::custom;
use hal::Device;
use isa::device_ops::{self, CollectiveOp, NotifyOp, WriteOp, UPDATE_DEC_COMPLETE};
use isa::slot::{Dma2d, Dma2dLeg, Events, Instruction, Opcode, TraceMode, UpdateMode, WaitMode, SLOT_BYTES};
use neff::{Engine, Graph, Program};

use super::sems::{DONE, KICK, START};
use super::vars::addr_of;
use super::{GraphPlacement, StageError, StageErrorKind, StagedQueue, StagedVar};

/// Trace bits of a slot header (debug_cmd [1:0]).
const TRACE_START: u8 = TraceMode::OnStart as u8;
const TRACE_END: u8 = TraceMode::OnEnd as u8;

/// One engine program: its 64-byte slots.
pub type Slots = Vec<[u8; SLOT_BYTES]>;

/// The five programs (PE, ACT, POOL, DVE, then SP) of graph `g` on `p.nc`: the wrapped,
/// lowered NEFF programs and the runtime's SP program, which resets `model_sems` after
/// every execution.
pub fn lower_programs(
    dev: &Device,
    g: &Graph,
    p: &GraphPlacement,
    vars: &[StagedVar],
    queues: &[StagedQueue],
    model_sems: &BTreeSet<u8>,
) -> Result<Vec<Slots>, StageError> {
    let arch = dev.arch();
    let regs = dev.regs();
    let take = |s: u8| Events {
        wait_mode: WaitMode::GeImm,
        wait_idx: s,
        update_mode: UpdateMode::Other(UPDATE_DEC_COMPLETE),
        update_idx: s,
        semaphore_value: 1,
    };
    let inc = |s: u8| Events { update_mode: UpdateMode::IncComplete, update_idx: s, ..Events::NONE };
    let mut progs: Vec<Slots> = Vec::new();
    let mut trig_count = vec![0usize; queues.len()];
    let writable = write_allow_list(dev, p.nc, queues)?;
    // The four computing engines, in engine order (SP's program follows).
    for (start, kind) in START.iter().zip(Engine::ALL) {
        let mut slots = vec![device_ops::events_only(Opcode::EventSemaphore, TRACE_START, take(*start))];
        if let Some(ep) = g.engines.iter().find(|x| x.kind == kind) {
            if let Program::Tpb(ins) = &ep.program {
                let mut cx = LowerCtx {
                    regs: &regs,
                    g,
                    p,
                    engine: ep.kind.name(),
                    queues,
                    vars,
                    trig_count: &mut trig_count,
                    writable: &writable,
                };
                for (pc, i) in ins.iter().enumerate() {
                    lower(&mut cx, i, pc, &mut slots)?;
                }
            }
        }
        slots.push(device_ops::events_only(Opcode::Nop, TRACE_END, inc(DONE)));
        progs.push(slots);
    }
    // SP: the sync master.
    let mut sp = vec![device_ops::events_only(Opcode::EventSemaphore, TRACE_START, take(KICK))];
    for s in START {
        sp.push(device_ops::events_only(Opcode::Nop, 0, inc(s)));
    }
    let gate =
        Events { wait_mode: WaitMode::GeImm, wait_idx: DONE, semaphore_value: START.len() as u32, ..Events::NONE };
    sp.push(device_ops::events_only(Opcode::EventSemaphore, 0, gate));
    let sem_set = |s: u8| -> Result<u64, StageError> {
        let off = regs.tpb_sem(p.nc as u64).and_then(|b| b.sem_set(s as u64)).map_err(StageError::from)?.offset();
        arch.bar0_to_dev(off).ok_or_else(|| StageError::from(StageErrorKind::SemaphoreWindow { offset: off }))
    };
    for &s in model_sems {
        sp.push(WriteOp::new(Events::NONE, sem_set(s)?, 0).encode());
    }
    let mut last = WriteOp::new(Events::NONE, sem_set(DONE)?, 0);
    last.header.debug_cmd = TRACE_END;
    sp.push(last.encode());
    progs.push(sp);
    Ok(progs)
}

/// What lowering one engine's instructions needs: the device's registers, the graph and its
/// placement, the staged queues and vars, and how many triggers each queue has seen.
pub struct LowerCtx<'a> {
    pub regs: &'a csr_maps::Regs<'a>,
    pub g: &'a Graph,
    pub p: &'a GraphPlacement,
    /// Engine name (for messages).
    pub engine: &'a str,
    pub queues: &'a [StagedQueue],
    pub vars: &'a [StagedVar],
    /// Per queue: triggers lowered so far (the next one fires `order[count]`).
    pub trig_count: &'a mut [usize],
    /// Device addresses a model's WRITE may target ([`write_allow_list`]).
    pub writable: &'a BTreeSet<u64>,
}

/// The registers a model's own WRITE instructions may target on NC `nc`: the set, increment
/// and decrement registers of its NC's semaphores below the runtime's reserved ones, and the
/// tail-increment registers of its own DMA queues. Nothing else — never a reset or FW-IO
/// register, a DMA base register, another NC's registers, or device memory (a model moves
/// data with DMA descriptors and DMAMEMCPY on var addresses, which are range-checked).
pub fn write_allow_list(dev: &Device, nc: usize, queues: &[StagedQueue]) -> Result<BTreeSet<u64>, StageError> {
    let regs = dev.regs();
    let arch = dev.arch();
    let sem = regs.tpb_sem(nc as u64).map_err(StageError::from)?;
    let mut ok = BTreeSet::new();
    for s in 0..super::sems::FIRST_RESERVED as u64 {
        let e = StageError::from;
        let offs = [
            sem.sem_set(s).map_err(e)?.offset(),
            sem.sem_inc(s).map_err(e)?.offset(),
            sem.sem_dec(s).map_err(e)?.offset(),
        ];
        for o in offs {
            if let Some(a) = arch.bar0_to_dev(o) {
                ok.insert(a);
            }
        }
    }
    for q in queues {
        let (s2m, m2s) = q.ring.doorbell_dev_addrs(&regs)?;
        ok.insert(s2m);
        ok.insert(m2s);
    }
    Ok(ok)
}

/// The group rank a send/receive or permute of group rank `rank` (global rank `global`) of
/// `size` sends to; [`device_ops::NO_PEER`] for the other kinds. Send/receive sends to the
/// next rank of the group; permute to the target of the graph's `src_target_pairs` entry
/// `[global, target]` (global ranks, each source at most once, the target in the group), or
/// to no one without such an entry.
fn peer_of(
    pairs: &[Vec<i64>],
    ctype: u8,
    rank: usize,
    size: usize,
    members: &[u32],
    global: usize,
    what: &str,
) -> Result<u8, StageError> {
    let shape = |why: String| StageError::from(StageErrorKind::CollectiveShape { what: what.to_string(), why });
    match ctype {
        device_ops::ctype::SEND_RECV => Ok(((rank + 1) % size.max(1)) as u8),
        device_ops::ctype::PERMUTE => {
            let mut target = None;
            for (i, pair) in pairs.iter().enumerate() {
                let [s, t] = pair[..] else {
                    return Err(shape(format!("src_target_pairs[{i}] is {pair:?}, not a [source, target] pair")));
                };
                // A partial permutation: every rank sends at most once and receives at most once.
                if let Some(j) = pairs[..i].iter().position(|q| q.first() == Some(&s)) {
                    return Err(shape(format!("rank {s} is the source of src_target_pairs[{j}] and [{i}]")));
                }
                if let Some(j) = pairs[..i].iter().position(|q| q.get(1) == Some(&t)) {
                    return Err(shape(format!("rank {t} is the target of src_target_pairs[{j}] and [{i}]")));
                }
                if s != global as i64 {
                    continue;
                }
                // A group of one (empty) holds only this graph.
                let at = if members.is_empty() {
                    (t == global as i64).then_some(0)
                } else {
                    members.iter().position(|&m| i64::from(m) == t)
                };
                target = Some(at.ok_or_else(|| {
                    shape(format!("src_target_pairs[{i}] sends to rank {t}, outside the replica group {members:?}"))
                })?);
            }
            // NO_PEER is 255: no group rank (a group holds at most 255).
            Ok(target.map_or(device_ops::NO_PEER, |t| t as u8))
        }
        _ => Ok(device_ops::NO_PEER),
    }
}

/// Lower instruction `i` (slot `pc` of the context's engine) into `out`.
pub fn lower(cx: &mut LowerCtx<'_>, i: &Instruction, pc: usize, out: &mut Slots) -> Result<(), StageError> {
    let what = format!("{} slot {pc}", cx.engine);
    let (g, p, queues, vars) = (cx.g, cx.p, cx.queues, cx.vars);
    let mut clear = |mut b: [u8; SLOT_BYTES]| {
        b[2] &= !(TraceMode::Both as u8); // trace bits belong to the runtime's preamble/postamble
        out.push(b);
    };
    match i {
        Instruction::DmaTrigger(t) => {
            let name = t.queue();
            let qi = queues.iter().position(|q| q.name == name).ok_or_else(|| {
                StageError::from(StageErrorKind::UnknownQueue { what: what.clone(), queue: name.to_string() })
            })?;
            let q = &queues[qi];
            let k = cx.trig_count[qi];
            cx.trig_count[qi] += 1;
            let b = q
                .order
                .get(k)
                .copied()
                .ok_or_else(|| StageError::from(StageErrorKind::TriggerOrder { what: what.clone() }))?;
            let pairs = q.blocks[b].pairs;
            let (s2m, m2s) = q.ring.doorbell_dev_addrs(cx.regs)?;
            let wait = Events { update_mode: UpdateMode::None, update_idx: 0, ..t.events };
            let update = Events { wait_mode: WaitMode::None, wait_idx: 0, ..t.events };
            clear(WriteOp::new(wait, s2m, pairs).encode());
            clear(WriteOp::new(update, m2s, pairs).encode());
        }
        Instruction::TriggerCollective(c) => {
            let es = device_ops::dtype::size(c.dtype).ok_or_else(|| {
                StageError::from(StageErrorKind::CollectiveDtype { what: what.clone(), dtype: c.dtype })
            })? as u64;
            let bytes = c
                .num_elements
                .checked_mul(es)
                .ok_or_else(|| StageError::from(StageErrorKind::CollectiveSize { what: what.clone() }))?;
            if !device_ops::ctype::ALL.contains(&c.ctype) {
                return Err(StageError::from(StageErrorKind::CollectiveType { what: what.clone(), ctype: c.ctype }));
            }
            if device_ops::alu::op(c.op).is_none() {
                return Err(StageError::from(StageErrorKind::CollectiveOp { what: what.clone(), op: c.op }));
            }
            let elems = |o: u64| {
                o.checked_mul(es)
                    .ok_or_else(|| StageError::from(StageErrorKind::CollectiveOffset { what: what.clone(), offset: o }))
            };
            let src = addr_of(vars, c.input_tensor_id, elems(c.src_offset_elems)?, bytes, &what, p.unchecked)?;
            let group = g.replica_groups.get(c.group_id as usize);
            let (rank, size) = match group {
                None => {
                    return Err(StageError::from(StageErrorKind::NoReplicaGroup {
                        what: what.clone(),
                        group: c.group_id,
                        groups: g.replica_groups.len(),
                    }))
                }
                Some(gr) if gr.is_empty() => (0, 1),
                Some(gr) => {
                    let r = gr.iter().position(|&x| x as usize == p.rank).ok_or_else(|| {
                        StageError::from(StageErrorKind::NotInGroup {
                            what: what.clone(),
                            rank: p.rank,
                            members: gr.clone(),
                        })
                    })?;
                    (r, gr.len())
                }
            };
            if size > u8::MAX as usize {
                return Err(StageError::from(StageErrorKind::GroupTooLarge { what: what.clone(), size }));
            }
            let members: &[u32] = group.map_or(&[], Vec::as_slice);
            let peer = peer_of(&g.src_target_pairs, c.ctype, rank, size, members, p.rank, &what)?;
            if c.ctype == device_ops::ctype::ALL_TO_ALL && !c.num_elements.is_multiple_of(size as u64) {
                return Err(StageError::from(StageErrorKind::CollectiveShape {
                    what: what.clone(),
                    why: format!("all-to-all of {} elements over {size} ranks: not equal chunks", c.num_elements),
                }));
            }
            // What the collective writes: all-gather every rank's input, all-to-allv its output
            // count, the others at most an input's worth.
            let v = device_ops::AllToAllV::of(c);
            let out_bytes = match c.ctype {
                device_ops::ctype::ALL_GATHER => bytes.checked_mul(size as u64),
                device_ops::ctype::ALL_TO_ALLV => u64::from(v.out_elements).checked_mul(es),
                _ => Some(bytes),
            }
            .ok_or_else(|| StageError::from(StageErrorKind::CollectiveSize { what: what.clone() }))?;
            let dst = addr_of(vars, c.output_tensor_id, elems(c.dst_offset_elems)?, out_bytes, &what, p.unchecked)?;
            let (meta, out_elements) = if c.ctype == device_ops::ctype::ALL_TO_ALLV {
                let m = device_ops::AllToAllV::meta_bytes(size) as u64;
                (addr_of(vars, v.meta_tensor_id, 0, m, &what, p.unchecked)?, u64::from(v.out_elements))
            } else {
                (0, 0)
            };
            let op = CollectiveOp {
                header: isa::slot::SlotHeader::new(Opcode::Sb2sbCollective),
                events: c.events,
                op: c.op,
                dtype: c.dtype,
                ctype: c.ctype,
                rank: rank as u8,
                group_size: size as u8,
                peer,
                comm_id: p.comm_id.wrapping_mul(256).wrapping_add(c.group_id as u32),
                src,
                dst,
                num_elements: c.num_elements,
                meta,
                out_elements,
            };
            clear(op.encode());
        }
        Instruction::PseudoDmaDirect2d(d) | Instruction::DmaMemcpy(d) => {
            if matches!(i, Instruction::PseudoDmaDirect2d(_)) && d.op != 0 {
                return Err(StageError::from(StageErrorKind::UnsupportedDgeOp { what: what.clone(), op: d.op }));
            }
            // Every address must name a var: a raw device address is refused (it could name
            // any page the device reaches). The whole span of the pattern, all step signs,
            // must lie inside the var.
            let reloc = |l: &Dma2dLeg, side: &str| -> Result<Dma2dLeg, StageError> {
                if p.unchecked {
                    // Tests only: a raw address passes as is, a var address becomes the var's
                    // address + offset whatever the pattern's span.
                    if l.start_addr & addr8::VAR_MARKER == 0 {
                        return Ok(*l);
                    }
                    let id = ((l.start_addr >> addr8::VAR_ID_SHIFT) & addr8::VAR_ID_MASK) as u32;
                    let a = addr_of(vars, id, l.start_addr & addr8::OFFSET_MASK, 0, &what, true)?;
                    return Ok(Dma2dLeg { start_addr: a, ..*l });
                }
                if l.start_addr & addr8::VAR_MARKER == 0 || (l.start_addr & !addr8::VAR_MARKER) >> 48 != 0 {
                    return Err(StageError::from(StageErrorKind::RawAddress {
                        what: what.clone(),
                        side: side.to_string(),
                        addr: l.start_addr,
                    }));
                }
                let id = ((l.start_addr >> addr8::VAR_ID_SHIFT) & addr8::VAR_ID_MASK) as u32;
                let off = l.start_addr & addr8::OFFSET_MASK;
                let (lo, hi) = l.span();
                let first = off as i128 + lo;
                if first < 0 {
                    return Err(StageError::from(StageErrorKind::BeforeVar {
                        what: what.clone(),
                        side: side.to_string(),
                        bytes: -first,
                        var_id: u64::from(id),
                    }));
                }
                let len = u64::try_from(hi - lo).map_err(|_| {
                    StageError::from(StageErrorKind::SpanOverflow { what: what.clone(), side: side.to_string() })
                })?;
                let start = addr_of(vars, id, first as u64, len, &what, false)?;
                // `start` is var + off + lo; the leg starts at var + off.
                let a = (start as i128 - lo) as u64;
                Ok(Dma2dLeg { start_addr: a, ..*l })
            };
            let low = Dma2d {
                header: isa::slot::SlotHeader::new(Opcode::DmaMemcpy),
                events: d.events,
                op: if matches!(i, Instruction::PseudoDmaDirect2d(_)) { 0 } else { d.op },
                src: reloc(&d.src, "source")?,
                dst: reloc(&d.dst, "destination")?,
                ..*d
            };
            clear(low.encode());
        }
        Instruction::Write(_) => {
            let w = device_ops::WriteOp::decode(&i.encode());
            if !p.unchecked && !cx.writable.contains(&w.addr) {
                return Err(StageError::from(StageErrorKind::ForbiddenWrite { what: what.clone(), addr: w.addr }));
            }
            clear(i.encode())
        }
        Instruction::Notify(_) => {
            // A NOTIFY posts a custom INFER_STATUS record on the engine's ring, which the
            // completion engine decodes like the device's own: a model may post only the
            // sub-ids that do not fail the execution, never an out-of-bounds report (that is
            // the device's finding) or one libnrt does not know.
            let n = NotifyOp::decode(&i.encode());
            if !p.unchecked && !custom::is_informational(n.sub_id) {
                return Err(StageError::from(StageErrorKind::ForgedNotification {
                    what: what.clone(),
                    opcode: n.header.opcode,
                    sub_id: n.sub_id,
                }));
            }
            clear(i.encode())
        }
        Instruction::EventSemaphore(_)
        | Instruction::Nop(_)
        | Instruction::Semaphore(_)
        | Instruction::ExtendedInst(_) => clear(i.encode()),
        Instruction::Raw { header, .. } => {
            return Err(StageError::from(StageErrorKind::UnsupportedOpcode {
                what: what.clone(),
                opcode: header.opcode,
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::peer_of;
    use isa::device_ops::{ctype, NO_PEER};

    #[test]
    fn peers_of_send_receive_and_permute() {
        let members = [0u32, 2, 4, 6];
        // Send/receive: the next group rank, wrapping.
        assert_eq!(peer_of(&[], ctype::SEND_RECV, 3, 4, &members, 6, "t").ok(), Some(0));
        assert_eq!(peer_of(&[], ctype::SEND_RECV, 1, 4, &members, 2, "t").ok(), Some(2));
        // Permute: global ranks in the pairs, the target's position in the group.
        let pairs = vec![vec![0, 2], vec![2, 0], vec![4, 4]];
        assert_eq!(peer_of(&pairs, ctype::PERMUTE, 0, 4, &members, 0, "t").ok(), Some(1));
        assert_eq!(peer_of(&pairs, ctype::PERMUTE, 2, 4, &members, 4, "t").ok(), Some(2));
        assert_eq!(peer_of(&pairs, ctype::PERMUTE, 3, 4, &members, 6, "t").ok(), Some(NO_PEER));
        // Other kinds carry no peer.
        assert_eq!(peer_of(&pairs, ctype::ALL_REDUCE, 0, 4, &members, 0, "t").ok(), Some(NO_PEER));
        // Malformed pairs are refused, naming the problem.
        for (bad, why) in [
            (vec![vec![0, 1]], "outside the replica group"),
            (vec![vec![0, 2, 4]], "not a [source, target] pair"),
            (vec![vec![0, 2], vec![0, 4]], "rank 0 is the source of src_target_pairs[0] and [1]"),
            (vec![vec![0, 2], vec![4, 2]], "rank 2 is the target of src_target_pairs[0] and [1]"),
        ] {
            let e = peer_of(&bad, ctype::PERMUTE, 0, 4, &members, 0, "t").err().map(|e| e.to_string());
            assert!(e.as_deref().is_some_and(|e| e.contains(why)), "{bad:?}: {e:?}");
        }
    }
}
