//! The device host's request protocol: one small frame each way per connection (a
//! [`Request`], then its [`Reply`]), after which a `Connect`ed stream carries vfio-user.
//!
//! A frame is a 12-byte header — the magic `NVSH`, the version ([`VERSION`], u16), the tag
//! (u16) and the body's length (u32) — and a body of little-endian fields in a fixed order per
//! tag. Strings are a u32 length and UTF-8 bytes; lists are a u32 count and their elements.
//! The version is in every frame so a host and a broker built from different trees refuse each
//! other plainly instead of misreading fields. Decoding checks every length against what is
//! there (a peer's count never sizes an allocation by itself), refuses trailing bytes, and
//! never panics.

use std::io::{Read, Write};
use std::ops::Range;

use sim::SimStats;

/// First bytes of every frame.
pub const MAGIC: [u8; 4] = *b"NVSH";
/// The protocol version this build speaks (2: `SimStats::queue_cfg_misuse` in the stats body).
pub const VERSION: u16 = 2;
/// Bytes of a frame header.
pub const HEADER_SIZE: usize = 12;
/// Largest body accepted: far above any real frame (a control line, the stats of the largest
/// arch), low enough that a peer cannot make the reader allocate much.
pub const MAX_BODY: u32 = 1 << 20;

/// Frame tags. Requests have the high bit clear, replies set.
pub mod tag {
    pub const CONNECT: u16 = 0x0001;
    pub const END: u16 = 0x0002;
    pub const STATS: u16 = 0x0003;
    pub const CONTROL: u16 = 0x0004;
    pub const DESCRIBE: u16 = 0x0005;
    pub const RECLAIM: u16 = 0x0006;
    pub const RESET_NCS: u16 = 0x0007;
    pub const FWIO: u16 = 0x0008;
    pub const CONNECTED: u16 = 0x8001;
    pub const OK: u16 = 0x8002;
    pub const STATS_REPLY: u16 = 0x8003;
    pub const CONTROL_REPLY: u16 = 0x8004;
    pub const DESCRIBED: u16 = 0x8005;
    pub const FWIO_REPLY: u16 = 0x8008;
    pub const FAILED: u16 = 0x80fe;
    pub const ERROR: u16 = 0x80ff;
}

/// Why a frame could not be read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the stream before sending anything (a readiness probe does this).
    #[error("the peer closed the connection")]
    Closed,
    #[error("the stream ended inside a frame ({got} of {want} bytes)")]
    ShortFrame { got: usize, want: usize },
    #[error("bad magic {0:02x?} (not a sim-host frame)")]
    Magic([u8; 4]),
    #[error("protocol version {0} (this build speaks {VERSION})")]
    Version(u16),
    #[error("frame body of {0} bytes (at most {MAX_BODY})")]
    TooLong(u32),
    #[error("frame of {got} bytes, its header says {want}")]
    Length { got: usize, want: usize },
    #[error("unknown tag {0:#06x}")]
    Tag(u16),
    #[error("tag {0:#06x} is a reply, a request was expected")]
    NotARequest(u16),
    #[error("tag {0:#06x} is a request, a reply was expected")]
    NotAReply(u16),
    #[error("{what}: the body ends early")]
    Truncated { what: &'static str },
    #[error("{0} bytes after the last field")]
    Trailing(usize),
    #[error("{what}: range {start:#x}..{end:#x} is reversed or out of bounds")]
    Range { what: &'static str, start: u64, end: u64 },
    #[error("{what}: not UTF-8")]
    Utf8 { what: &'static str },
}

/// What a client asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Become a vfio-user data path bounded to this IOVA window and these NCs' vectors.
    Connect { iova_window: Range<u64>, ncs: Range<usize> },
    /// Shut data connection `id` down and wait for its cleanup.
    End { id: u64 },
    /// The simulator's counters.
    Stats,
    /// A control line (`sim_serve::control_command`).
    Control { line: String },
    /// What live data connection `id` is bounded to.
    Describe { id: u64 },
    /// Take NC `nc` back from a process that went (the host's own driver handle: engines
    /// stopped, queues parked, notification slots halted, the NC reset).
    Reclaim { nc: u32 },
    /// Reset NCs `mask` through the firmware mailbox (the firmware part only).
    ResetNcs { mask: u32 },
    /// One FW-IO request through the firmware mailbox.
    Fwio { cmd: u8, payload: Vec<u8> },
}

/// Why a device operation failed ([`Reply::Failed`]): kept so that the broker reports a
/// firmware timeout and the firmware's own error as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Anything else (the device's driver failed).
    Device = 0,
    /// The firmware did not answer in time.
    FirmwareTimeout = 1,
    /// The firmware answered with an error.
    Firmware = 2,
    /// The request was out of range (an NC the device does not have, a payload too long).
    Invalid = 3,
}

