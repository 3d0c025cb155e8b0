//! The reader: a read-only view of a segment, and the discovery of live segments.

use std::path::{Path, PathBuf};

use platform::ShmWords;

use super::*;

/// One NC as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NcCounters {
    pub device: u64,
    pub nc: u64,
    pub nc_version: u64,
    pub models: u64,
    pub executions: u64,
    pub failed: u64,
    pub busy_ns: u64,
    pub latency_sum_ns: u64,
    pub last_end_ns: u64,
    pub mem_model: u64,
    pub mem_tensors: u64,
    /// Collectives barrier warnings ([`slot::BARRIER_WARNINGS`]).
    pub barrier_warnings: u64,
    /// [`ErrorKind::ALL`] order.
    pub errors: [u64; 7],
    pub latency: [u64; LAT_BUCKETS],
    /// Device-time histogram ([`slot::DEVICE_LATENCY`]; 0 in slots of the first layout).
    pub device_latency: [u64; LAT_BUCKETS],
}

/// A segment as a reader sees it at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub pid: u64,
    pub started_ns: u64,
    pub updates: u64,
    pub devices: u64,
    pub host_tensor_bytes: u64,
    /// The runtime's devices (index = an NC's `device`): identity and owned NCs. Empty for
    /// segments of writers before the device table.
    pub device_ids: Vec<DeviceId>,
    /// Executions of the process (each once, whatever NCs it spans), failed ones, and
    /// those by error kind ([`ErrorKind::ALL`] order).
    pub executions: u64,
    pub failed: u64,
    pub errors: [u64; 7],
    /// The process's logical NeuronCore size (1 for writers that did not publish it).
    pub lnc: u64,
    pub ncs: Vec<NcCounters>,
}

/// Why a segment could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Shm(#[from] platform::ShmError),
    #[error("{0}: not a counters segment (bad magic)")]
    Magic(PathBuf),
    #[error("{path}: layout version {version}, this reader knows {VERSION}")]
    Version { path: PathBuf, version: u64 },
    #[error("{0}: header and file length disagree")]
    Truncated(PathBuf),
    #[error("{0}: the device table does not fit its header")]
    DeviceTable(PathBuf),
}

/// A read-only view of another process's (or this one's) segment.
#[derive(Debug)]
pub struct Reader {
    shm: ShmWords,
    header: usize,
    /// Words per device table entry (0: no table).
    device_words: usize,
    devices: usize,
    slot_words: usize,
    ncs: usize,
}

