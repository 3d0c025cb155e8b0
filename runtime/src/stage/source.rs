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
    /// The collectives barrier proxy of this NC, as its collective engine reports it: failed
    /// once the collectives hardware latched an error (NC INTC `cc_error`), done otherwise
    /// (the simulator's collective engine has no barrier task outstanding between executions).
    fn barrier_proxy(&mut self) -> ProxyPoll {
        match self.dev.fatal_causes(self.nc) {
            Ok(c) if c.contains(FatalCauses::CC_ERROR) => ProxyPoll::Failed,
            Ok(_) => ProxyPoll::Done,
            Err(_) => ProxyPoll::Pending,
        }
    }
    /// The network proxy of this NC: failed once the device latched `net_proxy_fail`, done
    /// otherwise. An unreadable register is "no answer" (pending): the completion engine keeps
    /// polling and the core timeout still applies.
    fn network_proxy(&mut self) -> ProxyPoll {
        match self.dev.fatal_causes(self.nc) {
            Ok(c) if c.contains(FatalCauses::NET_PROXY) => ProxyPoll::Failed,
            Ok(_) => ProxyPoll::Done,
            Err(_) => ProxyPoll::Pending,
        }
    }
}
