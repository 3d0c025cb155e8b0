//! loom model of the per-NC execution lanes ([`runtime::lanes`], compiled here against loom's
//! primitives): every interleaving of a few requests is explored.
//!
//! - Mutual exclusion: requests on overlapping NC sets are never served together.
//! - No deadlock: requests taking tickets on several NCs (in either order) all complete.
//! - The XU hand-off: a request queued without blocking (the XU worker polls `ready`) and
//!   one given back before its turn (a cancelled ticket) never stall the lane.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

mod sync {
    pub use loom::sync::atomic::{AtomicUsize, Ordering};
    pub use loom::sync::{Condvar, Mutex, MutexGuard};
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

/// Per NC: how many requests are being served on it right now.
struct Inside([AtomicUsize; 2]);

impl Inside {
    fn new() -> Self {
        Self([AtomicUsize::new(0), AtomicUsize::new(0)])
    }
    fn enter(&self, ncs: &[usize]) {
        for &nc in ncs {
            assert_eq!(self.0[nc].fetch_add(1, Ordering::SeqCst), 0, "two requests served on NC {nc}");
        }
    }
    fn leave(&self, ncs: &[usize]) {
        for &nc in ncs {
            self.0[nc].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn overlapping_requests_are_exclusive_and_never_deadlock() {
    model(|| {
        let lanes = Arc::new(Lanes::<u64>::new(2));
        let inside = Arc::new(Inside::new());
        let reqs: [&'static [usize]; 2] = [&[0, 1], &[1, 0]];
        let hs: Vec<_> = reqs
            .into_iter()
            .map(|ncs| {
                let (lanes, inside) = (lanes.clone(), inside.clone());
                thread::spawn(move || {
                    let mut t = lanes.enqueue(ncs);
                    lanes.wait(&t);
                    inside.enter(ncs);
                    inside.leave(ncs);
                    lanes.release(&mut t);
                })
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
                inside.enter(&[0]);
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
                inside.enter(&[0]);
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