/// What the host answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The data connection's id (for `End`); the stream carries vfio-user from here on.
    Connected {
        id: u64,
    },
    Ok,
    /// Boxed: the counters are far larger than the other replies.
    Stats(Box<SimStats>),
    Control(String),
    /// A live data connection's bounds.
    Described {
        iova_window: Range<u64>,
        ncs: Range<usize>,
    },
    /// A FW-IO request's response payload.
    Fwio(Vec<u8>),
    /// A device operation failed: how, and the driver's message.
    Failed {
        kind: Failure,
        message: String,
    },
    /// The request was refused or malformed.
    Error(String),
}

impl Request {
    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Body::default();
        let t = match self {
            Request::Connect { iova_window, ncs } => {
                b.bounds(iova_window, ncs);
                tag::CONNECT
            }
            Request::End { id } => {
                b.u64(*id);
                tag::END
            }
            Request::Stats => tag::STATS,
            Request::Control { line } => {
                b.str(line);
                tag::CONTROL
            }
            Request::Describe { id } => {
                b.u64(*id);
                tag::DESCRIBE
            }
            Request::Reclaim { nc } => {
                b.u32(*nc);
                tag::RECLAIM
            }
            Request::ResetNcs { mask } => {
                b.u32(*mask);
                tag::RESET_NCS
            }
            Request::Fwio { cmd, payload } => {
                b.u32(u32::from(*cmd)).bytes(payload);
                tag::FWIO
            }
        };
        frame(t, &b.0)
    }

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let (t, body) = split(frame)?;
        let mut f = Fields(body);
        let r = match t {
            tag::CONNECT => {
                let (iova_window, ncs) = f.bounds()?;
                Request::Connect { iova_window, ncs }
            }
            tag::END => Request::End { id: f.u64("id")? },
            tag::STATS => Request::Stats,
            tag::CONTROL => Request::Control { line: f.str("control line")? },
            tag::DESCRIBE => Request::Describe { id: f.u64("id")? },
            tag::RECLAIM => Request::Reclaim { nc: f.u32("nc")? },
            tag::RESET_NCS => Request::ResetNcs { mask: f.u32("mask")? },
            tag::FWIO => {
                let cmd = f.u32("fwio command")?;
                let cmd = u8::try_from(cmd).map_err(|_| WireError::Range {
                    what: "fwio command",
                    start: cmd.into(),
                    end: 255,
                })?;
                Request::Fwio { cmd, payload: f.bytes("fwio payload")? }
            }
            t if t & 0x8000 != 0 => return Err(WireError::NotARequest(t)),
            t => return Err(WireError::Tag(t)),
        };
        f.end()?;
        Ok(r)
    }
}

impl Reply {
    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Body::default();
        let t = match self {
            Reply::Connected { id } => {
                b.u64(*id);
                tag::CONNECTED
            }
            Reply::Ok => tag::OK,
            Reply::Stats(s) => {
                stats_encode(&mut b, s);
                tag::STATS_REPLY
            }
            Reply::Control(s) => {
                b.str(s);
                tag::CONTROL_REPLY
            }
            Reply::Described { iova_window, ncs } => {
                b.bounds(iova_window, ncs);
                tag::DESCRIBED
            }
            Reply::Fwio(data) => {
                b.bytes(data);
                tag::FWIO_REPLY
            }
            Reply::Failed { kind, message } => {
                b.u32(*kind as u32).str(message);
                tag::FAILED
            }
            Reply::Error(s) => {
                b.str(s);
                tag::ERROR
            }
        };
        frame(t, &b.0)
    }

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let (t, body) = split(frame)?;
        let mut f = Fields(body);
        let r = match t {
            tag::CONNECTED => Reply::Connected { id: f.u64("id")? },
            tag::OK => Reply::Ok,
            tag::STATS_REPLY => Reply::Stats(Box::new(stats_decode(&mut f)?)),
            tag::CONTROL_REPLY => Reply::Control(f.str("control reply")?),
            tag::DESCRIBED => {
                let (iova_window, ncs) = f.bounds()?;
                Reply::Described { iova_window, ncs }
            }
            tag::FWIO_REPLY => Reply::Fwio(f.bytes("fwio data")?),
            tag::FAILED => {
                let kind = match f.u32("failure kind")? {
                    0 => Failure::Device,
                    1 => Failure::FirmwareTimeout,
                    2 => Failure::Firmware,
                    3 => Failure::Invalid,
                    k => return Err(WireError::Range { what: "failure kind", start: k.into(), end: 3 }),
                };
                Reply::Failed { kind, message: f.str("failure message")? }
            }
            tag::ERROR => Reply::Error(f.str("error message")?),
            t if t & 0x8000 == 0 => return Err(WireError::NotAReply(t)),
            t => return Err(WireError::Tag(t)),
        };
        f.end()?;
        Ok(r)
    }
}

