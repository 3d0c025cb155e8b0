//! The container: header gates in libnrt's order, digest, streamed inflate and the tar walk
//! (docs/facts/libnrt.md §1.1-§1.4). The walk itself is [`crate::stream`]'s, for the in-memory
//! reader too.
//!
//! Memory: the members' bodies are kept in one buffer (members are ranges into it, so weights
//! are zero-copy). Its size is bounded by `ReadOptions::mem_cap`: the inflater is never allowed
//! to produce more than `mem_cap` bytes, so a gzip bomb or a tar header claiming a huge size
//! fails with NRT_INVALID without the memory being allocated. Compressed input is streamed in
//! 1 MiB chunks; with verification on, a second thread hashes the chunks while the first
//! inflates.

use std::collections::HashMap;
use std::io::{self, BufRead, Read};
use std::ops::{Deref, Range};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::Arc;

use crate::header::{
    NeffHeader, FEATURE_BITS_TRAPDOOR_MASK, NEFF_HEADER_SIZE, NEFF_VERSION_MAJOR_MAX, PKG_VERSION_GZIP_MD5,
    PKG_VERSION_TAR_SHA256,
};
use md5::Digest as _;

use crate::arch::Arch;
use crate::error::NeffError;

/// Default cap on the inflated payload: 4 GiB. A fixed cap rather than a multiple of the
/// compressed size, because legitimate NEFFs with zero-filled weights compress ~1000:1;
/// a runtime can lower it (e.g. to the host memory it is willing to spend on one model).
pub const DEFAULT_MEM_CAP: u64 = 4 << 30;

pub(crate) const CHUNK: usize = 1 << 20;

/// Bytes of a streamed member's body kept in the payload buffer (room for an `.npy`
/// preamble; the array data itself is not kept).
pub const STREAM_PREFIX: usize = 256;

/// Reader options.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Check the header digest (`nrt_load`'s verify flag).
    pub verify: bool,
    /// The live architecture for the KELF target gate; `None` skips the gate (inspection).
    pub arch: Option<&'static Arch>,
    /// Cap on the inflated payload in bytes.
    pub mem_cap: u64,
    /// `NEURON_RT_ALLOW_LEGACY_NEFF=1`: relaxes the arch gate and the Cayman SB-reservation guard.
    pub allow_legacy: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { verify: true, arch: None, mem_cap: DEFAULT_MEM_CAP, allow_legacy: false }
    }
}

