//! The runtime's own decoders of the records the device writes (docs/records.md). libnrt reads
//! these 16-byte entries by position rather than through the ISA bit-field structs
//! (docs/facts/libnrt-runtime-model.md §B.3), and so does this module: it does not call the
//! encoders the simulator uses, so a device and a driver that disagree on a field's meaning
//! cannot both pass the golden-vector tests (`runtime/tests/golden.rs`). The decoded values are
//! carried in the plain `csr_maps::formats` structs the completion engine consumes. The
//! decoders are `#[inline]`: the harvest calls them per record from another module (another
//! codegen unit), where a call per record was measurable (`bench exec`, docs/performance.md).

use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::le::{u16_at, u32_at, u64_at};
use csr_maps::formats::notify::InferStatus;

/// Record size in bytes (one NQ entry).
pub const RECORD_BYTES: usize = 16;

/// The header byte (+3): notific_type bits 4:0, software overflow bit 5, hardware overflow
/// bit 6, phase bit 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub ntype: u8,
    pub sw_overflow: bool,
    pub hw_overflow: bool,
    pub phase: bool,
}

/// Decode the header byte.
#[inline]
pub fn header(byte: u8) -> Header {
    Header {
        ntype: byte & 0x1F,
        sw_overflow: (byte >> 5) & 1 == 1,
        hw_overflow: (byte >> 6) & 1 == 1,
        phase: (byte >> 7) & 1 == 1,
    }
}

/// An INFER_STATUS entry as libnrt's completion engine reads it: line u16 @0, line bits 19:16
/// in the low nibble @2 and the debug hint in its high nibble, tag `& 0x1F` @3, custom sub-id
/// u16 @4, subtype u16 @6, device timestamp u64 @8.
#[inline]
pub fn infer_status(b: &[u8; RECORD_BYTES]) -> InferStatus {
    let h = header(b[3]);
    InferStatus {
        line: u16_at(b, 0),
        line_hi: b[2] & 0x0F,
        hint: b[2] >> 4,
        tag: h.ntype,
        sw_overflow: h.sw_overflow,
        hw_overflow: h.hw_overflow,
        phase: h.phase,
        sub_id: u16_at(b, 4),
        subtype: u16_at(b, 6),
        timestamp: u64_at(b, 8),
    }
}

/// A TPB error-ring entry: `error_id = rec & 0xFF`, the error mask `(rec >> 8) as u16`
/// (libnrt's `v2_error_get_infer_error_subtype`), the header @3, the sequencer metadata u32 @4
/// and the timestamp u64 @8.
#[inline]
pub fn error_record(b: &[u8; RECORD_BYTES]) -> TpbErrorRecord {
    let lo = u64_at(b, 0);
    TpbErrorRecord {
        error_id: (lo & 0xFF) as u8,
        metadata_lo: ((lo >> 8) & 0xFFFF) as u16,
        header: b[3],
        metadata_hi: u32_at(b, 4),
        timestamp: u64_at(b, 8),
    }
}

/// The sequencer metadata of an error record (@4, u32 LE): block id bits 3:0 (the engine, in
/// the simulator's model), program counter bits 15:4, info byte bits 23:16 (docs/records.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqMetadata {
    pub block_id: u8,
    pub program_counter: u16,
    pub info: u8,
}

/// Split the sequencer metadata word.
pub fn seq_metadata(metadata_hi: u32) -> SeqMetadata {
    SeqMetadata {
        block_id: (metadata_hi & 0xF) as u8,
        program_counter: ((metadata_hi >> 4) & 0xFFF) as u16,
        info: ((metadata_hi >> 16) & 0xFF) as u8,
    }
}
