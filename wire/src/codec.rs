//! Frames of little-endian fields: a protocol's [`Format`] (its header layout, version, the
//! width of its tags and length prefixes, its size limit), [`Enc`] to write a frame and
//! [`Dec`] to read one back. Every read is bounds-checked: a short, long or malformed frame is
//! a [`DecodeError`], never a panic, and a peer's count never sizes an allocation by itself.

/// The width of an integer a format writes for tags and length prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    U8,
    U16,
    U32,
}

impl Width {
    /// Bytes on the wire.
    pub const fn bytes(self) -> usize {
        match self {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 => 4,
        }
    }

    /// The largest value it holds.
    pub const fn max(self) -> usize {
        match self {
            Width::U8 => u8::MAX as usize,
            Width::U16 => u16::MAX as usize,
            Width::U32 => u32::MAX as usize,
        }
    }

    /// `v` (at most [`Width::max`]: larger is cut to it) little-endian.
    fn put(self, out: &mut Vec<u8>, v: usize) {
        let v = v.min(self.max()) as u32;
        out.extend_from_slice(&v.to_le_bytes()[..self.bytes()]);
    }

    /// The value of `b` (exactly [`Width::bytes`] long).
    fn get(b: &[u8]) -> usize {
        let mut a = [0u8; 4];
        a[..b.len()].copy_from_slice(b);
        u32::from_le_bytes(a) as usize
    }
}

/// Where a frame says its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// `len: u32` first, counting every byte after it (the rest of the header and the body).
    Front,
    /// `len: u32` last in the header, counting the body only.
    Back,
}

/// A protocol's frame layout. A header is, in order (with [`Length::Front`] the length first,
/// with [`Length::Back`] last): `magic`, `version: u16`, `tag` ([`Format::tag`] wide),
/// `len: u32`; then the body of fields.
#[derive(Debug)]
pub struct Format {
    /// The protocol's name, for messages.
    pub name: &'static str,
    /// First bytes of every frame's header (may be empty).
    pub magic: &'static [u8],
    /// The version this build speaks: a frame of another is refused.
    pub version: u16,
    pub tag: Width,
    pub length: Length,
    /// Width of a string's or byte string's length and of a list's count.
    pub count: Width,
    /// Largest length a frame may announce.
    pub max_len: usize,
}

