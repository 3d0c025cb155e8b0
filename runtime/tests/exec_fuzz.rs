//! The execute path fuzzed as a whole: a structure-aware mutator of NEFFs — manifests (graphs,
//! vars, queues, replica groups), programs (collective fields, events, slots removed,
//! duplicated, swapped, inserted fresh — NOTIFY, WRITE, DMAMEMCPY, events-only and unknown
//! opcodes — or with a field, a header byte or the opcode changed), DMA blocks, edits of the
//! built members (JSON numbers and strings, program slots), and the tar structure (members
//! dropped, duplicated, reordered, cut or edited; the archive cut at any offset) — driving
//! parse → load → execute → unload on the simulator next to a victim model, with a watchdog.
//!
//! Each case must end in a refusal at load or in an execution that returns within its
//! timeout; nothing may panic; nothing may escape: the device's ownership region table must
//! refuse no access of a model the loader accepted, an accepted model's execution must not
//! end out of bounds, the victim's tensor and its next run must be intact, and device memory
//! and IOMMU mappings must come back to the baseline after the unload. A case over its time
//! limit, a panic or an escape is saved as a regression fixture (`EXEC_FUZZ_SAVE`, default
//! `target/exec-fuzz/`; move it to `runtime/tests/fixtures/exec/`, which
//! [`fixtures_stay_fixed`] replays) and fails the test.
//!
//! CI runs a bounded sample (`EXEC_FUZZ_CASES`, default 1500; `EXEC_FUZZ_THREADS` workers,
//! default 2, each on a device of its own; `EXEC_FUZZ_ARCH`, default `cayman`: the arch the
//! cases are built for and run on — `sunda`, `cayman` or `mariana`). The long run
//! (docs/trust.md, "Mutation testing"):
//!
//! ```text
//! EXEC_FUZZ_CASES=1000000 EXEC_FUZZ_SEED=1 EXEC_FUZZ_ARCH=sunda cargo test --release -p runtime --test exec_fuzz -- --nocapture
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csr_maps::consts::addr8;
use csr_maps::formats::notify::custom;
use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use isa::device_ops::{NotifyOp, WriteOp};
use isa::slot::{
    Dma2d, Dma2dLeg, Events, EventsOnly, Instruction, Opcode, SlotHeader, UpdateMode, WaitMode, SLOT_BYTES,
};
use neff::builder::{self, Body, ModelDesc, VarDesc, WriteOptions};
use neff::{Engine, VarKind};
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, SimTopology, Timing};

/// The core timeout of every case's execution.
const EXEC_TIMEOUT: Duration = Duration::from_millis(20);
/// A case running longer than this is a hang (load + execute + unload of a small model take
/// milliseconds and the timeout above bounds the execute; the margin is for a run starved of
/// CPU — replay a flagged case alone before calling it a hang).
const CASE_LIMIT: Duration = Duration::from_secs(60);
/// The first NC a case loads at (NC 0 holds the victim). Four-graph models need NCs 2..=5.
const CASE_NC: usize = 2;
/// NCs a bench's runtime has at least (over one device, or several of a small arch).
const BENCH_NCS: usize = 8;

/// The arch of `EXEC_FUZZ_ARCH` (default `cayman`).
fn arch_from_env() -> &'static Arch {
    let name = std::env::var("EXEC_FUZZ_ARCH").unwrap_or_else(|_| CAYMAN.name.to_string());
    [&SUNDA, &CAYMAN, &MARIANA]
        .into_iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("EXEC_FUZZ_ARCH={name}: not sunda, cayman or mariana"))
}

/// xorshift64*: deterministic, seeded per case.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
    /// A value biased to the edges: 0, 1, small, powers of two ± 1, the type's maximum.
    fn edgy(&mut self, max: u64) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => 1,
            2 => self.next() % 64,
            3 => (1u64 << self.below(64)).min(max),
            4 => (1u64 << self.below(64)).wrapping_sub(1).min(max),
            _ => max,
        }
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// A base model for `arch`: the all-reduce shapes on 1, 2 or 4 NCs, or one with a weight.
fn base(rng: &mut Rng, arch: &Arch) -> ModelDesc {
    let mut d = match rng.below(4) {
        0 => builder::allreduce_model(1),
        1 => builder::allreduce_model(2),
        2 => builder::allreduce_model(4),
        _ => builder::weights_model(vec![7u8; 4096], neff::WeightFormat::Raw),
    };
    d.target = arch.name.to_string();
    d
}

fn slots(code: &[u8]) -> usize {
    code.len() / SLOT_BYTES
}

fn slot(code: &[u8], k: usize) -> Instruction {
    let mut b = [0u8; SLOT_BYTES];
    b.copy_from_slice(&code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES]);
    Instruction::decode(&b)
}

fn set_slot(code: &mut [u8], k: usize, i: &Instruction) {
    code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES].copy_from_slice(&i.encode());
}

fn events(rng: &mut Rng, e: &mut Events) {
    match rng.below(4) {
        0 => e.wait_idx = rng.below(32) as u8,
        1 => e.semaphore_value = rng.edgy(u32::MAX as u64) as u32,
        2 => e.wait_mode = if rng.chance(2) { WaitMode::None } else { e.wait_mode },
        _ => {
            e.update_idx = rng.below(32) as u8;
            if rng.chance(3) {
                e.update_mode = UpdateMode::None;
            }
        }
    }
}

