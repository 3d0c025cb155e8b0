//! The 16-byte notification record, in its two views (docs/facts/libnrt.md §5.3, §5.4):
//! the generic ISA view and libnrt's positional INFER_STATUS decode.
//!
//! ```text
//! ISA view:        +0 metadata_0 u16 | +2 metadata_1 u8 | +3 header {type:5, sw_ovf:1, hw_ovf:1, phase:1}
//!                  +4 metadata_2 u32 | +8 timestamp u64 (ps)
//! INFER_STATUS:    +0 line u16 | +2 hint (>>4) | +3 tag (&0x1F) | +4 sub-id u16 | +6 subtype u16 | +8 timestamp u64
//! ```

/// Record size in bytes.
pub const RECORD_BYTES: usize = 16;

/// Header byte bits (docs/facts/libnrt.md §5.3).
const TYPE_MASK: u8 = 0x1F;
const SW_OVF_BIT: u8 = 1 << 5;
const HW_OVF_BIT: u8 = 1 << 6;
const PHASE_BIT: u8 = 1 << 7;

/// ISA notific_type values (docs/facts/libnrt.md §5.3).
pub mod ntype {
    /// NeuronCore memory (SRAM) ECC record on the error ring: libnrt's error consumer has an
    /// ECC lane next to the TPB-error and sequencer-metadata lanes (correctable → logged,
    /// uncorrectable → NRT_EXEC_HW_ERR_NC_UE, docs/facts/libnrt.md §5.5), but the public
    /// sources do not give its encoding: this notific_type (unused by the documented types)
    /// is **modeled**; the record's layout is the TPB error record's, with
    /// `consts::seq::error_mask::ECC_UNCORRECTABLE` in its mask (docs/records.md §1).
    pub const ECC: u8 = 0x01;
    /// DMA notification.
    pub const DMA: u8 = 0x02;
    /// Error.
    pub const ERROR: u8 = 0x03;
    /// First per-engine type (PE INST_START); engine e uses `ENGINE_BASE + 4e + kind`.
    pub const ENGINE_BASE: u8 = 0x04;
    /// kind: INST_START.
    pub const INST_START: u8 = 0;
    /// kind: INST_END.
    pub const INST_END: u8 = 1;
    /// kind: EXPLICIT (NOTIFY).
    pub const EXPLICIT: u8 = 2;
    /// kind: EVT_SEM.
    pub const EVT_SEM: u8 = 3;
    /// TPB AXI event/semaphore.
    pub const TPB_AXI_EVT_SEM: u8 = 0x1B;
    /// HAM throttling.
    pub const TPB_HAM: u8 = 0x1E;
    /// TPB error.
    pub const TPB_ERROR: u8 = 0x1F;

    /// libnrt's timestamp-engine selector: a record whose tag satisfies
    /// `(tag + TAG_ENGINE_BIAS) & 0x1F == 4 * e` (e = 0 PE .. 4 SP) is rescaled with engine
    /// e's clock — exactly the EXPLICIT types `engine(e, EXPLICIT)` (docs/facts/libnrt-runtime-model.md
    /// §B.3 "Per-engine timestamp decode").
    pub const TAG_ENGINE_BIAS: u8 = 26;

    /// The TPB engine whose clock timestamps a record of tag `tag` (libnrt's
    /// `(tag + 26) & 0x1F` selector), if any.
    pub const fn timestamp_engine(tag: u8) -> Option<usize> {
        let sel = (tag as u32 + TAG_ENGINE_BIAS as u32) & super::TYPE_MASK as u32;
        if sel.is_multiple_of(4) && ((sel / 4) as usize) < crate::consts::seq::Engine::COUNT {
            Some((sel / 4) as usize)
        } else {
            None
        }
    }

    /// notific_type of `kind` for TPB engine `engine` (0 PE .. 4 SP).
    pub const fn engine(engine: u8, kind: u8) -> u8 {
        ENGINE_BASE + 4 * engine + kind
    }

