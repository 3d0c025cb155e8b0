//! The 16-byte UDMA descriptor (docs/facts/hardware.md §3.4, docs/facts/libnrt.md §4.5 "UDMA").
//!
//! ```text
//! word0 (len/ctrl): `[15:0]` length (0 = 65536) | 23 META | `[25:24]` ring id | 26 FIRST | 27 LAST
//!                   | 28 INT_EN | 29 STRONG_ORDER_WR (RX, V3+) | 30 DMB (TX) | 31 CONCAT
//! word1:            TX metadata (SDMA command) / RX second buffer pointer low (0)
//! bytes 8..15:      buffer device address (u64)
//! ```

/// Descriptor size in bytes (`m:udma/udma.h`).
pub const DESC_BYTES: usize = 16;
/// Largest byte count one descriptor moves (encoded as length 0).
pub const MAX_DESC_LEN: u32 = 65536;

const LEN_MASK: u32 = 0xFFFF;
const META_BIT: u32 = 1 << 23;
const RING_ID_SHIFT: u32 = 24;
const FIRST_BIT: u32 = 1 << 26;
const LAST_BIT: u32 = 1 << 27;
const INT_EN_BIT: u32 = 1 << 28;
const STRONG_ORDER_BIT: u32 = 1 << 29;
const DMB_BIT: u32 = 1 << 30;
const CONCAT_BIT: u32 = 1 << 31;

/// M2S metadata word bits as the kmod writes them (`m:udma/udma_m2m.c`).
pub mod meta {
    /// bit0 last block.
    pub const LAST_BLOCK: u32 = 1 << 0;
    /// bit1 first block.
    pub const FIRST_BLOCK: u32 = 1 << 1;
    /// bit19 copy source data.
    pub const COPY_SOURCE: u32 = 1 << 19;
    /// `[25:23]` op; the driver uses 0b010.
    pub const OP_SHIFT: u32 = 23;
    /// bit26 write barrier (last descriptor of a batch on V2/V3).
    pub const WRITE_BARRIER: u32 = 1 << 26;
    /// bit28 notification mask (V4 only, docs/facts/libnrt.md §4.5).
    pub const NOTIFICATION_MASK: u32 = 1 << 28;
    /// The metadata the driver writes on every TX descriptor: 0x01080003.
    pub const DEFAULT: u32 = LAST_BLOCK | FIRST_BLOCK | COPY_SOURCE | (0b010 << OP_SHIFT);
}

/// Decoded control word of a descriptor (shared by TX and RX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DescCtrl {
    /// Bytes to move, 1..=65536 (the encoding's 0 decodes to 65536).
    pub len: u32,
    /// Ring id / phase of the ring pass this descriptor was written in (0..3).
    pub ring_id: u8,
    pub first: bool,
    pub last: bool,
    pub int_en: bool,
    /// Meta-descriptor flag.
    pub meta: bool,
    /// RX only (V3+): strong-ordered write.
    pub strong_order: bool,
    /// TX only: wait for all previous transfers.
    pub dmb: bool,
    /// Continues into the next descriptor (transfers > 64 KiB).
    pub concat: bool,
    /// Bits `[22:16]`, undefined by the sources; kept so decode/encode round-trips.
    pub reserved: u8,
}

impl DescCtrl {
    /// Encode as word0. `len` above 65536 is clamped; 65536 and 0 encode as 0.
    #[inline]
    pub fn encode(&self) -> u32 {
        let len = self.len.min(MAX_DESC_LEN) & LEN_MASK;
        let mut w = len | ((self.ring_id as u32 & 3) << RING_ID_SHIFT) | ((self.reserved as u32 & 0x7F) << 16);
        for (b, bit) in [
            (self.first, FIRST_BIT),
            (self.last, LAST_BIT),
            (self.int_en, INT_EN_BIT),
            (self.meta, META_BIT),
            (self.strong_order, STRONG_ORDER_BIT),
            (self.dmb, DMB_BIT),
            (self.concat, CONCAT_BIT),
        ] {
            if b {
                w |= bit;
            }
        }
        w
    }

    /// Decode word0 (total).
    pub fn decode(w: u32) -> Self {
        let len = w & LEN_MASK;
        Self {
            len: if len == 0 { MAX_DESC_LEN } else { len },
            ring_id: ((w >> RING_ID_SHIFT) & 3) as u8,
            first: w & FIRST_BIT != 0,
            last: w & LAST_BIT != 0,
            int_en: w & INT_EN_BIT != 0,
            meta: w & META_BIT != 0,
            strong_order: w & STRONG_ORDER_BIT != 0,
            dmb: w & DMB_BIT != 0,
            concat: w & CONCAT_BIT != 0,
            reserved: ((w >> 16) & 0x7F) as u8,
        }
    }
}

