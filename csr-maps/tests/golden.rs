//! The shared record codecs against the hand-written golden vectors of docs/records.md — in
//! both directions separately (described values → bytes, bytes → described values), never an
//! encode → decode round trip, so a change of a field's meaning fails here.

use csr_maps::formats::dge::DgeMailbox;
use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::fwio::FwHeader;
use csr_maps::formats::notify::{InferStatus, NotifRecord};

/// The shared hand-written vectors (each test uses the kinds it checks).
#[allow(dead_code)]
mod vectors {
    include!("../../tests/golden/records.rs");
}
use vectors::*;

#[test]
fn error_records() {
    for g in GOLDEN_ERRORS {
        let r = TpbErrorRecord::decode(&g.bytes);
        assert_eq!(r.error_id, g.error_id, "{}", g.name);
        assert_eq!(r.metadata_lo, g.mask, "{}", g.name);
        assert_eq!(r.header & 0x1F, g.ntype, "{}", g.name);
        assert_eq!(r.header & 0x80 != 0, g.phase, "{}", g.name);
        assert_eq!((r.block_id(), r.program_counter(), r.info()), (g.block_id, g.pc, g.info), "{}", g.name);
        assert_eq!(r.timestamp, g.timestamp, "{}", g.name);
        let built = TpbErrorRecord {
            error_id: g.error_id,
            metadata_lo: g.mask,
            header: g.ntype | if g.phase { 0x80 } else { 0 },
            metadata_hi: TpbErrorRecord::seq_metadata(g.block_id, g.pc, g.info),
            timestamp: g.timestamp,
        };
        assert_eq!(built.encode(), g.bytes, "{}", g.name);
    }
}

#[test]
fn infer_status_records() {
    for g in GOLDEN_INFERS {
        let r = InferStatus::decode(&g.bytes);
        let line = u32::from(r.line) | (u32::from(r.line_hi) << 16);
        assert_eq!(
            (line, r.hint, r.tag, r.sw_overflow, r.phase, r.sub_id, r.subtype, r.timestamp),
            (g.line, g.hint, g.tag, g.sw_overflow, g.phase, g.sub_id, g.subtype, g.timestamp),
            "{}",
            g.name
        );
        let built = InferStatus {
            line: g.line as u16,
            line_hi: (g.line >> 16) as u8,
            hint: g.hint,
            tag: g.tag,
            sw_overflow: g.sw_overflow,
            hw_overflow: false,
            phase: g.phase,
            sub_id: g.sub_id,
            subtype: g.subtype,
            timestamp: g.timestamp,
        };
        assert_eq!(built.encode(), g.bytes, "{}", g.name);
        // The generic ISA view agrees on the header byte.
        let n = NotifRecord::decode(&g.bytes);
        assert_eq!((n.ntype, n.sw_overflow, n.phase), (g.tag, g.sw_overflow, g.phase), "{}", g.name);
    }
}

#[test]
fn dge_mailboxes() {
    for (name, bytes, reserved, priority, mask) in GOLDEN_DGE {
        let v = u32::from_le_bytes(*bytes);
        assert_eq!(
            DgeMailbox::decode(v),
            DgeMailbox { reserved: *reserved, priority: *priority, bitmask: *mask },
            "{name}"
        );
        assert_eq!(
            DgeMailbox { reserved: *reserved, priority: *priority, bitmask: *mask }.encode().to_le_bytes(),
            *bytes,
            "{name}"
        );
    }
}

#[test]
fn fwio_headers() {
    for GoldenFwio { name, bytes, seq, cmd, size, payload } in GOLDEN_FWIO {
        let dw0 = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        assert_eq!(FwHeader::decode(dw0), FwHeader { seq: *seq, code: *cmd, size: *size }, "{name}");
        let h = FwHeader { seq: *seq, code: *cmd, size: *size };
        assert_eq!(h.encode(), dw0, "{name}");
        assert_eq!(h.request_crc(payload), crc, "{name}");
        assert_eq!(usize::from(*size), 8 + payload.len(), "{name}");
    }
}

#[test]
fn doc_prints_every_vector() {
    let doc = include_str!("../../docs/records.md");
    let mut lines: Vec<(&str, String)> = Vec::new();
    lines.extend(GOLDEN_ERRORS.iter().map(|g| (g.name, hex(&g.bytes))));
    lines.extend(GOLDEN_INFERS.iter().map(|g| (g.name, hex(&g.bytes))));
    lines.extend(GOLDEN_DGE.iter().map(|g| (g.0, hex(&g.1))));
    lines.extend(GOLDEN_FWIO.iter().map(|g| (g.name, hex(&g.bytes))));
    for (name, h) in lines {
        let want = format!("| `{name}` | `{h}` |");
        assert!(doc.contains(&want), "docs/records.md lacks the row {want}");
    }
}
