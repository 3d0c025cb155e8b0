//! The simulated device: configuration, state, the names resolved once at creation, and the
//! public handle. The blocks' behaviour lives in its submodules: address space (`space`),
//! the register blocks (`sem`, `intc`, `udma`, `nq`, `seq`, `mpu`, `barrier`), the collective
//! fabric (`hub`), fault injection (`fault`) and record posting (`records`). Register
//! dispatch (`regs`, `fwio`), execution (`exec`), reset (`reset`) and the Platform impl
//! (`platform_impl`) are the crate's other modules, above the device.
//!
//! Why the blocks are submodules: the device keeps one state struct at the top (QEMU
//! `edu.c` style), [`State`] under one lock and the shared [`Dev`], and they hold the
//! blocks' own types (UDMA `Engine`, `NqSlot`, `SeqEng`, `FaultSpec`, `NcBarriers`, `Hub`, …),
//! while every block's functions take `(&Dev, &mut State)`. The blocks and the state struct
//! are one unit that imports itself both ways; as submodules they are the device's parts, and
//! the crate's top-level modules keep no import cycle (issue 41). Inside, `records` (posting
//! INFER_STATUS and error-ring records, stopping an engine) is a leaf below `seq`, so fault,
//! mpu and hub post records without naming the sequencer.

pub(crate) mod barrier;
pub(crate) mod fault;
pub(crate) mod hub;
pub(crate) mod intc;
pub(crate) mod mpu;
pub(crate) mod nq;
pub(crate) mod records;
pub(crate) mod sem;
pub(crate) mod seq;
pub(crate) mod space;
pub(crate) mod udma;

use std::collections::HashMap;

// Register offsets and queue ids are looked up on every MMIO access: a fast non-keyed hash
// (the keys are the device's own offsets, not attacker-sized input: the decoder rejects
// offsets outside the register map before anything is stored).
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use csr_maps::meta::RegionDef;
use csr_maps::{blocks, Arch, InstanceId};
use platform::{HostMem, MemMmio};

use self::fault::FaultSpec;
use self::hub::Hub;
use self::nq::NqSlot;
use self::seq::SeqEng;
use self::space::Seg;
use self::udma::Engine;
use crate::decode::Decoder;
use crate::iommu::Iommu;
use crate::mirror::Mirror;
use crate::regfile::RegFile;
use crate::SimError;

/// When device work runs relative to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// One device thread per NeuronCore (started on first use) runs DMA and sequencer work
    /// asynchronously; it parks when idle (no CPU burnt).
    Threaded,
    /// Work runs synchronously inside the MMIO write that triggers it (doorbell,
    /// semaphore): deterministic and free of wake-up latency.
    Inline,
    /// Nothing runs until the test calls [`SimDevice::step`] / [`SimDevice::run_until_idle`].
    Step,
}

/// Configuration of one simulated device.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub arch: &'static Arch,
    /// Bytes of HBM per stack (sparse: host memory only for what is written, `sim::hbm`;
    /// default and maximum: the arch's active size).
    pub hbm_bytes: Option<u64>,
    pub timing: Timing,
    /// Extra latency per executed slot / DMA packet (default 0).
    pub op_latency_ns: u64,
    /// Device index (routing id reported in misc RAM).
    pub device_index: u32,
    /// Firmware API version reported in misc RAM (≥ 7 = new FW-IO protocol).
    pub fw_api_version: u32,
    /// How long the firmware is busy after taking a reset request: misc RAM reads return
    /// 0xDEADBEEF meanwhile (`neuron_fw_io.c`) and fw_status reports reset in progress.
    pub reset_busy_ms: u64,
}

