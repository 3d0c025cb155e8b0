//! Interrupts: the eventfd a platform signals when the device raises a vector (from
//! [`Platform::irq_eventfd`](crate::Platform::irq_eventfd)).

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};

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
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
            Ok(n) if n > 0 => self.drain(),
            _ => false,
        }
    }

    /// Consume pending events without waiting; returns whether there were any.
    pub fn drain(&self) -> bool {
        // An eventfd read returns the 8-byte counter and resets it (EAGAIN when it is 0).
        let mut v = [0u8; 8];
        matches!(nix::unistd::read(&self.fd, &mut v), Ok(8)) && u64::from_ne_bytes(v) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::eventfd::{EfdFlags, EventFd};

    #[test]
    fn wait_and_drain_follow_the_eventfd() {
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).unwrap();
        let writer = efd.as_fd().try_clone_to_owned().unwrap();
        let irq = Irq::new(OwnedFd::from(efd), 3);
        assert!(!irq.wait(Duration::from_millis(1)));
        assert!(!irq.drain());
        nix::unistd::write(&writer, &2u64.to_ne_bytes()).unwrap();
        assert!(irq.wait(Duration::from_millis(100)));
        assert!(!irq.drain(), "wait consumed the count");
        nix::unistd::write(&writer, &1u64.to_ne_bytes()).unwrap();
        assert!(irq.drain());
        assert_eq!(irq.vector, 3);
    }
}