    /// What a notific_type tag names: the TPB engine for a per-engine type, and the record
    /// kind (`inst_start`, `dma`, … ; `unknown`).
    pub fn describe(tag: u8) -> (Option<crate::consts::seq::Engine>, &'static str) {
        use crate::consts::seq::Engine;
        let per = engine(1, 0) - engine(0, 0);
        let end = engine(Engine::COUNT as u8, 0);
        if (ENGINE_BASE..end).contains(&tag) {
            let kind = match (tag - ENGINE_BASE) % per {
                INST_START => "inst_start",
                INST_END => "inst_end",
                EXPLICIT => "explicit",
                _ => "evt_sem",
            };
            return (Engine::from_index(usize::from((tag - ENGINE_BASE) / per)), kind);
        }
        let kind = match tag {
            ECC => "ecc",
            DMA => "dma",
            ERROR => "error",
            TPB_AXI_EVT_SEM => "tpb_axi_evt_sem",
            TPB_HAM => "tpb_ham",
            TPB_ERROR => "tpb_error",
            _ => "unknown",
        };
        (None, kind)
    }
}

/// INFER_STATUS subtype at +6 (docs/facts/libnrt.md §5.4); the discriminants are the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, num_enum::FromPrimitive, num_enum::IntoPrimitive)]
#[repr(u16)]
pub enum Subtype {
    Start = 2,
    End = 3,
    Custom = 6,
    CcStart = 7,
    CcEnd = 8,
    /// 0, 1, 4, 5 or > 8: unexpected.
    #[num_enum(catch_all)]
    Unexpected(u16),
}

impl std::fmt::Display for Subtype {
    /// libnrt's names: `START`, `END`, `CUSTOM`, `CC_START`, `CC_END`, `UNEXPECTED(v)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subtype::Start => f.write_str("START"),
            Subtype::End => f.write_str("END"),
            Subtype::Custom => f.write_str("CUSTOM"),
            Subtype::CcStart => f.write_str("CC_START"),
            Subtype::CcEnd => f.write_str("CC_END"),
            Subtype::Unexpected(v) => write!(f, "UNEXPECTED({v})"),
        }
    }
}

impl Subtype {
    /// Decode (total).
    pub fn from_u16(v: u16) -> Self {
        Self::from(v)
    }
    /// Encode.
    pub fn to_u16(self) -> u16 {
        self.into()
    }
}

/// Custom-notification sub-ids (subtype 6, sub-id at +4; docs/facts/libnrt.md §5.4).
pub mod custom {
    /// OOB embedding-table update (text).
    pub const OOB_EMBEDDING_TEXT: u16 = 0;
    /// Embedding-table update OOB with ISA line.
    pub const OOB_EMBEDDING_LINE: u16 = 1;
    /// Scatter/gather OOB.
    pub const OOB_INDIRECT_SCATTER: u16 = 2;
    /// Scatter/gather OOB.
    pub const OOB_INDIRECT_GATHER: u16 = 3;
    /// Scatter/gather via scalar DGE OOB.
    pub const OOB_DGE_SCALAR: u16 = 4;
    /// Scatter/gather via vector DGE OOB.
    pub const OOB_DGE_VECTOR: u16 = 5;
    /// Custom debug notification (non-fatal).
    pub const DEBUG: u16 = 6;
    /// Tensor completion: var id → output tensor.
    pub const TENSOR_COMPLETION: u16 = 7;
    /// Debug-tensor read.
    pub const DEBUG_TENSOR_READ: u16 = 8;
    /// Transpose scatter/gather via scalar DGE OOB.
    pub const OOB_XPOSE_SCALAR: u16 = 9;
    /// Transpose scatter/gather via vector DGE OOB.
    pub const OOB_XPOSE_VECTOR: u16 = 10;

    /// Whether `sub_id` is an out-of-bounds report (0..=5, 9, 10): libnrt ends the execution
    /// with NRT_EXEC_OOB (1006) on any of them.
    pub const fn is_out_of_bounds(sub_id: u16) -> bool {
        matches!(
            sub_id,
            OOB_EMBEDDING_TEXT
                | OOB_EMBEDDING_LINE
                | OOB_INDIRECT_SCATTER
                | OOB_INDIRECT_GATHER
                | OOB_DGE_SCALAR
                | OOB_DGE_VECTOR
                | OOB_XPOSE_SCALAR
                | OOB_XPOSE_VECTOR
        )
    }

