//! The runtime's own locks and the one order they are taken in (docs/architecture.md, "Locks").
//!
//! Each lock of the runtime's state is a [`Ranked`] mutex or a [`RankedRw`] lock carrying its
//! place in the order, its [`Rank`]. A thread may take a lock only while every lock it already
//! holds ranks lower. Debug builds check this on every acquisition — a thread-local stack of the
//! ranks held — and panic on a lock taken out of order (before it is taken, so a wrong order
//! shows as a panic in any test that runs the path, not as a deadlock in the one run that
//! interleaves badly). Release builds compile the check out: a guard is then the lock's own.
//!
//! Taking a lock that another thread holds counts a contention ([`contentions`], reported by
//! [`crate::rt::lock_contentions`]); poisoning is tolerated as [`platform::sync`] does.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The places in the order, lowest first: a lock is taken only while every lock held ranks
/// lower. An NC lane's tickets rank like a lock ([`Rank::Lane`], held by [`hold`]): a thread
/// that waits for tickets while it holds a model's `exec` would wait for an execution that
/// waits for that `exec`. Locks outside the runtime's state that call out to nothing ranked
/// (an observer's own data, the profile sinks) are [`Rank::Leaf`]: nothing ranked, and no
/// other leaf, is taken while one is held. A lane's own queue lock (`lanes.rs`, model-checked
/// with loom against loom's primitives), an execution unit's queue and condition variable
/// (`xu.rs`) and hal's locks are leaves by construction: their modules call nothing of the
/// runtime while holding them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// `Runtime::state`, NRT_INIT_STATE: `init` holds it while it opens and installs the
    /// session.
    State,
    /// `Runtime::xus`, the execution units by NC.
    Xus,
    /// `Runtime::models`, the loaded models by id.
    Models,
    /// Tickets on NC lanes, from when a thread waits for them until it gives them back
    /// (`rt::Held`): an execute, a load staging its graph, an unload tearing one down hold
    /// them while they take the model's `exec` and what ranks above.
    Lane,
    /// `Runtime::load_progress`, the load progress callback.
    LoadProgress,
    /// `Model::exec`, a model's device state (its executions one at a time).
    Exec,
    /// A model's lifecycle (state, references, poison).
    Lifecycle,
    /// `Session::placed`, the models placed on each NC.
    Placed,
    /// `Runtime::session`, the current session: held only to clone or swap its `Arc`, so
    /// nothing is taken under it, and it may be taken under any other (a profile sink called
    /// on the execute path, under the model's `exec`, asks the runtime for a logical NC).
    Session,
    /// A leaf: an observer's or a sink's own data (`counters::models`, `debug_endpoint`,
    /// `profile`), taken under anything, with nothing taken under it.
    Leaf,
}

/// Times a ranked lock was found held by another thread, process-wide.
static CONTENDED: AtomicU64 = AtomicU64::new(0);

/// Ranked-lock contentions so far.
pub fn contentions() -> u64 {
    CONTENDED.load(Ordering::Relaxed)
}

#[cfg(debug_assertions)]
mod held {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        /// The ranks this thread holds, in the order taken (so ascending).
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Record `r` as taken; panics if a lock of equal or higher rank is held.
    pub(super) fn acquire(r: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(&top) = h.last() {
                if top >= r {
                    let held = h.clone();
                    drop(h);
                    panic!("lock order: {r:?} taken while holding {held:?} (docs/architecture.md, Locks)");
                }
            }
            h.push(r);
        });
    }

    /// Record `r` as released (guards may drop in any order).
    pub(super) fn release(r: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&x| x == r) {
                h.remove(i);
            }
        });
    }
}

/// A guard of a ranked lock: the lock's own guard, and in debug builds its rank's entry on the
/// thread's stack, removed on drop.
pub struct Guard<G> {
    g: G,
    #[cfg(debug_assertions)]
    rank: Rank,
}

