//! The device host's request protocol: one small frame each way per connection (a
//! [`Request`], then its [`Reply`]), after which a `Connect`ed stream carries vfio-user.
//!
//! A frame is a 12-byte header — the magic `NVSH`, the version ([`VERSION`], u16), the tag
//! (u16) and the body's length (u32) — and a body of little-endian fields in a fixed order per
//! tag. Strings are a u32 length and UTF-8 bytes; lists are a u32 count and their elements.
//! The version is in every frame so a host and a broker built from different trees refuse each
//! other plainly instead of misreading fields. The frame is the [`wire`](::wire) codec's
//! ([`FORMAT`]): decoding checks every length against what is there (a peer's count never
//! sizes an allocation by itself), refuses trailing bytes, and never panics.

use std::io::Read;
use std::ops::Range;
use std::os::unix::net::UnixStream;

pub use ::wire::DecodeError;
use ::wire::{Dec, Enc, Format, Length, Width};
use sim::SimStats;

/// First bytes of every frame.
pub const MAGIC: [u8; 4] = *b"NVSH";
/// The protocol version this build speaks (2: `SimStats::queue_cfg_misuse` in the stats body).
pub const VERSION: u16 = 2;
/// Largest body accepted: far above any real frame (a control line, the stats of the largest
/// arch), low enough that a peer cannot make the reader allocate much.
pub const MAX_BODY: u32 = 1 << 20;

/// The frame layout: magic, version, a `u16` tag, the body's `u32` length; strings, byte
/// strings and lists counted by a `u32`.
pub static FORMAT: Format = Format {
    name: "sim-host",
    magic: &MAGIC,
    version: VERSION,
    tag: Width::U16,
    length: Length::Back,
    count: Width::U32,
    max_len: MAX_BODY as usize,
};

/// Strings and byte strings are bounded by the frame's limit only.
const ANY: usize = usize::MAX;

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
pub use ::wire::FrameError as WireError;

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
/// firmware timeout and the firmware's own error as such. The discriminants are the wire numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, num_enum::TryFromPrimitive, num_enum::IntoPrimitive)]
#[repr(u32)]
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
    fn tag(&self) -> u16 {
        match self {
            Request::Connect { .. } => tag::CONNECT,
            Request::End { .. } => tag::END,
            Request::Stats => tag::STATS,
            Request::Control { .. } => tag::CONTROL,
            Request::Describe { .. } => tag::DESCRIBE,
            Request::Reclaim { .. } => tag::RECLAIM,
            Request::ResetNcs { .. } => tag::RESET_NCS,
            Request::Fwio { .. } => tag::FWIO,
        }
    }

    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = FORMAT.encoder(self.tag());
        match self {
            Request::Connect { iova_window, ncs } => put_bounds(&mut e, iova_window, ncs),
            Request::End { id } | Request::Describe { id } => {
                e.u64(*id);
            }
            Request::Stats => {}
            Request::Control { line } => {
                e.str(line, ANY);
            }
            Request::Reclaim { nc: v } | Request::ResetNcs { mask: v } => {
                e.u32(*v);
            }
            Request::Fwio { cmd, payload } => {
                e.u32(u32::from(*cmd)).bytes(payload, ANY);
            }
        }
        e.finish()
    }

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, DecodeError> {
        let (t, mut f) = FORMAT.open(frame)?;
        let r = match t {
            tag::CONNECT => {
                let (iova_window, ncs) = get_bounds(&mut f)?;
                Request::Connect { iova_window, ncs }
            }
            tag::END => Request::End { id: f.u64("id")? },
            tag::STATS => Request::Stats,
            tag::CONTROL => Request::Control { line: f.str("control line", ANY)? },
            tag::DESCRIBE => Request::Describe { id: f.u64("id")? },
            tag::RECLAIM => Request::Reclaim { nc: f.u32("nc")? },
            tag::RESET_NCS => Request::ResetNcs { mask: f.u32("mask")? },
            tag::FWIO => {
                let cmd = f.u32("fwio command")?;
                let cmd = u8::try_from(cmd).map_err(|_| DecodeError::Range {
                    what: "fwio command",
                    start: cmd.into(),
                    end: 255,
                })?;
                Request::Fwio { cmd, payload: f.bytes("fwio payload", ANY)? }
            }
            t if t & 0x8000 != 0 => return Err(DecodeError::Kind { tag: t.into(), is: "reply", want: "request" }),
            t => return Err(DecodeError::Tag { what: "request", tag: t.into() }),
        };
        f.end()?;
        Ok(r)
    }
}

