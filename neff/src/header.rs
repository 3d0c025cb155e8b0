//! The 1024-byte NEFF header (docs/facts/libnrt.md §1.1, pkg versions §1.2, gate constants §1.3).
//!
//! Source tags: CC, FR, CBF, LC. All integers little-endian. There is no magic number: the
//! only type discriminator is `pkg_version`. Decoding is total for any buffer of at least
//! 1024 bytes (no field is validated here; the loader applies the gates in libnrt's order).

use csr_maps::formats::le::{array_at as arr, u32_at, u64_at};

/// Size of `neff_header_t` (0x400); the payload is read from this offset regardless of
/// `header_size` (LC).
pub const NEFF_HEADER_SIZE: usize = 0x400;
/// Highest accepted `neff_version_major` (gate 4, §1.3).
pub const NEFF_VERSION_MAJOR_MAX: u64 = 2;
/// Feature bits the runtime supports (bits 0..26) (§1.3 gate 5).
pub const FEATURE_BITS_SUPPORTED: u64 = 0x7FF_FFFF;
/// Trapdoor mask: for major 2, any of these bits set means "compiled by a newer compiler"
/// (bits 27..62; bit 63 lies outside the mask) (§1.3 gate 5).
pub const FEATURE_BITS_TRAPDOOR_MASK: u64 = 0x7FFF_FFFF_F800_0000;
/// pkg_version 1: plain tar, SHA-256 over the data window in all 32 hash bytes (§1.2).
pub const PKG_VERSION_TAR_SHA256: u64 = 1;
/// pkg_version 2: gzip(tar), MD5 of the compressed bytes in hash[0..16] (§1.2).
pub const PKG_VERSION_GZIP_MD5: u64 = 2;

/// Field offsets inside the header (§1.1).
pub mod offsets {
    pub const PKG_VERSION: usize = 0x000;
    pub const HEADER_SIZE: usize = 0x008;
    pub const DATA_SIZE: usize = 0x010;
    pub const NEFF_VERSION_MAJOR: usize = 0x018;
    pub const NEFF_VERSION_MINOR: usize = 0x020;
    pub const BUILD_VERSION: usize = 0x028;
    pub const UNUSED_0: usize = 0x0A8;
    pub const HASH: usize = 0x0AC;
    pub const UUID: usize = 0x0CC;
    pub const NAME: usize = 0x0DC;
    pub const REQUESTED_TPB_COUNT: usize = 0x1DC;
    pub const TPB_PER_NODE: usize = 0x1E0;
    pub const FEATURE_BITS: usize = 0x220;
    pub const VNC_SIZE: usize = 0x228;
    pub const RESERVED: usize = 0x22C;
}

/// The only decode failure: fewer than 1024 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("NEFF header needs {NEFF_HEADER_SIZE} bytes, got {len}")]
pub struct HeaderTooShort {
    pub len: usize,
}

/// `neff_header_t` (§1.1). Every byte of the 1024 is kept, so `encode(decode(b)) == b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeffHeader {
    /// 0x000: 1 = tar + SHA-256, 2 = gzip tar + MD5.
    pub pkg_version: u64,
    /// 0x008: 0x400 in every observed file; only checked `< file size` (LC).
    pub header_size: u64,
    /// 0x010: length of the (compressed for pkg 2) inner archive.
    pub data_size: u64,
    /// 0x018: ceiling 2.
    pub neff_version_major: u64,
    /// 0x020: never gated.
    pub neff_version_minor: u64,
    /// 0x028: `"<ver>%<branch>@<sha>"`, NUL-padded, never parsed.
    pub build_version: [u8; 128],
    /// 0x0A8: fixture = 1 (gzip flag or padding, §10 conflict 12).
    pub unused_0: u32,
    /// 0x0AC: SHA-256 (pkg 1) or MD5 in bytes 0..16 (pkg 2).
    pub hash: [u8; 32],
    /// 0x0CC: model UUID.
    pub uuid: [u8; 16],
    /// 0x0DC: model name, NUL-padded.
    pub name: [u8; 256],
    /// 0x1DC: requested NeuronCores.
    pub requested_tpb_count: u32,
    /// 0x1E0: per-node TPB counts.
    pub tpb_per_node: [u8; 64],
    /// 0x220: forward-compatibility mask.
    pub feature_bits: u64,
    /// 0x228: virtual-NC size.
    pub vnc_size: u32,
    /// 0x22C: reserved (468 bytes), zero in the fixture.
    pub reserved: [u8; 468],
}

