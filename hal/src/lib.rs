//! hal: the Neuron device driver over the Platform boundary — the same code drives the
//! simulator and a real device bound to vfio-pci.
//!
//! [`Device`] = a [`platform::Platform`] + its arch (from the PCI ID): firmware-ready
//! wait, UDMA engine bring-up ([`udma`]), host and device memory ([`mem`]), host↔device
//! and device↔device copies on the arch's host-facing engines, notification rings
//! ([`nq`]), semaphores and events, sequencer streams ([`seq`]), FW-IO and resets
//! ([`fwio`]), Q7 / DGE ([`q7`]). Arch differences come from csr-maps data.
//!
//! Safe Rust only: the unsafe edges (MMIO, DMA memory, interrupt eventfds) are the
//! platform's.

#![forbid(unsafe_code)]

pub mod error;
pub mod fwio;
pub mod guard;
pub mod mem;
pub mod nq;
pub mod park;
pub mod q7;
pub mod regions;
pub mod seq;
pub mod udma;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csr_maps::blocks::tpb_sem as ts;
use csr_maps::consts::{fwio as fwc, nq as nqc};
use csr_maps::{Arch, Regs};
use isa::slot::SLOT_BYTES;
use platform::{Mmio, Platform};

pub use error::{HalError, Result};
pub use fwio::{PollTiming, ResetKind};
pub use mem::{DevAllocator, DevBuf, HostBuf, HostPool};
pub use nq::{NqOwner, NqRing};
pub use park::Parking;
pub use platform::Irq;
pub use regions::{Perm, Region, RegionFault};
pub use seq::{EngineStatus, Stream};
pub use udma::{Ring, Xfer};

/// Options for opening a device.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Use at most this many bytes of each HBM channel (default: the arch's active size).
    pub hbm_limit: Option<u64>,
    /// Poll periods for FW-IO and resets.
    pub poll: PollTiming,
    /// Host pool chunk size.
    pub host_chunk: usize,
    /// Descriptors per host-transfer ring.
    pub h2t_ring_descs: u32,
    /// How long to wait for the firmware's device id at open.
    pub ready_timeout: Duration,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self {
            hbm_limit: None,
            poll: PollTiming::default(),
            host_chunk: 4 << 20,
            h2t_ring_descs: csr_maps::consts::udma::H2T_RING_DESCS,
            ready_timeout: Duration::from_millis(fwc::READY_POLLS as u64 * fwc::READY_POLL_MS),
        }
    }
}

/// State of an NC's collectives barrier task ([`Device::barrier_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierState {
    /// Never armed since the last reset.
    Idle,
    /// Some rank of the group has not arrived yet.
    Outstanding,
    /// Every rank arrived.
    Done,
    /// The barrier failed (the group disagreed, the transport to other ranks failed, or an
    /// injected fault).
    Failed,
}

/// An NC's collectives barrier task: its state and generation (arrivals so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierStatus {
    pub state: BarrierState,
    pub generation: u32,
}

bitflags::bitflags! {
    /// Fatal hardware causes latched in an NC's error-trigger block (its interrupt
    /// controller's group-0 cause register). The bit values are this type's own; the
    /// register's field positions live in csr-maps.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct FatalCauses: u8 {
        const SEQ_FATAL = 1 << 0;
        const DMA_ABORT = 1 << 1;
        const DMA_FAULT = 1 << 2;
        const HBM_UE = 1 << 3;
        const HBM_UE_REPAIRABLE = 1 << 4;
        const NC_UE = 1 << 5;
        const CC_ERROR = 1 << 6;
        const NET_PROXY = 1 << 7;
    }
}

/// A semaphore increment register resolved for the hot path ([`Device::kick_slot`],
/// [`Device::kick`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KickSlot {
    nc: usize,
    sem: u64,
    off: u64,
}

impl KickSlot {
    /// The NeuronCore.
    pub fn nc(&self) -> usize {
        self.nc
    }
    /// The semaphore index.
    pub fn sem(&self) -> u64 {
        self.sem
    }
}

