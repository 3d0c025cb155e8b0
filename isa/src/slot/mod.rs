//! The 64-byte sequencer slot: header, 8-byte events block, instruction payloads (docs/facts/libnrt.md §2).
//!
//! Sources: §2.1 constants and header (SEQ, FR, CC), §2.2 events block, NEURON_ISA 8-byte dialect
//! (SEQ, DGEM, DRT), §2.3 opcode catalog, §2.4 pseudo-instruction records, §10 conflicts 1 and 14.
//! Also the 8-byte SP slot header of `sp.bin` (§2.4 "SP sequencer").
//!
//! Every decoder here is total: any 64 bytes decode to an [`Instruction`] (unknown opcodes are kept
//! as [`Instruction::Raw`]) and every record keeps all of its bytes (reserved ones included), so
//! `Instruction::decode(b).encode() == b` for every `b`.

use csr_maps::formats::le::{array_at as arr, put, u16_at, u32_at, u64_at};
use csr_maps::Engine;

mod sp;
pub use sp::{SpOpcode, SpSlot, SP_SLOT_BYTES};

/// Bytes in one slot (NBYTES; the number lives in csr-maps).
pub const SLOT_BYTES: usize = csr_maps::consts::seq::SLOT_BYTES;
/// 4-byte words in one slot (NWORDS); the expected `inst_word_len`.
pub const SLOT_WORDS: u8 = 16;
/// Length of a queue name inside a pseudo instruction (RT_MAX_NAME).
pub const RT_MAX_NAME: usize = 32;
/// Events per sequencer (NUM_EVENTS).
pub const NUM_EVENTS: usize = 256;
/// Semaphores per sequencer (NUM_SEMAPHORES).
pub const NUM_SEMAPHORES: usize = 32;
/// Max dims of a memory access pattern (MEM_PATTERN_MAX_NUM_DIM).
pub const MEM_PATTERN_MAX_NUM_DIM: usize = 4;

/// Engine class of an opcode: `opcode >> 5` (TONGA_ISA_TPB_ENGINE, §2.1). Classes 0–2 are
/// the opcodes of one engine (PE, ACT, POOL); the others are not one engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineClass {
    /// Classes 0, 1, 2: the opcodes of the PE, ACT and POOL engines.
    Engine(Engine),
    /// Instructions every engine accepts.
    All,
    /// Class 5 (0xA0..0xBF): SP/SEQ control-stream opcodes.
    Seq,
    /// Class 6: runtime-patched pseudo instructions.
    Rt,
    /// Class 7: simulator-only instructions.
    Sim,
    /// Class 4 (no engine is documented for it).
    Other(u8),
}

impl EngineClass {
    pub fn from_opcode(op: u8) -> Self {
        match op >> 5 {
            0 => EngineClass::Engine(Engine::Pe),
            1 => EngineClass::Engine(Engine::Act),
            2 => EngineClass::Engine(Engine::Pool),
            3 => EngineClass::All,
            5 => EngineClass::Seq,
            6 => EngineClass::Rt,
            7 => EngineClass::Sim,
            c => EngineClass::Other(c),
        }
    }
}

/// Trace mode, `debug_cmd` bits `[1:0]` (§2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceMode {
    Off = 0,
    OnStart = 1,
    OnEnd = 2,
    Both = 3,
}

/// Slot bytes 0..4 (§2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotHeader {
    /// `base | (engine << 5)`.
    pub opcode: u8,
    /// Length in 4-byte words, always 0x10 in valid streams.
    pub inst_word_len: u8,
    /// bits `[1:0]` trace mode, bit 7 halt_en.
    pub debug_cmd: u8,
    /// Software hint.
    pub debug_hint: u8,
}