/// The opcodes the loader lowers or passes (and, now and then, one it refuses): what a slot's
/// opcode byte is changed to, so its payload is read as another instruction's.
const OPCODES: [u8; 14] = [0xC1, 0xC8, 0xA0, 0xB8, 0xD4, 0x68, 0x6A, 0xA6, 0x69, 0x61, 0x62, 0x63, 0x65, 0xF0];

fn opcode(rng: &mut Rng) -> u8 {
    if rng.chance(8) {
        rng.next() as u8
    } else {
        rng.pick(&OPCODES)
    }
}

/// Events for a fresh slot: mostly none (so the slot runs), else a wait or an update on a
/// model semaphore, the runtime's reserved ones included.
fn fresh_events(rng: &mut Rng) -> Events {
    let mut e = Events::NONE;
    if rng.chance(3) {
        events(rng, &mut e);
        if rng.chance(2) {
            e.wait_mode = rng.pick(&[WaitMode::GtImm, WaitMode::GeImm, WaitMode::EqImm]);
        }
        if rng.chance(8) {
            e.wait_idx = 250 + rng.below(6) as u8;
        }
    }
    e
}

/// A custom-notification sub-id: every class libnrt decodes (out-of-bounds reports 0..=5,
/// 9, 10; debug, tensor completion, debug-tensor read 6..=8), unknown ones, the edges.
fn sub_id(rng: &mut Rng) -> u16 {
    match rng.below(4) {
        0 | 1 => rng.below(12) as u16,
        2 => 6 + rng.below(3) as u16,
        _ => rng.edgy(u16::MAX as u64) as u16,
    }
}

/// A register a WRITE may aim at: a semaphore window of some NC (the case's own among them),
/// a reserved semaphore, a reset or DMA base register, or a raw address.
fn write_target(rng: &mut Rng, arch: &Arch) -> u64 {
    let nc = rng.below(arch.counts.ncs as usize);
    let path = match rng.below(4) {
        0 | 1 => {
            let win = rng.pick(&["sem_set", "sem_inc", "sem_dec"]);
            let s = if rng.chance(4) { 250 + rng.below(6) } else { rng.below(256) };
            format!("tpb_sem[{nc}].{win}[{s}]")
        }
        2 => rng.pick(&["misc_ram.reset_request", "udma[0].m2s.q[0].ring_base_lo"]).to_string(),
        _ => return rng.edgy(u64::MAX),
    };
    arch.resolve(&path).ok().and_then(|r| arch.bar0_to_dev(r.offset)).unwrap_or_else(|| rng.edgy(u64::MAX))
}

/// A DMAMEMCPY / DIRECT2D leg: mostly a var address (a var id of the graph or past it, an
/// offset), else a raw address; steps of both signs; counts and element sizes at the edges.
fn fresh_leg(rng: &mut Rng, vars: usize) -> Dma2dLeg {
    let start_addr = if rng.chance(4) {
        rng.edgy(u64::MAX)
    } else {
        addr8::VAR_MARKER | ((rng.below(vars + 2) as u64) << addr8::VAR_ID_SHIFT) | rng.edgy(1 << 12)
    };
    let step =
        |rng: &mut Rng| if rng.chance(2) { rng.below(5) as i32 - 2 } else { rng.edgy(1 << 20) as i32 - (1 << 19) };
    Dma2dLeg {
        start_addr,
        step_elem: [step(rng), step(rng)],
        num_elem: [rng.edgy(300) as u16, rng.below(3) as u16],
        elem_size: rng.pick(&[0, 1, 2, 4, 128, u16::MAX]),
    }
}

/// A fresh slot of any kind the loader knows, or of one it does not.
fn fresh(rng: &mut Rng, arch: &Arch, vars: usize) -> [u8; SLOT_BYTES] {
    let ev = fresh_events(rng);
    match rng.below(6) {
        0 | 1 => {
            let mut n = NotifyOp::new(ev, sub_id(rng), rng.edgy(u32::MAX as u64) as u32);
            if rng.chance(2) {
                n.header = SlotHeader::new(Opcode::SeqNotify);
            }
            n.encode()
        }
        2 => WriteOp::new(ev, write_target(rng, arch), rng.edgy(u32::MAX as u64) as u32).encode(),
        3 => {
            let mut d = Dma2d::decode(&[0u8; SLOT_BYTES]);
            d.header = SlotHeader::new(if rng.chance(2) { Opcode::DmaMemcpy } else { Opcode::PseudoDmaDirect2d });
            d.events = ev;
            d.op = if rng.chance(4) { rng.below(5) as u8 } else { 0 };
            d.src = fresh_leg(rng, vars);
            d.dst = fresh_leg(rng, vars);
            if rng.chance(3) {
                d.sem_increment = rng.edgy(u8::MAX as u64) as u8;
                d.semaphore = rng.next() as u8;
            }
            Instruction::DmaMemcpy(d).encode()
        }
        4 => {
            let op = rng.pick(&[
                Opcode::EventSemaphore,
                Opcode::Nop,
                Opcode::EventWait,
                Opcode::EventSet,
                Opcode::EventClear,
                Opcode::SemaphoreTestAndSet,
                Opcode::ExtendedInst,
            ]);
            EventsOnly::new(op, ev).encode()
        }
        _ => {
            let mut b = [0u8; SLOT_BYTES];
            b.iter_mut().for_each(|x| *x = if rng.chance(2) { 0 } else { rng.next() as u8 });
            b[0] = opcode(rng);
            b[1] = 0x10;
            b
        }
    }
}