/// Read one whole frame (header and body) from `r`, checking the header before reading the
/// body: [`WireError::Closed`] when the stream ends before its first byte.
pub fn read_frame(r: &mut impl Read) -> Result<Vec<u8>, WireError> {
    let mut header = [0u8; HEADER_SIZE];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Err(WireError::Closed);
    }
    if got < HEADER_SIZE {
        return Err(WireError::ShortFrame { got, want: HEADER_SIZE });
    }
    let len = check_header(&header)?;
    let want = HEADER_SIZE + len;
    let mut frame = header.to_vec();
    frame.resize(want, 0);
    let got = HEADER_SIZE + read_full(r, &mut frame[HEADER_SIZE..])?;
    if got < want {
        return Err(WireError::ShortFrame { got, want });
    }
    Ok(frame)
}

/// Write one frame.
pub fn write_frame(w: &mut impl Write, frame: &[u8]) -> Result<(), WireError> {
    w.write_all(frame)?;
    w.flush()?;
    Ok(())
}

/// Read until `buf` is full or the stream ends: the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn frame(tag: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_SIZE + body.len());
    f.extend_from_slice(&MAGIC);
    f.extend_from_slice(&VERSION.to_le_bytes());
    f.extend_from_slice(&tag.to_le_bytes());
    // Bodies this module builds are far below MAX_BODY (a control line is the only free-form
    // field); a larger one would be refused by the peer, not misread.
    f.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// The body length a header announces, after checking magic, version and bound.
fn check_header(h: &[u8; HEADER_SIZE]) -> Result<usize, WireError> {
    let magic = [h[0], h[1], h[2], h[3]];
    if magic != MAGIC {
        return Err(WireError::Magic(magic));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if len > MAX_BODY {
        return Err(WireError::TooLong(len));
    }
    Ok(len as usize)
}

/// A whole frame's tag and body.
fn split(frame: &[u8]) -> Result<(u16, &[u8]), WireError> {
    let Some((h, body)) = frame.split_first_chunk::<HEADER_SIZE>() else {
        return Err(WireError::ShortFrame { got: frame.len(), want: HEADER_SIZE });
    };
    let len = check_header(h)?;
    if body.len() != len {
        return Err(WireError::Length { got: frame.len(), want: HEADER_SIZE + len });
    }
    Ok((u16::from_le_bytes([h[6], h[7]]), body))
}

#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn count(&mut self, n: usize) -> &mut Self {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX))
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.count(b.len());
        self.0.extend_from_slice(b);
        self
    }
    /// A data connection's bounds: its IOVA window, its NCs.
    fn bounds(&mut self, iova_window: &Range<u64>, ncs: &Range<usize>) -> &mut Self {
        self.u64(iova_window.start).u64(iova_window.end).u64(ncs.start as u64).u64(ncs.end as u64)
    }
}

/// The unread rest of a body.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated { what });
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    /// A count of elements of `size` bytes each, checked against the bytes left.
    fn count(&mut self, size: usize, what: &'static str) -> Result<usize, WireError> {
        let n = self.u32(what)? as usize;
        match n.checked_mul(size) {
            Some(bytes) if bytes <= self.0.len() => Ok(n),
            _ => Err(WireError::Truncated { what }),
        }
    }
    fn str(&mut self, what: &'static str) -> Result<String, WireError> {
        String::from_utf8(self.bytes(what)?).map_err(|_| WireError::Utf8 { what })
    }
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.count(1, what)?;
        Ok(self.take(n, what)?.to_vec())
    }
    /// A data connection's bounds ([`Body::bounds`]).
    fn bounds(&mut self) -> Result<(Range<u64>, Range<usize>), WireError> {
        let iova_window = self.range("iova window")?;
        let ncs = self.range("ncs")?;
        let nc =
            |v: u64| usize::try_from(v).map_err(|_| WireError::Range { what: "ncs", start: ncs.start, end: ncs.end });
        Ok((iova_window, nc(ncs.start)?..nc(ncs.end)?))
    }
    /// `start..end` with `start <= end`.
    fn range(&mut self, what: &'static str) -> Result<Range<u64>, WireError> {
        let (start, end) = (self.u64(what)?, self.u64(what)?);
        if start > end {
            return Err(WireError::Range { what, start, end });
        }
        Ok(start..end)
    }
    fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.0.len()))
        }
    }
}