impl Reply {
    fn tag(&self) -> u16 {
        match self {
            Reply::Connected { .. } => tag::CONNECTED,
            Reply::Ok => tag::OK,
            Reply::Stats(_) => tag::STATS_REPLY,
            Reply::Control(_) => tag::CONTROL_REPLY,
            Reply::Described { .. } => tag::DESCRIBED,
            Reply::Fwio(_) => tag::FWIO_REPLY,
            Reply::Failed { .. } => tag::FAILED,
            Reply::Error(_) => tag::ERROR,
        }
    }

    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = FORMAT.encoder(self.tag());
        match self {
            Reply::Connected { id } => {
                e.u64(*id);
            }
            Reply::Ok => {}
            Reply::Stats(s) => stats_encode(&mut e, s),
            Reply::Control(s) | Reply::Error(s) => {
                e.str(s, ANY);
            }
            Reply::Described { iova_window, ncs } => put_bounds(&mut e, iova_window, ncs),
            Reply::Fwio(data) => {
                e.bytes(data, ANY);
            }
            Reply::Failed { kind, message } => {
                e.u32(u32::from(*kind)).str(message, ANY);
            }
        }
        e.finish()
    }

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, DecodeError> {
        let (t, mut f) = FORMAT.open(frame)?;
        let r = match t {
            tag::CONNECTED => Reply::Connected { id: f.u64("id")? },
            tag::OK => Reply::Ok,
            tag::STATS_REPLY => Reply::Stats(Box::new(stats_decode(&mut f)?)),
            tag::CONTROL_REPLY => Reply::Control(f.str("control reply", ANY)?),
            tag::DESCRIBED => {
                let (iova_window, ncs) = get_bounds(&mut f)?;
                Reply::Described { iova_window, ncs }
            }
            tag::FWIO_REPLY => Reply::Fwio(f.bytes("fwio data", ANY)?),
            tag::FAILED => {
                let k = f.u32("failure kind")?;
                let kind = Failure::try_from(k).map_err(|_| DecodeError::Range {
                    what: "failure kind",
                    start: k.into(),
                    end: u32::from(Failure::Invalid).into(),
                })?;
                Reply::Failed { kind, message: f.str("failure message", ANY)? }
            }
            tag::ERROR => Reply::Error(f.str("error message", ANY)?),
            t if t & 0x8000 == 0 => return Err(DecodeError::Kind { tag: t.into(), is: "request", want: "reply" }),
            t => return Err(DecodeError::Tag { what: "reply", tag: t.into() }),
        };
        f.end()?;
        Ok(r)
    }
}

/// Read one whole frame (header and body) from `r`, checking the header before reading the
/// body: [`WireError::Closed`] when the stream ends before its first byte.
pub fn read_frame(r: &mut impl Read) -> Result<Vec<u8>, WireError> {
    FORMAT.read_frame(r)
}

/// Write one frame.
pub fn write_frame(stream: &UnixStream, frame: &[u8]) -> Result<(), WireError> {
    ::wire::send_frame(stream, frame, &[])
}

/// A data connection's bounds: its IOVA window, its NCs.
fn put_bounds(e: &mut Enc, iova_window: &Range<u64>, ncs: &Range<usize>) {
    e.u64(iova_window.start).u64(iova_window.end).u64(ncs.start as u64).u64(ncs.end as u64);
}

/// A data connection's bounds ([`put_bounds`]).
fn get_bounds(f: &mut Dec<'_>) -> Result<(Range<u64>, Range<usize>), DecodeError> {
    let iova_window = f.range("iova window")?;
    let ncs = f.range("ncs")?;
    let nc =
        |v: u64| usize::try_from(v).map_err(|_| DecodeError::Range { what: "ncs", start: ncs.start, end: ncs.end });
    Ok((iova_window, nc(ncs.start)?..nc(ncs.end)?))
}

/// Every field of [`SimStats`], in declaration order. The destructuring names them all, so a
/// field added to `SimStats` fails to compile here until the wire carries it.
fn stats_encode(b: &mut Enc, s: &SimStats) {
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
        fwio_metrics_posted,
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
    for v in [
        threads,
        device_ns,
        oob_refused,
        hbm_written_bytes,
        hbm_dropped_bytes,
        hbm_zero_skipped_bytes,
        fwio_metrics_posted,
    ] {
        b.u64(*v);
    }
}

fn stats_decode(f: &mut Dec<'_>) -> Result<SimStats, DecodeError> {
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
    let n = f.count("dge channel bytes", 8, ANY)?;
    s.dge_channel_bytes = (0..n).map(|_| f.u64("dge channel bytes")).collect::<Result<_, _>>()?;
    let n = f.count("engine states", 4 * ENGINES, ANY)?;
    s.engine_states = (0..n)
        .map(|_| {
            let mut nc = [0u32; ENGINES];
            for v in &mut nc {
                *v = f.u32("engine states")?;
            }
            Ok(nc)
        })
        .collect::<Result<_, DecodeError>>()?;
    s.threads = f.u64("stats")?;
    s.device_ns = f.u64("stats")?;
    s.oob_refused = f.u64("stats")?;
    s.hbm_written_bytes = f.u64("stats")?;
    s.hbm_dropped_bytes = f.u64("stats")?;
    s.hbm_zero_skipped_bytes = f.u64("stats")?;
    s.fwio_metrics_posted = f.u64("stats")?;
    Ok(s)
}