impl Default for NeffHeader {
    fn default() -> Self {
        NeffHeader {
            pkg_version: PKG_VERSION_GZIP_MD5,
            header_size: NEFF_HEADER_SIZE as u64,
            data_size: 0,
            neff_version_major: 2,
            neff_version_minor: 0,
            build_version: [0; 128],
            unused_0: 1,
            hash: [0; 32],
            uuid: [0; 16],
            name: [0; 256],
            requested_tpb_count: 1,
            tpb_per_node: [0; 64],
            feature_bits: 0,
            vnc_size: 1,
            reserved: [0; 468],
        }
    }
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn set_c_str(dst: &mut [u8], s: &str) {
    dst.fill(0);
    let n = s.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

impl NeffHeader {
    /// Decodes the first 1024 bytes; fails only when `bytes` is shorter than that.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderTooShort> {
        if bytes.len() < NEFF_HEADER_SIZE {
            return Err(HeaderTooShort { len: bytes.len() });
        }
        let b = &bytes[..NEFF_HEADER_SIZE];
        use offsets as o;
        Ok(NeffHeader {
            pkg_version: u64_at(b, o::PKG_VERSION),
            header_size: u64_at(b, o::HEADER_SIZE),
            data_size: u64_at(b, o::DATA_SIZE),
            neff_version_major: u64_at(b, o::NEFF_VERSION_MAJOR),
            neff_version_minor: u64_at(b, o::NEFF_VERSION_MINOR),
            build_version: arr(b, o::BUILD_VERSION),
            unused_0: u32_at(b, o::UNUSED_0),
            hash: arr(b, o::HASH),
            uuid: arr(b, o::UUID),
            name: arr(b, o::NAME),
            requested_tpb_count: u32_at(b, o::REQUESTED_TPB_COUNT),
            tpb_per_node: arr(b, o::TPB_PER_NODE),
            feature_bits: u64_at(b, o::FEATURE_BITS),
            vnc_size: u32_at(b, o::VNC_SIZE),
            reserved: arr(b, o::RESERVED),
        })
    }

    /// Encodes all 1024 bytes.
    pub fn encode(&self) -> [u8; NEFF_HEADER_SIZE] {
        use offsets as o;
        let mut b = [0u8; NEFF_HEADER_SIZE];
        b[o::PKG_VERSION..o::PKG_VERSION + 8].copy_from_slice(&self.pkg_version.to_le_bytes());
        b[o::HEADER_SIZE..o::HEADER_SIZE + 8].copy_from_slice(&self.header_size.to_le_bytes());
        b[o::DATA_SIZE..o::DATA_SIZE + 8].copy_from_slice(&self.data_size.to_le_bytes());
        b[o::NEFF_VERSION_MAJOR..o::NEFF_VERSION_MAJOR + 8].copy_from_slice(&self.neff_version_major.to_le_bytes());
        b[o::NEFF_VERSION_MINOR..o::NEFF_VERSION_MINOR + 8].copy_from_slice(&self.neff_version_minor.to_le_bytes());
        b[o::BUILD_VERSION..o::BUILD_VERSION + 128].copy_from_slice(&self.build_version);
        b[o::UNUSED_0..o::UNUSED_0 + 4].copy_from_slice(&self.unused_0.to_le_bytes());
        b[o::HASH..o::HASH + 32].copy_from_slice(&self.hash);
        b[o::UUID..o::UUID + 16].copy_from_slice(&self.uuid);
        b[o::NAME..o::NAME + 256].copy_from_slice(&self.name);
        b[o::REQUESTED_TPB_COUNT..o::REQUESTED_TPB_COUNT + 4].copy_from_slice(&self.requested_tpb_count.to_le_bytes());
        b[o::TPB_PER_NODE..o::TPB_PER_NODE + 64].copy_from_slice(&self.tpb_per_node);
        b[o::FEATURE_BITS..o::FEATURE_BITS + 8].copy_from_slice(&self.feature_bits.to_le_bytes());
        b[o::VNC_SIZE..o::VNC_SIZE + 4].copy_from_slice(&self.vnc_size.to_le_bytes());
        b[o::RESERVED..o::RESERVED + 468].copy_from_slice(&self.reserved);
        b
    }

    /// The model name up to the first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        c_str(&self.name)
    }

    /// Sets the model name (truncated to 255 bytes, NUL-padded).
    pub fn set_name(&mut self, name: &str) {
        set_c_str(&mut self.name, name);
    }

    /// The build version string up to the first NUL (lossy UTF-8).
    pub fn build_version_str(&self) -> String {
        c_str(&self.build_version)
    }

    /// Sets the build version string (truncated to 127 bytes, NUL-padded).
    pub fn set_build_version(&mut self, v: &str) {
        set_c_str(&mut self.build_version, v);
    }

    /// The feature bits that fall in the trapdoor mask (gate 5 rejects non-zero for major 2).
    pub fn trapdoor_bits(&self) -> u64 {
        self.feature_bits & FEATURE_BITS_TRAPDOOR_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offsets_are_pinned() {
        let mut h = NeffHeader {
            pkg_version: 0x0102,
            data_size: 0xAABB,
            feature_bits: 0x8000_0000_0000_0001,
            vnc_size: 2,
            requested_tpb_count: 7,
            ..NeffHeader::default()
        };
        h.hash[0] = 0x11;
        h.uuid[15] = 0x22;
        h.set_name("model");
        let b = h.encode();
        assert_eq!(&b[0..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(u64_at(&b, 8), 0x400);
        assert_eq!(u64_at(&b, 0x10), 0xAABB);
        assert_eq!(b[0xAC], 0x11);
        assert_eq!(b[0xCC + 15], 0x22);
        assert_eq!(&b[0xDC..0xE1], b"model");
        assert_eq!(u32_at(&b, 0x1DC), 7);
        assert_eq!(u64_at(&b, 0x220), 0x8000_0000_0000_0001);
        assert_eq!(u32_at(&b, 0x228), 2);
        assert_eq!(h.trapdoor_bits(), 0);
        assert_eq!(NeffHeader::decode(&b).ok(), Some(h));
    }

    #[test]
    fn short_buffer_is_the_only_error() {
        assert_eq!(NeffHeader::decode(&[0u8; 1023]), Err(HeaderTooShort { len: 1023 }));
        assert!(NeffHeader::decode(&[0xFFu8; 1024]).is_ok());
    }

    #[test]
    fn trapdoor_mask_covers_bits_27_to_62() {
        assert_eq!(FEATURE_BITS_TRAPDOOR_MASK, ((1u64 << 63) - 1) & !FEATURE_BITS_SUPPORTED);
    }

    proptest! {
        #[test]
        fn decode_encode_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1024..1100)) {
            let h = NeffHeader::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&h.encode()[..], &bytes[..1024]);
        }

        #[test]
        fn decode_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            prop_assert_eq!(NeffHeader::decode(&bytes).is_ok(), bytes.len() >= 1024);
        }
    }
}
