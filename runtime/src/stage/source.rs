//! A staged NC as the completion engine's [`NotificationSource`]: its INFER_STATUS and error
//! rings in host memory, its NC's interrupt causes. Harvesting allocates nothing (records
//! land in the NC's preallocated scratch). Records are decoded by [`crate::records`], the
//! runtime's own positional decoders.

use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::notify::InferStatus;

use super::StagedNc;
use std::time::Instant;

use crate::completion::{FatalCauses, NotificationSource, ProxyPoll, SourceError, SIGNAL_PROBE_INTERVAL};

/// Per engine: whether the last INFER_STATUS read found the ring empty after its last record
/// ([`StagedNc::seen_empty`]), so the drain that follows it need not read the ring again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeenEmpty(u8);

impl SeenEmpty {
    /// Engine `engine`'s bit (none beyond bit 7: such an engine's drain always reads).
    fn bit(engine: usize) -> u8 {
        1u8.checked_shl(engine as u32).unwrap_or(0)
    }
    /// A read of `engine`'s ring returned `n` records of the `max` asked for: fewer means it
    /// stopped at an empty slot.
    pub fn polled(&mut self, engine: usize, n: usize, max: usize) {
        if n < max {
            self.0 |= Self::bit(engine);
        } else {
            self.0 &= !Self::bit(engine);
        }
    }
    /// Whether a drain of `engine` can skip its read (consumes the mark: the next drain reads).
    pub fn take(&mut self, engine: usize) -> bool {
        let b = Self::bit(engine);
        if self.0 & b == 0 {
            return false;
        }
        self.0 &= !b;
        true
    }
}

impl NotificationSource for StagedNc {
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) -> Result<(), SourceError> {
        let regs = self.dev.regs();
        self.raw.clear();
        if let Some(r) = self.infer_rings.get_mut(engine) {
            let n = r.poll(&regs, &mut self.raw, max).map_err(|source| SourceError::InferRing { engine, source })?;
            self.seen_empty.polled(engine, n, max);
        }
        out.extend(self.raw.iter().map(crate::records::infer_status));
        Ok(())
    }
    fn drain_infer(&mut self, engine: usize) -> Result<(), SourceError> {
        // The completion engine drains an engine right after the read that completed it: when
        // that read already found the ring empty, the drain would read the same empty slot
        // again (a record landing in between is as late for it as one landing just after).
        if self.seen_empty.take(engine) {
            return Ok(());
        }
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
    /// The collectives barrier task of this NC (`nc_barrier.status`, docs/faults.md): done,
    /// failed, or outstanding (pending) while a rank of its group has not arrived — failed as
    /// well once the collectives hardware latched an error (NC INTC `cc_error`, read only while
    /// the task is not done). An NC without a barrier (no collectives, or a group of one) is
    /// done without any MMIO access, as libnrt only polls NCs with a collectives context. An
    /// unreadable register is pending: the wait warns and goes on, never fatal.
    fn barrier_proxy(&mut self) -> ProxyPoll {
        if self.barrier.is_none() {
            return ProxyPoll::Done;
        }
        match self.dev.barrier_status(self.nc) {
            Ok(s) if s.state == hal::BarrierState::Done => ProxyPoll::Done,
            Ok(s) if s.state == hal::BarrierState::Failed => ProxyPoll::Failed,
            Ok(_) => match self.dev.fatal_causes(self.nc) {
                Ok(c) if c.contains(FatalCauses::CC_ERROR) => ProxyPoll::Failed,
                _ => ProxyPoll::Pending,
            },
            Err(_) => ProxyPoll::Pending,
        }
    }
    /// The network proxy of this NC's collectives: failed once the device latched
    /// `net_proxy_fail` (the proxy stopped answering), else still serving the execution's
    /// collectives (pending: it is polled on every sweep, libnrt's WAIT_CORE; pending never
    /// holds completion back). The status register is read at most every
    /// [`SIGNAL_PROBE_INTERVAL`]; in between the poll is pending without an MMIO access. An
    /// unreadable register is "no answer" as well: the core timeout still applies.
    fn network_proxy(&mut self) -> ProxyPoll {
        self.network_proxy_at(platform::clock::coarse_now())
    }
    /// As [`NotificationSource::network_proxy`], with the sweep's clock.
    fn network_proxy_at(&mut self, now: Instant) -> ProxyPoll {
        if self.net_probed.is_some_and(|t| now.saturating_duration_since(t) < SIGNAL_PROBE_INTERVAL) {
            return ProxyPoll::Pending;
        }
        self.net_probed = Some(now);
        match self.dev.fatal_causes(self.nc) {
            Ok(c) if c.contains(FatalCauses::NET_PROXY) => ProxyPoll::Failed,
            _ => ProxyPoll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SeenEmpty;

    #[test]
    fn a_drain_skips_its_read_only_after_a_read_that_stopped_short() {
        let mut s = SeenEmpty::default();
        assert!(!s.take(0), "nothing read yet: the drain reads");
        // A full batch (as many records as asked for) may have left records behind.
        s.polled(0, 16, 16);
        assert!(!s.take(0), "after a full batch the drain reads");
        s.polled(0, 2, 16);
        assert!(s.take(0), "the read stopped at an empty slot: no second read");
        assert!(!s.take(0), "the mark is consumed: the next drain reads");
        // A short read then a full one: the later read decides.
        s.polled(3, 0, 16);
        s.polled(3, 16, 16);
        assert!(!s.take(3));
        // Engines are independent; an engine beyond the mark's width always reads.
        s.polled(1, 1, 16);
        s.polled(9, 1, 16);
        assert!(!s.take(2) && !s.take(9));
        assert!(s.take(1));
    }
}