/// A host-transfer ring keyed by (engine, queue).
type H2tEntry = ((u64, u64), Arc<Mutex<Ring>>);

struct Inner {
    platform: Arc<dyn Platform>,
    arch: &'static Arch,
    bar0: Arc<dyn Mmio>,
    bar4: Option<Arc<dyn Mmio>>,
    pool: HostPool,
    /// Queue parking (the dummy ring); dropped after the host-transfer rings.
    park: Arc<Parking>,
    hbm: Arc<DevAllocator>,
    /// Host-transfer rings by (engine, queue).
    h2t: Mutex<Vec<H2tEntry>>,
    fw_seq: Mutex<u8>,
    opts: DeviceOptions,
    index: u32,
    /// Per NC: the entries its ownership region table holds (as last programmed).
    regions: Mutex<Vec<Vec<Region>>>,
    /// Device bytes zeroed for new owners ([`Device::zero_device`]).
    dev_zeroed: std::sync::atomic::AtomicU64,
    /// Per NC: the BAR0 base of its interrupt controller (`nc_intc`), resolved once: its
    /// cause registers are read at the end of every execution.
    nc_intc: Vec<Option<u64>>,
}

/// An open Neuron device. Cheap to clone; the device is closed when the last clone
/// and every buffer allocated from it are dropped.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

impl Device {
    /// Open the device behind `platform`: identify the arch, map BARs, wait for the
    /// firmware. Call [`Device::init`] to bring up the DMA engines.
    pub fn open(platform: Arc<dyn Platform>, mut opts: DeviceOptions) -> Result<Self> {
        // Host chunks (and bounce buffers) must fit in one DMA mapping of the platform (one
        // hugepage in VFIO's no-IOMMU mode).
        if let Some(max) = platform.max_dma_mapping() {
            opts.host_chunk = opts.host_chunk.min(max.max(4096));
        }
        let id = platform.identity();
        let arch = Arch::by_pci_id(id.vendor, id.device)
            .ok_or(HalError::UnknownDevice { vendor: id.vendor, device: id.device })?;
        let bar0 = platform.bar(arch.bars.apb)?;
        // Real hardware without the operator's opt-in: writes to modeled registers are refused.
        let bar0: Arc<dyn Mmio> =
            if platform.modeled_writes_allowed() { bar0 } else { Arc::new(guard::ModeledGuard::new(arch, bar0)) };
        let bar4 = platform.bar(arch.bars.dram).ok();
        let regs = Regs::new(arch, bar0.as_ref());
        let misc = regs.misc_ram(0)?;
        let start = Instant::now();
        let index = loop {
            let v = misc.device_id().read()?.0;
            if v != fwc::NOT_READY {
                break v;
            }
            if start.elapsed() > opts.ready_timeout {
                return Err(HalError::NotReady { waited_ms: start.elapsed().as_millis() as u64, value: v });
            }
            std::thread::sleep(opts.poll.ready);
        };
        let hbm_region = arch.region("hbm");
        let bases: Vec<u64> = (0..arch.counts.hbm_stacks).filter_map(|k| arch.hbm_dev_addr(k, 0)).collect();
        let size = opts.hbm_limit.unwrap_or(arch.consts.hbm_active_size).min(hbm_region.map(|r| r.size).unwrap_or(0));
        let hbm = Arc::new(DevAllocator::new(
            platform.clone(),
            &bases,
            size,
            arch.consts.fw_carveout,
            arch.consts.dev_alloc_min,
        ));
        let pool = HostPool::new(platform.clone(), opts.host_chunk);
        let park = Arc::new(Parking::new(arch, bar0.clone()));
        let nc_intc = (0..arch.counts.ncs).map(|nc| regs.nc_intc(nc).ok().map(|b| b.base())).collect();
        Ok(Self {
            inner: Arc::new(Inner {
                platform,
                arch,
                bar0,
                bar4,
                pool,
                park,
                hbm,
                h2t: Mutex::new(Vec::new()),
                fw_seq: Mutex::new(0),
                opts,
                index,
                regions: Mutex::new(vec![Vec::new(); arch.counts.ncs as usize]),
                dev_zeroed: Default::default(),
                nc_intc,
            }),
        })
    }