impl SlotHeader {
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        SlotHeader { opcode: b[0], inst_word_len: b[1], debug_cmd: b[2], debug_hint: b[3] }
    }
    pub fn to_bytes(&self) -> [u8; 4] {
        [self.opcode, self.inst_word_len, self.debug_cmd, self.debug_hint]
    }
    /// A header for `op` with word length 16 and no debug bits.
    pub fn new(op: Opcode) -> Self {
        SlotHeader { opcode: op.code(), inst_word_len: SLOT_WORDS, debug_cmd: 0, debug_hint: 0 }
    }
    pub fn engine_class(&self) -> EngineClass {
        EngineClass::from_opcode(self.opcode)
    }
    /// `opcode & 0x1F`.
    pub fn base(&self) -> u8 {
        self.opcode & 0x1F
    }
    pub fn op(&self) -> Opcode {
        Opcode::from_code(self.opcode)
    }
    pub fn trace_mode(&self) -> TraceMode {
        match self.debug_cmd & 3 {
            0 => TraceMode::Off,
            1 => TraceMode::OnStart,
            2 => TraceMode::OnEnd,
            _ => TraceMode::Both,
        }
    }
    pub fn halt_en(&self) -> bool {
        self.debug_cmd & 0x80 != 0
    }
}

/// `wait_mode` at +4 (§2.2; §10 conflict 1: 0x04 is strictly greater, 0x05 is ≥). The
/// discriminants are the table (`WaitMode::from(u8)`, `u8::from(WaitMode)` are derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, num_enum::FromPrimitive, num_enum::IntoPrimitive)]
#[repr(u8)]
pub enum WaitMode {
    None = 0,
    /// 0x01: wait until `$S[idx] == value`.
    EqImm = 0x01,
    /// 0x04: wait until `$S[idx] > value` (strictly).
    GtImm = 0x04,
    /// 0x05: wait until `$S[idx] >= value`.
    GeImm = 0x05,
    /// 0x81..=0x85: the register-threshold variants ([`WaitMode::is_register`]; their
    /// semantics are not documented: decoded and kept, never evaluated).
    Reg81 = 0x81,
    Reg82 = 0x82,
    Reg83 = 0x83,
    Reg84 = 0x84,
    Reg85 = 0x85,
    /// Any other byte.
    #[num_enum(catch_all)]
    Other(u8),
}

impl WaitMode {
    pub fn from_code(c: u8) -> Self {
        Self::from(c)
    }
    pub fn code(self) -> u8 {
        self.into()
    }
    /// One of the register-threshold variants 0x81..=0x85.
    pub fn is_register(self) -> bool {
        matches!(self, WaitMode::Reg81 | WaitMode::Reg82 | WaitMode::Reg83 | WaitMode::Reg84 | WaitMode::Reg85)
    }
}

/// `update_mode` at +6 (§2.2, "selected" values; others kept as `Other`). The discriminants
/// are the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, num_enum::FromPrimitive, num_enum::IntoPrimitive)]
#[repr(u8)]
pub enum UpdateMode {
    None = 0,
    /// 0x03: increment `$S[idx]` when the read completes.
    IncRead = 0x03,
    /// 0x13: increment `$S[idx]` on full completion.
    IncComplete = 0x13,
    /// 0x15: add the immediate on completion.
    AddImmComplete = 0x15,
    /// 0x99: write a register value on completion.
    WrRegComplete = 0x99,
    #[num_enum(catch_all)]
    Other(u8),
}

impl UpdateMode {
    pub fn from_code(c: u8) -> Self {
        Self::from(c)
    }
    pub fn code(self) -> u8 {
        self.into()
    }
}

/// The 8-byte events block at slot +4 (NEURON_ISA dialect, §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Events {
    pub wait_mode: WaitMode,
    /// Semaphore index `$S[n]` waited on.
    pub wait_idx: u8,
    pub update_mode: UpdateMode,
    /// Semaphore index updated.
    pub update_idx: u8,
    /// Compare / operand value.
    pub semaphore_value: u32,
}

impl Default for Events {
    fn default() -> Self {
        Events::NONE
    }
}

impl Events {
    /// No wait, no update.
    pub const NONE: Events = Events {
        wait_mode: WaitMode::None,
        wait_idx: 0,
        update_mode: UpdateMode::None,
        update_idx: 0,
        semaphore_value: 0,
    };

    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        Events {
            wait_mode: WaitMode::from_code(b[4]),
            wait_idx: b[5],
            update_mode: UpdateMode::from_code(b[6]),
            update_idx: b[7],
            semaphore_value: u32_at(b, 8),
        }
    }
    pub fn to_bytes(&self) -> [u8; 8] {
        let v = self.semaphore_value.to_le_bytes();
        [self.wait_mode.code(), self.wait_idx, self.update_mode.code(), self.update_idx, v[0], v[1], v[2], v[3]]
    }
    /// Wait until `$S[idx] > value` (the fixture's `$S[n]>0`).
    pub fn wait_gt(idx: u8, value: u32) -> Self {
        Events { wait_mode: WaitMode::GtImm, wait_idx: idx, semaphore_value: value, ..Events::NONE }
    }
    /// Adds "increment `$S[idx]` on completion".
    pub fn inc_on_complete(self, idx: u8) -> Self {
        Events { update_mode: UpdateMode::IncComplete, update_idx: idx, ..self }
    }
}

