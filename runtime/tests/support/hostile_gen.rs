//! The hostile-class generator of `hostile_classes.rs` (structure-aware mutations of the
//! 1-NC all-reduce model: DMAMEMCPY/DIRECT2D legs with raw and var-relative addresses, WRITE
//! destinations, added vars of every kind and size), shared with `loader_agree.rs`.

use csr_maps::consts::addr8;
use csr_maps::SUNDA;
use isa::device_ops::WriteOp;
use isa::slot::{Dma2d, Dma2dLeg, Events, Instruction, Opcode, SlotHeader};
use neff::builder::{self, VarDesc};
use neff::{Engine, VarKind};
use proptest::prelude::*;

#[derive(Debug, Clone)]
pub enum Addr {
    Raw(u64),
    Var(u32, u64),
    Reg(usize),
}

#[derive(Debug, Clone)]
pub enum Op {
    Memcpy {
        src: (Addr, [i32; 2], [u16; 2], u16),
        dst: (Addr, [i32; 2], [u16; 2], u16),
    },
    Write {
        dst: Addr,
        value: u32,
    },
    AddVar {
        kind: usize,
        size: u64,
    },
    /// A DMAMEMCPY whose two legs stay inside the base model's 128-byte vars (ids 0..4), steps
    /// of every sign: what the loader accepts, so the device's region table is exercised on
    /// it (it must refuse nothing).
    Inside {
        src: (u32, [i32; 2], u64),
        dst: (u32, [i32; 2], u64),
        n: [u16; 2],
        es: u16,
    },
}

/// Registers a hostile WRITE aims at: the victim NC's semaphores, resets, FW-IO, DMA bases and
/// this NC's own (allowed) semaphores and tail doorbells.
pub const REGS: [&str; 9] = [
    "tpb_sem[0].sem_set[1]",
    "tpb_sem[0].sem_inc[0]",
    "tpb_sem[1].sem_set[7]",
    "tpb_sem[1].sem_inc[255]",
    "misc_ram.reset_request",
    "misc_ram.trigger",
    "udma[0].m2s.q[0].ring_base_lo",
    "udma[16].m2s.q[0].tail_inc",
    "notific[0].nq[48].base_lo",
];

pub const KINDS: [VarKind; 5] =
    [VarKind::TmpBuf, VarKind::StateBuffer, VarKind::Virtual, VarKind::Input, VarKind::Output];

pub fn addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        any::<u64>().prop_map(Addr::Raw),
        (0u64..(1 << 26)).prop_map(Addr::Raw),
        (0u32..8, prop_oneof![0u64..600, any::<u64>().prop_map(|x| x & ((1 << addr8::VAR_ID_SHIFT) - 1))])
            .prop_map(|(v, o)| Addr::Var(v, o)),
        (0..REGS.len()).prop_map(Addr::Reg),
    ]
}

pub fn leg() -> impl Strategy<Value = (Addr, [i32; 2], [u16; 2], u16)> {
    (
        addr(),
        prop_oneof![[-300i32..300, -300i32..300], [any::<i32>(), any::<i32>()]],
        prop_oneof![[0u16..40, 0u16..4], [any::<u16>(), any::<u16>()]],
        prop_oneof![Just(1u16), Just(2), Just(4), Just(8), any::<u16>()],
    )
}

/// Bytes of each of the base model's vars (input, output, gradient_in, gradient_out).
pub const BASE_VAR_BYTES: i64 = 128;

pub fn inside() -> impl Strategy<Value = Op> {
    let side = || (0u32..4, [-8i32..8, -8i32..8], any::<u64>());
    (side(), side(), [1u16..9, 1u16..5], prop_oneof![Just(1u16), Just(2), Just(4)])
        .prop_map(|(src, dst, n, es)| Op::Inside { src, dst, n, es })
}