impl SimConfig {
    /// Defaults for `arch`: full-size sparse HBM, threaded timing, zero latency.
    pub fn new(arch: &'static Arch) -> Self {
        Self {
            arch,
            hbm_bytes: None,
            timing: Timing::Threaded,
            op_latency_ns: 0,
            device_index: 0,
            fw_api_version: 7,
            reset_busy_ms: 0,
        }
    }
    /// Builder: timing.
    pub fn timing(mut self, t: Timing) -> Self {
        self.timing = t;
        self
    }
    /// Builder: firmware API version.
    pub fn fw_api(mut self, v: u32) -> Self {
        self.fw_api_version = v;
        self
    }
    /// Builder: firmware busy time after a reset request.
    pub fn reset_busy_ms(mut self, ms: u64) -> Self {
        self.reset_busy_ms = ms;
        self
    }
    /// Builder: HBM bytes per stack.
    pub fn hbm_bytes(mut self, b: u64) -> Self {
        self.hbm_bytes = Some(b);
        self
    }
}

/// Counters and state for tests and tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub iommu_mappings: u64,
    pub iommu_bytes: u64,
    /// Net bytes the driver reports allocated in device memory.
    pub device_bytes: i64,
    pub dma_faults: u64,
    pub dma_aborts: u64,
    pub dma_bytes: u64,
    pub dma_packets: u64,
    pub nq_records: u64,
    pub dropped_records: u64,
    pub slots_executed: u64,
    pub collectives: u64,
    pub unclaimed_accesses: u64,
    pub resets: u64,
    pub fwio_requests: u64,
    /// Reset-map LOW value of the last TPB reset the firmware took.
    pub last_reset_map: u32,
    /// New-protocol FW-IO requests rung on firmware older than API 7 (whose header
    /// registers are the legacy protocol's host-buffer addresses): a driver bug.
    pub fwio_legacy_misuse: u64,
    /// Host memory unmapped while an enabled DMA queue's descriptor ring or a programmed
    /// notification queue still pointed into it (one per queue): a driver that frees ring
    /// memory without parking / halting the queue first (the kmod parks queues on a dummy
    /// ring, `neuron_ring.c`, and halts NQs, `neuron_nq.c`).
    pub dangling_unmaps: u64,
    /// Memory freed (host memory unmapped, or device memory given back to the driver's
    /// allocator) while an enabled sequencer engine's instruction-fetch queue pointed into it
    /// (one per engine): a driver that frees a program without resetting its engine first.
    pub dangling_fetches: u64,
    /// Doorbells rung on a UDMA queue half whose `cfg` enables it with bits 24-25 cleared
    /// (one per doorbell): a driver that enables a queue from a value other than the
    /// register's hardware reset value 0x03000000, which the kmod always programs it from
    /// (`udma_cache_defaults`, `udma_q_enable` in `udma_main.c`; docs/hardware-safety.md, "The
    /// kmod as an oracle"). Such a queue does not run: what the hardware does with those bits
    /// cleared is not documented, so the simulator refuses the work rather than guess.
    pub queue_cfg_misuse: u64,
    /// Sequencer engines enabled now (running, or waiting on a semaphore), over every NC.
    pub enabled_engines: u64,
    /// UDMA queue halves enabled now (a queue parked on the driver's dummy ring counts).
    pub enabled_dma_queues: u64,
    /// Notification-queue slots programmed now (base and size non-zero).
    pub programmed_nq_slots: u64,
    /// Bytes moved per DGE channel (DMA engine within the NC), summed over NCs.
    pub dge_channel_bytes: Vec<u64>,
    /// Sequencer engine state per NC and engine (`consts::seq::STATE_*`).
    pub engine_states: Vec<[u32; csr_maps::Engine::COUNT]>,
    /// Device threads alive.
    pub threads: u64,
    /// Nanoseconds of device work run inline inside MMIO writes (Timing::Inline): what a
    /// benchmark subtracts to get host-only overhead.
    pub device_ns: u64,
    /// Accesses the NCs' ownership region tables refused (not performed, reported as out of
    /// bounds).
    pub oob_refused: u64,
    /// Bytes of simulated HBM, in 64 KiB granules, that may hold non-zero data (written since
    /// they were last zeroed): at most what the device memory costs the host, since
    /// never-written memory reads as zeros without host pages (`sim::hbm`).
    pub hbm_written_bytes: u64,
    /// Bytes of HBM pages given back to the host by zero writes over written memory.
    pub hbm_dropped_bytes: u64,
    /// Zero bytes written into HBM that already held only zeros (not written: no page touched).
    pub hbm_zero_skipped_bytes: u64,
    /// Metrics blobs the firmware took through the legacy FW-IO protocol's POST_TO_CW (the
    /// kmod's `fw_io_post_metric`: `NEURON_IOCTL_POST_METRIC` and its metrics thread).
    pub fwio_metrics_posted: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub dma_faults: AtomicU64,
    pub dma_aborts: AtomicU64,
    pub dma_bytes: AtomicU64,
    pub dma_packets: AtomicU64,
    pub nq_records: AtomicU64,
    pub dropped_records: AtomicU64,
    pub slots: AtomicU64,
    pub collectives: AtomicU64,
    pub unclaimed: AtomicU64,
    pub resets: AtomicU64,
    pub fwio: AtomicU64,
    pub fwio_legacy_misuse: AtomicU64,
    pub fwio_metrics: AtomicU64,
    pub dangling_unmaps: AtomicU64,
    pub dangling_fetches: AtomicU64,
    pub queue_cfg_misuse: AtomicU64,
    pub last_reset_map: std::sync::atomic::AtomicU32,
    pub threads: AtomicU64,
    /// Time spent running device work inline (inside MMIO writes), ns.
    pub device_ns: AtomicU64,
    pub oob_refused: AtomicU64,
}

