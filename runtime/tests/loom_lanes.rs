//! loom model of the per-NC execution lanes ([`runtime::lanes`], compiled here against loom's
//! primitives): every interleaving of a few requests is explored.
//!
//! Each NC's lane has its own lock; a request on several NCs takes its tickets with all of
//! their locks held (locked in ascending NC order).
//!
//! - Mutual exclusion: requests on overlapping NC sets are never served together.
//! - No deadlock: requests taking tickets on several NCs (in either order) all complete,
//!   with a single-NC request queued on one of the shared lanes at the same time.
//! - One order: two multi-NC requests sharing lanes are served in the same order on each.
//! - The fused acquire ([`Lanes::acquire_into`]) tells truly whether the model is armed on its lanes.
//! - The XU hand-off: a request queued without blocking (the XU worker polls `ready`) and
//!   one given back before its turn (a cancelled ticket) never stall the lane.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

mod sync {
    pub use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    pub use loom::sync::{Condvar, Mutex, MutexGuard};

    /// `platform::sync::lock` for loom's mutex.
    pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `platform::sync::wait` for loom's condition variable.
    pub fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        cv.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[allow(dead_code)]
#[path = "../src/lanes.rs"]
mod lanes;

use lanes::Lanes;

/// Explore every interleaving with at most this many preemptions (keeps each model to
/// seconds; the bugs a lane can have — a lost wake-up, a stalled or doubly served ticket —
/// need one or two).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Per NC: how many requests are being served on it right now, and how many were served.
struct Inside {
    now: [AtomicUsize; 2],
    served: [AtomicUsize; 2],
}

impl Inside {
    fn new() -> Self {
        Self { now: [AtomicUsize::new(0), AtomicUsize::new(0)], served: [AtomicUsize::new(0), AtomicUsize::new(0)] }
    }
    /// Enter `ncs`; returns the request's place in each NC's service order (indexed by NC).
    fn enter(&self, ncs: &[usize]) -> [usize; 2] {
        let mut place = [usize::MAX; 2];
        for &nc in ncs {
            assert_eq!(self.now[nc].fetch_add(1, Ordering::SeqCst), 0, "two requests served on NC {nc}");
            place[nc] = self.served[nc].fetch_add(1, Ordering::SeqCst);
        }
        place
    }
    fn leave(&self, ncs: &[usize]) {
        for &nc in ncs {
            self.now[nc].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Run `ncs` as a blocking request (a synchronous execute) of model `id`, which arms itself
/// on its NCs: its place on each NC. `fused`: through [`Lanes::acquire_into`] (whose "already armed"
/// answer must match what the lanes hold once served), else `enqueue` + `wait`.
fn request(lanes: &Lanes<u64>, inside: &Inside, ncs: &[usize], id: u64, fused: bool) -> [usize; 2] {
    let (mut t, mine) = if fused {
        let mut t = lanes::Tickets::default();
        let mine = lanes.acquire_into(&mut t, ncs, |&a| a == id);
        (t, mine)
    } else {
        let t = lanes.enqueue(ncs);
        lanes.wait(&t);
        let mine = lanes.all_active(&t, |&a| a == id);
        (t, mine)
    };
    assert!(lanes.ready(&t));
    let place = inside.enter(ncs);
    assert_eq!(mine, ncs.iter().all(|&nc| lanes.active(nc) == Some(id)), "stale armed-model answer");
    for &nc in ncs {
        lanes.set_active(nc, Some(id));
    }
    inside.leave(ncs);
    lanes.release(&mut t);
    place
}

#[test]
fn overlapping_requests_are_exclusive_and_never_deadlock() {
    model(|| {
        let lanes = Arc::new(Lanes::<u64>::new(2));
        let inside = Arc::new(Inside::new());
        let reqs: [&'static [usize]; 2] = [&[0, 1], &[1, 0]];
        let hs: Vec<_> = reqs
            .into_iter()
            .enumerate()
            .map(|(i, ncs)| {
                let (lanes, inside) = (lanes.clone(), inside.clone());
                thread::spawn(move || request(&lanes, &inside, ncs, i as u64, false))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // All tickets served: a new request is served at once.
        let t = lanes.enqueue(&[0, 1]);
        assert!(lanes.ready(&t));
    });
}

#[test]
fn two_multi_nc_requests_and_a_single_nc_one_share_one_order() {
    model(|| {
        let lanes = Arc::new(Lanes::<u64>::new(2));
        let inside = Arc::new(Inside::new());
        // Model 1 is armed on both NCs to begin with; the single-NC request is model 1 too.
        lanes.set_active(0, Some(1));
        lanes.set_active(1, Some(1));
        let reqs: [(&'static [usize], u64, bool); 3] = [(&[1, 0], 0, false), (&[0, 1], 1, true), (&[1], 1, true)];
        let hs: Vec<_> = reqs
            .into_iter()
            .map(|(ncs, id, fused)| {
                let (lanes, inside) = (lanes.clone(), inside.clone());
                thread::spawn(move || request(&lanes, &inside, ncs, id, fused))
            })
            .collect();
        let places: Vec<[usize; 2]> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        // The two multi-NC requests come in the same order on NC 0 and on NC 1.
        let (a, b) = (places[0], places[1]);
        assert_eq!(a[0] < b[0], a[1] < b[1], "multi-NC requests served in different orders: {a:?} {b:?}");
        // The single-NC request was served once, on NC 1 only.
        assert_eq!(places[2][0], usize::MAX);
        assert_eq!(inside.served[1].load(Ordering::SeqCst), 3);
        let t = lanes.enqueue(&[1, 0]);
        assert!(lanes.ready(&t), "a lane was left serving a released ticket");
    });
}

#[test]
fn xu_hand_off_and_cancelled_tickets_do_not_stall() {
    model(|| {
        let lanes = Arc::new(Lanes::<u64>::new(1));
        let inside = Arc::new(Inside::new());
        // The XU worker: queue without blocking, poll until served, kick, complete, release;
        // its second request is abandoned (given back before its turn, or after it).
        let xu = {
            let (lanes, inside) = (lanes.clone(), inside.clone());
            thread::spawn(move || {
                let mut a = lanes.enqueue(&[0]);
                let mut b = lanes.enqueue(&[0]);
                while !lanes.ready(&a) {
                    thread::yield_now();
                }
                let _ = inside.enter(&[0]);
                lanes.set_active(0, Some(1));
                inside.leave(&[0]);
                lanes.release(&mut a);
                lanes.release(&mut b);
            })
        };
        // A synchronous execution on the same NC.
        let sync = {
            let (lanes, inside) = (lanes.clone(), inside.clone());
            thread::spawn(move || {
                let mut t = lanes.enqueue(&[0]);
                lanes.wait(&t);
                let _ = inside.enter(&[0]);
                lanes.set_active(0, Some(2));
                inside.leave(&[0]);
                lanes.release(&mut t);
            })
        };
        xu.join().unwrap();
        sync.join().unwrap();
        assert!(matches!(lanes.active(0), Some(1) | Some(2)));
        let t = lanes.enqueue(&[0]);
        assert!(lanes.ready(&t), "a cancelled ticket stalled the lane");
    });
}
