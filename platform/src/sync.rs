//! Poison-tolerant locking: the one helper every crate of the workspace uses.
//!
//! A mutex is poisoned when a thread panicked while holding it. Nothing in this project holds a
//! lock across code that leaves its data half-updated on a panic (the state behind each lock is
//! valid between statements), so a poisoned lock is taken as it is rather than turned into a
//! second panic or an error every caller would have to handle. Every `Mutex`, `RwLock` and
//! `Condvar` of the workspace is taken through these functions, never with `.lock().unwrap()`
//! or an inline `unwrap_or_else(|e| e.into_inner())`.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError, WaitTimeoutResult,
};
use std::time::Duration;

/// Lock `m`, taking it as it is if a panicking thread poisoned it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lock `m` if no other thread holds it (`None` if one does), poison-tolerant.
pub fn try_lock<T: ?Sized>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Read-lock `l` if no writer holds it, poison-tolerant.
pub fn try_read<T: ?Sized>(l: &RwLock<T>) -> Option<RwLockReadGuard<'_, T>> {
    match l.try_read() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Write-lock `l` if nobody holds it, poison-tolerant.
pub fn try_write<T: ?Sized>(l: &RwLock<T>) -> Option<RwLockWriteGuard<'_, T>> {
    match l.try_write() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// The data of a mutex owned exclusively (no locking needed), poison-tolerant.
pub fn get_mut<T: ?Sized>(m: &mut Mutex<T>) -> &mut T {
    m.get_mut().unwrap_or_else(PoisonError::into_inner)
}

/// Read-lock `l`, poison-tolerant.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-lock `l`, poison-tolerant.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` with `g`, poison-tolerant.
pub fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` with `g` for at most `dur`, poison-tolerant.
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    dur: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout(g, dur).unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` while `cond` holds, for at most `dur`, poison-tolerant.
pub fn wait_timeout_while<'a, T, F: FnMut(&mut T) -> bool>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    dur: Duration,
    cond: F,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout_while(g, dur, cond).unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_mutex_is_taken_as_it_is() {
        let m = Arc::new(Mutex::new(7));
        let m2 = Arc::clone(&m);
        let r = std::thread::spawn(move || {
            let mut g = lock(&m2);
            *g = 8;
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 8);
    }

    #[test]
    fn a_poisoned_rwlock_is_taken_as_it_is() {
        let l = Arc::new(RwLock::new(1));
        let l2 = Arc::clone(&l);
        let r = std::thread::spawn(move || {
            let mut g = write(&l2);
            *g = 2;
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*read(&l), 2);
        *write(&l) = 3;
        assert_eq!(*read(&l), 3);
    }

    #[test]
    fn try_locks_take_a_poisoned_lock_and_refuse_a_held_one() {
        let m = Arc::new(Mutex::new(1));
        let m2 = Arc::clone(&m);
        assert!(std::thread::spawn(move || {
            let _g = lock(&m2);
            panic!("poison it");
        })
        .join()
        .is_err());
        let g = try_lock(&m).map(|g| *g);
        assert_eq!(g, Some(1));
        let held = lock(&m);
        assert!(std::thread::scope(|s| s.spawn(|| try_lock(&m).is_none()).join().unwrap()));
        drop(held);
        let l = RwLock::new(2);
        let r = try_read(&l);
        assert!(r.is_some() && try_write(&l).is_none());
        drop(r);
        assert_eq!(try_write(&l).map(|g| *g), Some(2));
        let mut owned = Mutex::new(3);
        *get_mut(&mut owned) += 1;
        assert_eq!(*lock(&owned), 4);
    }

    #[test]
    fn waits_return_the_guard() {
        let m = Mutex::new(false);
        let cv = Condvar::new();
        let (g, t) = wait_timeout(&cv, lock(&m), Duration::from_millis(1));
        assert!(t.timed_out());
        let (g, t) = wait_timeout_while(&cv, g, Duration::from_millis(1), |f| !*f);
        assert!(t.timed_out() && !*g);
    }
}
