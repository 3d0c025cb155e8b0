//! Memory one process shares with another through a sealed memfd: the words a device's host
//! publishes to its clients ([`Publisher`] / [`Subscriber`], a sequence lock:
//! [`crate::seqlock`]), and memory both sides write ([`SharedWords`]: a ring of requests a
//! client posts and the host drains).
//!
//! The creator makes the memfd, sets its length once and seals it (`F_SEAL_SHRINK`,
//! `F_SEAL_GROW`, `F_SEAL_SEAL`): no process holding the descriptor can change its size, so a
//! mapping of it never faults on a page the file no longer has. Memory only the creator writes
//! is sealed against new writable mappings too (`F_SEAL_FUTURE_WRITE`): the descriptor handed
//! to another process can be mapped read-only only, and `write(2)` on it fails. The opener
//! checks the length before mapping.
//!
//! Every access is an atomic operation on an aligned word; `unsafe` is the view of a mapping
//! as a slice of atomics (below).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

/// Errors creating or opening shared memory.
#[derive(Debug, thiserror::Error)]
pub enum SharedMemError {
    #[error("shared memory of {len} bytes: {source}")]
    Create { len: usize, source: std::io::Error },
    #[error("shared memory of {len} bytes: mapping it: {source}")]
    Map { len: usize, source: std::io::Error },
    #[error("shared memory: the file has {have} bytes, {need} expected")]
    Short { have: u64, need: usize },
    #[error("shared memory: an empty area")]
    Empty,
}

/// Who may write the memory besides its creator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// The creator only: openers map it read-only.
    Creator,
    /// Every process holding the descriptor.
    Anyone,
}

/// A sealed memfd of whole 8-byte words, mapped shared (read-write for its creator and for
/// openers of [`Writers::Anyone`] memory, read-only otherwise).
pub struct SharedWords {
    map: memmap2::MmapRaw,
    words: usize,
    fd: OwnedFd,
    writable: bool,
}

impl std::fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWords").field("words", &self.words).field("writable", &self.writable).finish()
    }
}

fn create_err(len: usize) -> impl FnOnce(nix::Error) -> SharedMemError {
    move |e| SharedMemError::Create { len, source: e.into() }
}

impl SharedWords {
    /// A zeroed area of `words` 8-byte words, sealed as the module docs say.
    pub fn create(name: &std::ffi::CStr, words: usize, writers: Writers) -> Result<Self, SharedMemError> {
        if words == 0 {
            return Err(SharedMemError::Empty);
        }
        let len = words.checked_mul(8).ok_or(SharedMemError::Create {
            len: usize::MAX,
            source: std::io::Error::from(nix::errno::Errno::ENOMEM),
        })?;
        let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(create_err(len))?;
        let size = i64::try_from(len).map_err(|_| create_err(len)(nix::errno::Errno::EFBIG))?;
        nix::unistd::ftruncate(&fd, size).map_err(create_err(len))?;
        let map =
            memmap2::MmapOptions::new().len(len).map_raw(&fd).map_err(|source| SharedMemError::Map { len, source })?;
        // Sealed after the creator's own writable mapping exists: F_SEAL_FUTURE_WRITE refuses
        // only mappings made from now on.
        let mut seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        if writers == Writers::Creator {
            seals |= SealFlag::F_SEAL_FUTURE_WRITE;
        }
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(create_err(len))?;
        Ok(Self { map, words, fd, writable: true })
    }

    /// Map `words` words of the area another process created and handed over as `fd`,
    /// read-write or read-only. The file must hold at least that much.
    pub fn open(fd: OwnedFd, words: usize, writable: bool) -> Result<Self, SharedMemError> {
        if words == 0 {
            return Err(SharedMemError::Empty);
        }
        let len = words.checked_mul(8).ok_or(SharedMemError::Short { have: 0, need: usize::MAX })?;
        let have = nix::sys::stat::fstat(&fd).map_err(|e| SharedMemError::Map { len, source: e.into() })?.st_size;
        let have = u64::try_from(have).unwrap_or(0);
        if have < len as u64 {
            return Err(SharedMemError::Short { have, need: len });
        }
        let mut opts = memmap2::MmapOptions::new();
        opts.len(len);
        let map = if writable { opts.map_raw(&fd) } else { opts.map_raw_read_only(&fd) }
            .map_err(|source| SharedMemError::Map { len, source })?;
        Ok(Self { map, words, fd, writable })
    }

    /// The descriptor to hand to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Number of 8-byte words.
    pub fn words(&self) -> usize {
        self.words
    }

    /// The area as 64-bit atomics, when this mapping may write it.
    pub fn u64s(&self) -> Option<&[AtomicU64]> {
        self.writable.then(|| self.atomics64())
    }

    /// The area as 32-bit atomics, when this mapping may write it.
    pub fn u32s(&self) -> Option<&[AtomicU32]> {
        self.writable.then(|| self.atomics32())
    }

