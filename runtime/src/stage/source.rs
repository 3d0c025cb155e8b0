//! A staged NC as the completion engine's [`NotificationSource`]: its INFER_STATUS and error
//! rings in host memory, its NC's interrupt causes. Harvesting allocates nothing (records
//! land in the NC's preallocated scratch). Records are decoded by [`crate::records`], the
//! runtime's own positional decoders.

use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::notify::InferStatus;

use super::StagedNc;
use crate::completion::{FatalCauses, NotificationSource, ProxyPoll, SourceError};

impl NotificationSource for StagedNc {
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) -> Result<(), SourceError> {
        let regs = self.dev.regs();
        self.raw.clear();
        if let Some(r) = self.infer_rings.get_mut(engine) {
            r.poll(&regs, &mut self.raw, max).map_err(|source| SourceError::InferRing { engine, source })?;
        }
        out.extend(self.raw.iter().map(crate::records::infer_status));
        Ok(())
    }
    fn drain_infer(&mut self, engine: usize) -> Result<(), SourceError> {
        let regs = self.dev.regs();
        self.raw.clear();
        if let Some(r) = self.infer_rings.get_mut(engine) {
            let cap = self.raw.capacity();
            r.poll(&regs, &mut self.raw, cap).map_err(|source| SourceError::InferRing { engine, source })?;
        }
        Ok(())
    }
    fn poll_errors(&mut self, out: &mut Vec<TpbErrorRecord>, max: usize) -> Result<(), SourceError> {
        let regs = self.dev.regs();
        self.raw.clear();
        self.err_ring.poll(&regs, &mut self.raw, max).map_err(|source| SourceError::ErrorRing { source })?;
        out.extend(self.raw.iter().map(crate::records::error_record));
        Ok(())
    }
    fn nq_overflow(&mut self) -> bool {
        self.dev.nq_overflow(self.nc).unwrap_or(false)
    }
    fn fatal_causes(&mut self) -> FatalCauses {
        self.dev.fatal_causes(self.nc).unwrap_or_default()
    }
    fn barrier_proxy(&mut self) -> ProxyPoll {
        ProxyPoll::Done
    }
    fn network_proxy(&mut self) -> ProxyPoll {
        ProxyPoll::Done
    }
}
