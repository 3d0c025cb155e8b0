//! The codec and whole frames through the crate's public API: layouts, checks, descriptors.

use proptest::prelude::*;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use wire::{send_frame, DecodeError, Format, FrameError, Length, Width};

/// The length first, no magic, u8 tags and u16 counts (the broker's layout).
static FRONT: Format = Format {
    name: "front",
    magic: b"",
    version: 3,
    tag: Width::U8,
    length: Length::Front,
    count: Width::U16,
    max_len: 1024,
};
/// Magic, u16 tags, the length last and u32 counts (the device host's layout).
static BACK: Format = Format {
    name: "back",
    magic: b"TEST",
    version: 7,
    tag: Width::U16,
    length: Length::Back,
    count: Width::U32,
    max_len: 1024,
};

fn sample(fmt: &'static Format, tag: u16, s: &str, list: &[u64]) -> Vec<u8> {
    let mut e = fmt.encoder(tag);
    e.u8(1).u16(2).u32(3).u64(4).i64(-5).str(s, 64).count(list.len());
    for v in list {
        e.u64(*v);
    }
    e.u64(10).u64(20).finish()
}

type Sample = (u16, String, Vec<u64>);

/// The sample's fields (an error when one differs from what [`sample`] wrote).
fn read_sample(fmt: &'static Format, f: &[u8]) -> Result<Sample, DecodeError> {
    let (tag, mut d) = fmt.open(f)?;
    let fixed = (d.u8("a")?, d.u16("b")?, d.u32("c")?, d.u64("d")?, d.i64("e")?);
    if fixed != (1, 2, 3, 4, -5) {
        return Err(DecodeError::Range { what: "fixed fields", start: 0, end: 0 });
    }
    let s = d.str("s", 64)?;
    let n = d.count("list", 8, 16)?;
    let list = (0..n).map(|_| d.u64("list")).collect::<Result<_, _>>()?;
    if d.range("range")? != (10..20) {
        return Err(DecodeError::Range { what: "range", start: 0, end: 0 });
    }
    d.end()?;
    Ok((tag, s, list))
}

#[test]
fn layouts_are_as_documented() {
    let f = FRONT.encoder(9).u32(0xaabbccdd).finish();
    assert_eq!(f, [7, 0, 0, 0, 3, 0, 9, 0xdd, 0xcc, 0xbb, 0xaa]);
    let f = BACK.encoder(0x8001).str("hi", 8).finish();
    assert_eq!(f, [b'T', b'E', b'S', b'T', 7, 0, 1, 0x80, 6, 0, 0, 0, 2, 0, 0, 0, b'h', b'i']);
    assert_eq!((FRONT.header_len(), FRONT.prefix_len(), BACK.header_len(), BACK.prefix_len()), (7, 4, 12, 12));
}

