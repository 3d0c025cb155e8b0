//! The NC ownership region table (`nc_regions`, a modeled block: no public source places an
//! ownership table; this project's model): the device ranges an NC's sequencer engines and
//! DMA queues may touch while the table is enabled. The runtime programs it with the active
//! model's regions; the device refuses (does not perform) and reports as out of bounds any
//! other access. A disabled table checks nothing.

use csr_maps::blocks::{nc_region, nc_regions};
use csr_maps::consts::regions::ENTRIES;
use csr_maps::Regs;

use crate::error::{HalError, Result};

bitflags::bitflags! {
    /// What an NC may do in a region. The bit values are this type's own; the register's
    /// field positions live in csr-maps.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct Perm: u8 {
        /// Data reads: DMA sources, DMAMEMCPY and collective sources.
        const READ = 1 << 0;
        /// Data writes: DMA destinations (CSRs included), DMAMEMCPY and collective
        /// destinations, WRITE targets.
        const WRITE = 1 << 1;
        /// Sequencer instruction fetch.
        const FETCH = 1 << 2;
        /// DMA descriptor fetch.
        const DESC = 1 << 3;
    }
}

/// One device address range and what the NC may do in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region {
    pub base: u64,
    pub size: u64,
    pub perm: Perm,
}

impl Region {
    /// A region; `size` 0 is allowed (it takes no entry).
    pub fn new(base: u64, size: u64, perm: Perm) -> Self {
        Self { base, size, perm }
    }
    /// One past the last byte (saturating: a range cannot wrap past 2^64).
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
}

/// Entries of one NC's table.
pub const TABLE_ENTRIES: usize = ENTRIES;

/// Sort `regions` and merge those of equal permission that overlap or abut; empty ones are
/// dropped. The result covers exactly the same bytes with the same permissions.
pub fn coalesce(regions: &[Region]) -> Vec<Region> {
    let mut v: Vec<Region> = regions.iter().copied().filter(|r| r.size > 0 && !r.perm.is_empty()).collect();
    v.sort_unstable_by_key(|r| (r.perm, r.base));
    let mut out: Vec<Region> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(l) if l.perm == r.perm && r.base <= l.end() => {
                let end = l.end().max(r.end());
                l.size = end - l.base;
            }
            _ => out.push(r),
        }
    }
    out.sort_unstable_by_key(|r| (r.base, r.perm));
    out
}

/// Entries `regions` needs once coalesced.
pub fn entries_needed(regions: &[Region]) -> usize {
    coalesce(regions).len()
}

fn perm_bits(p: Perm) -> u32 {
    let mut v = nc_region::Perm(0);
    if p.contains(Perm::READ) {
        v = v.with_read(1);
    }
    if p.contains(Perm::WRITE) {
        v = v.with_write(1);
    }
    if p.contains(Perm::FETCH) {
        v = v.with_fetch(1);
    }
    if p.contains(Perm::DESC) {
        v = v.with_desc(1);
    }
    v.0
}

/// Program NC `nc`'s table with `regions` (coalesced) and enable it. `shadow` is what the
/// table held before (entries known to be programmed); only entries that change are written,
/// and entries beyond the new list that were in use are cleared. Returns the entries used.
pub(crate) fn program(regs: &Regs<'_>, nc: usize, regions: &[Region], shadow: &mut Vec<Region>) -> Result<usize> {
    let want = coalesce(regions);
    if want.len() > ENTRIES {
        return Err(HalError::RegionTableFull { needed: want.len(), entries: ENTRIES });
    }
    let t = regs.nc_regions(nc as u64)?;
    // Off while the entries change: the NC is idle (its lane is held), nothing is checked.
    t.ctrl().write(nc_regions::Ctrl(0))?;
    for (i, r) in want.iter().enumerate() {
        if shadow.get(i) == Some(r) {
            continue;
        }
        let e = t.entry(i as u64)?;
        e.perm().write(nc_region::Perm(0))?;
        e.base_lo().write(nc_region::BaseLo(r.base as u32))?;
        e.base_hi().write(nc_region::BaseHi((r.base >> 32) as u32))?;
        e.size_lo().write(nc_region::SizeLo(r.size as u32))?;
        e.size_hi().write(nc_region::SizeHi((r.size >> 32) as u32))?;
        e.perm().write(nc_region::Perm(perm_bits(r.perm)))?;
    }
    for i in want.len()..shadow.len() {
        t.entry(i as u64)?.perm().write(nc_region::Perm(0))?;
    }
    t.ctrl().write(nc_regions::Ctrl(0).with_enable(1))?;
    let n = want.len();
    *shadow = want;
    Ok(n)
}

/// Disable NC `nc`'s table and clear the entries `shadow` says are in use.
pub(crate) fn disable(regs: &Regs<'_>, nc: usize, shadow: &mut Vec<Region>) -> Result<()> {
    let t = regs.nc_regions(nc as u64)?;
    t.ctrl().write(nc_regions::Ctrl(0))?;
    for i in 0..shadow.len() {
        t.entry(i as u64)?.perm().write(nc_region::Perm(0))?;
    }
    shadow.clear();
    Ok(())
}

/// The first access NC `nc`'s table refused since the last clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionFault {
    /// Refused accesses since the last clear (saturating at 65535).
    pub count: u32,
    /// `csr_maps::consts::regions::KIND_*`.
    pub kind: u32,
    /// 0..=4: sequencer engine; `csr_maps::consts::regions::SOURCE_DMA` + n: DMA engine n of
    /// the NC.
    pub source: u32,
    /// Device address of the first refused access.
    pub addr: u64,
}

/// The latched out-of-bounds report of NC `nc`, if any.
pub(crate) fn fault(regs: &Regs<'_>, nc: usize) -> Result<Option<RegionFault>> {
    let t = regs.nc_regions(nc as u64)?;
    let s = t.oob_status().read()?;
    if s.latched() == 0 {
        return Ok(None);
    }
    let c = t.oob_cause().read()?;
    let addr = t.oob_addr_lo().read()?.0 as u64 | ((t.oob_addr_hi().read()?.0 as u64) << 32);
    Ok(Some(RegionFault { count: s.count(), kind: c.kind(), source: c.source(), addr }))
}

/// Clear the latched report of NC `nc`.
pub(crate) fn clear_fault(regs: &Regs<'_>, nc: usize) -> Result<()> {
    let t = regs.nc_regions(nc as u64)?;
    t.oob_status().clear(nc_regions::OobStatus(0).with_latched(1))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_merges_only_equal_permissions_that_touch() {
        let rw = Perm::READ | Perm::WRITE;
        let v = coalesce(&[
            Region::new(0x2000, 0x1000, rw),
            Region::new(0x1000, 0x1000, rw),
            Region::new(0x1800, 0x100, rw),
            Region::new(0x3000, 0x10, Perm::FETCH),
            Region::new(0x3010, 0x10, rw),
            Region::new(0x5000, 0, rw),
            Region::new(0x6000, 0x10, Perm::empty()),
            Region::new(u64::MAX - 4, 100, rw),
        ]);
        assert_eq!(
            v,
            vec![
                Region::new(0x1000, 0x2000, rw),
                Region::new(0x3000, 0x10, Perm::FETCH),
                Region::new(0x3010, 0x10, rw),
                Region::new(u64::MAX - 4, 100, rw),
            ]
        );
        assert_eq!(v[3].end(), u64::MAX);
        assert_eq!(entries_needed(&[Region::new(0, 8, rw), Region::new(16, 8, rw)]), 2);
    }
}