/// One edit of slot `k`'s bytes, after or before the builder: its opcode (the payload read as
/// another instruction's), a header byte (length, trace and halt bits, hint), an events byte,
/// a payload field set to an edge value, or the whole slot replaced by a fresh one.
fn edit_slot(rng: &mut Rng, arch: &Arch, vars: usize, b: &mut [u8]) {
    match rng.below(5) {
        0 => b[0] = opcode(rng),
        1 => {
            let any = rng.next() as u8;
            b[1 + rng.below(3)] = rng.pick(&[0, 0x10, 0x80, 0x83, any]);
        }
        2 => {
            let any = rng.next() as u8;
            b[4 + rng.below(8)] = rng.pick(&[0, 1, 4, 5, 0x13, 0x14, 249, 250, 255, any]);
        }
        3 => {
            let w = rng.pick(&[2usize, 4, 8]);
            let at = 12 + rng.below((SLOT_BYTES - 12) / w) * w;
            let v = rng.edgy(u64::MAX).to_le_bytes();
            b[at..at + w].copy_from_slice(&v[..w]);
        }
        _ => b.copy_from_slice(&fresh(rng, arch, vars)),
    }
}

/// One mutation of a program: a slot removed, duplicated, swapped, inserted fresh, its bytes
/// edited, or a field of it changed.
fn mutate_program(rng: &mut Rng, arch: &Arch, vars: usize, code: &mut Vec<u8>) {
    let n = slots(code);
    if n == 0 || rng.chance(8) {
        // A fresh slot anywhere (an empty program gets one too).
        let at = rng.below(n + 1) * SLOT_BYTES;
        code.splice(at..at, fresh(rng, arch, vars));
        return;
    }
    let k = rng.below(n);
    match rng.below(8) {
        0 => {
            code.drain(k * SLOT_BYTES..(k + 1) * SLOT_BYTES);
        }
        1 => {
            let s: Vec<u8> = code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES].to_vec();
            let at = rng.below(n + 1) * SLOT_BYTES;
            code.splice(at..at, s);
        }
        2 => {
            let j = rng.below(n);
            let (a, b) = (slot(code, k), slot(code, j));
            set_slot(code, k, &b);
            set_slot(code, j, &a);
        }
        3 => {
            // A raw byte past the header: any field of any slot kind.
            let at = k * SLOT_BYTES + 4 + rng.below(SLOT_BYTES - 4);
            code[at] = rng.next() as u8;
        }
        4 => edit_slot(rng, arch, vars, &mut code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES]),
        _ => {
            let mut i = slot(code, k);
            match &mut i {
                Instruction::TriggerCollective(c) => match rng.below(8) {
                    0 => c.group_id = rng.below(4) as u16,
                    1 => c.num_elements = rng.edgy(u64::MAX),
                    2 => c.dtype = [0x06, 0x07, 0x08, 0x0A, 0x0E, 0x0F, rng.next() as u8][rng.below(7)],
                    3 => c.op = [0x04, 0x08, rng.next() as u8][rng.below(3)],
                    4 => c.ctype = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, rng.next() as u8][rng.below(7)],
                    5 => c.input_tensor_id = rng.below(8) as u32,
                    6 => c.src_offset_elems = rng.edgy(u64::MAX),
                    _ => events(rng, &mut c.events),
                },
                Instruction::DmaTrigger(t) => events(rng, &mut t.events),
                Instruction::DmaMemcpy(d) | Instruction::PseudoDmaDirect2d(d) => match rng.below(4) {
                    0 => d.src = fresh_leg(rng, vars),
                    1 => d.dst = fresh_leg(rng, vars),
                    2 => d.semaphore = rng.next() as u8,
                    _ => events(rng, &mut d.events),
                },
                Instruction::Notify(_) => {
                    let mut nt = NotifyOp::decode(&i.encode());
                    if rng.chance(2) {
                        nt.sub_id = sub_id(rng);
                    } else {
                        nt.value = rng.edgy(u32::MAX as u64) as u32;
                    }
                    let op = i.opcode();
                    let mut b = nt.encode();
                    b[0] = op.code();
                    i = Instruction::decode(&b);
                }
                Instruction::Write(_) => {
                    let mut w = WriteOp::decode(&i.encode());
                    w.addr = write_target(rng, arch);
                    i = Instruction::decode(&w.encode());
                }
                Instruction::EventSemaphore(e)
                | Instruction::Nop(e)
                | Instruction::Semaphore(e)
                | Instruction::ExtendedInst(e) => events(rng, &mut e.events),
                Instruction::Raw { .. } => {}
            }
            set_slot(code, k, &i);
        }
    }
}

