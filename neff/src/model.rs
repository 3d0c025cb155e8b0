//! The loaded model: what the reader produces (docs/facts/libnrt.md §1.5-§1.6, §2).

use crate::header::NeffHeader;
use isa::slot::{Instruction, SpSlot};

use crate::arch::Target;
use crate::container::{Blob, MemberInfo};

/// A parsed, validated NEFF.
#[derive(Debug, Clone)]
pub struct Neff {
    pub header: NeffHeader,
    /// Tar members kept by the walk, in archive order (duplicates collapsed to the last).
    pub members: Vec<MemberInfo>,
    /// The inflated tar (members and weights are zero-copy slices of it).
    pub payload: Blob,
    /// `neff.json` or `kelp.json`.
    pub manifest_member: String,
    /// Model-level tensors from neff.json `arg_nodes` / `heads`.
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    pub kelf: Kelf,
    /// One per KELF graph (subgraph / NeuronCore), in KELF order.
    pub graphs: Vec<Graph>,
}

/// The KELF descriptor (`kelf-a.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Kelf {
    pub member: String,
    /// `"MAJ.MIN-suffix"`, parsed but not gated.
    pub version: String,
    pub target_str: String,
    pub target: Target,
}

/// A model input/output (`io_node_info_t`, §1.5).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: String,
    /// `nrt_dtype_t` code (0 = UNKNOWN).
    pub nrt_dtype: u32,
    pub shape: Vec<u64>,
    /// prod(shape) × dtype size.
    pub size: u64,
}

/// `nrt_dtype_t` code and element size of a tier-1 dtype string (§1.5); unknown → (0, 1).
pub fn nrt_dtype(s: &str) -> (u32, u64) {
    match s {
        "float32" => (10, 4),
        "float16" => (7, 2),
        "bfloat16" => (6, 2),
        "int8" => (2, 1),
        "int16" => (4, 2),
        "int32" => (8, 4),
        "int64" => (12, 8),
        "uint8" => (3, 1),
        "uint16" => (5, 2),
        "uint32" => (9, 4),
        "uint64" => (1, 8),
        _ => (0, 1),
    }
}

/// Which JSON shape def.json used for `var` / `dma_queue` (§10 conflict 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefShape {
    /// Objects keyed by name (the fixture).
    Object,
    /// Arrays of objects with a `name` key (MS).
    Array,
}

/// One subgraph (`sgNN/def.json`).
#[derive(Debug, Clone)]
pub struct Graph {
    /// KELF graph name (falls back to def.json `name`).
    pub name: String,
    /// def.json member path.
    pub definition: String,
    /// def.json `name`, if present.
    pub def_name: Option<String>,
    pub var_shape: DefShape,
    /// Indexed by var_id (dense).
    pub vars: Vec<Var>,
    pub dma_queues: Vec<DmaQueue>,
    pub replica_groups: Vec<Vec<u32>>,
    pub src_target_pairs: Vec<Vec<i64>>,
    pub ucode_libs: Vec<UcodeLib>,
    pub sb_reservations: Vec<SbReservation>,
    /// `num_streams` (or `cc_stream`).
    pub num_streams: Option<u64>,
    pub fp8: Option<Fp8Config>,
    /// Five engines in `al_hal_tpb_eng_type` order: PE, ACT, POOL, DVE, SP.
    pub engines: Vec<EngineProgram>,
}

impl Graph {
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.vars.iter().find(|v| v.name == name)
    }
    pub fn queue(&self, name: &str) -> Option<&DmaQueue> {
        self.dma_queues.iter().find(|q| q.name == name)
    }
    pub fn engine(&self, kind: Engine) -> Option<&EngineProgram> {
        self.engines.iter().find(|e| e.kind == kind)
    }
    pub fn num_inputs(&self) -> usize {
        self.vars.iter().filter(|v| v.kind == VarKind::Input).count()
    }
    pub fn num_outputs(&self) -> usize {
        self.vars.iter().filter(|v| v.kind == VarKind::Output).count()
    }
}

/// Var `type` → `kbin_mr_type` (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarKind {
    StateBuffer,
    Input,
    Output,
    TmpBuf,
    Virtual,
    Pointer,
    List,
    /// `file`: a weight (BUFFER).
    File,
    /// `remote`, `shared`, `sharded`, `main`, `dge-table`.
    Remote,
}