/// Every field of [`SimStats`], in declaration order. The destructuring names them all, so a
/// field added to `SimStats` fails to compile here until the wire carries it.
fn stats_encode(b: &mut Body, s: &SimStats) {
    let SimStats {
        iommu_mappings,
        iommu_bytes,
        device_bytes,
        dma_faults,
        dma_aborts,
        dma_bytes,
        dma_packets,
        nq_records,
        dropped_records,
        slots_executed,
        collectives,
        unclaimed_accesses,
        resets,
        fwio_requests,
        last_reset_map,
        fwio_legacy_misuse,
        dangling_unmaps,
        dangling_fetches,
        queue_cfg_misuse,
        enabled_engines,
        enabled_dma_queues,
        programmed_nq_slots,
        dge_channel_bytes,
        engine_states,
        threads,
        device_ns,
        oob_refused,
        hbm_written_bytes,
        hbm_dropped_bytes,
        hbm_zero_skipped_bytes,
    } = s;
    b.u64(*iommu_mappings).u64(*iommu_bytes).i64(*device_bytes);
    for v in [dma_faults, dma_aborts, dma_bytes, dma_packets, nq_records, dropped_records, slots_executed] {
        b.u64(*v);
    }
    for v in [collectives, unclaimed_accesses, resets, fwio_requests] {
        b.u64(*v);
    }
    b.u32(*last_reset_map);
    for v in [
        fwio_legacy_misuse,
        dangling_unmaps,
        dangling_fetches,
        queue_cfg_misuse,
        enabled_engines,
        enabled_dma_queues,
        programmed_nq_slots,
    ] {
        b.u64(*v);
    }
    b.count(dge_channel_bytes.len());
    for v in dge_channel_bytes {
        b.u64(*v);
    }
    b.count(engine_states.len());
    for nc in engine_states {
        for v in nc {
            b.u32(*v);
        }
    }
    for v in [threads, device_ns, oob_refused, hbm_written_bytes, hbm_dropped_bytes, hbm_zero_skipped_bytes] {
        b.u64(*v);
    }
}

fn stats_decode(f: &mut Fields<'_>) -> Result<SimStats, WireError> {
    const ENGINES: usize = csr_maps::Engine::COUNT;
    let mut s = SimStats {
        iommu_mappings: f.u64("stats")?,
        iommu_bytes: f.u64("stats")?,
        device_bytes: f.i64("stats")?,
        dma_faults: f.u64("stats")?,
        dma_aborts: f.u64("stats")?,
        dma_bytes: f.u64("stats")?,
        dma_packets: f.u64("stats")?,
        nq_records: f.u64("stats")?,
        dropped_records: f.u64("stats")?,
        slots_executed: f.u64("stats")?,
        collectives: f.u64("stats")?,
        unclaimed_accesses: f.u64("stats")?,
        resets: f.u64("stats")?,
        fwio_requests: f.u64("stats")?,
        last_reset_map: f.u32("stats")?,
        fwio_legacy_misuse: f.u64("stats")?,
        dangling_unmaps: f.u64("stats")?,
        dangling_fetches: f.u64("stats")?,
        queue_cfg_misuse: f.u64("stats")?,
        enabled_engines: f.u64("stats")?,
        enabled_dma_queues: f.u64("stats")?,
        programmed_nq_slots: f.u64("stats")?,
        ..SimStats::default()
    };
    let n = f.count(8, "dge channel bytes")?;
    s.dge_channel_bytes = (0..n).map(|_| f.u64("dge channel bytes")).collect::<Result<_, _>>()?;
    let n = f.count(4 * ENGINES, "engine states")?;
    s.engine_states = (0..n)
        .map(|_| {
            let mut nc = [0u32; ENGINES];
            for v in &mut nc {
                *v = f.u32("engine states")?;
            }
            Ok(nc)
        })
        .collect::<Result<_, WireError>>()?;
    s.threads = f.u64("stats")?;
    s.device_ns = f.u64("stats")?;
    s.oob_refused = f.u64("stats")?;
    s.hbm_written_bytes = f.u64("stats")?;
    s.hbm_dropped_bytes = f.u64("stats")?;
    s.hbm_zero_skipped_bytes = f.u64("stats")?;
    Ok(s)
}
