//! Failpoints: named places in the driver where a test can make the N-th fallible step fail.
//!
//! Compiled in only with the `failpoints` cargo feature. Without it [`hit`] is an
//! `#[inline(always)]` `Ok(())` and nothing else exists, so a release build (and the execute
//! path a benchmark measures) is unchanged.
//!
//! With the feature, every call to [`hit`] counts one step (process-wide: a step taken on a
//! worker thread counts too). A test takes the [`session`] lock (failpoint tests serialize on
//! it), [`Session::arm`]s the step to fail — the `n`-th hit from now, 1-based — runs the
//! operation, and reads what happened: that hit returns [`PlatformError::Injected`] naming the
//! failpoint, once; later hits pass. [`Session::count`] runs an operation disarmed and returns
//! how many steps it took (the steps a sweep fails in turn).

#[cfg(not(feature = "failpoints"))]
use crate::PlatformError;

#[cfg(not(feature = "failpoints"))]
/// Step `point` of a fallible operation: always passes (the `failpoints` feature is off).
#[inline(always)]
pub fn hit(_point: &'static str) -> Result<(), PlatformError> {
    Ok(())
}

#[cfg(feature = "failpoints")]
pub use imp::*;

#[cfg(feature = "failpoints")]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, MutexGuard};

    use crate::PlatformError;

    /// Hits since the last arm or reset.
    static HITS: AtomicU64 = AtomicU64::new(0);
    /// The hit (1-based) to fail; 0 = disarmed.
    static ARMED: AtomicU64 = AtomicU64::new(0);
    /// The failpoint that fired since the last arm (name, hit).
    static FIRED: Mutex<Option<(&'static str, u64)>> = Mutex::new(None);
    /// Serializes the tests that arm failpoints.
    static SESSION: Mutex<()> = Mutex::new(());

    /// Step `point` of a fallible operation: fails when it is the armed hit.
    #[inline]
    pub fn hit(point: &'static str) -> Result<(), PlatformError> {
        let n = HITS.fetch_add(1, Ordering::SeqCst) + 1;
        let armed = ARMED.load(Ordering::SeqCst);
        if armed != 0 && n == armed && ARMED.compare_exchange(armed, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            *crate::sync::lock(&FIRED) = Some((point, n));
            return Err(PlatformError::Injected { point, hit: n });
        }
        Ok(())
    }

    /// Exclusive use of the failpoints (disarmed, counters reset) until dropped.
    pub struct Session {
        _lock: MutexGuard<'static, ()>,
    }

    /// Take the failpoints for one test (waits for another test holding them).
    pub fn session() -> Session {
        let lock = crate::sync::lock(&SESSION);
        let s = Session { _lock: lock };
        s.reset();
        s
    }

    impl Session {
        /// Disarm and count from zero.
        pub fn reset(&self) {
            ARMED.store(0, Ordering::SeqCst);
            HITS.store(0, Ordering::SeqCst);
            *crate::sync::lock(&FIRED) = None;
        }

        /// Fail the `n`-th hit from now (1-based; 0 disarms).
        pub fn arm(&self, n: u64) {
            self.reset();
            ARMED.store(n, Ordering::SeqCst);
        }

        /// Disarm (the counters keep counting).
        pub fn disarm(&self) {
            ARMED.store(0, Ordering::SeqCst);
        }

        /// Hits since the last arm or reset.
        pub fn hits(&self) -> u64 {
            HITS.load(Ordering::SeqCst)
        }

        /// The failpoint that failed since the last arm, and its hit number.
        pub fn fired(&self) -> Option<(&'static str, u64)> {
            *crate::sync::lock(&FIRED)
        }

        /// Run `f` disarmed and return its result and how many steps it took.
        pub fn count<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
            self.reset();
            let out = f();
            (out, self.hits())
        }
    }

    impl Drop for Session {
        fn drop(&mut self) {
            self.reset();
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn fails_the_armed_hit_once() {
            let s = session();
            let (_, n) = s.count(|| {
                for _ in 0..3 {
                    hit("a").unwrap();
                }
            });
            assert_eq!(n, 3);
            s.arm(2);
            assert!(hit("a").is_ok());
            match hit("b") {
                Err(PlatformError::Injected { point, hit }) => assert_eq!((point, hit), ("b", 2)),
                other => panic!("{other:?}"),
            }
            assert!(hit("c").is_ok());
            assert_eq!(s.fired(), Some(("b", 2)));
            assert_eq!(s.hits(), 3);
            s.arm(0);
            assert!(hit("d").is_ok());
            assert_eq!(s.fired(), None);
        }
    }
}
