//! Per-NeuronCore execution lanes: a FIFO ticket queue per NC, and which model's rings,
//! semaphores and streams are currently armed on it.
//!
//! Every user of an NC's hardware — an execution (sync or through an XU), a load staging a
//! graph, an unload tearing one down — first takes one ticket on each NC it needs, all in one
//! atomic step ([`Lanes::enqueue`]), and waits until it is served on all of them. Tickets are
//! handed out in one global order, so requests on overlapping NC sets can never wait on each
//! other in a cycle, and each lane serves strictly in arrival order (no starvation). A ticket
//! given back before it was served is cancelled and skipped.
//!
//! The lane also records the model armed on the NC ([`Lanes::active`]): when a request for
//! another model is served, the runtime parks the armed model and re-arms its own (see
//! `docs/lifecycle.md`). The type is generic over that record so the queue can be model-checked
//! on its own (`runtime/tests/loom_lanes.rs`).

use super::sync::{AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

struct Lane<A> {
    next: u64,
    serving: u64,
    /// Tickets given back before they were served.
    cancelled: Vec<u64>,
    active: Option<A>,
    /// An execution on this NC ended with a device fault: reset the NC before re-arming it.
    dirty: bool,
}

impl<A> Lane<A> {
    fn advance(&mut self) {
        self.serving += 1;
        while let Some(i) = self.cancelled.iter().position(|&t| t == self.serving) {
            self.cancelled.swap_remove(i);
            self.serving += 1;
        }
    }
}

/// Tickets held inline (no allocation on the execute path for models of up to this many NCs).
const INLINE: usize = 8;

/// One request's tickets: `(nc, ticket)` in ascending NC order.
#[derive(Debug, Default)]
pub struct Tickets {
    inline: [(usize, u64); INLINE],
    n: usize,
    spill: Vec<(usize, u64)>,
}

impl Tickets {
    fn held(&self) -> &[(usize, u64)] {
        if self.spill.is_empty() {
            &self.inline[..self.n]
        } else {
            &self.spill
        }
    }
    fn held_mut(&mut self) -> &mut [(usize, u64)] {
        if self.spill.is_empty() {
            &mut self.inline[..self.n]
        } else {
            &mut self.spill
        }
    }
    fn push(&mut self, e: (usize, u64)) {
        if self.spill.is_empty() && self.n < INLINE {
            self.inline[self.n] = e;
            self.n += 1;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline[..self.n]);
            }
            self.spill.push(e);
        }
    }
    fn clear(&mut self) {
        self.n = 0;
        self.spill.clear();
    }
    /// The NCs the tickets are for.
    pub fn ncs(&self) -> impl Iterator<Item = usize> + '_ {
        self.held().iter().map(|&(nc, _)| nc)
    }
    /// Whether the request holds no ticket.
    pub fn is_empty(&self) -> bool {
        self.held().is_empty()
    }
}

/// Times a lanes lock was found held by another thread (process-wide).
static CONTENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Lanes-lock contentions so far (see [`crate::rt::lock_contentions`]).
pub fn contentions() -> u64 {
    CONTENDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The execution lanes of every NC of a runtime.
pub struct Lanes<A> {
    st: Mutex<Vec<Lane<A>>>,
    cv: Condvar,
    /// Threads blocked in [`Lanes::wait`] (changed under `st`): a release wakes only when
    /// there is someone to wake, so an uncontended execute makes no futex syscall.
    waiters: AtomicUsize,
}

impl<A: Clone> Lanes<A> {
    /// `ncs` idle lanes with nothing armed.
    pub fn new(ncs: usize) -> Self {
        let lanes =
            (0..ncs).map(|_| Lane { next: 0, serving: 0, cancelled: Vec::new(), active: None, dirty: false }).collect();
        Self { st: Mutex::new(lanes), cv: Condvar::new(), waiters: AtomicUsize::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Lane<A>>> {
        if let Ok(g) = self.st.try_lock() {
            return g;
        }
        CONTENDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of lanes.
    pub fn len(&self) -> usize {
        self.lock().len()
    }
    /// Whether there are no lanes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take one ticket on each of `ncs` (unknown NCs are ignored, duplicates count once).
    pub fn enqueue(&self, ncs: &[usize]) -> Tickets {
        let mut g = self.lock();
        let mut t = Tickets::default();
        for &nc in ncs {
            if nc < g.len() && !t.held().iter().any(|&(n, _)| n == nc) {
                t.push((nc, 0));
            }
        }
        t.held_mut().sort_unstable();
        for (nc, tk) in t.held_mut().iter_mut() {
            let l = &mut g[*nc];
            *tk = l.next;
            l.next += 1;
        }
        t
    }

    fn served(g: &[Lane<A>], t: &Tickets) -> bool {
        t.held().iter().all(|&(nc, tk)| g[nc].serving == tk)
    }

    /// Whether `t` is served on every lane (non-blocking: the XU worker polls it).
    pub fn ready(&self, t: &Tickets) -> bool {
        Self::served(&self.lock(), t)
    }

    /// Block until `t` is served on every lane.
    pub fn wait(&self, t: &Tickets) {
        let mut g = self.lock();
        while !Self::served(&g, t) {
            self.waiters.fetch_add(1, Ordering::Relaxed);
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Give the tickets back: a served lane moves on to its next ticket; an unserved ticket
    /// is cancelled (skipped when its turn comes).
    pub fn release(&self, t: &mut Tickets) {
        if t.is_empty() {
            return;
        }
        let mut g = self.lock();
        for &(nc, tk) in t.held() {
            let l = &mut g[nc];
            if l.serving == tk {
                l.advance();
            } else if tk > l.serving {
                l.cancelled.push(tk);
            }
        }
        // Read under the lock: a waiter counts itself under it before it sleeps.
        let wake = self.waiters.load(Ordering::Relaxed) > 0;
        drop(g);
        t.clear();
        if wake {
            self.cv.notify_all();
        }
    }

    /// The record of the model armed on `nc`.
    pub fn active(&self, nc: usize) -> Option<A> {
        self.lock().get(nc).and_then(|l| l.active.clone())
    }

    /// Whether `is_mine` holds for the model armed on every NC of `t` (the fast path of an
    /// execution: nothing to switch).
    pub fn all_active(&self, t: &Tickets, is_mine: impl Fn(&A) -> bool) -> bool {
        let g = self.lock();
        t.held().iter().all(|&(nc, _)| g[nc].active.as_ref().is_some_and(&is_mine))
    }

    /// Record `a` as armed on `nc` (None: nothing is armed, the next user re-arms fully);
    /// returns the previous record.
    pub fn set_active(&self, nc: usize, a: Option<A>) -> Option<A> {
        let mut g = self.lock();
        match g.get_mut(nc) {
            Some(l) => std::mem::replace(&mut l.active, a),
            None => None,
        }
    }

    /// Mark `nc` as needing a reset before its next re-arm (or clear the mark); returns the
    /// previous mark.
    pub fn set_dirty(&self, nc: usize, dirty: bool) -> bool {
        let mut g = self.lock();
        match g.get_mut(nc) {
            Some(l) => std::mem::replace(&mut l.dirty, dirty),
            None => false,
        }
    }
}
