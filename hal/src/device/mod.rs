//! [`Device`]: the owner of an open device — its platform, arch, BARs, memory pools,
//! queue parking and per-NC state — and its bring-up, identity and close. The operations
//! are grouped by concern, one file each, all as methods of [`Device`]:
//!
//! - `memory.rs`: host DMA memory, device memory (HBM), read / write / copy / zero;
//! - `dma.rs`: host-transfer rings, model I/O rings, queue parking;
//! - `sync.rs`: semaphores, events, kick slots;
//! - `notify.rs`: notification rings and slots, NQ overflow, interrupts;
//! - `control.rs`: NC control — fatal causes, collectives barrier,
//!   ownership region table;
//! - `streams.rs`: sequencer streams, engine status, device time;
//! - `firmware.rs`: FW-IO requests and resets.

mod control;
mod dma;
mod firmware;
mod memory;
mod notify;
mod streams;
mod sync;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csr_maps::consts::fwio as fwc;
use csr_maps::{Arch, Regs};
use platform::{Mmio, Platform};

pub use control::{BarrierState, BarrierStatus, FatalCauses};
pub use sync::KickSlot;

use crate::error::{HalError, Result};
use crate::fwio::PollTiming;
use crate::guard;
use crate::mem::{DevAllocator, HostPool};
use crate::nq;
use crate::park::Parking;
use crate::regions::Region;
use crate::ring::Ring;
use crate::udma;

/// Who sends this process's requests to the device's firmware mailbox (FW-IO) when the
/// device is shared: one mailbox per device, so the processes sharing it go through its owner
/// (the broker), which serializes them with its own (docs/sharing.md).
pub trait FirmwareGate: Send + Sync {
    /// Reset the NCs of `mask` (bit n: NC n) through the firmware and wait for it to finish
    /// (the firmware part only: the caller re-initialises its engines and queues).
    fn reset_ncs(&self, mask: u32) -> Result<()>;
    /// One FW-IO request; the firmware's response payload.
    fn request(&self, cmd: u8, payload: &[u8]) -> Result<Vec<u8>>;
}

/// Options for opening a device.
#[derive(Clone)]
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
    /// A shared device (docs/sharing.md): the NCs this process leased. [`Device::init`] then
    /// brings up only their DMA engines and notification queues (the broker initialised the
    /// device), [`Device::reset_nc`] refuses other NCs and [`Device::reset_device`] is refused.
    /// `None`: the device is this process's alone.
    pub owned_ncs: Option<std::ops::Range<usize>>,
    /// A shared device: the device memory the broker granted this process, as (HBM channel,
    /// device address, bytes); the allocator hands out only these ranges. `None`: every
    /// channel's usable HBM (above the firmware carve-out, up to `hbm_limit`).
    pub hbm_ranges: Option<Vec<HbmRange>>,
    /// A shared device: the firmware mailbox is reached through its owner
    /// ([`FirmwareGate`]); NC resets and FW-IO requests go there. `None`: this process
    /// drives the mailbox itself.
    pub firmware_gate: Option<Arc<dyn FirmwareGate>>,
}

impl std::fmt::Debug for DeviceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceOptions")
            .field("hbm_limit", &self.hbm_limit)
            .field("poll", &self.poll)
            .field("host_chunk", &self.host_chunk)
            .field("h2t_ring_descs", &self.h2t_ring_descs)
            .field("ready_timeout", &self.ready_timeout)
            .field("owned_ncs", &self.owned_ncs)
            .field("hbm_ranges", &self.hbm_ranges)
            .field("firmware_gate", &self.firmware_gate.is_some())
            .finish()
    }
}

/// Device memory granted to a process on a shared device ([`DeviceOptions::hbm_ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HbmRange {
    pub chan: usize,
    pub addr: u64,
    pub len: u64,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self {
            hbm_limit: None,
            poll: PollTiming::default(),
            host_chunk: 4 << 20,
            h2t_ring_descs: csr_maps::consts::udma::H2T_RING_DESCS,
            ready_timeout: Duration::from_millis(fwc::READY_POLLS as u64 * fwc::READY_POLL_MS),
            owned_ncs: None,
            hbm_ranges: None,
            firmware_gate: None,
        }
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
    dev_zeroed: AtomicU64,
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
        let hbm = Arc::new(match &opts.hbm_ranges {
            Some(ranges) => {
                DevAllocator::from_ranges(platform.clone(), bases.len(), ranges, arch.consts.dev_alloc_min)?
            }
            None => {
                DevAllocator::new(platform.clone(), &bases, size, arch.consts.fw_carveout, arch.consts.dev_alloc_min)
            }
        });
        if let Some(r) = &opts.owned_ncs {
            if r.start >= r.end || r.end > arch.counts.ncs as usize {
                return Err(HalError::NoSuchNc { nc: r.end.saturating_sub(1), count: arch.counts.ncs as usize });
            }
        }
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

    /// Bring up every DMA engine (§3.6) and halt every notification queue of every NC. On a
    /// shared device ([`DeviceOptions::owned_ncs`]) only the owned NCs' engines and queues:
    /// the broker brought the device up, and the other NCs are other processes'.
    pub fn init(&self) -> Result<()> {
        let regs = self.regs();
        let (engines, ncs) = match self.owned_ncs() {
            None => (0..self.arch().counts.dma_engines, 0..self.nc_count()),
            Some(r) => {
                let per = self.arch().counts.dma_engines_per_nc;
                (r.start as u64 * per..r.end as u64 * per, r)
            }
        };
        for e in engines {
            udma::init_engine(self.arch(), &regs, e)?;
        }
        for nc in ncs {
            nq::halt_all(&regs, nc, self.arch().counts.nq_slots)?;
        }
        Ok(())
    }

    /// Whether the device can still be reached ([`platform::Platform::reachable`]): false once
    /// a device behind a connection (a served or shared device) has lost it.
    pub fn reachable(&self) -> bool {
        self.inner.platform.reachable()
    }

    /// The NCs this process owns on a shared device (`None`: the device is its alone).
    pub fn owned_ncs(&self) -> Option<std::ops::Range<usize>> {
        self.inner.opts.owned_ncs.clone()
    }

    /// [`HalError::NotOwned`] when NC `nc` is another process's on a shared device.
    pub(crate) fn check_owned(&self, nc: usize) -> Result<()> {
        self.check_nc(nc)?;
        match self.owned_ncs() {
            Some(r) if !r.contains(&nc) => Err(HalError::NotOwned { what: format!("nc{nc}"), owned: r }),
            _ => Ok(()),
        }
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

    /// [`HalError::NoSuchNc`] unless `nc` is an NC of this device.
    fn check_nc(&self, nc: usize) -> Result<()> {
        if nc >= self.nc_count() {
            return Err(HalError::NoSuchNc { nc, count: self.nc_count() });
        }
        Ok(())
    }

    /// Drop cached host-transfer rings and unmap idle host memory (for a clean close).
    pub fn close(&self) {
        platform::sync::lock(&self.inner.h2t).clear();
        Parking::release_if_unused(&self.inner.park);
        self.inner.pool.trim();
    }
}
