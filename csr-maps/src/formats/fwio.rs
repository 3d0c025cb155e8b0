//! FW-IO mailbox records (docs/facts/hardware.md §6.2): the 8-byte request header of the new
//! protocol (dword0 {seq, cmd, size}; dword1 CRC-32C) and its checksum.

/// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, init and final XOR 0xFFFFFFFF).
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_update(0xFFFF_FFFF, data) ^ 0xFFFF_FFFF
}

/// Continue a CRC-32C over more bytes (state without the final XOR).
pub fn crc32c_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (crate::consts::fwio::CRC32C_POLY & mask);
        }
    }
    crc
}

/// Header dword0: byte0 sequence (1..255), byte1 command/error, bytes 2-3 size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FwHeader {
    pub seq: u8,
    /// Command (request) or error code (response).
    pub code: u8,
    /// Total size including the 8-byte header.
    pub size: u16,
}

impl FwHeader {
    /// Pack dword0.
    pub fn encode(&self) -> u32 {
        self.seq as u32 | (self.code as u32) << 8 | (self.size as u32) << 16
    }
    /// Unpack dword0 (total).
    pub fn decode(v: u32) -> Self {
        Self { seq: v as u8, code: (v >> 8) as u8, size: (v >> 16) as u16 }
    }
    /// The request CRC: CRC-32C over the 8-byte header with the CRC field zero, then the payload.
    pub fn request_crc(&self, payload: &[u8]) -> u32 {
        let mut h = [0u8; 8];
        h[0..4].copy_from_slice(&self.encode().to_le_bytes());
        let c = crc32c_update(0xFFFF_FFFF, &h);
        crc32c_update(c, payload) ^ 0xFFFF_FFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        let h = FwHeader { seq: 3, code: 4, size: 9 };
        assert_eq!(FwHeader::decode(h.encode()), h);
        let mut all = vec![0u8; 8];
        all[0..4].copy_from_slice(&h.encode().to_le_bytes());
        all.push(1);
        assert_eq!(h.request_crc(&[1]), crc32c(&all));
    }
}