    fn atomics64(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `self.words * 8` bytes long (mapped at that length, from a
        // file checked or made to hold it and sealed against shrinking) and page-aligned, so
        // it holds `self.words` aligned `AtomicU64`s; it lives as long as `self` (the slice
        // borrows `self`). Other processes change the memory concurrently, which atomics
        // permit as long as every access is atomic — all this module does. A read-only
        // mapping is only loaded from (`u64s` refuses to hand it out for stores; loads of
        // word-sized atomics from read-only memory are permitted by std::sync::atomic).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), self.words) }
    }

    fn atomics32(&self) -> &[AtomicU32] {
        // SAFETY: as `atomics64`: twice as many 4-byte words in the same aligned mapping.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU32>(), self.words * 2) }
    }
}

/// Words one writer publishes under a sequence lock ([`crate::seqlock`]): word 0 (32-bit) is
/// the sequence, the data words follow. Readers in other processes get the descriptor
/// ([`Publisher::fd`]) and can map it read-only only.
#[derive(Debug)]
pub struct Publisher {
    mem: SharedWords,
}

impl Publisher {
    /// An area for `data` 32-bit data words, all 0 and stable (sequence 0).
    pub fn create(data: usize) -> Result<Self, SharedMemError> {
        let words = (data + 1).div_ceil(2);
        Ok(Self { mem: SharedWords::create(c"neuron-vfio-published", words, Writers::Creator)? })
    }

    fn slice(&self) -> &[AtomicU32] {
        self.mem.atomics32()
    }

    /// The descriptor readers map.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mem.fd()
    }

    /// 32-bit data words the area holds.
    pub fn len(&self) -> usize {
        self.slice().len() - 1
    }

    /// Always false: an area holds at least one data word.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start a change (callers serialise their changes).
    pub fn begin(&self) {
        crate::seqlock::begin(self.slice());
    }

    /// Data word `i` (0-based) is `v` from the end of this change.
    pub fn store(&self, i: usize, v: u32) {
        crate::seqlock::store(self.slice(), i + 1, v);
    }

    /// End the change.
    pub fn end(&self) {
        crate::seqlock::end(self.slice());
    }
}

/// A reader of a [`Publisher`]'s words in another process (mapped read-only).
#[derive(Debug)]
pub struct Subscriber {
    mem: SharedWords,
}

impl Subscriber {
    /// Map `data` data words of the area behind `fd` (as [`Publisher::create`] laid it out).
    pub fn open(fd: OwnedFd, data: usize) -> Result<Self, SharedMemError> {
        Ok(Self { mem: SharedWords::open(fd, (data + 1).div_ceil(2), false)? })
    }

    /// 32-bit data words.
    pub fn len(&self) -> usize {
        self.mem.atomics32().len() - 1
    }

    /// Always false (as [`Publisher::is_empty`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Data word `i` as of the writer's last completed change, trying `tries` times while the
    /// writer is in a change: `None` when `i` is out of range or the writer stayed busy.
    pub fn read(&self, i: usize, tries: u32) -> Option<u32> {
        crate::seqlock::read(self.mem.atomics32(), i.checked_add(1)?, tries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscriber_reads_what_was_published_and_cannot_map_it_writable() {
        let p = Publisher::create(5).expect("create");
        assert_eq!(p.len(), 5);
        p.begin();
        p.store(4, 0xfeed);
        p.store(5, 1); // out of range: ignored
        p.end();
        let fd = p.fd().try_clone_to_owned().expect("dup");
        let s = Subscriber::open(fd.try_clone().expect("dup"), 5).expect("open");
        assert_eq!(s.read(4, 1), Some(0xfeed));
        assert_eq!(s.read(0, 1), Some(0));
        assert_eq!(s.read(5, 1), None);
        // In a change, a reader with one try gets nothing (it would ask the writer).
        p.begin();
        assert_eq!(s.read(4, 1), None);
        p.end();
        assert_eq!(s.read(4, 1), Some(0xfeed));
        // The descriptor cannot be mapped writable nor written, nor resized.
        assert!(SharedWords::open(fd.try_clone().expect("dup"), 3, true).is_err());
        assert!(nix::unistd::write(&fd, &[1u8]).is_err());
        assert!(nix::unistd::ftruncate(&fd, 0).is_err());
        // Nor opened larger than it is.
        assert!(matches!(Subscriber::open(fd, 64), Err(SharedMemError::Short { have: 24, .. })));
    }

    #[test]
    fn memory_anyone_writes_is_shared_and_cannot_change_size() {
        let a = SharedWords::create(c"test", 4, Writers::Anyone).expect("create");
        let b = SharedWords::open(a.fd().try_clone_to_owned().expect("dup"), 4, true).expect("open");
        a.u64s().expect("rw")[3].store(7, std::sync::atomic::Ordering::Release);
        assert_eq!(b.u64s().expect("rw")[3].load(std::sync::atomic::Ordering::Acquire), 7);
        assert!(nix::unistd::ftruncate(b.fd(), 0).is_err());
        assert!(nix::unistd::ftruncate(b.fd(), 1 << 20).is_err());
        assert!(SharedWords::create(c"test", 0, Writers::Anyone).is_err());
    }
}