macro_rules! opcodes {
    ($( $(#[$m:meta])* $var:ident = $code:literal => $name:literal, )*) => {
        /// The opcode catalog of §2.3 (byte values); unknown bytes are kept as `Raw`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Opcode {
            $( $(#[$m])* $var, )*
            Raw(u8),
        }

        impl Opcode {
            /// Every named opcode, in catalog order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$var,)*];

            pub fn from_code(c: u8) -> Self {
                match c {
                    $( $code => Opcode::$var, )*
                    c => Opcode::Raw(c),
                }
            }
            pub fn code(self) -> u8 {
                match self {
                    $( Opcode::$var => $code, )*
                    Opcode::Raw(c) => c,
                }
            }
            /// The producer's mnemonic, `None` for unknown opcodes.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( Opcode::$var => Some($name), )*
                    Opcode::Raw(_) => None,
                }
            }
            /// Looks a mnemonic up (exact, upper case).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $( $name => Some(Opcode::$var), )*
                    _ => None,
                }
            }
        }
    };
}

opcodes! {
    // PE
    Ldweights = 0x01 => "LDWEIGHTS",
    Matmul = 0x02 => "MATMUL",
    // ACT
    Activate = 0x21 => "ACTIVATE",
    ActivateQuantize = 0x22 => "ACTIVATE_QUANTIZE",
    // POOL
    TensorTensorArith = 0x41 => "TENSOR_TENSOR_ARITH",
    TensorReduceArith = 0x42 => "TENSOR_REDUCE_ARITH",
    TensorScalarArith = 0x43 => "TENSOR_SCALAR_ARITH",
    TsPtrArith = 0x44 => "TS_PTR_ARITH",
    Pool = 0x45 => "POOL",
    Copy = 0x46 => "COPY",
    Cast = 0x47 => "CAST",
    Reciprocal = 0x48 => "RECIPROCAL",
    Memset = 0x49 => "MEMSET",
    RegLoad = 0x4A => "REG_LOAD",
    RegStore = 0x4B => "REG_STORE",
    RegShuffle = 0x4C => "REG_SHUFFLE",
    Rng = 0x4D => "RNG",
    TensorCumulativeArith = 0x4E => "TENSOR_CUMULATIVE_ARITH",
    TtBitvec = 0x51 => "TT_BITVEC",
    TrBitvec = 0x52 => "TR_BITVEC",
    TsBitvec = 0x53 => "TS_BITVEC",
    TsPtrBitvec = 0x54 => "TS_PTR_BITVEC",
    TcBitvec = 0x5E => "TC_BITVEC",
    EmbeddingUpdate = 0x79 => "EMBEDDING_UPDATE",
    LoadPoolArgument = 0x7A => "LOAD_POOL_ARGUMENT",
    Dequant = 0x7B => "DEQUANT",
    /// 0x7C and 0x7D are both CROSS_LANE_REDUCE in §2.3; the second gets a `_2` suffix here.
    CrossLaneReduce = 0x7C => "CROSS_LANE_REDUCE",
    CrossLaneReduce2 = 0x7D => "CROSS_LANE_REDUCE_2",
    Iota = 0x7E => "IOTA",
    // ALL
    EventWait = 0x61 => "EVENT_WAIT",
    EventSet = 0x62 => "EVENT_SET",
    EventClear = 0x63 => "EVENT_CLEAR",
    SemaphoreTestAndSet = 0x65 => "SEMAPHORE_TEST_AND_SET",
    Nop = 0x68 => "NOP",
    Write = 0x69 => "WRITE",
    Notify = 0x6A => "NOTIFY",
    // SEQ control (class 5)
    EventSemaphore = 0xA0 => "EVENT_SEMAPHORE",
    /// sync / pause-halt.
    Sync = 0xA1 => "SYNC",
    /// MOVE / DRAIN (ETD: DRAIN barrier).
    Drain = 0xA2 => "DRAIN",
    /// The SEQ-class NOTIFY (0xA6); named apart from the ALL-class 0x6A.
    SeqNotify = 0xA6 => "SEQ_NOTIFY",
    Branch = 0xA8 => "BRANCH",
    TensorLoad = 0xA9 => "TENSOR_LOAD",
    TensorStore = 0xAA => "TENSOR_STORE",
    /// DMAMEMCPY (DGE DIRECT2D).
    DmaMemcpy = 0xB8 => "DMAMEMCPY",
    DmaMemcpy2 = 0xB9 => "DMA_MEMCPY2",
    DmaImmediate = 0xBA => "DMA_IMMEDIATE",
    DmaIndirect = 0xBB => "DMA_INDIRECT",
    DmaTranspose = 0xBD => "DMA_TRANSPOSE",
    Sb2sbCollective = 0xBF => "SB2SB_COLLECTIVE",
    // RT pseudo
    PseudoDmaTrigger = 0xC1 => "PSEUDO_DMA_TRIGGER",
    PseudoDmaRearm = 0xC2 => "PSEUDO_DMA_REARM",
    PseudoDmaBarrier = 0xC3 => "PSEUDO_DMA_BARRIER",
    PseudoDmaMemcpy = 0xC4 => "PSEUDO_DMA_MEMCPY",
    PseudoSemaphoreSet = 0xC5 => "PSEUDO_SEMAPHORE_SET",
    PseudoLoadActFuncSet = 0xC6 => "PSEUDO_LOAD_ACT_FUNC_SET",
    PseudoSetTransferAdjust = 0xC7 => "PSEUDO_SET_TRANSFER_ADJUST",
    /// 0xC8: the fixture / newer dialect's name; the ulib header calls it PSEUDO_READ_VAR_ADDR
    /// (§10 conflict 14). The encoding pinned here is the collective one of §2.4.
    PseudoTriggerCollective = 0xC8 => "PSEUDO_TRIGGER_COLLECTIVE",
    PseudoEmbeddingUpdate = 0xCA => "PSEUDO_EMBEDDING_UPDATE",
    SendRecv = 0xCB => "SENDRECV",
    PseudoFunctionCall = 0xD3 => "PSEUDO_FUNCTION_CALL",
    PseudoDmaDirect2d = 0xD4 => "PSEUDO_DMA_DIRECT2D",
    PseudoSyncBarrier = 0xD5 => "PSEUDO_SYNC_BARRIER",
    PseudoCoreBarrier = 0xD8 => "PSEUDO_CORE_BARRIER",
    TriggerCollective2 = 0xD9 => "TRIGGER_COLLECTIVE2",
    TriggerCollectiveExt = 0xDA => "TRIGGER_COLLECTIVE_EXT",
    PseudoCurProcessingRankId = 0xDB => "PSEUDO_CUR_PROCESSING_RANK_ID",
    PseudoExit = 0xDF => "PSEUDO_EXIT",
    // SIM
    SimDmaCopy = 0xEB => "SIM_DMA_COPY",
    SimWrfile = 0xEC => "SIM_WRFILE",
    SimWrnpy = 0xED => "SIM_WRNPY",
    SimRdnpy = 0xEE => "SIM_RDNPY",
    SimMemcpy = 0xEF => "SIM_MEMCPY",
    // extended POOL / DGE
    ExtendedInst = 0xF0 => "EXTENDED_INST",
    DmaGatherTranspose = 0xF1 => "DMA_GATHER_TRANSPOSE",
    NonzeroWithCount = 0xF2 => "NONZERO_WITH_COUNT",
    Invalid = 0xFF => "INVALID",
}

