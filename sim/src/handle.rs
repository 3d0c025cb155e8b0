//! The public handle of a simulated device ([`SimDevice`]): creates the device state
//! ([`crate::device`]), stops the device threads when the last handle drops, and offers the
//! operations a test or a host process calls (fault injection, step mode, statistics).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use csr_maps::Arch;
use platform::{HostMem, MemMmio};
use rustc_hash::FxHashMap;

use crate::decode::Decoder;
use crate::device::fault::FaultSpec;
use crate::device::hub::Hub;
use crate::device::udma::Engine;
use crate::device::{Counters, Dev, Layout, ListPool, SimConfig, SimStats, State};
use crate::external::{ExternalDma, ExternalError};
use crate::iommu::{Iommu, Mapping};
use crate::mirror::RegisterMirror;
use crate::SimError;

/// One simulated Neuron device. Cloning shares the device; device threads stop when
/// the last handle is dropped.
#[derive(Clone)]
pub struct SimDevice {
    pub(crate) dev: Arc<Dev>,
    _handle: Arc<Handle>,
}

struct Handle(Arc<Dev>);

impl Drop for Handle {
    fn drop(&mut self) {
        let d = &self.0;
        d.shutdown.store(true, Ordering::Release);
        for cv in &d.cvs {
            // Take the lock so a thread between its pending check and its wait cannot miss this.
            drop(d.lock());
            cv.notify_all();
        }
        let hs: Vec<_> = {
            let mut t = platform::sync::lock(&d.threads);
            t.iter_mut().filter_map(|h| h.take()).collect()
        };
        for h in hs {
            let _ = h.join();
        }
    }
}

impl SimDevice {
    /// A device of `cfg.arch`, with its own collective hub.
    pub fn new(cfg: SimConfig) -> Result<Self, SimError> {
        Self::with_hub(cfg, Arc::new(Hub::default()))
    }

    pub(crate) fn with_hub(cfg: SimConfig, hub: Arc<Hub>) -> Result<Self, SimError> {
        let arch = cfg.arch;
        let ncs = arch.counts.ncs as usize;
        let hbm_bytes = cfg.hbm_bytes.unwrap_or(arch.consts.hbm_active_size).min(arch.consts.hbm_active_size);
        let mut hbm = Vec::new();
        for _ in 0..arch.counts.hbm_stacks {
            hbm.push(crate::hbm::Stack::new(hbm_bytes)?);
        }
        let hbm_written = crate::hbm::Written::new(&hbm);
        let layout = Layout::new(arch)?;
        let sbuf_size = layout.sbuf.size;
        let mut sbuf = Vec::new();
        for _ in 0..ncs {
            sbuf.push(HostMem::alloc_with(sbuf_size as usize, platform::PageSize::Base4K)?);
        }
        // IOVAs below the PCIe route bits (the host window ORs them in).
        let route_lo = arch.consts.host_route_mask.trailing_zeros().min(47);
        let iommu = Iommu::new(1 << 20, 1u64 << route_lo);
        let sems = arch.counts.semaphores as usize;
        let evs = arch.counts.events as usize;
        let st = State {
            regs: Default::default(),
            sems: vec![vec![0; sems]; ncs],
            events: vec![vec![0; evs]; ncs],
            topsp_sems: vec![vec![0; sems]; arch.counts.top_sps as usize],
            topsp_events: vec![vec![0; evs]; arch.counts.top_sps as usize],
            udma: (0..arch.counts.dma_engines).map(|_| Engine::default()).collect(),
            nq: FxHashMap::default(),
            seq: (0..ncs).map(|_| Default::default()).collect(),
            regions: vec![crate::device::mpu::Table::default(); ncs],
            pending: vec![false; ncs],
            sem_gen: vec![vec![0; sems]; ncs],
            faults: Vec::new(),
            coll_seq: FxHashMap::default(),
            fw_busy_until: None,
            dge_bytes: vec![0; arch.counts.dma_engines_per_nc as usize],
            scratch: Vec::new(),
            seg_pool: ListPool::default(),
            desc_pool: ListPool::default(),
            decoded: Default::default(),
            hbm_written,
        };
        let dev = Arc::new_cyclic(|me| Dev {
            arch,
            dec: Decoder::new(arch),
            layout,
            hbm,
            hbm_bytes,
            sbuf,
            iommu,
            st: Mutex::new(st),
            cvs: (0..ncs).map(|_| Condvar::new()).collect(),
            threads: Mutex::new((0..ncs).map(|_| None).collect()),
            hub,
            n: Counters::default(),
            dev_mem: AtomicI64::new(0),
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            irq: Mutex::new(HashMap::new()),
            ext: Mutex::new(std::collections::BTreeMap::new()),
            me: me.clone(),
            barriers: crate::device::barrier::NcBarriers::new(ncs),
            null: MemMmio::new(0),
            mirror: std::sync::OnceLock::new(),
            cfg,
        });
        {
            let mut st = dev.lock();
            dev.init_regs(&mut st);
        }
        Ok(Self { _handle: Arc::new(Handle(dev.clone())), dev })
    }

