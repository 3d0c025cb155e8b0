//! The writer: a runtime's segment, and the counters observer that keeps it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use neff::NrtStatus;
use platform::ShmWords;

use super::models::{models_path, ModelList};
use super::*;
use crate::observe::{ExecutionEnd, Observer};

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
        let models = ModelList {
            path: models_path(path),
            models: crate::locks::Ranked::new(crate::locks::Rank::Leaf, Default::default()),
        };
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
        let e = ExecutionEnd { status, latency_ns, busy_ns, barrier_warnings: 0, end: std::time::Instant::now() };
        Observer::execution(self, ncs, &e);
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

    /// An execution that ended at host instant `end` (its unix
    /// time is derived from the pair of clocks read when the segment was created) after
    /// `barrier_warnings` collectives-barrier warnings.
    fn execution(&self, ncs: &[usize], e: &ExecutionEnd) {
        let ExecutionEnd { status, latency_ns, busy_ns, barrier_warnings, end } = *e;
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
