//! The runtime's typed errors and their one mapping to `NRT_STATUS`.
//!
//! - [`RtError`]: an API failure — the status libnrt returns and an [`RtErrorKind`].
//! - [`StageError`]: a failure staging one graph on one NeuronCore — a status and a
//!   [`StageErrorKind`]; a failed load wraps it as [`RtErrorKind::Stage`].
//! - [`hal_status`]: the status of a driver failure, used by both (and by nothing else), so a
//!   [`hal::HalError`] maps to the same status whichever path surfaced it.
//!
//! The `Display` of each error is its message; `RtError`'s is `"<STATUS NAME>: <message>"`.

use crate::state::StateError;
use crate::status::NrtStatus;

/// The status of a driver failure: device memory exhausted → NRT_RESOURCE, host DMA memory
/// → NRT_FAIL_HOST_MEM_ALLOC, anything else → NRT_FAILURE.
pub fn hal_status(e: &hal::HalError) -> NrtStatus {
    match e {
        hal::HalError::OutOfDeviceMemory { .. } | hal::HalError::TooLarge { .. } => NrtStatus::Resource,
        hal::HalError::HostMem(_) => NrtStatus::FailHostMemAlloc,
        _ => NrtStatus::Failure,
    }
}

/// What went wrong in an API call.
#[derive(Debug, thiserror::Error)]
pub enum RtErrorKind {
    /// The NEFF was refused (header gates, digest, content).
    #[error("{0}")]
    InvalidNeff(String),
    /// A caller argument was refused (unknown NC, unbound input, size mismatch, range).
    #[error("{0}")]
    InvalidArgument(String),
    /// Not enough NeuronCores, queue capacity or other resources.
    #[error("{0}")]
    Resource(String),
    /// The device layer failed.
    #[error("{0}")]
    Device(#[from] hal::HalError),
    /// The runtime or model lifecycle refused the call.
    #[error("{0}")]
    State(#[from] StateError),
    /// A collective that can never complete (NRT_INVALID at load).
    #[error("{0}")]
    Collective(Box<crate::collectives::CollectiveError>),
    /// Staging graph `graph` failed.
    #[error("graph {graph}: {source}")]
    Stage {
        graph: String,
        #[source]
        source: StageError,
    },
    /// The model handle no longer refers to a loaded model.
    #[error("{0}")]
    Handle(String),
    /// Runtime-internal failure (configuration, worker start-up).
    #[error("{0}")]
    Internal(String),
    /// A status passed through with a message (the C API's own checks).
    #[error("{0}")]
    Other(String),
}

/// An API failure: the status libnrt returns and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {kind}", status = status.name())]
pub struct RtError {
    pub status: NrtStatus,
    pub kind: RtErrorKind,
}

impl RtError {
    /// An error of status `status` with a message (kind [`RtErrorKind::Other`]).
    pub fn new(status: NrtStatus, message: impl Into<String>) -> Self {
        Self { status, kind: RtErrorKind::Other(message.into()) }
    }
    /// An error of a given kind and status.
    pub fn with(status: NrtStatus, kind: RtErrorKind) -> Self {
        Self { status, kind }
    }
    /// NRT_INVALID: a caller argument was refused.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::with(NrtStatus::Invalid, RtErrorKind::InvalidArgument(message.into()))
    }
    /// NRT_FAILURE: a runtime-internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::with(NrtStatus::Failure, RtErrorKind::Internal(message.into()))
    }
    /// The message (the error without its status).
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl From<StateError> for RtError {
    fn from(e: StateError) -> Self {
        Self::with(e.status(), RtErrorKind::State(e))
    }
}

impl From<hal::HalError> for RtError {
    fn from(e: hal::HalError) -> Self {
        Self::with(hal_status(&e), RtErrorKind::Device(e))
    }
}

impl From<Box<crate::collectives::CollectiveError>> for RtError {
    fn from(e: Box<crate::collectives::CollectiveError>) -> Self {
        Self::with(NrtStatus::Invalid, RtErrorKind::Collective(e))
    }
}

impl From<neff::NeffError> for RtError {
    fn from(e: neff::NeffError) -> Self {
        Self::with(e.status(), RtErrorKind::InvalidNeff(e.to_string()))
    }
}

/// What went wrong staging a graph.
#[derive(Debug, thiserror::Error)]
pub enum StageErrorKind {
    /// The graph's content cannot be staged (bad var, queue, access pattern, instruction).
    #[error("{0}")]
    InvalidNeff(String),
    /// The NC lacks room for the graph (state buffer, DMA engines, descriptors, ucode cores).
    #[error("{0}")]
    Resource(String),
    /// The device layer failed.
    #[error("{0}")]
    Device(#[from] hal::HalError),
    /// A Q7 ucode step failed (`what` names the library or core).
    #[error("{what}: {source}")]
    Ucode {
        what: String,
        #[source]
        source: hal::q7::UcodeError,
    },
}

/// A load failure with the status libnrt returns for it.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct StageError {
    pub status: NrtStatus,
    pub kind: StageErrorKind,
}

impl StageError {
    /// NRT_INVALID: the graph cannot be staged as written.
    pub fn invalid(m: impl Into<String>) -> Self {
        Self { status: NrtStatus::Invalid, kind: StageErrorKind::InvalidNeff(m.into()) }
    }
    /// NRT_RESOURCE: the NC lacks room for the graph.
    pub fn resource(m: impl Into<String>) -> Self {
        Self { status: NrtStatus::Resource, kind: StageErrorKind::Resource(m.into()) }
    }
    /// A ucode failure with the status the caller chose.
    pub fn ucode(status: NrtStatus, what: impl Into<String>, source: hal::q7::UcodeError) -> Self {
        Self { status, kind: StageErrorKind::Ucode { what: what.into(), source } }
    }
    /// The message.
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl From<hal::HalError> for StageError {
    fn from(e: hal::HalError) -> Self {
        Self { status: hal_status(&e), kind: StageErrorKind::Device(e) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mapping_for_driver_failures() {
        let cases = [
            (hal::HalError::OutOfDeviceMemory { chan: 0, size: 1, free: 0 }, NrtStatus::Resource),
            (hal::HalError::NoSuchEngine(9), NrtStatus::Failure),
            (hal::HalError::ProgramSize(3), NrtStatus::Failure),
        ];
        for (e, want) in cases {
            let msg = e.to_string();
            assert_eq!(hal_status(&e), want);
            let s = StageError::from(e);
            assert_eq!(s.status, want);
            assert_eq!(s.to_string(), msg);
            let r = RtError::with(s.status, RtErrorKind::Stage { graph: "g".into(), source: s });
            assert_eq!(r.status, want);
            assert_eq!(r.message(), format!("graph g: {msg}"));
        }
        let r = RtError::from(hal::HalError::OutOfDeviceMemory { chan: 1, size: 8, free: 4 });
        assert_eq!(r.status, NrtStatus::Resource);
        assert!(matches!(r.kind, RtErrorKind::Device(_)));
        assert_eq!(r.to_string(), "NRT_RESOURCE: device memory exhausted on HBM channel 1: 8 bytes requested, 4 free");
    }

    #[test]
    fn state_errors_keep_their_status_and_message() {
        let r = RtError::from(StateError::Closed);
        assert_eq!(r.status, NrtStatus::Closed);
        assert_eq!(r.message(), "runtime closed");
        assert!(matches!(r.kind, RtErrorKind::State(StateError::Closed)));
    }
}