/// One mutation of the model description.
fn mutate_model(rng: &mut Rng, arch: &Arch, d: &mut ModelDesc) {
    let gn = d.graphs.len();
    let gi = rng.below(gn);
    match rng.below(10) {
        0 => {
            // Replica groups: random members (some outside, some twice), or none.
            let groups: Vec<Vec<u32>> =
                (0..1 + rng.below(2)).map(|_| (0..rng.below(5)).map(|_| rng.below(6) as u32).collect()).collect();
            if rng.chance(2) {
                d.graphs.iter_mut().for_each(|g| g.replica_groups = groups.clone());
            } else {
                d.graphs[gi].replica_groups = groups;
            }
        }
        1 => {
            let g = &mut d.graphs[gi];
            let k = rng.below(g.vars.len());
            if let Some(v) = g.vars.get_mut(k) {
                v.size = rng.edgy(1 << 40);
            }
        }
        2 => {
            let g = &mut d.graphs[gi];
            let kinds = [VarKind::Input, VarKind::Output, VarKind::TmpBuf, VarKind::StateBuffer, VarKind::Virtual];
            if rng.chance(2) {
                let k = rng.below(g.vars.len());
                if let Some(v) = g.vars.get_mut(k) {
                    v.kind = kinds[rng.below(kinds.len())];
                }
            } else {
                let n = g.vars.len();
                g.vars.push(VarDesc::new(&format!("f{n}"), kinds[rng.below(kinds.len())], rng.edgy(1 << 24)));
            }
        }
        3 => {
            let g = &mut d.graphs[gi];
            if !g.vars.is_empty() {
                g.vars.remove(rng.below(g.vars.len()));
            }
        }
        4 => {
            // DMA blocks: a descriptor's size or endpoints, or a block dropped.
            let g = &mut d.graphs[gi];
            let names: Vec<String> = g.vars.iter().map(|v| v.name.clone()).collect();
            if let Some(e) = g.engines.iter_mut().find(|e| !e.dma_blocks.is_empty()) {
                let b = rng.below(e.dma_blocks.len());
                if rng.chance(4) {
                    e.dma_blocks.remove(b);
                } else if let Some(desc) = e.dma_blocks[b].descs.first_mut() {
                    match rng.below(3) {
                        0 => desc.from_sizes = vec![rng.edgy(1 << 33)],
                        1 => desc.to = names.get(rng.below(names.len())).cloned().unwrap_or_default(),
                        _ => desc.from_steps = vec![rng.edgy(1 << 20) as i64 - (1 << 19)],
                    }
                }
            }
        }
        5 => {
            let g = &mut d.graphs[gi];
            let k = rng.below(g.queues.len());
            if let Some(q) = g.queues.get_mut(k) {
                if rng.chance(2) {
                    q.semaphore = Some(rng.below(40) as u32);
                } else {
                    q.owner = Engine::ALL[rng.below(5)];
                }
            }
        }
        6 if gn > 1 => {
            d.graphs.remove(gi);
        }
        7 if gn < 4 => {
            let mut g = d.graphs[gi].clone();
            g.name = format!("sg{gn:02}");
            d.graphs.push(g);
        }
        8 => {
            let g = &mut d.graphs[gi];
            if !g.engines.is_empty() {
                let e = rng.below(g.engines.len());
                if rng.chance(3) {
                    g.engines[e].code.clear();
                } else {
                    g.engines.remove(e);
                }
            }
        }
        _ => {
            let g = &mut d.graphs[gi];
            let vars = g.vars.len();
            if !g.engines.is_empty() {
                let e = rng.below(g.engines.len());
                mutate_program(rng, arch, vars, &mut g.engines[e].code);
            }
        }
    }
}

/// The NEFF of a mutated description for `arch`, then perhaps edits of the built members
/// (JSON tokens, program slots) and a mutation of its tar structure.
fn case_bytes(seed: u64, arch: &Arch) -> Option<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut d = base(&mut rng, arch);
    for _ in 0..1 + rng.below(4) {
        mutate_model(&mut rng, arch, &mut d);
    }
    // Fast compression: the cases are small and many.
    let opts = WriteOptions { level: 1, ..WriteOptions::default() };
    let edit_members = rng.chance(3);
    let edit_tar = rng.chance(4);
    if !edit_members && !edit_tar {
        return d.to_bytes(&opts).ok();
    }
    let mut members: Vec<(String, Body<'_>)> = d.members();
    if edit_members {
        let vars = d.graphs.iter().map(|g| g.vars.len()).max().unwrap_or(0);
        for _ in 0..1 + rng.below(3) {
            edit_member(&mut rng, arch, vars, &mut members);
        }
    }
    if !edit_tar {
        return builder::pack(&members, d.header(), &opts).ok();
    }
    let n = members.len();
    match rng.below(6) {
        0 if n > 1 => {
            members.remove(rng.below(n));
        }
        1 => {
            let k = rng.below(n);
            let (name, body) = &members[k];
            let dup = (name.clone(), Body::Owned(body_bytes(body)));
            members.insert(rng.below(n + 1), dup);
        }
        2 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            members.swap(a, b);
        }
        3 => {
            // A member's body cut or one byte of it changed (JSON, programs, weights).
            let k = rng.below(n);
            let mut b = body_bytes(&members[k].1);
            if !b.is_empty() {
                if rng.chance(2) {
                    b.truncate(rng.below(b.len()));
                } else {
                    let at = rng.below(b.len());
                    b[at] = rng.next() as u8;
                }
            }
            members[k].1 = Body::Owned(b);
        }
        _ => {
            // The archive itself cut: at a block boundary (a member's end) or anywhere.
            let mut tar = builder::tar_bytes(&members, &opts).ok()?;
            let cut = if rng.chance(2) { rng.below(tar.len() / 512 + 1) * 512 } else { rng.below(tar.len() + 1) };
            tar.truncate(cut);
            return builder::wrap_archive(&tar, d.header(), &opts).ok();
        }
    }
    builder::pack(&members, d.header(), &opts).ok()
}