impl Opcode {
    pub fn engine_class(self) -> EngineClass {
        EngineClass::from_opcode(self.code())
    }
    /// The mnemonic, or `OP_0xNN` for unknown opcodes.
    pub fn mnemonic(self) -> String {
        match self.name() {
            Some(n) => n.to_string(),
            None => format!("OP_{:#04x}", self.code()),
        }
    }
}

/// A slot that is header + events + an undocumented 52-byte payload (+0x0C..0x40). Used for
/// EVENT_SEMAPHORE (0xA0), NOP, NOTIFY (0x6A/0xA6), WRITE, the semaphore/event ops and
/// EXTENDED_INST, whose operand layouts the public sources do not give (docs/facts/hardware.md §2.4, §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventsOnly {
    pub header: SlotHeader,
    pub events: Events,
    /// Bytes +0x0C..+0x40, kept verbatim.
    pub payload: [u8; 52],
}

impl EventsOnly {
    pub fn new(op: Opcode, events: Events) -> Self {
        EventsOnly { header: SlotHeader::new(op), events, payload: [0; 52] }
    }
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        EventsOnly { header: SlotHeader::decode(b), events: Events::decode(b), payload: arr(b, 12) }
    }
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        put(&mut b, 0, &self.header.to_bytes());
        put(&mut b, 4, &self.events.to_bytes());
        put(&mut b, 12, &self.payload);
        b
    }
}

