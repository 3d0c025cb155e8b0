//! The 16-byte TPB error record (`NEURON_ISA_TPB_ERROR_NOTIFICATION`, docs/facts/libnrt.md §5.5).
//!
//! ```text
//! +0 error_id u8 | +1 metadata_lo u16 | +3 header (notific_type ERROR 0x03 / TPB_ERROR 0x1F, overflow, phase)
//! +4 metadata_hi u32 (sequencer: block_id:4, program_counter:12, info:8 — bit order modeled LSB-first)
//! +8 timestamp u64
//! ```

/// MEMORY_ERROR (id 4) records: the bits of the record's mask (`metadata_lo`, record bits
/// 23:8) that make libnrt classify the record as a memory error rather than transient
/// (libnrt `v2_error_get_infer_error_subtype`, docs/facts/libnrt-runtime-model.md §A.4.5).
pub const MEMORY_ERROR_MASK: u16 = 0xFD6B;
/// FP_NAN (id 1) records: mask bits libnrt always ignores when deciding whether the record
/// is a numerical error (`v2_error_get_infer_error_subtype`, docs/facts/libnrt-runtime-model.md §A.4.5).
pub const NAN_IGNORED_MASK: u16 = 0x7E00;

/// `NEURON_ISA_TPB_ERROR_TYPE` (docs/facts/libnrt.md §5.5). The discriminants are the table:
/// `ErrorId::from(u8)` and `u8::from(ErrorId)` are derived from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, num_enum::FromPrimitive, num_enum::IntoPrimitive)]
#[repr(u8)]
pub enum ErrorId {
    FpUnderflow = 0,
    FpNan = 1,
    FpInf = 2,
    FpOverflow = 3,
    MemoryError = 4,
    FakeError = 5,
    SemaphoreError = 6,
    EventError = 7,
    PsumCollision = 8,
    SequencerNonfatal = 9,
    SequencerFatal = 10,
    /// 11 and above (libnrt's decoder accepts ≤ 11).
    #[num_enum(catch_all)]
    Other(u8),
}

impl ErrorId {
    /// Decode (total).
    pub fn from_u8(v: u8) -> Self {
        Self::from(v)
    }
    /// Encode.
    pub fn to_u8(self) -> u8 {
        self.into()
    }
}

/// A TPB error record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpbErrorRecord {
    pub error_id: u8,
    pub metadata_lo: u16,
    /// Header byte: notific_type (ERROR 0x03 or TPB_ERROR 0x1F) + overflow and phase bits.
    pub header: u8,
    pub metadata_hi: u32,
    pub timestamp: u64,
}

impl TpbErrorRecord {
    /// Typed error id.
    pub fn id(&self) -> ErrorId {
        ErrorId::from_u8(self.error_id)
    }
    /// Sequencer metadata: block id (modeled bits `[3:0]` of metadata_hi).
    pub fn block_id(&self) -> u8 {
        (self.metadata_hi & 0xF) as u8
    }
    /// Sequencer metadata: program counter (modeled bits `[15:4]`).
    pub fn program_counter(&self) -> u16 {
        ((self.metadata_hi >> 4) & 0xFFF) as u16
    }
    /// Sequencer metadata: info byte (modeled bits `[23:16]`).
    pub fn info(&self) -> u8 {
        (self.metadata_hi >> 16) as u8
    }
    /// Pack sequencer metadata.
    pub fn seq_metadata(block_id: u8, pc: u16, info: u8) -> u32 {
        (block_id as u32 & 0xF) | ((pc as u32 & 0xFFF) << 4) | ((info as u32) << 16)
    }
    /// Encode to 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = self.error_id;
        b[1..3].copy_from_slice(&self.metadata_lo.to_le_bytes());
        b[3] = self.header;
        b[4..8].copy_from_slice(&self.metadata_hi.to_le_bytes());
        b[8..16].copy_from_slice(&self.timestamp.to_le_bytes());
        b
    }
    /// Decode 16 bytes (total).
    pub fn decode(b: &[u8; 16]) -> Self {
        Self {
            error_id: b[0],
            metadata_lo: u16::from_le_bytes([b[1], b[2]]),
            header: b[3],
            metadata_hi: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            timestamp: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned() {
        assert_eq!(ErrorId::SequencerFatal.to_u8(), 10);
        assert_eq!(ErrorId::from_u8(1), ErrorId::FpNan);
        let r = TpbErrorRecord {
            error_id: 10,
            metadata_lo: 0xABCD,
            header: 0x83,
            metadata_hi: TpbErrorRecord::seq_metadata(3, 0x123, 7),
            timestamp: 9,
        };
        let b = r.encode();
        assert_eq!(b[0], 10);
        assert_eq!(b[3], 0x83);
        assert_eq!(TpbErrorRecord::decode(&b), r);
        assert_eq!((r.block_id(), r.program_counter(), r.info()), (3, 0x123, 7));
    }

    #[test]
    fn ids_0_to_10_are_named_and_the_rest_kept() {
        let named: Vec<u8> = (0..=u8::MAX).filter(|&v| !matches!(ErrorId::from_u8(v), ErrorId::Other(_))).collect();
        assert_eq!(named, (0..=10).collect::<Vec<u8>>());
        assert_eq!(ErrorId::from_u8(4), ErrorId::MemoryError);
        assert_eq!(ErrorId::from_u8(11), ErrorId::Other(11));
    }

    proptest! {
        #[test]
        fn total(b in proptest::array::uniform16(any::<u8>())) {
            let r = TpbErrorRecord::decode(&b);
            prop_assert_eq!(r.encode(), b);
            prop_assert_eq!(ErrorId::from_u8(b[0]).to_u8(), b[0]);
        }
    }
}