    /// Whether `sub_id` is one libnrt takes without failing the execution: a debug value, a
    /// tensor completion or a debug-tensor read (6, 7, 8). Every other sub-id fails it (an
    /// out-of-bounds report, or an unknown custom notification).
    pub const fn is_informational(sub_id: u16) -> bool {
        matches!(sub_id, DEBUG | TENSOR_COMPLETION | DEBUG_TENSOR_READ)
    }
}

/// A notification record in the generic ISA view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotifRecord {
    pub metadata_0: u16,
    pub metadata_1: u8,
    /// notific_type (5 bits).
    pub ntype: u8,
    pub sw_overflow: bool,
    pub hw_overflow: bool,
    /// Phase bit: toggles on every wrap of the ring.
    pub phase: bool,
    pub metadata_2: u32,
    /// Device timestamp (1 ps units).
    pub timestamp: u64,
}

impl NotifRecord {
    /// Header byte.
    pub fn header(&self) -> u8 {
        (self.ntype & TYPE_MASK)
            | if self.sw_overflow { SW_OVF_BIT } else { 0 }
            | if self.hw_overflow { HW_OVF_BIT } else { 0 }
            | if self.phase { PHASE_BIT } else { 0 }
    }
    /// Encode to 16 bytes.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..2].copy_from_slice(&self.metadata_0.to_le_bytes());
        b[2] = self.metadata_1;
        b[3] = self.header();
        b[4..8].copy_from_slice(&self.metadata_2.to_le_bytes());
        b[8..16].copy_from_slice(&self.timestamp.to_le_bytes());
        b
    }
    /// Decode 16 bytes (total).
    pub fn decode(b: &[u8; RECORD_BYTES]) -> Self {
        let h = b[3];
        Self {
            metadata_0: u16::from_le_bytes([b[0], b[1]]),
            metadata_1: b[2],
            ntype: h & TYPE_MASK,
            sw_overflow: h & SW_OVF_BIT != 0,
            hw_overflow: h & HW_OVF_BIT != 0,
            phase: h & PHASE_BIT != 0,
            metadata_2: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            timestamp: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }
    /// Phase bit of a raw record (the validity test of a ring consumer).
    pub fn phase_of(b: &[u8; RECORD_BYTES]) -> bool {
        b[3] & PHASE_BIT != 0
    }
}

/// The same 16 bytes as libnrt's completion engine decodes them (positional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InferStatus {
    /// ISA line low bits (+0).
    pub line: u16,
    /// Low nibble of byte 2 (line bits 19:16 for OOB custom records).
    pub line_hi: u8,
    /// Debug hint (byte 2 >> 4): 0 silent, 1 drain-to-subscriber.
    pub hint: u8,
    /// Byte 3 & 0x1F: the NQ-id tag (= ISA notific_type).
    pub tag: u8,
    pub sw_overflow: bool,
    pub hw_overflow: bool,
    pub phase: bool,
    /// Custom sub-id (+4; subtype 6 only).
    pub sub_id: u16,
    /// Subtype (+6).
    pub subtype: u16,
    /// Device timestamp (+8).
    pub timestamp: u64,
}

