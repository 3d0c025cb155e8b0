//! Sequencer streams: 64-byte slot programs in device memory, programmed into an engine's
//! instruction-fetch queue (`seq.eng[e]`, modeled in csr-maps), enabled, and kicked off
//! by a semaphore increment (one MMIO write).

use csr_maps::blocks::seq_engine as se;
use csr_maps::consts::seq as seqc;
use csr_maps::Regs;
use isa::slot::SLOT_BYTES;

use crate::error::{HalError, Result};
use crate::mem::DevBuf;

/// A program loaded for one engine; the engine is reset when it is dropped via
/// [`Stream::unload`] (the owner keeps the device memory alive while the engine runs).
pub struct Stream {
    pub nc: usize,
    pub engine: usize,
    pub mem: DevBuf,
    pub slots: u32,
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
        regs: &Regs<'_>,
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
        let r = regs.seq(nc as u64)?.eng(engine as u64)?;
        r.ctrl().write_with(|v| v.with_reset(1))?;
        r.ifq_base_lo().write(se::IfqBaseLo(mem.addr() as u32))?;
        r.ifq_base_hi().write(se::IfqBaseHi((mem.addr() >> 32) as u32))?;
        r.ifq_len().write_with(|v| v.with_slots(slots))?;
        r.nq_infer_slot().write_with(|v| v.with_slot(infer_slot as u32))?;
        r.ctrl().write_with(|v| v.with_loop_en(looped as u32))?;
        Ok(Self { nc, engine, mem, slots })
    }

    /// Start fetching at slot 0.
    pub fn enable(&self, regs: &Regs<'_>, looped: bool) -> Result<()> {
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ctrl().write_with(|v| v.with_enable(1).with_loop_en(looped as u32))?;
        Ok(())
    }

    /// Stop and reset the engine, keeping the program (the NC is handed to another model;
    /// [`Stream::rearm`] brings it back).
    pub fn halt(&self, regs: &Regs<'_>) -> Result<()> {
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ctrl().write_with(|v| v.with_reset(1))?;
        Ok(())
    }

    /// Program the engine again onto this stream's slots (after [`Stream::halt`] or an NC
    /// reset) and enable it.
    pub fn rearm(&self, regs: &Regs<'_>, infer_slot: u64, looped: bool) -> Result<()> {
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ctrl().write_with(|v| v.with_reset(1))?;
        r.ifq_base_lo().write(se::IfqBaseLo(self.mem.addr() as u32))?;
        r.ifq_base_hi().write(se::IfqBaseHi((self.mem.addr() >> 32) as u32))?;
        r.ifq_len().write_with(|v| v.with_slots(self.slots))?;
        r.nq_infer_slot().write_with(|v| v.with_slot(infer_slot as u32))?;
        r.ctrl().write_with(|v| v.with_loop_en(looped as u32))?;
        self.enable(regs, looped)
    }

    /// Stop and reset the engine.
    pub fn unload(self, regs: &Regs<'_>) -> Result<DevBuf> {
        let r = regs.seq(self.nc as u64)?.eng(self.engine as u64)?;
        r.ctrl().write_with(|v| v.with_reset(1))?;
        Ok(self.mem)
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
