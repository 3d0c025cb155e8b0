//! Per-NeuronCore execution lanes: a FIFO ticket queue per NC, and which model's rings,
//! semaphores and streams are currently armed on it.
//!
//! Every user of an NC's hardware — an execution (sync or through an XU), a load staging a
//! graph, an unload tearing one down — first takes one ticket on each NC it needs, all in one
//! atomic step ([`Lanes::enqueue`]), and waits until it is served on all of them. Each lane has
//! its own lock, so requests on different NCs share nothing. A request on several NCs locks
//! their lanes in ascending NC order and takes its tickets with all of them held, so any two
//! requests are in the same order on every lane they share: they can never wait on each other
//! in a cycle. Each lane serves strictly in arrival order (no starvation). A ticket given back
//! before it was served is cancelled and skipped.
//!
//! Waiting needs no lock once served (the lane publishes the ticket it serves in an atomic);
//! a release wakes the lane's condition variable only when a thread sleeps on it, so an
//! uncontended request makes no futex syscall.
//!
//! The lane also records the model armed on the NC ([`Lanes::active`]): when a request for
//! another model is served, the runtime parks the armed model and re-arms its own (see
//! `docs/lifecycle.md`). The type is generic over that record so the queue can be model-checked
//! on its own (`runtime/tests/loom_lanes.rs`).

