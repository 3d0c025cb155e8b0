//! A cheap clock for deadlines: `CLOCK_MONOTONIC_COARSE`, the monotonic clock as of the last
//! timer tick. The kernel's vDSO returns it from its data page without reading the time
//! source, so it costs a fraction of a `CLOCK_MONOTONIC` read (measured on the 2-core CI
//! machine: ≈ 5 ns against ≈ 26 ns), at the resolution of a tick ([`coarse_resolution`]: 1–10
//! ms depending on the kernel's HZ). For timeouts and probe intervals of a millisecond and
//! more, never for timings.
//!
//! [`coarse_now`] gives the reading as an [`Instant`]: the coarse clock's advance since the
//! first call added to an `Instant` taken then. Such instants are consistent with each other
//! (their differences are the coarse clock's); against `Instant::now()` they may be off either
//! way, so the two are not to be mixed in one comparison.
//!
//! **How far a coarse reading lags.** `clock_getres` says one tick, but that is not a bound:
//! the reading is the precise time of the clock's last update, and on a virtual machine (or a
//! tickless kernel) updates come late — a lag of 7.3 ms was measured against a 4 ms
//! `clock_getres` on a 6.18 kernel in a VM. An interval measured as the difference of two
//! coarse readings can therefore come out *longer* than it was, by as much as the first
//! reading lagged, whatever padding by `clock_getres` is added. [`Interval`] measures
//! deadlines so that this cannot happen on any kernel: its start becomes firm only at the
//! first reading that shows the clock updated after the start was read, a reading that is no
//! earlier than the start itself. What it assumes of the kernel is only what defines the
//! coarse clock — a reading is the precise time of an update made at or before it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::time::{clock_getres, clock_gettime, ClockId};

/// The coarse clock in ns, or None where the kernel does not offer it.
fn coarse_ns() -> Option<u64> {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE).ok()?;
    let secs = u64::try_from(t.tv_sec()).ok()?;
    let nanos = u64::try_from(t.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// The coarse clock as an [`Instant`] (see the module documentation); `Instant::now()` where
/// the kernel has no coarse clock.
pub fn coarse_now() -> Instant {
    static BASE: OnceLock<Option<(Instant, u64)>> = OnceLock::new();
    let base = BASE.get_or_init(|| coarse_ns().map(|ns| (Instant::now(), ns)));
    match (base, coarse_ns()) {
        (Some((at, ns0)), Some(ns)) => {
            at.checked_add(Duration::from_nanos(ns.saturating_sub(*ns0))).unwrap_or_else(Instant::now)
        }
        _ => Instant::now(),
    }
}

/// The coarse clock's resolution (one timer tick); zero where the kernel has no coarse clock
/// ([`coarse_now`] then reads the precise clock).
pub fn coarse_resolution() -> Duration {
    match (coarse_ns(), clock_getres(ClockId::CLOCK_MONOTONIC_COARSE)) {
        (Some(_), Ok(r)) => Duration::from(r),
        _ => Duration::ZERO,
    }
}

/// The clock an [`Interval`] is given readings of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockKind {
    /// A precise clock (`Instant::now()`, or an injected test clock): a reading is the time.
    #[default]
    Precise,
    /// The coarse clock ([`coarse_now`]): a reading is the time of the clock's last update,
    /// which may lag by any amount.
    Coarse,
}

/// The elapsed time of an interval for deadlines, never longer than the interval really is,
/// on either clock: a deadline checked with [`Interval::elapsed`] never passes early.
///
/// On a precise clock the start is the reading given to [`Interval::begin`]. On the coarse
/// clock that reading may lag the true start by more than a tick (module documentation), so
/// it is only provisional: while every later reading equals it, nothing has elapsed; the first
/// later reading that is greater is the time of an update the clock made after the start was
/// read, so it is no earlier than the start, and the interval counts from it. The cost is
/// lateness, never earliness: a deadline passes at most one update interval plus the final
/// reading's lag after it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interval {
    start: Option<Instant>,
    firm: bool,
}