impl VarKind {
    pub fn from_type(s: &str) -> Option<Self> {
        Some(match s {
            "state-buffer" => VarKind::StateBuffer,
            "input" => VarKind::Input,
            "output" => VarKind::Output,
            "tmp-buf" => VarKind::TmpBuf,
            "virtual" => VarKind::Virtual,
            "pointer" => VarKind::Pointer,
            "list" => VarKind::List,
            "file" => VarKind::File,
            "remote" | "shared" | "sharded" | "main" | "dge-table" => VarKind::Remote,
            _ => return None,
        })
    }
    /// The canonical type string.
    pub fn type_str(self) -> &'static str {
        match self {
            VarKind::StateBuffer => "state-buffer",
            VarKind::Input => "input",
            VarKind::Output => "output",
            VarKind::TmpBuf => "tmp-buf",
            VarKind::Virtual => "virtual",
            VarKind::Pointer => "pointer",
            VarKind::List => "list",
            VarKind::File => "file",
            VarKind::Remote => "remote",
        }
    }
    /// `kbin_mr_type`: SB 1, BUFFER 3, TMP_BUF 4, INPUT 5, OUTPUT 6, PTR 7, VIRTUAL_TMP_BUF 8,
    /// LIST 9, REMOTE 11.
    pub fn mr_type(self) -> u32 {
        match self {
            VarKind::StateBuffer => 1,
            VarKind::File => 3,
            VarKind::TmpBuf => 4,
            VarKind::Input => 5,
            VarKind::Output => 6,
            VarKind::Pointer => 7,
            VarKind::Virtual => 8,
            VarKind::List => 9,
            VarKind::Remote => 11,
        }
    }
    /// Kinds that must carry a `size`.
    pub fn needs_size(self) -> bool {
        matches!(self, VarKind::Input | VarKind::Output | VarKind::TmpBuf | VarKind::Virtual | VarKind::Pointer)
    }
}

/// How a weight payload was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// `.npy` v1; the data is a zero-copy slice after the npy header.
    Npy,
    /// Raw bytes.
    Raw,
}

/// One var-table entry (`parse_one_variable`).
#[derive(Debug, Clone, PartialEq)]
pub struct Var {
    pub name: String,
    pub var_id: u32,
    pub kind: VarKind,
    /// The `type` string as written.
    pub type_str: String,
    pub size: Option<u64>,
    pub alignment: Option<u64>,
    pub dtype: Option<String>,
    /// `shape`, else `internal_shape`, else `framework_shape`.
    pub shape: Vec<u64>,
    pub element_size: Option<u64>,
    pub file_name: Option<String>,
    /// The resolved member of `file_name`.
    pub file_member: Option<String>,
    pub weight_format: Option<WeightFormat>,
    /// Weight data (zero-copy for `.npy`).
    pub data: Option<Blob>,
    /// Weights whose member was streamed to a [`crate::MemberSink`] ([`crate::Neff::parse_streaming`]):
    /// where the data lies in that member. Exclusive with `data`.
    pub streamed: Option<StreamedData>,
    pub referenced_var_id: Option<u32>,
    pub backing_variable_off: Option<u64>,
    pub backing_buf: Option<String>,
    pub list: Vec<u32>,
}

/// Weight data left in the member streamed to a [`crate::MemberSink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedData {
    /// The member (stripped name).
    pub member: String,
    /// Offset of the data in the member (past an `.npy` preamble).
    pub offset: u64,
    pub len: u64,
}

/// dma_queue role (`type`) → `kbin_dma_ring_type` (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueRole {
    In,
    Out,
    Data,
    IndirectMemcpy,
    DynamicActTbl,
    EmbeddingUpdate,
}

impl QueueRole {
    /// Parses a role string; `indirect` selects INDIRECT_MEMCPY for `"data"`.
    pub fn from_str_flag(s: &str, indirect: bool) -> Option<Self> {
        Some(match s {
            "in" => QueueRole::In,
            "out" => QueueRole::Out,
            "data" if indirect => QueueRole::IndirectMemcpy,
            "data" => QueueRole::Data,
            "act_load" => QueueRole::DynamicActTbl,
            "embedding_update" => QueueRole::EmbeddingUpdate,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            QueueRole::In => "in",
            QueueRole::Out => "out",
            QueueRole::Data | QueueRole::IndirectMemcpy => "data",
            QueueRole::DynamicActTbl => "act_load",
            QueueRole::EmbeddingUpdate => "embedding_update",
        }
    }
    /// `kbin_dma_ring_type`.
    pub fn ring_type(self) -> u32 {
        match self {
            QueueRole::Data => 6,
            QueueRole::In => 7,
            QueueRole::Out => 8,
            QueueRole::IndirectMemcpy => 9,
            QueueRole::DynamicActTbl => 11,
            QueueRole::EmbeddingUpdate => 15,
        }
    }
}

/// Which key carried the role (§10 conflict 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueConvention {
    /// Role in `type`, engine in `owner` (fixture, FR).
    TypeIsRole,
    /// Role in `owner` (MS).
    OwnerIsRole,
}

