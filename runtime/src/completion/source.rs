//! Where the engine reads a device: the [`NotificationSource`] of one NC, and the
//! [`SourceError`] a failed read ends an execution with.

use super::*;

/// A notification source could not read the device (an MMIO or host-memory failure while
/// harvesting a ring). The completion engine ends the execution with [`SourceError::status`]
/// instead of waiting for a timeout.
#[derive(Debug, Error)]
pub enum SourceError {
    /// Reading TPB engine `engine`'s INFER_STATUS ring failed.
    #[error("INFER_STATUS ring of engine {engine}: {source}")]
    InferRing {
        engine: usize,
        #[source]
        source: hal::HalError,
    },
    /// Reading the TPB error ring failed.
    #[error("error ring: {source}")]
    ErrorRing {
        #[source]
        source: hal::HalError,
    },
}

impl SourceError {
    /// The device failure behind the error.
    pub fn hal(&self) -> &hal::HalError {
        match self {
            SourceError::InferRing { source, .. } | SourceError::ErrorRing { source } => source,
        }
    }
    /// The status the execution ends with: the device failure's own
    /// ([`hal::HalError::status`]; NRT_EXEC_HW_ERR_DMA_ABORT for an aborted DMA engine).
    pub fn status(&self) -> NrtStatus {
        self.hal().status()
    }
}

/// What the device layer provides per NC.
pub trait NotificationSource {
    /// Append up to `max` new INFER_STATUS records of TPB engine `engine`, oldest first.
    /// Must not allocate in steady state (`out` is reused and has capacity `max`). Records are
    /// consumed from the ring by this call; every record appended is processed. A device
    /// failure is an `Err` (the records appended by the failed call are not processed).
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) -> Result<(), SourceError>;
    /// The engine completed: flush whatever remains in its INFER_STATUS ring (`notification_drain`).
    fn drain_infer(&mut self, engine: usize) -> Result<(), SourceError>;
    /// Append up to `max` new records of the NC's TPB error ring.
    fn poll_errors(&mut self, out: &mut Vec<TpbErrorRecord>, max: usize) -> Result<(), SourceError>;
    /// INTC cause bit 29 (software NQ overflow). Probed on timeout / out-of-order records, and
    /// in flight at most every [`SIGNAL_PROBE_INTERVAL`].
    fn nq_overflow(&mut self) -> bool;
    /// Fatal hardware causes latched since the last clear. Read once per NC at FINALIZE.
    fn fatal_causes(&mut self) -> FatalCauses;
    /// Collectives barrier-proxy status.
    fn barrier_proxy(&mut self) -> ProxyPoll;
    /// Collectives network-proxy status.
    fn network_proxy(&mut self) -> ProxyPoll;
    /// [`NotificationSource::network_proxy`] polled by a sweep at `now` (the step's clock): a
    /// source that rate-limits its register reads uses it instead of reading the clock again.
    fn network_proxy_at(&mut self, now: Instant) -> ProxyPoll {
        let _ = now;
        self.network_proxy()
    }
}