/// A shared, cheaply clonable slice of the inflated payload (zero-copy member or weight data).
#[derive(Clone)]
pub struct Blob {
    buf: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl Blob {
    pub(crate) fn new(buf: Arc<Vec<u8>>, range: Range<usize>) -> Self {
        Blob { buf, range }
    }
    /// A sub-slice (`range` relative to this blob); `None` when out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<Blob> {
        if range.start > range.end || range.end > self.range.len() {
            return None;
        }
        Some(Blob { buf: self.buf.clone(), range: self.range.start + range.start..self.range.start + range.end })
    }
    /// Where this blob lies in the inflated payload.
    pub fn payload_range(&self) -> Range<usize> {
        self.range.clone()
    }
    /// Whether two blobs share the same payload buffer (zero-copy check).
    pub fn same_buffer(&self, other: &Blob) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(self.range.clone()).unwrap_or(&[])
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blob({} bytes @ {:#x})", self.range.len(), self.range.start)
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

/// One tar member kept by the walk.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberInfo {
    /// Path with any leading `./` stripped.
    pub name: String,
    pub size: u64,
    /// Byte range in the payload buffer. For a streamed member ([`MemberInfo::streamed`]) only
    /// its first [`STREAM_PREFIX`] bytes are kept there (an `.npy` header); its body went to the
    /// [`crate::stream::MemberSink`].
    pub range: Range<usize>,
    /// The body was streamed to a [`crate::stream::MemberSink`] rather than held in host memory.
    pub streamed: bool,
}

/// The unpacked container: header, payload buffer and member index.
#[derive(Debug, Clone)]
pub struct Container {
    pub header: NeffHeader,
    pub payload: Blob,
    pub members: Vec<MemberInfo>,
    index: HashMap<String, usize>,
}

impl Container {
    pub(crate) fn from_parts(
        header: NeffHeader,
        payload: Blob,
        members: Vec<MemberInfo>,
        index: HashMap<String, usize>,
    ) -> Self {
        Container { header, payload, members, index }
    }

    /// A member held in host memory (never a streamed one: its body is not here).
    pub fn member(&self, name: &str) -> Option<Blob> {
        let i = *self.index.get(name)?;
        let m = &self.members[i];
        if m.streamed {
            return None;
        }
        self.payload.slice(m.range.clone())
    }

    /// A streamed member: its size and the kept prefix of its body.
    pub fn streamed(&self, name: &str) -> Option<(u64, Blob)> {
        let i = *self.index.get(name)?;
        let m = &self.members[i];
        if !m.streamed {
            return None;
        }
        Some((m.size, self.payload.slice(m.range.clone())?))
    }
}

/// Gates 2-7 of docs/facts/libnrt.md §1.3 (plus the non-empty-payload assert), in libnrt's order.
pub fn check_header(bytes: &[u8], file_size: u64) -> Result<NeffHeader, NeffError> {
    if file_size < NEFF_HEADER_SIZE as u64 {
        return Err(NeffError::TooShort { size: file_size });
    }
    let h = NeffHeader::decode(bytes).map_err(|_| NeffError::TooShort { size: bytes.len() as u64 })?;
    if h.header_size >= file_size {
        return Err(NeffError::HeaderSize { header_size: h.header_size, file_size });
    }
    if h.neff_version_major > NEFF_VERSION_MAJOR_MAX {
        return Err(NeffError::Version { major: h.neff_version_major, minor: h.neff_version_minor });
    }
    if h.neff_version_major == 2 && h.feature_bits & FEATURE_BITS_TRAPDOOR_MASK != 0 {
        return Err(NeffError::FeatureBits {
            bits: h.feature_bits,
            trapdoor: h.feature_bits & FEATURE_BITS_TRAPDOOR_MASK,
        });
    }
    if (file_size - NEFF_HEADER_SIZE as u64) < h.data_size {
        return Err(NeffError::DataSize { data_size: h.data_size, file_size });
    }
    if h.pkg_version != PKG_VERSION_TAR_SHA256 && h.pkg_version != PKG_VERSION_GZIP_MD5 {
        return Err(NeffError::Packager { pkg_version: h.pkg_version });
    }
    if h.data_size == 0 {
        return Err(NeffError::EmptyData { pkg_version: h.pkg_version });
    }
    Ok(h)
}

enum Hasher {
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn new(pkg: u64) -> Self {
        if pkg == PKG_VERSION_GZIP_MD5 {
            Hasher::Md5(md5::Md5::new())
        } else {
            Hasher::Sha256(sha2::Sha256::new())
        }
    }
    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(b),
            Hasher::Sha256(h) => h.update(b),
        }
    }
    fn finalize(self) -> Vec<u8> {
        match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads until `buf` is full or the source ends.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A `Read` over chunks arriving on a channel.
/// A consumed chunk goes back to the sender (`back`) to be filled again, so the hash pass
/// allocates a fixed number of chunks whatever the size of the NEFF.
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    back: Sender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let avail = self.fill_buf()?;
            let n = out.len().min(avail.len());
            out[..n].copy_from_slice(&avail[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

/// The inflater reads the chunks in place (no copy into a buffer of its own).
impl BufRead for ChannelReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos >= self.cur.len() {
            match self.rx.recv() {
                Ok(c) => {
                    let done = std::mem::replace(&mut self.cur, c);
                    if done.capacity() > 0 {
                        // The hasher may have finished; then the chunk is simply dropped.
                        let _ = self.back.send(done);
                    }
                    self.pos = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.cur[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.cur.len());
    }
}

/// Counts bytes passing through.
struct Counting<R> {
    inner: R,
    n: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(out)?;
        self.n += k as u64;
        Ok(k)
    }
}

/// Reads the 1024-byte header from `r` and runs the gates; returns the header and the data
/// window that follows it.
pub(crate) fn check_header_stream<R: Read>(mut r: R, file_size: u64) -> Result<(NeffHeader, io::Take<R>), NeffError> {
    if file_size < NEFF_HEADER_SIZE as u64 {
        return Err(NeffError::TooShort { size: file_size });
    }
    let mut hb = [0u8; NEFF_HEADER_SIZE];
    let got = read_full(&mut r, &mut hb).map_err(NeffError::Io)?;
    if got < NEFF_HEADER_SIZE {
        return Err(NeffError::TooShort { size: got as u64 });
    }
    let header = check_header(&hb, file_size)?;
    let data_size = header.data_size;
    Ok((header, r.take(data_size)))
}

/// Runs `f` over the data window. With `verify`, a helper thread reads and hashes the
/// window while `f` consumes it (one pass), and a digest mismatch or a short window takes
/// precedence over `f`'s own error (libnrt checks the digest first).
pub(crate) fn digest_pass<R: Read + Send, T>(
    mut window: R,
    header: &NeffHeader,
    verify: bool,
    f: impl FnOnce(&mut dyn BufRead) -> Result<T, NeffError>,
) -> Result<T, NeffError> {
    let pkg = header.pkg_version;
    let data_size = header.data_size;
    if !verify {
        let mut counted = io::BufReader::with_capacity(CHUNK, Counting { inner: window, n: 0 });
        let out = f(&mut counted);
        let counted = counted.get_ref();
        if pkg == PKG_VERSION_TAR_SHA256 && out.is_ok() && counted.n < data_size {
            return Err(NeffError::Archive(format!(
                "payload truncated: data_size {data_size}, only {} bytes present",
                counted.n
            )));
        }
        return out;
    }
    let (out, hashed) = std::thread::scope(|s| {
        let (tx, rx) = sync_channel::<Vec<u8>>(4);
        let (back, recycled) = channel::<Vec<u8>>();
        let hasher = s.spawn(move || -> io::Result<(Vec<u8>, u64)> {
            let mut h = Hasher::new(pkg);
            let mut total = 0u64;
            let mut forward = true;
            // Once forwarding stops, one chunk is reused in place.
            let mut spare: Option<Vec<u8>> = None;
            loop {
                // A chunk the reader is done with, else a new one (at most the channel's
                // depth plus the two the reader and this thread hold are ever allocated).
                let mut chunk = match spare.take().or_else(|| recycled.try_recv().ok()) {
                    Some(mut c) => {
                        c.resize(CHUNK, 0);
                        c
                    }
                    None => vec![0u8; CHUNK],
                };
                let n = read_full(&mut window, &mut chunk)?;
                if n == 0 {
                    break;
                }
                chunk.truncate(n);
                h.update(&chunk);
                total += n as u64;
                if forward {
                    if let Err(e) = tx.send(chunk) {
                        forward = false;
                        spare = Some(e.0);
                    }
                } else {
                    spare = Some(chunk);
                }
            }
            Ok((h.finalize(), total))
        });
        let mut rd = ChannelReader { rx, back, cur: Vec::new(), pos: 0 };
        let out = f(&mut rd);
        // Stop forwarding: the hasher finishes the window on its own.
        drop(rd);
        (out, hasher.join())
    });
    let (digest, total) = match hashed {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(NeffError::Io(e)),
        Err(_) => return Err(NeffError::Archive("digest thread failed".into())),
    };
    if total < data_size {
        return Err(NeffError::Archive(format!(
            "payload truncated: data_size {data_size}, only {total} bytes present"
        )));
    }
    let (algo, expected) =
        if pkg == PKG_VERSION_GZIP_MD5 { ("MD5", &header.hash[..16]) } else { ("SHA256", &header.hash[..]) };
    if digest[..] != *expected {
        return Err(NeffError::Digest { algo, expected: hex(expected), actual: hex(&digest) });
    }
    out
}
