//! The posted-write ring's two ends ([`vfio::user::ring`]) one step at a time: entries, order,
//! a full ring, the sleep handshake, and what a client that breaks the protocol gets.
//! (Every interleaving of the two ends: `loom_ring.rs`.)

use std::sync::atomic::{AtomicU64, Ordering};

use vfio::user::ring::*;

const KIND_WRITE: u64 = 1;
const KIND_MESSAGE: u64 = 2;
const OFFSET_MASK: u64 = (1 << 48) - 1;

fn ring(cap: u32) -> Vec<AtomicU64> {
    (0..words_for(cap)).map(|_| AtomicU64::new(0)).collect()
}

fn write(offset: u64, value: u64) -> [u64; 2] {
    Entry::Write { region: 0, offset, width: 4, value }.encode().expect("encodable")
}

#[test]
fn entries_round_trip_and_garbage_does_not_decode() {
    for e in [
        Entry::Write { region: 4, offset: OFFSET_MASK, width: 8, value: u64::MAX },
        Entry::Write { region: 0, offset: 0x1bfc, width: 4, value: 1 },
        Entry::Message,
    ] {
        assert_eq!(Entry::decode(e.encode().expect("encodable")), Some(e));
    }
    assert_eq!(Entry::Write { region: 0, offset: 1 << 48, width: 4, value: 0 }.encode(), None);
    assert_eq!(Entry::Write { region: 0, offset: 0, width: 2, value: 0 }.encode(), None);
    assert_eq!(Entry::decode([0, 0]), None, "a zeroed slot");
    assert_eq!(Entry::decode([KIND_WRITE << 60 | 3 << 56, 0]), None, "width 3");
    assert_eq!(Entry::decode([KIND_WRITE << 60 | 4 << 56, 1 << 32]), None, "a 4-byte write of 33 bits");
    assert_eq!(Entry::decode([KIND_MESSAGE << 60 | 1, 0]), None);
    assert_eq!(Entry::decode([7 << 60, 0]), None);
}

#[test]
fn pushes_are_taken_in_order_until_full_and_wrap() {
    let w = ring(4);
    let (mut p, mut c) = (Producer::new(4), Consumer::new(4));
    for round in 0..3u64 {
        for i in 0..4 {
            assert_eq!(p.push(&w, write(i, round)), Pushed::Posted { wake: false });
        }
        assert_eq!(p.push(&w, write(9, 9)), Pushed::Full);
        assert!(!p.drained(&w));
        for i in 0..4 {
            assert_eq!(c.peek(&w), Ok(Some(Entry::Write { region: 0, offset: i, width: 4, value: round })));
            c.done(&w);
        }
        assert_eq!(c.peek(&w), Ok(None));
        assert!(p.drained(&w));
    }
}

#[test]
fn a_sleeping_consumer_is_woken_once_and_a_late_sleep_is_taken_back() {
    let w = ring(4);
    let (mut p, mut c) = (Producer::new(4), Consumer::new(4));
    assert!(c.sleep(&w));
    assert_eq!(p.push(&w, write(0, 1)), Pushed::Posted { wake: true });
    assert_eq!(p.push(&w, write(0, 2)), Pushed::Posted { wake: false }, "the bell rings once per sleep");
    c.awake(&w);
    assert!(!c.sleep(&w), "entries pending: no sleep");
    assert_eq!(w[TAIL].load(Ordering::Relaxed) & SLEEP, 0, "the announcement was taken back");
    c.done(&w);
    c.done(&w);
    assert!(c.sleep(&w));
}

#[test]
fn a_client_that_corrupts_the_ring_is_refused() {
    let w = ring(4);
    let c = Consumer::new(4);
    w[TAIL].store(5, Ordering::Relaxed);
    assert_eq!(c.pending(&w), Err(RingError::Overrun { ahead: 5, cap: 4 }));
    w[TAIL].store(u32::MAX as u64, Ordering::Relaxed);
    assert!(matches!(c.peek(&w), Err(RingError::Overrun { .. })), "a tail behind the head");
    w[TAIL].store(1, Ordering::Relaxed);
    w[FIRST].store(0xdead, Ordering::Relaxed);
    assert_eq!(c.peek(&w), Err(RingError::BadEntry { index: 0, meta: 0xdead, value: 0 }));
    // The head the consumer keeps is its own: a client writing the shared one changes nothing.
    w[HEAD].store(3, Ordering::Relaxed);
    assert_eq!(c.pending(&w), Ok(1));
    assert!(fits(4, words_for(4)) && !fits(3, 100) && !fits(1, 100) && !fits(8, words_for(4)));
}