/// One dma_queue (`parse_one_dma_ring`).
#[derive(Debug, Clone, PartialEq)]
pub struct DmaQueue {
    pub name: String,
    pub role: QueueRole,
    /// Owning engine, when the owner names one.
    pub owner: Option<Engine>,
    pub convention: QueueConvention,
    pub semaphore: Option<u32>,
    pub semaphore_set: Option<u32>,
    pub num_queues: Option<u32>,
    pub queue_instances: Option<u32>,
    pub pinned: bool,
    pub dge: bool,
    pub dynamic_dma: bool,
    pub indirect_memcpy: bool,
    pub embedding_update_sync_semaphore: Option<u32>,
}

/// Engines in `al_hal_tpb_eng_type` order (§1.4): the workspace's one engine type
/// ([`csr_maps::Engine`]), under the name the NEFF model has always used. `name()` is the
/// file stem / def.json key.
pub use csr_maps::Engine;

/// DMA descriptor op (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DmaOp {
    Copy,
    Fma,
    Add,
    Min,
    Max,
    Transpose,
}

impl DmaOp {
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "copy" => DmaOp::Copy,
            "fma" => DmaOp::Fma,
            "add" => DmaOp::Add,
            "min" => DmaOp::Min,
            "max" => DmaOp::Max,
            "transpose" | "transpose_op" => DmaOp::Transpose,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            DmaOp::Copy => "copy",
            DmaOp::Fma => "fma",
            DmaOp::Add => "add",
            DmaOp::Min => "min",
            DmaOp::Max => "max",
            DmaOp::Transpose => "transpose",
        }
    }
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// One DMA descriptor with its two access patterns.
#[derive(Debug, Clone, PartialEq)]
pub struct DmaDesc {
    pub op: DmaOp,
    pub from: String,
    pub to: String,
    pub from_sizes: Vec<u64>,
    pub from_steps: Vec<i64>,
    pub to_sizes: Vec<u64>,
    pub to_steps: Vec<i64>,
}

/// One DMA block of an engine json.
#[derive(Debug, Clone, PartialEq)]
pub struct DmaBlock {
    pub id: u32,
    pub queue: String,
    pub instance_name: Option<String>,
    pub comment: Option<String>,
    pub priority_class: Option<u32>,
    pub descs: Vec<DmaDesc>,
}

/// An engine instruction stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// 64-byte slots (PE, ACT, POOL, DVE).
    Tpb(Vec<Instruction>),
    /// 8-byte slots (SP).
    Sp(Vec<SpSlot>),
}

impl Program {
    pub fn len(&self) -> usize {
        match self {
            Program::Tpb(v) => v.len(),
            Program::Sp(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One engine of a graph: its json, DMA blocks and program.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineProgram {
    pub kind: Engine,
    /// The engine json member, `None` when absent (empty placeholder, as libnrt warns).
    pub json_member: Option<String>,
    /// The `.bin` member, `None` when absent.
    pub instr_member: Option<String>,
    pub dma_blocks: Vec<DmaBlock>,
    /// Raw program bytes (zero-copy).
    pub code: Option<Blob>,
    pub program: Program,
    /// `act_semaphore` (act.json).
    pub act_semaphore: Option<u32>,
    /// `act_info` member name (optional, may dangle).
    pub act_info: Option<String>,
}

/// One GPSIMD custom-op function.
#[derive(Debug, Clone, PartialEq)]
pub struct UcodeFunction {
    pub name: String,
    pub opcode: u8,
    pub sub_opcode: Option<u8>,
}

/// One ucode library (`parse_one_ucode_lib`).
#[derive(Debug, Clone, PartialEq)]
pub struct UcodeLib {
    /// `name` if given, else `library`.
    pub name: String,
    pub library: String,
    pub version: String,
    pub version_major: u64,
    pub opcode: i64,
    /// 0 for the built-in opcode −123 (0x85), 6 for user ExtISA.
    pub flags: u32,
    pub cpu_id: u64,
    pub total_cpus: u64,
    pub functions: Vec<UcodeFunction>,
    pub add_lib: bool,
    /// The library bytes (zero-copy).
    pub content: Option<Blob>,
}

/// A state-buffer carveout (`runtime_statebuffer_reservation`); the type is always evtaccel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SbReservation {
    pub offset: u64,
    pub size: u64,
    pub base_partition: u64,
    pub partitions: u64,
}

/// `fp8_conversion_config` (§1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fp8Config {
    pub fp8_range_extension: u32,
    pub emax_fp8_e4m3: u32,
    pub emax_fp8_e5m2: u32,
    pub ocp_sat: u8,
    pub fp8_sis: u8,
    pub fp8_sns: u8,
}

impl Fp8Config {
    /// The 16-byte runtime config.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.fp8_range_extension.to_le_bytes());
        b[4..8].copy_from_slice(&self.emax_fp8_e4m3.to_le_bytes());
        b[8..12].copy_from_slice(&self.emax_fp8_e5m2.to_le_bytes());
        b[12] = self.ocp_sat;
        b[13] = self.fp8_sis;
        b[14] = self.fp8_sns;
        b
    }
}
