//! The segment's layout: header, device table and NC slot words, the error kinds and the
//! latency buckets (docs/monitoring.md).

use neff::NrtStatus;

/// `"NVFIOCTR"` as a little-endian u64: header word 0.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVFIOCTR");
/// Layout version: header word 1.
pub const VERSION: u64 = 1;
/// Words in the fixed part of the header this writer makes; the device table follows
/// (header word [`hdr::HEADER_WORDS`] counts both).
pub const HEADER_WORDS: usize = 32;
/// Words per entry of the device table this writer makes ([`dev`]).
pub const DEVICE_WORDS: usize = 16;
/// Bytes of a device's identity an entry of [`DEVICE_WORDS`] words holds (a longer one is cut
/// at a character boundary).
pub const IDENTITY_BYTES: usize = (DEVICE_WORDS - dev::IDENTITY) * 8;
/// Words in the smallest header a reader accepts (the first layout's: no per-process
/// execution words, which then read as 0).
pub const MIN_HEADER_WORDS: usize = 16;
/// Words in each NC slot this writer makes.
pub const SLOT_WORDS: usize = 72;
/// Words in the smallest slot a reader accepts (the first layout's: no device-time
/// histogram, which then reads as 0).
pub const MIN_SLOT_WORDS: usize = 48;
/// Latency histogram buckets: bucket `b` counts executions with a host latency below
/// 2^b µs (bucket 0: under 1 µs), the last bucket everything longer.
pub const LAT_BUCKETS: usize = 24;

/// Header word indices.
pub mod hdr {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const PID: usize = 2;
    pub const NCS: usize = 3;
    pub const SLOT_WORDS: usize = 4;
    pub const HEADER_WORDS: usize = 5;
    /// Unix time (ns) the segment was created.
    pub const STARTED_NS: usize = 6;
    /// Bumped at the end of every execution (any NC): a reader sees the runtime progress.
    pub const UPDATES: usize = 7;
    /// Host DMA memory held by tensors placed in host memory, bytes.
    pub const HOST_TENSOR_BYTES: usize = 8;
    /// Devices the runtime drives.
    pub const DEVICES: usize = 9;
    /// Executions the process finished (any status), each counted once however many NCs
    /// its model spans (the NC slots count it on each of them).
    pub const EXECUTIONS: usize = 10;
    /// Of those, executions that ended with a status other than NRT_SUCCESS.
    pub const FAILED: usize = 11;
    /// Words per entry of the device table, which starts at [`DEVICE_TABLE`] with one entry
    /// per device ([`DEVICES`]); 0: no table (segments of writers before it, whose header
    /// reserved this word).
    pub const DEVICE_WORDS: usize = 12;
    /// The process's logical NeuronCore size (physical NCs per logical one); 0: not published
    /// (writers before it reserved this word: read as 1).
    pub const LNC: usize = 13;
    /// First per-process error counter; [`super::ErrorKind`] order (7 words, 16..=22).
    pub const ERRORS: usize = 16;
    /// Where the device table starts (right after the fixed header).
    pub const DEVICE_TABLE: usize = super::HEADER_WORDS;
}

/// Device table entry word indices (from the entry's start).
pub mod dev {
    /// How this process holds the device: [`super::Holding`] as a number.
    pub const HOLDING: usize = 0;
    /// First NC (device-local) this process owns on the device.
    pub const FIRST_NC: usize = 1;
    /// NCs it owns from there (a lease is contiguous).
    pub const OWNED_NCS: usize = 2;
    /// Length of the identity, bytes.
    pub const IDENTITY_LEN: usize = 3;
    /// The identity's UTF-8 bytes, 8 per word, little-endian, zero-padded.
    pub const IDENTITY: usize = 4;
}

