//! The vfio-user wire format (the protocol QEMU's `vfio-user-pci` and libvfio-user speak):
//! every message is a 16-byte header — message id, command, total size, flags, error — and a
//! command-specific body of little-endian fields laid out as the matching VFIO ioctl
//! structures; descriptors (DMA memory, eventfds) travel with a message as SCM_RIGHTS.
//!
//! Both ends of this project's vfio-user connections use this module: the client platform
//! ([`super::VfioUserPlatform`]) and the simulator's shared server (`sim-serve`). Decoding
//! checks every size and never panics on what a peer sends.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::fdpass;

/// Bytes of a message header.
pub const HEADER_SIZE: usize = 16;
/// Largest message accepted: a maximal data transfer (1 MiB, the protocol's default
/// `max_data_xfer_size`) plus its header and access fields.
pub const MAX_MESSAGE: usize = (1 << 20) + 64;
/// Most descriptors one message may carry (SET_IRQS of many vectors).
pub const MAX_MESSAGE_FDS: usize = 64;
/// Largest REGION_READ/WRITE data length.
pub const MAX_DATA_XFER: u32 = 1 << 20;

/// Header flags: the message type (low nibble) and the no-reply and error bits.
pub mod flags {
    pub const COMMAND: u32 = 0;
    pub const REPLY: u32 = 1;
    pub const TYPE_MASK: u32 = 0xf;
    pub const NO_REPLY: u32 = 1 << 4;
    pub const ERROR: u32 = 1 << 5;
}

/// vfio-user commands; the discriminants are the protocol's numbers (decoding is derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq, num_enum::TryFromPrimitive, num_enum::IntoPrimitive)]
#[repr(u16)]
pub enum Command {
    Version = 1,
    DmaMap = 2,
    DmaUnmap = 3,
    DeviceGetInfo = 4,
    DeviceGetRegionInfo = 5,
    GetRegionIoFds = 6,
    GetIrqInfo = 7,
    SetIrqs = 8,
    RegionRead = 9,
    RegionWrite = 10,
    DmaRead = 11,
    DmaWrite = 12,
    DeviceReset = 13,
    DirtyPages = 14,
    /// This project's extension, numbered outside the protocol's commands: the connection's
    /// fast path (posted-write ring, its bell, the published registers: [`FastPathInfo`]).
    /// Servers that do not know it refuse it (ENOTSUP); QEMU never sends it.
    FastPath = 0x4e01,
}

impl Command {
    /// The command numbered `v`, if any.
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::try_from(v).ok()
    }
}

/// What can go wrong on a vfio-user connection.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("vfio-user socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("vfio-user: the peer closed the connection")]
    Closed,
    #[error("vfio-user: message of {size} bytes (a header is {HEADER_SIZE}, at most {MAX_MESSAGE})")]
    BadSize { size: u32 },
    #[error("vfio-user: {what}: body of {got} bytes, {need} needed")]
    Short { what: &'static str, need: usize, got: usize },
    #[error("vfio-user: {0}")]
    Protocol(String),
    /// The peer answered with an error reply.
    #[error("vfio-user: the server refused {command:?}: {}", std::io::Error::from_raw_os_error(*errno as i32))]
    Refused { command: Command, errno: u32 },
}

/// A message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub id: u16,
    pub command: u16,
    /// Header plus body bytes.
    pub size: u32,
    pub flags: u32,
    /// An errno, in error replies.
    pub error: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..2].copy_from_slice(&self.id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_SIZE]) -> Self {
        let u32at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            id: u16::from_le_bytes([b[0], b[1]]),
            command: u16::from_le_bytes([b[2], b[3]]),
            size: u32at(4),
            flags: u32at(8),
            error: u32at(12),
        }
    }

    pub fn is_reply(&self) -> bool {
        self.flags & flags::TYPE_MASK == flags::REPLY
    }

    pub fn no_reply(&self) -> bool {
        self.flags & flags::NO_REPLY != 0
    }

    pub fn is_error(&self) -> bool {
        self.flags & flags::ERROR != 0
    }
}

/// One received message.
#[derive(Debug)]
pub struct Message {
    pub header: Header,
    pub body: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Read one message: `Ok(None)` at end of file between messages.
pub fn read_message(stream: &UnixStream) -> Result<Option<Message>, WireError> {
    let mut hb = [0u8; HEADER_SIZE];
    // The descriptors arrive with the first bytes of the message.
    let (n, fds) = fdpass::recv_fds(stream, &mut hb, MAX_MESSAGE_FDS)?;
    if n == 0 {
        return Ok(None);
    }
    let mut r = stream;
    if n < HEADER_SIZE {
        r.read_exact(&mut hb[n..]).map_err(eof_closed)?;
    }
    let header = Header::decode(&hb);
    let size = header.size as usize;
    if !(HEADER_SIZE..=MAX_MESSAGE).contains(&size) {
        return Err(WireError::BadSize { size: header.size });
    }
    let mut body = vec![0u8; size - HEADER_SIZE];
    r.read_exact(&mut body).map_err(eof_closed)?;
    Ok(Some(Message { header, body, fds }))
}

fn eof_closed(e: std::io::Error) -> WireError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        WireError::Closed
    } else {
        WireError::Io(e)
    }
}

