//! Decoding a BAR0 offset into a typed register identity ([`csr_maps::RegId`]): the
//! instance is found by offset here, the register within it by the code csr-maps generates
//! from the block descriptions.

use csr_maps::meta::{self, RegDef};
use csr_maps::{Arch, InstanceId, RegId};

/// One placed block instance in BAR0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub inst: InstanceId,
    pub index: u32,
}

/// A decoded register access.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit {
    /// Which register: instance, index, register path with element indices.
    pub id: RegId,
    /// Its description (access type, reset value, fields).
    pub def: &'static RegDef,
    /// BAR0 offset of the access.
    pub off: u64,
}

impl Hit {
    /// BAR0 offset of the innermost block the register belongs to.
    pub fn leaf_base(&self, leaf_offset: u64) -> u64 {
        self.off - leaf_offset
    }
}

/// Recently decoded BAR0 offsets, direct-mapped by word offset (kept in the device state,
/// under its lock). The decoder is a pure function of the offset, so a cached entry is
/// exactly what [`Decoder::decode`] would return; it spares the hot registers the host
/// touches on every execution (the kick slot, the NQ heads, the NC interrupt causes) the
/// span search and the register-id construction.
pub(crate) struct DecodeCache {
    slots: Box<[Option<Cached>; DECODE_CACHE_SLOTS]>,
}

/// A cached decode: the offset and what it decoded to (`None`: no register there).
type Cached = (u64, Option<Hit>);

const DECODE_CACHE_SLOTS: usize = 64;

impl Default for DecodeCache {
    fn default() -> Self {
        Self { slots: Box::new([None; DECODE_CACHE_SLOTS]) }
    }
}

impl DecodeCache {
    /// [`Decoder::decode`] of `off`, from the cache when it holds `off`.
    #[inline]
    pub fn decode(&mut self, dec: &Decoder, off: u64) -> Option<Hit> {
        let slot = &mut self.slots[(off >> 2) as usize % DECODE_CACHE_SLOTS];
        match *slot {
            Some((o, hit)) if o == off => hit,
            _ => {
                let hit = dec.decode(off);
                *slot = Some((off, hit));
                hit
            }
        }
    }
}

/// BAR0 decoder for one arch.
pub(crate) struct Decoder {
    arch: &'static Arch,
    spans: Vec<Span>,
    /// Span by (instance, index).
    by_id: rustc_hash::FxHashMap<(InstanceId, u32), Span>,
    pub bar0_size: u64,
}

impl Decoder {
    pub fn new(arch: &'static Arch) -> Self {
        let mut spans = Vec::new();
        let mut max_end = 0;
        for inst in arch.instances.iter().filter(|i| i.bar == arch.bars.apb) {
            let Some(b) = meta::block(inst.block) else { continue };
            for i in inst.indices() {
                let Some(base) = inst.base(i) else { continue };
                spans.push(Span { start: base, end: base + b.size, inst: inst.id, index: i as u32 });
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
        let by_id = spans.iter().map(|s| ((s.inst, s.index), *s)).collect();
        // A power of two covering every block (the compiled-in maps end far below 2^63; past it,
        // the end itself).
        let bar0_size = max_end.checked_next_power_of_two().unwrap_or(max_end);
        Self { arch, spans, by_id, bar0_size }
    }

    /// Decode a BAR0 offset to the register that starts there, if one does on this arch.
    pub fn decode(&self, off: u64) -> Option<Hit> {
        let i = self.spans.partition_point(|s| s.start <= off);
        let s = self.spans.get(i.checked_sub(1)?)?;
        if off >= s.end {
            return None;
        }
        let id = RegId::new(s.inst, s.index, off - s.start)?;
        let def = id.def();
        def.on_arch(self.arch.name).then_some(Hit { id, def, off })
    }

    /// BAR0 range `[start, end)` of instance `index` of `inst`.
    pub fn span(&self, inst: InstanceId, index: u32) -> Option<(u64, u64)> {
        self.by_id.get(&(inst, index)).map(|s| (s.start, s.end))
    }
}