impl Interval {
    /// Start the interval at `now`, a reading of a clock of kind `kind`.
    pub fn begin(&mut self, now: Instant, kind: ClockKind) {
        self.start = Some(now);
        self.firm = kind == ClockKind::Precise;
    }
    /// Start it at `now` unless it has started.
    pub fn begin_once(&mut self, now: Instant, kind: ClockKind) {
        if self.start.is_none() {
            self.begin(now, kind);
        }
    }
    /// Not started.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
    /// The start (the first reading after a coarse start's own reading once firm); None before
    /// [`Interval::begin`].
    pub fn start(&self) -> Option<Instant> {
        self.start
    }
    /// Time elapsed at `now` (a reading of the clock the interval began on), at most the true
    /// time since the start; zero before the start or while a coarse start is provisional.
    pub fn elapsed(&mut self, now: Instant) -> Duration {
        let Some(start) = self.start else { return Duration::ZERO };
        if !self.firm {
            if now > start {
                self.start = Some(now);
                self.firm = true;
            }
            return Duration::ZERO;
        }
        now.saturating_duration_since(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of the coarse clock over a precise timeline (ns): updates at the given precise
    /// times; a reading at `t` is the time of the last update at or before `t`.
    struct Model {
        updates: Vec<u64>,
    }
    impl Model {
        fn read(&self, t: u64) -> u64 {
            let i = self.updates.partition_point(|&u| u <= t);
            self.updates[i.saturating_sub(1)]
        }
    }

    fn at(base: Instant, ns: u64) -> Instant {
        base + Duration::from_nanos(ns)
    }

    /// The interval never exceeds the true elapsed time, however late the clock's updates
    /// come: updates every 4 ms nominally, with gaps of several ticks (a clock that lags by up
    /// to 5 ticks), the start read at every point of a period. The naive difference of two
    /// coarse readings does exceed it (the failure the interval exists for).
    #[test]
    fn a_lagging_coarse_clock_never_makes_an_interval_longer_than_it_is() {
        const MS: u64 = 1_000_000;
        let base = Instant::now();
        // Irregular updates: 4 ms ticks, with stretches where 1–5 ticks are missed.
        let mut updates = vec![0];
        let mut t = 0u64;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        while t < 2_000 * MS {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let missed = if seed.is_multiple_of(5) { 1 + seed % 5 } else { 0 };
            t += 4 * MS * (1 + missed) + seed % (MS / 2);
            updates.push(t);
        }
        let clock = Model { updates };
        let mut naive_early = 0;
        for start in (0..400 * MS).step_by(137_713) {
            let mut iv = Interval::default();
            let c0 = clock.read(start);
            iv.begin(at(base, c0), ClockKind::Coarse);
            // Readings every 250 µs after the start.
            for k in 1..2_000u64 {
                let t = start + k * 250_000;
                let c = clock.read(t);
                let e = iv.elapsed(at(base, c));
                let truth = Duration::from_nanos(t - start);
                assert!(e <= truth, "start {start}: interval {e:?} > true {truth:?} at {t}");
                if Duration::from_nanos(c - c0) > truth {
                    naive_early += 1;
                }
            }
        }
        assert!(naive_early > 0, "the model never shows a lag that a plain difference would misread");
    }

    /// A provisional coarse start counts nothing until the clock moves; a precise start counts
    /// from its reading.
    #[test]
    fn starts() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut iv = Interval::default();
        assert_eq!(iv.elapsed(t0), Duration::ZERO, "not started");
        iv.begin(t0, ClockKind::Coarse);
        assert_eq!(iv.elapsed(t0), Duration::ZERO);
        assert_eq!(iv.elapsed(t0 + 4 * ms), Duration::ZERO, "the first update after the start: firm from here");
        assert_eq!(iv.start(), Some(t0 + 4 * ms));
        assert_eq!(iv.elapsed(t0 + 10 * ms), 6 * ms);
        iv.begin_once(t0 + 20 * ms, ClockKind::Coarse);
        assert_eq!(iv.start(), Some(t0 + 4 * ms), "begin_once keeps a started interval");
        iv.begin(t0, ClockKind::Precise);
        assert_eq!(iv.elapsed(t0 + 3 * ms), 3 * ms);
        iv.clear();
        assert_eq!(iv.start(), None);
    }

    /// What holds of the real clocks on any kernel: a coarse reading never runs ahead of the
    /// precise clock read after it (both in the kernel's monotonic time), the coarse clock is
    /// monotonic, and it moves.
    #[test]
    fn the_real_coarse_clock_is_behind_the_precise_one_and_moves() {
        let Some(c0) = coarse_ns() else { return };
        let precise = || {
            let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
            t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
        };
        let mut last = c0;
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let c = coarse_ns().expect("coarse clock");
            let p = precise();
            assert!(c <= p, "coarse {c} ahead of precise {p}");
            assert!(c >= last, "coarse clock went back: {c} < {last}");
            last = c;
            if c > c0 {
                break;
            }
            assert!(Instant::now() < give_up, "the coarse clock did not move in 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(coarse_resolution() > Duration::ZERO);
    }
}
