//! Streaming read: the tar is walked as it leaves the inflater, and the bodies of large
//! members go to a [`MemberSink`] (the runtime's sink writes them into device memory through
//! the DMA path) in chunks of at most 1 MiB instead of into the payload buffer, so host
//! memory stays bounded whatever the size of the weights.
//!
//! The in-memory reader ([`read_container`]) is this one with a sink that
//! takes no member ([`HoldAll`]): one tar walk, so both accept and refuse the same bytes with
//! the same status. The order of precedence: the header gates first; the digest of the compressed window (hashed
//! by a helper thread as it is read, so on the same pass) takes precedence over inflate and
//! tar errors; the inflated total never exceeds [`ReadOptions::mem_cap`] (streamed bodies
//! count); the gzip stream is read to its end, so its CRC and length are still verified.
//! A sink has therefore received data that a later check may refuse: the caller owns what the
//! sink made and drops it when the read fails.

use std::collections::HashMap;
use std::io::{self, BufRead, Read};
use std::sync::Arc;

use crate::container::{
    check_header_stream, digest_pass, Blob, Container, MemberInfo, ReadOptions, CHUNK, STREAM_PREFIX,
};
use crate::error::NeffError;
use crate::header::PKG_VERSION_GZIP_MD5;
use crate::status::NrtStatus;

/// Reads a NEFF from `r`, whose total length is `file_size`, through the container stages
/// (gates, digest, inflate, tar walk), every member held in memory. The walk is the streaming
/// reader's ([`read_container_streaming`] with a sink that takes no member), so
/// the in-memory and the streaming load accept and refuse the same bytes with the same error:
/// there is one tar walk.
pub fn read_container<R: Read + Send>(r: R, file_size: u64, opts: &ReadOptions) -> Result<Container, NeffError> {
    read_container_streaming(r, file_size, opts, &mut HoldAll)
}

/// Why a sink refused a member (mapped to [`NeffError::Sink`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkError {
    /// The status the load fails with (e.g. NRT_RESOURCE when device memory is short).
    pub status: NrtStatus,
    pub message: String,
}

/// Receives the bodies of the members it [`wants`](MemberSink::wants), in order, as they are
/// inflated. A name can arrive twice (a tar may repeat a member): the later one replaces the
/// earlier, as for members held in memory.
pub trait MemberSink {
    /// Whether member `name`, `size` bytes, is streamed to this sink.
    fn wants(&mut self, name: &str, size: u64) -> bool;
    /// A member starts: exactly `size` bytes follow through [`MemberSink::write`].
    fn begin(&mut self, name: &str, size: u64) -> Result<(), SinkError>;
    /// The next piece of the current member's body (at most 1 MiB).
    fn write(&mut self, data: &[u8]) -> Result<(), SinkError>;
    /// The current member is complete.
    fn end(&mut self) -> Result<(), SinkError>;
}

/// The sink of the in-memory reader: it takes no member, so every body stays in the payload
/// buffer.
pub struct HoldAll;

