//! loom model of the posted-write ring of a vfio-user connection's fast path
//! ([`vfio::user::ring`], compiled here against loom's atomics): a client posting writes and a
//! server draining them and sleeping when it finds none, in every interleaving.
//!
//! - Every entry arrives once, in order, whole.
//! - No wake-up is lost: a server that sleeps while entries are posted is always woken (loom
//!   reports a server waiting forever as a deadlock).
//! - A full ring makes the client wait for the server, never overwrite an entry.
//! - The bell rings at most once per announced sleep.

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

mod atomic {
    pub use loom::sync::atomic::{AtomicU64, Ordering};
}

#[allow(dead_code)]
#[path = "../src/user/ring.rs"]
mod ring;

use ring::{Consumer, Entry, Producer, Pushed};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// The eventfd: a counter the client adds to and the server waits on.
#[derive(Default)]
struct Bell {
    count: Mutex<u64>,
    cv: Condvar,
    rings: AtomicUsize,
}

impl Bell {
    fn ring(&self) {
        self.rings.fetch_add(1, Ordering::Relaxed);
        *self.count.lock().unwrap() += 1;
        self.cv.notify_one();
    }
    fn wait(&self) {
        let mut c = self.count.lock().unwrap();
        while *c == 0 {
            c = self.cv.wait(c).unwrap();
        }
        *c = 0;
    }
}

fn run(cap: u32, n: u64) {
    let w: Arc<Vec<AtomicU64>> = Arc::new((0..ring::words_for(cap)).map(|_| AtomicU64::new(0)).collect());
    let bell = Arc::new(Bell::default());
    // Sleeps the server announced (some taken back: entries had arrived).
    let sleeps = Arc::new(AtomicUsize::new(0));
    let server = {
        let (w, bell, sleeps) = (w.clone(), bell.clone(), sleeps.clone());
        thread::spawn(move || {
            let mut c = Consumer::new(cap);
            let mut got = 0u64;
            while got < n {
                match c.peek(&w).expect("a well-behaved client") {
                    Some(Entry::Write { offset, value, .. }) => {
                        assert_eq!((offset, value), (got, got * 3), "entries whole and in order");
                        c.done(&w);
                        got += 1;
                    }
                    Some(Entry::Message) => panic!("no message was posted"),
                    None => {
                        sleeps.fetch_add(1, Ordering::Relaxed);
                        if c.sleep(&w) {
                            bell.wait();
                            c.awake(&w);
                        }
                    }
                }
            }
        })
    };
    let mut p = Producer::new(cap);
    for i in 0..n {
        let e = Entry::Write { region: 0, offset: i, width: 8, value: i * 3 }.encode().expect("encodable");
        loop {
            match p.push(&w, e) {
                Pushed::Full => thread::yield_now(),
                Pushed::Posted { wake } => {
                    if wake {
                        bell.ring();
                    }
                    break;
                }
            }
        }
    }
    server.join().unwrap();
    assert!(p.drained(&w));
    assert!(
        bell.rings.load(Ordering::Relaxed) <= sleeps.load(Ordering::Relaxed),
        "at most one bell per announced sleep"
    );
}

#[test]
fn every_write_arrives_in_order_and_no_wake_up_is_lost() {
    model(|| run(4, 2));
}

#[test]
fn a_full_ring_holds_the_client_back() {
    model(|| run(2, 3));
}