/// A leg over `n` elements of `es` bytes with `steps`, placed inside a 128-byte var (the
/// start chosen by `seed` among the offsets that keep the whole span inside); None if the
/// span does not fit.
pub fn inside_leg(id: u32, steps: [i32; 2], seed: u64, n: [u16; 2], es: u16) -> Option<Dma2dLeg> {
    let e = i64::from(es);
    let ext = |k: u16, st: i32| {
        let far = (i64::from(k) - 1) * i64::from(st);
        (far.min(0), far.max(0))
    };
    let (a0, b0) = ext(n[0], steps[0]);
    let (a1, b1) = ext(n[1], steps[1]);
    let (lo, hi) = ((a0 + a1) * e, (b0 + b1 + 1) * e);
    let room = BASE_VAR_BYTES - (hi - lo);
    if room < 0 {
        return None;
    }
    let off = -lo + (seed % (room as u64 + 1)) as i64;
    let start = addr8::VAR_MARKER | (u64::from(id) << addr8::VAR_ID_SHIFT) | off as u64;
    Some(Dma2dLeg { start_addr: start, step_elem: steps, num_elem: n, elem_size: es })
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => inside(),
        3 => (leg(), leg()).prop_map(|(src, dst)| Op::Memcpy { src, dst }),
        2 => (addr(), any::<u32>()).prop_map(|(dst, value)| Op::Write { dst, value }),
        1 => (0..KINDS.len(), prop_oneof![0u64..1024, any::<u64>(), (u64::MAX - 4096)..=u64::MAX])
            .prop_map(|(kind, size)| Op::AddVar { kind, size }),
    ]
}

pub fn resolve(a: &Addr) -> u64 {
    match a {
        Addr::Raw(x) => *x,
        Addr::Var(id, off) => addr8::VAR_MARKER | (u64::from(*id) << addr8::VAR_ID_SHIFT) | off,
        Addr::Reg(i) => SUNDA.resolve(REGS[*i]).ok().and_then(|r| SUNDA.bar0_to_dev(r.offset)).unwrap_or(0),
    }
}

pub fn dleg(l: &(Addr, [i32; 2], [u16; 2], u16)) -> Dma2dLeg {
    Dma2dLeg { start_addr: resolve(&l.0), step_elem: l.1, num_elem: l.2, elem_size: l.3 }
}

pub fn build(ops: &[Op]) -> Option<Vec<u8>> {
    let mut m = builder::single_nc_allreduce();
    let g = m.graphs.first_mut()?;
    let mut act = Vec::new();
    for (k, o) in ops.iter().enumerate() {
        match o {
            Op::Memcpy { src, dst } => {
                let mut d = Dma2d::decode(&[0u8; 64]);
                d.header = SlotHeader::new(Opcode::DmaMemcpy);
                d.events = Events::NONE;
                d.src = dleg(src);
                d.dst = dleg(dst);
                act.push(Instruction::DmaMemcpy(d));
            }
            Op::Write { dst, value } => {
                act.push(Instruction::decode(&WriteOp::new(Events::NONE, resolve(dst), *value).encode()))
            }
            Op::AddVar { kind, size } => g.vars.push(VarDesc::new(&format!("h{k}"), KINDS[*kind], *size)),
            Op::Inside { src, dst, n, es } => {
                let (Some(sl), Some(dl)) =
                    (inside_leg(src.0, src.1, src.2, *n, *es), inside_leg(dst.0, dst.1, dst.2, *n, *es))
                else {
                    continue;
                };
                let mut d = Dma2d::decode(&[0u8; 64]);
                d.header = SlotHeader::new(Opcode::DmaMemcpy);
                d.events = Events::NONE;
                d.src = sl;
                d.dst = dl;
                act.push(Instruction::DmaMemcpy(d));
            }
        }
    }
    match g.engines.iter_mut().find(|e| e.kind == Engine::Act) {
        Some(e) => act.iter().for_each(|i| e.push(i)),
        None => {
            let mut e = builder::EngineDesc::new(Engine::Act);
            act.iter().for_each(|i| e.push(i));
            g.engines.push(e);
        }
    }
    m.build().ok()
}