impl MemberSink for HoldAll {
    fn wants(&mut self, _: &str, _: u64) -> bool {
        false
    }
    fn begin(&mut self, _: &str, _: u64) -> Result<(), SinkError> {
        Ok(())
    }
    fn write(&mut self, _: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
    fn end(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Counts inflated bytes and stops one byte past the cap.
struct Capped<R> {
    inner: R,
    n: u64,
    limit: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.n);
        if room == 0 {
            return Ok(0);
        }
        let want = out.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let k = self.inner.read(&mut out[..want])?;
        self.n += k as u64;
        Ok(k)
    }
}

fn sink_err(member: &str, e: SinkError) -> NeffError {
    NeffError::Sink { member: member.to_string(), status: e.status, message: e.message }
}

fn read_some<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Walks the tar coming out of `src` (inflating it for pkg 2), sending wanted members to
/// `sink` and keeping the others (and a prefix of each streamed one) in the payload buffer.
fn walk_stream<R: BufRead>(
    src: R,
    pkg: u64,
    cap: u64,
    sink: &mut dyn MemberSink,
) -> Result<(Vec<u8>, Vec<MemberInfo>), NeffError> {
    let inner: Box<dyn Read + '_> =
        if pkg == PKG_VERSION_GZIP_MD5 { Box::new(flate2::bufread::GzDecoder::new(src)) } else { Box::new(src) };
    let mut ar = tar::Archive::new(Capped { inner, n: 0, limit: cap.saturating_add(1) });
    let res = walk_entries(&mut ar, cap, sink);
    let mut rest = ar.into_inner();
    // Read the stream to its end (the gzip trailer: CRC and length), still under the cap.
    let drained = res.and_then(|v| {
        io::copy(&mut rest, &mut io::sink()).map_err(|e| archive_io(e, pkg))?;
        Ok(v)
    });
    if rest.n > cap {
        return Err(NeffError::MemCap { cap });
    }
    drained
}

fn archive_io(e: io::Error, pkg: u64) -> NeffError {
    if pkg == PKG_VERSION_GZIP_MD5 {
        NeffError::Archive(format!("gzip inflate failed: {e}"))
    } else {
        NeffError::Archive(format!("reading the tar payload failed: {e}"))
    }
}

fn walk_entries<R: Read>(
    ar: &mut tar::Archive<R>,
    cap: u64,
    sink: &mut dyn MemberSink,
) -> Result<(Vec<u8>, Vec<MemberInfo>), NeffError> {
    let mut payload: Vec<u8> = Vec::new();
    let mut members = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    let entries = ar.entries().map_err(|e| NeffError::Archive(format!("tar open failed: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| NeffError::Archive(format!("tar header read failed: {e}")))?;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        let raw_name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if kind.is_gnu_sparse() {
            return Err(NeffError::Archive(format!("member {raw_name:?}: GNU sparse entries are not supported")));
        }
        let name = raw_name.strip_prefix("./").unwrap_or(&raw_name).to_string();
        if name.ends_with("wavegraph-bin.json") {
            continue;
        }
        let size = entry.size();
        if size > cap {
            return Err(NeffError::MemCap { cap });
        }
        let truncated = |got: u64| {
            NeffError::Archive(format!("member {name:?} claims size {size}, but the archive ends after {got} bytes"))
        };
        let start = payload.len();
        let streamed = sink.wants(&name, size);
        if streamed {
            sink.begin(&name, size).map_err(|e| sink_err(&name, e))?;
            let mut got = 0u64;
            while got < size {
                let want = usize::try_from(size - got).unwrap_or(CHUNK).min(CHUNK);
                let k = read_some(&mut entry, &mut buf[..want])
                    .map_err(|e| NeffError::Archive(format!("member {name:?}: {e}")))?;
                if k == 0 {
                    return Err(truncated(got));
                }
                let keep = STREAM_PREFIX.saturating_sub(payload.len() - start).min(k);
                payload.extend_from_slice(&buf[..keep]);
                sink.write(&buf[..k]).map_err(|e| sink_err(&name, e))?;
                got += k as u64;
            }
            sink.end().map_err(|e| sink_err(&name, e))?;
        } else {
            let want = usize::try_from(size).map_err(|_| NeffError::HostAlloc { bytes: size })?;
            payload.try_reserve(want).map_err(|_| NeffError::HostAlloc { bytes: size })?;
            let got = (&mut entry)
                .take(size)
                .read_to_end(&mut payload)
                .map_err(|e| NeffError::Archive(format!("member {name:?}: {e}")))?;
            if (got as u64) < size {
                return Err(truncated(got as u64));
            }
        }
        members.push(MemberInfo { name, size, range: start..payload.len(), streamed });
    }
    Ok((payload, members))
}

/// Reads a NEFF from `r` (total length `file_size`) with the bodies of the members `sink`
/// wants streamed to it; see the module documentation.
pub fn read_container_streaming<R: Read + Send>(
    r: R,
    file_size: u64,
    opts: &ReadOptions,
    sink: &mut dyn MemberSink,
) -> Result<Container, NeffError> {
    let (header, window) = check_header_stream(r, file_size)?;
    let pkg = header.pkg_version;
    let cap = opts.mem_cap;
    let (payload, members) = digest_pass(window, &header, opts.verify, |src| walk_stream(src, pkg, cap, sink))?;
    let mut index = HashMap::new();
    let mut kept: Vec<MemberInfo> = Vec::with_capacity(members.len());
    for m in members {
        // Duplicates overwrite (libnrt inserts into a map keyed by name).
        if let Some(&i) = index.get(&m.name) {
            kept[i] = m;
        } else {
            index.insert(m.name.clone(), kept.len());
            kept.push(m);
        }
    }
    let buf = Arc::new(payload);
    let len = buf.len();
    Ok(Container::from_parts(header, Blob::new(buf, 0..len), kept, index))
}