    /// Nanoseconds of device work run inline so far (cheap: one atomic load).
    pub fn device_ns(&self) -> u64 {
        self.dev.n.device_ns.load(Ordering::Relaxed)
    }

    /// The instant device timestamps count from (timestamp = ns since then × ts_per_ns).
    pub fn epoch(&self) -> Instant {
        self.dev.epoch
    }

    /// The simulated arch.
    pub fn arch(&self) -> &'static Arch {
        self.dev.arch
    }

    /// Install (or remove, `None`) the transport for collectives whose replica group spans
    /// processes, on this device's collective hub (shared by every device of a
    /// [`crate::SimTopology`]); see [`crate::InterHost`].
    pub fn set_inter_host(&self, t: Option<std::sync::Arc<dyn crate::InterHost>>) {
        self.dev.hub.set_inter_host(t);
    }

    /// Arm a fault (see [`FaultSpec`]).
    pub fn inject(&self, f: FaultSpec) {
        let mut st = self.dev.lock();
        crate::device::fault::arm(&self.dev, &mut st, f);
        self.dev.after(st);
    }

    /// Step mode: run every pending NC once to quiescence. Returns whether anything ran.
    pub fn step(&self) -> bool {
        let mut st = self.dev.lock();
        let mut out = Vec::new();
        let mut any = false;
        for nc in 0..self.dev.ncs() {
            if st.pending[nc] {
                any = true;
                self.dev.run_nc(&mut st, nc, &mut out);
            }
        }
        drop(st);
        self.dev.deliver(out);
        any
    }

    /// Step mode: step until nothing is pending.
    pub fn run_until_idle(&self) {
        while self.step() {}
    }

    /// Publish the registers a shared device's clients read on their execute path (every
    /// NC's interrupt controller) in memory other processes map read-only, kept current from
    /// now on ([`crate::mirror`]). The first call sets it up; every call returns a handle to
    /// the same memory.
    pub fn publish_registers(&self) -> Result<RegisterMirror, SimError> {
        let d = &self.dev;
        if d.mirror.get().is_none() {
            let m = crate::mirror::Mirror::new(&d.dec, d.ncs())?;
            let watched = m.watched();
            // Another caller may have won: its mirror stays, this one goes.
            if d.mirror.set(m).is_ok() {
                // Every group starts dirty: published when this guard drops.
                d.lock().regs.watch(watched, d.ncs());
            }
        }
        match d.mirror.get() {
            Some(m) => m.handle().map_err(SimError::Mirror),
            None => Err(SimError::Mirror(std::io::Error::other("no published registers"))),
        }
    }

    /// Counters, engine states and accounting.
    pub fn stats(&self) -> SimStats {
        let d = &self.dev;
        let (maps, bytes) = d.iommu.usage();
        let st = d.lock();
        SimStats {
            iommu_mappings: maps,
            iommu_bytes: bytes,
            device_bytes: d.dev_mem.load(Ordering::Relaxed),
            dma_faults: d.n.dma_faults.load(Ordering::Relaxed),
            dma_aborts: d.n.dma_aborts.load(Ordering::Relaxed),
            dma_bytes: d.n.dma_bytes.load(Ordering::Relaxed),
            dma_packets: d.n.dma_packets.load(Ordering::Relaxed),
            nq_records: d.n.nq_records.load(Ordering::Relaxed),
            dropped_records: d.n.dropped_records.load(Ordering::Relaxed),
            slots_executed: d.n.slots.load(Ordering::Relaxed),
            collectives: d.n.collectives.load(Ordering::Relaxed),
            unclaimed_accesses: d.n.unclaimed.load(Ordering::Relaxed),
            resets: d.n.resets.load(Ordering::Relaxed),
            fwio_requests: d.n.fwio.load(Ordering::Relaxed),
            last_reset_map: d.n.last_reset_map.load(Ordering::Relaxed),
            fwio_legacy_misuse: d.n.fwio_legacy_misuse.load(Ordering::Relaxed),
            dangling_unmaps: d.n.dangling_unmaps.load(Ordering::Relaxed),
            dangling_fetches: d.n.dangling_fetches.load(Ordering::Relaxed),
            queue_cfg_misuse: d.n.queue_cfg_misuse.load(Ordering::Relaxed),
            enabled_engines: crate::device::seq::enabled_engines(&st),
            enabled_dma_queues: crate::device::udma::enabled_queues(d, &st),
            programmed_nq_slots: crate::device::nq::programmed_slots(d, &st),
            dge_channel_bytes: st.dge_bytes.clone(),
            engine_states: st.seq.iter().map(|e| std::array::from_fn(|i| e[i].state)).collect(),
            threads: d.n.threads.load(Ordering::Relaxed),
            device_ns: d.n.device_ns.load(Ordering::Relaxed),
            oob_refused: d.n.oob_refused.load(Ordering::Relaxed),
            hbm_written_bytes: st.hbm_written.bytes(),
            hbm_dropped_bytes: st.hbm_written.dropped,
            hbm_zero_skipped_bytes: st.hbm_written.skipped,
            fwio_metrics_posted: d.n.fwio_metrics.load(Ordering::Relaxed),
        }
    }
}