impl Reader {
    /// Map `path` read-only and check its header.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let shm = ShmWords::open_read(path)?;
        let w = |i| shm.load(i).unwrap_or(0);
        if w(hdr::MAGIC) != MAGIC {
            return Err(ReadError::Magic(path.to_path_buf()));
        }
        if w(hdr::VERSION) != VERSION {
            return Err(ReadError::Version { path: path.to_path_buf(), version: w(hdr::VERSION) });
        }
        let (header, slot_words, ncs) = (w(hdr::HEADER_WORDS), w(hdr::SLOT_WORDS), w(hdr::NCS));
        let need = ncs.checked_mul(slot_words).and_then(|s| s.checked_add(header));
        if header < MIN_HEADER_WORDS as u64
            || slot_words < MIN_SLOT_WORDS as u64
            || need.is_none_or(|n| n > shm.len() as u64)
        {
            return Err(ReadError::Truncated(path.to_path_buf()));
        }
        // The device table: in the header, after its fixed part (word 12 was reserved, so 0,
        // in segments written before it).
        let (device_words, devices) =
            if header > hdr::DEVICE_WORDS as u64 { (w(hdr::DEVICE_WORDS), w(hdr::DEVICES)) } else { (0, 0) };
        if device_words != 0 {
            let end = devices.checked_mul(device_words).and_then(|t| t.checked_add(hdr::DEVICE_TABLE as u64));
            if device_words <= dev::IDENTITY as u64 || end.is_none_or(|e| e > header) {
                return Err(ReadError::DeviceTable(path.to_path_buf()));
            }
        }
        let (device_words, devices) =
            if device_words == 0 { (0, 0) } else { (device_words as usize, devices as usize) };
        Ok(Self {
            shm,
            header: header as usize,
            device_words,
            devices,
            slot_words: slot_words as usize,
            ncs: ncs as usize,
        })
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        self.shm.path()
    }

    /// The writer's process id.
    pub fn pid(&self) -> u64 {
        self.shm.load(hdr::PID).unwrap_or(0)
    }

    /// The device table (empty when the writer made none).
    pub fn device_ids(&self) -> Vec<DeviceId> {
        let h = |i| self.shm.load(i).unwrap_or(0);
        (0..self.devices)
            .map(|k| {
                let base = hdr::DEVICE_TABLE + k * self.device_words;
                let room = (self.device_words - dev::IDENTITY) * 8;
                let len = (h(base + dev::IDENTITY_LEN) as usize).min(room);
                let bytes: Vec<u8> =
                    (0..len.div_ceil(8)).flat_map(|j| h(base + dev::IDENTITY + j).to_le_bytes()).take(len).collect();
                let first = h(base + dev::FIRST_NC) as usize;
                let count = h(base + dev::OWNED_NCS) as usize;
                DeviceId {
                    identity: String::from_utf8_lossy(&bytes).into_owned(),
                    holding: if h(base + dev::HOLDING) == Holding::Leased as u64 {
                        Holding::Leased
                    } else {
                        Holding::Whole
                    },
                    owned: first..first.saturating_add(count),
                }
            })
            .collect()
    }

    /// Load every counter now.
    pub fn snapshot(&self) -> Snapshot {
        let h = |i| self.shm.load(i).unwrap_or(0);
        let ncs = (0..self.ncs)
            .map(|n| {
                let base = self.header + n * self.slot_words;
                let s = |i: usize| self.shm.load(base + i).unwrap_or(0);
                NcCounters {
                    device: s(slot::DEVICE),
                    nc: s(slot::NC),
                    nc_version: s(slot::NC_VERSION),
                    models: s(slot::MODELS),
                    executions: s(slot::EXECUTIONS),
                    failed: s(slot::FAILED),
                    busy_ns: s(slot::BUSY_NS),
                    latency_sum_ns: s(slot::LATENCY_SUM_NS),
                    last_end_ns: s(slot::LAST_END_NS),
                    mem_model: s(slot::MEM_MODEL),
                    mem_tensors: s(slot::MEM_TENSORS),
                    barrier_warnings: s(slot::BARRIER_WARNINGS),
                    errors: std::array::from_fn(|k| s(slot::ERRORS + k)),
                    latency: std::array::from_fn(|b| s(slot::LATENCY + b)),
                    device_latency: std::array::from_fn(|b| {
                        if self.slot_words > slot::DEVICE_LATENCY + b {
                            s(slot::DEVICE_LATENCY + b)
                        } else {
                            0
                        }
                    }),
                }
            })
            .collect();
        Snapshot {
            pid: h(hdr::PID),
            started_ns: h(hdr::STARTED_NS),
            updates: h(hdr::UPDATES),
            devices: h(hdr::DEVICES),
            host_tensor_bytes: h(hdr::HOST_TENSOR_BYTES),
            device_ids: self.device_ids(),
            // Words past a smaller (older) header are not the process's: 0.
            executions: if self.header > hdr::FAILED { h(hdr::EXECUTIONS) } else { 0 },
            failed: if self.header > hdr::FAILED { h(hdr::FAILED) } else { 0 },
            errors: std::array::from_fn(|k| if self.header > hdr::ERRORS + k { h(hdr::ERRORS + k) } else { 0 }),
            lnc: if self.header > hdr::LNC { h(hdr::LNC).max(1) } else { 1 },
            ncs,
        }
    }
}

/// Every live segment in `dir`: those whose writer process still exists (a segment left by
/// a killed process is skipped). Unreadable files are skipped too.
pub fn discover(dir: &Path) -> Vec<Reader> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> =
        rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| segment_pid(p).is_some()).collect();
    paths.sort();
    paths.iter().filter_map(|p| Reader::open(p).ok()).filter(|r| alive(r.pid())).collect()
}