    /// Bring up every DMA engine (§3.6) and halt every notification queue of every NC.
    pub fn init(&self) -> Result<()> {
        let regs = self.regs();
        for e in 0..self.arch().counts.dma_engines {
            udma::init_engine(self.arch(), &regs, e)?;
        }
        for nc in 0..self.nc_count() {
            nq::halt_all(&regs, nc, self.arch().counts.nq_slots)?;
        }
        Ok(())
    }

    /// Whether `other` is a handle on the same open device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The arch.
    pub fn arch(&self) -> &'static Arch {
        self.inner.arch
    }
    /// Typed registers over BAR0.
    pub fn regs(&self) -> Regs<'_> {
        Regs::new(self.inner.arch, self.inner.bar0.as_ref())
    }
    /// BAR0.
    pub fn bar0(&self) -> &dyn Mmio {
        self.inner.bar0.as_ref()
    }
    /// BAR4 (device memory), when mapped.
    pub fn bar4(&self) -> Option<&dyn Mmio> {
        self.inner.bar4.as_deref()
    }
    /// The platform.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.inner.platform
    }
    /// Routing id reported by the firmware.
    pub fn index(&self) -> u32 {
        self.inner.index
    }
    /// NeuronCores.
    pub fn nc_count(&self) -> usize {
        self.inner.arch.counts.ncs as usize
    }
    /// Options the device was opened with.
    pub fn options(&self) -> &DeviceOptions {
        &self.inner.opts
    }
    fn check_nc(&self, nc: usize) -> Result<()> {
        if nc >= self.nc_count() {
            return Err(HalError::NoSuchNc { nc, count: self.nc_count() });
        }
        Ok(())
    }

    // ----------------------------------------------------------------- memory

    /// Host DMA memory.
    pub fn alloc_host(&self, len: usize, align: usize) -> Result<HostBuf> {
        self.inner.pool.alloc(len, align)
    }
    /// Device address of a host buffer (host window bit ORed in).
    pub fn host_addr(&self, b: &HostBuf) -> u64 {
        self.arch().host_dev_addr(b.iova())
    }
    /// Device memory on HBM channel `chan`.
    ///
    /// The memory is zeroed before it is returned (by DMA from a zeroed host buffer), so a new
    /// owner never sees an earlier owner's bytes. This is an allocation-time cost only.
    pub fn alloc_device(&self, chan: usize, len: u64, align: u64) -> Result<DevBuf> {
        let m = self.inner.hbm.alloc(chan, len, align)?;
        let c = &self.arch().counts;
        let nc = (0..c.ncs as usize).find(|&n| self.hbm_for_nc(n) == chan).unwrap_or(0);
        self.zero_device(nc, m.addr(), m.len())?;
        Ok(m)
    }

    /// Device memory on HBM channel `chan` that is **not** zeroed: it may hold an earlier
    /// owner's bytes. For a caller that overwrites all of it before anything else can read it
    /// (streamed weights: every byte is written by DMA, the rest zeroed with
    /// [`Device::zero_device`]), saving the zeroing write of [`Device::alloc_device`]. Freed
    /// memory is zeroed again by the next [`Device::alloc_device`], so a caller that fails
    /// midway never hands stale bytes out by dropping the buffer; it must not expose the
    /// address before every byte is written.
    pub fn alloc_device_for_overwrite(&self, chan: usize, len: u64, align: u64) -> Result<DevBuf> {
        self.inner.hbm.alloc(chan, len, align)
    }

    /// Zero `len` bytes of device memory at `addr` through NC `nc`'s host-to-device ring.
    pub fn zero_device(&self, nc: usize, addr: u64, len: u64) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20) as u64;
        let zeros = self.alloc_host(chunk.min(len.max(1)) as usize, 64)?;
        let src = self.host_addr(&zeros);
        let mut off = 0u64;
        while off < len {
            let n = chunk.min(len - off);
            let dst = addr.checked_add(off).ok_or(HalError::DeviceRange { addr, len })?;
            self.copy(nc, &[Xfer { src, dst, len: n }])?;
            self.inner.dev_zeroed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            off += n;
        }
        Ok(())
    }

    /// Bytes zeroed so far for new owners: (device memory, recycled host memory). What a
    /// benchmark reads around an execute loop to show that executing zeroes nothing.
    pub fn zeroed_bytes(&self) -> (u64, u64) {
        (self.inner.dev_zeroed.load(std::sync::atomic::Ordering::Relaxed), self.inner.pool.zeroed_bytes())
    }
    /// The device-memory allocator.
    pub fn allocator(&self) -> &Arc<DevAllocator> {
        &self.inner.hbm
    }
    /// Default HBM channel of NC `nc` (V2: NC h ↔ HBM h; V3/V4: NCs 2h, 2h+1 ↔ HBM h).
    pub fn hbm_for_nc(&self, nc: usize) -> usize {
        let c = &self.arch().counts;
        ((nc as u64 * c.hbm_stacks) / c.ncs.max(1)).min(c.hbm_stacks.saturating_sub(1)) as usize
    }
    /// The device's queue-parking state (the dummy ring dropped queues are parked on).
    pub fn parking(&self) -> &Arc<Parking> {
        &self.inner.park
    }
    /// Unmap idle host chunks.
    pub fn trim(&self) {
        self.inner.pool.trim();
    }

    // ----------------------------------------------------------------- DMA

    /// The host-transfer ring of NC `nc` (created on first use).
    pub fn h2t_ring(&self, nc: usize) -> Result<Arc<Mutex<Ring>>> {
        self.check_nc(nc)?;
        let key = udma::h2t(self.arch(), nc);
        let mut v = self.inner.h2t.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = v.iter().find(|(k, _)| *k == key) {
            return Ok(r.clone());
        }
        let r = Ring::new(&self.inner.park, &self.inner.pool, key.0, key.1, self.inner.opts.h2t_ring_descs)?;
        let r = Arc::new(Mutex::new(r));
        v.push((key, r.clone()));
        Ok(r)
    }

    /// A new queue pair driven by this process (for model I/O rings).
    pub fn new_ring(&self, engine: u64, queue: u64, ndesc: u32) -> Result<Ring> {
        Ring::new(&self.inner.park, &self.inner.pool, engine, queue, ndesc)
    }

    /// Copy between device addresses (host buffers, HBM, state buffer) on NC `nc`'s
    /// host-facing engine; waits for completion. An aborted queue is recovered and the
    /// abort returned.
    pub fn copy(&self, nc: usize, xfers: &[Xfer]) -> Result<()> {
        platform::failpoint::hit("hal.dma.copy")?;
        let ring = self.h2t_ring(nc)?;
        let mut r = ring.lock().unwrap_or_else(|e| e.into_inner());
        let regs = self.regs();
        match r.copy(&regs, xfers) {
            Err(e @ HalError::DmaAbort { .. }) | Err(e @ HalError::DmaTimeout { .. }) => {
                r.recover(&regs)?;
                Err(e)
            }
            other => other,
        }
    }

    /// Write `data` to device address `addr` (through bounce buffers).
    pub fn write_device(&self, nc: usize, addr: u64, data: &[u8]) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20);
        let bounce = self.alloc_host(chunk.min(data.len().max(1)), 64)?;
        for (i, c) in data.chunks(chunk).enumerate() {
            bounce.write(0, c)?;
            self.copy(
                nc,
                &[Xfer { src: self.host_addr(&bounce), dst: addr + (i * chunk) as u64, len: c.len() as u64 }],
            )?;
        }
        Ok(())
    }

    /// Read device address `addr` into `out`.
    pub fn read_device(&self, nc: usize, addr: u64, out: &mut [u8]) -> Result<()> {
        let chunk = self.inner.opts.host_chunk.clamp(4096, 4 << 20);
        let bounce = self.alloc_host(chunk.min(out.len().max(1)), 64)?;
        for (i, c) in out.chunks_mut(chunk).enumerate() {
            self.copy(
                nc,
                &[Xfer { src: addr + (i * chunk) as u64, dst: self.host_addr(&bounce), len: c.len() as u64 }],
            )?;
            bounce.read(0, c)?;
        }
        Ok(())
    }

    /// Copy out host DMA memory of this device's pool at device address `addr` (a host-window
    /// address, as programmed into a notification slot): `Ok(false)` when the range is not in
    /// a shared chunk of the pool. Reads only; no DMA, no MMIO.
    pub fn read_host(&self, addr: u64, out: &mut [u8]) -> Result<bool> {
        match self.arch().dev_to_host_iova(addr) {
            Some(iova) => self.inner.pool.read_iova(iova, out),
            None => Ok(false),
        }
    }

    /// Pause every queue of NC `nc`'s DMA engines (§3.7).
    pub fn quiesce_nc(&self, nc: usize) -> Result<()> {
        self.check_nc(nc)?;
        let regs = self.regs();
        let per = self.arch().counts.dma_engines_per_nc;
        for e in nc as u64 * per..(nc as u64 + 1) * per {
            let u = regs.udma(e)?;
            for q in 0..csr_maps::consts::udma::QUEUES {
                u.m2s().q(q)?.cfg().modify(|v| v.with_en_pref(0).with_en_scheduling(0))?;
                u.s2m().q(q)?.cfg().modify(|v| v.with_en_pref(0).with_en_stream(0))?;
            }
        }
        std::thread::sleep(Duration::from_micros(csr_maps::consts::udma::QUIESCE_WAIT_US));
        Ok(())
    }

    // ----------------------------------------------------------------- semaphores

    /// Semaphore `i` of NC `nc`.
    pub fn sem_read(&self, nc: usize, i: u64) -> Result<i32> {
        Ok(self.regs().tpb_sem(nc as u64)?.sem_read(i)?.read()?.0 as i32)
    }
    /// Assign.
    pub fn sem_set(&self, nc: usize, i: u64, v: i32) -> Result<()> {
        platform::failpoint::hit("hal.sem.set")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_set(i)?.write(ts::SemSet(v as u32))?)
    }
    /// Add (the kickoff: one MMIO write).
    pub fn sem_inc(&self, nc: usize, i: u64, v: u32) -> Result<()> {
        platform::failpoint::hit("hal.sem.inc")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_inc(i)?.write(ts::SemInc(v))?)
    }
    /// Subtract.
    pub fn sem_dec(&self, nc: usize, i: u64, v: u32) -> Result<()> {
        platform::failpoint::hit("hal.sem.dec")?;
        Ok(self.regs().tpb_sem(nc as u64)?.sem_dec(i)?.write(ts::SemDec(v))?)
    }
    /// BAR0 offset of semaphore `i`'s increment register (for precomputed kickoffs).
    pub fn sem_inc_offset(&self, nc: usize, i: u64) -> Result<u64> {
        Ok(self.regs().tpb_sem(nc as u64)?.sem_inc(i)?.offset())
    }
    /// A kickoff handle: semaphore `i`'s increment register on NC `nc`, resolved once (at
    /// load) so that [`Device::kick`] is a single MMIO write.
    pub fn kick_slot(&self, nc: usize, i: u64) -> Result<KickSlot> {
        self.check_nc(nc)?;
        Ok(KickSlot { nc, sem: i, off: self.sem_inc_offset(nc, i)? })
    }
    /// The kickoff: increment the semaphore behind `k` by one. One 32-bit MMIO write — no
    /// allocation, no syscall, no lock.
    pub fn kick(&self, k: &KickSlot) -> Result<()> {
        platform::failpoint::hit("hal.kick")?;
        Ok(self.inner.bar0.write32(k.off, ts::SemInc(1).0)?)
    }
    /// Device address of semaphore `i`'s increment register (a DMA or WRITE target).
    pub fn sem_inc_dev_addr(&self, nc: usize, i: u64) -> Result<u64> {
        let off = self.sem_inc_offset(nc, i)?;
        self.arch().bar0_to_dev(off).ok_or(HalError::DeviceRange { addr: off, len: 4 })
    }
    /// Event `i` (0/1).
    pub fn event(&self, nc: usize, i: u64) -> Result<bool> {
        Ok(self.regs().tpb_sem(nc as u64)?.event(i)?.read()?.0 & 1 != 0)
    }
    /// Set or clear event `i`.
    pub fn set_event(&self, nc: usize, i: u64, on: bool) -> Result<()> {
        platform::failpoint::hit("hal.event.set")?;
        Ok(self.regs().tpb_sem(nc as u64)?.event(i)?.write(ts::Event(on as u32))?)
    }

    // ----------------------------------------------------------------- notifications

    /// A host notification ring of `records` entries on NOTIFIC slot `slot` of `owner`.
    pub fn nq_ring(&self, owner: NqOwner, slot: u64, records: u64) -> Result<NqRing> {
        if let NqOwner::Nc(nc) = owner {
            self.check_nc(nc)?;
        }
        NqRing::new(&self.inner.park, &self.inner.pool, owner, slot, records)
    }
    /// NOTIFIC slot of TPB engine `engine`'s INFER_STATUS ring.
    pub fn infer_slot(&self, engine: usize) -> u64 {
        self.arch().consts.nq_slot_infer_status + engine as u64
    }
    /// NOTIFIC slot of the TPB error ring.
    pub fn error_slot(&self) -> u64 {
        self.arch().consts.nq_slot_error
    }
    /// NOTIFIC slot of a (type, engine) NQ id (type × 16 + engine).
    pub fn nq_id(kind: u64, engine: u64) -> u64 {
        kind * nqc::ENGINES_PER_TYPE + engine
    }
    /// INTC line 61 (group 1 bit 29): software NQ overflow on NC `nc`.
    pub fn nq_overflow(&self, nc: usize) -> Result<bool> {
        Ok(self.nc_intc(nc)?.g1().cause().read()?.sw_nq_overflow() != 0)
    }
    /// NC `nc`'s interrupt controller, at the base resolved when the device was opened.
    fn nc_intc(&self, nc: usize) -> Result<csr_maps::blocks::nc_intc::Block<'_>> {
        match self.inner.nc_intc.get(nc).copied().flatten() {
            Some(base) => Ok(csr_maps::blocks::nc_intc::Block::at(self.inner.bar0.as_ref(), base)),
            // Not an NC of this arch: the lookup's own error.
            None => Ok(self.regs().nc_intc(nc as u64)?),
        }
    }
    /// Fatal causes latched on NC `nc`.
    pub fn fatal_causes(&self, nc: usize) -> Result<FatalCauses> {
        let c = self.nc_intc(nc)?.g0().cause().read()?;
        let mut causes = FatalCauses::empty();
        causes.set(FatalCauses::SEQ_FATAL, c.seq_fatal() != 0);
        causes.set(FatalCauses::DMA_ABORT, c.dma_abort() != 0);
        causes.set(FatalCauses::DMA_FAULT, c.dma_fault() != 0);
        causes.set(FatalCauses::HBM_UE, c.hbm_ue() != 0);
        causes.set(FatalCauses::HBM_UE_REPAIRABLE, c.hbm_ue_repairable() != 0);
        causes.set(FatalCauses::NC_UE, c.nc_ue() != 0);
        causes.set(FatalCauses::CC_ERROR, c.cc_error() != 0);
        causes.set(FatalCauses::NET_PROXY, c.net_proxy_fail() != 0);
        Ok(causes)
    }
    /// NC `nc` arrives at the next collectives barrier of replica group `comm` as `rank` of
    /// `size` (the modeled `nc_barrier` block): its barrier task is outstanding until every
    /// rank of the group arrived (docs/faults.md). Three MMIO writes.
    pub fn barrier_arm(&self, nc: usize, comm: u32, rank: u8, size: u8) -> Result<()> {
        platform::failpoint::hit("hal.barrier.arm")?;
        use csr_maps::blocks::nc_barrier as nb;
        let b = self.regs().nc_barrier(nc as u64)?;
        b.comm().write(nb::Comm(comm))?;
        b.member().write(nb::Member(0).with_rank(rank as u32).with_size(size as u32))?;
        b.arm().write(nb::Arm(0).with_go(1))?;
        Ok(())
    }
    /// NC `nc`'s collectives barrier task (one MMIO read).
    pub fn barrier_status(&self, nc: usize) -> Result<BarrierStatus> {
        use csr_maps::consts::barrier as bc;
        let s = self.regs().nc_barrier(nc as u64)?.status().read()?;
        let state = match s.state() {
            bc::OUTSTANDING => BarrierState::Outstanding,
            bc::DONE => BarrierState::Done,
            bc::FAILED => BarrierState::Failed,
            _ => BarrierState::Idle,
        };
        Ok(BarrierStatus { state, generation: s.generation() })
    }
    /// Clear every latched cause of NC `nc`. The causes are write-0-to-clear like every
    /// IOFIC group (the Annapurna Labs HAL's `al_iofic_clear_cause` writes the complement of
    /// the bits it clears); the block's placement is modeled, so on real hardware this needs
    /// the operator's opt-in.
    pub fn clear_causes(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.causes.clear")?;
        let i = self.regs().nc_intc(nc as u64)?;
        i.g0().cause().write(csr_maps::blocks::nc_intc_g0::Cause(0))?;
        i.g1().cause().write(csr_maps::blocks::nc_intc_g1::Cause(0))?;
        Ok(())
    }

    // ----------------------------------------------------------------- ownership regions

    /// Program NC `nc`'s ownership region table with `regions` (coalesced: overlapping or
    /// abutting ranges of one permission take one entry) and enable it. Only entries that
    /// changed since the last programming are written. The NC must be idle.
    /// [`HalError::RegionTableFull`] when more entries are needed than the table holds
    /// (nothing is programmed then: the table is left as it was). Returns the entries used.
    pub fn set_regions(&self, nc: usize, regions: &[Region]) -> Result<usize> {
        platform::failpoint::hit("hal.regions.program")?;
        self.check_nc(nc)?;
        let mut all = self.inner.regions.lock().unwrap_or_else(|e| e.into_inner());
        let shadow = all.get_mut(nc).ok_or(HalError::NoSuchNc { nc, count: self.nc_count() })?;
        regions::program(&self.regs(), nc, regions, shadow)
    }

    /// Disable NC `nc`'s ownership region table (nothing is checked) and clear its entries.
    pub fn clear_regions(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.regions.clear")?;
        self.check_nc(nc)?;
        let mut all = self.inner.regions.lock().unwrap_or_else(|e| e.into_inner());
        let shadow = all.get_mut(nc).ok_or(HalError::NoSuchNc { nc, count: self.nc_count() })?;
        regions::disable(&self.regs(), nc, shadow)
    }

    /// The first access NC `nc`'s region table refused since the last clear, if any.
    pub fn region_fault(&self, nc: usize) -> Result<Option<RegionFault>> {
        self.check_nc(nc)?;
        regions::fault(&self.regs(), nc)
    }

    /// Clear NC `nc`'s latched region-table report.
    pub fn clear_region_fault(&self, nc: usize) -> Result<()> {
        self.check_nc(nc)?;
        regions::clear_fault(&self.regs(), nc)
    }

    /// The table's registers were reset with the NC: forget what they held.
    fn forget_regions(&self, nc: Option<usize>) {
        let mut all = self.inner.regions.lock().unwrap_or_else(|e| e.into_inner());
        for (i, s) in all.iter_mut().enumerate() {
            if nc.is_none_or(|n| n == i) {
                s.clear();
            }
        }
    }

    // ----------------------------------------------------------------- sequencers

    /// Stage a slot program for `engine` of `nc` in device memory and program the engine.
    pub fn load_stream(&self, nc: usize, engine: usize, slots: &[u8], looped: bool) -> Result<Stream> {
        self.check_nc(nc)?;
        if slots.is_empty() || !slots.len().is_multiple_of(SLOT_BYTES) {
            return Err(HalError::ProgramSize(slots.len()));
        }
        let mem = self.alloc_device(self.hbm_for_nc(nc), slots.len() as u64, 4096)?;
        self.write_device(nc, mem.addr(), slots)?;
        Stream::program(&self.inner.park, nc, engine, mem, slots.len(), self.infer_slot(engine), looped)
    }

    /// The interrupt of NC `nc` (vector = NC index), if the platform delivers one.
    pub fn irq(&self, nc: usize) -> Result<Option<Irq>> {
        self.check_nc(nc)?;
        Ok(self.inner.platform.irq_eventfd(nc as u32)?.map(|fd| Irq::new(fd, nc as u32)))
    }

    /// The NC's current device timestamp (notification-timestamp ticks).
    pub fn device_time(&self, nc: usize) -> Result<u64> {
        let s = self.regs().seq(nc as u64)?;
        let lo = s.ts_lo().read()?.0 as u64;
        let hi = s.ts_hi().read()?.0 as u64;
        Ok(lo | (hi << 32))
    }

    /// Status of an engine.
    pub fn engine_status(&self, nc: usize, engine: usize) -> Result<EngineStatus> {
        seq::status(&self.regs(), nc, engine)
    }

    // ----------------------------------------------------------------- firmware

    /// A FW-IO request (new protocol).
    pub fn fwio(&self, cmd: u8, payload: &[u8]) -> Result<Vec<u8>> {
        let mut s = self.inner.fw_seq.lock().unwrap_or_else(|e| e.into_inner());
        fwio::request(self.arch(), &self.regs(), &mut s, cmd, payload, &self.inner.opts.poll)
    }

    /// Reset NeuronCore `nc` through the firmware and bring its DMA engines back up; the
    /// NC's notification queues and host-transfer ring are re-initialised.
    pub fn reset_nc(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.reset_nc")?;
        self.check_nc(nc)?;
        let regs = self.regs();
        nq::halt_all(&regs, nc, self.arch().counts.nq_slots)?;
        fwio::reset(self.arch(), &regs, ResetKind::Ncs(1 << nc), &self.inner.opts.poll)?;
        self.forget_regions(Some(nc));
        let per = self.arch().counts.dma_engines_per_nc;
        for e in nc as u64 * per..(nc as u64 + 1) * per {
            udma::init_engine(self.arch(), &regs, e)?;
        }
        self.reprogram_h2t()
    }

    /// Reset the whole device and re-initialise it.
    pub fn reset_device(&self) -> Result<()> {
        fwio::reset(self.arch(), &self.regs(), ResetKind::Device, &self.inner.opts.poll)?;
        self.forget_regions(None);
        self.init()?;
        self.reprogram_h2t()
    }

    fn reprogram_h2t(&self) -> Result<()> {
        let regs = self.regs();
        let v = self.inner.h2t.lock().unwrap_or_else(|e| e.into_inner());
        for (_, r) in v.iter() {
            r.lock().unwrap_or_else(|e| e.into_inner()).recover(&regs)?;
        }
        Ok(())
    }

    /// Drop cached host-transfer rings and unmap idle host memory (for a clean close).
    pub fn close(&self) {
        self.inner.h2t.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Parking::release_if_unused(&self.inner.park);
        self.inner.pool.trim();
    }
}