/// One edit of a built member, as a producer's bug or a hand edit would make it, past
/// everything the description can say: a program's slot bytes (`.bin`: an opcode, a header
/// byte, an events byte, a payload field, a slot replaced or inserted), a JSON member's
/// tokens (a number set to an edge value or out of every range, a string — a name, a kind,
/// a key — replaced by another of the member's or a word of the format's), any other byte.
fn edit_member(rng: &mut Rng, arch: &Arch, vars: usize, members: &mut [(String, Body<'_>)]) {
    let files: Vec<usize> = (0..members.len()).filter(|&k| !members[k].0.ends_with('/')).collect();
    if files.is_empty() {
        return;
    }
    // Programs and JSON members first: that is where the structure is.
    let bins: Vec<usize> = files.iter().copied().filter(|&k| members[k].0.ends_with(".bin")).collect();
    let k = if !bins.is_empty() && rng.chance(2) { rng.pick(&bins) } else { rng.pick(&files) };
    let name = members[k].0.clone();
    let mut b = body_bytes(&members[k].1);
    if name.ends_with(".bin") && name != "sp.bin" && !name.ends_with("/sp.bin") {
        let n = slots(&b);
        if n == 0 || rng.chance(6) {
            let at = rng.below(n + 1) * SLOT_BYTES;
            b.splice(at..at, fresh(rng, arch, vars));
        } else {
            let s = rng.below(n) * SLOT_BYTES;
            edit_slot(rng, arch, vars, &mut b[s..s + SLOT_BYTES]);
        }
    } else if name.ends_with(".json") {
        edit_json(rng, &mut b);
    } else if !b.is_empty() {
        let at = rng.below(b.len());
        b[at] = rng.next() as u8;
    }
    members[k].1 = Body::Owned(b);
}

/// The number tokens and the string tokens (their contents, without the quotes) of a JSON
/// text; a lexer that never fails (an unterminated string runs to the end).
fn json_tokens(b: &[u8]) -> (Vec<Range<usize>>, Vec<Range<usize>>) {
    let (mut nums, mut strs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let s = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                strs.push(s..i.min(b.len()));
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let s = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                nums.push(s..i);
            }
            _ => i += 1,
        }
    }
    (nums, strs)
}

/// Words of the NEFF's JSON vocabulary a string may become.
const WORDS: [&str; 16] = [
    "",
    "input",
    "output",
    "tmp-buf",
    "state-buffer",
    "virtual",
    "file",
    "in",
    "out",
    "pe",
    "act",
    "pool",
    "dve",
    "sp",
    "float32",
    "sg00/def.json",
];

/// One token-level edit of a JSON member.
fn edit_json(rng: &mut Rng, b: &mut Vec<u8>) {
    let (nums, strs) = json_tokens(b);
    let number = |rng: &mut Rng| -> String {
        match rng.below(6) {
            0 => format!("-{}", rng.edgy(u64::MAX)),
            1 => "18446744073709551616".to_string(),
            2 => rng.pick(&["1e308", "0.5", "-0", "1e-9"]).to_string(),
            _ => rng.edgy(u64::MAX).to_string(),
        }
    };
    if !nums.is_empty() && (strs.is_empty() || rng.chance(2)) {
        let r = nums[rng.below(nums.len())].clone();
        let v = if rng.chance(3) {
            // Near its value: off by one either way.
            let old: i128 = std::str::from_utf8(&b[r.clone()]).ok().and_then(|t| t.parse().ok()).unwrap_or(0);
            (old + if rng.chance(2) { 1 } else { -1 }).to_string()
        } else {
            number(rng)
        };
        b.splice(r, v.into_bytes());
    } else if !strs.is_empty() {
        let r = strs[rng.below(strs.len())].clone();
        let v: Vec<u8> = if rng.chance(2) {
            let o = strs[rng.below(strs.len())].clone();
            b[o].to_vec()
        } else {
            rng.pick(&WORDS).as_bytes().to_vec()
        };
        b.splice(r, v);
    }
}

fn body_bytes(b: &Body<'_>) -> Vec<u8> {
    match b {
        Body::Owned(v) => v.clone(),
        Body::Borrowed(s) => s.to_vec(),
        Body::Prefixed(h, s) => [h.as_slice(), s].concat(),
    }
}

