//! Interrupts: the eventfd a platform signals when the device raises a vector (from
//! [`Platform::irq_eventfd`](crate::Platform::irq_eventfd)).

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// An interrupt vector delivered through an eventfd (non-blocking).
pub struct Irq {
    fd: OwnedFd,
    pub vector: u32,
}

impl Irq {
    /// Wrap an eventfd from [`Platform::irq_eventfd`](crate::Platform::irq_eventfd).
    pub fn new(fd: OwnedFd, vector: u32) -> Self {
        Self { fd, vector }
    }

    /// Wait until the vector fires or `timeout` passes; consume pending events.
    /// Returns whether it fired.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n <= 0 {
            return false;
        }
        self.drain()
    }

    /// Consume pending events without waiting; returns whether there were any.
    pub fn drain(&self) -> bool {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a u64 we own from an eventfd we own (non-blocking).
        let r = unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
        r == 8 && v > 0
    }
}