/// PSEUDO_DMA_TRIGGER (0xC1), 8-byte-events dialect (§2.4, SEQ/FR/CC): queue name `char[32]` at
/// +0x0C, use_raw_count u32 at +0x2C, block_id / count u32 at +0x30, reserved +0x34..+0x40.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaTrigger {
    pub header: SlotHeader,
    pub events: Events,
    /// NUL-padded DMA queue name (must be non-empty to be valid).
    pub queue_name: [u8; RT_MAX_NAME],
    /// 0 → `block_id_or_count` is a block id; otherwise it is a raw descriptor count.
    pub use_raw_count: u32,
    pub block_id_or_count: u32,
    pub reserved: [u8; 12],
}

impl DmaTrigger {
    /// A trigger of block `block_id` on `queue` (name truncated to 31 bytes).
    pub fn new(events: Events, queue: &str, block_id: u32) -> Self {
        let mut queue_name = [0u8; RT_MAX_NAME];
        let n = queue.len().min(RT_MAX_NAME - 1);
        queue_name[..n].copy_from_slice(&queue.as_bytes()[..n]);
        DmaTrigger {
            header: SlotHeader::new(Opcode::PseudoDmaTrigger),
            events,
            queue_name,
            use_raw_count: 0,
            block_id_or_count: block_id,
            reserved: [0; 12],
        }
    }
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        DmaTrigger {
            header: SlotHeader::decode(b),
            events: Events::decode(b),
            queue_name: arr(b, 0x0C),
            use_raw_count: u32_at(b, 0x2C),
            block_id_or_count: u32_at(b, 0x30),
            reserved: arr(b, 0x34),
        }
    }
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        put(&mut b, 0, &self.header.to_bytes());
        put(&mut b, 4, &self.events.to_bytes());
        put(&mut b, 0x0C, &self.queue_name);
        put(&mut b, 0x2C, &self.use_raw_count.to_le_bytes());
        put(&mut b, 0x30, &self.block_id_or_count.to_le_bytes());
        put(&mut b, 0x34, &self.reserved);
        b
    }
    /// The queue name up to the first NUL (lossy UTF-8).
    pub fn queue(&self) -> String {
        let end = self.queue_name.iter().position(|&c| c == 0).unwrap_or(RT_MAX_NAME);
        String::from_utf8_lossy(&self.queue_name[..end]).into_owned()
    }
    /// The static validity check of §2.4: opcode, word length 16, non-empty name, known modes.
    pub fn is_valid(&self) -> bool {
        self.header.opcode == Opcode::PseudoDmaTrigger.code()
            && self.header.inst_word_len == SLOT_WORDS
            && self.queue_name[0] != 0
            && !matches!(self.events.wait_mode, WaitMode::Other(_))
            && !matches!(self.events.update_mode, UpdateMode::Other(_))
    }
}

/// Collective ALU op at +0x0C of PSEUDO_TRIGGER_COLLECTIVE (§2.4).
pub mod coll_op {
    pub const ADD: u8 = 0x04;
    pub const MAX: u8 = 0x08;
}
/// DTYPE codes used by PSEUDO_TRIGGER_COLLECTIVE (§2.4).
pub mod coll_dtype {
    pub const BF16: u8 = 0x06;
    pub const FP16: u8 = 0x07;
    pub const INT32: u8 = 0x08;
    pub const FP32: u8 = 0x0A;
}
/// Collective types (`ctype` at +0x20, §2.4).
pub mod coll_type {
    pub const ALL_REDUCE: u8 = 0x01;
}

