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
    /// Send/receive, permute, all-to-all and all-to-allv: point-to-point moves of byte ranges
    /// between group ranks, described per local rank by [`ExchangePart`]s (nothing reduces).
    Exchange,
}

/// A byte range of one rank's buffer (its input for a send, its output for a receive) and
/// the group rank at the other end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub peer: usize,
    /// Offset of the range in the buffer (bytes).
    pub at: usize,
    pub len: usize,
}

/// What a rank of an exchange receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receive {
    /// From each listed group rank, `len` bytes written at `at` of the output; the sender
    /// sends exactly as many.
    From(Vec<Piece>),
    /// Send/receive and permute: whatever the one group rank whose send targets this rank
    /// sends (the receiver does not name its source; the sender's length must be the
    /// output's), at offset 0; zeros when no rank sends to it. Two senders are malformed.
    FromItsSender,
}

/// The point-to-point plan and data of one local group rank of an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangePart {
    /// Group rank.
    pub rank: usize,
    pub input: Vec<u8>,
    /// What it sends to which group rank: ranges of `input`, at most one per peer.
    pub sends: Vec<Piece>,
    pub recv: Receive,
    /// Its output's length (bytes); where nothing lands it is zero.
    pub out_len: usize,
}

/// One collective handed across the seam: the parts of the group ranks hosted by this
/// process, all of the same length (reductions and all-gather: `parts`), or the point-to-point
/// plans of the local ranks (exchanges: `exchange`, with `parts` empty).
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
    /// [`CollKind::Exchange`]: the local participants' plans, in group-rank order (empty for
    /// the other kinds).
    pub exchange: Vec<ExchangePart>,
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
    /// local part, in the order of `req.parts` (of `req.exchange` for an exchange). Called from a worker thread; may block up to the
    /// transport's timeout.
    fn collective(&self, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError>;

    /// The barrier number `seq` of communicator `comm` (a group of `size` ranks), met here by
    /// the group ranks `local`: returns once every rank of the group in every process has
    /// arrived. Called from a worker thread; a rank that never arrives keeps it blocked until
    /// the transport gives up on the peer ([`InterHostError::Network`]).
    fn barrier(&self, comm: u32, seq: u32, size: usize, local: &[usize]) -> Result<(), InterHostError>;
}
