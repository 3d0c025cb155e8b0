//! `.npy` weight payloads as libnrt reads them (docs/facts/libnrt.md §1.6): u16 magic 0x4E93 ("\x93N"),
//! header length = u16 at offset 8, data from `header_len + 10` (the v1 layout), zero-copy.

use std::ops::Range;

/// Where the array data of an `.npy` member lies, or why it cannot be read.
pub fn npy_data_range(b: &[u8]) -> Result<Range<usize>, String> {
    if b.len() < 10 {
        return Err(format!("npy member is {} bytes, shorter than the 10-byte preamble", b.len()));
    }
    let magic = u16::from_le_bytes([b[0], b[1]]);
    if magic != 0x4E93 {
        return Err(format!("npy magic is {magic:#06x}, expected 0x4e93"));
    }
    let hlen = usize::from(u16::from_le_bytes([b[8], b[9]]));
    let start = hlen + 10;
    if start > b.len() {
        return Err(format!("npy header length {hlen} runs past the member end ({} bytes)", b.len()));
    }
    Ok(start..b.len())
}

/// Offset of the array data in an `.npy` member of `total` bytes whose first bytes are
/// `head` (the same checks as [`npy_data_range`], for a member streamed elsewhere).
pub fn npy_data_offset(head: &[u8], total: u64) -> Result<u64, String> {
    if total < 10 || head.len() < 10 {
        return Err(format!("npy member is {total} bytes, shorter than the 10-byte preamble"));
    }
    let magic = u16::from_le_bytes([head[0], head[1]]);
    if magic != 0x4E93 {
        return Err(format!("npy magic is {magic:#06x}, expected 0x4e93"));
    }
    let start = u64::from(u16::from_le_bytes([head[8], head[9]])) + 10;
    if start > total {
        return Err(format!("npy header length {} runs past the member end ({total} bytes)", start - 10));
    }
    Ok(start)
}

/// Writes a v1 `.npy` (little-endian, C order) around `data`.
pub fn npy_encode(descr: &str, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    // Pad so that data starts on a 64-byte boundary; the header ends with '\n'.
    let unpadded = 10 + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    dict.push_str(&" ".repeat(pad));
    dict.push('\n');
    let mut out = Vec::with_capacity(10 + dict.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// The numpy `descr` of a tier-1 dtype string.
pub fn npy_descr(dtype: &str) -> &'static str {
    match dtype {
        "float32" => "<f4",
        "float16" => "<f2",
        "int8" => "|i1",
        "int16" => "<i2",
        "int32" => "<i4",
        "int64" => "<i8",
        "uint8" => "|u1",
        "uint16" => "<u2",
        "uint32" => "<u4",
        "uint64" => "<u8",
        _ => "|V1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_locate() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let f = npy_encode("<f4", &[2], &data);
        let r = npy_data_range(&f).map_err(|e| e.to_string());
        assert_eq!(r.clone().map(|r| r.start % 64), Ok(0));
        assert_eq!(r.map(|r| f[r].to_vec()), Ok(data.to_vec()));
    }

    #[test]
    fn rejects_bad_npy() {
        assert!(npy_data_range(b"\x93NUMPY").is_err());
        assert!(npy_data_range(b"XXNUMPY\x01\x00\x00\x00").is_err());
        assert!(npy_data_range(b"\x93NUMPY\x01\x00\xff\x00").is_err());
        assert_eq!(npy_data_range(b"\x93NUMPY\x01\x00\x00\x00"), Ok(10..10));
    }
}