impl InferStatus {
    /// Decoded subtype.
    pub fn kind(&self) -> Subtype {
        Subtype::from_u16(self.subtype)
    }
    /// Encode to 16 bytes.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..2].copy_from_slice(&self.line.to_le_bytes());
        b[2] = (self.hint << 4) | (self.line_hi & 0x0F);
        b[3] = (self.tag & TYPE_MASK)
            | if self.sw_overflow { SW_OVF_BIT } else { 0 }
            | if self.hw_overflow { HW_OVF_BIT } else { 0 }
            | if self.phase { PHASE_BIT } else { 0 };
        b[4..6].copy_from_slice(&self.sub_id.to_le_bytes());
        b[6..8].copy_from_slice(&self.subtype.to_le_bytes());
        b[8..16].copy_from_slice(&self.timestamp.to_le_bytes());
        b
    }
    /// Decode 16 bytes (total).
    pub fn decode(b: &[u8; RECORD_BYTES]) -> Self {
        Self {
            line: u16::from_le_bytes([b[0], b[1]]),
            line_hi: b[2] & 0x0F,
            hint: b[2] >> 4,
            tag: b[3] & TYPE_MASK,
            sw_overflow: b[3] & SW_OVF_BIT != 0,
            hw_overflow: b[3] & HW_OVF_BIT != 0,
            phase: b[3] & PHASE_BIT != 0,
            sub_id: u16::from_le_bytes([b[4], b[5]]),
            subtype: u16::from_le_bytes([b[6], b[7]]),
            timestamp: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names() {
        assert_eq!(ntype::describe(ntype::engine(0, ntype::INST_START)), (Some(crate::Engine::Pe), "inst_start"));
        assert_eq!(ntype::describe(ntype::engine(2, ntype::INST_END)), (Some(crate::Engine::Pool), "inst_end"));
        assert_eq!(ntype::describe(ntype::engine(4, ntype::EVT_SEM)), (Some(crate::Engine::Sp), "evt_sem"));
        assert_eq!(ntype::describe(ntype::engine(3, ntype::EXPLICIT)), (Some(crate::Engine::Dve), "explicit"));
        assert_eq!(ntype::describe(ntype::engine(5, 0)), (None, "unknown"));
        assert_eq!(ntype::describe(ntype::DMA), (None, "dma"));
        assert_eq!(ntype::describe(ntype::TPB_ERROR), (None, "tpb_error"));
        let names: Vec<String> = [2, 3, 6, 7, 8, 5].map(|v| Subtype::from_u16(v).to_string()).into();
        assert_eq!(names, ["START", "END", "CUSTOM", "CC_START", "CC_END", "UNEXPECTED(5)"]);
    }

    #[test]
    fn every_subtype_round_trips_and_only_the_documented_ones_are_known() {
        let known: Vec<u16> =
            (0..=u16::MAX).filter(|&v| !matches!(Subtype::from_u16(v), Subtype::Unexpected(_))).collect();
        assert_eq!(known, [2, 3, 6, 7, 8]);
        assert!((0..=u16::MAX).all(|v| Subtype::from_u16(v).to_u16() == v));
    }

    #[test]
    fn custom_sub_ids_split_as_libnrt_decodes_them() {
        // libnrt.md §5.4: 0..=5, 9, 10 are out-of-bounds faults; 6, 7, 8 do not fail; any
        // other is an unknown custom notification.
        let oob: Vec<u16> = (0..=u16::MAX).filter(|&s| custom::is_out_of_bounds(s)).collect();
        let info: Vec<u16> = (0..=u16::MAX).filter(|&s| custom::is_informational(s)).collect();
        assert_eq!(oob, [0, 1, 2, 3, 4, 5, 9, 10]);
        assert_eq!(info, [6, 7, 8]);
    }

    #[test]
    fn timestamp_engine_is_the_explicit_type() {
        for tag in 0..=u8::MAX {
            let want = (0..5u8).find(|&e| ntype::engine(e, ntype::EXPLICIT) == tag & 0x1F).map(usize::from);
            assert_eq!(ntype::timestamp_engine(tag), want, "tag {tag:#x}");
        }
    }

    #[test]
    fn positions_pinned() {
        let r = InferStatus {
            tag: ntype::engine(2, ntype::INST_END),
            subtype: 3,
            timestamp: 0x1122,
            phase: true,
            ..Default::default()
        };
        let b = r.encode();
        assert_eq!(b[3], 0x80 | 0x0D); // POOL INST_END = 0x0D, phase bit 7
        assert_eq!(u16::from_le_bytes([b[6], b[7]]), 3);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0x1122);
        assert_eq!(ntype::engine(0, ntype::INST_START), 0x04);
        assert_eq!(ntype::engine(4, ntype::EVT_SEM), 0x17);
        let g = NotifRecord::decode(&b);
        assert_eq!(g.ntype, 0x0D);
        assert!(g.phase && !g.sw_overflow && !g.hw_overflow);
        assert_eq!(g.metadata_2, 3 << 16);
        assert_eq!(NotifRecord { sw_overflow: true, ..Default::default() }.header(), 0x20);
        assert_eq!(NotifRecord { hw_overflow: true, ..Default::default() }.header(), 0x40);
    }

    proptest! {
        #[test]
        fn views_total_and_roundtrip(b in proptest::array::uniform16(any::<u8>())) {
            prop_assert_eq!(NotifRecord::decode(&b).encode(), b);
            prop_assert_eq!(InferStatus::decode(&b).encode(), b);
            let _ = InferStatus::decode(&b).kind();
        }
    }
}
