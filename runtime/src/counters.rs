//! Per-process counters in shared memory, for `neuron-vfio monitor` / `top` in other
//! processes (what neuron-monitor reads from the Neuron runtime).
//!
//! Each initialized [`Runtime`](crate::Runtime) built with this observer ([`attach`]; the CLI
//! and libnrt.so install it) publishes one segment: a file
//! `neuron-vfio.PID.N.counters` in `NEURON_VFIO_SHM_DIR` (default `/dev/shm`), mapped shared,
//! made of 64-bit words. The runtime is its only writer; monitors map it read-only. Every
//! word is updated with a single relaxed atomic operation, so the execute path takes no
//! lock and makes no syscall for it: an atomic add, or, for an NC's execution words, a
//! relaxed load and store — those are written only by the execution that holds the NC's
//! lane (executions on an NC are serialized, and the lane's hand-over orders one writer
//! after the next), so no update is lost without a locked read-modify-write.
//! `NEURON_VFIO_COUNTERS=0` turns publishing off.
//!
//! The layout (version [`VERSION`]) is documented in `docs/monitoring.md`: a header of
//! [`HEADER_WORDS`] words and a device table ([`DEVICE_WORDS`] words per device: its identity
//! — the device, never the process — and the NCs this process owns on it), then one slot of
//! [`SLOT_WORDS`] words per NeuronCore of its devices (global NC index order). Readers must
//! check [`MAGIC`] and [`VERSION`] and take the header, table and slot sizes from the header,
//! so later versions may append words.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use neff::NrtStatus;
use platform::ShmWords;

use crate::observe::Observer;

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

    fn word(self) -> usize {
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

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Where segments live: `NEURON_VFIO_SHM_DIR`, else `/dev/shm` (the temp dir without it).
pub fn shm_dir() -> PathBuf {
    crate::env::shm_dir()
}

/// Whether publishing is on (`NEURON_VFIO_COUNTERS` is not `0`).
pub fn enabled() -> bool {
    crate::env::counters_enabled()
}

/// How a process holds a device (device table word [`dev::HOLDING`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// The whole device is this process's: a VFIO device it opened, or a simulated device
    /// private to it.
    Whole = 1,
    /// Some NCs of a device shared through the broker (docs/sharing.md), leased by this
    /// process; other processes may own the others.
    Leased = 2,
}

/// A device as the segment names it: its identity and what this process owns of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    /// The device, the same in every process that uses it: the PCI address (BDF) of a VFIO
    /// device, the broker's name of a shared simulated device (`sim:shared:ARCH:K`), and for
    /// a simulated device private to the process `sim:PID/INDEX` (it is that process's alone).
    pub identity: String,
    pub holding: Holding,
    /// The NCs (device-local) this process owns on it.
    pub owned: Range<usize>,
}