/// The runtime a worker runs its cases on: simulated devices of one arch with at least
/// [`BENCH_NCS`] NCs between them (one device, or a topology of several of a small arch), a
/// victim model on NC 0 with a patterned tensor beside it.
struct Bench {
    sims: Vec<SimDevice>,
    rt: Runtime,
    victim: ModelHandle,
    victim_out: Vec<u8>,
    pattern: Vec<u8>,
    tensor: Arc<runtime::Tensor>,
    baseline: (u64, i64),
}

/// The region table refusals, IOMMU mappings and device bytes of every device.
fn totals(sims: &[SimDevice]) -> (u64, u64, i64) {
    sims.iter()
        .map(|s| s.stats())
        .fold((0, 0, 0), |(o, m, b), st| (o + st.oob_refused, m + st.iommu_mappings, b + st.device_bytes))
}

impl Bench {
    fn new(arch: &'static Arch) -> Self {
        let cfg = SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 30);
        let devices = BENCH_NCS.div_ceil((arch.counts.ncs as usize).max(1));
        let sims = if devices > 1 {
            SimTopology::new(cfg, devices).unwrap().devices
        } else {
            vec![SimDevice::new(cfg).unwrap()]
        };
        let rt = Runtime::new();
        let rcfg = RuntimeConfig { exec_timeout: EXEC_TIMEOUT, ..RuntimeConfig::physical() };
        let opts =
            hal::DeviceOptions { hbm_limit: Some(1 << 30), poll: hal::fwio::PollTiming::fast(), ..Default::default() };
        rt.init(sims.iter().map(|s| Arc::new(s.clone()) as Arc<dyn Platform>).collect(), rcfg, opts).unwrap();
        let mut v = builder::allreduce_model(1);
        v.target = arch.name.to_string();
        let built = v.build().unwrap();
        // Each further device once warmed by a model loaded, run and unloaded there: what the
        // runtime keeps of a device's first use (its host pool chunk) is part of the baseline.
        for d in 1..sims.len() {
            let nc = d * arch.counts.ncs as usize;
            let m = rt.load(&built, Some(nc), None).unwrap();
            run(&rt, &m).expect("the warm-up model runs");
            rt.unload(&m).unwrap();
        }
        let victim = rt.load(&built, Some(0), None).unwrap();
        let victim_out = run(&rt, &victim).expect("the victim runs");
        let tensor = rt.alloc_tensor("victim", 4096, true, 0).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|k| (k * 7 + 3) as u8).collect();
        tensor.write(0, &pattern).unwrap();
        let (_, maps, bytes) = totals(&sims);
        Self { baseline: (maps, bytes), sims, rt, victim, victim_out, pattern, tensor }
    }

    /// One case; Err names an escape.
    fn case(&self, bytes: &[u8], tally: &Tally) -> Result<(), String> {
        let t = Instant::now();
        let loaded = self.rt.load(bytes, Some(CASE_NC), None);
        tally.ns_load.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let Ok(m) = loaded else {
            tally.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        tally.loaded.fetch_add(1, Ordering::Relaxed);
        let refused = totals(&self.sims).0;
        let t = Instant::now();
        let r = run(&self.rt, &m);
        tally.ns_exec.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let t = Instant::now();
        let checked = self.after(m, r, refused, tally);
        tally.ns_check.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        checked
    }

    fn after(&self, m: ModelHandle, r: Result<Vec<u8>, NrtStatus>, refused: u64, tally: &Tally) -> Result<(), String> {
        match &r {
            Ok(_) => {
                tally.ran_ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(s) => *platform::sync::lock(&tally.statuses).entry(format!("{s:?}")).or_insert(0) += 1,
        }
        if totals(&self.sims).0 != refused {
            return Err("the region table refused an access of an accepted model".into());
        }
        if r == Err(NrtStatus::ExecOob) {
            return Err("an accepted model's execution was out of bounds".into());
        }
        self.rt.unload(&m).map_err(|e| format!("unload: {e}"))?;
        let mut now = vec![0u8; self.pattern.len()];
        self.tensor.read(0, &mut now).map_err(|e| format!("victim tensor read: {e}"))?;
        if now != self.pattern {
            return Err("the victim's tensor changed".into());
        }
        if run(&self.rt, &self.victim).as_ref() != Ok(&self.victim_out) {
            return Err("the victim's next run differs".into());
        }
        let (_, maps, bytes) = totals(&self.sims);
        if (maps, bytes) != self.baseline {
            return Err(format!("device state not back to baseline: {:?} vs {:?}", (maps, bytes), self.baseline));
        }
        Ok(())
    }
}

/// Execute `m` once with every input zero-filled; the first output's bytes.
fn run(rt: &Runtime, m: &ModelHandle) -> Result<Vec<u8>, NrtStatus> {
    let nc = m.ncs.first().copied().unwrap_or(0);
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    for t in &m.inputs {
        let x = rt.alloc_tensor(&t.name, t.size.max(1), true, nc).map_err(|e| e.status)?;
        i.add(&t.name, x);
    }
    let mut first = None;
    for t in &m.outputs {
        let x = rt.alloc_tensor(&t.name, t.size.max(1), true, nc).map_err(|e| e.status)?;
        first.get_or_insert_with(|| x.clone());
        o.add(&t.name, x);
    }
    let (st, _) = rt.execute(m, &i, &o).map_err(|e| e.status)?;
    if st != NrtStatus::Success {
        return Err(st);
    }
    let mut out = Vec::new();
    if let Some(t) = first {
        out = vec![0u8; (t.size as usize).min(1 << 20)];
        t.read(0, &mut out).map_err(|e| e.status)?;
    }
    Ok(out)
}

#[derive(Default)]
struct Tally {
    /// Nanoseconds spent making cases, loading, executing, and in the unload and checks.
    ns_make: AtomicU64,
    ns_load: AtomicU64,
    ns_exec: AtomicU64,
    ns_check: AtomicU64,
    cases: AtomicU64,
    refused: AtomicU64,
    loaded: AtomicU64,
    ran_ok: AtomicU64,
    /// The statuses of executions that did not succeed, by name.
    statuses: Mutex<BTreeMap<String, u64>>,
}

fn save_dir() -> PathBuf {
    std::env::var_os("EXEC_FUZZ_SAVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/exec-fuzz"))
}

