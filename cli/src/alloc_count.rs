//! Heap-allocation counting for `bench exec`. [`Counting`] is the global allocator of the
//! `neuron-vfio-bench` binary only; the production `neuron-vfio` binary uses the system
//! allocator unchanged, so there [`active`] is false and nothing is counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Heap allocations made by this process (counted by [`Counting`]).
static ALLOCS: AtomicU64 = AtomicU64::new(0);

/// Live heap bytes and their peak since [`reset_peak`].
static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

fn grow(n: usize) {
    let now = LIVE.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrink(n: usize) {
    LIVE.fetch_sub(n as u64, Ordering::Relaxed);
}

/// Start a new peak-heap measurement from the current live bytes.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Peak live heap bytes since [`reset_peak`] (counting allocator only).
pub fn peak_live_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

thread_local! {
    /// Heap allocations made by the current thread.
    static THREAD_ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// Whether [`Counting`] is this process's global allocator: it has counted allocations
/// (every process allocates before a command runs: argument parsing does).
pub fn active() -> bool {
    ALLOCS.load(Ordering::Relaxed) > 0
}

/// Allocations made by this process so far.
pub fn process_allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Allocations made by the calling thread so far.
pub fn thread_allocs() -> u64 {
    THREAD_ALLOCS.try_with(|c| c.get()).unwrap_or(0)
}

/// A global allocator that counts allocations and delegates to the system allocator.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counter is a relaxed atomic with no effect on memory safety.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        grow(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        grow(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        grow(n);
        shrink(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        shrink(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}