/// Mutable device state, behind one lock.
pub(crate) struct State {
    pub regs: RegFile,
    pub sems: Vec<Vec<i32>>,
    pub events: Vec<Vec<u8>>,
    pub topsp_sems: Vec<Vec<i32>>,
    pub topsp_events: Vec<Vec<u8>>,
    pub udma: Vec<Engine>,
    pub nq: FxHashMap<u64, NqSlot>,
    pub seq: Vec<[SeqEng; csr_maps::Engine::COUNT]>,
    /// Work pending per NC (doorbells, semaphore changes, collective completions).
    pub pending: Vec<bool>,
    /// Per NC and semaphore: bumped on every change, so a waiting engine re-evaluates its
    /// wait only when the semaphore it waits on changed.
    pub sem_gen: Vec<Vec<u32>>,
    pub faults: Vec<FaultSpec>,
    pub coll_seq: FxHashMap<(u32, u32), u32>,
    pub fw_busy_until: Option<Instant>,
    pub dge_bytes: Vec<u64>,
    pub scratch: Vec<u8>,
    /// Reusable segment lists (device accesses resolve into them without allocating).
    pub seg_pool: ListPool<Seg>,
    /// Reusable descriptor lists (UDMA packets are gathered into them without allocating).
    pub desc_pool: ListPool<csr_maps::formats::udma::UdmaDesc>,
    /// Per NC: the checker's copy of its ownership region table.
    pub regions: Vec<self::mpu::Table>,
    /// Recently decoded BAR0 offsets (register reads and writes).
    pub decoded: crate::decode::DecodeCache,
    /// Which HBM granules may hold data ([`crate::hbm`]): every HBM write goes through it.
    pub hbm_written: crate::hbm::Written,
}

/// Emptied lists kept for reuse, so the device's hot paths do not allocate.
pub(crate) struct ListPool<T>(Vec<Vec<T>>);

impl<T> Default for ListPool<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T> ListPool<T> {
    /// An empty list (a pooled one when available).
    pub fn take(&mut self) -> Vec<T> {
        let mut v = self.0.pop().unwrap_or_default();
        v.clear();
        v
    }
    /// Return a list for reuse (a few are kept).
    pub fn give(&mut self, v: Vec<T>) {
        if self.0.len() < 8 {
            self.0.push(v);
        }
    }
}

/// Arch-description lookups done once when the device is created (a missing name fails
/// creation), so that no access path looks anything up by name.
pub(crate) struct Layout {
    /// The per-NC state buffer windows in BAR0.
    pub sbuf: &'static RegionDef,
    /// Their BAR0 bases, by NC, and the range `[lo, hi)` that covers them all (every BAR0
    /// access asks whether it falls in a state buffer).
    pub sbuf_bases: Vec<Option<u64>>,
    pub sbuf_span: (u64, u64),
    /// The HBM apertures in BAR4.
    pub hbm: &'static RegionDef,
    /// BAR4 size: the end of the last HBM aperture.
    pub bar4_size: u64,
    /// BAR0 bases of the modelled block instances, by instance index.
    udma: Vec<Option<u64>>,
    seq: Vec<Option<u64>>,
    notific: Vec<Option<u64>>,
    nc_intc: Vec<Option<u64>>,
    nc_regions: Vec<Option<u64>>,
    q7: Vec<Option<u64>>,
    nx: Vec<Option<u64>>,
    misc_ram: u64,
}

