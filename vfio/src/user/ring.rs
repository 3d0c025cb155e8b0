//! The posted-write ring of a vfio-user connection's fast path: register writes (and a marker
//! before each message sent on the socket) a client posts in memory it shares with the server,
//! which the server drains in order — no message and no system call per write while the
//! server is awake; one `eventfd` write to wake it when it sleeps.
//!
//! Layout, in 64-bit words of a memfd the server creates and seals against resizing
//! (`platform::SharedWords`): word [`TAIL`] holds the producer's count of entries pushed (low
//! 32 bits) and the consumer's [`SLEEP`] bit; word [`HEAD`] (its own cache line) the consumer's
//! count of entries taken; from word [`FIRST`] the entries, [`ENTRY_WORDS`] words each:
//!
//! ```text
//! word 0: kind (bits 60-63: 1 write, 2 message marker) | width in bytes (56-59: 4 or 8)
//!         | region (48-55) | offset (0-47)
//! word 1: the value written
//! ```
//!
//! The producer (the client) writes an entry, then publishes it by adding 1 to [`TAIL`]
//! (release). The consumer (the server) announces that it is about to sleep by setting
//! [`SLEEP`] in the same word (`fetch_or`): both are read-modify-writes of one word, so one of
//! them sees the other — a push after the announcement finds the bit and wakes the consumer
//! (whoever clears the bit rings the bell, once per sleep); a push before it shows in the
//! consumer's own announcement, which it then takes back. No wake-up is lost, with no
//! sequentially consistent fence.
//!
//! The client is not trusted: the consumer keeps its head in its own memory (the shared
//! [`HEAD`] is only written), refuses a tail more than the ring's capacity ahead of it
//! ([`RingError::Overrun`]), and decodes each entry once into a checked [`Entry`]
//! ([`RingError::BadEntry`] for anything else); what it finds costs the client only itself.
//!
//! Written against `super::atomic` so that the loom model (`vfio/tests/loom_ring.rs`) compiles
//! this file against loom's atomics.

use super::atomic::{AtomicU64, Ordering};

/// Word: entries pushed (low 32 bits) and [`SLEEP`].
pub const TAIL: usize = 0;
/// Word: entries taken (low 32 bits), on its own cache line.
pub const HEAD: usize = 8;
/// Word of the first entry.
pub const FIRST: usize = 16;
/// Words per entry.
pub const ENTRY_WORDS: usize = 2;
/// In [`TAIL`]: the consumer sleeps (or is about to); a producer that pushes wakes it.
pub const SLEEP: u64 = 1 << 63;

const KIND_WRITE: u64 = 1;
const KIND_MESSAGE: u64 = 2;
const OFFSET_MASK: u64 = (1 << 48) - 1;

/// Words of a ring of `cap` entries.
pub const fn words_for(cap: u32) -> usize {
    FIRST + cap as usize * ENTRY_WORDS
}

/// One posted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A register write: `width` (4 or 8) bytes of `value` at `offset` of `region`.
    Write { region: u8, offset: u64, width: u8, value: u64 },
    /// A message follows on the socket, in order after the entries before this one.
    Message,
}

impl Entry {
    /// The entry's two words (a [`Entry::Write`] whose offset needs more than 48 bits or
    /// whose width is not 4 or 8 is not encodable: `None`).
    pub fn encode(&self) -> Option<[u64; ENTRY_WORDS]> {
        match *self {
            Entry::Write { region, offset, width, value } => {
                if offset > OFFSET_MASK || !matches!(width, 4 | 8) {
                    return None;
                }
                let meta = KIND_WRITE << 60 | (width as u64) << 56 | (region as u64) << 48 | offset;
                Some([meta, value])
            }
            Entry::Message => Some([KIND_MESSAGE << 60, 0]),
        }
    }

    /// The entry two words hold, if they hold one.
    pub fn decode(w: [u64; ENTRY_WORDS]) -> Option<Self> {
        let [meta, value] = w;
        match meta >> 60 {
            KIND_WRITE => {
                let width = ((meta >> 56) & 0xf) as u8;
                if !matches!(width, 4 | 8) || (width == 4 && value > u32::MAX as u64) {
                    return None;
                }
                Some(Entry::Write { region: (meta >> 48) as u8, offset: meta & OFFSET_MASK, width, value })
            }
            KIND_MESSAGE if meta << 4 == 0 && value == 0 => Some(Entry::Message),
            _ => None,
        }
    }
}

/// What the consumer found wrong in the ring: the client broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("posted-write ring: the tail is {ahead} entries ahead of the head, the ring holds {cap}")]
    Overrun { ahead: u32, cap: u32 },
    #[error("posted-write ring: entry {index} is not a write nor a message marker ({meta:#x}, {value:#x})")]
    BadEntry { index: u32, meta: u64, value: u64 },
}

