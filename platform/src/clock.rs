//! A cheap clock for deadlines: `CLOCK_MONOTONIC_COARSE`, the monotonic clock as of the last
//! timer tick. The kernel's vDSO returns it from its data page without reading the time
//! source, so it costs a fraction of a `CLOCK_MONOTONIC` read (measured on the 2-core CI
//! machine: ≈ 5 ns against ≈ 26 ns), at the resolution of a tick ([`coarse_resolution`]: 1–10
//! ms depending on the kernel's HZ). For timeouts and probe intervals of a millisecond and
//! more, never for timings.
//!
//! [`coarse_now`] gives the reading as an [`Instant`]: the coarse clock's advance since the
//! first call added to an `Instant` taken then. Such instants are consistent with each other
//! (their differences are the coarse clock's, to within a tick); against `Instant::now()` they
//! may be off by up to a tick either way, so the two are not to be mixed in one comparison.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_instants_advance_with_the_precise_clock_within_a_tick() {
        let tick = coarse_resolution();
        assert!(tick < Duration::from_millis(100), "a tick of {tick:?}");
        let (c0, p0) = (coarse_now(), Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let (c1, p1) = (coarse_now(), Instant::now());
        assert!(c1 >= c0, "monotonic");
        let coarse = c1.saturating_duration_since(c0);
        let precise = p1.saturating_duration_since(p0);
        // Each reading lags the precise clock by less than a tick.
        let slack = tick + Duration::from_millis(1);
        assert!(
            coarse + slack >= precise && coarse <= precise + slack,
            "coarse {coarse:?}, precise {precise:?}, tick {tick:?}"
        );
        assert!(coarse >= Duration::from_millis(30).saturating_sub(slack), "coarse {coarse:?}");
    }
}
