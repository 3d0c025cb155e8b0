//! Multi-host collectives for neuron-vfio over libfabric.
//!
//! The crate knows no device: it moves and reduces host bytes between ranks that live in
//! separate processes or on separate hosts.
//!
//! - [`bootstrap`]: libnrt-style bootstrap — the root address from `NEURON_RT_ROOT_COMM_ID`
//!   (`host:port`), rank and size from the caller or the launcher's environment, and a TCP
//!   rendezvous at the root (rank 0) that exchanges the transport's endpoint names.
//! - [`Transport`]: tagged point-to-point messages between ranks; [`ofi::OfiTransport`]
//!   implements it on a libfabric RDM endpoint (provider from `FI_PROVIDER`, default `tcp`).
//!   libfabric is opened at run time ([`ofi::dl`]): building needs no libfabric, and only a
//!   multi-process communicator needs the library where it runs.
//! - [`coll`]: ring reduce-scatter / all-gather / all-reduce, chunked and pipelined, and a
//!   one-round direct exchange for small messages, generic over any [`Transport`]; one round
//!   of point-to-point messages among the ranks ([`Communicator::exchange`]).
//! - [`mem`]: an in-process [`Transport`] (threads and channels) for the tests of the layers
//!   above.
//! - [`reduce`]: ADD/MAX/MIN over fp32/bf16/fp16/int32 and the host reference with the
//!   documented reduction order (see `docs/fabric.md`): the workspace's one reduction crate,
//!   re-exported (the simulator's collective hub uses the same one).
//!
//! Failures of a peer or a link surface as [`FabricError`] within the configured timeout;
//! [`FabricError::status_code`] maps them onto NRT status codes.

pub mod bootstrap;
pub mod coll;
pub mod mem;
mod transport;

pub use reduce;

pub mod ofi;

pub use coll::Communicator;
pub use reduce::{DType, ReduceOp};
pub use transport::{RecvOp, SendOp, Subgroup, Transport};

use std::time::Duration;

use nrt_status::{NrtStatus, Status};

/// NRT_EXEC_HW_ERR_COLLECTIVES (public `nrt.h`): the collective engine itself failed.
pub const NRT_EXEC_HW_ERR_COLLECTIVES: i32 = 1200;
/// NRT_NETWORK_PROXY_FAILURE (public `nrt.h`): the network path to a peer failed.
pub const NRT_NETWORK_PROXY_FAILURE: i32 = 1206;
/// NRT_INVALID (public `nrt.h`).
pub const NRT_INVALID: i32 = 2;

/// The transport timeout that goes with an execution timeout (`NEURON_RT_EXEC_TIMEOUT`, whole
/// seconds; 0 counts as 1): three quarters of it, so that a peer that stops answering fails
/// the collective with NRT_NETWORK_PROXY_FAILURE before the execution's own timeout would
/// report a plain NRT_TIMEOUT. libnrt's global communicator and `bench collectives` both use it.
pub fn transport_timeout(exec_timeout_secs: u32) -> Duration {
    Duration::from_millis(u64::from(exec_timeout_secs.max(1)) * 750)
}

/// Errors of the fabric: bootstrap, transport and collectives.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// Bad argument or configuration (rank out of range, malformed root address, size mismatch).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The bootstrap rendezvous failed (root unreachable, a rank missing, protocol mismatch).
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A peer did not answer within the timeout (dead peer or dropped link).
    #[error("rank {rank}: no progress with peer(s) {peers:?} for {timeout:?}")]
    Timeout { rank: usize, peers: Vec<usize>, timeout: Duration },
    /// The transport reported a failed transfer with a peer (connection reset, unreachable).
    #[error("rank {rank}: transfer with peer {peer} failed: {msg}")]
    Peer { rank: usize, peer: usize, msg: String },
    /// A peer's message was not the length the receiver expected (the peers disagree on a
    /// collective's sizes, or the peer is not a rank of this job's kind).
    #[error("rank {rank}: a message of {got} bytes from peer {peer}, {expected} expected")]
    Size { rank: usize, peer: usize, expected: usize, got: usize },
    /// A libfabric call failed locally (`call` returned `code`).
    #[error("libfabric {call}: {msg} ({code})")]
    Ofi { call: &'static str, code: i32, msg: String },
    /// An earlier failure broke this communicator; it must be rebuilt.
    #[error("communicator broken by an earlier failure: {0}")]
    Broken(String),
    /// No usable libfabric on this machine (the message names what was tried and what to
    /// install).
    #[error("{0}")]
    Unavailable(String),
    /// Socket I/O of the bootstrap or the baseline copy.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// A reduction of malformed operands (lengths that differ or are not whole elements) is a bad
/// argument.
impl From<reduce::ReduceError> for FabricError {
    fn from(e: reduce::ReduceError) -> Self {
        FabricError::Invalid(e.to_string())
    }
}

impl FabricError {
    /// The NRT status this failure maps to (the one mapping every front end uses): a peer or
    /// the network path failing (timeout, reset, unreachable root, broken communicator, a
    /// message of the wrong length) is NRT_NETWORK_PROXY_FAILURE (1206); a local failure of
    /// the transport engine is NRT_EXEC_HW_ERR_COLLECTIVES (1200); bad arguments are
    /// NRT_INVALID (2); no libfabric on the machine is NRT_FAILURE (1).
    pub fn status(&self) -> NrtStatus {
        match self {
            FabricError::Invalid(_) => NrtStatus::Invalid,
            FabricError::Unavailable(_) => NrtStatus::Failure,
            FabricError::Ofi { .. } => NrtStatus::ExecHwErrCollectives,
            FabricError::Bootstrap(_)
            | FabricError::Timeout { .. }
            | FabricError::Peer { .. }
            | FabricError::Size { .. }
            | FabricError::Broken(_)
            | FabricError::Io { .. } => NrtStatus::NetworkProxyFailure,
        }
    }

    /// The numeric code of [`Self::status`].
    pub fn status_code(&self) -> i32 {
        self.status().code() as i32
    }

    /// The NRT status name of [`Self::status`].
    pub fn status_name(&self) -> &'static str {
        self.status().name()
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        FabricError::Io { what: what.into(), source }
    }
}

impl Status for FabricError {
    fn status(&self) -> NrtStatus {
        FabricError::status(self)
    }
}