fn save(bytes: &[u8], seed: u64, why: &str) -> PathBuf {
    let dir = save_dir();
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("case-{seed:016x}.neff"));
    let _ = std::fs::write(&p, bytes);
    let _ = std::fs::write(p.with_extension("txt"), why);
    p
}

/// What the watchdog watches: the case in flight and when it began.
struct InFlight {
    seed: u64,
    bytes: Vec<u8>,
    since: Instant,
}

#[test]
fn load_execute_unload_never_hangs_panics_or_escapes() {
    let cases: u64 = std::env::var("EXEC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let seed0: u64 = std::env::var("EXEC_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    let arch = arch_from_env();
    // Workers, each with a device of its own, take every `threads`-th case (sleeps in the
    // device paths overlap).
    let threads: u64 = std::env::var("EXEC_FUZZ_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2).max(1);
    let tally = Arc::new(Tally::default());
    let flights: Arc<Vec<Mutex<Option<InFlight>>>> = Arc::new((0..threads).map(|_| Mutex::new(None)).collect());
    let running = Arc::new(AtomicU64::new(threads));
    let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|w| {
            let (tally, flights, running, failure) = (tally.clone(), flights.clone(), running.clone(), failure.clone());
            std::thread::spawn(move || {
                let mut bench = Bench::new(arch);
                let mut mine = 0u64;
                for k in (w..cases).step_by(threads as usize) {
                    if platform::sync::lock(&failure).is_some() {
                        break;
                    }
                    let seed = seed0.wrapping_mul(1_000_003).wrapping_add(k);
                    let t = Instant::now();
                    // Not in flight while it is made; a panic of the mutator itself fails the
                    // run (it would otherwise end the worker and look like a hang).
                    *platform::sync::lock(&flights[w as usize]) = None;
                    let made = std::panic::catch_unwind(|| case_bytes(seed, arch));
                    tally.ns_make.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    let made = match made {
                        Ok(m) => m,
                        Err(_) => {
                            *platform::sync::lock(&failure) = Some(format!("case {seed:#x}: the mutator panicked"));
                            break;
                        }
                    };
                    let Some(bytes) = made else { continue };
                    *platform::sync::lock(&flights[w as usize]) =
                        Some(InFlight { seed, bytes: bytes.clone(), since: Instant::now() });
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bench.case(&bytes, &tally)));
                    let why = match r {
                        Ok(Ok(())) => None,
                        Ok(Err(escape)) => Some(format!("escape: {escape}")),
                        Err(p) => Some(format!(
                            "panic: {}",
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        )),
                    };
                    if let Some(why) = why {
                        let p = save(&bytes, seed, &why);
                        let done = tally.cases.load(Ordering::Relaxed);
                        *platform::sync::lock(&failure) = Some(format!(
                            "case {seed:#x} (case {k} of the run, after {done} cases; {}): {why}",
                            p.display()
                        ));
                        break;
                    }
                    let n = tally.cases.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_multiple_of(100_000) {
                        eprintln!("exec_fuzz: {n} cases in {:.0} s", started.elapsed().as_secs_f64());
                    }
                    // A fresh device now and then: a long run also covers fresh-device paths.
                    mine += 1;
                    if mine.is_multiple_of(5_000) {
                        bench.rt.close().unwrap();
                        bench = Bench::new(arch);
                    }
                }
                *platform::sync::lock(&flights[w as usize]) = None;
                running.fetch_sub(1, Ordering::AcqRel);
            })
        })
        .collect();
    // The watchdog.
    while running.load(Ordering::Acquire) > 0 && platform::sync::lock(&failure).is_none() {
        std::thread::sleep(Duration::from_millis(50));
        for f in flights.iter() {
            let over = platform::sync::lock(f)
                .as_ref()
                .filter(|f| f.since.elapsed() > CASE_LIMIT)
                .map(|f| (f.seed, f.bytes.clone()));
            if let Some((seed, bytes)) = over {
                let p = save(&bytes, seed, &format!("hang: over {CASE_LIMIT:?}"));
                panic!("case {seed:#x} ran over {CASE_LIMIT:?}: saved as {}", p.display());
            }
        }
    }
    if let Some(f) = platform::sync::lock(&failure).take() {
        panic!("{arch}: {f}");
    }
    for w in workers {
        w.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let n = tally.cases.load(Ordering::Relaxed);
    eprintln!(
        "exec_fuzz: {arch}: {n} cases in {secs:.1} s ({:.0} cases/s): {} refused at load, {} loaded, {} ran to NRT_SUCCESS; 0 panics, 0 hangs, 0 escapes (0 out of bounds at execute)",
        n as f64 / secs,
        tally.refused.load(Ordering::Relaxed),
        tally.loaded.load(Ordering::Relaxed),
        tally.ran_ok.load(Ordering::Relaxed)
    );
    eprintln!("exec_fuzz: other execution statuses: {:?}", platform::sync::lock(&tally.statuses));
    let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6 / n.max(1) as f64;
    eprintln!(
        "exec_fuzz: per case {:.2} ms making, {:.2} ms loading, {:.2} ms executing, {:.2} ms unload and checks",
        ms(&tally.ns_make),
        ms(&tally.ns_load),
        ms(&tally.ns_exec),
        ms(&tally.ns_check)
    );
    // The mutator reaches both sides: refusals and models that load and run.
    assert!(tally.refused.load(Ordering::Relaxed) > 0 && tally.ran_ok.load(Ordering::Relaxed) > 0);
}