impl Layout {
    pub(crate) fn new(arch: &'static Arch) -> Result<Self, SimError> {
        let region = |name: &'static str| arch.region(name).ok_or(SimError::MissingRegion { arch: arch.name, name });
        let sbuf = region("sbuf")?;
        let hbm = region("hbm")?;
        let bar4_size = hbm.groups.iter().map(|g| g.base + g.count * g.stride.max(hbm.size)).max().unwrap_or(0);
        let placed = |id: InstanceId| {
            let inst = arch
                .instances
                .iter()
                .find(|i| i.id == id && i.bar == arch.bars.apb)
                .ok_or(SimError::MissingInstance { arch: arch.name, instance: id })?;
            let n = inst.indices().last().map_or(0, |&i| i + 1);
            Ok::<_, SimError>((0..n).map(|i| inst.base(i)).collect::<Vec<_>>())
        };
        let misc_ram = placed(InstanceId::MiscRam)?
            .first()
            .copied()
            .flatten()
            .ok_or(SimError::MissingInstance { arch: arch.name, instance: InstanceId::MiscRam })?;
        let sbuf_bases: Vec<Option<u64>> = (0..sbuf.count()).map(|i| sbuf.base(i)).collect();
        let sbuf_span = (
            sbuf_bases.iter().flatten().copied().min().unwrap_or(0),
            sbuf_bases.iter().flatten().map(|b| b + sbuf.size).max().unwrap_or(0),
        );
        Ok(Self {
            sbuf,
            sbuf_bases,
            sbuf_span,
            hbm,
            bar4_size,
            udma: placed(InstanceId::Udma)?,
            seq: placed(InstanceId::Seq)?,
            notific: placed(InstanceId::Notific)?,
            nc_intc: placed(InstanceId::NcIntc)?,
            nc_regions: placed(InstanceId::NcRegions)?,
            q7: placed(InstanceId::Q7)?,
            nx: placed(InstanceId::Nx)?,
            misc_ram,
        })
    }
}

fn at(v: &[Option<u64>], i: usize) -> Option<u64> {
    v.get(i).copied().flatten()
}

pub(crate) struct Dev {
    pub arch: &'static Arch,
    pub cfg: SimConfig,
    pub dec: Decoder,
    pub layout: Layout,
    pub hbm: Vec<crate::hbm::Stack>,
    pub hbm_bytes: u64,
    pub sbuf: Vec<HostMem>,
    pub iommu: Iommu,
    pub st: Mutex<State>,
    pub cvs: Vec<Condvar>,
    pub threads: Mutex<Vec<Option<JoinHandle<()>>>>,
    pub hub: Arc<Hub>,
    pub n: Counters,
    pub dev_mem: AtomicI64,
    pub epoch: Instant,
    pub shutdown: AtomicBool,
    /// Interrupt eventfds by vector (one vector per NC).
    pub irq: Mutex<HashMap<u32, std::fs::File>>,
    /// Memory behind external DMA mappings (`SimDevice::map_external`), by IOVA.
    pub ext: Mutex<std::collections::BTreeMap<u64, Box<dyn crate::external::ExternalDma>>>,
    pub me: Weak<Dev>,
    /// The NCs' collectives barrier tasks ([`self::barrier`]).
    pub barriers: self::barrier::NcBarriers,
    /// A zero-sized MMIO: block handles on it only compute typed register offsets.
    pub null: MemMmio,
    /// The registers published to other processes, once asked for
    /// ([`crate::SimDevice::publish_registers`]).
    pub mirror: OnceLock<Mirror>,
}

