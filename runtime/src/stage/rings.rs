//! Step 5, arm rings: the NC's notification rings in host memory (one INFER_STATUS ring per
//! TPB engine, the error ring), then the five engine programs loaded as looping instruction
//! streams and enabled. The engines start idle: they wait on their start semaphores until
//! the first kickoff.

use csr_maps::Engine;
use hal::{Device, NqOwner, NqRing, Stream};

use super::lower::Slots;
use super::{StageError, RING_RECORDS};

/// The armed rings and streams of one NC.
pub struct Armed {
    pub infer_rings: Vec<NqRing>,
    pub err_ring: NqRing,
    pub streams: Vec<Stream>,
}

/// Arm the notification rings of NC `nc`, then load and enable `progs` (engine order).
pub fn arm_rings(dev: &Device, nc: usize, progs: &[Slots]) -> Result<Armed, StageError> {
    let regs = dev.regs();
    let mut infer_rings = Vec::new();
    for e in 0..Engine::COUNT {
        infer_rings.push(dev.nq_ring(NqOwner::Nc(nc), dev.infer_slot(e), RING_RECORDS)?);
    }
    let err_ring = dev.nq_ring(NqOwner::Nc(nc), dev.error_slot(), RING_RECORDS)?;
    let mut streams = Vec::new();
    for (e, slots) in progs.iter().enumerate() {
        let bytes: Vec<u8> = slots.iter().flatten().copied().collect();
        streams.push(dev.load_stream(nc, e, &bytes, true)?);
    }
    for s in &streams {
        s.enable(&regs, true)?;
    }
    Ok(Armed { infer_rings, err_ring, streams })
}
