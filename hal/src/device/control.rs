//! NC control: the fatal causes latched in an NC's interrupt controller, its collectives
//! barrier task, and its ownership region table.

use super::Device;
use crate::error::{HalError, Result};
use crate::regions::{self, Region, RegionFault};

/// State of an NC's collectives barrier task ([`Device::barrier_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierState {
    /// Never armed since the last reset.
    Idle,
    /// Some rank of the group has not arrived yet.
    Outstanding,
    /// Every rank arrived.
    Done,
    /// The barrier failed (the group disagreed, the transport to other ranks failed, or an
    /// injected fault).
    Failed,
}

/// An NC's collectives barrier task: its state and generation (arrivals so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierStatus {
    pub state: BarrierState,
    pub generation: u32,
}

bitflags::bitflags! {
    /// Fatal hardware causes latched in an NC's error-trigger block (its interrupt
    /// controller's group-0 cause register). The bit values are this type's own; the
    /// register's field positions live in csr-maps.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct FatalCauses: u8 {
        const SEQ_FATAL = 1 << 0;
        const DMA_ABORT = 1 << 1;
        const DMA_FAULT = 1 << 2;
        const HBM_UE = 1 << 3;
        const HBM_UE_REPAIRABLE = 1 << 4;
        const NC_UE = 1 << 5;
        const CC_ERROR = 1 << 6;
        const NET_PROXY = 1 << 7;
    }
}

impl Device {
    /// NC `nc`'s interrupt controller, at the base resolved when the device was opened.
    pub(super) fn nc_intc(&self, nc: usize) -> Result<csr_maps::blocks::nc_intc::Block<'_>> {
        match self.inner.nc_intc.get(nc).copied().flatten() {
            Some(base) => Ok(csr_maps::blocks::nc_intc::Block::at(self.inner.bar0.as_ref(), base)),
            // Not an NC of this arch: the lookup's own error.
            None => Ok(self.regs().nc_intc(nc as u64)?),
        }
    }

    /// Fatal causes latched on NC `nc`.
    pub fn fatal_causes(&self, nc: usize) -> Result<FatalCauses> {
        let c = self.nc_intc(nc)?.g0().cause().read()?;
        let mut causes = FatalCauses::empty();
        causes.set(FatalCauses::SEQ_FATAL, c.seq_fatal() != 0);
        causes.set(FatalCauses::DMA_ABORT, c.dma_abort() != 0);
        causes.set(FatalCauses::DMA_FAULT, c.dma_fault() != 0);
        causes.set(FatalCauses::HBM_UE, c.hbm_ue() != 0);
        causes.set(FatalCauses::HBM_UE_REPAIRABLE, c.hbm_ue_repairable() != 0);
        causes.set(FatalCauses::NC_UE, c.nc_ue() != 0);
        causes.set(FatalCauses::CC_ERROR, c.cc_error() != 0);
        causes.set(FatalCauses::NET_PROXY, c.net_proxy_fail() != 0);
        Ok(causes)
    }

    /// NC `nc` arrives at the next collectives barrier of replica group `comm` as `rank` of
    /// `size` (the modeled `nc_barrier` block): its barrier task is outstanding until every
    /// rank of the group arrived (docs/faults.md). Three MMIO writes.
    pub fn barrier_arm(&self, nc: usize, comm: u32, rank: u8, size: u8) -> Result<()> {
        platform::failpoint::hit("hal.barrier.arm")?;
        use csr_maps::blocks::nc_barrier as nb;
        let b = self.regs().nc_barrier(nc as u64)?;
        b.comm().write(nb::Comm(comm))?;
        b.member().write(nb::Member(0).with_rank(rank as u32).with_size(size as u32))?;
        b.arm().write(nb::Arm(0).with_go(1))?;
        Ok(())
    }

    /// NC `nc`'s collectives barrier task (one MMIO read).
    pub fn barrier_status(&self, nc: usize) -> Result<BarrierStatus> {
        use csr_maps::consts::barrier as bc;
        let s = self.regs().nc_barrier(nc as u64)?.status().read()?;
        let state = match s.state() {
            bc::OUTSTANDING => BarrierState::Outstanding,
            bc::DONE => BarrierState::Done,
            bc::FAILED => BarrierState::Failed,
            _ => BarrierState::Idle,
        };
        Ok(BarrierStatus { state, generation: s.generation() })
    }

    /// Clear every latched cause of NC `nc`. The causes are write-0-to-clear like every
    /// IOFIC group (the Annapurna Labs HAL's `al_iofic_clear_cause` writes the complement of
    /// the bits it clears); the block's placement is modeled, so on real hardware this needs
    /// the operator's opt-in.
    pub fn clear_causes(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.causes.clear")?;
        let i = self.regs().nc_intc(nc as u64)?;
        i.g0().cause().clear_all()?;
        i.g1().cause().clear_all()?;
        Ok(())
    }

    /// Program NC `nc`'s ownership region table with `regions` (coalesced: overlapping or
    /// abutting ranges of one permission take one entry) and enable it. Only entries that
    /// changed since the last programming are written. The NC must be idle.
    /// [`HalError::RegionTableFull`] when more entries are needed than the table holds
    /// (nothing is programmed then: the table is left as it was). Returns the entries used.
    pub fn set_regions(&self, nc: usize, regions: &[Region]) -> Result<usize> {
        platform::failpoint::hit("hal.regions.program")?;
        self.check_nc(nc)?;
        let mut all = platform::sync::lock(&self.inner.regions);
        let shadow = all.get_mut(nc).ok_or(HalError::NoSuchNc { nc, count: self.nc_count() })?;
        regions::program(&self.regs(), nc, regions, shadow)
    }

    /// Disable NC `nc`'s ownership region table (nothing is checked) and clear its entries.
    pub fn clear_regions(&self, nc: usize) -> Result<()> {
        platform::failpoint::hit("hal.regions.clear")?;
        self.check_nc(nc)?;
        let mut all = platform::sync::lock(&self.inner.regions);
        let shadow = all.get_mut(nc).ok_or(HalError::NoSuchNc { nc, count: self.nc_count() })?;
        regions::disable(&self.regs(), nc, shadow)
    }

    /// The first access NC `nc`'s region table refused since the last clear, if any.
    pub fn region_fault(&self, nc: usize) -> Result<Option<RegionFault>> {
        self.check_nc(nc)?;
        regions::fault(&self.regs(), nc)
    }

    /// Clear NC `nc`'s latched region-table report.
    pub fn clear_region_fault(&self, nc: usize) -> Result<()> {
        self.check_nc(nc)?;
        regions::clear_fault(&self.regs(), nc)
    }

    /// The table's registers were reset with the NC: forget what they held.
    pub(super) fn forget_regions(&self, nc: Option<usize>) {
        let mut all = platform::sync::lock(&self.inner.regions);
        for (i, s) in all.iter_mut().enumerate() {
            if nc.is_none_or(|n| n == i) {
                s.clear();
            }
        }
    }
}
