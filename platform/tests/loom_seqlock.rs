//! loom model of the sequence lock a device's host publishes register values under
//! ([`platform::seqlock`], compiled here against loom's atomics): every interleaving of a
//! writer's changes with a reader is explored.
//!
//! - A reader never returns a value from the middle of a change, and a later read is never
//!   older than an earlier one.
//! - A reader that has seen memory the writer wrote during a change (a notification record,
//!   written after the change began) then reads that change's words, never the ones before.
//! - With the writer done, a read gets the value on its first try.

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;

mod atomic {
    pub use loom::sync::atomic::{fence, AtomicU32, Ordering};

    /// A busy-wait step: let another thread run.
    pub fn pause() {
        loom::thread::yield_now();
    }
}

#[allow(dead_code)]
#[path = "../src/seqlock.rs"]
mod seqlock;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn area(n: usize) -> Arc<Vec<AtomicU32>> {
    Arc::new((0..n).map(|_| AtomicU32::new(0)).collect())
}

#[test]
fn a_reader_never_sees_half_a_change_nor_goes_back() {
    model(|| {
        let w = area(3);
        let writer = {
            let w = w.clone();
            thread::spawn(move || {
                for v in 1..=2u32 {
                    seqlock::begin(&w);
                    // Word 1 is written odd first: a torn read would see it.
                    seqlock::store(&w, 1, 100 + v);
                    seqlock::store(&w, 1, v);
                    seqlock::end(&w);
                }
            })
        };
        let a = seqlock::read(&w, 1, 3);
        let b = seqlock::read(&w, 1, 3);
        for v in [a, b].into_iter().flatten() {
            assert!(v <= 2, "a value from the middle of a change: {v}");
        }
        if let (Some(a), Some(b)) = (a, b) {
            assert!(b >= a, "read {b} after {a}");
        }
        writer.join().unwrap();
        assert_eq!(seqlock::read(&w, 1, 1), Some(2), "with the writer done the value is there at once");
    });
}

#[test]
fn a_reader_that_saw_a_record_of_a_change_sees_that_change() {
    model(|| {
        let w = area(2);
        // Memory outside the published words, written during the change before the word
        // (the device posts an error record, then latches the cause bit).
        let record = Arc::new(AtomicU32::new(0));
        let writer = {
            let (w, record) = (w.clone(), record.clone());
            thread::spawn(move || {
                seqlock::begin(&w);
                record.store(1, Ordering::Relaxed);
                seqlock::store(&w, 1, 0xca);
                seqlock::end(&w);
            })
        };
        if record.load(Ordering::Relaxed) == 1 {
            // As the client's harvest: the record seen, then the cause read. `None`: the change
            // was in progress on every try (the client then asks the host).
            if let Some(v) = seqlock::read(&w, 1, 4) {
                assert_eq!(v, 0xca, "a value from before the change that posted the record");
            }
        }
        writer.join().unwrap();
    });
}

#[test]
fn the_sequence_word_and_words_out_of_range_are_not_data() {
    model(|| {
        let w = area(2);
        assert_eq!(seqlock::read(&w, 0, 1), None);
        assert_eq!(seqlock::read(&w, 2, 1), None);
        seqlock::store(&w, 0, 5);
        seqlock::store(&w, 2, 5);
        assert_eq!(w[0].load(Ordering::Relaxed), 0, "a store never touches the sequence");
    });
}
