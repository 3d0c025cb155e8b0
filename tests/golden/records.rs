// Golden byte vectors of the device records, written by hand from the layout tables in
// docs/records.md (each vector is also printed there). Included (`include!`) by the tests of
// the simulator (its records must be exactly these bytes), of the runtime (its decoders must
// yield exactly these values) and of csr-maps. Plain data: no codec code may live here.

/// A TPB error record and the values docs/records.md says it carries.
pub struct GoldenError {
    pub name: &'static str,
    pub bytes: [u8; 16],
    pub error_id: u8,
    /// Error mask (record bits 23:8).
    pub mask: u16,
    pub ntype: u8,
    pub phase: bool,
    /// Sequencer metadata: block id (= engine in the simulator's model), pc, info.
    pub block_id: u8,
    pub pc: u16,
    pub info: u8,
    pub timestamp: u64,
    /// The status libnrt's decode gives (0 = none).
    pub status: u32,
}

/// An INFER_STATUS record and its described values.
pub struct GoldenInfer {
    pub name: &'static str,
    pub bytes: [u8; 16],
    /// ISA line (20 bits: +0 u16, low nibble of +2).
    pub line: u32,
    pub hint: u8,
    /// notific_type tag (header bits 4:0).
    pub tag: u8,
    pub sw_overflow: bool,
    pub phase: bool,
    pub sub_id: u16,
    pub subtype: u16,
    pub timestamp: u64,
}

