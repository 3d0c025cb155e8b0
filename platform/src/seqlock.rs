//! A sequence lock over 32-bit words that one writer publishes and readers in other processes
//! read without a message and without ever writing them (the register values a device's host
//! publishes to its clients: [`crate::published`]).
//!
//! Word [`SEQ`] is the sequence: odd while the writer changes the other words, even when they
//! are stable. The writer brackets each change with [`begin`] and [`end`] (writers are
//! serialised by the caller: a device's state lock); a reader ([`read`]) takes a word only when
//! the sequence was even and unchanged around its load, so it never returns a value from the
//! middle of a change — and, because [`begin`] is ordered before everything the writer does in
//! the change (memory it writes besides these words, such as a notification record), a reader
//! that has seen anything written during a change also sees that change's sequence, and waits
//! for its end.
//!
//! Written against `super::atomic` so that the loom model (`platform/tests/loom_seqlock.rs`)
//! compiles this file against loom's atomics.

use super::atomic::{fence, pause, AtomicU32, Ordering};

/// Index of the sequence word.
pub const SEQ: usize = 0;

/// Start a change (the one writer).
pub fn begin(words: &[AtomicU32]) {
    let Some(seq) = words.first() else { return };
    let s = seq.load(Ordering::Relaxed);
    seq.store(s | 1, Ordering::Relaxed);
    // Nothing the change writes (here or elsewhere in memory) may be seen before the odd
    // sequence.
    fence(Ordering::Release);
}

/// Store word `i` (inside a change; the sequence word and words out of range are left alone).
pub fn store(words: &[AtomicU32], i: usize, v: u32) {
    if i != SEQ {
        if let Some(w) = words.get(i) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

/// End the change: the words are stable again.
pub fn end(words: &[AtomicU32]) {
    let Some(seq) = words.first() else { return };
    let s = seq.load(Ordering::Relaxed);
    seq.store((s | 1).wrapping_add(1), Ordering::Release);
}

/// Word `i` as of the writer's last completed change, trying at most `tries` times while the
/// writer is busy: `None` when `i` is not a data word or the writer was changing the words on
/// every try (the caller then asks the writer itself).
pub fn read(words: &[AtomicU32], i: usize, tries: u32) -> Option<u32> {
    if i == SEQ {
        return None;
    }
    let (seq, w) = (words.first()?, words.get(i)?);
    // What the caller read before (e.g. a record the writer posted during a change) happens
    // before the sequence loads below.
    fence(Ordering::Acquire);
    for _ in 0..tries {
        let s1 = seq.load(Ordering::Acquire);
        if s1 & 1 == 0 {
            let v = w.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                return Some(v);
            }
        }
        pause();
    }
    None
}
