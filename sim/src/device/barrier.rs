//! The collectives barrier task of every NC (`nc_barrier`, a modeled register block): before
//! an execution of a model with collectives, the runtime names the NC's replica group
//! (`comm`, `member`) and arms the barrier (`arm`); the NC's task is then outstanding
//! (`status.state`) until every rank of the group has arrived for the same execution, and
//! done once they all have. Ranks pair by arrival count per (NC, communicator), as the
//! collectives pair by sequence number.
//!
//! A group that spans processes (an [`InterHost`] naming the communicator) is met here by its
//! local ranks; the barrier then goes across the seam ([`InterHost::barrier`]) from a worker
//! thread, so a rank that has not arrived in another process keeps it outstanding too. A
//! transport failure (a dead peer detected by the transport) fails the barrier and raises the
//! NC's `net_proxy_fail` line.
//!
//! The barrier gates the instruction stream: while an NC's barrier task is outstanding its
//! sequencers do not fetch (no START record is posted, no collective starts), as libnrt does
//! not let an execution's engines run ahead of its barrier; once the task is done the NC's
//! pending work runs. After a failed barrier the execution never starts (the runtime ends it
//! with the barrier's status and resets the NC before its next use). The runtime harvests nothing before the barrier clears, and its
//! core timeout starts when it clears (docs/faults.md). A model without collectives never
//! arms the barrier and is never gated.
//!
//! The status words are atomics outside the device's state lock: a completing arrival sets
//! the status of every participant (on any device of this process) without taking another
//! device's lock; participants on other devices are woken from a short-lived thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use csr_maps::blocks::nc_barrier;
use csr_maps::consts::barrier as bc;

use super::{Dev, State};
use crate::decode::Hit;
use crate::interhost::{InterHost, InterHostError};

/// Per-device barrier state: one status word per NC and the arrival counts.
pub(crate) struct NcBarriers {
    /// `status` per NC: state [1:0], generation [31:8].
    status: Vec<AtomicU32>,
    /// Arrivals per (NC, communicator): the sequence number of the next barrier.
    seq: Mutex<HashMap<(usize, u32), u32>>,
}

impl NcBarriers {
    pub fn new(ncs: usize) -> Self {
        Self { status: (0..ncs).map(|_| AtomicU32::new(0)).collect(), seq: Mutex::new(HashMap::new()) }
    }

    /// Whether `nc`'s sequencers are held back: its barrier is outstanding, or failed (the
    /// execution never starts; the next arrival or a reset lifts it).
    pub fn gated(&self, nc: usize) -> bool {
        matches!(nc_barrier::Status(self.status(nc)).state(), bc::OUTSTANDING | bc::FAILED)
    }

    /// The status word of `nc` (0 for an NC out of range).
    pub fn status(&self, nc: usize) -> u32 {
        self.status.get(nc).map_or(0, |s| s.load(Ordering::Acquire))
    }

    /// Set the state of `nc`'s barrier of generation `generation` (ignored when the NC has
    /// since arrived at a later one or was reset).
    fn settle(&self, nc: usize, generation: u32, state: u32) {
        let Some(s) = self.status.get(nc) else { return };
        let _ = s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
            let st = nc_barrier::Status(cur);
            (st.generation() == generation && st.state() == bc::OUTSTANDING).then(|| st.with_state(state).0)
        });
    }

    /// A reset NC: idle, its arrival counts forgotten.
    pub fn reset(&self, nc: usize) {
        if let Some(s) = self.status.get(nc) {
            s.store(0, Ordering::Release);
        }
        platform::sync::lock(&self.seq).retain(|k, _| k.0 != nc);
    }
}

/// A participant of a barrier.
struct Member {
    dev: Weak<Dev>,
    nc: usize,
    generation: u32,
}

struct Meet {
    size: usize,
    local: Option<Vec<usize>>,
    failed: bool,
    members: Vec<Option<Member>>,
}

/// The barriers being met, by (communicator, sequence number), shared by every device of the
/// process (held by the collective hub).
#[derive(Default)]
pub(crate) struct Meets {
    pending: Mutex<HashMap<(u32, u32), Meet>>,
}

impl Meets {
    /// Drop the half-met barriers of a device that was reset.
    pub fn forget(&self, dev: &Weak<Dev>) {
        let mut p = platform::sync::lock(&self.pending);
        p.retain(|_, m| !m.members.iter().flatten().any(|x| x.dev.ptr_eq(dev)));
    }
}

