//! Firmware: FW-IO requests, and NC and device resets (which bring the DMA engines,
//! notification slots and host-transfer rings back).

use super::Device;
use crate::error::Result;
use crate::fwio::{self, ResetKind};
use crate::{nq, udma};

impl Device {
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
}
