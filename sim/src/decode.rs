//! Decoding a BAR0 offset into (block instance, register) with csr-maps metadata.

use std::collections::HashMap;

use csr_maps::meta::{self, BlockDef, RegDef};
use csr_maps::Arch;

/// A register of a block, flattened with the indices of the sub-blocks it sits in.
#[derive(Debug, Clone)]
pub(crate) struct FlatReg {
    pub def: &'static RegDef,
    /// The innermost block the register belongs to.
    pub block: &'static BlockDef,
    /// Element index for register arrays.
    pub elem: u32,
    /// Sub-block path, outermost first: (sub name, index).
    pub path: Vec<(&'static str, u32)>,
}

impl FlatReg {
    pub fn name(&self) -> &'static str {
        self.def.name
    }
    /// Index of sub-block `name` on the path.
    pub fn sub(&self, name: &str) -> Option<u32> {
        self.path.iter().find(|(n, _)| *n == name).map(|(_, i)| *i)
    }
}

/// Every register of a block by relative offset.
pub(crate) struct FlatBlock {
    pub regs: HashMap<u64, FlatReg>,
}

fn flatten(
    arch: &Arch,
    b: &'static BlockDef,
    base: u64,
    path: &mut Vec<(&'static str, u32)>,
    out: &mut HashMap<u64, FlatReg>,
) {
    for r in b.regs.iter().filter(|r| r.on_arch(arch.name)) {
        for k in 0..r.count {
            out.insert(
                base + r.offset + k * r.stride,
                FlatReg { def: r, block: b, elem: k as u32, path: path.clone() },
            );
        }
    }
    for s in b.subs {
        let Some(sb) = meta::block(s.block) else { continue };
        for k in 0..s.count {
            path.push((s.name, k as u32));
            flatten(arch, sb, base + s.offset + k * s.stride, path, out);
            path.pop();
        }
    }
}

/// Kinds of block instances with behaviour in the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Udma,
    Sdma,
    UserErrtrig,
    Notific,
    NotificTopsp,
    TpbSem,
    TopspSem,
    MiscRam,
    NcIntc,
    Seq,
    Q7,
    Other,
}

impl Kind {
    fn of(instance: &str) -> Kind {
        match instance {
            "udma" => Kind::Udma,
            "sdma" => Kind::Sdma,
            "user_errtrig" => Kind::UserErrtrig,
            "notific" => Kind::Notific,
            "notific_topsp" => Kind::NotificTopsp,
            "tpb_sem" => Kind::TpbSem,
            "topsp_sem" => Kind::TopspSem,
            "misc_ram" => Kind::MiscRam,
            "nc_intc" => Kind::NcIntc,
            "seq" => Kind::Seq,
            "q7" | "nx" => Kind::Q7,
            _ => Kind::Other,
        }
    }
}

/// One placed instance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub kind: Kind,
    pub index: u32,
    block: usize,
}

/// A decoded register access.
pub(crate) struct Hit<'a> {
    pub kind: Kind,
    pub index: u32,
    pub reg: &'a FlatReg,
}

/// BAR0 decoder for one arch.
pub(crate) struct Decoder {
    spans: Vec<Span>,
    blocks: Vec<FlatBlock>,
    /// Base offsets by (kind, index).
    bases: HashMap<(Kind, u32), u64>,
    pub bar0_size: u64,
}

impl Decoder {
    pub fn new(arch: &'static Arch) -> Self {
        let mut spans = Vec::new();
        let mut blocks: Vec<FlatBlock> = Vec::new();
        let mut block_idx: HashMap<&str, usize> = HashMap::new();
        let mut bases = HashMap::new();
        let mut max_end = 0;
        for inst in arch.instances.iter().filter(|i| i.bar == arch.bars.apb) {
            let Some(b) = meta::block(inst.block) else { continue };
            let bi = *block_idx.entry(b.name).or_insert_with(|| {
                let mut regs = HashMap::new();
                flatten(arch, b, 0, &mut Vec::new(), &mut regs);
                blocks.push(FlatBlock { regs });
                blocks.len() - 1
            });
            let kind = Kind::of(inst.name);
            for i in inst.indices() {
                let Some(base) = inst.base(i) else { continue };
                spans.push(Span { start: base, end: base + b.size, kind, index: i as u32, block: bi });
                bases.insert((kind, i as u32), base);
                max_end = max_end.max(base + b.size);
            }
        }
        for r in arch.regions.iter().filter(|r| r.bar == arch.bars.apb) {
            for i in 0..r.count() {
                if let Some(b) = r.base(i) {
                    max_end = max_end.max(b + r.size);
                }
            }
        }
        spans.sort_by_key(|s| s.start);
        Self { spans, blocks, bases, bar0_size: max_end.next_power_of_two() }
    }

    /// Decode a BAR0 offset to a register, if it is one.
    pub fn decode(&self, off: u64) -> Option<Hit<'_>> {
        let i = self.spans.partition_point(|s| s.start <= off);
        let s = self.spans.get(i.checked_sub(1)?)?;
        if off >= s.end {
            return None;
        }
        let reg = self.blocks[s.block].regs.get(&(off - s.start))?;
        Some(Hit { kind: s.kind, index: s.index, reg })
    }

    /// Base offset of instance `index` of `kind`.
    pub fn base(&self, kind: Kind, index: u32) -> Option<u64> {
        self.bases.get(&(kind, index)).copied()
    }

    /// Every (kind, index) instance.
    pub fn instances(&self) -> impl Iterator<Item = &Span> {
        self.spans.iter()
    }
}