/// The arch a NEFF targets (cayman when it cannot be read: a fixture cut or edited before
/// its manifest gate is refused on any arch).
fn target_of(bytes: &[u8]) -> &'static Arch {
    let t = neff::Neff::parse(bytes, &neff::ReadOptions::default()).map(|n| n.kelf.target_str).unwrap_or_default();
    [&SUNDA, &CAYMAN, &MARIANA].into_iter().find(|a| a.name == t).unwrap_or(&CAYMAN)
}

/// Minimal reductions of fixtures, written by the project's NEFF builder, one per arch:
/// (name, the NEFF, what its refusal at load must say).
fn reductions() -> Vec<(String, Vec<u8>, &'static str)> {
    let mut out = Vec::new();
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        // exec-oob-accepted.neff reduced: the all-reduce model whose POOL program ends with
        // a SEQ_NOTIFY posting sub-id 0 (an out-of-bounds report) once the output is out.
        let mut d = builder::allreduce_model(1);
        d.target = arch.name.to_string();
        let pool = d.graphs[0].engines.iter_mut().find(|e| e.kind == Engine::Pool).unwrap();
        let mut n = NotifyOp::new(Events::wait_gt(builder::sems::OUT_DONE, 0), custom::OOB_EMBEDDING_TEXT, 0);
        n.header = SlotHeader::new(Opcode::SeqNotify);
        pool.code.extend_from_slice(&n.encode());
        let why = "pool slot 3: SEQ_NOTIFY field sub_id (+0x0C) is 0, an out-of-bounds report";
        out.push((format!("{arch}: notify-oob-sub-id-0 (builder)"), d.build().unwrap(), why));
        // The other side of the class: a sub-id libnrt does not know (NRT_HW_ERROR).
        let mut d = builder::allreduce_model(1);
        d.target = arch.name.to_string();
        let act = d.graphs[0].engines.iter_mut().find(|e| e.kind == Engine::Act).unwrap();
        act.code.extend_from_slice(&NotifyOp::new(Events::NONE, 11, 0).encode());
        let why = "act slot 0: NOTIFY field sub_id (+0x0C) is 11, a custom notification libnrt does not know";
        out.push((format!("{arch}: notify-unknown-sub-id (builder)"), d.build().unwrap(), why));
    }
    out
}

/// Every saved fixture (`runtime/tests/fixtures/exec/*.neff`) and every builder reduction is
/// refused at load or returns within its timeout, without an escape, on a bench of the arch
/// it targets. A fixture with a `.refusal` file beside it must be refused at load with a
/// message containing that file's text.
#[test]
fn fixtures_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exec");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "neff")).collect()
        })
        .unwrap_or_default();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    let mut cases: Vec<(String, Vec<u8>, Option<String>)> = files
        .iter()
        .map(|f| {
            let why = std::fs::read_to_string(f.with_extension("refusal")).ok().map(|s| s.trim().to_string());
            (f.display().to_string(), std::fs::read(f).unwrap(), why)
        })
        .collect();
    assert!(cases.iter().any(|c| c.2.is_some()), "no fixture names its refusal");
    cases.extend(reductions().into_iter().map(|(n, b, w)| (n, b, Some(w.to_string()))));
    let mut benches: BTreeMap<&'static str, Bench> = BTreeMap::new();
    let tally = Tally::default();
    for (name, bytes, why) in &cases {
        let arch = target_of(bytes);
        let bench = benches.entry(arch.name).or_insert_with(|| Bench::new(arch));
        if let Some(why) = why {
            match bench.rt.load(bytes, Some(CASE_NC), None) {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(why.as_str()), "{name}: refused with {msg:?}, which does not say {why:?}");
                }
                Ok(m) => {
                    let r = run(&bench.rt, &m);
                    bench.rt.unload(&m).unwrap();
                    panic!("{name}: loaded (its execution: {r:?}); it must be refused at load: {why}");
                }
            }
        }
        let t = Instant::now();
        bench.case(bytes, &tally).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(t.elapsed() < CASE_LIMIT, "{name}: {:?}", t.elapsed());
    }
}
