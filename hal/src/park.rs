//! Parking hardware queues before their host memory is freed.
//!
//! When a queue's owner goes away the kmod re-initialises every UDMA queue it owned onto a
//! small dummy descriptor ring in host memory, owned by the device (`ndmar_handle_process_exit`
//! in `m:neuron_ring.c`; 64 descriptors, `NDMA_QUEUE_DUMMY_RING_DESC_COUNT` in
//! `m:neuron_ring.h`; allocated for the device's lifetime in `m:neuron_pci.c`), and halts a
//! notification queue by writing base 0 / size 0 to its slot, waiting for in-flight records
//! to drain before the ring memory is freed (`nnq_halt`, `nnq_destroy_nc` in
//! `m:neuron_nq.c`; `nnq_set_hwaddr_v2` writes base high, base low, size). `ring::Ring`
//! and `nq_ring::NqRing` do the same when dropped, so the hardware never points at freed
//! host buffers.
//!
//! [`Parking`] only tracks ownership — which ring owns which queue and slot, which queues
//! sit on the dummy ring — and, when an owner goes away, calls the hardware sequences of
//! [`crate::udma`] (queue program, pause) and [`crate::nq`] (slot halt); it writes no
//! register itself.
//!
//! Several rings may be programmed onto the same hardware queue in turn (the runtime arms
//! one model at a time on a shared NeuronCore and re-initialises its queues onto that
//! model's rings). Only the ring that programmed the queue last owns it: dropping any other
//! ring frees its memory without touching the registers, which point at the owner's ring.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::DESC_BYTES;
use csr_maps::{Arch, Regs};
use platform::Mmio;

use crate::error::Result;
use crate::mem::{HostBuf, HostPool};
use crate::nq::{self, NqOwner};
use crate::udma;

/// The device's queue-parking state: BAR0 for the writes made on drop, and the dummy ring.
pub struct Parking {
    arch: &'static Arch,
    bar0: Arc<dyn Mmio>,
    /// The dummy descriptor ring (allocated with the first `ring::Ring`).
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
        platform::sync::lock(&self.0).insert((nc, engine), id);
    }

    /// Stream `id` goes away: whether it still owned the engine (ownership is dropped).
    pub(crate) fn release(&self, nc: usize, engine: usize, id: u64) -> bool {
        let mut o = platform::sync::lock(&self.0);
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
        let mut d = platform::sync::lock(&self.dummy);
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
        let d = platform::sync::lock(&self.dummy);
        d.as_ref().map(|b| self.arch.host_dev_addr(b.iova()))
    }

    /// Re-initialise queue `queue` of engine `engine` (both halves) onto the dummy ring, as
    /// the kmod does for a queue whose owner went away. Without a dummy ring (no ring was
    /// ever created) the queue is paused instead.
    pub fn park_udma(&self, engine: u64, queue: u64) -> Result<()> {
        let regs = self.regs();
        let Some(base) = self.dummy_dev_addr() else {
            return udma::pause_queue(&regs, engine, queue);
        };
        udma::program_queue(&regs, engine, queue, base, base, udc::DUMMY_RING_DESCS)?;
        let mut p = platform::sync::lock(&self.parked);
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
        platform::sync::lock(&self.parked).retain(|&k| k != (engine, queue));
        platform::sync::lock(&self.udma_owner).insert((engine, queue), id);
    }

    /// Ring `id` goes away: if it still owns the queue, park the queue on the dummy ring.
    /// Returns whether it did.
    pub(crate) fn release_udma(&self, engine: u64, queue: u64, id: u64) -> Result<bool> {
        {
            let mut o = platform::sync::lock(&self.udma_owner);
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
        platform::sync::lock(&self.nq_owner).insert((owner, slot), id);
    }

    /// NQ ring `id` goes away. If it still owns slot `slot` of `owner`: halt the slot
    /// ([`nq::halt_slot`], unless the ring already halted it at `halted`) and wait until
    /// records in flight have landed ([`nq::DRAIN`] since the halt) before the ring memory
    /// is freed (`nnq_destroy_nc`: halt, 1 ms, free). A slot since programmed onto another
    /// ring is left alone. Returns whether the ring owned the slot; a failed halt is
    /// returned after the drain (the slot is released either way).
    pub(crate) fn release_nq(&self, owner: NqOwner, slot: u64, id: u64, halted: Option<Instant>) -> Result<bool> {
        {
            let mut o = platform::sync::lock(&self.nq_owner);
            if o.get(&(owner, slot)) != Some(&id) {
                return Ok(false);
            }
            o.remove(&(owner, slot));
        }
        let (halted, r) = match halted {
            Some(t) => (t, Ok(())),
            None => {
                let r = nq::halt_slot(&self.regs(), owner, slot);
                (Instant::now(), r)
            }
        };
        let spent = halted.elapsed();
        if spent < nq::DRAIN {
            std::thread::sleep(nq::DRAIN - spent);
        }
        r.map(|()| true)
    }
}

impl Parking {
    /// Pause the queues parked on the dummy ring, then free it (they no longer point at it).
    fn free_dummy(&self) {
        let regs = self.regs();
        let parked = std::mem::take(&mut *platform::sync::lock(&self.parked));
        for (e, q) in parked {
            if let Err(err) = udma::pause_queue(&regs, e, q) {
                tracing::warn!(engine = e, queue = q, %err, "could not pause a parked DMA queue");
            }
        }
        drop(platform::sync::lock(&self.dummy).take());
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
