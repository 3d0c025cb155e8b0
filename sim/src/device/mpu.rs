//! The NC ownership region table (`nc_regions`, modeled): the hardware's own view of which
//! device ranges a NeuronCore's engines and DMA queues may touch. The driver programs a list
//! of (base, size, permission) entries and enables the table; from then on every data read
//! and write, instruction fetch and descriptor fetch of the NC's sequencer engines and of its
//! DMA engines' queues is checked. An access outside the table is not performed: it is
//! latched in `oob_status` / `oob_cause` / `oob_addr_*` and reported as an out-of-bounds
//! INFER_STATUS record, the same record libnrt turns into NRT_EXEC_OOB. A disabled table (the
//! power-on state, and after a reset of the NC) checks nothing. The host-facing DMA engines
//! are the driver's, not the NC's, and are never checked.

use std::sync::atomic::Ordering;

use csr_maps::blocks::{nc_region, nc_regions};
use csr_maps::consts::regions as rc;
use csr_maps::formats::notify::{custom, ntype, Subtype};

use super::{Dev, State};
use crate::decode::Hit;

/// Permission bits of an entry (`nc_region.perm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    Fetch,
    Desc,
}

impl Access {
    fn bit(self) -> u32 {
        let p = nc_region::Perm(0);
        match self {
            Access::Read => p.with_read(1).0,
            Access::Write => p.with_write(1).0,
            Access::Fetch => p.with_fetch(1).0,
            Access::Desc => p.with_desc(1).0,
        }
    }
    fn kind(self) -> u32 {
        match self {
            Access::Read => rc::KIND_READ,
            Access::Write => rc::KIND_WRITE,
            Access::Fetch => rc::KIND_FETCH,
            Access::Desc => rc::KIND_DESC,
        }
    }
}

/// Who made an access: a sequencer engine of the NC, or one of its DMA engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Seq(usize),
    Dma(usize),
}

/// One NC's table as the checker sees it (rebuilt from the registers after a write).
#[derive(Debug, Clone)]
pub(crate) struct Table {
    dirty: bool,
    enabled: bool,
    /// (base, end exclusive, perm), sorted by base.
    entries: Vec<(u64, u64, u32)>,
}

impl Default for Table {
    fn default() -> Self {
        Self { dirty: true, enabled: false, entries: Vec::new() }
    }
}

/// A write to an NC's table: stored, and the checker's copy rebuilt before the next check.
pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, nc: u32, val: u32) {
    dev.generic_write(st, hit, val);
    if let Some(t) = st.regions.get_mut(nc as usize) {
        t.dirty = true;
    }
}

/// Forget the checker's copy of NC `nc`'s table (its registers were reset).
pub(crate) fn invalidate(st: &mut State, nc: usize) {
    if let Some(t) = st.regions.get_mut(nc) {
        *t = Table::default();
    }
}

fn rebuild(dev: &Dev, st: &mut State, nc: usize) {
    let Some(b) = dev.nc_regions(nc) else { return };
    let enabled = nc_regions::Ctrl(dev.stored(st, b.ctrl().offset(), 0)).enable() != 0;
    let mut entries = Vec::new();
    if enabled {
        for i in 0..rc::ENTRIES as u64 {
            let Ok(e) = b.entry(i) else { break };
            let perm = dev.stored(st, e.perm().offset(), 0);
            if perm == 0 {
                continue;
            }
            let word = |lo: u64, hi: u64| dev.stored(st, lo, 0) as u64 | ((dev.stored(st, hi, 0) as u64) << 32);
            let base = word(e.base_lo().offset(), e.base_hi().offset());
            let size = word(e.size_lo().offset(), e.size_hi().offset());
            // A range that would wrap past 2^64 ends there.
            let end = base.saturating_add(size);
            if size > 0 {
                entries.push((base, end, perm));
            }
        }
        entries.sort_unstable();
    }
    if let Some(t) = st.regions.get_mut(nc) {
        *t = Table { dirty: false, enabled, entries };
    }
}

/// Whether the table of `nc` is enabled (rebuilding the checker's copy if needed).
pub(crate) fn enabled(dev: &Dev, st: &mut State, nc: usize) -> bool {
    if st.regions.get(nc).is_some_and(|t| t.dirty) {
        rebuild(dev, st, nc);
    }
    st.regions.get(nc).is_some_and(|t| t.enabled)
}

/// Whether `len` bytes at `addr` may be accessed by NC `nc` for `a`: every byte lies in an
/// entry granting `a` (a disabled table allows everything; an empty access is allowed).
pub(crate) fn allowed(dev: &Dev, st: &mut State, nc: usize, a: Access, addr: u64, len: u64) -> bool {
    if !enabled(dev, st, nc) || len == 0 {
        return true;
    }
    let Some(t) = st.regions.get(nc) else { return true };
    let Some(end) = addr.checked_add(len) else { return false };
    let bit = a.bit();
    let mut cur = addr;
    // Entries are sorted by base: each step finds one that covers `cur` and moves past it.
    while cur < end {
        let next = t.entries.iter().filter(|&&(b, e, p)| p & bit != 0 && b <= cur && cur < e).map(|&(_, e, _)| e).max();
        match next {
            Some(e) => cur = e,
            None => return false,
        }
    }
    true
}

/// Latch and report a refused access of `src` on NC `nc`: `oob_status` / `oob_cause` /
/// `oob_addr_*`, and an out-of-bounds record on the INFER_STATUS ring of the sequencer engine
/// that made it (a DMA queue's on the SP engine's, which waits for every engine's end).
pub(crate) fn refuse(dev: &Dev, st: &mut State, nc: usize, src: Source, a: Access, addr: u64) {
    dev.n.oob_refused.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        nc,
        ?src,
        ?a,
        addr = format_args!("{addr:#x}"),
        "sim: access outside the NC's region table refused"
    );
    if let Some(b) = dev.nc_regions(nc) {
        let so = b.oob_status().offset();
        let s = nc_regions::OobStatus(dev.stored(st, so, 0));
        if s.latched() == 0 {
            let source = match src {
                Source::Seq(e) => e as u32,
                Source::Dma(e) => rc::SOURCE_DMA + e as u32,
            };
            let cause = nc_regions::OobCause(0).with_kind(a.kind()).with_source(source);
            st.regs.insert(b.oob_cause().offset(), cause.0);
            st.regs.insert(b.oob_addr_lo().offset(), addr as u32);
            st.regs.insert(b.oob_addr_hi().offset(), (addr >> 32) as u32);
        }
        let n = s.with_latched(1).with_count(s.count().saturating_add(1).min(0xFFFF));
        st.regs.insert(so, n.0);
    }
    let (engine, sub_id) = match src {
        Source::Seq(e) => (e, custom::OOB_DGE_SCALAR),
        Source::Dma(_) => (csr_maps::Engine::Sp.index(), custom::OOB_DGE_VECTOR),
    };
    let line = st.seq.get(nc).and_then(|s| s.get(engine)).map(|s| s.pc).unwrap_or(0);
    super::records::post_infer(dev, st, nc, engine, (ntype::EXPLICIT, Subtype::Custom, sub_id, line));
}