/// Why bytes are not a frame of a format, or its fields not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    FrameTooLong { len: usize, max: usize },
    #[error("frame of {got} bytes, its header says {want}")]
    Length { got: usize, want: usize },
    #[error("bad magic {got:02x?} (not a {name} frame)")]
    Magic { name: &'static str, got: Vec<u8> },
    #[error("protocol version {got} (this build speaks {want})")]
    Version { got: u16, want: u16 },
    #[error("unknown {what} tag {tag:#x}")]
    Tag { what: &'static str, tag: u32 },
    #[error("tag {tag:#06x} is a {is}, a {want} was expected")]
    Kind { tag: u32, is: &'static str, want: &'static str },
    #[error("{what}: the frame ends early ({need} more bytes needed at offset {at})")]
    Truncated { what: &'static str, at: usize, need: usize },
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("{what}: not UTF-8")]
    Utf8 { what: &'static str },
    #[error("{what} of {len} exceeds the limit of {max}")]
    TooLong { what: &'static str, len: usize, max: usize },
    #[error("{what}: range {start:#x}..{end:#x} is reversed or out of bounds")]
    Range { what: &'static str, start: u64, end: u64 },
}

impl Format {
    /// Bytes of a header.
    pub const fn header_len(&self) -> usize {
        self.magic.len() + 2 + self.tag.bytes() + 4
    }

    /// Bytes a reader needs before it knows a frame's length ([`Format::frame_len`]).
    pub const fn prefix_len(&self) -> usize {
        match self.length {
            Length::Front => 4,
            Length::Back => self.header_len(),
        }
    }

    /// Where the rest of the header starts (after a leading length).
    const fn rest_at(&self) -> usize {
        match self.length {
            Length::Front => 4,
            Length::Back => 0,
        }
    }

    /// The length of the whole frame whose first [`Format::prefix_len`] bytes are `prefix`,
    /// checked against [`Format::max_len`] (and, when the header is all there, its magic and
    /// version).
    pub fn frame_len(&self, prefix: &[u8]) -> Result<usize, DecodeError> {
        let (len_at, fixed) = match self.length {
            Length::Front => (0, 4),
            Length::Back => (self.header_len() - 4, self.header_len()),
        };
        let b = prefix.get(len_at..len_at + 4).ok_or_else(|| DecodeError::Truncated {
            what: "frame length",
            at: prefix.len(),
            need: (len_at + 4).saturating_sub(prefix.len()),
        })?;
        if self.length == Length::Back {
            self.check_header(prefix)?;
        }
        let len = Width::get(b);
        if len > self.max_len {
            return Err(DecodeError::FrameTooLong { len, max: self.max_len });
        }
        Ok(fixed + len)
    }

    /// Magic and version of a frame's header, and its tag.
    fn check_header(&self, frame: &[u8]) -> Result<u16, DecodeError> {
        let at = self.rest_at();
        let h = frame.get(at..at + self.header_len() - 4).ok_or_else(|| DecodeError::Truncated {
            what: "header",
            at: frame.len(),
            need: (at + self.header_len() - 4).saturating_sub(frame.len()),
        })?;
        let (magic, h) = h.split_at(self.magic.len());
        if magic != self.magic {
            return Err(DecodeError::Magic { name: self.name, got: magic.to_vec() });
        }
        let version = u16::from_le_bytes([h[0], h[1]]);
        if version != self.version {
            return Err(DecodeError::Version { got: version, want: self.version });
        }
        Ok(Width::get(&h[2..2 + self.tag.bytes()]) as u16)
    }

    /// A frame of `tag` to write fields into.
    pub fn encoder(&'static self, tag: u16) -> Enc {
        let mut buf = Vec::with_capacity(64);
        if self.length == Length::Front {
            buf.extend_from_slice(&[0; 4]);
        }
        buf.extend_from_slice(self.magic);
        buf.extend_from_slice(&self.version.to_le_bytes());
        self.tag.put(&mut buf, tag.into());
        if self.length == Length::Back {
            buf.extend_from_slice(&[0; 4]);
        }
        Enc { fmt: self, buf }
    }

    /// A whole frame's tag, and a reader of its body: length, magic and version checked.
    pub fn open<'a>(&'static self, frame: &'a [u8]) -> Result<(u16, Dec<'a>), DecodeError> {
        let want = self.frame_len(frame)?;
        if frame.len() != want {
            return Err(DecodeError::Length { got: frame.len(), want });
        }
        let tag = self.check_header(frame)?;
        Ok((tag, Dec { fmt: self, b: frame, at: self.header_len() }))
    }
}

/// `fn NAME(&mut self, v: NAME) -> &mut Self` for each integer type: `v` little-endian.
macro_rules! le_writers {
    ($($t:ident),*) => {$(
        pub fn $t(&mut self, v: $t) -> &mut Self {
            self.buf.extend_from_slice(&v.to_le_bytes());
            self
        }
    )*};
}

/// A frame being written ([`Format::encoder`]): fields in order, then [`Enc::finish`].
#[derive(Debug)]
pub struct Enc {
    fmt: &'static Format,
    buf: Vec<u8>,
}

impl Enc {
    le_writers!(u8, u16, u32, u64, i64);
    /// A list's count (the elements follow).
    pub fn count(&mut self, n: usize) -> &mut Self {
        self.fmt.count.put(&mut self.buf, n);
        self
    }
    /// A string of at most `max` bytes (and what the count holds): a longer one is cut at a
    /// character boundary (strings are names and messages).
    pub fn str(&mut self, s: &str, max: usize) -> &mut Self {
        let mut end = s.len().min(max).min(self.fmt.count.max());
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes(&s.as_bytes()[..end], end)
    }
    /// At most `max` bytes (and what the count holds): longer is a caller's bug, cut.
    pub fn bytes(&mut self, b: &[u8], max: usize) -> &mut Self {
        let b = &b[..b.len().min(max).min(self.fmt.count.max())];
        self.count(b.len());
        self.buf.extend_from_slice(b);
        self
    }
    /// The frame, its length filled in (the encoder is left empty).
    pub fn finish(&mut self) -> Vec<u8> {
        let (at, len) = match self.fmt.length {
            Length::Front => (0, self.buf.len() - 4),
            Length::Back => (self.fmt.header_len() - 4, self.buf.len() - self.fmt.header_len()),
        };
        // Frames are far below 4 GiB; a larger one would be refused by the peer, not misread.
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        std::mem::take(&mut self.buf)
    }
}

/// `fn NAME(&mut self, what) -> Result<NAME, DecodeError>` for each integer type: the next
/// bytes little-endian (`what`: the field, for the error).
macro_rules! le_readers {
    ($($t:ident),*) => {$(
        pub fn $t(&mut self, what: &'static str) -> Result<$t, DecodeError> {
            Ok($t::from_le_bytes(self.array(what)?))
        }
    )*};
}

/// The unread rest of a frame's body ([`Format::open`]).
#[derive(Debug)]
pub struct Dec<'a> {
    fmt: &'static Format,
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let remaining = self.b.len() - self.at;
        if n > remaining {
            return Err(DecodeError::Truncated { what, at: self.at, need: n - remaining });
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    le_readers!(u8, u16, u32, u64, i64);
    /// A `u8` that is 0 or 1.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(DecodeError::Tag { what, tag: tag.into() }),
        }
    }
    /// A list's count: at most `max`, and its elements of at least `size` bytes each must fit
    /// in what is left.
    pub fn count(&mut self, what: &'static str, size: usize, max: usize) -> Result<usize, DecodeError> {
        let w = self.fmt.count.bytes();
        let n = Width::get(self.take(w, what)?);
        if n > max {
            return Err(DecodeError::TooLong { what, len: n, max });
        }
        let remaining = self.b.len() - self.at;
        match n.checked_mul(size) {
            Some(bytes) if bytes <= remaining => Ok(n),
            Some(bytes) => Err(DecodeError::Truncated { what, at: self.at, need: bytes - remaining }),
            None => Err(DecodeError::Truncated { what, at: self.at, need: usize::MAX }),
        }
    }
    /// At most `max` bytes.
    pub fn bytes(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, DecodeError> {
        let n = self.count(what, 1, max)?;
        Ok(self.take(n, what)?.to_vec())
    }
    /// A UTF-8 string of at most `max` bytes.
    pub fn str(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes(what, max)?).map_err(|_| DecodeError::Utf8 { what })
    }
    /// `start..end` (two `u64`) with `start <= end`.
    pub fn range(&mut self, what: &'static str) -> Result<std::ops::Range<u64>, DecodeError> {
        let (start, end) = (self.u64(what)?, self.u64(what)?);
        if start > end {
            return Err(DecodeError::Range { what, start, end });
        }
        Ok(start..end)
    }
    /// Nothing may be left.
    pub fn end(&self) -> Result<(), DecodeError> {
        match self.b.len() - self.at {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}
