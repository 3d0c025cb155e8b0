//! Firmware: FW-IO requests, and NC and device resets (which bring the DMA engines,
//! notification slots and host-transfer rings back).

use super::Device;
use crate::error::Result;
use crate::fwio::{self, ResetKind};
use crate::{nq, udma};

impl Device {
    /// A FW-IO request (new protocol); on a shared device through its owner
    /// ([`crate::device::FirmwareGate`]).
    pub fn fwio(&self, cmd: u8, payload: &[u8]) -> Result<Vec<u8>> {
        if let Some(g) = &self.inner.opts.firmware_gate {
            return g.request(cmd, payload);
        }
        let mut s = platform::sync::lock(&self.inner.fw_seq);
        fwio::request(self.arch(), &self.regs(), &mut s, cmd, payload, &self.inner.opts.poll)
    }

    /// Reset the NCs of `mask` through the firmware mailbox and wait for the firmware — the
    /// firmware part of [`Device::reset_nc`] only, serialized with every other use of the
    /// mailbox by this handle. What a device's owner (the broker) runs for a process sharing
    /// the device; refused for NCs that are not this handle's.
    pub fn firmware_reset_ncs(&self, mask: u32) -> Result<()> {
        for nc in (0..32).filter(|n| mask & (1u32 << n) != 0) {
            self.check_owned(nc)?;
        }
        self.mailbox_reset(ResetKind::Ncs(mask))
    }

    /// A reset through the mailbox, holding the mailbox (its sequence lock) throughout; on a
    /// shared device NC resets go to the owner.
    fn mailbox_reset(&self, kind: ResetKind) -> Result<()> {
        if let (Some(g), ResetKind::Ncs(mask)) = (&self.inner.opts.firmware_gate, kind) {
            return g.reset_ncs(mask);
        }
        let _mailbox = platform::sync::lock(&self.inner.fw_seq);
        fwio::reset(self.arch(), &self.regs(), kind, &self.inner.opts.poll)
    }

    /// Reset NeuronCore `nc` through the firmware and bring its DMA engines back up; the
    /// NC's notification queues and host-transfer ring are re-initialised.
    pub fn reset_nc(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.reset_nc")?;
        self.check_owned(nc)?;
        let regs = self.regs();
        nq::halt_all(&regs, nc, self.arch().counts.nq_slots)?;
        self.mailbox_reset(ResetKind::Ncs(1 << nc))?;
        self.forget_regions(Some(nc));
        let per = self.arch().counts.dma_engines_per_nc;
        for e in nc as u64 * per..(nc as u64 + 1) * per {
            udma::init_engine(self.arch(), &regs, e)?;
        }
        self.reprogram_h2t()
    }

    /// Reset the whole device and re-initialise it. Refused on a shared device (it would
    /// reset other processes' NCs; the broker owns device-level reset).
    pub fn reset_device(&self) -> Result<()> {
        if let Some(owned) = self.owned_ncs() {
            return Err(crate::HalError::NotOwned { what: "the whole device".into(), owned });
        }
        self.mailbox_reset(ResetKind::Device)?;
        self.forget_regions(None);
        self.init()?;
        self.reprogram_h2t()
    }
}

impl Device {
    /// Allocate what [`Device::reclaim_nc`] parks queues on (the dummy ring) now, so that a
    /// reclaim allocates nothing and the memory mapped for the device stays constant.
    pub fn prepare_reclaim(&self) -> Result<()> {
        self.parking().ensure_dummy(&self.inner.pool)
    }

    /// Take NeuronCore `nc` back from a process that drove it and went away (the broker's
    /// cleanup, as the kmod's `ncdev_flush` on a process's exit): stop its sequencer engines,
    /// park every queue of its DMA engines on this device's dummy ring
    /// (`ndmar_handle_process_exit`), halt its notification slots, then reset it through the
    /// firmware and bring its engines up again. Touches nothing of the other NCs.
    pub fn reclaim_nc(&self, nc: usize) -> Result<()> {
        self.check_owned(nc)?;
        let regs = self.regs();
        for e in 0..csr_maps::Engine::COUNT {
            crate::seq::reset_engine(&regs, nc, e)?;
        }
        let park = self.parking();
        park.ensure_dummy(&self.inner.pool)?;
        let per = self.arch().counts.dma_engines_per_nc;
        for e in nc as u64 * per..(nc as u64 + 1) * per {
            for q in 0..csr_maps::consts::udma::QUEUES {
                park.park_udma(e, q)?;
            }
        }
        nq::halt_all(&regs, nc, self.arch().counts.nq_slots)?;
        self.reset_nc(nc)
    }
}