/// PSEUDO_TRIGGER_COLLECTIVE (0xC8, newer dialect) (§2.4, SEQ/FR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TriggerCollective {
    pub header: SlotHeader,
    pub events: Events,
    /// +0x0C ALU op ([`coll_op`]).
    pub op: u8,
    /// +0x0D dtype ([`coll_dtype`]).
    pub dtype: u8,
    /// +0x0E replica group.
    pub group_id: u16,
    /// +0x10 input var_id.
    pub input_tensor_id: u32,
    /// +0x14 output var_id.
    pub output_tensor_id: u32,
    /// +0x18.
    pub num_elements: u64,
    /// +0x20 collective type ([`coll_type`]).
    pub ctype: u8,
    /// +0x21..+0x30.
    pub reserved: [u8; 15],
    /// +0x30.
    pub src_offset_elems: u64,
    /// +0x38.
    pub dst_offset_elems: u64,
}

impl TriggerCollective {
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        TriggerCollective {
            header: SlotHeader::decode(b),
            events: Events::decode(b),
            op: b[0x0C],
            dtype: b[0x0D],
            group_id: u16_at(b, 0x0E),
            input_tensor_id: u32_at(b, 0x10),
            output_tensor_id: u32_at(b, 0x14),
            num_elements: u64_at(b, 0x18),
            ctype: b[0x20],
            reserved: arr(b, 0x21),
            src_offset_elems: u64_at(b, 0x30),
            dst_offset_elems: u64_at(b, 0x38),
        }
    }
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        put(&mut b, 0, &self.header.to_bytes());
        put(&mut b, 4, &self.events.to_bytes());
        b[0x0C] = self.op;
        b[0x0D] = self.dtype;
        put(&mut b, 0x0E, &self.group_id.to_le_bytes());
        put(&mut b, 0x10, &self.input_tensor_id.to_le_bytes());
        put(&mut b, 0x14, &self.output_tensor_id.to_le_bytes());
        put(&mut b, 0x18, &self.num_elements.to_le_bytes());
        b[0x20] = self.ctype;
        put(&mut b, 0x21, &self.reserved);
        put(&mut b, 0x30, &self.src_offset_elems.to_le_bytes());
        put(&mut b, 0x38, &self.dst_offset_elems.to_le_bytes());
        b
    }
}

/// One leg (source or destination) of a DMAMEMCPY / DIRECT2D slot (§2.4, DGEM/DRT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dma2dLeg {
    /// ADDR8 (high byte carries the address-mode marker, mask 0xFC; PSEUDO_ADDR8 sets var-id bit 0x10).
    pub start_addr: u64,
    pub step_elem: [i32; 2],
    pub num_elem: [u16; 2],
    /// 0 means 64 KiB.
    pub elem_size: u16,
}

impl Dma2dLeg {
    fn decode(b: &[u8], off: usize) -> Self {
        Dma2dLeg {
            start_addr: u64_at(b, off),
            step_elem: [u32_at(b, off + 8) as i32, u32_at(b, off + 12) as i32],
            num_elem: [u16_at(b, off + 16), u16_at(b, off + 18)],
            elem_size: u16_at(b, off + 20),
        }
    }
    fn encode(&self, b: &mut [u8], off: usize) {
        put(b, off, &self.start_addr.to_le_bytes());
        put(b, off + 8, &self.step_elem[0].to_le_bytes());
        put(b, off + 12, &self.step_elem[1].to_le_bytes());
        put(b, off + 16, &self.num_elem[0].to_le_bytes());
        put(b, off + 18, &self.num_elem[1].to_le_bytes());
        put(b, off + 20, &self.elem_size.to_le_bytes());
    }
    /// Bytes of one element (`elem_size` 0 = 64 KiB).
    pub fn elem_bytes(&self) -> u64 {
        if self.elem_size == 0 {
            65536
        } else {
            u64::from(self.elem_size)
        }
    }
    /// Bytes moved by this leg (`elem_size` 0 = 64 KiB).
    pub fn total_bytes(&self) -> u64 {
        self.elem_bytes() * u64::from(self.num_elem[0]) * u64::from(self.num_elem[1])
    }
    /// The byte range `[lo, hi)` the leg touches, relative to its start address: every element
    /// `i·step0 + j·step1` (`i < n0`, `j < n1`) of [`Self::elem_bytes`] bytes, steps of either
    /// sign, exactly (in i128, so nothing wraps). An empty leg touches nothing (`lo == hi == 0`).
    pub fn span(&self) -> (i128, i128) {
        if self.num_elem[0] == 0 || self.num_elem[1] == 0 {
            return (0, 0);
        }
        let ext = |n: u16, s: i32| {
            let far = (i128::from(n) - 1) * i128::from(s);
            (far.min(0), far.max(0))
        };
        let (a0, b0) = ext(self.num_elem[0], self.step_elem[0]);
        let (a1, b1) = ext(self.num_elem[1], self.step_elem[1]);
        let es = i128::from(self.elem_bytes());
        ((a0 + a1) * es, (b0 + b1 + 1) * es)
    }
}