/// Whether a platform location is a simulator private to this process (`sim0`, `sim1`, …,
/// as `sim::SimDevice` names its devices).
fn private_sim(location: &str) -> bool {
    location.strip_prefix("sim").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl DeviceId {
    /// The identity of device `index` of a runtime, and what this process owns of it: a
    /// shared device's leased NCs (`hal::Device::owned_ncs`), else all of them.
    pub fn of(dev: &hal::Device, index: usize) -> Self {
        let location = dev.platform().identity().location;
        match dev.owned_ncs() {
            Some(owned) => Self { identity: location, holding: Holding::Leased, owned },
            None => {
                let identity =
                    if private_sim(&location) { format!("sim:{}/{index}", std::process::id()) } else { location };
                Self { identity, holding: Holding::Whole, owned: 0..dev.nc_count() }
            }
        }
    }

    /// Whether the process owns device-local NC `nc`.
    pub fn owns(&self, nc: usize) -> bool {
        self.owned.contains(&nc)
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One NC the segment describes: (device index, NC within the device, NC version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcId {
    pub device: usize,
    pub nc: usize,
    pub nc_version: u32,
}

/// The writer: a runtime's segment.
#[derive(Debug)]
pub struct Counters {
    shm: ShmWords,
    ncs: usize,
    /// Words before the first slot: the fixed header and the device table.
    header: usize,
    /// Unix time (ns) at `at`: an execution's end is stamped from the host instant the
    /// runtime already read (no second clock read per execute).
    unix_at: (std::time::Instant, u64),
    /// The loaded models, listed in a file beside the segment.
    models: ModelList,
}

/// The file beside a segment that lists its runtime's loaded models (JSON), for
/// neuron-monitor's `loaded_models`: `neuron-vfio.PID.N.models`.
pub fn models_path(segment: &Path) -> PathBuf {
    segment.with_extension("models")
}

/// One loaded model, as the models file lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedModel {
    pub id: u64,
    pub name: String,
    /// The NEFF header's UUID, 32 hex digits.
    pub uuid: String,
    /// Global NCs (the segment's slot indices).
    pub ncs: Vec<usize>,
    /// Device memory its staging took on each.
    pub bytes_per_nc: Vec<u64>,
}

/// The models of a segment's runtime (none when it lists none, or the file is unreadable).
pub fn read_models(segment: &Path) -> Vec<ListedModel> {
    std::fs::read(models_path(segment)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// The writer of the models file: rewritten whole (to a temporary file, then renamed) at
/// each load and unload, never on the execute path; removed with the segment.
#[derive(Debug)]
struct ModelList {
    path: PathBuf,
    models: std::sync::Mutex<std::collections::BTreeMap<u64, ListedModel>>,
}

impl ModelList {
    fn update(&self, m: &crate::observe::ModelDesc<'_>, loaded: bool) {
        let Ok(mut all) = self.models.lock() else { return };
        if loaded {
            let uuid = m.uuid.iter().map(|b| format!("{b:02x}")).collect();
            let e = ListedModel {
                id: m.id,
                name: m.name.to_string(),
                uuid,
                ncs: m.ncs.to_vec(),
                bytes_per_nc: m.bytes_per_nc.to_vec(),
            };
            all.insert(m.id, e);
        } else {
            all.remove(&m.id);
        }
        let list: Vec<&ListedModel> = all.values().collect();
        let tmp = self.path.with_extension("models.tmp");
        let written = serde_json::to_vec(&list)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::debug!("{}: {e}", self.path.display());
        }
    }
}

impl Drop for ModelList {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

static SEGMENT_SEQ: AtomicU64 = AtomicU64::new(0);

impl Counters {
    /// Create this process's next segment in [`shm_dir`] for `ncs` (global NC order) on
    /// `devices` (the runtime's, in order).
    pub fn create(ncs: &[NcId], devices: &[DeviceId]) -> Result<Self, platform::ShmError> {
        let n = SEGMENT_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = shm_dir();
        if n == 0 {
            remove_stale(&dir);
        }
        let path = dir.join(format!("neuron-vfio.{}.{n}.counters", std::process::id()));
        Self::create_at(&path, ncs, devices)
    }

    /// Create a segment at `path`.
    pub fn create_at(path: &Path, ncs: &[NcId], devices: &[DeviceId]) -> Result<Self, platform::ShmError> {
        let header = HEADER_WORDS + devices.len() * DEVICE_WORDS;
        let shm = ShmWords::create(path, header + ncs.len() * SLOT_WORDS)?;
        let models = ModelList { path: models_path(path), models: Default::default() };
        let c = Self { shm, ncs: ncs.len(), header, unix_at: (std::time::Instant::now(), now_ns()), models };
        for (i, id) in ncs.iter().enumerate() {
            c.set(i, slot::DEVICE, id.device as u64);
            c.set(i, slot::NC, id.nc as u64);
            c.set(i, slot::NC_VERSION, id.nc_version as u64);
        }
        let h = c.words();
        let put = |i: usize, v: u64| {
            if let Some(w) = h.get(i) {
                w.store(v, Ordering::Relaxed);
            }
        };
        for (k, d) in devices.iter().enumerate() {
            let base = hdr::DEVICE_TABLE + k * DEVICE_WORDS;
            let id = cut(&d.identity, IDENTITY_BYTES).as_bytes();
            put(base + dev::HOLDING, d.holding as u64);
            put(base + dev::FIRST_NC, d.owned.start as u64);
            put(base + dev::OWNED_NCS, d.owned.len() as u64);
            put(base + dev::IDENTITY_LEN, id.len() as u64);
            for (j, chunk) in id.chunks(8).enumerate() {
                let mut b = [0u8; 8];
                b[..chunk.len()].copy_from_slice(chunk);
                put(base + dev::IDENTITY + j, u64::from_le_bytes(b));
            }
        }
        put(hdr::PID, std::process::id() as u64);
        put(hdr::NCS, ncs.len() as u64);
        put(hdr::SLOT_WORDS, SLOT_WORDS as u64);
        put(hdr::HEADER_WORDS, header as u64);
        put(hdr::DEVICE_WORDS, DEVICE_WORDS as u64);
        put(hdr::STARTED_NS, now_ns());
        put(hdr::DEVICES, devices.len() as u64);
        put(hdr::VERSION, VERSION);
        // Last, with release: a reader that sees the magic sees a complete header.
        if let Some(m) = h.get(hdr::MAGIC) {
            m.store(MAGIC, Ordering::Release);
        }
        Ok(c)
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        self.shm.path()
    }

    fn words(&self) -> &[AtomicU64] {
        // The creator's handle is read-write, so this is always `Some`; an empty slice
        // otherwise makes every update a no-op rather than a panic.
        self.shm.words().unwrap_or(&[])
    }

    fn word(&self, nc: usize, w: usize) -> Option<&AtomicU64> {
        if nc >= self.ncs {
            return None;
        }
        self.words().get(self.header + nc * SLOT_WORDS + w)
    }

    fn add(&self, nc: usize, w: usize, v: u64) {
        if let Some(a) = self.word(nc, w) {
            a.fetch_add(v, Ordering::Relaxed);
        }
    }

    fn sub(&self, nc: usize, w: usize, v: u64) {
        if let Some(a) = self.word(nc, w) {
            // Saturating: a gauge never wraps below zero.
            let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(x.saturating_sub(v)));
        }
    }

    fn set(&self, nc: usize, w: usize, v: u64) {
        if let Some(a) = self.word(nc, w) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// An execution of a model on global NCs `ncs` ended: its status, host latency and
    /// device busy time (from the START/END records; 0 when it failed before them). The
    /// caller must hold the lanes of `ncs` (executions on an NC are counted one at a time).
    pub fn execution(&self, ncs: &[usize], status: NrtStatus, latency_ns: u64, busy_ns: u64) {
        self.execution_at(ncs, status, latency_ns, busy_ns, 0, std::time::Instant::now());
    }

    /// [`Counters::execution`] for an execution that ended at host instant `end` (its unix
    /// time is derived from the pair of clocks read when the segment was created) after
    /// `barrier_warnings` collectives-barrier warnings.
    pub fn execution_at(
        &self,
        ncs: &[usize],
        status: NrtStatus,
        latency_ns: u64,
        busy_ns: u64,
        barrier_warnings: u32,
        end: std::time::Instant,
    ) {
        let (at, unix) = self.unix_at;
        let end = unix.saturating_add(end.saturating_duration_since(at).as_nanos() as u64);
        let bucket = latency_bucket(latency_ns);
        let device_bucket = latency_bucket(busy_ns);
        let failed = ErrorKind::of(status);
        let words = self.words();
        let mut counted = false;
        for &nc in ncs {
            // The NC's slot, found once (an NC beyond the segment is ignored).
            let base = self.header + nc * SLOT_WORDS;
            let Some(own) = (nc < self.ncs).then(|| words.get(base..base + SLOT_WORDS)).flatten() else { continue };
            let bump = |w: usize, v: u64| {
                // Only the execution holding the NC's lane writes these words (module docs).
                if let Some(a) = own.get(w) {
                    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
                }
            };
            counted = true;
            bump(slot::EXECUTIONS, 1);
            bump(slot::BUSY_NS, busy_ns);
            bump(slot::LATENCY_SUM_NS, latency_ns);
            bump(slot::LATENCY + bucket, 1);
            if busy_ns > 0 {
                bump(slot::DEVICE_LATENCY + device_bucket, 1);
            }
            if let Some(k) = failed {
                bump(slot::FAILED, 1);
                bump(k.word(), 1);
            }
            if barrier_warnings > 0 {
                bump(slot::BARRIER_WARNINGS, u64::from(barrier_warnings));
            }
            if let Some(a) = own.get(slot::LAST_END_NS) {
                a.store(end, Ordering::Relaxed);
            }
        }
        if counted {
            // Per process: executions on different NCs end concurrently, so these are
            // atomic adds (on the header's line, as UPDATES).
            let add = |w: usize| {
                if let Some(a) = words.get(w) {
                    a.fetch_add(1, Ordering::Relaxed);
                }
            };
            add(hdr::EXECUTIONS);
            if let Some(k) = failed {
                add(hdr::FAILED);
                add(hdr::ERRORS + k as usize);
            }
        }
        if let Some(u) = words.get(hdr::UPDATES) {
            u.fetch_add(1, Ordering::Release);
        }
    }

    /// A model was loaded on `ncs` (`bytes_per_nc`: device memory its staging took on each).
    pub fn model_loaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        for (i, &nc) in ncs.iter().enumerate() {
            self.add(nc, slot::MODELS, 1);
            self.add(nc, slot::MEM_MODEL, bytes_per_nc.get(i).copied().unwrap_or(0));
        }
    }

    /// A model was unloaded from `ncs`, giving back `bytes_per_nc`.
    pub fn model_unloaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        for (i, &nc) in ncs.iter().enumerate() {
            self.sub(nc, slot::MODELS, 1);
            self.sub(nc, slot::MEM_MODEL, bytes_per_nc.get(i).copied().unwrap_or(0));
        }
    }

    /// A tensor of `bytes` was allocated (`on_device`: on global NC `nc`'s HBM; else host
    /// DMA memory) or, with `freed`, released.
    pub fn tensor(&self, nc: usize, bytes: u64, on_device: bool, freed: bool) {
        match (on_device, freed) {
            (true, false) => self.add(nc, slot::MEM_TENSORS, bytes),
            (true, true) => self.sub(nc, slot::MEM_TENSORS, bytes),
            (false, _) => {
                if let Some(h) = self.words().get(hdr::HOST_TENSOR_BYTES) {
                    if freed {
                        let _ = h.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(x.saturating_sub(bytes)));
                    } else {
                        h.fetch_add(bytes, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// The segment for a runtime driving `devs` (global NC order), or None when publishing is
/// off or the segment cannot be made (logged: monitoring is never worth failing `init`).
pub fn publish(devs: &[hal::Device]) -> Option<Arc<Counters>> {
    if !enabled() {
        return None;
    }
    let devices: Vec<DeviceId> = devs.iter().enumerate().map(|(i, d)| DeviceId::of(d, i)).collect();
    let ids: Vec<NcId> = devs
        .iter()
        .enumerate()
        .flat_map(|(d, dev)| {
            let v = dev.arch().nc_version;
            (0..dev.nc_count()).map(move |nc| NcId { device: d, nc, nc_version: v as u32 })
        })
        .collect();
    match Counters::create(&ids, &devices) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            tracing::warn!("counters for monitors not published: {e}");
            None
        }
    }
}

/// The counters observer of a runtime's init…close session: [`publish`] as an
/// [`Attach`](crate::observe::Attach)er (front ends install it; [`crate::monitoring`]).
pub fn attach(devs: &[hal::Device]) -> Option<Arc<dyn Observer>> {
    publish(devs).map(|c| c as Arc<dyn Observer>)
}

/// The segment is the runtime's observer: every event is a relaxed atomic update.
impl Observer for Counters {
    fn kind(&self) -> &'static str {
        crate::observe::COUNTERS
    }

    fn logical_nc_config(&self, lnc: usize) {
        if let Some(w) = self.words().get(hdr::LNC) {
            w.store(lnc as u64, Ordering::Relaxed);
        }
    }

    fn path(&self) -> Option<PathBuf> {
        Some(self.shm.path().to_path_buf())
    }

    fn execution(
        &self,
        ncs: &[usize],
        status: NrtStatus,
        latency_ns: u64,
        busy_ns: u64,
        barrier_warnings: u32,
        end: std::time::Instant,
    ) {
        self.execution_at(ncs, status, latency_ns, busy_ns, barrier_warnings, end);
    }

    fn model_loaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        Counters::model_loaded(self, ncs, bytes_per_nc);
    }

    fn model_unloaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        Counters::model_unloaded(self, ncs, bytes_per_nc);
    }

    fn model_listed(&self, m: &crate::observe::ModelDesc<'_>, loaded: bool) {
        self.models.update(m, loaded);
    }

    fn tensor(&self, nc: usize, bytes: u64, on_device: bool, freed: bool) {
        Counters::tensor(self, nc, bytes, on_device, freed);
    }
}

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

/// The writer pid in a segment's file name `neuron-vfio.PID.N.counters`.
fn segment_pid(p: &Path) -> Option<u32> {
    let n = p.file_name()?.to_str()?.strip_prefix("neuron-vfio.")?.strip_suffix(".counters")?;
    n.split('.').next()?.parse().ok()
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove segments left in `dir` by processes that died without closing their runtime
/// (killed): done once per process, at its first segment. Files of other users stay (the
/// sticky `/dev/shm` refuses), which is harmless: readers skip dead writers.
fn remove_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for p in rd.filter_map(|e| e.ok().map(|e| e.path())) {
        // A models file goes with its segment: judged by the segment name it stands for.
        let seg = if p.extension().is_some_and(|e| e == "models") { p.with_extension("counters") } else { p.clone() };
        if segment_pid(&seg).is_some_and(|pid| !alive(pid as u64)) {
            let _ = std::fs::remove_file(&p);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<NcId> {
        (0..n).map(|i| NcId { device: i / 2, nc: i % 2, nc_version: 3 }).collect()
    }

    fn devs(n: usize) -> Vec<DeviceId> {
        (0..n).map(|i| DeviceId { identity: format!("0000:1{i}:1c.0"), holding: Holding::Whole, owned: 0..2 }).collect()
    }

    #[test]
    fn the_device_table_names_each_device_and_its_owned_ncs() {
        let dir = std::env::temp_dir().join(format!("rt-counters-devs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join(format!("neuron-vfio.{}.0.counters", std::process::id()));
        let long = "é".repeat(IDENTITY_BYTES); // 2 bytes each: cut at a character boundary
        let table = vec![
            DeviceId { identity: "sim:shared:cayman:1".into(), holding: Holding::Leased, owned: 3..5 },
            DeviceId { identity: "0000:10:1c.0".into(), holding: Holding::Whole, owned: 0..2 },
            DeviceId { identity: long.clone(), holding: Holding::Whole, owned: 0..2 },
        ];
        let ncs: Vec<NcId> = (0..6).map(|i| NcId { device: i / 2, nc: i % 2, nc_version: 3 }).collect();
        let c = Counters::create_at(&p, &ncs, &table).expect("create");
        c.execution(&[5], NrtStatus::Success, 1_000, 10);
        let r = Reader::open(&p).expect("open");
        let got = r.device_ids();
        assert_eq!(&got[..2], &table[..2]);
        assert_eq!(got[2].identity, "é".repeat(IDENTITY_BYTES / 2));
        assert!(got[0].owns(3) && got[0].owns(4) && !got[0].owns(2) && !got[0].owns(5));
        // The slots follow the table: the counts land where the reader looks.
        let s = r.snapshot();
        assert_eq!(s.device_ids, got);
        assert_eq!((s.ncs[5].device, s.ncs[5].nc, s.ncs[5].executions), (2, 1, 1));
        assert_eq!(s.ncs.iter().map(|n| n.executions).sum::<u64>(), 1);
        drop(c);

        // A table that does not fit the header it claims to be in is refused.
        let mut b = vec![0u8; 8 * (HEADER_WORDS + DEVICE_WORDS)];
        let mut put = |i: usize, v: u64| b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        put(hdr::MAGIC, MAGIC);
        put(hdr::VERSION, VERSION);
        put(hdr::SLOT_WORDS, SLOT_WORDS as u64);
        put(hdr::HEADER_WORDS, (HEADER_WORDS + DEVICE_WORDS) as u64);
        put(hdr::DEVICE_WORDS, DEVICE_WORDS as u64);
        put(hdr::DEVICES, 2);
        std::fs::write(&p, &b).expect("write");
        assert!(matches!(Reader::open(&p), Err(ReadError::DeviceTable(_))));
        // A segment of a writer before the table (word 12 reserved, 0): no devices named.
        b[hdr::DEVICE_WORDS * 8..hdr::DEVICE_WORDS * 8 + 8].copy_from_slice(&0u64.to_le_bytes());
        std::fs::write(&p, &b).expect("write");
        assert!(Reader::open(&p).expect("open").device_ids().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_the_simulators_own_devices_are_private() {
        assert!(private_sim("sim0") && private_sim("sim15"));
        for not in ["sim", "sim:shared:cayman:0", "0000:10:1c.0", "simx", "vfio-user"] {
            assert!(!private_sim(not), "{not}");
        }
    }

    #[test]
    fn buckets_are_powers_of_two_microseconds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(999), 0);
        assert_eq!(latency_bucket(1_000), 1);
        assert_eq!(latency_bucket(1_999), 1);
        assert_eq!(latency_bucket(2_000), 2);
        assert_eq!(latency_bucket(1_000_000), 10);
        assert_eq!(latency_bucket(u64::MAX), LAT_BUCKETS - 1);
        assert_eq!(bucket_upper_us(0), Some(1));
        assert_eq!(bucket_upper_us(10), Some(1024));
        assert_eq!(bucket_upper_us(LAT_BUCKETS - 1), None);
    }

    #[test]
    fn a_reader_sees_what_the_writer_counts() {
        let dir = std::env::temp_dir().join(format!("rt-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join(format!("neuron-vfio.{}.0.counters", std::process::id()));
        let c = Counters::create_at(&p, &ids(4), &devs(2)).expect("create");
        c.model_loaded(&[1, 2], &[4096, 8192]);
        c.execution(&[1, 2], NrtStatus::Success, 1_500, 700);
        c.execution(&[1], NrtStatus::ExecSwNqOverflow, 3_000_000, 0);
        c.tensor(2, 128, true, false);
        c.tensor(0, 256, false, false);
        c.tensor(0, 56, false, true);
        c.execution(&[9], NrtStatus::Success, 1, 1); // no such NC: ignored
        let readers = discover(&dir);
        assert_eq!(readers.len(), 1);
        let s = readers[0].snapshot();
        assert_eq!(s.pid, std::process::id() as u64);
        assert_eq!((s.devices, s.updates, s.host_tensor_bytes), (2, 3, 200));
        assert_eq!(s.ncs.len(), 4);
        let n1 = &s.ncs[1];
        assert_eq!((n1.device, n1.nc, n1.nc_version, n1.models), (0, 1, 3, 1));
        assert_eq!((n1.executions, n1.failed, n1.busy_ns, n1.mem_model), (2, 1, 700, 4096));
        assert_eq!(n1.errors[ErrorKind::NqOverflow as usize], 1);
        assert_eq!(n1.latency[1] + n1.latency[12], 2);
        // Device time: only the execution that had START/END records (700 ns: bucket 0).
        assert_eq!((n1.device_latency[0], n1.device_latency.iter().sum::<u64>()), (1, 1));
        assert!(n1.last_end_ns > 0);
        let n2 = &s.ncs[2];
        assert_eq!((n2.device, n2.nc, n2.executions, n2.failed, n2.mem_tensors), (1, 0, 1, 0, 128));
        assert_eq!(s.ncs[0].executions, 0);
        // Per process each execution counts once (the 2-NC one too; the ignored one not).
        assert_eq!((s.executions, s.failed, s.errors[ErrorKind::NqOverflow as usize]), (2, 1, 1));
        // The models file lists what is loaded, by name, and goes with the segment.
        let m = crate::observe::ModelDesc {
            id: 7,
            name: "m7",
            uuid: [0xab; 16],
            ncs: &[1, 2],
            bytes_per_nc: &[4096, 8192],
        };
        Observer::model_listed(&c, &m, true);
        let listed = read_models(&p);
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].id, listed[0].name.as_str(), &listed[0].ncs[..]), (7, "m7", &[1usize, 2][..]));
        assert_eq!(listed[0].uuid, "ab".repeat(16));
        Observer::model_listed(&c, &m, false);
        assert!(read_models(&p).is_empty());
        Observer::model_listed(&c, &m, true);
        c.model_unloaded(&[1, 2], &[4096, 9000]);
        let s = readers[0].snapshot();
        assert_eq!((s.ncs[1].models, s.ncs[1].mem_model, s.ncs[2].mem_model), (0, 0, 0));
        drop(c);
        assert!(discover(&dir).is_empty(), "the segment goes with its runtime");
        assert!(!models_path(&p).exists(), "and its models file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn segments_of_dead_processes_are_removed() {
        let dir = std::env::temp_dir().join(format!("rt-counters-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // pid_max is at most 2^22: no process has this id.
        let dead = dir.join("neuron-vfio.4294967.0.counters");
        let mine = dir.join(format!("neuron-vfio.{}.7.counters", std::process::id()));
        let other = dir.join("unrelated.counters");
        for p in [&dead, &mine, &other] {
            std::fs::write(p, [0u8; 8]).expect("write");
        }
        assert_eq!(segment_pid(&dead), Some(4294967));
        assert_eq!(segment_pid(&other), None);
        remove_stale(&dir);
        assert!(!dead.exists() && mine.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn readers_refuse_foreign_files() {
        let dir = std::env::temp_dir().join(format!("rt-counters-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("neuron-vfio.1.0.counters");
        std::fs::write(&p, [7u8; 64]).expect("write");
        assert!(matches!(Reader::open(&p), Err(ReadError::Magic(_))));
        let mut b = vec![0u8; 8 * HEADER_WORDS];
        b[..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&99u64.to_le_bytes());
        std::fs::write(&p, &b).expect("write");
        assert!(matches!(Reader::open(&p), Err(ReadError::Version { version: 99, .. })));
        b[8..16].copy_from_slice(&VERSION.to_le_bytes());
        b[24..32].copy_from_slice(&1000u64.to_le_bytes()); // 1000 NCs in a header-only file
        b[32..40].copy_from_slice(&(SLOT_WORDS as u64).to_le_bytes());
        b[40..48].copy_from_slice(&(HEADER_WORDS as u64).to_le_bytes());
        std::fs::write(&p, &b).expect("write");
        assert!(matches!(Reader::open(&p), Err(ReadError::Truncated(_))));
        assert!(discover(&dir).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
