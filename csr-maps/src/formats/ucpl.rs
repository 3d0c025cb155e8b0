//! The 32-byte UCPL header of a prelinked Q7 loadable library (docs/facts/libnrt.md §7.4).
//!
//! ```text
//! +0x00 magic[8] "UCPL " + 3 NUL (u64 0x204C504355; bytes 4..7 read as u32 = 0x20 = code offset)
//! +0x08 code_seg_len | +0x0C data_seg_off = 0x20 + align32(code_seg_len) | +0x10 data_seg_len
//! +0x14 init_fn | +0x18 fini_fn | +0x1C start_sym
//! ```

/// Header size.
pub const HEADER_BYTES: usize = 0x20;
/// The magic as a little-endian u64.
pub const MAGIC: u64 = 0x20_4C50_4355;
/// Largest prelinked image the device buffer accepts (64 KiB; larger → error 7).
pub const MAX_IMAGE_BYTES: u64 = 0x10000;
/// Device offset of the code segment.
pub const CODE_OFFSET: u32 = 0x20;

/// UCPL header decode failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UcplError {
    #[error("UCPL header needs 32 bytes, got {0}")]
    Short(usize),
    #[error("bad UCPL magic {0:#018x}")]
    Magic(u64),
    #[error("data segment offset {data_off:#x} overlaps the code segment ending at {code_end:#x}")]
    Layout { data_off: u32, code_end: u64 },
}

/// A UCPL header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UcplHeader {
    pub code_seg_len: u32,
    pub data_seg_off: u32,
    pub data_seg_len: u32,
    pub init_fn: u32,
    pub fini_fn: u32,
    pub start_sym: u32,
}

impl UcplHeader {
    /// A header for code and data segments of the given sizes (lengths 4-aligned,
    /// data placed at 0x20 + align32(code)).
    pub fn for_segments(code_len: u32, data_len: u32, init_fn: u32, fini_fn: u32, start_sym: u32) -> Self {
        let code = code_len.saturating_add(3) & !3;
        let data_seg_off = CODE_OFFSET.saturating_add(code.saturating_add(31) & !31);
        Self {
            code_seg_len: code,
            data_seg_off,
            data_seg_len: data_len.saturating_add(3) & !3,
            init_fn,
            fini_fn,
            start_sym,
        }
    }
    /// Total prelinked image size (header + code + data).
    pub fn image_size(&self) -> u64 {
        self.data_seg_off as u64 + self.data_seg_len as u64
    }
    /// Encode.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        for (i, v) in
            [self.code_seg_len, self.data_seg_off, self.data_seg_len, self.init_fn, self.fini_fn, self.start_sym]
                .iter()
                .enumerate()
        {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
    /// Decode; errors on short input, bad magic or overlapping segments. Never panics.
    pub fn decode(b: &[u8]) -> Result<Self, UcplError> {
        if b.len() < HEADER_BYTES {
            return Err(UcplError::Short(b.len()));
        }
        let u32_at = |o: usize| super::le::u32_at(b, o);
        let magic = super::le::u64_at(b, 0);
        if magic != MAGIC {
            return Err(UcplError::Magic(magic));
        }
        let h = Self {
            code_seg_len: u32_at(8),
            data_seg_off: u32_at(12),
            data_seg_len: u32_at(16),
            init_fn: u32_at(20),
            fini_fn: u32_at(24),
            start_sym: u32_at(28),
        };
        let code_end = CODE_OFFSET as u64 + h.code_seg_len as u64;
        if (h.data_seg_off as u64) < code_end {
            return Err(UcplError::Layout { data_off: h.data_seg_off, code_end });
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn magic_bytes() {
        let h = UcplHeader::for_segments(100, 10, 0x100_0000, 0x100_0010, 0x100_0020);
        let b = h.encode();
        assert_eq!(&b[0..8], b"UCPL \0\0\0");
        assert_eq!(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), 0x20);
        assert_eq!(h.code_seg_len, 100);
        assert_eq!(h.data_seg_off, 0x20 + 128);
        assert_eq!(h.data_seg_len, 12);
        assert_eq!(UcplHeader::decode(&b), Ok(h));
        assert_eq!(h.image_size(), 0x20 + 128 + 12);
    }

    proptest! {
        #[test]
        fn decode_total(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = UcplHeader::decode(&b) {
                prop_assert_eq!(&h.encode()[..], &b[..32]);
            }
        }
    }
}