/// Write one message (`header.size` is set from the body).
pub fn write_message(
    stream: &UnixStream,
    mut header: Header,
    body: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), WireError> {
    let size = HEADER_SIZE + body.len();
    header.size = u32::try_from(size)
        .ok()
        .filter(|&s| s as usize <= MAX_MESSAGE)
        .ok_or(WireError::BadSize { size: u32::try_from(size).unwrap_or(u32::MAX) })?;
    let mut buf = Vec::with_capacity(size);
    buf.extend_from_slice(&header.encode());
    buf.extend_from_slice(body);
    fdpass::send_all_fds(stream, &buf, fds)?;
    Ok(())
}

/// The reply to `req`: success with `body`, or an error carrying `errno`.
pub fn reply(stream: &UnixStream, req: &Header, result: Result<&[u8], u32>) -> Result<(), WireError> {
    reply_with(stream, req, result, &[])
}

/// [`reply`] with descriptors beside a successful reply.
pub fn reply_with(
    stream: &UnixStream,
    req: &Header,
    result: Result<&[u8], u32>,
    fds: &[BorrowedFd<'_>],
) -> Result<(), WireError> {
    let (flags, error, body, fds) = match result {
        Ok(b) => (flags::REPLY, 0, b, fds),
        Err(errno) => (flags::REPLY | flags::ERROR, errno, &[][..], &[][..]),
    };
    write_message(stream, Header { id: req.id, command: req.command, size: 0, flags, error }, body, fds)
}

/// Little-endian body builder.
#[derive(Debug, Default)]
pub struct Body(pub Vec<u8>);

impl Body {
    pub fn new() -> Self {
        Self(Vec::new())
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// Little-endian body reader: each field checked against the remaining length.
#[derive(Debug)]
pub struct Fields<'a> {
    what: &'static str,
    buf: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    pub fn new(what: &'static str, buf: &'a [u8]) -> Self {
        Self { what, buf, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or(WireError::Short {
            what: self.what,
            need: self.at.saturating_add(n),
            got: self.buf.len(),
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.at..]
    }
}

/// DMA_MAP flags: the device may read / write the memory.
pub const DMA_READ: u32 = 1 << 0;
pub const DMA_WRITE: u32 = 1 << 1;
/// DMA_UNMAP flag: every mapping.
pub const DMA_UNMAP_ALL: u32 = 1 << 2;

/// DMA_MAP's body: `argsz, flags, offset, address, size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMap {
    pub flags: u32,
    /// Offset of the mapping in the descriptor's file.
    pub offset: u64,
    /// The IOVA.
    pub address: u64,
    pub size: u64,
}

impl DmaMap {
    pub const LEN: usize = 32;
    pub fn encode(&self) -> Vec<u8> {
        Body::new().u32(Self::LEN as u32).u32(self.flags).u64(self.offset).u64(self.address).u64(self.size).0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("DMA_MAP", b);
        let _argsz = f.u32()?;
        Ok(Self { flags: f.u32()?, offset: f.u64()?, address: f.u64()?, size: f.u64()? })
    }
}

/// DMA_UNMAP's body: `argsz, flags, address, size` (the reply echoes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaUnmap {
    pub flags: u32,
    pub address: u64,
    pub size: u64,
}

impl DmaUnmap {
    pub const LEN: usize = 24;
    pub fn encode(&self) -> Vec<u8> {
        Body::new().u32(Self::LEN as u32).u32(self.flags).u64(self.address).u64(self.size).0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("DMA_UNMAP", b);
        let _argsz = f.u32()?;
        Ok(Self { flags: f.u32()?, address: f.u64()?, size: f.u64()? })
    }
}

/// REGION_READ / REGION_WRITE access fields: `offset, region, count` (then the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionAccess {
    pub offset: u64,
    pub region: u32,
    pub count: u32,
}

impl RegionAccess {
    pub const LEN: usize = 16;
    pub fn encode(&self, data: &[u8]) -> Vec<u8> {
        Body::new().u64(self.offset).u32(self.region).u32(self.count).bytes(data).0
    }
    /// The fields and the data after them.
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let mut f = Fields::new("REGION access", b);
        let a = Self { offset: f.u64()?, region: f.u32()?, count: f.u32()? };
        if a.count > MAX_DATA_XFER {
            return Err(WireError::Protocol(format!("region access of {} bytes (at most {MAX_DATA_XFER})", a.count)));
        }
        Ok((a, f.rest()))
    }
}

