//! Fork detection without a syscall: a `pthread_atfork` child handler bumps a counter in
//! the child, so a runtime compares [`forks`] with the value it saw at init instead of calling
//! `getpid` on every API entry (glibc no longer caches the pid: `getpid` is a real syscall).
//!
//! Covered: `fork(2)` through libc (and everything built on it). Not covered: a raw
//! `clone(2)` syscall, which runs no atfork handlers — the same limit as any
//! `pthread_atfork`-based scheme; `posix_spawn`/`vfork` children exec at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();
static REGISTERED: AtomicU64 = AtomicU64::new(0);

/// Runs in the child right after `fork`: only an atomic add (async-signal-safe).
extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Forks this process's ancestry went through since the handler was registered (the first
/// call registers it). Equal values at two points of one process mean no fork in between;
/// a child sees a larger value than its parent saw before the fork. `None` if the handler
/// could not be registered (the caller must fall back to comparing pids).
pub fn forks() -> Option<u64> {
    REGISTER.call_once(|| {
        // SAFETY: `pthread_atfork` stores the three function pointers; `in_child` is a
        // plain `extern "C" fn()` with 'static lifetime that touches only an atomic, which
        // is valid to run in a freshly forked child. The null prepare/parent handlers are
        // allowed by POSIX.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        REGISTERED.store(u64::from(rc == 0), Ordering::Relaxed);
    });
    (REGISTERED.load(Ordering::Relaxed) == 1).then(|| FORKS.load(Ordering::Relaxed))
}

/// The calling thread's OS thread id (`gettid(2)`), as profiles and traces name threads.
pub fn thread_id() -> u64 {
    nix::unistd::gettid().as_raw() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child sees a different count than its parent; the parent's is unchanged.
    #[test]
    fn child_sees_a_new_count() {
        let before = forks().expect("registered");
        // SAFETY: the child only reads an atomic and calls `_exit`, both async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let changed = forks() != Some(before);
            // SAFETY: `_exit` is async-signal-safe and ends the child without unwinding.
            unsafe { libc::_exit(if changed { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child saw no fork (status {status})");
        assert_eq!(forks(), Some(before));
    }
}
