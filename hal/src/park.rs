//! Parking hardware queues before their host memory is freed.
//!
//! When a queue's owner goes away the kmod re-initialises every UDMA queue it owned onto a
//! small dummy descriptor ring in host memory, owned by the device (`ndmar_handle_process_exit`
//! in `m:neuron_ring.c`; 64 descriptors, `NDMA_QUEUE_DUMMY_RING_DESC_COUNT` in
//! `m:neuron_ring.h`; allocated for the device's lifetime in `m:neuron_pci.c`), and halts a
//! notification queue by writing base 0 / size 0 to its slot, waiting for in-flight records
//! to drain before the ring memory is freed (`nnq_halt`, `nnq_destroy_nc` in
//! `m:neuron_nq.c`; `nnq_set_hwaddr_v2` writes base high, base low, size). [`crate::Ring`]
//! and [`crate::NqRing`] do the same when dropped, so the hardware never points at freed
//! host buffers.
//!
//! Several rings may be programmed onto the same hardware queue in turn (the runtime arms
//! one model at a time on a shared NeuronCore and re-initialises its queues onto that
//! model's rings). Only the ring that programmed the queue last owns it: dropping any other
//! ring frees its memory without touching the registers, which point at the owner's ring.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csr_maps::blocks::{notific_slot as ns, udma_m2s_q as mq, udma_s2m_q as sq};
use csr_maps::consts::{nq as nqc, udma as udc};
use csr_maps::formats::udma::DESC_BYTES;
use csr_maps::{Arch, Regs};
use platform::Mmio;

use crate::error::Result;
use crate::mem::{HostBuf, HostPool};
use crate::nq::NqOwner;

/// The device's queue-parking state: BAR0 for the writes made on drop, and the dummy ring.
pub struct Parking {
    arch: &'static Arch,
    bar0: Arc<dyn Mmio>,
    /// The dummy descriptor ring (allocated with the first [`crate::Ring`]).
    dummy: Mutex<Option<HostBuf>>,
    /// Queues (engine, queue) parked on the dummy ring.
    parked: Mutex<Vec<(u64, u64)>>,
    /// The ring (by id) each UDMA queue was last programmed onto.
    udma_owner: Mutex<HashMap<(u64, u64), u64>>,
    /// The ring (by id) each NQ slot was last programmed onto.
    nq_owner: Mutex<HashMap<(NqOwner, u64), u64>>,
    /// The stream each sequencer engine was last programmed onto.
    pub(crate) engines: EngineOwners,
    next_id: AtomicU64,
}

/// Which stream (by id) each engine (nc, engine) was last programmed onto, so that dropping a
/// stream resets its engine only while the engine still fetches from that stream's memory
/// (the pattern of [`crate::Ring`] and [`crate::NqRing`]; kept by [`Parking`]).
#[derive(Default)]
pub(crate) struct EngineOwners(Mutex<HashMap<(usize, usize), u64>>);

impl EngineOwners {
    pub(crate) fn claim(&self, nc: usize, engine: usize, id: u64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert((nc, engine), id);
    }

    /// Stream `id` goes away: whether it still owned the engine (ownership is dropped).
    pub(crate) fn release(&self, nc: usize, engine: usize, id: u64) -> bool {
        let mut o = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if o.get(&(nc, engine)) != Some(&id) {
            return false;
        }
        o.remove(&(nc, engine));
        true
    }
}

impl Parking {
    /// Parking for the device behind `bar0`.
    pub fn new(arch: &'static Arch, bar0: Arc<dyn Mmio>) -> Self {
        Self {
            arch,
            bar0,
            dummy: Mutex::new(None),
            parked: Mutex::new(Vec::new()),
            udma_owner: Mutex::new(HashMap::new()),
            nq_owner: Mutex::new(HashMap::new()),
            engines: Default::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// The arch.
    pub fn arch(&self) -> &'static Arch {
        self.arch
    }

    /// Typed registers over the device's BAR0.
    pub fn regs(&self) -> Regs<'_> {
        Regs::new(self.arch, self.bar0.as_ref())
    }

    /// Allocate the dummy ring if it does not exist yet (done when a ring is created, so
    /// that dropping one never allocates).
    pub fn ensure_dummy(&self, pool: &HostPool) -> Result<()> {
        let mut d = self.dummy.lock().unwrap_or_else(|e| e.into_inner());
        if d.is_none() {
            let bytes = udc::DUMMY_RING_DESCS as usize * DESC_BYTES;
            let b = pool.alloc(bytes, udc::RING_ALIGN as usize)?;
            b.fill(0, bytes, 0)?;
            *d = Some(b);
        }
        Ok(())
    }

    /// Device address of the dummy ring, if allocated.
    pub fn dummy_dev_addr(&self) -> Option<u64> {
        let d = self.dummy.lock().unwrap_or_else(|e| e.into_inner());
        d.as_ref().map(|b| self.arch.host_dev_addr(b.iova()))
    }

    /// Re-initialise queue `queue` of engine `engine` (both halves) onto the dummy ring, as
    /// the kmod does for a queue whose owner went away. Without a dummy ring (no ring was
    /// ever created) the queue is paused instead.
    pub fn park_udma(&self, engine: u64, queue: u64) -> Result<()> {
        let regs = self.regs();
        let Some(base) = self.dummy_dev_addr() else {
            return pause(&regs, engine, queue);
        };
        program_queue(&regs, engine, queue, base, base, udc::DUMMY_RING_DESCS)?;
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        if !p.contains(&(engine, queue)) {
            p.push((engine, queue));
        }
        Ok(())
    }

