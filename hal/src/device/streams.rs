//! Sequencer streams: slot programs staged in device memory and programmed into an
//! engine's instruction-fetch queue; engine status and the NC's device time.

use isa::slot::SLOT_BYTES;

use super::Device;
use crate::error::{HalError, Result};
use crate::seq::{self, EngineStatus, Stream};

impl Device {
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
}
