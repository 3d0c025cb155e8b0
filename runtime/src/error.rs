//! The runtime's typed errors and their one mapping to `NRT_STATUS`.
//!
//! - [`RtError`]: an API failure — the status libnrt returns and an [`RtErrorKind`].
//! - [`StageError`]: a failure staging one graph on one NeuronCore — a status and a
//!   [`StageErrorKind`]; a failed load wraps it as [`RtErrorKind::Stage`].
//!
//! Every kind says what happened, with its fields, and chooses its status in one exhaustive
//! `match` ([`RtErrorKind::status`], [`StageErrorKind::status`]); an error of a lower layer
//! (`hal::HalError`, `neff::NeffError`, ...) keeps its own `status()` (the [`Status`] trait of
//! the `nrt-status` crate), so a failure maps to the same status whichever path — the
//! runtime, the CLI, libnrt.so — surfaced it. [`RtError`] and [`StageError`] are built from
//! their kind (`From`), so the status field always agrees with the kind.
//!
//! The `Display` of each error is its message; `RtError`'s is `"<STATUS NAME>: <message>"`.

use crate::collectives::CollectiveError;
use crate::state::StateError;
use crate::status::NrtStatus;
pub use nrt_status::Status;

/// An error of a front end's own layer (device selection, the C API's environment knobs)
/// passed through the runtime's error type with its own status.
pub trait FrontendError: std::error::Error + Status + Send + Sync + 'static {
    /// The error as `dyn Error` (to downcast to the front end's own type).
    fn as_error(&self) -> &(dyn std::error::Error + 'static);
}

impl<T: std::error::Error + Status + Send + Sync + 'static> FrontendError for T {
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}

/// Which side of a tensor access went out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorAccess {
    /// `nrt_tensor_write`.
    Write,
    /// `nrt_tensor_read`.
    Read,
    /// `nrt_tensor_memset`.
    Memset,
    /// A slice of a tensor.
    Slice,
    /// The source of `nrt_tensor_copy`.
    CopySource,
    /// The destination of `nrt_tensor_copy`.
    CopyDestination,
}

impl std::fmt::Display for TensorAccess {
    /// `"<operation> of"` ... `"outside <role>"`, the two words of the refusal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TensorAccess::Write => "write",
            TensorAccess::Read => "read",
            TensorAccess::Memset => "memset",
            TensorAccess::Slice => "slice",
            TensorAccess::CopySource | TensorAccess::CopyDestination => "copy",
        })
    }
}

impl TensorAccess {
    fn role(self) -> &'static str {
        match self {
            TensorAccess::CopySource => "source",
            TensorAccess::CopyDestination => "destination",
            _ => "tensor",
        }
    }
}

/// An input or an output of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoRole {
    Input,
    Output,
}

impl std::fmt::Display for IoRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoRole::Input => "input",
            IoRole::Output => "output",
        })
    }
}

impl IoRole {
    fn verb(self) -> &'static str {
        match self {
            IoRole::Input => "expects",
            IoRole::Output => "produces",
        }
    }
}