impl<G> Guard<G> {
    #[inline]
    fn new(g: G, rank: Rank) -> Self {
        let _ = rank;
        Self {
            g,
            #[cfg(debug_assertions)]
            rank,
        }
    }
}

#[cfg(debug_assertions)]
impl<G> Drop for Guard<G> {
    fn drop(&mut self) {
        held::release(self.rank);
    }
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;
    #[inline]
    fn deref(&self) -> &G::Target {
        &self.g
    }
}

impl<G: DerefMut> DerefMut for Guard<G> {
    #[inline]
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.g
    }
}

/// A rank held without a lock of the runtime's own (an NC lane's tickets): [`hold`] checks
/// the order and records it, dropping it releases it. It must be dropped on the thread that
/// took it (debug builds check).
#[derive(Debug)]
pub struct RankHold {
    #[cfg(debug_assertions)]
    rank: Rank,
    #[cfg(debug_assertions)]
    thread: std::thread::ThreadId,
}

/// Check the order for `rank` and record it as held by this thread until the returned value
/// is dropped (debug builds; release builds: nothing).
#[inline]
pub fn hold(rank: Rank) -> RankHold {
    check(rank);
    RankHold {
        #[cfg(debug_assertions)]
        rank,
        #[cfg(debug_assertions)]
        thread: std::thread::current().id(),
    }
}

#[cfg(debug_assertions)]
impl Drop for RankHold {
    fn drop(&mut self) {
        assert_eq!(
            std::thread::current().id(),
            self.thread,
            "{:?} released on another thread than it was taken on (docs/architecture.md, Locks)",
            self.rank
        );
        held::release(self.rank);
    }
}

/// Check the order before taking a lock of rank `r` (debug builds only).
#[inline]
fn check(r: Rank) {
    #[cfg(debug_assertions)]
    held::acquire(r);
    #[cfg(not(debug_assertions))]
    let _ = r;
}

/// A mutex with its place in the lock order.
#[derive(Debug)]
pub struct Ranked<T> {
    rank: Rank,
    m: Mutex<T>,
}

impl<T> Ranked<T> {
    /// `v` under a mutex of rank `rank`.
    pub const fn new(rank: Rank, v: T) -> Self {
        Self { rank, m: Mutex::new(v) }
    }

    /// Lock it (debug builds: checking the order first), counting a contention when another
    /// thread holds it.
    #[inline]
    pub fn lock(&self) -> Guard<MutexGuard<'_, T>> {
        check(self.rank);
        let g = platform::sync::try_lock(&self.m).unwrap_or_else(|| {
            CONTENDED.fetch_add(1, Ordering::Relaxed);
            platform::sync::lock(&self.m)
        });
        Guard::new(g, self.rank)
    }
}

/// A reader-writer lock with its place in the lock order.
#[derive(Debug)]
pub struct RankedRw<T> {
    rank: Rank,
    l: RwLock<T>,
}

impl<T> RankedRw<T> {
    /// `v` under a reader-writer lock of rank `rank`.
    pub const fn new(rank: Rank, v: T) -> Self {
        Self { rank, l: RwLock::new(v) }
    }