/// NC slot word indices (from the slot's start).
pub mod slot {
    /// Device index (in the runtime's device list).
    pub const DEVICE: usize = 0;
    /// NC index within the device.
    pub const NC: usize = 1;
    /// NeuronCore version of the device's arch (2 sunda, 3 cayman, 4 mariana).
    pub const NC_VERSION: usize = 2;
    /// Models loaded on the NC now.
    pub const MODELS: usize = 3;
    /// Executions finished (any status).
    pub const EXECUTIONS: usize = 4;
    /// Executions that ended with a status other than NRT_SUCCESS.
    pub const FAILED: usize = 5;
    /// Device busy time: sum over executions of last END − first START (device records), ns.
    pub const BUSY_NS: usize = 6;
    /// Sum of host latencies (call to completion), ns.
    pub const LATENCY_SUM_NS: usize = 7;
    /// Unix time (ns) the last execution ended.
    pub const LAST_END_NS: usize = 8;
    /// Device memory held by the loaded models' staging (weights, variables, DMA rings,
    /// programs), bytes.
    pub const MEM_MODEL: usize = 9;
    /// Device memory held by tensors placed on the device, bytes.
    pub const MEM_TENSORS: usize = 10;
    /// Collectives barrier warnings: each time an execution's barrier wait passed the
    /// warning threshold (libnrt's "Waiting on barrier proxy task", threshold doubling;
    /// docs/faults.md). Word 11 was unused before, so older segments read 0 here.
    pub const BARRIER_WARNINGS: usize = 11;
    /// First error counter; [`super::ErrorKind`] order.
    pub const ERRORS: usize = 12;
    /// First latency histogram bucket ([`super::LAT_BUCKETS`] of them).
    pub const LATENCY: usize = 24;
    /// First device-time histogram bucket ([`super::LAT_BUCKETS`] of them, the latency
    /// buckets' bounds): each execution's busy time (END − START), when it has one.
    pub const DEVICE_LATENCY: usize = 48;
}

/// Error counters kept per NC, by the status an execution ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NqOverflow,
    DmaAbort,
    HbmUe,
    NcUe,
    Numerical,
    Timeout,
    Other,
}

impl ErrorKind {
    /// Every kind, in slot order.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::NqOverflow,
        ErrorKind::DmaAbort,
        ErrorKind::HbmUe,
        ErrorKind::NcUe,
        ErrorKind::Numerical,
        ErrorKind::Timeout,
        ErrorKind::Other,
    ];

    /// The name monitors print (`errors.nq_overflow`, label `kind="nq_overflow"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NqOverflow => "nq_overflow",
            ErrorKind::DmaAbort => "dma_abort",
            ErrorKind::HbmUe => "hbm_ue",
            ErrorKind::NcUe => "nc_ue",
            ErrorKind::Numerical => "numerical",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Other => "other",
        }
    }

    /// The counter an execution status feeds (none for success).
    pub fn of(status: NrtStatus) -> Option<ErrorKind> {
        use NrtStatus as S;
        Some(match status {
            S::Success => return None,
            S::ExecSwNqOverflow => ErrorKind::NqOverflow,
            S::ExecHwErrDmaAbort => ErrorKind::DmaAbort,
            S::ExecHwErrHbmUe | S::ExecHwErrRepairableHbmUe => ErrorKind::HbmUe,
            S::ExecHwErrNcUe => ErrorKind::NcUe,
            S::ExecCompletedWithNumErr => ErrorKind::Numerical,
            S::Timeout => ErrorKind::Timeout,
            _ => ErrorKind::Other,
        })
    }

    pub(super) fn word(self) -> usize {
        slot::ERRORS + self as usize
    }
}

/// The latency bucket of `ns`.
pub fn latency_bucket(ns: u64) -> usize {
    let us = ns / 1000;
    let b = if us == 0 { 0 } else { 64 - us.leading_zeros() as usize };
    b.min(LAT_BUCKETS - 1)
}

/// Upper bound (µs, exclusive) of latency bucket `b`; `None` for the last (open) bucket.
pub fn bucket_upper_us(b: usize) -> Option<u64> {
    (b + 1 < LAT_BUCKETS).then(|| 1u64 << b)
}