#[test]
fn versions_magic_lengths_and_limits_are_checked() {
    let mut f = sample(&FRONT, 4, "x", &[1]);
    f[4] = 9;
    assert_eq!(read_sample(&FRONT, &f), Err(DecodeError::Version { got: 9, want: 3 }));
    let mut f = sample(&BACK, 4, "x", &[1]);
    f[0] = b'X';
    assert!(matches!(read_sample(&BACK, &f), Err(DecodeError::Magic { .. })));
    let f = sample(&BACK, 4, "x", &[1]);
    assert_eq!(read_sample(&BACK, &f[..f.len() - 1]), Err(DecodeError::Length { got: f.len() - 1, want: f.len() }));
    assert_eq!(FRONT.frame_len(&2000u32.to_le_bytes()), Err(DecodeError::FrameTooLong { len: 2000, max: 1024 }));
    // A count beyond its limit, and one beyond the bytes there.
    let mut e = FRONT.encoder(1);
    e.count(17);
    assert!(matches!(FRONT.open(&e.finish()).unwrap().1.count("l", 8, 16), Err(DecodeError::TooLong { .. })));
    let mut e = FRONT.encoder(1);
    e.count(2).u64(0);
    assert!(matches!(FRONT.open(&e.finish()).unwrap().1.count("l", 8, 16), Err(DecodeError::Truncated { .. })));
    // Non-UTF-8, a reversed range, a bad bool, trailing bytes.
    let mut e = FRONT.encoder(1);
    e.bytes(&[0xff], 8).u64(2).u64(1).u8(2).u8(0);
    let f = e.finish();
    let (_, mut d) = FRONT.open(&f).unwrap();
    assert_eq!(d.str("s", 8), Err(DecodeError::Utf8 { what: "s" }));
    assert!(matches!(d.range("r"), Err(DecodeError::Range { start: 2, end: 1, .. })));
    assert!(matches!(d.bool("b"), Err(DecodeError::Tag { tag: 2, .. })));
    assert_eq!(d.end(), Err(DecodeError::Trailing(1)));
    // A long string is cut at a character boundary, not refused.
    let f = FRONT.encoder(1).str(&"é".repeat(10), 5).finish();
    assert_eq!(FRONT.open(&f).unwrap().1.str("s", 5).unwrap(), "éé");
}

#[test]
fn frames_carry_descriptors() {
    let (a, b) = UnixStream::pair().unwrap();
    let (mut x, y) = UnixStream::pair().unwrap();
    let f = sample(&FRONT, 5, "q", &[]);
    send_frame(&a, &f, &[y.as_fd()]).unwrap();
    drop(y);
    let (got, fds) = FRONT.recv_frame(&b, 4).unwrap();
    assert_eq!(got, f);
    assert_eq!(fds.len(), 1);
    // The received descriptor is the other end of x.
    let mut other = UnixStream::from(fds.into_iter().next().unwrap());
    x.write_all(b"hi").unwrap();
    let mut buf = [0u8; 2];
    other.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hi");
    // More descriptors than asked for: an error, not a frame.
    send_frame(&a, &f, &[x.as_fd(), x.as_fd()]).unwrap();
    assert!(matches!(FRONT.recv_frame(&b, 1), Err(FrameError::Io(_))));
}

#[test]
fn short_and_oversized_frames_are_errors() {
    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(&[3, 0]).unwrap();
    drop(a);
    assert!(matches!(FRONT.recv_frame(&b, 4), Err(FrameError::Short { got: 2, want: 4 })));
    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(matches!(FRONT.recv_frame(&b, 4), Err(FrameError::Decode(DecodeError::FrameTooLong { .. }))));
    drop(a);
    assert!(matches!(FRONT.recv_frame(&b, 4), Err(FrameError::Closed)));
    let f = sample(&BACK, 4, "x", &[1]);
    assert!(matches!(BACK.read_frame(&mut &f[..f.len() - 3]), Err(FrameError::Short { .. })));
}

proptest! {
    #[test]
    fn frames_round_trip(tag in 0u16..256, s in "[a-z0-9 é]{0,20}", list in proptest::collection::vec(any::<u64>(), 0..16)) {
        for fmt in [&FRONT, &BACK] {
            let f = sample(fmt, tag, &s, &list);
            prop_assert_eq!(fmt.read_frame(&mut f.as_slice()).unwrap(), f.clone());
            prop_assert_eq!(read_sample(fmt, &f).unwrap(), (tag, s.clone(), list.clone()));
        }
    }

    /// Arbitrary bytes never panic the reader or the decoder; every truncation is an error.
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128), cut in 0usize..200) {
        for fmt in [&FRONT, &BACK] {
            let _ = fmt.read_frame(&mut b.as_slice());
            let _ = read_sample(fmt, &b);
            let f = sample(fmt, 1, "abc", &[1, 2]);
            if cut < f.len() {
                prop_assert!(read_sample(fmt, &f[..cut]).is_err());
                prop_assert!(fmt.read_frame(&mut &f[..cut]).is_err());
            }
        }
    }
}
