//! Staging one graph of a NEFF on one NeuronCore through hal: device memory for the
//! vars, DMA rings for the queues, lowered engine programs, notification rings.
//!
//! # Lowering (the device forms are defined once in `isa::device_ops`)
//!
//! | NEFF slot | becomes |
//! |---|---|
//! | PSEUDO_DMA_TRIGGER `q block` | two WRITEs: the queue's S2M tail-increment register, then its M2S one, each by the block's descriptor-pair count (the first keeps the slot's wait, the second its update). The block's descriptors are staged in the ring, in trigger order, before every execution. |
//! | PSEUDO_TRIGGER_COLLECTIVE | SB2SB_COLLECTIVE with var ids relocated to device addresses (+ element offsets), the replica group's size and this graph's rank, and the load's communicator id |
//! | PSEUDO_DMA_DIRECT2D (dge_op DIRECT2D) | DMAMEMCPY (0xB8) with PSEUDO_ADDR8 addresses (marker bit 0x10: var id in bits 32..48, byte offset in bits 0..32) relocated and bounds-checked |
//! | EVENT_SEMAPHORE, NOP, NOTIFY, WRITE, semaphore ops, EXTENDED_INST, DMAMEMCPY with immediate addresses | unchanged (trace bits cleared) |
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

use csr_maps::consts::seq::ENGINES;
use hal::{DevBuf, Device, HostBuf, NqOwner, NqRing, Ring, Stream, Xfer};
use isa::device_ops::{self, CollectiveOp, WriteOp, UPDATE_DEC_COMPLETE};
use isa::slot::{Dma2d, Dma2dLeg, Events, Instruction, Opcode, UpdateMode, WaitMode, SLOT_BYTES};
use neff::{EngineKind, Graph, NrtStatus, Program, VarKind};

/// Reserved semaphores (the top of the 256).
pub mod sems {
    /// Kickoff token (one MMIO increment per execution).
    pub const KICK: u8 = 255;
    /// Engines done counter.
    pub const DONE: u8 = 254;
    /// Start tokens of PE, ACT, POOL, DVE.
    pub const START: [u8; 4] = [250, 251, 252, 253];
    /// Lowest reserved index.
    pub const FIRST_RESERVED: u8 = 250;
}

/// Index of the SP engine (the sync master).
pub const SP: usize = 4;
/// Records per INFER_STATUS ring and per error ring.
pub const RING_RECORDS: u64 = 256;
use csr_maps::consts::addr8;
use isa::slot::TraceMode;

/// Trace bits of a slot header (debug_cmd [1:0]).
const TRACE_START: u8 = TraceMode::OnStart as u8;
const TRACE_END: u8 = TraceMode::OnEnd as u8;

/// A load failure with the status libnrt returns for it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StageError {
    pub status: NrtStatus,
    pub message: String,
}

impl StageError {
    fn invalid(m: impl Into<String>) -> Self {
        Self { status: NrtStatus::Invalid, message: m.into() }
    }
}

impl From<hal::HalError> for StageError {
    fn from(e: hal::HalError) -> Self {
        let status = match &e {
            hal::HalError::OutOfDeviceMemory { .. } => NrtStatus::Resource,
            hal::HalError::HostMem(_) => NrtStatus::FailHostMemAlloc,
            _ => NrtStatus::Failure,
        };
        Self { status, message: e.to_string() }
    }
}

/// A var placed in device memory.
pub struct StagedVar {
    pub name: String,
    pub var_id: u32,
    pub kind: VarKind,
    pub size: u64,
    /// Device address.
    pub addr: u64,
    /// Owning allocation (None for state-buffer and virtual vars).
    pub mem: Option<DevBuf>,
}

/// One prebuilt DMA block: its transfers and the completion-semaphore pair.
pub struct StagedBlock {
    pub id: u32,
    pub xfers: Vec<Xfer>,
    /// For each transfer: the var index its source / destination lies in (None for the
    /// semaphore pair), so a bound tensor can replace the var at bind time.
    pub refs: Vec<(Option<usize>, Option<usize>)>,
    pub pairs: u32,
}

/// A model DMA queue on a hardware queue pair.
pub struct StagedQueue {
    pub name: String,
    pub ring: Ring,
    pub blocks: Vec<StagedBlock>,
    /// Block indices in the order the owner engine's program triggers them.
    pub order: Vec<usize>,
}

