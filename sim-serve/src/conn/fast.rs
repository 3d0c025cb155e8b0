//! The server's end of a connection's fast path (`vfio::user::wire::Command::FastPath`,
//! docs/sharing.md "What an execute costs"): the client posts register writes on a ring in
//! memory this server created ([`vfio::user::ring`]) and reads the registers the device
//! publishes ([`sim::SimDevice::publish_registers`]) from shared memory; this thread drains the
//! ring in order, and takes a message from the socket only where the ring has a marker for it.
//!
//! While work arrives the thread keeps looking at the ring ([`SPIN`] after its last work, so
//! that a client executing back to back never has to wake it); then it announces its sleep on
//! the ring and waits in `poll` on the socket and the ring's bell (an eventfd the client writes
//! only when it finds the announcement). Every [`SOCKET_CHECK`] it also looks at the socket
//! without waiting: a client that hung up, or a connection the host ended (`End` shuts the
//! socket down), ends the loop even while writes keep coming.
//!
//! The client is not trusted: its ring is checked entry by entry (`ring::Consumer`); an entry
//! that is no request is refused as a malformed message is, an overrun ring ends the
//! connection, bytes on the socket that no marker announced (twice in a row) end it too.
//! Nothing it writes can make this thread wait except for its own messages, and the host's
//! `End` breaks that wait.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{recv, MsgFlags};
use platform::{SharedWords, Writers};
use sim::RegisterMirror;
use vfio::user::ring::{self, Consumer, Entry};
use vfio::user::wire::{self, FastPathInfo};

use super::{Conn, Refusal};
use crate::ServeError;

/// Entries of a connection's ring.
const RING_ENTRIES: u32 = 256;
/// How long the thread keeps looking at the ring after its last work before it sleeps: longer
/// than the gap between two executes of a client that executes back to back (a few µs) or
/// interleaves other work of about an execute's length (`bench shared`), so such a client
/// never pays a wake-up; short enough that an idle connection costs little CPU.
pub(super) const SPIN: Duration = Duration::from_micros(50);
/// How often the thread looks at the socket while it does not sleep.
const SOCKET_CHECK: Duration = Duration::from_millis(1);
/// The longest sleep in `poll` (the socket and the bell wake it before).
const SLEEP_MS: u16 = 1000;

/// A connection's fast path, server side.
pub(super) struct FastServer {
    ring: SharedWords,
    consumer: Consumer,
    bell: EventFd,
    published: RegisterMirror,
}

impl FastServer {
    /// A new ring and bell for the connection, and the device's published registers.
    pub(super) fn new(published: RegisterMirror) -> Result<(Self, FastPathInfo), std::io::Error> {
        let ring = SharedWords::create(c"neuron-vfio-ring", ring::words_for(RING_ENTRIES), Writers::Anyone)
            .map_err(std::io::Error::other)?;
        let bell = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        let info = FastPathInfo { ring_entries: RING_ENTRIES, region: 0, offsets: published.offsets().to_vec() };
        Ok((Self { ring, consumer: Consumer::new(RING_ENTRIES), bell, published }, info))
    }

    /// The descriptors of the reply, in `FastPathInfo`'s order.
    pub(super) fn fds(&self) -> [BorrowedFd<'_>; 3] {
        [self.ring.fd(), self.bell.as_fd(), self.published.fd()]
    }
}

/// What the socket holds, looked at without waiting.
enum Socket {
    Idle,
    Bytes,
    /// The client hung up, or the host ended the connection.
    Closed,
}

fn socket_state(stream: &UnixStream) -> Socket {
    let mut b = [0u8; 1];
    match recv(std::os::fd::AsRawFd::as_raw_fd(stream), &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
        Ok(0) => Socket::Closed,
        Ok(_) => Socket::Bytes,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => Socket::Idle,
        Err(_) => Socket::Closed,
    }
}

/// Serve the connection through its fast path until it ends (module docs): `Ok` after the
/// client hung up or the host ended it, an error when the client broke the protocol.
pub(super) fn serve(conn: &mut Conn<'_>, stream: &UnixStream, mut fast: FastServer) -> Result<(), ServeError> {
    let mut last_work = Instant::now();
    let mut last_check = last_work;
    let mut check_now = false;
    let mut unannounced = false;
    let mut spins = 0u32;
    loop {
        let Some(w) = fast.ring.u64s() else {
            return Err(ServeError::VfioUser("the fast path's ring is not writable here".into()));
        };
        let mut worked = false;
        loop {
            match fast.consumer.peek(w) {
                Ok(None) => break,
                Ok(Some(Entry::Write { region, offset, width, value })) => {
                    let bytes = value.to_le_bytes();
                    let r = conn.region_write(region as u32, offset, &bytes[..width as usize]);
                    conn.count(&r);
                    // Taken once applied: a client's read of a published register waits for it.
                    fast.consumer.done(w);
                }
                Ok(Some(Entry::Message)) => {
                    fast.consumer.done(w);
                    unannounced = false;
                    let Some(m) = wire::read_message(stream)? else { return Ok(()) };
                    if super::serve_one(conn, stream, m)? == super::Served::HungUp {
                        return Ok(());
                    }
                }
                Err(e @ ring::RingError::BadEntry { .. }) => {
                    // Refused and skipped, as a malformed posted message would be.
                    conn.count(&Err(Refusal(super::EINVAL, e.to_string())));
                    fast.consumer.done(w);
                }
                Err(e @ ring::RingError::Overrun { .. }) => return Err(ServeError::VfioUser(e.to_string())),
            }
            worked = true;
        }
        let now = Instant::now();
        if worked {
            last_work = now;
        }
        if check_now || now.duration_since(last_check) >= SOCKET_CHECK {
            (last_check, check_now) = (now, false);
            match socket_state(stream) {
                Socket::Closed => return Ok(()),
                // Bytes whose marker may not have been drained yet: drain again first; bytes
                // again at the next check are a message without a marker.
                Socket::Bytes if unannounced => {
                    return Err(ServeError::VfioUser("a message the ring announced no marker for".into()));
                }
                Socket::Bytes => {
                    unannounced = true;
                    continue;
                }
                Socket::Idle => unannounced = false,
            }
        }
        if now.duration_since(last_work) < SPIN {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // Another thread of this 2-CPU budget (a client, a neighbour's connection) may
                // be what this one waits for.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        if !fast.consumer.sleep(w) {
            continue;
        }
        let mut fds =
            [PollFd::new(stream.as_fd(), PollFlags::POLLIN), PollFd::new(fast.bell.as_fd(), PollFlags::POLLIN)];
        let woke = poll(&mut fds, PollTimeout::from(SLEEP_MS));
        fast.consumer.awake(w);
        // The bell's count: only that it rang matters.
        let _ = fast.bell.read();
        match woke {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(ServeError::VfioUser(format!("poll: {e}"))),
        }
        // The socket stirred (a message, a hang-up): look at it at once, after draining.
        check_now = fds[0].revents().is_some_and(|r| !r.is_empty());
    }
}