/// What went wrong in an API call.
#[derive(Debug, thiserror::Error)]
pub enum RtErrorKind {
    /// The NEFF was refused (header gates, digest, content).
    #[error("{0}")]
    Neff(#[from] neff::NeffError),
    /// The device layer failed.
    #[error("{0}")]
    Device(#[from] hal::HalError),
    /// The runtime or model lifecycle refused the call.
    #[error("{0}")]
    State(#[from] StateError),
    /// An environment knob of the runtime does not parse.
    #[error("{0}")]
    Env(#[from] crate::env::EnvError),
    /// A collective that can never complete (NRT_INVALID at load).
    #[error("{0}")]
    Collective(Box<CollectiveError>),
    /// Staging graph `graph` failed (boxed: the execute path's `Result`s stay small).
    #[error("graph {graph}: {source}")]
    Stage {
        graph: String,
        #[source]
        source: Box<StageError>,
    },
    /// The model's inputs and outputs cannot be bound (checked before any graph is staged).
    #[error("{0}")]
    Bindings(#[source] Box<StageError>),
    /// Too few NeuronCores for the load (libnrt's "Insufficient pncs").
    #[error("Insufficient number of pncs, required: {required}, available: {available}")]
    NotEnoughNc { required: usize, available: usize },
    /// A logical NeuronCore size the device's arch does not have (libnrt: sunda has no LNC).
    #[error("{var}={size}: {arch} has no logical NeuronCores of {size} physical cores (sizes 1..={max})")]
    LncUnsupported { var: &'static str, size: u32, arch: &'static str, max: u32 },
    /// A NEFF compiled for another logical NeuronCore size than the runtime's.
    #[error(
        "the NEFF was compiled for logical NeuronCores of {neff} physical core(s) (vnc_size), the runtime runs \
         LNC={runtime} (NEURON_LOGICAL_NC_CONFIG / NEURON_RT_VIRTUAL_CORE_SIZE; {arch} default {default}): \
         recompile with --lnc={runtime} or set NEURON_LOGICAL_NC_CONFIG={neff}"
    )]
    LncMismatch { neff: u32, runtime: usize, arch: &'static str, default: u64 },
    /// A NEFF whose graphs do not fill whole logical NeuronCores.
    #[error("the NEFF has {graphs} graph(s), not a whole number of logical NeuronCores of {lnc} physical cores")]
    LncGraphs { graphs: usize, lnc: usize },
    /// A logical NC the runtime does not show.
    #[error("no logical NC {nc} ({visible} visible)")]
    NoLogicalNc { nc: usize, visible: usize },
    /// A visible NC that no opened device serves.
    #[error("no device serves NC {nc}")]
    NoDeviceForNc { nc: usize },
    /// A logical NC beyond what an execution-unit id can name.
    #[error("logical NC {nc} has no XU id")]
    NoXuId { nc: usize },
    /// The execution unit could not be created.
    #[error("{0}")]
    Xu(#[from] crate::xu::XuError),
    /// The execution unit refused a request (its status: queue full, unrecoverable).
    #[error("execution unit refused the request ({})", status.name())]
    XuRefused { status: NrtStatus },
    /// The completion tracker could not be configured.
    #[error("{0}")]
    Tracker(#[from] crate::completion::TrackerError),
    /// The runtime holds no device (not initialised on any).
    #[error("no devices")]
    NoDevices,
    /// The model handle refers to a model with no NC.
    #[error("model has no NC")]
    ModelWithoutNc,
    /// The model was unloaded (its device state is gone).
    #[error("model unloaded")]
    ModelUnloaded,
    /// A tensor size no memory can hold.
    #[error("tensor {name}: {size} bytes cannot be allocated")]
    TensorTooLarge { name: String, size: u64 },
    /// A tensor access outside the tensor.
    #[error("{access} of {len} bytes at {off} outside {role} {tensor} ({size} bytes)", role = access.role())]
    TensorRange { access: TensorAccess, tensor: String, off: u64, len: u64, size: u64 },
    /// An access outside a caller's attached buffer.
    #[error("{len} bytes at {off} outside an attached buffer of {size} bytes")]
    AttachedRange { off: u64, len: usize, size: usize },
    /// A slice of a tensor without storage.
    #[error("tensor {tensor} has no storage to slice")]
    NoStorage { tensor: String },
    /// `nrt_tensor_copy` between device tensors of different NCs.
    #[error("device tensors {src} and {dst} are on different NeuronCores (nrt_tensor_copy needs the same one)")]
    DifferentNcs { src: String, dst: String },
    /// An execution's tensor that a DMA engine cannot reach.
    #[error("tensor {tensor} has no device-visible storage (empty or an attached host buffer)")]
    NotDmaCapable { tensor: String },
    /// A model input with no tensor of its name in the set.
    #[error("input {name} is not bound")]
    InputUnbound { name: String },
    /// A tensor of the wrong size for a model input or output.
    #[error("{role} {name}: tensor of {got} bytes, model {verb} {want}", verb = role.verb())]
    WrongSize { role: IoRole, name: String, got: u64, want: u64 },
    /// A front end's own layer failed (device selection, its environment): its error and status.
    #[error("{0}")]
    Frontend(Box<dyn FrontendError>),
    /// A caller-side check of the C API, passed through with its status and message (only the
    /// C API's own argument checks use it; the runtime's failures have kinds of their own).
    #[error("{message}")]
    Caller { status: NrtStatus, message: String },
}

impl RtErrorKind {
    /// The status libnrt returns for this failure — the one mapping (exhaustive: a new
    /// variant must choose).
    pub fn status(&self) -> NrtStatus {
        match self {
            RtErrorKind::Neff(e) => e.status(),
            RtErrorKind::Device(e) => e.status(),
            RtErrorKind::State(e) => e.status(),
            RtErrorKind::Stage { source, .. } | RtErrorKind::Bindings(source) => source.status(),
            RtErrorKind::Collective(e) => e.status(),
            RtErrorKind::Frontend(e) => e.status(),
            RtErrorKind::Caller { status, .. } | RtErrorKind::XuRefused { status } => *status,
            RtErrorKind::NotEnoughNc { .. } => NrtStatus::LoadNotEnoughNc,
            RtErrorKind::TensorTooLarge { .. } => NrtStatus::Resource,
            RtErrorKind::ModelWithoutNc | RtErrorKind::ModelUnloaded => NrtStatus::InvalidHandle,
            RtErrorKind::NotDmaCapable { .. } | RtErrorKind::InputUnbound { .. } | RtErrorKind::WrongSize { .. } => {
                NrtStatus::ExecBadInput
            }
            RtErrorKind::Env(_)
            | RtErrorKind::LncUnsupported { .. }
            | RtErrorKind::LncMismatch { .. }
            | RtErrorKind::LncGraphs { .. }
            | RtErrorKind::NoLogicalNc { .. }
            | RtErrorKind::NoDeviceForNc { .. }
            | RtErrorKind::NoXuId { .. }
            | RtErrorKind::TensorRange { .. }
            | RtErrorKind::AttachedRange { .. }
            | RtErrorKind::NoStorage { .. }
            | RtErrorKind::DifferentNcs { .. } => NrtStatus::Invalid,
            RtErrorKind::Xu(_) | RtErrorKind::Tracker(_) | RtErrorKind::NoDevices => NrtStatus::Failure,
        }
    }
}

impl Status for RtErrorKind {
    fn status(&self) -> NrtStatus {
        RtErrorKind::status(self)
    }
}

/// An API failure: the status libnrt returns and what went wrong. Built from its kind
/// (`From`), so `status` is always `kind.status()`.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {kind}", status = status.name())]
pub struct RtError {
    pub status: NrtStatus,
    pub kind: RtErrorKind,
}

impl RtError {
    /// A caller-side check of the C API with its status and message
    /// ([`RtErrorKind::Caller`]).
    pub fn new(status: NrtStatus, message: impl Into<String>) -> Self {
        Self::from(RtErrorKind::Caller { status, message: message.into() })
    }
    /// A front end's own error, with its own status ([`RtErrorKind::Frontend`]).
    pub fn frontend(e: impl FrontendError) -> Self {
        Self::from(RtErrorKind::Frontend(Box::new(e)))
    }
    /// The status.
    pub fn status(&self) -> NrtStatus {
        self.status
    }
    /// The message (the error without its status).
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl Status for RtError {
    fn status(&self) -> NrtStatus {
        self.status
    }
}

impl From<RtErrorKind> for RtError {
    fn from(kind: RtErrorKind) -> Self {
        Self { status: kind.status(), kind }
    }
}

impl From<StateError> for RtError {
    fn from(e: StateError) -> Self {
        Self::from(RtErrorKind::State(e))
    }
}

impl From<hal::HalError> for RtError {
    fn from(e: hal::HalError) -> Self {
        Self::from(RtErrorKind::Device(e))
    }
}

impl From<Box<CollectiveError>> for RtError {
    fn from(e: Box<CollectiveError>) -> Self {
        Self::from(RtErrorKind::Collective(e))
    }
}

impl From<neff::NeffError> for RtError {
    fn from(e: neff::NeffError) -> Self {
        Self::from(RtErrorKind::Neff(e))
    }
}

impl From<crate::env::EnvError> for RtError {
    fn from(e: crate::env::EnvError) -> Self {
        Self::from(RtErrorKind::Env(e))
    }
}

/// What went wrong staging a graph.
#[derive(Debug, thiserror::Error)]
pub enum StageErrorKind {
    /// The device layer failed.
    #[error("{0}")]
    Device(#[from] hal::HalError),
    /// Allocating var `var`'s device memory failed.
    #[error("var {var}: {source}")]
    VarAlloc {
        var: String,
        #[source]
        source: hal::HalError,
    },
    /// A register the loader resolves does not exist on this arch.
    #[error("{0}")]
    Csr(#[from] csr_maps::CsrError),
    /// A Q7 ucode step failed (`what` names the library or core).
    #[error("{what}: {source}")]
    Ucode {
        what: String,
        #[source]
        source: hal::q7::UcodeError,
    },
    /// Claiming a ucode core failed: it is already claimed, or not booted (`core` names it).
    #[error("{core}: {source}")]
    Claim {
        core: String,
        #[source]
        source: hal::q7::UcodeError,
    },
    // --- Shortages of the NC (NRT_RESOURCE) ---
    /// More DMA queues than the NC has engines.
    #[error("{queues} DMA queues, {engines} engines per NC")]
    TooManyQueues { queues: usize, engines: usize },
    /// A queue needs more descriptors per execution than a ring holds.
    #[error("queue {queue} needs {total} descriptors per execution")]
    TooManyDescriptors { queue: String, total: u64 },
    /// A state-buffer var does not fit.
    #[error("var {var}: {size} bytes do not fit in the state buffer ({capacity} bytes)")]
    StateBufferFull { var: String, size: u64, capacity: u64 },
    /// The graph needs more ownership-region entries than the NC's table holds.
    #[error("the model needs {need} entries of the NC's ownership region table, which holds {have}")]
    RegionTableFull { need: usize, have: usize },
    // --- Content that cannot be staged (NRT_INVALID) ---
    /// A DMA descriptor op other than copy.
    #[error("queue {queue} block {block}: DMA op {op} is not supported")]
    UnsupportedDmaOp { queue: String, block: u32, op: &'static str },
    /// A descriptor whose source and destination patterns move different byte counts.
    #[error("{what}: {src} source bytes vs {dst} destination bytes")]
    DmaSizeMismatch { what: String, src: u64, dst: u64 },
    /// An access pattern whose sizes and steps disagree (count, or a zero size).
    #[error("{what}: access pattern sizes {sizes:?} / steps {steps:?} are inconsistent")]
    PatternShape { what: String, sizes: Vec<u64>, steps: Vec<i64> },
    /// An access pattern whose byte count overflows.
    #[error("{what}: access pattern of {sizes:?} bytes is too large")]
    PatternOverflow { what: String, sizes: Vec<u64> },
    /// An access pattern larger than 2^34 bytes.
    #[error("{what}: access pattern of {total} bytes is too large")]
    PatternTooLarge { what: String, total: u128 },
    /// An access pattern of more than 2^20 runs.
    #[error("{what}: access pattern has {count} runs (limit 2^20)")]
    PatternRuns { what: String, count: u128 },
    /// An access pattern offset that overflows.
    #[error("{what}: access pattern offset overflows")]
    PatternOffset { what: String },
    /// A queue triggered by a raw descriptor count instead of a block.
    #[error("queue {queue}: raw-count triggers are not supported")]
    RawCountTrigger { queue: String },
    /// A trigger naming a block the queue does not have.
    #[error("queue {queue}: no DMA block {block}")]
    NoDmaBlock { queue: String, block: u64 },
    /// A queue triggered by more than one engine.
    #[error("queue {queue} is triggered by several engines")]
    SharedQueue { queue: String },
    /// A semaphore index above 255.
    #[error("queue {queue}: semaphore {sem} > 255")]
    SemaphoreRange { queue: String, sem: u64 },
    /// A semaphore the runtime reserves.
    #[error("semaphore {sem} is reserved by the runtime (250..=255)")]
    ReservedSemaphore { sem: u8 },
    /// The arch description has no state buffer for the NC.
    #[error("arch has no state buffer for NC {nc}")]
    NoStateBuffer { nc: usize },
    /// A semaphore window register with no device address.
    #[error("semaphore window at BAR0 {offset:#x} has no device address")]
    SemaphoreWindow { offset: u64 },
    /// A ucode library that is not a prelinked UCPL image.
    #[error(
        "ucode library {library}: not a prelinked UCPL image (prelinking Xtensa ELF objects is not supported; \
         ship the prelinked image)"
    )]
    NotPrelinked { library: String },
    /// Two vars of one graph with the same name.
    #[error("graph {graph}: two vars named {name}")]
    DuplicateVar { graph: String, name: String },
    /// An input or output bound to a var of another type.
    #[error("{name} is bound to var of type {found}, expected {expected}")]
    WrongVarType { name: String, found: &'static str, expected: &'static str },
    /// An input or output bound to no var.
    #[error("{role} {name} is bound to no var")]
    Unbound { role: IoRole, name: String },
    /// A var alignment that is not a power of two.
    #[error("var {var}: alignment {align} is not a power of two")]
    VarAlignment { var: String, align: u64 },
    /// A streamed var without its streaming description.
    #[error("var {var}: not a streamed var")]
    NotStreamed { var: String },
    /// A streamed var whose member is no longer held.
    #[error("var {var}: streamed member {member} is gone")]
    StreamedMemberGone { var: String, member: String },
    /// Streamed weights with no sink holding them.
    #[error("var {var}: streamed weights without a sink")]
    NoWeightSink { var: String },
    /// A virtual var whose backing var is missing, virtual or too small.
    #[error("virtual var {var}: backing buffer missing, virtual, or too small")]
    VirtualBacking { var: String },
    // --- Confinement: addresses a model may not make the device touch (NRT_INVALID) ---
    /// A var id the graph does not have.
    #[error("{what}: unknown var id {id}")]
    UnknownVarId { what: String, id: u64 },
    /// A var name the graph does not have.
    #[error("{what}: unknown var {name}")]
    UnknownVar { what: String, name: String },
    /// A range past the end of its var.
    #[error("{what}: range {off}+{len} exceeds var {var} ({size} bytes)")]
    OutsideVar { what: String, var: String, off: u64, len: u64, size: u64 },
    /// A signed access outside its var.
    #[error("{what}: access {off}+{len} outside var {var} ({size} bytes)")]
    AccessOutsideVar { what: String, var: String, off: i64, len: u64, size: u64 },
    /// A raw device address where a var address is required.
    #[error("{what}: {side} address {addr:#x} is a raw device address, not a var address")]
    RawAddress { what: String, side: String, addr: u64 },
    /// A pattern with negative steps reaching before its var.
    #[error("{what}: {side} pattern reaches {bytes} bytes before var {var_id}")]
    BeforeVar { what: String, side: String, bytes: i128, var_id: u64 },
    /// A pattern span that overflows.
    #[error("{what}: {side} pattern span overflows")]
    SpanOverflow { what: String, side: String },
    /// A WRITE to a register outside the NC's permitted set.
    #[error("{what}: WRITE to {addr:#x} is outside the registers this NC's model may write")]
    ForbiddenWrite { what: String, addr: u64 },
    /// A NOTIFY (0x6A / 0xA6) whose custom-notification sub-id is one a model's program may
    /// not post: an out-of-bounds report (the device's own finding, NRT_EXEC_OOB) or a sub-id
    /// libnrt does not know (NRT_HW_ERROR). Either would make the execution fail with a
    /// status the device did not report.
    #[error(
        "{what}: {} field sub_id (+0x0C) is {sub_id}, {}; a model's NOTIFY may post only debug (6), tensor completion (7) and debug-tensor read (8) notifications",
        isa::slot::Opcode::from_code(*opcode).mnemonic(),
        forged_notification(*sub_id)
    )]
    ForgedNotification { what: String, opcode: u8, sub_id: u16 },
    // --- Instructions that cannot be lowered (NRT_INVALID) ---
    /// A DMA trigger naming a queue the graph does not have.
    #[error("{what}: unknown DMA queue {queue}")]
    UnknownQueue { what: String, queue: String },
    /// DMA triggers in another order than the queue's blocks.
    #[error("{what}: trigger order mismatch")]
    TriggerOrder { what: String },
    /// A collective element type the device cannot reduce.
    #[error("{what}: collective dtype {dtype:#x} unsupported")]
    CollectiveDtype { what: String, dtype: u8 },
    /// A collective byte count or element offset that overflows.
    #[error("{what}: element count overflows")]
    CollectiveSize { what: String },
    /// A collective element offset that overflows.
    #[error("{what}: element offset {offset} overflows")]
    CollectiveOffset { what: String, offset: u64 },
    /// A collective type the device does not run (`isa::device_ops::ctype`).
    #[error("{what}: unknown collective type {ctype:#x}")]
    CollectiveType { what: String, ctype: u8 },
    /// A collective whose data or pairs do not fit its kind (an all-to-all not split in equal
    /// chunks, a permute's malformed source-target pairs).
    #[error("{what}: {why}")]
    CollectiveShape { what: String, why: String },
    /// A collective reduction other than ADD, MAX, MIN.
    #[error("{what}: unknown collective operation {op:#x}")]
    CollectiveOp { what: String, op: u8 },
    /// A replica group id the graph does not have.
    #[error("{what}: replica group {group} does not exist ({groups} groups)")]
    NoReplicaGroup { what: String, group: u16, groups: usize },
    /// A replica group that does not hold this graph's rank.
    #[error("{what}: graph {rank} is not in replica group {members:?}")]
    NotInGroup { what: String, rank: usize, members: Vec<u32> },
    /// A replica group larger than 255.
    #[error("{what}: replica group of {size}")]
    GroupTooLarge { what: String, size: usize },
    /// A DGE op other than DIRECT2D.
    #[error("{what}: DGE op {op} is not supported (DIRECT2D only)")]
    UnsupportedDgeOp { what: String, op: u8 },
    /// An opcode the loader does not lower.
    #[error("{what}: Unsupported hardware operator code {opcode:#04x}")]
    UnsupportedOpcode { what: String, opcode: u8 },
}

/// What a refused NOTIFY sub-id would have made the execution report.
fn forged_notification(sub_id: u16) -> &'static str {
    if csr_maps::formats::notify::custom::is_out_of_bounds(sub_id) {
        "an out-of-bounds report (NRT_EXEC_OOB), which only the device's own checks make"
    } else {
        "a custom notification libnrt does not know (NRT_HW_ERROR)"
    }
}

impl StageErrorKind {
    /// The status libnrt returns for this failure — the one mapping (exhaustive: a new
    /// variant must choose).
    pub fn status(&self) -> NrtStatus {
        use StageErrorKind as K;
        match self {
            K::Device(e) | K::VarAlloc { source: e, .. } => e.status(),
            K::Csr(e) => e.status(),
            K::Ucode { source, .. } => source.status(),
            K::Claim { .. }
            | K::TooManyQueues { .. }
            | K::TooManyDescriptors { .. }
            | K::StateBufferFull { .. }
            | K::RegionTableFull { .. } => NrtStatus::Resource,
            K::UnsupportedDmaOp { .. }
            | K::DmaSizeMismatch { .. }
            | K::PatternShape { .. }
            | K::PatternOverflow { .. }
            | K::PatternTooLarge { .. }
            | K::PatternRuns { .. }
            | K::PatternOffset { .. }
            | K::RawCountTrigger { .. }
            | K::NoDmaBlock { .. }
            | K::SharedQueue { .. }
            | K::SemaphoreRange { .. }
            | K::ReservedSemaphore { .. }
            | K::NoStateBuffer { .. }
            | K::SemaphoreWindow { .. }
            | K::NotPrelinked { .. }
            | K::DuplicateVar { .. }
            | K::WrongVarType { .. }
            | K::Unbound { .. }
            | K::VarAlignment { .. }
            | K::NotStreamed { .. }
            | K::StreamedMemberGone { .. }
            | K::NoWeightSink { .. }
            | K::VirtualBacking { .. }
            | K::UnknownVarId { .. }
            | K::UnknownVar { .. }
            | K::OutsideVar { .. }
            | K::AccessOutsideVar { .. }
            | K::RawAddress { .. }
            | K::BeforeVar { .. }
            | K::SpanOverflow { .. }
            | K::ForbiddenWrite { .. }
            | K::ForgedNotification { .. }
            | K::UnknownQueue { .. }
            | K::TriggerOrder { .. }
            | K::CollectiveDtype { .. }
            | K::CollectiveSize { .. }
            | K::CollectiveOffset { .. }
            | K::CollectiveType { .. }
            | K::CollectiveOp { .. }
            | K::CollectiveShape { .. }
            | K::NoReplicaGroup { .. }
            | K::NotInGroup { .. }
            | K::GroupTooLarge { .. }
            | K::UnsupportedDgeOp { .. }
            | K::UnsupportedOpcode { .. } => NrtStatus::Invalid,
        }
    }
}

impl Status for StageErrorKind {
    fn status(&self) -> NrtStatus {
        StageErrorKind::status(self)
    }
}

/// A load failure with the status libnrt returns for it. Built from its kind (`From`), so
/// `status` is always `kind.status()`.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct StageError {
    pub status: NrtStatus,
    pub kind: StageErrorKind,
}

impl StageError {
    /// The status.
    pub fn status(&self) -> NrtStatus {
        self.status
    }
    /// The message.
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl Status for StageError {
    fn status(&self) -> NrtStatus {
        self.status
    }
}

impl From<StageErrorKind> for StageError {
    fn from(kind: StageErrorKind) -> Self {
        Self { status: kind.status(), kind }
    }
}

impl From<hal::HalError> for StageError {
    fn from(e: hal::HalError) -> Self {
        Self::from(StageErrorKind::Device(e))
    }
}

impl From<csr_maps::CsrError> for StageError {
    fn from(e: csr_maps::CsrError) -> Self {
        Self::from(StageErrorKind::Csr(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mapping_for_driver_failures() {
        let cases = [
            (hal::HalError::OutOfDeviceMemory { chan: 0, size: 1, free: 0 }, NrtStatus::Resource),
            (hal::HalError::TooLarge { what: "buffer", size: u64::MAX }, NrtStatus::Resource),
            (hal::HalError::NoSuchEngine(9), NrtStatus::Invalid),
            (hal::HalError::NoSuchNc { nc: 9, count: 2 }, NrtStatus::Invalid),
            (hal::HalError::DmaTimeout { engine: 0, queue: 1, waited_ms: 5 }, NrtStatus::Timeout),
            (hal::HalError::DmaAbort { engine: 0, queue: 1, m2s_cause: 1, s2m_cause: 0 }, NrtStatus::ExecHwErrDmaAbort),
            (hal::HalError::FwApiTooOld { version: 1, needed: 2 }, NrtStatus::Failure),
        ];
        for (e, want) in cases {
            let msg = e.to_string();
            assert_eq!(e.status(), want);
            let s = StageError::from(e);
            assert_eq!(s.status, want);
            assert_eq!(s.to_string(), msg);
            let r = RtError::from(RtErrorKind::Stage { graph: "g".into(), source: Box::new(s) });
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

    #[test]
    fn the_status_field_is_the_kinds() {
        let e = RtError::from(RtErrorKind::NotEnoughNc { required: 2, available: 1 });
        assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
        assert_eq!(e.message(), "Insufficient number of pncs, required: 2, available: 1");
        let e = RtError::new(NrtStatus::InvalidHandle, "bad handle");
        assert_eq!((e.status, e.message()), (NrtStatus::InvalidHandle, "bad handle".to_string()));
        let e = StageError::from(StageErrorKind::RegionTableFull { need: 300, have: 256 });
        assert_eq!(e.status, NrtStatus::Resource);
        let e = StageError::from(StageErrorKind::Claim {
            core: "NC 0".into(),
            source: hal::q7::UcodeError { code: csr_maps::consts::q7::ERR_INVALID, what: "core already claimed" },
        });
        assert_eq!(e.status, NrtStatus::Resource);
        let e = TensorAccess::CopyDestination;
        let r = RtError::from(RtErrorKind::TensorRange { access: e, tensor: "t".into(), off: 4, len: 8, size: 8 });
        assert_eq!(r.message(), "copy of 8 bytes at 4 outside destination t (8 bytes)");
        assert_eq!(r.status, NrtStatus::Invalid);
    }
}