/// Everything a graph holds on one NC while loaded.
pub struct StagedNc {
    pub nc: usize,
    pub vars: Vec<StagedVar>,
    pub queues: Vec<StagedQueue>,
    pub streams: Vec<Stream>,
    pub infer_rings: Vec<NqRing>,
    pub err_ring: NqRing,
    /// Host word holding 1: source of the semaphore-increment pairs.
    pub one: HostBuf,
    /// BAR0 offset of `$S[KICK]`'s increment register.
    pub kick_off: u64,
    /// Semaphores the model uses (reset by SP after every execution).
    pub model_sems: BTreeSet<u8>,
    pub dge_core: Option<hal::q7::UcodeCore>,
    /// The Q7 pool core claimed for the model's ucode libraries, and the staged libraries.
    pub q7_core: Option<hal::q7::UcodeCore>,
    pub ucode: Vec<hal::q7::LoadableLib>,
    /// The device (for the completion engine's register probes).
    pub dev: Device,
    /// Scratch for raw records (preallocated; the hot path does not allocate).
    pub raw: Vec<[u8; 16]>,
    /// Per var: a tensor address bound for the next execution (replaces the var in DMA
    /// descriptors), set by the runtime's bind step.
    pub bind: Vec<Option<u64>>,
    /// Per var: referenced only by DMA descriptors (so binding by address is possible).
    pub dma_only: Vec<bool>,
}

impl StagedNc {
    /// A var by name.
    pub fn var(&self, name: &str) -> Option<&StagedVar> {
        self.vars.iter().find(|v| v.name == name)
    }

    /// Index of a var by name.
    pub fn var_index(&self, name: &str) -> Option<usize> {
        self.vars.iter().position(|v| v.name == name)
    }

    /// Write every queue's descriptors for one execution (the bind step), with bound
    /// tensors in place of their vars. Allocates nothing.
    pub fn stage_rings(&mut self) -> Result<(), hal::HalError> {
        let (vars, bind) = (&self.vars, &self.bind);
        let rebase = |a: u64, r: Option<usize>| match r.and_then(|i| bind[i].map(|b| (b, vars[i].addr))) {
            Some((b, base)) => b + (a - base),
            None => a,
        };
        for q in &mut self.queues {
            for &b in &q.order {
                let blk = &q.blocks[b];
                for (x, &(rs, rd)) in blk.xfers.iter().zip(&blk.refs) {
                    let x = Xfer { src: rebase(x.src, rs), dst: rebase(x.dst, rd), len: x.len };
                    q.ring.stage(std::slice::from_ref(&x))?;
                }
            }
        }
        Ok(())
    }

    /// Stop the engines and halt the rings (unload / failed load).
    pub fn teardown(self, dev: &Device) -> Vec<DevBuf> {
        let regs = dev.regs();
        let mut keep = Vec::new();
        for s in self.streams {
            if let Ok(m) = s.unload(&regs) {
                keep.push(m);
            }
        }
        for r in self.infer_rings.iter().chain(std::iter::once(&self.err_ring)) {
            let _ = r.halt(&regs);
        }
        for q in &self.queues {
            let _ = q.ring.quiesce(&regs);
        }
        keep
    }
}

/// Placement of one graph of a model.
pub struct GraphPlacement {
    pub nc: usize,
    /// Index of the graph in the model (its rank in replica groups).
    pub rank: usize,
    /// Communicator id shared by every graph of this load.
    pub comm_id: u32,
}

