//! Little-endian fields at byte offsets: the one reader (and writer) of the fixed layouts the
//! project decodes — sequencer slots (`isa`), the NEFF header (`neff`), device records (here and
//! in the runtime's own decoders). The offsets are the callers' constants inside buffers of a
//! fixed size, so a field past the end is a caller's bug: these index like a slice (and panic
//! there, as `b[off]` would). Each is `#[inline]`: they sit on the execute path (every
//! notification record the runtime harvests is decoded with them), and a non-generic function
//! is not inlined across crates otherwise — a call per field cost the harvest ~2,250
//! instructions per execute (callgrind, `bench exec --only spin-inline`).

/// The `u16` at `b[off..off + 2]`.
#[inline]
pub fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(array_at(b, off))
}

/// The `u32` at `b[off..off + 4]`.
#[inline]
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(array_at(b, off))
}

/// The `u64` at `b[off..off + 8]`.
#[inline]
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(array_at(b, off))
}

/// The `N` bytes at `b[off..off + N]`.
#[inline]
pub fn array_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

/// Writes `v` at `b[off..off + v.len()]` (a field's `to_le_bytes()`).
#[inline]
pub fn put(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_what_was_put() {
        let mut b = [0u8; 16];
        put(&mut b, 1, &0xBEEFu16.to_le_bytes());
        put(&mut b, 3, &0x0102_0304u32.to_le_bytes());
        put(&mut b, 7, &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(b[1..3], [0xEF, 0xBE]);
        assert_eq!(b[3..7], [0x04, 0x03, 0x02, 0x01]);
        assert_eq!(u16_at(&b, 1), 0xBEEF);
        assert_eq!(u32_at(&b, 3), 0x0102_0304);
        assert_eq!(u64_at(&b, 7), 0x1122_3344_5566_7788);
        assert_eq!(array_at::<2>(&b, 14), [0x11, 0]);
    }
}