    /// Read-lock it (order checked in debug builds; a writer holding it counts a contention).
    #[inline]
    pub fn read(&self) -> Guard<RwLockReadGuard<'_, T>> {
        check(self.rank);
        let g = platform::sync::try_read(&self.l).unwrap_or_else(|| {
            CONTENDED.fetch_add(1, Ordering::Relaxed);
            platform::sync::read(&self.l)
        });
        Guard::new(g, self.rank)
    }

    /// Write-lock it (order checked in debug builds; anyone holding it counts a contention).
    pub fn write(&self) -> Guard<RwLockWriteGuard<'_, T>> {
        check(self.rank);
        let g = platform::sync::try_write(&self.l).unwrap_or_else(|| {
            CONTENDED.fetch_add(1, Ordering::Relaxed);
            platform::sync::write(&self.l)
        });
        Guard::new(g, self.rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_in_rank_order_nest() {
        let a = Ranked::new(Rank::State, 1);
        let c = Ranked::new(Rank::Exec, 3);
        let b = RankedRw::new(Rank::Session, 2);
        let ga = a.lock();
        let gc = c.lock();
        let gb = b.read();
        assert_eq!(*ga + *gb + *gc, 6);
        // Guards may drop in any order; the lock is then free to take again.
        drop(gb);
        drop(ga);
        drop(gc);
        let gb = b.write();
        assert_eq!(*gb, 2);
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_lock_taken_out_of_order_panics_in_debug_builds() {
        let models = std::sync::Arc::new(Ranked::new(Rank::Models, ()));
        let xus = std::sync::Arc::new(Ranked::new(Rank::Xus, ()));
        let (m, x) = (models.clone(), xus.clone());
        // On a thread of its own: the panic poisons nothing this test reads afterwards.
        let r = std::thread::spawn(move || {
            let _m = m.lock();
            let _x = x.lock();
        })
        .join();
        let msg = r.expect_err("out of order must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("lock order: Xus taken while holding [Models]"), "{msg}");
        // In order it is fine, and the failed thread left nothing recorded here.
        let _x = xus.lock();
        let _m = models.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    fn the_same_rank_twice_panics_in_debug_builds() {
        let r = std::thread::spawn(|| {
            let a = Ranked::new(Rank::Exec, ());
            let b = Ranked::new(Rank::Exec, ());
            let _a = a.lock();
            let _b = b.lock();
        })
        .join();
        assert!(r.is_err());
    }

    #[cfg(debug_assertions)]
    #[test]
    fn waiting_for_lane_tickets_under_a_models_exec_panics_and_above_them_is_fine() {
        let r = std::thread::spawn(|| {
            let exec = Ranked::new(Rank::Exec, ());
            let _e = exec.lock();
            let _lane = hold(Rank::Lane);
        })
        .join();
        let msg = r.expect_err("Exec then Lane must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("lock order: Lane taken while holding [Exec]"), "{msg}");
        // Tickets first, then the model's exec: the order.
        let exec = Ranked::new(Rank::Exec, ());
        let lane = hold(Rank::Lane);
        let e = exec.lock();
        drop(e);
        drop(lane);
        // Held tickets and then the loaded-models table (which a waiter for tickets may hold):
        // out of order.
        let r = std::thread::spawn(|| {
            let models = Ranked::new(Rank::Models, ());
            let _lane = hold(Rank::Lane);
            let _m = models.lock();
        })
        .join();
        assert!(r.is_err());
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_ranked_lock_or_another_leaf_under_a_leaf_panics() {
        for second in [Rank::Session, Rank::State, Rank::Leaf] {
            let r = std::thread::spawn(move || {
                let leaf = Ranked::new(Rank::Leaf, ());
                let other = Ranked::new(second, ());
                let _l = leaf.lock();
                let _o = other.lock();
            })
            .join();
            assert!(r.is_err(), "{second:?} under a leaf");
        }
        // A leaf under anything is fine.
        let (s, l) = (RankedRw::new(Rank::Session, ()), Ranked::new(Rank::Leaf, ()));
        let _s = s.read();
        let _l = l.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_rank_hold_moved_to_another_thread_is_refused() {
        let h = hold(Rank::Lane);
        let r = std::thread::spawn(move || drop(h)).join();
        assert!(r.is_err());
        // This thread's record of it stays until the thread ends: clear it for the tests that
        // share the thread (none take Lane, but keep the stack clean).
        #[cfg(debug_assertions)]
        held::release(Rank::Lane);
    }

    #[test]
    fn a_poisoned_ranked_lock_is_taken_as_it_is() {
        let m = std::sync::Arc::new(Ranked::new(Rank::Placed, 7));
        let m2 = m.clone();
        let r = std::thread::spawn(move || {
            let mut g = m2.lock();
            *g = 8;
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*m.lock(), 8);
    }
}