fn runs(sizes: &[u64], steps: &[i64], what: &str) -> Result<Vec<(i64, u64)>, StageError> {
    if sizes.len() != steps.len() || sizes.is_empty() || sizes.contains(&0) {
        return Err(StageError::invalid(format!(
            "{what}: access pattern sizes {sizes:?} / steps {steps:?} are inconsistent"
        )));
    }
    let total: u128 = sizes.iter().map(|&s| s as u128).product();
    if total > 1 << 34 {
        return Err(StageError::invalid(format!("{what}: access pattern of {total} bytes is too large")));
    }
    // Dimension 0 is innermost; a unit step makes it one contiguous run.
    let (inner, outer) = if steps[0] == 1 { (sizes[0], &sizes[1..]) } else { (1, sizes) };
    let osteps = if steps[0] == 1 { &steps[1..] } else { steps };
    let count: u128 = outer.iter().map(|&s| s as u128).product();
    if count > 1 << 20 {
        return Err(StageError::invalid(format!("{what}: access pattern has {count} runs (limit 2^20)")));
    }
    let mut out: Vec<(i64, u64)> = Vec::new();
    let mut idx = vec![0u64; outer.len()];
    for _ in 0..count {
        let off: i64 = idx.iter().zip(osteps).map(|(&i, &s)| i as i64 * s).sum();
        match out.last_mut() {
            Some((o, l)) if *o + *l as i64 == off => *l += inner,
            _ => out.push((off, inner)),
        }
        for (d, i) in idx.iter_mut().enumerate() {
            *i += 1;
            if *i < outer[d] {
                break;
            }
            *i = 0;
        }
    }
    Ok(out)
}