    /// A fresh ring id.
    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Ring `id` programmed queue (`engine`, `queue`): it owns the queue now (off the dummy
    /// ring).
    pub(crate) fn claim_udma(&self, engine: u64, queue: u64, id: u64) {
        self.parked.lock().unwrap_or_else(|e| e.into_inner()).retain(|&k| k != (engine, queue));
        self.udma_owner.lock().unwrap_or_else(|e| e.into_inner()).insert((engine, queue), id);
    }

    /// Ring `id` goes away: if it still owns the queue, park the queue on the dummy ring.
    /// Returns whether it did.
    pub(crate) fn release_udma(&self, engine: u64, queue: u64, id: u64) -> Result<bool> {
        {
            let mut o = self.udma_owner.lock().unwrap_or_else(|e| e.into_inner());
            if o.get(&(engine, queue)) != Some(&id) {
                return Ok(false);
            }
            o.remove(&(engine, queue));
        }
        self.park_udma(engine, queue)?;
        Ok(true)
    }

    /// NQ ring `id` programmed slot `slot` of `owner`.
    pub(crate) fn claim_nq(&self, owner: NqOwner, slot: u64, id: u64) {
        self.nq_owner.lock().unwrap_or_else(|e| e.into_inner()).insert((owner, slot), id);
    }

    /// NQ ring `id` goes away: whether it still owns its slot (then the slot is released).
    pub(crate) fn release_nq(&self, owner: NqOwner, slot: u64, id: u64) -> bool {
        let mut o = self.nq_owner.lock().unwrap_or_else(|e| e.into_inner());
        if o.get(&(owner, slot)) != Some(&id) {
            return false;
        }
        o.remove(&(owner, slot));
        true
    }

    /// Halt a notification queue: base high, base low and size 0 (`nnq_halt`).
    pub fn halt_nq(&self, owner: NqOwner, slot: u64) -> Result<()> {
        let regs = self.regs();
        let s = crate::nq::slot_regs(&regs, owner, slot)?;
        s.base_hi().write(ns::BaseHi(0))?;
        s.base_lo().write(ns::BaseLo(0))?;
        s.size().write(ns::Size(0))?;
        Ok(())
    }

    /// Wait until `DRAIN_MS` has passed since `halted` (records in flight land before the
    /// ring memory is freed, `nnq_destroy_nc`).
    pub fn drain_since(halted: Instant) {
        let drain = Duration::from_millis(nqc::DRAIN_MS);
        let spent = halted.elapsed();
        if spent < drain {
            std::thread::sleep(drain - spent);
        }
    }
}

impl Parking {
    /// Pause the queues parked on the dummy ring, then free it (they no longer point at it).
    fn free_dummy(&self) {
        let regs = self.regs();
        let parked = std::mem::take(&mut *self.parked.lock().unwrap_or_else(|e| e.into_inner()));
        for (e, q) in parked {
            if let Err(err) = pause(&regs, e, q) {
                tracing::warn!(engine = e, queue = q, %err, "could not pause a parked DMA queue");
            }
        }
        drop(self.dummy.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Device close: with no ring left (`this` is the only handle), pause the parked queues
    /// and free the dummy ring so the host pool can unmap everything. A ring created later
    /// allocates a new one.
    pub fn release_if_unused(this: &Arc<Self>) {
        if Arc::strong_count(this) == 1 {
            this.free_dummy();
        }
    }
}

impl Drop for Parking {
    /// The dummy ring is freed with the device: pause the queues parked on it first.
    fn drop(&mut self) {
        self.free_dummy();
    }
}

/// Pause both halves of a queue (clear the enable bits).
fn pause(regs: &Regs<'_>, engine: u64, queue: u64) -> Result<()> {
    let u = regs.udma(engine)?;
    u.m2s().q(queue)?.cfg().modify(|v| v.with_en_pref(0).with_en_scheduling(0))?;
    u.s2m().q(queue)?.cfg().modify(|v| v.with_en_pref(0).with_en_stream(0))?;
    Ok(())
}

/// Queue init as the kmod's `udma_q_init` (both halves, M2S first): rate-limit mask (M2S),
/// pause, reset, ring base and length, no completion ring, enable (§3.7).
pub(crate) fn program_queue(regs: &Regs<'_>, engine: u64, queue: u64, mb: u64, sb: u64, ndesc: u32) -> Result<()> {
    let u = regs.udma(engine)?;
    let (m, s) = (u.m2s().q(queue)?, u.s2m().q(queue)?);
    m.rlimit_mask().write(mq::RlimitMask(udc::RLIMIT_MASK_INIT))?;
    m.cfg().modify(|v| v.with_en_pref(0).with_en_scheduling(0))?;
    m.sw_ctrl().write_with(|v| v.with_rst_q(1))?;
    m.ring_base_lo().write(mq::RingBaseLo(mb as u32))?;
    m.ring_base_hi().write(mq::RingBaseHi((mb >> 32) as u32))?;
    m.ring_len().write_with(|v| v.with_count(ndesc))?;
    m.comp_cfg().write(mq::CompCfg(0))?;
    m.cfg().modify(|v| v.with_en_pref(1).with_en_scheduling(1))?;
    s.cfg().modify(|v| v.with_en_pref(0).with_en_stream(0))?;
    s.sw_ctrl().write_with(|v| v.with_rst_q(1))?;
    s.ring_base_lo().write(sq::RingBaseLo(sb as u32))?;
    s.ring_base_hi().write(sq::RingBaseHi((sb >> 32) as u32))?;
    s.ring_len().write_with(|v| v.with_count(ndesc))?;
    s.comp_cfg().write(sq::CompCfg(0))?;
    s.cfg().modify(|v| v.with_en_pref(1).with_en_stream(1))?;
    Ok(())
}