use super::sync::{lock, wait, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// A lane's queue and armed model (under the lane's lock).
struct Queue<A> {
    next: u64,
    serving: u64,
    /// Tickets given back before they were served.
    cancelled: Vec<u64>,
    active: Option<A>,
    /// An execution on this NC ended with a device fault: reset the NC before re-arming it.
    dirty: bool,
}

impl<A> Queue<A> {
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

/// Times a lane's lock was found held by another thread (process-wide; only written when it
/// happens, so it costs nothing uncontended).
static CONTENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Lane-lock contentions so far (see [`crate::rt::lock_contentions`]).
pub fn contentions() -> u64 {
    CONTENDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// One NC's lane, on cache lines of its own (lanes of NCs driven from different threads do not
/// share a line).
#[repr(align(128))]
struct Lane<A> {
    q: Mutex<Queue<A>>,
    /// `q.serving`, published for lock-free [`Lanes::ready`] / [`Lanes::wait`] (stored under
    /// the lock, with Release: a request that sees its ticket served sees what the previous
    /// holder did).
    serving: AtomicU64,
    cv: Condvar,
    /// Threads blocked on `cv` (changed under `q`): a release wakes only when there is
    /// someone to wake.
    waiters: AtomicUsize,
}

impl<A> Lane<A> {
    fn lock(&self) -> MutexGuard<'_, Queue<A>> {
        if let Ok(g) = self.q.try_lock() {
            return g;
        }
        CONTENDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.q)
    }
    fn served(&self, tk: u64) -> bool {
        self.serving.load(Ordering::Acquire) == tk
    }
}

/// What [`Lanes::take`] saw: every ticket served at once, and every armed model `is_mine`.
#[derive(Default)]
struct Served {
    all: bool,
    mine: bool,
}

/// The execution lanes of every NC of a runtime.
pub struct Lanes<A> {
    lanes: Vec<Lane<A>>,
}

impl<A: Clone> Lanes<A> {
    /// `ncs` idle lanes with nothing armed.
    pub fn new(ncs: usize) -> Self {
        let lanes = (0..ncs)
            .map(|_| Lane {
                q: Mutex::new(Queue { next: 0, serving: 0, cancelled: Vec::new(), active: None, dirty: false }),
                serving: AtomicU64::new(0),
                cv: Condvar::new(),
                waiters: AtomicUsize::new(0),
            })
            .collect();
        Self { lanes }
    }

    /// Number of lanes.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }
    /// Whether there are no lanes.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Take one ticket on each of `ncs` (unknown NCs are ignored, duplicates count once): the
    /// lanes are locked in ascending NC order and all stay locked until every ticket is taken.
    pub fn enqueue(&self, ncs: &[usize]) -> Tickets {
        let mut t = self.tickets(ncs);
        let mut served = Served::default();
        self.take(t.held_mut(), &|_: &A| false, &mut served);
        t
    }

    /// [`Lanes::enqueue`], [`Lanes::wait`] and [`Lanes::all_active`] in one: takes the tickets
    /// and returns whether `is_mine` holds for the model armed on every lane. A lane that serves the
    /// ticket at once is checked under the lock the ticket was taken with (nobody but the
    /// served request changes what is armed), so an uncontended request locks each lane once
    /// here and once to give the ticket back.
    ///
    /// The tickets are taken into `t`, so the caller's ticket list is filled where it lives
    /// rather than moved out (it is a few cache lines: the inline entries). `t` must hold no
    /// ticket: any it holds is forgotten, not given back (its lane would stall).
    pub fn acquire_into(&self, t: &mut Tickets, ncs: &[usize], is_mine: impl Fn(&A) -> bool) -> bool {
        self.tickets_into(t, ncs);
        let mut served = Served { all: true, mine: true };
        self.take(t.held_mut(), &is_mine, &mut served);
        if served.all {
            return served.mine;
        }
        self.wait(t);
        self.all_active(t, is_mine)
    }

    /// One unfilled ticket per known, distinct NC of `ncs`, in ascending NC order.
    fn tickets(&self, ncs: &[usize]) -> Tickets {
        let mut t = Tickets::default();
        self.tickets_into(&mut t, ncs);
        t
    }

    /// [`Lanes::tickets`] into `t` (emptied first).
    fn tickets_into(&self, t: &mut Tickets, ncs: &[usize]) {
        t.clear();
        if let &[nc] = ncs {
            // One NC (the common case): nothing to deduplicate or sort.
            if nc < self.lanes.len() {
                t.inline[0] = (nc, 0);
                t.n = 1;
            }
            return;
        }
        for &nc in ncs {
            if nc < self.lanes.len() && !t.held().iter().any(|&(n, _)| n == nc) {
                t.push((nc, 0));
            }
        }
        t.held_mut().sort_unstable();
    }

    /// Lock the first lane of `held`, take its ticket (noting in `served` whether the lane
    /// serves it at once and, if so, whether `is_mine` holds for its armed model), recurse
    /// into the rest, then unlock (the guards live on the stack: no allocation).
    fn take<F: Fn(&A) -> bool>(&self, held: &mut [(usize, u64)], is_mine: &F, served: &mut Served) {
        let Some(((nc, tk), rest)) = held.split_first_mut() else { return };
        let mut g = self.lanes[*nc].lock();
        *tk = g.next;
        g.next += 1;
        if served.all {
            if g.serving == *tk {
                served.mine &= g.active.as_ref().is_some_and(is_mine);
            } else {
                served.all = false;
            }
        }
        self.take(rest, is_mine, served);
        drop(g);
    }

    /// Whether `t` is served on every lane (non-blocking, lock-free: the XU worker polls it).
    pub fn ready(&self, t: &Tickets) -> bool {
        t.held().iter().all(|&(nc, tk)| self.lanes[nc].served(tk))
    }

    /// Block until `t` is served on every lane (lane by lane in ascending NC order: a lane
    /// keeps serving a ticket until it is given back, so one served stays served).
    pub fn wait(&self, t: &Tickets) {
        for &(nc, tk) in t.held() {
            let l = &self.lanes[nc];
            if l.served(tk) {
                continue;
            }
            let mut g = l.lock();
            while g.serving != tk {
                l.waiters.fetch_add(1, Ordering::Relaxed);
                g = wait(&l.cv, g);
                l.waiters.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Give the tickets back: a served lane moves on to its next ticket; an unserved ticket
    /// is cancelled (skipped when its turn comes).
    pub fn release(&self, t: &mut Tickets) {
        for &(nc, tk) in t.held() {
            let l = &self.lanes[nc];
            let mut g = l.lock();
            if g.serving == tk {
                g.advance();
                l.serving.store(g.serving, Ordering::Release);
            } else if tk > g.serving {
                g.cancelled.push(tk);
            }
            // Read under the lock: a waiter counts itself under it before it sleeps.
            let wake = l.waiters.load(Ordering::Relaxed) > 0;
            drop(g);
            if wake {
                l.cv.notify_all();
            }
        }
        t.clear();
    }

    /// The record of the model armed on `nc`.
    pub fn active(&self, nc: usize) -> Option<A> {
        self.lanes.get(nc).and_then(|l| l.lock().active.clone())
    }

    /// Whether `is_mine` holds for the model armed on every NC of `t` (the fast path of an
    /// execution: nothing to switch).
    pub fn all_active(&self, t: &Tickets, is_mine: impl Fn(&A) -> bool) -> bool {
        t.held().iter().all(|&(nc, _)| self.lanes[nc].lock().active.as_ref().is_some_and(&is_mine))
    }

    /// Record `a` as armed on `nc` (None: nothing is armed, the next user re-arms fully);
    /// returns the previous record.
    pub fn set_active(&self, nc: usize, a: Option<A>) -> Option<A> {
        match self.lanes.get(nc) {
            Some(l) => std::mem::replace(&mut l.lock().active, a),
            None => None,
        }
    }

    /// Mark `nc` as needing a reset before its next re-arm (or clear the mark); returns the
    /// previous mark.
    pub fn set_dirty(&self, nc: usize, dirty: bool) -> bool {
        match self.lanes.get(nc) {
            Some(l) => std::mem::replace(&mut l.lock().dirty, dirty),
            None => false,
        }
    }
}
