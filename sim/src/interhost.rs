//! The seam between the simulator's collective hub and a transport to other processes or
//! hosts.
//!
//! The hub meets the participants of a collective that live in this process (the device
//! path). When a replica group spans processes, the embedder (libnrt's C API or the CLI, which
//! link both the simulator and the `fabric` crate) installs an [`InterHost`] on the devices
//! ([`crate::SimDevice::set_inter_host`]) and tells it which communicators span processes. The
//! hub then waits for its local participants only, hands their parts to
//! [`InterHost::collective`] from a worker thread (never under the hub's lock) and delivers the
//! results; a failure becomes the network-proxy fault of every local participant (INTC
//! `net_proxy_fail`, which the runtime reports as NRT_NETWORK_PROXY_FAILURE, 1206).
//!
//! The simulator does not depend on any transport: this trait is all it knows.

/// Collective kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollKind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

/// One collective handed across the seam: the parts of the group ranks hosted by this
/// process, all of the same length.
#[derive(Debug)]
pub struct InterHostRequest {
    /// Communicator id of the staged collective (the same in every process of the group).
    pub comm: u32,
    /// Sequence number of the collective on this communicator.
    pub seq: u32,
    /// Group size.
    pub size: usize,
    pub kind: CollKind,
    /// Element type and operator: the `reduce` crate's, shared with the transport.
    pub elem: reduce::DType,
    pub op: reduce::ReduceOp,
    /// `(group rank, input bytes)` of the local participants, in group-rank order.
    pub parts: Vec<(usize, Vec<u8>)>,
}

/// A transfer across the seam failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterHostError {
    /// A peer or the network path failed (dead peer, dropped link, timeout): the execution
    /// fails with the network-proxy status.
    #[error("network proxy: {0}")]
    Network(String),
    /// The collective itself is malformed or the local engine failed: the execution fails with
    /// the collectives status.
    #[error("collective: {0}")]
    Collective(String),
}

/// A transport to the group ranks hosted by other processes.
pub trait InterHost: Send + Sync {
    /// The group ranks of communicator `comm` hosted by this process when the group spans
    /// processes (`None`: the group is local and the hub handles it alone).
    fn local_ranks(&self, comm: u32) -> Option<Vec<usize>>;

    /// Runs the collective with the other processes of the group and returns the output of each
    /// local part, in the order of `req.parts`. Called from a worker thread; may block up to the
    /// transport's timeout.
    fn collective(&self, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError>;

    /// The barrier number `seq` of communicator `comm` (a group of `size` ranks), met here by
    /// the group ranks `local`: returns once every rank of the group in every process has
    /// arrived. Called from a worker thread; a rank that never arrives keeps it blocked until
    /// the transport gives up on the peer ([`InterHostError::Network`]).
    fn barrier(&self, comm: u32, seq: u32, size: usize, local: &[usize]) -> Result<(), InterHostError>;
}
