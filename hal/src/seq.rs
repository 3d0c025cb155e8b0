//! Sequencer streams: 64-byte slot programs in device memory, programmed into an engine's
//! instruction-fetch queue (`seq.eng[e]`, modeled in csr-maps), enabled, and kicked off
//! by a semaphore increment (one MMIO write).

use std::sync::Arc;

use csr_maps::blocks::seq_engine as se;
use csr_maps::consts::seq as seqc;
use csr_maps::Regs;
use isa::slot::SLOT_BYTES;

use crate::error::{HalError, Result};
use crate::mem::DevBuf;
use crate::park::Parking;

/// A program loaded for one engine. Dropping it (or [`Stream::unload`]) resets the engine
/// before the program's device memory is freed — if the engine still runs this stream: an
/// engine since programmed onto another stream is left alone.
pub struct Stream {
    pub nc: usize,
    pub engine: usize,
    mem: DevBuf,
    pub slots: u32,
    park: Arc<Parking>,
    /// This stream's id for engine ownership (kept by [`Parking`]).
    id: u64,
}

/// State of an engine as the device reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineStatus {
    pub state: u32,
    pub fault_code: u32,
    pub pc: u32,
    pub passes: u32,
}

impl Stream {
    /// Program engine `engine` of `nc` to run the slots already written at `mem`.
    pub fn program(
        park: &Arc<Parking>,
        nc: usize,
        engine: usize,
        mem: DevBuf,
        bytes: usize,
        infer_slot: u64,
        looped: bool,
    ) -> Result<Self> {
        if engine >= seqc::Engine::COUNT {
            return Err(HalError::NoSuchEngine(engine));
        }
        if bytes == 0 || !bytes.is_multiple_of(SLOT_BYTES) {
            return Err(HalError::ProgramSize(bytes));
        }
        let slots = (bytes / SLOT_BYTES) as u32;
        let s = Self { nc, engine, mem, slots, park: park.clone(), id: park.new_id() };
        // Owned from the first register write: a failure part-way resets the engine on drop.
        park.engines.claim(nc, engine, s.id);
        s.write_program(&park.regs(), infer_slot, looped)?;
        Ok(s)
    }

    /// The device memory holding the slots.
    pub fn mem(&self) -> &DevBuf {
        &self.mem
    }

    /// Reset the engine and point its instruction fetch at this stream's slots (not enabled).
    fn write_program(&self, regs: &Regs<'_>, infer_slot: u64, looped: bool) -> Result<()> {
        platform::failpoint::hit("hal.seq.program")?;
        reset(regs, self.nc, self.engine)?;
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ifq_base_lo().write(se::IfqBaseLo(self.mem.addr() as u32))?;
        r.ifq_base_hi().write(se::IfqBaseHi((self.mem.addr() >> 32) as u32))?;
        r.ifq_len().write_with(|v| v.with_slots(self.slots))?;
        r.nq_infer_slot().write_with(|v| v.with_slot(infer_slot as u32))?;
        r.ctrl().write_with(|v| v.with_loop_en(looped as u32))?;
        Ok(())
    }

    /// Start fetching at slot 0.
    pub fn enable(&self, regs: &Regs<'_>, looped: bool) -> Result<()> {
        platform::failpoint::hit("hal.seq.enable")?;
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ctrl().write_with(|v| v.with_enable(1).with_loop_en(looped as u32))?;
        Ok(())
    }

    /// Stop and reset the engine, keeping the program (the NC is handed to another model;
    /// [`Stream::rearm`] brings it back).
    pub fn halt(&self, regs: &Regs<'_>) -> Result<()> {
        reset(regs, self.nc, self.engine)
    }

    /// Program the engine again onto this stream's slots (after [`Stream::halt`] or an NC
    /// reset) and enable it.
    pub fn rearm(&self, regs: &Regs<'_>, infer_slot: u64, looped: bool) -> Result<()> {
        self.park.engines.claim(self.nc, self.engine, self.id);
        self.write_program(regs, infer_slot, looped)?;
        self.enable(regs, looped)
    }

    /// Stop and reset the engine (if this stream still owns it), then free the program.
    pub fn unload(mut self) -> Result<()> {
        self.release()
    }

    /// Reset the engine if this stream still owns it (ownership ends either way).
    fn release(&mut self) -> Result<()> {
        if !self.park.engines.release(self.nc, self.engine, self.id) {
            return Ok(());
        }
        reset(&self.park.regs(), self.nc, self.engine)
    }
}

/// Stop and reset engine `engine` of `nc` (control: reset; the one write every path that
/// stops an engine makes), whoever programmed it (the broker's cleanup of a dead process).
pub fn reset_engine(regs: &Regs<'_>, nc: usize, engine: usize) -> Result<()> {
    reset(regs, nc, engine)
}

fn reset(regs: &Regs<'_>, nc: usize, engine: usize) -> Result<()> {
    regs.seq(nc as u64)?.eng(engine as u64)?.ctrl().write_with(|v| v.with_reset(1))?;
    Ok(())
}

impl Drop for Stream {
    /// Reset the engine before its program's device memory is freed (the engine would fetch
    /// whatever the memory holds next), if this stream still owns it.
    fn drop(&mut self) {
        if let Err(err) = self.release() {
            tracing::warn!(nc = self.nc, engine = self.engine, %err, "could not reset a sequencer engine");
        }
    }
}

/// Read an engine's status registers.
pub fn status(regs: &Regs<'_>, nc: usize, engine: usize) -> Result<EngineStatus> {
    let r = regs.seq(nc as u64)?.eng(engine as u64)?;
    let s = r.status().read()?;
    Ok(EngineStatus {
        state: s.state(),
        fault_code: s.fault_code(),
        pc: r.pc().read()?.slot(),
        passes: r.passes().read()?.0,
    })
}