/// DMAMEMCPY / DIRECT2D (0xB8) and PSEUDO_DMA_DIRECT2D (0xD4) (§2.4, DGEM/DRT): dma_configs @12
/// (priority_class:3), semaphore @13, sem_increment @14, compute_op (0xB8) or dge_op (0xD4) @15,
/// src leg @16..38, src_bound_reg @38, dst_bound_reg @39, dst leg @40..62, in_dtype @62,
/// out_dtype @63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dma2d {
    pub header: SlotHeader,
    pub events: Events,
    /// bits `[2:0]` priority_class (0..4), bits `[7:3]` reserved.
    pub dma_configs: u8,
    pub semaphore: u8,
    pub sem_increment: u8,
    /// 0xB8: compute_op (NONE 0, ADD 1, MULTIPLY 2, MAX 3, MIN 4).
    /// 0xD4: dge_op (DIRECT2D 0, INDIRECT1D 1, TRANSPOSE 2, GATHER_TRANSPOSE 3).
    pub op: u8,
    pub src: Dma2dLeg,
    /// BOUND_CHECK_REG: bc_reg:6, bc_disable_oob_error_notif:1, bc_enabled:1.
    pub src_bound_reg: u8,
    pub dst_bound_reg: u8,
    pub dst: Dma2dLeg,
    pub in_dtype: u8,
    pub out_dtype: u8,
}

impl Dma2d {
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        Dma2d {
            header: SlotHeader::decode(b),
            events: Events::decode(b),
            dma_configs: b[12],
            semaphore: b[13],
            sem_increment: b[14],
            op: b[15],
            src: Dma2dLeg::decode(b, 16),
            src_bound_reg: b[38],
            dst_bound_reg: b[39],
            dst: Dma2dLeg::decode(b, 40),
            in_dtype: b[62],
            out_dtype: b[63],
        }
    }
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        put(&mut b, 0, &self.header.to_bytes());
        put(&mut b, 4, &self.events.to_bytes());
        b[12] = self.dma_configs;
        b[13] = self.semaphore;
        b[14] = self.sem_increment;
        b[15] = self.op;
        self.src.encode(&mut b, 16);
        b[38] = self.src_bound_reg;
        b[39] = self.dst_bound_reg;
        self.dst.encode(&mut b, 40);
        b[62] = self.in_dtype;
        b[63] = self.out_dtype;
        b
    }
    pub fn priority_class(&self) -> u8 {
        self.dma_configs & 7
    }
}

/// One decoded 64-byte slot. `decode` never fails; `encode(decode(b)) == b` for every `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// 0xC1.
    DmaTrigger(DmaTrigger),
    /// 0xC8.
    TriggerCollective(TriggerCollective),
    /// 0xA0.
    EventSemaphore(EventsOnly),
    /// 0xB8.
    DmaMemcpy(Dma2d),
    /// 0xD4.
    PseudoDmaDirect2d(Dma2d),
    /// 0x68.
    Nop(EventsOnly),
    /// 0x6A or 0xA6.
    Notify(EventsOnly),
    /// 0x69.
    Write(EventsOnly),
    /// EVENT_WAIT 0x61, EVENT_SET 0x62, EVENT_CLEAR 0x63, SEMAPHORE_TEST_AND_SET 0x65.
    Semaphore(EventsOnly),
    /// 0xF0 (custom-op entry; the spec variant's position is not given by §2.4).
    ExtendedInst(EventsOnly),
    /// Any other opcode: header and events decoded, all 64 bytes kept.
    Raw { header: SlotHeader, events: Events, bytes: [u8; SLOT_BYTES] },
}