impl Dev {
    /// UDMA engine `e`.
    pub fn udma(&self, e: usize) -> Option<blocks::udma::Block<'_>> {
        at(&self.layout.udma, e).map(|b| blocks::udma::Block::at(&self.null, b))
    }
    /// The sequencer block of NC `nc`.
    pub fn seq(&self, nc: usize) -> Option<blocks::seq::Block<'_>> {
        at(&self.layout.seq, nc).map(|b| blocks::seq::Block::at(&self.null, b))
    }
    /// The notification queues of NC `nc`.
    pub fn notific(&self, nc: usize) -> Option<blocks::notific::Block<'_>> {
        at(&self.layout.notific, nc).map(|b| blocks::notific::Block::at(&self.null, b))
    }
    /// The interrupt controller of NC `nc`.
    pub fn nc_intc(&self, nc: usize) -> Option<blocks::nc_intc::Block<'_>> {
        at(&self.layout.nc_intc, nc).map(|b| blocks::nc_intc::Block::at(&self.null, b))
    }
    /// The ownership region table of NC `nc`.
    pub fn nc_regions(&self, nc: usize) -> Option<blocks::nc_regions::Block<'_>> {
        at(&self.layout.nc_regions, nc).map(|b| blocks::nc_regions::Block::at(&self.null, b))
    }
    /// Q7 (pool core) control block `i`.
    pub fn q7(&self, i: usize) -> Option<blocks::q7::Block<'_>> {
        at(&self.layout.q7, i).map(|b| blocks::q7::Block::at(&self.null, b))
    }
    /// NX (engine core) control block `i`.
    pub fn nx(&self, i: usize) -> Option<blocks::q7::Block<'_>> {
        at(&self.layout.nx, i).map(|b| blocks::q7::Block::at(&self.null, b))
    }
    /// The misc RAM (FW-IO mailbox, device identity, reset requests).
    pub fn misc_ram(&self) -> blocks::misc_ram::Block<'_> {
        blocks::misc_ram::Block::at(&self.null, self.layout.misc_ram)
    }

    pub fn ncs(&self) -> usize {
        self.arch.counts.ncs as usize
    }

    /// NC served by DMA engine `e`.
    pub fn nc_of_engine(&self, e: usize) -> usize {
        let c = &self.arch.counts;
        let per = c.dma_engines_per_nc as usize;
        if e < per * self.ncs() {
            e / per
        } else {
            let k = e.saturating_sub(self.arch.consts.h2t_engine_base as usize);
            (k * self.arch.consts.h2t_ncs_per_engine as usize).min(self.ncs() - 1)
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The state lock. Contended acquisitions spin briefly before blocking: device work
    /// holds the lock for microseconds, and parking the host thread in the kernel would add
    /// a wake-up to its next register access. With published registers ([`crate::mirror`])
    /// the critical section is a change of them: opened here, closed when the guard drops.
    pub fn lock(&self) -> StateGuard<'_> {
        let g = self.lock_raw();
        let mirror = self.mirror.get();
        if let Some(m) = mirror {
            m.begin();
        }
        StateGuard { g, dev: self, mirror }
    }

    /// The state lock alone, for a critical section that changes nothing (a wait for work).
    pub fn lock_raw(&self) -> MutexGuard<'_, State> {
        for i in 0..4096u32 {
            if let Some(g) = platform::sync::try_lock(&self.st) {
                return g;
            }
            if i < 4000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        platform::sync::lock(&self.st)
    }
}

/// The device state, locked ([`Dev::lock`]). Dropping it republishes the published registers
/// that changed and closes the change.
pub(crate) struct StateGuard<'a> {
    g: MutexGuard<'a, State>,
    dev: &'a Dev,
    /// The published registers, if there were any when the lock was taken.
    mirror: Option<&'a Mirror>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.g
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.g
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(m) = self.mirror else { return };
        let groups = self.g.regs.dirty_groups();
        for g in groups {
            for (word, hit) in m.groups.get(g).map(Vec::as_slice).unwrap_or(&[]) {
                m.store(*word, self.dev.generic_read(&self.g, hit));
            }
        }
        m.end();
    }
}

// ==================================================================== public handles