pub const GOLDEN_ERRORS: &[GoldenError] = &[
    // FP_NAN from DVE (engine 3) at pc 2, injected (info 0x10), NaN mask 0x0001.
    GoldenError {
        name: "error.fp_nan.dve",
        bytes: [0x01, 0x01, 0x00, 0x83, 0x23, 0x00, 0x10, 0x00, 0x34, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        error_id: 1,
        mask: 0x0001,
        ntype: 0x03,
        phase: true,
        block_id: 3,
        pc: 2,
        info: 0x10,
        timestamp: 0x1234,
        status: 1003,
    },
    // FP_NAN from PE (engine 0) at pc 0: the engine index must not be read as the mask.
    GoldenError {
        name: "error.fp_nan.pe",
        bytes: [0x01, 0x01, 0x00, 0x83, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00],
        error_id: 1,
        mask: 0x0001,
        ntype: 0x03,
        phase: true,
        block_id: 0,
        pc: 0,
        info: 0x10,
        timestamp: 0x1_0000_0000,
        status: 1003,
    },
    // FP_NAN whose mask has only ignored bits (0x7E00): no status.
    GoldenError {
        name: "error.fp_nan.ignored",
        bytes: [0x01, 0x00, 0x7E, 0x03, 0x01, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        error_id: 1,
        mask: 0x7E00,
        ntype: 0x03,
        phase: false,
        block_id: 1,
        pc: 0,
        info: 0x10,
        timestamp: 0,
        status: 0,
    },
    // SEQUENCER_FATAL from POOL (engine 2) at pc 0x123, unknown opcode (info 0x03).
    GoldenError {
        name: "error.seq_fatal.pool",
        bytes: [0x0A, 0x00, 0x00, 0x83, 0x32, 0x12, 0x03, 0x00, 0xEF, 0xBE, 0xAD, 0xDE, 0x00, 0x00, 0x00, 0x00],
        error_id: 10,
        mask: 0,
        ntype: 0x03,
        phase: true,
        block_id: 2,
        pc: 0x123,
        info: 0x03,
        timestamp: 0xDEAD_BEEF,
        status: 1004,
    },
    // MEMORY_ERROR with mask bits outside 0xFD6B: transient → 1004.
    GoldenError {
        name: "error.memory.transient",
        bytes: [0x04, 0x94, 0x02, 0x83, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        error_id: 4,
        mask: 0x0294,
        ntype: 0x03,
        phase: true,
        block_id: 4,
        pc: 0,
        info: 0,
        timestamp: 0,
        status: 1004,
    },
    // NC memory ECC record (notific type 0x01, modeled), uncorrectable (mask bit 0), from ACT
    // (engine 1) at pc 0, injected: 1202 whatever the error id byte.
    GoldenError {
        name: "error.ecc.uncorrectable.act",
        bytes: [0x00, 0x01, 0x00, 0x81, 0x01, 0x00, 0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        error_id: 0,
        mask: 0x0001,
        ntype: 0x01,
        phase: true,
        block_id: 1,
        pc: 0,
        info: 0x10,
        timestamp: 0x100,
        status: 1202,
    },
    // NC memory ECC record, corrected (mask bit 0 clear), error id byte 1 (ignored): no status.
    GoldenError {
        name: "error.ecc.corrected",
        bytes: [0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        error_id: 1,
        mask: 0,
        ntype: 0x01,
        phase: false,
        block_id: 0,
        pc: 0,
        info: 0,
        timestamp: 0,
        status: 0,
    },
];

pub const GOLDEN_INFERS: &[GoldenInfer] = &[
    // PE INST_START (type 0x04) of the slot at pc 5.
    GoldenInfer {
        name: "infer.start.pe",
        bytes: [0x05, 0x00, 0x00, 0x84, 0x00, 0x00, 0x02, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        line: 5,
        hint: 0,
        tag: 0x04,
        sw_overflow: false,
        phase: true,
        sub_id: 0,
        subtype: 2,
        timestamp: 0x10,
    },
    // ACT INST_END (type 0x09) at pc 7.
    GoldenInfer {
        name: "infer.end.act",
        bytes: [0x07, 0x00, 0x00, 0x89, 0x00, 0x00, 0x03, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        line: 7,
        hint: 0,
        tag: 0x09,
        sw_overflow: false,
        phase: true,
        sub_id: 0,
        subtype: 3,
        timestamp: 0x100,
    },
    // PE EXPLICIT (0x06) CUSTOM record, sub-id 2 (OOB scatter), ISA line 0x12345.
    GoldenInfer {
        name: "infer.custom.oob",
        bytes: [0x45, 0x23, 0x01, 0x86, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        line: 0x12345,
        hint: 0,
        tag: 0x06,
        sw_overflow: false,
        phase: true,
        sub_id: 2,
        subtype: 6,
        timestamp: 0,
    },
    // SP (engine 4) END written after the ring dropped records: sw_overflow bit 5.
    GoldenInfer {
        name: "infer.end.sp.overflowed",
        bytes: [0x00, 0x00, 0x00, 0xB5, 0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        line: 0,
        hint: 0,
        tag: 0x15,
        sw_overflow: true,
        phase: true,
        sub_id: 0,
        subtype: 3,
        timestamp: 1,
    },
    // DVE CUSTOM debug value (sub-id 6) with the drain-to-subscriber hint (1 in +2's high nibble).
    GoldenInfer {
        name: "infer.custom.debug.drain",
        bytes: [0x2A, 0x00, 0x10, 0x92, 0x06, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        line: 0x2A,
        hint: 1,
        tag: 0x12,
        sw_overflow: false,
        phase: true,
        sub_id: 6,
        subtype: 6,
        timestamp: 0,
    },
];

/// DGE mailbox entries: (name, little-endian bytes, reserved, priority, channel bitmask).
pub const GOLDEN_DGE: &[(&str, [u8; 4], u8, u8, u16)] = &[
    ("dge.reset", [0x00, 0xFF, 0xFF, 0xFF], 0, 0xFF, 0xFFFF),
    ("dge.prio2.ch4_7", [0x00, 0x02, 0xF0, 0x00], 0, 2, 0x00F0),
    ("dge.prio5.ch0_3_8_11", [0x00, 0x05, 0x0F, 0x0F], 0, 5, 0x0F0F),
];

/// A FW-IO request header (8 bytes: dword0 {seq, cmd, size}, dword1 CRC-32C over the header
/// with the CRC field zero, then the payload) and its described values.
pub struct GoldenFwio {
    pub name: &'static str,
    pub bytes: [u8; 8],
    pub seq: u8,
    pub cmd: u8,
    pub size: u16,
    pub payload: &'static [u8],
}

pub const GOLDEN_FWIO: &[GoldenFwio] = &[GoldenFwio {
    name: "fwio.get_data",
    bytes: [0x03, 0x04, 0x0C, 0x00, 0x47, 0xE7, 0x18, 0x23],
    seq: 3,
    cmd: 4,
    size: 12,
    payload: &[0x11, 0x22, 0x33, 0x44],
}];

/// Hex of 16/8/4 bytes as docs/records.md prints them (`01 01 00 83 …`).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect::<Vec<_>>().join(" ")
}