impl Instruction {
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        match Opcode::from_code(b[0]) {
            Opcode::PseudoDmaTrigger => Instruction::DmaTrigger(DmaTrigger::decode(b)),
            Opcode::PseudoTriggerCollective => Instruction::TriggerCollective(TriggerCollective::decode(b)),
            Opcode::EventSemaphore => Instruction::EventSemaphore(EventsOnly::decode(b)),
            Opcode::DmaMemcpy => Instruction::DmaMemcpy(Dma2d::decode(b)),
            Opcode::PseudoDmaDirect2d => Instruction::PseudoDmaDirect2d(Dma2d::decode(b)),
            Opcode::Nop => Instruction::Nop(EventsOnly::decode(b)),
            Opcode::Notify | Opcode::SeqNotify => Instruction::Notify(EventsOnly::decode(b)),
            Opcode::Write => Instruction::Write(EventsOnly::decode(b)),
            Opcode::EventWait | Opcode::EventSet | Opcode::EventClear | Opcode::SemaphoreTestAndSet => {
                Instruction::Semaphore(EventsOnly::decode(b))
            }
            Opcode::ExtendedInst => Instruction::ExtendedInst(EventsOnly::decode(b)),
            _ => Instruction::Raw { header: SlotHeader::decode(b), events: Events::decode(b), bytes: *b },
        }
    }

    /// Decodes a slice that may be shorter than 64 bytes (zero-padded) — for callers holding
    /// unaligned tails; the loader itself rejects such streams.
    pub fn decode_slice(b: &[u8]) -> Self {
        let mut a = [0u8; SLOT_BYTES];
        let n = b.len().min(SLOT_BYTES);
        a[..n].copy_from_slice(&b[..n]);
        Self::decode(&a)
    }

    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        match self {
            Instruction::DmaTrigger(x) => x.encode(),
            Instruction::TriggerCollective(x) => x.encode(),
            Instruction::DmaMemcpy(x) | Instruction::PseudoDmaDirect2d(x) => x.encode(),
            Instruction::EventSemaphore(x)
            | Instruction::Nop(x)
            | Instruction::Notify(x)
            | Instruction::Write(x)
            | Instruction::Semaphore(x)
            | Instruction::ExtendedInst(x) => x.encode(),
            Instruction::Raw { header, events, bytes } => {
                let mut b = *bytes;
                put(&mut b, 0, &header.to_bytes());
                put(&mut b, 4, &events.to_bytes());
                b
            }
        }
    }

    pub fn header(&self) -> SlotHeader {
        match self {
            Instruction::DmaTrigger(x) => x.header,
            Instruction::TriggerCollective(x) => x.header,
            Instruction::DmaMemcpy(x) | Instruction::PseudoDmaDirect2d(x) => x.header,
            Instruction::EventSemaphore(x)
            | Instruction::Nop(x)
            | Instruction::Notify(x)
            | Instruction::Write(x)
            | Instruction::Semaphore(x)
            | Instruction::ExtendedInst(x) => x.header,
            Instruction::Raw { header, .. } => *header,
        }
    }

    pub fn events(&self) -> Events {
        match self {
            Instruction::DmaTrigger(x) => x.events,
            Instruction::TriggerCollective(x) => x.events,
            Instruction::DmaMemcpy(x) | Instruction::PseudoDmaDirect2d(x) => x.events,
            Instruction::EventSemaphore(x)
            | Instruction::Nop(x)
            | Instruction::Notify(x)
            | Instruction::Write(x)
            | Instruction::Semaphore(x)
            | Instruction::ExtendedInst(x) => x.events,
            Instruction::Raw { events, .. } => *events,
        }
    }

    pub fn opcode(&self) -> Opcode {
        self.header().op()
    }
}

#[cfg(test)]
mod tests;