/// Register writes of the block: `arm` makes the NC arrive; the rest is storage.
pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, nc: u32, r: nc_barrier::RegId, val: u32) {
    if r != nc_barrier::RegId::Arm || nc_barrier::Arm(val).go() == 0 {
        return dev.generic_write(st, hit, val);
    }
    let nc = nc as usize;
    let base = hit.leaf_base(r.offset());
    let b = nc_barrier::Block::at(&dev.null, base);
    let comm = dev.stored(st, b.comm().offset(), 0);
    let member = nc_barrier::Member(dev.stored(st, b.member().offset(), 0));
    let failed = super::fault::barrier_fault(st, nc);
    if let Some(m) = arrive(dev, nc, comm, member.rank() as usize, member.size() as usize, failed) {
        // Settled here: wake its participants (this device's now, through the caller's
        // `after`; other devices' from a thread, never under this device's lock).
        let mut others = Vec::new();
        for x in m.members.iter().flatten() {
            if x.dev.ptr_eq(&dev.me) {
                if let Some(p) = st.pending.get_mut(x.nc) {
                    *p = true;
                }
            } else {
                others.push((x.dev.clone(), x.nc));
            }
        }
        if !others.is_empty() {
            let _ = std::thread::Builder::new().name("sim-barrier-wake".into()).spawn(move || wake(&others));
        }
    }
    if dev.barriers.status.get(nc).is_some() && !dev.barriers.gated(nc) {
        // Settled at once (failed, or a group of one): nothing holds the NC back.
        if let Some(p) = st.pending.get_mut(nc) {
            *p = true;
        }
    }
}

/// Flag the NCs' pending work and run or wake them.
fn wake(members: &[(Weak<Dev>, usize)]) {
    for (dev, nc) in members {
        let Some(d) = dev.upgrade() else { continue };
        let mut st = d.lock();
        if let Some(p) = st.pending.get_mut(*nc) {
            *p = true;
        }
        d.after(st);
    }
}

/// Reads: `status` from the NC's status word; the rest is storage.
pub(crate) fn reg_read(dev: &Dev, st: &State, hit: &Hit, nc: u32, r: nc_barrier::RegId) -> u32 {
    match r {
        nc_barrier::RegId::Status => dev.barriers.status(nc as usize),
        _ => dev.generic_read(st, hit),
    }
}

/// NC `nc` arrives at the next barrier of `comm` as `rank` of `size`. Returns the barrier when
/// this arrival settled it here (its participants are to be woken).
fn arrive(dev: &Dev, nc: usize, comm: u32, rank: usize, size: usize, failed: bool) -> Option<Meet> {
    let slot = dev.barriers.status.get(nc)?;
    // Its new generation, outstanding.
    let prev = nc_barrier::Status(slot.load(Ordering::Acquire));
    let generation = prev.generation().wrapping_add(1) & bc::GENERATION_MASK;
    slot.store(nc_barrier::Status(0).with_generation(generation).with_state(bc::OUTSTANDING).0, Ordering::Release);
    let seq = {
        let mut s = platform::sync::lock(&dev.barriers.seq);
        let n = s.entry((nc, comm)).or_insert(0);
        let my = *n;
        *n = n.wrapping_add(1);
        my
    };
    if size == 0 || rank >= size {
        tracing::error!(nc, comm, rank, size, "barrier: the NC is not a rank of its group");
        dev.barriers.settle(nc, generation, bc::FAILED);
        return None;
    }
    let inter = dev.hub.inter();
    let local = inter.as_ref().and_then(|t| t.local_ranks(comm));
    let meets = &dev.hub.barriers;
    let done = {
        let mut p = platform::sync::lock(&meets.pending);
        let key = (comm, seq);
        let m = p.entry(key).or_insert_with(|| Meet {
            size,
            local: local.clone(),
            failed: false,
            members: (0..size).map(|_| None).collect(),
        });
        let me = Member { dev: dev.me.clone(), nc, generation };
        let outside = m.local.as_ref().is_some_and(|l| !l.contains(&rank));
        if m.size != size || outside || m.members.get(rank).is_none_or(|x| x.is_some()) {
            // The group disagrees (another size, a rank twice, a rank not hosted here): the
            // barrier fails for every rank that met it.
            tracing::error!(nc, comm, rank, size, "barrier: the group's ranks disagree");
            m.failed = true;
            dev.barriers.settle(nc, generation, bc::FAILED);
        } else {
            m.failed |= failed;
            m.members[rank] = Some(me);
        }
        if m.failed {
            // A failed barrier fails at once for every rank that met it so far, and for each
            // later one as it arrives (no rank waits on a barrier that cannot succeed).
            settle_all(m, bc::FAILED);
        }
        let complete = match &m.local {
            Some(l) => l.iter().all(|&i| m.members.get(i).is_some_and(|x| x.is_some())),
            None => m.members.iter().all(|x| x.is_some()),
        };
        if complete {
            p.remove(&key)
        } else {
            None
        }
    };
    let m = done?;
    match (inter, &m.local) {
        (Some(t), Some(_)) if !m.failed => {
            spawn_inter_host(t, comm, seq, m);
            None
        }
        _ => {
            let state = if m.failed { bc::FAILED } else { bc::DONE };
            settle_all(&m, state);
            Some(m)
        }
    }
}

fn settle_all(m: &Meet, state: u32) {
    for x in m.members.iter().flatten() {
        if let Some(d) = x.dev.upgrade() {
            d.barriers.settle(x.nc, x.generation, state);
        }
    }
}

