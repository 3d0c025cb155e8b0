//! The runtime's own record decoders (`runtime::records`) against the hand-written golden
//! vectors of docs/records.md: each vector must decode to the values the table describes and
//! classify to the status libnrt gives. The decoders do not use the simulator's encoders, so a
//! device that changes a field's meaning fails `sim/tests/golden.rs` and a driver that does
//! fails here.

use runtime::error_decode::{ErrorBlock, ErrorDecodeConfig};
use runtime::records;

/// The shared hand-written vectors (each test uses the kinds it checks).
#[allow(dead_code)]
mod vectors {
    include!("../../tests/golden/records.rs");
}
use vectors::*;

#[test]
fn error_records_decode_to_the_described_values() {
    for g in GOLDEN_ERRORS {
        let r = records::error_record(&g.bytes);
        let h = records::header(r.header);
        let m = records::seq_metadata(r.metadata_hi);
        assert_eq!(
            (r.error_id, r.metadata_lo, h.ntype, h.phase, m.block_id, m.program_counter, m.info, r.timestamp),
            (g.error_id, g.mask, g.ntype, g.phase, g.block_id, g.pc, g.info, g.timestamp),
            "{}",
            g.name
        );
    }
}

#[test]
fn error_records_classify_to_libnrts_status() {
    for arch in [&csr_maps::SUNDA, &csr_maps::CAYMAN, &csr_maps::MARIANA] {
        for g in GOLDEN_ERRORS {
            let mut b = ErrorBlock::new();
            b.consume(&records::error_record(&g.bytes), arch, &ErrorDecodeConfig::default());
            assert_eq!(b.status.map(|s| s.code()).unwrap_or(0), g.status, "{} on {}", g.name, arch.name);
        }
    }
}

#[test]
fn infer_records_decode_to_the_described_values() {
    for g in GOLDEN_INFERS {
        let r = records::infer_status(&g.bytes);
        let line = u32::from(r.line) | (u32::from(r.line_hi) << 16);
        assert_eq!(
            (line, r.hint, r.tag, r.sw_overflow, r.hw_overflow, r.phase, r.sub_id, r.subtype, r.timestamp),
            (g.line, g.hint, g.tag, g.sw_overflow, false, g.phase, g.sub_id, g.subtype, g.timestamp),
            "{}",
            g.name
        );
    }
}

#[test]
fn header_bits() {
    let h = records::header(0xE3);
    assert_eq!((h.ntype, h.sw_overflow, h.hw_overflow, h.phase), (0x03, true, true, true));
    let h = records::header(0x1F);
    assert_eq!((h.ntype, h.sw_overflow, h.hw_overflow, h.phase), (0x1F, false, false, false));
}