/// Stage graph `g` of `model` on `p.nc` of `dev`.
pub fn stage_graph(dev: &Device, g: &Graph, p: &GraphPlacement) -> Result<StagedNc, StageError> {
    let nc = p.nc;
    let chan = dev.hbm_for_nc(nc);
    let arch = dev.arch();
    // ---- vars
    let mut vars: Vec<StagedVar> = Vec::new();
    let sbuf = arch.region("sbuf").ok_or_else(|| StageError::invalid("arch has no state buffer"))?;
    let sbuf_base = sbuf.dev_base(nc as u64).ok_or_else(|| StageError::invalid("no state buffer for this NC"))?;
    let mut sb_off = 0u64;
    let mut ordered: Vec<&neff::Var> = g.vars.iter().collect();
    ordered.sort_by_key(|v| v.var_id);
    for v in &ordered {
        let size = v.size.or_else(|| v.data.as_ref().map(|d| d.len() as u64)).unwrap_or(0);
        let align = v.alignment.unwrap_or(64).max(64);
        if !align.is_power_of_two() {
            return Err(StageError::invalid(format!("var {}: alignment {align} is not a power of two", v.name)));
        }
        let (addr, mem) = match v.kind {
            VarKind::StateBuffer => {
                let a = sb_off.div_ceil(align) * align;
                if a + size > sbuf.size {
                    return Err(StageError {
                        status: NrtStatus::Resource,
                        message: format!("state buffer exhausted by var {}", v.name),
                    });
                }
                sb_off = a + size;
                (sbuf_base + a, None)
            }
            VarKind::Virtual => (0, None), // resolved below against its backing var
            _ => {
                let m = dev.alloc_device(chan, size.max(1), align)?;
                (m.addr(), Some(m))
            }
        };
        vars.push(StagedVar { name: v.name.clone(), var_id: v.var_id, kind: v.kind, size, addr, mem });
    }
    for (i, v) in ordered.iter().enumerate() {
        if v.kind == VarKind::Virtual {
            let back =
                v.backing_buf.as_deref().and_then(|b| vars.iter().find(|x| x.name == b)).map(|b| (b.addr, b.size));
            let off = v.backing_variable_off.unwrap_or(0);
            match back {
                Some((a, s)) if off.checked_add(vars[i].size).is_some_and(|e| e <= s) => vars[i].addr = a + off,
                _ => {
                    return Err(StageError::invalid(format!(
                        "virtual var {}: backing buffer missing or too small",
                        v.name
                    )))
                }
            }
        }
        if let (Some(data), Some(_)) = (&v.data, &vars[i].mem) {
            dev.write_device(nc, vars[i].addr, data.as_ref())?;
        }
    }
    let addr_of = |id: u32, off: u64, len: u64, what: &str| -> Result<u64, StageError> {
        let v = vars
            .iter()
            .find(|v| v.var_id == id)
            .ok_or_else(|| StageError::invalid(format!("{what}: unknown var id {id}")))?;
        match off.checked_add(len) {
            Some(end) if end <= v.size => Ok(v.addr + off),
            _ => {
                Err(StageError::invalid(format!("{what}: range {off}+{len} exceeds var {} ({} bytes)", v.name, v.size)))
            }
        }
    };
    let addr_by_name = |name: &str, off: i64, len: u64, what: &str| -> Result<u64, StageError> {
        let v = vars
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| StageError::invalid(format!("{what}: unknown var {name}")))?;
        if off < 0 || (off as u64).checked_add(len).is_none_or(|e| e > v.size) {
            return Err(StageError::invalid(format!(
                "{what}: access {off}+{len} outside var {name} ({} bytes)",
                v.size
            )));
        }
        Ok(v.addr + off as u64)
    };
    // ---- semaphores used by the model
    let mut model_sems: BTreeSet<u8> = BTreeSet::new();
    for e in &g.engines {
        if let Program::Tpb(ins) = &e.program {
            for i in ins {
                let ev = i.events();
                if ev.wait_mode != WaitMode::None {
                    model_sems.insert(ev.wait_idx);
                }
                if ev.update_mode != UpdateMode::None {
                    model_sems.insert(ev.update_idx);
                }
                if let Instruction::DmaMemcpy(d) | Instruction::PseudoDmaDirect2d(d) = i {
                    if d.sem_increment > 0 {
                        model_sems.insert(d.semaphore);
                    }
                }
            }
        }
    }
    for q in &g.dma_queues {
        for s in [q.semaphore, q.semaphore_set].into_iter().flatten() {
            model_sems.insert(
                u8::try_from(s).map_err(|_| StageError::invalid(format!("queue {}: semaphore {s} > 255", q.name)))?,
            );
        }
    }
    if let Some(&s) = model_sems.range(sems::FIRST_RESERVED..).next() {
        return Err(StageError::invalid(format!("semaphore {s} is reserved by the runtime (250..=255)")));
    }
    // ---- DMA queues: one hardware queue pair each, on this NC's engines (queue 0).
    let one = dev.alloc_host(64, 64)?;
    one.write_u32(0, 1)?;
    let per = arch.counts.dma_engines_per_nc as usize;
    if g.dma_queues.len() > per {
        return Err(StageError {
            status: NrtStatus::Resource,
            message: format!("{} DMA queues, {per} engines per NC", g.dma_queues.len()),
        });
    }
    let mut queues: Vec<StagedQueue> = Vec::new();
    for (qi, q) in g.dma_queues.iter().enumerate() {
        let mut blocks = Vec::new();
        for e in &g.engines {
            for b in e.dma_blocks.iter().filter(|b| b.queue == q.name) {
                let mut xfers = Vec::new();
                let mut refs = Vec::new();
                for (k, d) in b.descs.iter().enumerate() {
                    let (fi, ti) =
                        (vars.iter().position(|v| v.name == d.from), vars.iter().position(|v| v.name == d.to));
                    if d.op != neff::DmaOp::Copy {
                        return Err(StageError::invalid(format!(
                            "queue {} block {}: DMA op {} is not supported",
                            q.name,
                            b.id,
                            d.op.name()
                        )));
                    }
                    let what = format!("queue {} block {} desc {k}", q.name, b.id);
                    let src = runs(&d.from_sizes, &d.from_steps, &what)?;
                    let dst = runs(&d.to_sizes, &d.to_steps, &what)?;
                    let ts: u64 = src.iter().map(|r| r.1).sum();
                    let td: u64 = dst.iter().map(|r| r.1).sum();
                    if ts != td {
                        return Err(StageError::invalid(format!(
                            "{what}: {ts} source bytes vs {td} destination bytes"
                        )));
                    }
                    let (mut si, mut so, mut di, mut dof) = (0usize, 0u64, 0usize, 0u64);
                    while si < src.len() && di < dst.len() {
                        let n = (src[si].1 - so).min(dst[di].1 - dof);
                        let s = addr_by_name(&d.from, src[si].0 + so as i64, n, &what)?;
                        let t = addr_by_name(&d.to, dst[di].0 + dof as i64, n, &what)?;
                        xfers.push(Xfer { src: s, dst: t, len: n });
                        refs.push((fi, ti));
                        so += n;
                        dof += n;
                        if so == src[si].1 {
                            si += 1;
                            so = 0;
                        }
                        if dof == dst[di].1 {
                            di += 1;
                            dof = 0;
                        }
                    }
                }
                if let Some(s) = q.semaphore {
                    xfers.push(Xfer { src: dev.host_addr(&one), dst: dev.sem_inc_dev_addr(nc, s as u64)?, len: 4 });
                    refs.push((None, None));
                }
                let pairs: u64 = xfers.iter().map(|x| Ring::pairs_for(x.len) as u64).sum();
                blocks.push(StagedBlock { id: b.id, xfers, refs, pairs: pairs as u32 });
            }
        }
        // Trigger order from the programs.
        let mut order = Vec::new();
        let mut owners = BTreeSet::new();
        for e in &g.engines {
            if let Program::Tpb(ins) = &e.program {
                for i in ins {
                    if let Instruction::DmaTrigger(t) = i {
                        if t.queue() == q.name {
                            if t.use_raw_count != 0 {
                                return Err(StageError::invalid(format!(
                                    "queue {}: raw-count triggers are not supported",
                                    q.name
                                )));
                            }
                            let b = blocks.iter().position(|b| b.id == t.block_id_or_count).ok_or_else(|| {
                                StageError::invalid(format!("queue {}: no DMA block {}", q.name, t.block_id_or_count))
                            })?;
                            order.push(b);
                            owners.insert(e.kind.index());
                        }
                    }
                }
            }
        }
        if owners.len() > 1 {
            return Err(StageError::invalid(format!("queue {} is triggered by several engines", q.name)));
        }
        let total: u64 = order.iter().map(|&b| blocks[b].pairs as u64).sum();
        let ndesc = (total + 17).next_power_of_two().max(32);
        if ndesc > 1 << 20 {
            return Err(StageError {
                status: NrtStatus::Resource,
                message: format!("queue {} needs {total} descriptors per execution", q.name),
            });
        }
        let engine = (nc * per + qi) as u64;
        let ring = dev.new_ring(engine, 0, ndesc as u32)?;
        queues.push(StagedQueue { name: q.name.clone(), ring, blocks, order });
    }
    // ---- programs
    let regs = dev.regs();
    let take = |s: u8| Events {
        wait_mode: WaitMode::GeImm,
        wait_idx: s,
        update_mode: UpdateMode::Other(UPDATE_DEC_COMPLETE),
        update_idx: s,
        semaphore_value: 1,
    };
    let inc = |s: u8| Events { update_mode: UpdateMode::IncComplete, update_idx: s, ..Events::NONE };
    let mut progs: Vec<Vec<[u8; SLOT_BYTES]>> = Vec::new();
    let mut trig_count = vec![0usize; queues.len()];
    for (e, start) in sems::START.iter().enumerate() {
        let mut slots = vec![device_ops::events_only(Opcode::EventSemaphore, TRACE_START, take(*start))];
        let kind = [EngineKind::Pe, EngineKind::Act, EngineKind::Pool, EngineKind::Dve][e];
        if let Some(ep) = g.engines.iter().find(|x| x.kind == kind) {
            if let Program::Tpb(ins) = &ep.program {
                for (pc, i) in ins.iter().enumerate() {
                    lower(dev, &regs, g, p, i, pc, ep.kind.name(), &queues, &mut trig_count, &addr_of, &mut slots)?;
                }
            }
        }
        slots.push(device_ops::events_only(Opcode::Nop, TRACE_END, inc(sems::DONE)));
        progs.push(slots);
    }
    // SP: the sync master.
    let mut sp = vec![device_ops::events_only(Opcode::EventSemaphore, TRACE_START, take(sems::KICK))];
    for s in sems::START {
        sp.push(device_ops::events_only(Opcode::Nop, 0, inc(s)));
    }
    let gate = Events {
        wait_mode: WaitMode::GeImm,
        wait_idx: sems::DONE,
        semaphore_value: sems::START.len() as u32,
        ..Events::NONE
    };
    sp.push(device_ops::events_only(Opcode::EventSemaphore, 0, gate));
    let sem_set = |s: u8| -> Result<u64, StageError> {
        let off = regs
            .tpb_sem(nc as u64)
            .and_then(|b| b.sem_set(s as u64))
            .map_err(|e| StageError::invalid(e.to_string()))?
            .offset();
        arch.bar0_to_dev(off).ok_or_else(|| StageError::invalid("semaphore window has no device address"))
    };
    for &s in &model_sems {
        sp.push(WriteOp::new(Events::NONE, sem_set(s)?, 0).encode());
    }
    let mut last = WriteOp::new(Events::NONE, sem_set(sems::DONE)?, 0);
    last.header.debug_cmd = TRACE_END;
    sp.push(last.encode());
    progs.push(sp);
    // ---- notification rings, then streams (engines start idle; `enable` arms them).
    let mut infer_rings = Vec::new();
    for e in 0..ENGINES.len() {
        infer_rings.push(dev.nq_ring(NqOwner::Nc(nc), dev.infer_slot(e), RING_RECORDS)?);
    }
    let err_ring = dev.nq_ring(NqOwner::Nc(nc), dev.error_slot(), RING_RECORDS)?;
    let mut streams = Vec::new();
    for (e, slots) in progs.iter().enumerate() {
        let bytes: Vec<u8> = slots.iter().flatten().copied().collect();
        streams.push(dev.load_stream(nc, e, &bytes, true)?);
    }
    for s in &streams {
        s.enable(&regs, true)?;
    }
    // Default DGE mailboxes and priority classes on the NX POOL core.
    let dge_core = {
        let ctx = hal::q7::UcodeContext::new(csr_maps::consts::q7::API_LEVEL).map_err(hal::HalError::from)?;
        let mut core =
            hal::q7::UcodeCore::new(&ctx, dev, nc, hal::q7::CoreKind::Nx { engine: EngineKind::Pool.index() as u64 })
                .map_err(hal::HalError::from)?;
        match core.on_ucode_booted() {
            Ok(()) => {
                core.dge_mailboxes(0).map_err(hal::HalError::from)?;
                Some(core)
            }
            Err(e) => return Err(StageError { status: NrtStatus::Resource, message: format!("NC {nc}: {e}") }),
        }
    };
    // Q7 ucode: each ucode_lib's prelinked UCPL image is staged in device memory and handed
    // to Q7 pool core 0 (claimed for the model's lifetime; released at unload).
    let (q7_core, ucode) = stage_ucode(dev, g, nc)?;
    let kick_off = dev.sem_inc_offset(nc, sems::KICK as u64)?;
    // Vars that instructions address directly cannot be rebound to a tensor per execution.
    let mut by_insn: BTreeSet<u32> = BTreeSet::new();
    for e in &g.engines {
        if let Program::Tpb(ins) = &e.program {
            for i in ins {
                match i {
                    Instruction::TriggerCollective(c) => {
                        by_insn.insert(c.input_tensor_id);
                        by_insn.insert(c.output_tensor_id);
                    }
                    Instruction::PseudoDmaDirect2d(d) | Instruction::DmaMemcpy(d) => {
                        for l in [&d.src, &d.dst] {
                            if l.start_addr & addr8::VAR_MARKER != 0 {
                                by_insn.insert(((l.start_addr >> addr8::VAR_ID_SHIFT) & addr8::VAR_ID_MASK) as u32);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let dma_only: Vec<bool> = vars.iter().map(|v| !by_insn.contains(&v.var_id) && v.mem.is_some()).collect();
    let bind = vec![None; vars.len()];
    let _ = sp_index_check();
    Ok(StagedNc {
        nc,
        vars,
        queues,
        streams,
        infer_rings,
        err_ring,
        one,
        kick_off,
        model_sems,
        dge_core,
        q7_core,
        ucode,
        dev: dev.clone(),
        raw: Vec::with_capacity(RING_RECORDS as usize),
        bind,
        dma_only,
    })
}

/// Stage the graph's ucode libraries on Q7 pool core 0 of `nc`.
fn stage_ucode(
    dev: &Device,
    g: &Graph,
    nc: usize,
) -> Result<(Option<hal::q7::UcodeCore>, Vec<hal::q7::LoadableLib>), StageError> {
    use csr_maps::formats::ucpl::UcplHeader;
    let libs: Vec<&neff::UcodeLib> = g.ucode_libs.iter().filter(|l| l.content.is_some()).collect();
    if libs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let ucode_err = |name: &str, e: hal::q7::UcodeError| {
        let status =
            if e.code == csr_maps::consts::q7::ERR_TOO_LARGE { NrtStatus::Resource } else { NrtStatus::Invalid };
        StageError { status, message: format!("ucode library {name}: {e}") }
    };
    let ctx = hal::q7::UcodeContext::new(csr_maps::consts::q7::API_LEVEL).map_err(|e| ucode_err("context", e))?;
    let mut core = hal::q7::UcodeCore::new(&ctx, dev, nc, hal::q7::CoreKind::Q7Pool { core: 0 })
        .map_err(|e| ucode_err("core", e))?;
    core.on_ucode_booted()
        .map_err(|e| StageError { status: NrtStatus::Resource, message: format!("NC {nc} Q7 pool core 0: {e}") })?;
    let mut staged = Vec::new();
    for l in libs {
        let Some(content) = &l.content else { continue };
        let bytes: &[u8] = content.as_ref();
        if UcplHeader::decode(bytes).is_err() {
            return Err(StageError::invalid(format!(
                "ucode library {}: not a prelinked UCPL image (prelinking Xtensa ELF objects is not supported; ship the prelinked image)",
                l.name
            )));
        }
        let ll = match hal::q7::LoadableLib::create(&ctx, dev, nc, &l.name, bytes) {
            Ok(ll) => ll,
            Err(hal::HalError::Ucode(e)) => return Err(ucode_err(&l.name, e)),
            Err(e) => return Err(e.into()),
        };
        core.attach(&ll).map_err(|e| ucode_err(&l.name, e))?;
        staged.push(ll);
    }
    Ok((Some(core), staged))
}

const fn sp_index_check() -> usize {
    assert!(SP == ENGINES.len() - 1);
    SP
}

/// Var id, offset, length, context → relocated device address.
type AddrOf<'a> = dyn Fn(u32, u64, u64, &str) -> Result<u64, StageError> + 'a;

#[allow(clippy::too_many_arguments)]
fn lower(
    dev: &Device,
    regs: &csr_maps::Regs<'_>,
    g: &Graph,
    p: &GraphPlacement,
    i: &Instruction,
    pc: usize,
    engine: &str,
    queues: &[StagedQueue],
    trig_count: &mut [usize],
    addr_of: &AddrOf<'_>,
    out: &mut Vec<[u8; SLOT_BYTES]>,
) -> Result<(), StageError> {
    let what = format!("{engine} slot {pc}");
    let mut clear = |mut b: [u8; SLOT_BYTES]| {
        b[2] &= !(TraceMode::Both as u8); // trace bits belong to the runtime's preamble/postamble
        out.push(b);
    };
    match i {
        Instruction::DmaTrigger(t) => {
            let name = t.queue();
            let qi = queues
                .iter()
                .position(|q| q.name == name)
                .ok_or_else(|| StageError::invalid(format!("{what}: unknown DMA queue {name}")))?;
            let q = &queues[qi];
            let k = trig_count[qi];
            trig_count[qi] += 1;
            let b = q
                .order
                .get(k)
                .copied()
                .ok_or_else(|| StageError::invalid(format!("{what}: trigger order mismatch")))?;
            let pairs = q.blocks[b].pairs;
            let (s2m, m2s) = q.ring.doorbell_dev_addrs(regs)?;
            let wait = Events { update_mode: UpdateMode::None, update_idx: 0, ..t.events };
            let update = Events { wait_mode: WaitMode::None, wait_idx: 0, ..t.events };
            clear(WriteOp::new(wait, s2m, pairs).encode());
            clear(WriteOp::new(update, m2s, pairs).encode());
        }
        Instruction::TriggerCollective(c) => {
            let es = device_ops::dtype::size(c.dtype)
                .ok_or_else(|| StageError::invalid(format!("{what}: collective dtype {:#x} unsupported", c.dtype)))?
                as u64;
            let bytes = c
                .num_elements
                .checked_mul(es)
                .ok_or_else(|| StageError::invalid(format!("{what}: element count overflows")))?;
            let src = addr_of(c.input_tensor_id, c.src_offset_elems.saturating_mul(es), bytes, &what)?;
            let dst = addr_of(c.output_tensor_id, c.dst_offset_elems.saturating_mul(es), bytes, &what)?;
            let group = g.replica_groups.get(c.group_id as usize);
            let (rank, size) = match group {
                None => (0, 1),
                Some(gr) if gr.is_empty() => (0, 1),
                Some(gr) => {
                    let r = gr.iter().position(|&x| x as usize == p.rank).ok_or_else(|| {
                        StageError::invalid(format!("{what}: graph {} is not in replica group {:?}", p.rank, gr))
                    })?;
                    (r, gr.len())
                }
            };
            if size > u8::MAX as usize {
                return Err(StageError::invalid(format!("{what}: replica group of {size}")));
            }
            let op = CollectiveOp {
                header: isa::slot::SlotHeader::new(Opcode::Sb2sbCollective),
                events: c.events,
                op: c.op,
                dtype: c.dtype,
                ctype: c.ctype,
                rank: rank as u8,
                group_size: size as u8,
                comm_id: p.comm_id.wrapping_mul(256).wrapping_add(c.group_id as u32),
                src,
                dst,
                num_elements: c.num_elements,
            };
            clear(op.encode());
        }
        Instruction::PseudoDmaDirect2d(d) | Instruction::DmaMemcpy(d) => {
            if matches!(i, Instruction::PseudoDmaDirect2d(_)) && d.op != 0 {
                return Err(StageError::invalid(format!("{what}: DGE op {} is not supported (DIRECT2D only)", d.op)));
            }
            let reloc = |l: &Dma2dLeg| -> Result<Dma2dLeg, StageError> {
                if l.start_addr & addr8::VAR_MARKER == 0 {
                    return Ok(*l);
                }
                let id = ((l.start_addr >> addr8::VAR_ID_SHIFT) & addr8::VAR_ID_MASK) as u32;
                let off = l.start_addr & addr8::OFFSET_MASK;
                let es = if l.elem_size == 0 { 65536 } else { l.elem_size as u64 };
                let span = leg_span(l, es);
                let a = addr_of(id, off, span, &what)?;
                Ok(Dma2dLeg { start_addr: a, ..*l })
            };
            let low = Dma2d {
                header: isa::slot::SlotHeader::new(Opcode::DmaMemcpy),
                events: d.events,
                op: if matches!(i, Instruction::PseudoDmaDirect2d(_)) { 0 } else { d.op },
                src: reloc(&d.src)?,
                dst: reloc(&d.dst)?,
                ..*d
            };
            clear(low.encode());
        }
        Instruction::EventSemaphore(_)
        | Instruction::Nop(_)
        | Instruction::Notify(_)
        | Instruction::Write(_)
        | Instruction::Semaphore(_)
        | Instruction::ExtendedInst(_) => clear(i.encode()),
        Instruction::Raw { header, .. } => {
            return Err(StageError::invalid(format!(
                "{what}: Unsupported hardware operator code {:#04x}",
                header.opcode
            )));
        }
    }
    let _ = dev;
    Ok(())
}

/// Bytes from the start of a 2-D leg to the end of its last element (non-negative steps).
fn leg_span(l: &Dma2dLeg, es: u64) -> u64 {
    let last = |n: u16, s: i32| (n.saturating_sub(1) as i64 * s as i64).max(0) as u64;
    (last(l.num_elem[0], l.step_elem[0]) + last(l.num_elem[1], l.step_elem[1]) + 1) * es
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_patterns_to_runs() {
        // The fixture: sizes [128, 1], steps [1, 128] → one 128-byte run.
        assert_eq!(runs(&[128, 1], &[1, 128], "t").unwrap(), vec![(0, 128)]);
        // Strided rows: 4 rows of 16 bytes, 64 apart.
        assert_eq!(runs(&[16, 4], &[1, 64], "t").unwrap(), vec![(0, 16), (64, 16), (128, 16), (192, 16)]);
        // Rows that abut coalesce.
        assert_eq!(runs(&[16, 4], &[1, 16], "t").unwrap(), vec![(0, 64)]);
        // Element-strided: 3 single bytes 2 apart.
        assert_eq!(runs(&[3], &[2], "t").unwrap(), vec![(0, 1), (2, 1), (4, 1)]);
        assert!(runs(&[0], &[1], "t").is_err());
        assert!(runs(&[4, 4], &[1], "t").is_err());
        assert!(runs(&[1 << 30, 1 << 30], &[1, 1], "t").is_err());
    }
}