/// External DMA memory and interrupt lines ([`crate::external`]): what a client outside the
/// process (vfio-user, `sim-serve`) maps for the device.
impl SimDevice {
    /// Map `[iova, iova + mem.len())` to `mem` for device accesses (readable/writable by
    /// the device as given). Mappings the range overlaps are removed first (a client remaps
    /// by replacing). Returns how many were replaced.
    pub fn map_external(
        &self,
        iova: u64,
        mem: Box<dyn ExternalDma>,
        readable: bool,
        writable: bool,
    ) -> Result<usize, ExternalError> {
        let len = mem.len() as u64;
        if len == 0 || iova.checked_add(len).is_none() {
            return Err(ExternalError::BadRange { iova, len });
        }
        let replaced = self.unmap_external(iova, len);
        let mut ext = platform::sync::lock(&self.dev.ext);
        self.dev.iommu.map(iova, Mapping { len, host: mem.as_ptr() as usize, readable, writable });
        ext.insert(iova, mem);
        Ok(replaced)
    }

    /// Remove every external mapping overlapping `[iova, iova + len)`. Device accesses in
    /// flight finish first (they hold the IOMMU's read lock); the memory objects are dropped
    /// after. Returns how many mappings were removed.
    pub fn unmap_external(&self, iova: u64, len: u64) -> usize {
        let end = iova.saturating_add(len);
        let mut ext = platform::sync::lock(&self.dev.ext);
        let hit: Vec<u64> =
            ext.iter().filter(|(&s, m)| s < end && s.saturating_add(m.len() as u64) > iova).map(|(&s, _)| s).collect();
        let mut dropped = Vec::with_capacity(hit.len());
        for s in &hit {
            // The write lock waits for every access holding a translation into this memory.
            self.dev.iommu.unmap(*s);
            if let Some(m) = ext.remove(s) {
                dropped.push(m);
            }
        }
        drop(ext);
        drop(dropped);
        hit.len()
    }

    /// How many external mappings overlap `range` (e.g. a client's IOVA window: what its
    /// connection still has mapped).
    pub fn external_mappings_in(&self, range: std::ops::Range<u64>) -> usize {
        let ext = platform::sync::lock(&self.dev.ext);
        ext.iter().filter(|(&s, m)| s < range.end && s.saturating_add(m.len() as u64) > range.start).count()
    }

    /// Remove every external mapping.
    pub fn unmap_all_external(&self) -> usize {
        self.unmap_external(0, u64::MAX)
    }

    /// Number of interrupt vectors the device raises (one per NC).
    pub fn irq_vectors(&self) -> u32 {
        self.dev.ncs() as u32
    }

    /// Post interrupt `vector` to `fd` (an eventfd the client owns) from now on, or to
    /// nothing with `None`.
    pub fn set_irq_eventfd(&self, vector: u32, fd: Option<OwnedFd>) -> Result<(), ExternalError> {
        let count = self.irq_vectors();
        if vector >= count {
            return Err(ExternalError::NoSuchVector { vector, count });
        }
        let mut m = platform::sync::lock(&self.dev.irq);
        match fd {
            Some(fd) => {
                m.insert(vector, fd.into());
            }
            None => {
                m.remove(&vector);
            }
        }
        Ok(())
    }

    /// Forget every interrupt eventfd.
    pub fn clear_irq_eventfds(&self) {
        platform::sync::lock(&self.dev.irq).clear();
    }
}