fn wake_all(m: &Meet) {
    let v: Vec<(Weak<Dev>, usize)> = m.members.iter().flatten().map(|x| (x.dev.clone(), x.nc)).collect();
    wake(&v);
}

/// A spanning group's barrier, met by its local ranks: across the seam on a worker thread.
fn spawn_inter_host(t: Arc<dyn InterHost>, comm: u32, seq: u32, m: Meet) {
    let local: Vec<usize> = m.members.iter().enumerate().filter_map(|(i, x)| x.as_ref().map(|_| i)).collect();
    let size = m.size;
    let spawned = std::thread::Builder::new().name(format!("sim-barrier-{comm:x}-{seq}")).spawn(move || {
        match t.barrier(comm, seq, size, &local) {
            Ok(()) => {
                settle_all(&m, bc::DONE);
                wake_all(&m);
            }
            Err(e) => {
                tracing::error!(comm, seq, "barrier across processes failed: {e}");
                if matches!(e, InterHostError::Network(_)) {
                    // The transport found a peer dead: the NC's network proxy failed.
                    for x in m.members.iter().flatten() {
                        if let Some(d) = x.dev.upgrade() {
                            let mut st = d.lock();
                            d.intc(&mut st, x.nc, super::intc::Line::NetProxyFail);
                        }
                    }
                }
                settle_all(&m, bc::FAILED);
                wake_all(&m);
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(comm, seq, "barrier: no worker thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csr_maps::{Regs, SUNDA};
    use platform::Platform;

    fn status(regs: &Regs<'_>, nc: u64) -> (u32, u32) {
        let s = regs.nc_barrier(nc).and_then(|b| b.status().read()).map(|s| (s.state(), s.generation()));
        s.unwrap_or((u32::MAX, 0))
    }

    fn arm(regs: &Regs<'_>, nc: u64, comm: u32, rank: u32, size: u32) {
        let Ok(b) = regs.nc_barrier(nc) else { panic!("nc_barrier {nc}") };
        let w = b
            .comm()
            .write(nc_barrier::Comm(comm))
            .and_then(|()| b.member().write(nc_barrier::Member(0).with_rank(rank).with_size(size)))
            .and_then(|()| b.arm().write(nc_barrier::Arm(0).with_go(1)));
        assert!(w.is_ok(), "{w:?}");
    }

    #[test]
    fn outstanding_until_every_rank_arrived_failed_when_the_group_disagrees() {
        let d = crate::SimDevice::new(crate::SimConfig::new(&SUNDA).timing(crate::Timing::Step));
        let Ok(d) = d else { panic!("sim device") };
        let Ok(bar) = d.bar(0) else { panic!("bar0") };
        let regs = Regs::new(&SUNDA, bar.as_ref());
        assert_eq!(status(&regs, 0), (bc::IDLE, 0));
        arm(&regs, 0, 9, 0, 2);
        assert_eq!(status(&regs, 0), (bc::OUTSTANDING, 1));
        assert!(d.dev.barriers.gated(0), "the sequencers wait");
        arm(&regs, 1, 9, 1, 2);
        assert_eq!((status(&regs, 0), status(&regs, 1)), ((bc::DONE, 1), (bc::DONE, 1)));
        assert!(!d.dev.barriers.gated(0));
        // The next barrier pairs by arrival count, whichever rank comes first.
        arm(&regs, 1, 9, 1, 2);
        assert_eq!((status(&regs, 0), status(&regs, 1)), ((bc::DONE, 1), (bc::OUTSTANDING, 2)));
        arm(&regs, 0, 9, 0, 2);
        assert_eq!((status(&regs, 0), status(&regs, 1)), ((bc::DONE, 2), (bc::DONE, 2)));
        // Another communicator whose ranks disagree on the size: failed for both, at once.
        arm(&regs, 0, 10, 0, 2);
        assert_eq!(status(&regs, 0), (bc::OUTSTANDING, 3));
        arm(&regs, 1, 10, 1, 3);
        assert_eq!((status(&regs, 0), status(&regs, 1)), ((bc::FAILED, 3), (bc::FAILED, 3)));
        assert!(d.dev.barriers.gated(0), "a failed barrier's execution never starts");
        // A rank outside its group fails alone.
        arm(&regs, 0, 11, 2, 2);
        assert_eq!(status(&regs, 0), (bc::FAILED, 4));
        // The barrier fault: the first arrival fails at once, its peer as it arrives.
        d.inject(crate::FaultSpec { kind: crate::FaultKind::Barrier, nc: 1, engine: None, queue: None });
        arm(&regs, 1, 9, 1, 2);
        assert_eq!(status(&regs, 1), (bc::FAILED, 4));
        arm(&regs, 0, 9, 0, 2);
        assert_eq!(status(&regs, 0), (bc::FAILED, 5));
        // A reset NC is idle and its counts start over.
        let mut st = d.dev.lock();
        d.dev.reset_all(&mut st);
        drop(st);
        assert_eq!((status(&regs, 0), status(&regs, 1)), ((bc::IDLE, 0), (bc::IDLE, 0)));
    }
}
