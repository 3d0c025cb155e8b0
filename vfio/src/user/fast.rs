//! The client's end of a connection's fast path ([`super::wire::Command::FastPath`]): register
//! writes posted on a ring in shared memory ([`super::ring`]) instead of messages, a bell (an
//! eventfd) rung only when the server sleeps, and reads of the registers the server publishes
//! ([`platform::Subscriber`]) from shared memory.
//!
//! Ordering is what PCIe gives a driver: posted writes arrive in order; a message sent on the
//! socket is preceded on the ring by a marker, so the server applies every write posted before
//! it first; a read of a published register first waits until the server has taken every
//! write this client posted, then reads the value as of the end of a critical section of the
//! device. A read that cannot be served that way in time (the server busy or gone) returns
//! `None` and the caller asks the server with a message, which is ordered after the ring.

use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use platform::{SharedWords, Subscriber};

use super::ring::{self, Entry, Producer, Pushed};
use super::wire::{FastPathInfo, WireError};

/// How long a published read waits for the server to take this client's posted writes before
/// it asks with a message instead (the server is busy with a long write or gone).
const DRAIN_WAIT: Duration = Duration::from_millis(1);
/// Tries of a published read while the device is in a critical section (each a pause).
const READ_TRIES: u32 = 1 << 12;
/// How often a push onto a full ring asks whether the server is still there.
const FULL_CHECK: Duration = Duration::from_millis(10);

/// A connection's fast path, client side.
pub(super) struct FastPath {
    ring: SharedWords,
    producer: Mutex<Producer>,
    bell: OwnedFd,
    published: Subscriber,
    region: u32,
    offsets: Vec<u64>,
}

/// Why the fast path could not be set up from the server's reply.
#[derive(Debug, thiserror::Error)]
pub enum FastPathError {
    #[error("fast path: {0} descriptors, 3 expected")]
    Descriptors(usize),
    #[error("fast path: a ring of {0} entries")]
    Ring(u32),
    #[error("fast path: {0}")]
    Memory(#[from] platform::SharedMemError),
}

impl FastPath {
    /// The fast path the server described in `info`, with the descriptors of its reply.
    pub(super) fn new(info: FastPathInfo, fds: Vec<OwnedFd>) -> Result<Self, FastPathError> {
        let n = fds.len();
        let [ring_fd, bell, published]: [OwnedFd; 3] = fds.try_into().map_err(|_| FastPathError::Descriptors(n))?;
        let cap = info.ring_entries;
        if !(cap.is_power_of_two() && (2..=1 << 16).contains(&cap)) {
            return Err(FastPathError::Ring(cap));
        }
        let ring = SharedWords::open(ring_fd, ring::words_for(cap), true)?;
        let published = Subscriber::open(published, info.offsets.len().max(1))?;
        Ok(Self {
            ring,
            producer: Mutex::new(Producer::new(cap)),
            bell,
            published,
            region: info.region,
            offsets: info.offsets,
        })
    }

    /// Post `e`; waits while the ring is full, asking `alive` now and then (a server gone
    /// never takes anything: [`WireError::Closed`]).
    pub(super) fn post(&self, e: Entry, alive: impl Fn() -> bool) -> Result<(), WireError> {
        let words = e.encode().ok_or_else(|| WireError::Protocol(format!("{e:?} cannot be posted")))?;
        let Some(w) = self.ring.u64s() else { return Err(WireError::Closed) };
        let mut p = platform::sync::lock(&self.producer);
        let mut since = Instant::now();
        let mut spins = 0u32;
        loop {
            match p.push(w, words) {
                Pushed::Posted { wake } => {
                    drop(p);
                    if wake {
                        // The server sleeps: one eventfd write wakes it. A bell that cannot
                        // be rung means the server is gone (its socket says so next).
                        nix::unistd::write(&self.bell, &1u64.to_ne_bytes()).map_err(std::io::Error::from)?;
                    }
                    return Ok(());
                }
                Pushed::Full => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(64) {
                        std::thread::yield_now();
                        if since.elapsed() >= FULL_CHECK {
                            if !alive() {
                                return Err(WireError::Closed);
                            }
                            since = Instant::now();
                        }
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }

    /// The 32-bit register at `offset` of `region` from the published copy (module docs).
    pub(super) fn read32(&self, region: u32, offset: u64) -> Published {
        let Some(word) = self.offsets.binary_search(&offset).ok().filter(|_| region == self.region) else {
            return Published::No;
        };
        let Some(w) = self.ring.u64s() else { return Published::Busy };
        let posted = platform::sync::lock(&self.producer).posted();
        let start = Instant::now();
        let mut spins = 0u32;
        while !ring::taken_up_to(w, posted) {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() >= DRAIN_WAIT {
                return Published::Busy;
            }
            std::hint::spin_loop();
        }
        match self.published.read(word, READ_TRIES) {
            Some(v) => Published::Value(v),
            None => Published::Busy,
        }
    }
}

/// A read of a register through the published copy.
pub(super) enum Published {
    /// Not a published register: ask the server.
    No,
    Value(u32),
    /// Published, but the server did not take this client's writes in time or the device
    /// stayed in a critical section: ask the server (its answer is ordered after the ring).
    Busy,
}
