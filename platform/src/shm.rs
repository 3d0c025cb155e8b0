//! A file-backed shared-memory segment of 64-bit atomic words: how a runtime publishes its
//! counters to monitors in other processes (a file under `/dev/shm`, mapped shared).
//!
//! The writer creates the file at its full size once and never changes its length; readers
//! map it read-only, with the length the file has when they open it. Every access is an
//! atomic operation on an aligned `u64`, so a writer and any number of readers share it
//! without locks. The word layout is the caller's (the runtime's `counters` module).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors creating or opening a segment.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {len} bytes is not a whole number of 8-byte words (or is empty)")]
    BadLength { path: PathBuf, len: u64 },
}

/// A shared mapping of `words` 64-bit words, read-write (the creator) or read-only.
pub struct ShmWords {
    map: memmap2::MmapRaw,
    words: usize,
    path: PathBuf,
    owner: bool,
}

impl std::fmt::Debug for ShmWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmWords").field("path", &self.path).field("words", &self.words).finish()
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ShmError + '_ {
    move |source| ShmError::Io { path: path.to_path_buf(), source }
}

impl ShmWords {
    /// Create (or replace) `path` as a zeroed segment of `words` words, mapped read-write.
    /// Readers can see the file from the moment it exists, zero-filled at first; the file
    /// is removed when this handle drops.
    pub fn create(path: &Path, words: usize) -> Result<Self, ShmError> {
        let len = (words.max(1) * 8) as u64;
        // A fresh inode: a reader still mapping an older file of the same name keeps its own.
        let _ = std::fs::remove_file(path);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(io_err(path))?;
        file.set_len(len).map_err(io_err(path))?;
        let map = memmap2::MmapOptions::new().len(len as usize).map_raw(&file).map_err(io_err(path))?;
        Ok(Self { map, words: words.max(1), path: path.to_path_buf(), owner: true })
    }

    /// Map an existing segment read-only, at the length the file has now.
    pub fn open_read(path: &Path) -> Result<Self, ShmError> {
        let file = File::open(path).map_err(io_err(path))?;
        let len = file.metadata().map_err(io_err(path))?.len();
        if len == 0 || len % 8 != 0 || len > usize::MAX as u64 {
            return Err(ShmError::BadLength { path: path.to_path_buf(), len });
        }
        let map = memmap2::MmapOptions::new().len(len as usize).map_raw_read_only(&file).map_err(io_err(path))?;
        Ok(Self { map, words: (len / 8) as usize, path: path.to_path_buf(), owner: false })
    }

    /// The segment as atomic words, for the handle that created it (read-write). A
    /// read-only handle has none: a store through its mapping would fault; it reads through
    /// [`ShmWords::load`].
    pub fn words(&self) -> Option<&[AtomicU64]> {
        self.owner.then(|| self.atomics())
    }

    /// Word `i` (an acquire load), if the segment has it.
    pub fn load(&self, i: usize) -> Option<u64> {
        self.atomics().get(i).map(|w| w.load(Ordering::Acquire))
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words
    }

    /// Whether the segment has no words (never: segments have at least one).
    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    fn atomics(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `self.words * 8` bytes long (its length was set from that,
        // or checked to be that, before mapping) and page-aligned, so it holds `self.words`
        // suitably aligned `AtomicU64`s; it lives as long as `self` (the slice borrows
        // `self`). `AtomicU64` has interior mutability, so shared references to memory that
        // other processes change concurrently are sound as long as every access is atomic,
        // which is all this type does. Only the read-write creator hands the slice out
        // (`words`); a read-only mapping is only loaded from (`load`), and atomic loads of
        // pointer-sized atomics from read-only memory are permitted (std::sync::atomic,
        // "Atomic accesses to read-only memory").
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), self.words) }
    }

    /// The file behind the segment.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ShmWords {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_the_writers_words_and_the_file_goes_with_the_writer() {
        let p = std::env::temp_dir().join(format!("platform-shm-{}", std::process::id()));
        let w = ShmWords::create(&p, 4).expect("create");
        let words = w.words().expect("the creator writes");
        words[3].store(0xABCD, Ordering::Release);
        let r = ShmWords::open_read(&p).expect("open");
        assert!(r.words().is_none(), "readers only load");
        assert_eq!(r.len(), 4);
        assert_eq!(r.load(3), Some(0xABCD));
        assert_eq!(r.load(4), None);
        words[3].fetch_add(1, Ordering::Relaxed);
        assert_eq!(r.load(3), Some(0xABCE));
        drop(w);
        assert!(!p.exists());
        // The reader's mapping outlives the file.
        assert_eq!(r.load(3), Some(0xABCE));
    }

    #[test]
    fn odd_lengths_are_refused() {
        let p = std::env::temp_dir().join(format!("platform-shm-odd-{}", std::process::id()));
        std::fs::write(&p, [0u8; 12]).expect("write");
        assert!(matches!(ShmWords::open_read(&p), Err(ShmError::BadLength { len: 12, .. })));
        std::fs::write(&p, []).expect("write");
        assert!(matches!(ShmWords::open_read(&p), Err(ShmError::BadLength { len: 0, .. })));
        let _ = std::fs::remove_file(&p);
    }
}