/// DEVICE_GET_INFO's reply: `argsz, flags, num_regions, num_irqs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceInfo {
    pub flags: u32,
    pub num_regions: u32,
    pub num_irqs: u32,
}

impl DeviceInfo {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> Vec<u8> {
        Body::new().u32(Self::LEN as u32).u32(self.flags).u32(self.num_regions).u32(self.num_irqs).0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("DEVICE_GET_INFO", b);
        let _argsz = f.u32()?;
        Ok(Self { flags: f.u32()?, num_regions: f.u32()?, num_irqs: f.u32()? })
    }
}

/// DEVICE_GET_REGION_INFO's body (`struct vfio_region_info`): `argsz, flags, index,
/// cap_offset, size, offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionInfo {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub cap_offset: u32,
    pub size: u64,
    /// Offset of the region in the descriptor the reply carries (when it carries one).
    pub offset: u64,
}

impl RegionInfo {
    pub const LEN: usize = 32;
    pub fn encode(&self) -> Vec<u8> {
        Body::new()
            .u32(self.argsz)
            .u32(self.flags)
            .u32(self.index)
            .u32(self.cap_offset)
            .u64(self.size)
            .u64(self.offset)
            .0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("DEVICE_GET_REGION_INFO", b);
        Ok(Self {
            argsz: f.u32()?,
            flags: f.u32()?,
            index: f.u32()?,
            cap_offset: f.u32()?,
            size: f.u64()?,
            offset: f.u64()?,
        })
    }
}

/// GET_IRQ_INFO's body: `argsz, flags, index, count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqInfo {
    pub flags: u32,
    pub index: u32,
    pub count: u32,
}

impl IrqInfo {
    pub const LEN: usize = 16;
    pub fn encode(&self) -> Vec<u8> {
        Body::new().u32(Self::LEN as u32).u32(self.flags).u32(self.index).u32(self.count).0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("GET_IRQ_INFO", b);
        let _argsz = f.u32()?;
        Ok(Self { flags: f.u32()?, index: f.u32()?, count: f.u32()? })
    }
}

/// SET_IRQS's body: `argsz, flags, index, start, count` (eventfds as descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetIrqs {
    pub flags: u32,
    pub index: u32,
    pub start: u32,
    pub count: u32,
}

impl SetIrqs {
    pub const LEN: usize = 20;
    pub fn encode(&self) -> Vec<u8> {
        Body::new().u32(Self::LEN as u32).u32(self.flags).u32(self.index).u32(self.start).u32(self.count).0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("SET_IRQS", b);
        let _argsz = f.u32()?;
        Ok(Self { flags: f.u32()?, index: f.u32()?, start: f.u32()?, count: f.u32()? })
    }
}

/// [`Command::FastPath`]'s reply: `ring_entries, region, count`, then `count` register
/// offsets; beside it three descriptors, in this order: the posted-write ring
/// ([`super::ring`], `ring::words_for(ring_entries)` words, mapped read-write), the ring's bell
/// (an eventfd the client writes to wake the server), and the published registers
/// (`platform::Subscriber` of `count` words, read-only): data word `i` is the 32-bit register
/// at `offsets[i]` of `region`, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastPathInfo {
    pub ring_entries: u32,
    pub region: u32,
    pub offsets: Vec<u64>,
}

impl FastPathInfo {
    /// At most this many published registers.
    pub const MAX_OFFSETS: usize = 1 << 14;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Body::new().u32(self.ring_entries).u32(self.region).u32(self.offsets.len() as u32);
        for o in &self.offsets {
            b = b.u64(*o);
        }
        b.0
    }
    pub fn decode(b: &[u8]) -> Result<Self, WireError> {
        let mut f = Fields::new("FAST_PATH", b);
        let (ring_entries, region, count) = (f.u32()?, f.u32()?, f.u32()? as usize);
        if count > Self::MAX_OFFSETS || count * 8 != f.rest().len() {
            return Err(WireError::Protocol(format!(
                "FAST_PATH: {count} offsets in {} bytes (at most {})",
                f.rest().len(),
                Self::MAX_OFFSETS
            )));
        }
        let offsets = (0..count).map(|_| f.u64()).collect::<Result<Vec<_>, _>>()?;
        if offsets.windows(2).any(|w| w[0] >= w[1]) {
            return Err(WireError::Protocol("FAST_PATH: offsets not ascending".into()));
        }
        Ok(Self { ring_entries, region, offsets })
    }
}

