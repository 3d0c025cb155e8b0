//! Notifications: host notification rings on NOTIFIC slots, the slots the engines report
//! to, NQ overflow, and an NC's interrupt.

use platform::Irq;

use super::Device;
use crate::error::Result;
use crate::nq::NqOwner;
use crate::nq_ring::NqRing;

impl Device {
    /// A host notification ring of `records` entries on NOTIFIC slot `slot` of `owner`.
    pub fn nq_ring(&self, owner: NqOwner, slot: u64, records: u64) -> Result<NqRing> {
        if let NqOwner::Nc(nc) = owner {
            self.check_nc(nc)?;
        }
        NqRing::new(&self.inner.park, &self.inner.pool, owner, slot, records)
    }

    /// NOTIFIC slot of TPB engine `engine`'s INFER_STATUS ring.
    pub fn infer_slot(&self, engine: usize) -> u64 {
        self.arch().consts.nq_slot_infer_status + engine as u64
    }

    /// NOTIFIC slot of the TPB error ring.
    pub fn error_slot(&self) -> u64 {
        self.arch().consts.nq_slot_error
    }

    /// INTC line 61 (group 1 bit 29): software NQ overflow on NC `nc`.
    pub fn nq_overflow(&self, nc: usize) -> Result<bool> {
        Ok(self.nc_intc(nc)?.g1().cause().read()?.sw_nq_overflow() != 0)
    }

    /// The interrupt of NC `nc` (vector = NC index), if the platform delivers one.
    pub fn irq(&self, nc: usize) -> Result<Option<Irq>> {
        self.check_nc(nc)?;
        Ok(self.inner.platform.irq_eventfd(nc as u32)?.map(|fd| Irq::new(fd, nc as u32)))
    }
}
