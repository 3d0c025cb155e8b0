//! DMA rings: the host-transfer ring of each NC (created on first use, re-programmed
//! after resets), rings for model I/O, and the queue parking they share.

use std::sync::{Arc, Mutex};

use super::Device;
use crate::error::Result;
use crate::park::Parking;
use crate::ring::Ring;
use crate::udma;

impl Device {
    /// The device's queue-parking state (the dummy ring dropped queues are parked on).
    pub fn parking(&self) -> &Arc<Parking> {
        &self.inner.park
    }

    /// The host-transfer ring of NC `nc` (created on first use; an NC this process owns).
    pub fn h2t_ring(&self, nc: usize) -> Result<Arc<Mutex<Ring>>> {
        // On a shared device another process drives the other NCs' host-transfer queues.
        self.check_owned(nc)?;
        let key = udma::h2t(self.arch(), nc);
        let mut v = platform::sync::lock(&self.inner.h2t);
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

    /// Program every host-transfer ring's queue again onto its (emptied) rings, after a
    /// reset cleared the engines.
    pub(super) fn reprogram_h2t(&self) -> Result<()> {
        let regs = self.regs();
        let v = platform::sync::lock(&self.inner.h2t);
        for (_, r) in v.iter() {
            platform::sync::lock(r).recover(&regs)?;
        }
        Ok(())
    }
}
