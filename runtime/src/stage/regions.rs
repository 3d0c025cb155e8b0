//! Step 7, own regions: the device ranges the graph's NC may touch, for the NC's ownership
//! region table (`hal::Device::set_regions`) — the device's own check, independent of the
//! loader's: the model's allocations (vars with their own memory, the state-buffer ranges of
//! its state-buffer vars, its instruction streams, its DMA rings and completion words) and
//! the registers it may write (its NC's semaphores below the runtime's reserved ones, the
//! runtime's DONE semaphore its SP program resets, its queues' tail doorbells). Tensors bound
//! by address for an execution are added at bind time. Everything is derived from what was
//! allocated, never from a size the model claims.

use hal::{Device, HostBuf, Perm, Region, Stream};

use super::{sems, StageError, StageErrorKind, StagedQueue, StagedVar};

/// The regions of a staged graph on NC `nc` (before coalescing).
pub fn own_regions(
    dev: &Device,
    nc: usize,
    vars: &[StagedVar],
    queues: &[StagedQueue],
    streams: &[Stream],
    one: &HostBuf,
) -> Result<Vec<Region>, StageError> {
    let arch = dev.arch();
    let rw = Perm::READ | Perm::WRITE;
    let mut v = Vec::new();
    let no_sbuf = || StageError::from(StageErrorKind::NoStateBuffer { nc });
    let sbuf = arch.region("sbuf").ok_or_else(no_sbuf)?;
    let sb_base = sbuf.dev_base(nc as u64).ok_or_else(no_sbuf)?;
    let sb_end = sb_base.saturating_add(sbuf.size);
    for x in vars {
        match (&x.mem, x.kind) {
            (Some(m), _) => v.push(Region::new(m.addr(), m.len(), rw)),
            (None, neff::VarKind::StateBuffer) => {
                // Only what lies in this NC's state buffer, whatever the var claims.
                let (a, e) = (x.addr.max(sb_base), x.addr.saturating_add(x.size).min(sb_end));
                if a < e {
                    v.push(Region::new(a, e - a, rw));
                }
            }
            // Virtual vars lie inside their backing var's allocation.
            (None, _) => {}
        }
    }
    for s in streams {
        v.push(Region::new(s.mem().addr(), s.mem().len(), Perm::FETCH));
    }
    for q in queues {
        v.extend(q.ring.regions());
        let (s2m, m2s) = q.ring.doorbell_dev_addrs(&dev.regs())?;
        v.push(Region::new(s2m, 4, Perm::WRITE));
        v.push(Region::new(m2s, 4, Perm::WRITE));
    }
    v.push(Region::new(dev.host_addr(one), one.len() as u64, Perm::READ));
    let sem = dev.regs().tpb_sem(nc as u64).map_err(StageError::from)?;
    let e = StageError::from;
    let window = |first: u64| {
        arch.bar0_to_dev(first).ok_or_else(|| StageError::from(StageErrorKind::SemaphoreWindow { offset: first }))
    };
    let model_sems = sems::FIRST_RESERVED as u64;
    for first in
        [sem.sem_set(0).map_err(e)?.offset(), sem.sem_inc(0).map_err(e)?.offset(), sem.sem_dec(0).map_err(e)?.offset()]
    {
        v.push(Region::new(window(first)?, model_sems * 4, Perm::WRITE));
    }
    v.push(Region::new(window(sem.sem_set(sems::DONE as u64).map_err(e)?.offset())?, 4, Perm::WRITE));
    Ok(v)
}

/// Refuse (NRT_RESOURCE) a graph whose regions, plus one per tensor that may be bound by
/// address, need more entries than the NC's table holds.
pub fn check_fits(regions: &[Region], bindable: usize) -> Result<(), StageError> {
    let need = hal::regions::entries_needed(regions).saturating_add(bindable);
    let have = hal::regions::TABLE_ENTRIES;
    if need > have {
        return Err(StageError::from(StageErrorKind::RegionTableFull { need, have }));
    }
    Ok(())
}