/// Whether a ring of `cap` entries fits in `words` words (`cap` a power of two, at least 2).
pub fn fits(cap: u32, words: usize) -> bool {
    cap.is_power_of_two() && cap >= 2 && words_for(cap) <= words
}

fn slot(cap: u32, n: u32) -> usize {
    FIRST + (n & (cap - 1)) as usize * ENTRY_WORDS
}

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// No room: the consumer has not taken enough yet.
    Full,
    /// Posted; `wake`: the consumer was asleep and this push took its sleep bit — ring its bell.
    Posted { wake: bool },
}

/// The client's end (one at a time: callers serialise pushes).
#[derive(Debug)]
pub struct Producer {
    cap: u32,
    tail: u32,
}

impl Producer {
    /// The producer of a ring of `cap` entries (as the server created it: [`fits`]), empty.
    pub fn new(cap: u32) -> Self {
        Self { cap, tail: 0 }
    }

    /// Post `e` (its words from [`Entry::encode`]).
    pub fn push(&mut self, w: &[AtomicU64], e: [u64; ENTRY_WORDS]) -> Pushed {
        let head = w.get(HEAD).map_or(0, |h| h.load(Ordering::Acquire)) as u32;
        if self.tail.wrapping_sub(head) >= self.cap {
            return Pushed::Full;
        }
        let at = slot(self.cap, self.tail);
        for (k, v) in e.into_iter().enumerate() {
            if let Some(x) = w.get(at + k) {
                x.store(v, Ordering::Relaxed);
            }
        }
        self.tail = self.tail.wrapping_add(1);
        let Some(t) = w.get(TAIL) else { return Pushed::Posted { wake: false } };
        let before = t.fetch_add(1, Ordering::Release);
        let wake = before & SLEEP != 0 && t.fetch_and(!SLEEP, Ordering::AcqRel) & SLEEP != 0;
        Pushed::Posted { wake }
    }

    /// Whether the consumer has taken every entry posted.
    pub fn drained(&self, w: &[AtomicU64]) -> bool {
        taken_up_to(w, self.tail)
    }

    /// Entries posted so far (wrapping): with [`taken_up_to`], whether the consumer has taken
    /// them.
    pub fn posted(&self) -> u32 {
        self.tail
    }
}

/// Whether the consumer has taken the first `n` entries ever posted (counts wrap).
pub fn taken_up_to(w: &[AtomicU64], n: u32) -> bool {
    w.get(HEAD).is_some_and(|h| (h.load(Ordering::Acquire) as u32).wrapping_sub(n) as i32 >= 0)
}

/// The server's end.
#[derive(Debug)]
pub struct Consumer {
    cap: u32,
    head: u32,
}

impl Consumer {
    /// The consumer of a ring of `cap` entries it created ([`fits`]), empty.
    pub fn new(cap: u32) -> Self {
        Self { cap, head: 0 }
    }

    /// Entries posted and not taken yet (checked: at most the capacity).
    pub fn pending(&self, w: &[AtomicU64]) -> Result<u32, RingError> {
        let tail = w.get(TAIL).map_or(0, |t| t.load(Ordering::Acquire)) as u32;
        let ahead = tail.wrapping_sub(self.head);
        if ahead > self.cap {
            return Err(RingError::Overrun { ahead, cap: self.cap });
        }
        Ok(ahead)
    }

    /// The next entry, if one is posted (not taken until [`Consumer::done`]).
    pub fn peek(&self, w: &[AtomicU64]) -> Result<Option<Entry>, RingError> {
        if self.pending(w)? == 0 {
            return Ok(None);
        }
        let at = slot(self.cap, self.head);
        let word = |k: usize| w.get(at + k).map_or(0, |x| x.load(Ordering::Relaxed));
        let (meta, value) = (word(0), word(1));
        Entry::decode([meta, value]).map(Some).ok_or(RingError::BadEntry { index: self.head, meta, value })
    }

    /// Take the entry [`Consumer::peek`] returned (or skip a bad one): the producer may reuse
    /// its slot, and sees it taken.
    pub fn done(&mut self, w: &[AtomicU64]) {
        self.head = self.head.wrapping_add(1);
        if let Some(h) = w.get(HEAD) {
            h.store(self.head as u64, Ordering::Release);
        }
    }

    /// Announce a sleep: `true` when nothing is pending (sleep until the bell rings),
    /// `false` when entries arrived meanwhile (the announcement is taken back: drain them).
    pub fn sleep(&self, w: &[AtomicU64]) -> bool {
        let Some(t) = w.get(TAIL) else { return true };
        let before = t.fetch_or(SLEEP, Ordering::AcqRel);
        if before as u32 != self.head {
            t.fetch_and(!SLEEP, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Awake again (woken by the bell or anything else): no producer need ring any more.
    pub fn awake(&self, w: &[AtomicU64]) {
        if let Some(t) = w.get(TAIL) {
            t.fetch_and(!SLEEP, Ordering::AcqRel);
        }
    }
}