/// VERSION's body: `major, minor`, then the capabilities as a NUL-terminated JSON object.
pub fn version_body(major: u16, minor: u16, caps_json: &str) -> Vec<u8> {
    Body::new().u16(major).u16(minor).bytes(caps_json.as_bytes()).bytes(&[0]).0
}

/// Descriptors as borrowed for [`write_message`].
pub fn borrow_all(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(|f| f.as_fd()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_and_short_ones_are_errors() {
        let m = DmaMap { flags: DMA_READ | DMA_WRITE, offset: 4096, address: 0x10_0000, size: 8192 };
        assert_eq!(m.encode().len(), DmaMap::LEN);
        assert_eq!(DmaMap::decode(&m.encode()).unwrap(), m);
        let u = DmaUnmap { flags: 0, address: 1, size: 2 };
        assert_eq!(DmaUnmap::decode(&u.encode()).unwrap(), u);
        let r = RegionInfo { argsz: 32, flags: 3, index: 4, cap_offset: 0, size: 1 << 20, offset: 0 };
        assert_eq!(RegionInfo::decode(&r.encode()).unwrap(), r);
        let a = RegionAccess { offset: 8, region: 0, count: 4 };
        let enc = a.encode(&[1, 2, 3, 4]);
        assert_eq!(RegionAccess::decode(&enc).unwrap(), (a, &[1u8, 2, 3, 4][..]));
        let big = RegionAccess { count: MAX_DATA_XFER + 1, ..a };
        assert!(RegionAccess::decode(&big.encode(&[])).is_err());
        let s = SetIrqs { flags: 0x24, index: 2, start: 1, count: 1 };
        assert_eq!(SetIrqs::decode(&s.encode()).unwrap(), s);
        for n in 0..DmaMap::LEN {
            assert!(matches!(DmaMap::decode(&m.encode()[..n]), Err(WireError::Short { .. })), "{n}");
        }
        let h = Header { id: 7, command: 9, size: 32, flags: flags::REPLY | flags::ERROR, error: 22 };
        assert_eq!(Header::decode(&h.encode()), h);
        assert!(h.is_reply() && h.is_error() && !h.no_reply());
        assert_eq!(Command::from_u16(13), Some(Command::DeviceReset));
        let known: Vec<u16> = (0..=u16::MAX).filter(|&v| Command::from_u16(v).is_some()).collect();
        assert_eq!(known, (1..=14).chain([0x4e01]).collect::<Vec<u16>>());
        let fp = FastPathInfo { ring_entries: 256, region: 0, offsets: vec![8, 16, 0x1_0000_0000] };
        assert_eq!(FastPathInfo::decode(&fp.encode()).unwrap(), fp);
        let mut bad = fp.encode();
        bad.pop();
        assert!(FastPathInfo::decode(&bad).is_err(), "a count its bytes do not match");
        let unsorted = FastPathInfo { offsets: vec![16, 8], ..fp.clone() };
        assert!(FastPathInfo::decode(&unsorted.encode()).is_err());
        let mut huge = Body::new().u32(1).u32(0).u32(u32::MAX).0;
        huge.extend_from_slice(&[0; 8]);
        assert!(FastPathInfo::decode(&huge).is_err());
        assert!(known.iter().all(|&v| Command::from_u16(v).map(u16::from) == Some(v)));
    }

    #[test]
    fn messages_cross_a_socket_and_bad_sizes_are_refused() {
        use std::io::Write;
        let (a, b) = UnixStream::pair().unwrap();
        let (efd, _) = UnixStream::pair().unwrap();
        let h = Header { id: 1, command: Command::SetIrqs as u16, ..Default::default() };
        write_message(&a, h, &SetIrqs { flags: 0, index: 2, start: 0, count: 1 }.encode(), &[efd.as_fd()]).unwrap();
        let m = read_message(&b).unwrap().unwrap();
        assert_eq!((m.header.id, m.header.size as usize, m.fds.len()), (1, HEADER_SIZE + SetIrqs::LEN, 1));
        // A header claiming less than itself, or more than the limit.
        for size in [3u32, MAX_MESSAGE as u32 + 1] {
            (&a).write_all(&Header { size, ..h }.encode()).unwrap();
            assert!(matches!(read_message(&b), Err(WireError::BadSize { .. })));
        }
        // A body cut short by the peer closing.
        (&a).write_all(&Header { size: 40, ..h }.encode()).unwrap();
        (&a).write_all(&[0u8; 4]).unwrap();
        drop(a);
        assert!(matches!(read_message(&b), Err(WireError::Closed)));
        assert!(read_message(&b).unwrap().is_none());
    }
}