/// A 16-byte UDMA descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdmaDesc {
    pub ctrl: DescCtrl,
    /// TX: metadata word ([`meta::DEFAULT`]); RX: second buffer pointer low (0).
    pub word1: u32,
    /// Device address of the buffer (source for TX, destination for RX).
    pub addr: u64,
}

impl UdmaDesc {
    /// A TX (M2S, source) descriptor with the kmod's default metadata.
    pub fn tx(addr: u64, len: u32, ring_id: u8, first: bool, last: bool) -> Self {
        Self { ctrl: DescCtrl { len, ring_id, first, last, ..Default::default() }, word1: meta::DEFAULT, addr }
    }

    /// An RX (S2M, destination) descriptor.
    pub fn rx(addr: u64, len: u32, ring_id: u8, first: bool, last: bool) -> Self {
        Self { ctrl: DescCtrl { len, ring_id, first, last, ..Default::default() }, word1: 0, addr }
    }

    /// Encode to 16 bytes.
    #[inline]
    pub fn encode(&self) -> [u8; DESC_BYTES] {
        Self::encode_words(self.ctrl.encode(), self.word1, self.addr)
    }

    /// The 16 bytes of a descriptor from its already encoded control word (`DescCtrl::encode`),
    /// word1 and address.
    #[inline]
    pub fn encode_words(ctrl: u32, word1: u32, addr: u64) -> [u8; DESC_BYTES] {
        let mut b = [0u8; DESC_BYTES];
        b[0..4].copy_from_slice(&ctrl.to_le_bytes());
        b[4..8].copy_from_slice(&word1.to_le_bytes());
        b[8..16].copy_from_slice(&addr.to_le_bytes());
        b
    }

    /// Decode 16 bytes (total).
    pub fn decode(b: &[u8; DESC_BYTES]) -> Self {
        let w0 = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let w1 = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let addr = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        Self { ctrl: DescCtrl::decode(w0), word1: w1, addr }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bit_positions_pinned() {
        // docs/facts/hardware.md §3.4: [15:0] len, [25:24] ring id, 26 FIRST, 27 LAST, 28 INT, 30 DMB; docs/facts/libnrt.md §4.5: 31 CONCAT, 23 META, 29 SOW.
        let c = |f: fn(&mut DescCtrl)| {
            let mut d = DescCtrl { len: 1, ..Default::default() };
            f(&mut d);
            d.encode() & !1
        };
        assert_eq!(c(|d| d.first = true), 1 << 26);
        assert_eq!(c(|d| d.last = true), 1 << 27);
        assert_eq!(c(|d| d.int_en = true), 1 << 28);
        assert_eq!(c(|d| d.strong_order = true), 1 << 29);
        assert_eq!(c(|d| d.dmb = true), 1 << 30);
        assert_eq!(c(|d| d.concat = true), 1 << 31);
        assert_eq!(c(|d| d.meta = true), 1 << 23);
        assert_eq!(c(|d| d.ring_id = 3), 3 << 24);
        assert_eq!(DescCtrl { len: 65536, ..Default::default() }.encode(), 0);
        assert_eq!(DescCtrl::decode(0).len, 65536);
        assert_eq!(meta::DEFAULT, 0x0108_0003);
        assert_eq!(meta::DEFAULT | meta::WRITE_BARRIER, 0x0508_0003);
    }

    #[test]
    fn tx_layout() {
        let d = UdmaDesc::tx(0x1000_0000_1234, 4096, 1, true, true);
        let b = d.encode();
        assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), 4096 | (1 << 24) | (1 << 26) | (1 << 27));
        assert_eq!(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), 0x0108_0003);
        assert_eq!(&b[8..], &0x1000_0000_1234u64.to_le_bytes());
        assert_eq!(UdmaDesc::decode(&b), d);
    }

    proptest! {
        #[test]
        fn decode_total_and_reencodes(bytes in proptest::array::uniform16(any::<u8>())) {
            let d = UdmaDesc::decode(&bytes);
            prop_assert_eq!(d.encode(), bytes);
        }
        #[test]
        fn roundtrip(len in 1u32..=65536, rid in 0u8..4, f: bool, l: bool, i: bool, m: bool, s: bool, dmb: bool, c: bool, w1: u32, addr: u64) {
            let d = UdmaDesc { ctrl: DescCtrl { len, ring_id: rid, first: f, last: l, int_en: i, meta: m, strong_order: s, dmb, concat: c, reserved: 0 }, word1: w1, addr };
            prop_assert_eq!(UdmaDesc::decode(&d.encode()), d);
        }
    }
}
