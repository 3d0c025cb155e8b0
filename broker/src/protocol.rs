//! The broker's control protocol: small, versioned, length-prefixed binary frames.
//!
//! A frame is `len: u32 LE` (the bytes that follow, at most [`MAX_FRAME`]) then `version: u16
//! LE` ([`VERSION`]), `tag: u8` and the message's fields: integers little-endian, strings as
//! `u16` length + UTF-8 bytes (at most [`MAX_STR`]), lists as `u16` count + items (at most
//! [`MAX_LIST`]). Every read is bounds-checked; an unknown version or tag, a short or long
//! frame, bad UTF-8 or a field out of range is a [`ProtoError`], never a panic. File
//! descriptors travel beside a frame as SCM_RIGHTS ancillary data ([`crate::fdpass`]); the
//! frame says how many to expect.
//!
//! The client's pid and uid are never part of a message: the broker takes them from the
//! socket (SO_PEERCRED).

/// Protocol version: a frame of another version is refused ([`ErrorCode::Version`]). 2: a
/// lease counts logical NeuronCores (`Request::Lease::lnc`).
pub const VERSION: u16 = 2;
/// Largest frame body, bytes.
pub const MAX_FRAME: usize = 64 * 1024;
/// Longest string field, bytes.
pub const MAX_STR: usize = 4096;
/// Most items in a list field.
pub const MAX_LIST: usize = 256;

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    FrameTooLong(usize),
    #[error("truncated message: {need} more bytes needed at offset {at}")]
    Truncated { at: usize, need: usize },
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("protocol version {0} (this broker speaks {VERSION})")]
    Version(u16),
    #[error("unknown {what} tag {tag}")]
    Tag { what: &'static str, tag: u8 },
    #[error("string field is not UTF-8")]
    Utf8,
    #[error("{what} of {len} exceeds the limit of {max}")]
    TooLong { what: &'static str, len: usize, max: usize },
}

/// A device as a client names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Device `index` of the host's (this user's) shared simulated devices of `arch`.
    Sim { arch: String, index: u32 },
    /// A PCI function (BDF).
    Pci(String),
}

/// What a client is: a runtime (leases cores) or a tool (ls, monitor; no cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Runtime,
    Tool,
}

/// Which cores a lease asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Every core of the device.
    All,
    /// Any free contiguous range of this many cores.
    Count(u32),
    /// Exactly cores `first .. first + count`.
    Range { first: u32, count: u32 },
}

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The first message. `command` and `runtime_version` are shown by `ls` (informational).
    Hello { role: Role, command: String, runtime_version: String },
    /// Use a device (counts toward the 16 processes per device). The reply carries the data
    /// path's descriptors.
    Attach { spec: DeviceSpec },
    /// Lease cores on an attached device. `want` counts logical NeuronCores of `lnc` physical
    /// cores each (1: physical cores); the reply names the physical cores.
    Lease { device: u32, want: Want, lnc: u8 },
    /// After a broker restart, a client of the previous broker re-registers what it holds on
    /// device `spec` (docs/sharing.md): its IOVA window (the one starting at `iova_start`), its cores `first .. first +
    /// count`, its data path's id at the device's host (`path`, [`Reply::Leased`]; 0: none)
    /// and its device memory. `handoff` says which descriptors of the device travel with the
    /// frame, for a broker that does not have the device open yet (a VFIO device can be
    /// opened once: its live clients hold it). All of it is taken or none.
    Rejoin {
        spec: DeviceSpec,
        iova_start: u64,
        first: u32,
        count: u32,
        path: u64,
        grants: Vec<Grant>,
        handoff: Handoff,
    },
    /// Give the lease on `device` back.
    Release { device: u32 },
    /// Device memory on HBM channel `chan` for this client.
    AllocHbm { device: u32, chan: u32, len: u64 },
    /// Give back device memory by the handle [`Reply::Hbm`] returned.
    FreeHbm { device: u32, handle: u64 },
    /// Stop using a device (its lease and memory are released).
    Detach { device: u32 },
    /// Devices and the processes on them.
    Query,
    /// Reset leased NCs (bit n: device NC n, all this client's) through the device's firmware
    /// mailbox, which the broker serializes (one mailbox per device); the firmware part only.
    ResetNcs { device: u32, mask: u32 },
    /// One FW-IO request through the device's mailbox (payload at most [`MAX_FWIO`] bytes).
    Fwio { device: u32, cmd: u8, payload: Vec<u8> },
}

/// Device memory a previous broker granted: `len` bytes at device address `addr` of HBM
/// channel `chan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub chan: u32,
    pub addr: u64,
    pub len: u64,
}

/// The device descriptors a [`Request::Rejoin`] carries (SCM_RIGHTS, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// None.
    None,
    /// The VFIO device and the iommufd its IOAS `ioas` belongs to.
    Iommufd { ioas: u32 },
    /// The VFIO device, the no-IOMMU container and the group.
    NoIommu,
}

impl Handoff {
    /// Descriptors that travel with it.
    pub fn fds(&self) -> usize {
        match self {
            Handoff::None => 0,
            Handoff::Iommufd { .. } => 2,
            Handoff::NoIommu => 3,
        }
    }
}

/// Largest FW-IO payload a [`Request::Fwio`] or [`Reply::Fwio`] carries (the mailbox's).
pub const MAX_FWIO: usize = csr_maps::consts::fwio::MAX_PAYLOAD;

/// A process on a device, as [`Reply::Query`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub pid: u32,
    pub command: String,
    pub runtime_version: String,
    /// Leased cores `first .. first + count` (count 0: none).
    pub first: u32,
    pub count: u32,
    /// Device memory granted, bytes.
    pub hbm_bytes: u64,
}

/// A device the broker owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The broker's device number (what [`Request::Lease`] names).
    pub device: u32,
    /// `sim:shared:ARCH` index or BDF.
    pub name: String,
    pub arch: String,
    pub ncs: u32,
    /// Device memory granted to clients, bytes.
    pub hbm_granted: u64,
    /// IOVA windows in use (one per attached client).
    pub iova_windows: u32,
    /// Live DMA mappings in the device's IOMMU (the broker's own and every client's).
    pub iommu_mappings: u64,
    /// Collectives the device's own hub completed (ranks on this device meeting on the
    /// device path, not through a transport between processes).
    pub collectives: u64,
    /// Whether leases wait for clients of a previous broker to re-register.
    pub adopting: bool,
    pub clients: Vec<ClientInfo>,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The message did not decode (the connection is closed after this reply).
    BadMessage = 1,
    /// Another protocol version.
    Version = 2,
    /// A request before Hello, or a second Hello.
    Sequence = 3,
    /// The device spec names no device this broker can open.
    NoSuchDevice = 4,
    /// The device has its 16 processes.
    TooManyClients = 5,
    /// The cores asked for are not free.
    CoresUnavailable = 6,
    /// The request names a device this client has not attached.
    NotAttached = 7,
    /// The client already holds a lease on the device.
    AlreadyLeased = 8,
    /// A handle this client does not hold.
    NoSuchHandle = 9,
    /// Device memory exhausted.
    OutOfMemory = 10,
    /// The device waits for a previous broker's clients to re-register; retry.
    Adopting = 11,
    /// The device failed (opening it, its cleanup).
    Device = 12,
    /// A request out of range (a core range beyond the device, count 0).
    Invalid = 13,
    /// The firmware did not answer in time (a reset, a FW-IO request).
    FirmwareTimeout = 14,
    /// The firmware answered with an error.
    Firmware = 15,
    /// The broker stopped (SIGTERM, its service stopped): every lease it served is revoked and
    /// its cores taken back. Sent unasked, as the last frame, to every client.
    Stopped = 16,
}

impl ErrorCode {
    fn from_u16(v: u16) -> Option<Self> {
        use ErrorCode::*;
        Some(match v {
            1 => BadMessage,
            2 => Version,
            3 => Sequence,
            4 => NoSuchDevice,
            5 => TooManyClients,
            6 => CoresUnavailable,
            7 => NotAttached,
            8 => AlreadyLeased,
            9 => NoSuchHandle,
            10 => OutOfMemory,
            11 => Adopting,
            12 => Device,
            13 => Invalid,
            14 => FirmwareTimeout,
            15 => Firmware,
            16 => Stopped,
            _ => return None,
        })
    }
}

/// A reply from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Hello {
        broker_pid: u32,
    },
    /// Attached: the device's number, arch, NCs and this client's IOVA window.
    Attached {
        device: u32,
        arch: String,
        ncs: u32,
        iova_start: u64,
        iova_len: u64,
    },
    /// Leased cores `first .. first + count`, and the number of descriptors sent with the
    /// frame: the data path to the device (for a simulated device, one vfio-user connection;
    /// `path` is its id at the device's host, what a [`Request::Rejoin`] names; 0: none).
    Leased {
        device: u32,
        first: u32,
        count: u32,
        fds: u8,
        path: u64,
    },
    Hbm {
        handle: u64,
        addr: u64,
        len: u64,
    },
    Ok,
    Query(Vec<DeviceInfo>),
    /// A FW-IO request's response payload.
    Fwio {
        data: Vec<u8>,
    },
    /// A refused request; `owner_pid` names the process holding what was asked for (0: none).
    Error {
        code: ErrorCode,
        owner_pid: u32,
        message: String,
    },
}

struct W(Vec<u8>);

impl W {
    fn new(tag: u8) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0; 4]);
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.push(tag);
        W(v)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Strings longer than [`MAX_STR`] are cut at a character boundary (they are names).
    fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(MAX_STR);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
    /// At most [`MAX_FWIO`] bytes (longer is a caller's bug: cut).
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        let b = &b[..b.len().min(MAX_FWIO)];
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
        self
    }
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let remaining = self.b.len().saturating_sub(self.at);
        let end = end.ok_or_else(|| ProtoError::Truncated { at: self.at, need: n.saturating_sub(remaining) })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<String, ProtoError> {
        let n = self.u16()? as usize;
        if n > MAX_STR {
            return Err(ProtoError::TooLong { what: "string", len: n, max: MAX_STR });
        }
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| ProtoError::Utf8)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, ProtoError> {
        let n = self.u16()? as usize;
        if n > MAX_FWIO {
            return Err(ProtoError::TooLong { what: "FW-IO payload", len: n, max: MAX_FWIO });
        }
        Ok(self.take(n)?.to_vec())
    }
    fn count(&mut self) -> Result<usize, ProtoError> {
        let n = self.u16()? as usize;
        if n > MAX_LIST {
            return Err(ProtoError::TooLong { what: "list", len: n, max: MAX_LIST });
        }
        Ok(n)
    }
    fn end(&self) -> Result<(), ProtoError> {
        match self.b.len() - self.at {
            0 => Ok(()),
            n => Err(ProtoError::Trailing(n)),
        }
    }
}

/// The body of a frame (after its length): checks the version, returns the tag and a reader.
fn open(body: &[u8]) -> Result<(u8, R<'_>), ProtoError> {
    if body.len() > MAX_FRAME {
        return Err(ProtoError::FrameTooLong(body.len()));
    }
    let mut r = R { b: body, at: 0 };
    let v = r.u16()?;
    if v != VERSION {
        return Err(ProtoError::Version(v));
    }
    let tag = r.u8()?;
    Ok((tag, r))
}

/// The frame length a 4-byte prefix announces, checked against [`MAX_FRAME`].
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, ProtoError> {
    let n = u32::from_le_bytes(prefix) as usize;
    if n > MAX_FRAME {
        return Err(ProtoError::FrameTooLong(n));
    }
    Ok(n)
}

impl DeviceSpec {
    fn put(&self, w: &mut W) {
        match self {
            DeviceSpec::Sim { arch, index } => w.u8(0).str(arch).u32(*index),
            DeviceSpec::Pci(bdf) => w.u8(1).str(bdf),
        };
    }
    fn get(r: &mut R<'_>) -> Result<Self, ProtoError> {
        Ok(match r.u8()? {
            0 => DeviceSpec::Sim { arch: r.str()?, index: r.u32()? },
            1 => DeviceSpec::Pci(r.str()?),
            tag => return Err(ProtoError::Tag { what: "device spec", tag }),
        })
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Sim { arch, index } => write!(f, "sim:shared:{arch} device {index}"),
            DeviceSpec::Pci(bdf) => f.write_str(bdf),
        }
    }
}

impl Request {
    /// The frame (length prefix included).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello { role, command, runtime_version } => {
                let mut w = W::new(1);
                w.u8(matches!(role, Role::Tool) as u8).str(command).str(runtime_version);
                w.finish()
            }
            Request::Attach { spec } => {
                let mut w = W::new(2);
                spec.put(&mut w);
                w.finish()
            }
            Request::Lease { device, want, lnc } => {
                let mut w = W::new(3);
                w.u32(*device);
                match want {
                    Want::All => w.u8(0),
                    Want::Count(n) => w.u8(1).u32(*n),
                    Want::Range { first, count } => w.u8(2).u32(*first).u32(*count),
                };
                w.u8(*lnc);
                w.finish()
            }
            Request::Release { device } => {
                let mut w = W::new(5);
                w.u32(*device);
                w.finish()
            }
            Request::AllocHbm { device, chan, len } => {
                let mut w = W::new(6);
                w.u32(*device).u32(*chan).u64(*len);
                w.finish()
            }
            Request::FreeHbm { device, handle } => {
                let mut w = W::new(7);
                w.u32(*device).u64(*handle);
                w.finish()
            }
            Request::Detach { device } => {
                let mut w = W::new(8);
                w.u32(*device);
                w.finish()
            }
            Request::Query => W::new(9).finish(),
            Request::ResetNcs { device, mask } => {
                let mut w = W::new(10);
                w.u32(*device).u32(*mask);
                w.finish()
            }
            Request::Fwio { device, cmd, payload } => {
                let mut w = W::new(11);
                w.u32(*device).u8(*cmd).bytes(payload);
                w.finish()
            }
            Request::Rejoin { spec, iova_start, first, count, path, grants, handoff } => {
                let mut w = W::new(12);
                spec.put(&mut w);
                w.u64(*iova_start).u32(*first).u32(*count).u64(*path);
                let grants = &grants[..grants.len().min(MAX_LIST)];
                w.u16(grants.len() as u16);
                for g in grants {
                    w.u32(g.chan).u64(g.addr).u64(g.len);
                }
                match handoff {
                    Handoff::None => w.u8(0),
                    Handoff::Iommufd { ioas } => w.u8(1).u32(*ioas),
                    Handoff::NoIommu => w.u8(2),
                };
                w.finish()
            }
        }
    }

    /// Decode a frame body (the bytes after the length prefix).
    pub fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let (tag, mut r) = open(body)?;
        let m = match tag {
            1 => {
                let role = match r.u8()? {
                    0 => Role::Runtime,
                    1 => Role::Tool,
                    tag => return Err(ProtoError::Tag { what: "role", tag }),
                };
                Request::Hello { role, command: r.str()?, runtime_version: r.str()? }
            }
            2 => Request::Attach { spec: DeviceSpec::get(&mut r)? },
            3 => {
                let device = r.u32()?;
                let want = match r.u8()? {
                    0 => Want::All,
                    1 => Want::Count(r.u32()?),
                    2 => Want::Range { first: r.u32()?, count: r.u32()? },
                    tag => return Err(ProtoError::Tag { what: "lease", tag }),
                };
                Request::Lease { device, want, lnc: r.u8()? }
            }
            5 => Request::Release { device: r.u32()? },
            6 => Request::AllocHbm { device: r.u32()?, chan: r.u32()?, len: r.u64()? },
            7 => Request::FreeHbm { device: r.u32()?, handle: r.u64()? },
            8 => Request::Detach { device: r.u32()? },
            9 => Request::Query,
            10 => Request::ResetNcs { device: r.u32()?, mask: r.u32()? },
            11 => Request::Fwio { device: r.u32()?, cmd: r.u8()?, payload: r.bytes()? },
            // 4 was an early re-registration of cores alone, never sent: retired.
            12 => {
                let spec = DeviceSpec::get(&mut r)?;
                let (iova_start, first, count, path) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
                let n = r.count()?;
                let mut grants = Vec::with_capacity(n);
                for _ in 0..n {
                    grants.push(Grant { chan: r.u32()?, addr: r.u64()?, len: r.u64()? });
                }
                let handoff = match r.u8()? {
                    0 => Handoff::None,
                    1 => Handoff::Iommufd { ioas: r.u32()? },
                    2 => Handoff::NoIommu,
                    tag => return Err(ProtoError::Tag { what: "handoff", tag }),
                };
                Request::Rejoin { spec, iova_start, first, count, path, grants, handoff }
            }
            tag => return Err(ProtoError::Tag { what: "request", tag }),
        };
        r.end()?;
        Ok(m)
    }
}

impl Reply {
    /// The frame (length prefix included).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Hello { broker_pid } => {
                let mut w = W::new(101);
                w.u32(*broker_pid);
                w.finish()
            }
            Reply::Attached { device, arch, ncs, iova_start, iova_len } => {
                let mut w = W::new(102);
                w.u32(*device).str(arch).u32(*ncs).u64(*iova_start).u64(*iova_len);
                w.finish()
            }
            Reply::Leased { device, first, count, fds, path } => {
                let mut w = W::new(103);
                w.u32(*device).u32(*first).u32(*count).u8(*fds).u64(*path);
                w.finish()
            }
            Reply::Hbm { handle, addr, len } => {
                let mut w = W::new(104);
                w.u64(*handle).u64(*addr).u64(*len);
                w.finish()
            }
            Reply::Ok => W::new(105).finish(),
            Reply::Query(devs) => {
                let mut w = W::new(106);
                let devs = &devs[..devs.len().min(MAX_LIST)];
                w.u16(devs.len() as u16);
                for d in devs {
                    w.u32(d.device).str(&d.name).str(&d.arch).u32(d.ncs).u64(d.hbm_granted).u32(d.iova_windows);
                    w.u64(d.iommu_mappings).u64(d.collectives);
                    w.u8(d.adopting as u8);
                    let cs = &d.clients[..d.clients.len().min(MAX_LIST)];
                    w.u16(cs.len() as u16);
                    for c in cs {
                        w.u32(c.pid).str(&c.command).str(&c.runtime_version).u32(c.first).u32(c.count).u64(c.hbm_bytes);
                    }
                }
                w.finish()
            }
            Reply::Fwio { data } => {
                let mut w = W::new(108);
                w.bytes(data);
                w.finish()
            }
            Reply::Error { code, owner_pid, message } => {
                let mut w = W::new(107);
                w.u16(*code as u16).u32(*owner_pid).str(message);
                w.finish()
            }
        }
    }

    /// Decode a frame body (the bytes after the length prefix).
    pub fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let (tag, mut r) = open(body)?;
        let m = match tag {
            101 => Reply::Hello { broker_pid: r.u32()? },
            102 => Reply::Attached {
                device: r.u32()?,
                arch: r.str()?,
                ncs: r.u32()?,
                iova_start: r.u64()?,
                iova_len: r.u64()?,
            },
            103 => Reply::Leased { device: r.u32()?, first: r.u32()?, count: r.u32()?, fds: r.u8()?, path: r.u64()? },
            104 => Reply::Hbm { handle: r.u64()?, addr: r.u64()?, len: r.u64()? },
            105 => Reply::Ok,
            106 => {
                let n = r.count()?;
                let mut devs = Vec::with_capacity(n);
                for _ in 0..n {
                    let (device, name, arch, ncs, hbm_granted, iova_windows, iommu_mappings, collectives) =
                        (r.u32()?, r.str()?, r.str()?, r.u32()?, r.u64()?, r.u32()?, r.u64()?, r.u64()?);
                    let adopting = match r.u8()? {
                        0 => false,
                        1 => true,
                        tag => return Err(ProtoError::Tag { what: "bool", tag }),
                    };
                    let m = r.count()?;
                    let mut clients = Vec::with_capacity(m);
                    for _ in 0..m {
                        clients.push(ClientInfo {
                            pid: r.u32()?,
                            command: r.str()?,
                            runtime_version: r.str()?,
                            first: r.u32()?,
                            count: r.u32()?,
                            hbm_bytes: r.u64()?,
                        });
                    }
                    devs.push(DeviceInfo {
                        device,
                        name,
                        arch,
                        ncs,
                        hbm_granted,
                        iova_windows,
                        iommu_mappings,
                        collectives,
                        adopting,
                        clients,
                    });
                }
                Reply::Query(devs)
            }
            107 => {
                let c = r.u16()?;
                let code = ErrorCode::from_u16(c).ok_or(ProtoError::Tag { what: "error code", tag: c as u8 })?;
                Reply::Error { code, owner_pid: r.u32()?, message: r.str()? }
            }
            108 => Reply::Fwio { data: r.bytes()? },
            tag => return Err(ProtoError::Tag { what: "reply", tag }),
        };
        r.end()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        let n = frame_len([frame[0], frame[1], frame[2], frame[3]]).unwrap();
        assert_eq!(n, frame.len() - 4);
        &frame[4..]
    }

    fn arb_str() -> impl Strategy<Value = String> {
        "[a-z0-9:. /-]{0,40}"
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<bool>(), arb_str(), arb_str()).prop_map(|(t, command, runtime_version)| Request::Hello {
                role: if t { Role::Tool } else { Role::Runtime },
                command,
                runtime_version
            }),
            (arb_str(), any::<u32>())
                .prop_map(|(arch, index)| Request::Attach { spec: DeviceSpec::Sim { arch, index } }),
            arb_str().prop_map(|b| Request::Attach { spec: DeviceSpec::Pci(b) }),
            (any::<u32>(), any::<u32>(), any::<u32>(), 0u8..3, any::<u8>()).prop_map(|(device, a, b, k, lnc)| {
                Request::Lease {
                    device,
                    want: match k {
                        0 => Want::All,
                        1 => Want::Count(a),
                        _ => Want::Range { first: a, count: b },
                    },
                    lnc,
                }
            }),
            (
                arb_str(),
                (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()),
                proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>()), 0..4),
                (0u8..3, any::<u32>())
            )
                .prop_map(|(bdf, (iova_start, first, count, path), grants, (h, ioas))| Request::Rejoin {
                    spec: DeviceSpec::Pci(bdf),
                    iova_start,
                    first,
                    count,
                    path,
                    grants: grants.into_iter().map(|(chan, addr, len)| Grant { chan, addr, len }).collect(),
                    handoff: match h {
                        0 => Handoff::None,
                        1 => Handoff::Iommufd { ioas },
                        _ => Handoff::NoIommu,
                    },
                }),
            any::<u32>().prop_map(|device| Request::Release { device }),
            (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(device, chan, len)| Request::AllocHbm {
                device,
                chan,
                len
            }),
            (any::<u32>(), any::<u64>()).prop_map(|(device, handle)| Request::FreeHbm { device, handle }),
            any::<u32>().prop_map(|device| Request::Detach { device }),
            Just(Request::Query),
            (any::<u32>(), any::<u32>()).prop_map(|(device, mask)| Request::ResetNcs { device, mask }),
            (any::<u32>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..=MAX_FWIO))
                .prop_map(|(device, cmd, payload)| Request::Fwio { device, cmd, payload }),
        ]
    }

    fn arb_reply() -> impl Strategy<Value = Reply> {
        let client = (any::<u32>(), arb_str(), arb_str(), any::<u32>(), any::<u32>(), any::<u64>()).prop_map(
            |(pid, command, runtime_version, first, count, hbm_bytes)| ClientInfo {
                pid,
                command,
                runtime_version,
                first,
                count,
                hbm_bytes,
            },
        );
        let dev = (
            any::<u32>(),
            arb_str(),
            arb_str(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec(client, 0..4),
        )
            .prop_map(|(device, name, arch, ncs, hbm_granted, iova_windows, adopting, clients)| DeviceInfo {
                device,
                name,
                arch,
                ncs,
                hbm_granted,
                iova_windows,
                iommu_mappings: hbm_granted ^ 0x5a,
                collectives: ncs as u64 * 3,
                adopting,
                clients,
            });
        prop_oneof![
            any::<u32>().prop_map(|broker_pid| Reply::Hello { broker_pid }),
            (any::<u32>(), arb_str(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(device, arch, ncs, iova_start, iova_len)| Reply::Attached { device, arch, ncs, iova_start, iova_len }
            ),
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<u8>(), any::<u64>())
                .prop_map(|(device, first, count, fds, path)| Reply::Leased { device, first, count, fds, path }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(handle, addr, len)| Reply::Hbm { handle, addr, len }),
            Just(Reply::Ok),
            proptest::collection::vec(dev, 0..3).prop_map(Reply::Query),
            proptest::collection::vec(any::<u8>(), 0..=MAX_FWIO).prop_map(|data| Reply::Fwio { data }),
            (1u16..=16, any::<u32>(), arb_str()).prop_map(|(c, owner_pid, message)| Reply::Error {
                code: ErrorCode::from_u16(c).unwrap(),
                owner_pid,
                message
            }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(m in arb_request()) {
            let f = m.encode();
            prop_assert_eq!(Request::decode(body(&f)).unwrap(), m);
        }

        #[test]
        fn replies_round_trip(m in arb_reply()) {
            let f = m.encode();
            prop_assert_eq!(Reply::decode(body(&f)).unwrap(), m);
        }

        /// Arbitrary bytes never panic the decoders.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Request::decode(&b);
            let _ = Reply::decode(&b);
            let mut with_version = VERSION.to_le_bytes().to_vec();
            with_version.extend_from_slice(&b);
            let _ = Request::decode(&with_version);
            let _ = Reply::decode(&with_version);
        }

        /// Every truncation of a valid message is an error, never a panic or another message.
        #[test]
        fn truncations_are_errors(m in arb_request(), cut in 0usize..64) {
            let f = m.encode();
            let b = body(&f);
            if cut < b.len() {
                prop_assert!(Request::decode(&b[..cut]).is_err());
            }
            let mut longer = b.to_vec();
            longer.push(0);
            prop_assert_eq!(Request::decode(&longer), Err(ProtoError::Trailing(1)));
        }
    }

    #[test]
    fn versions_tags_and_sizes_are_checked() {
        let mut f = Request::Query.encode();
        f[4] = 9;
        assert_eq!(Request::decode(&f[4..]), Err(ProtoError::Version(9)));
        let mut f = Request::Query.encode();
        f[6] = 200;
        assert_eq!(Request::decode(&f[4..]), Err(ProtoError::Tag { what: "request", tag: 200 }));
        assert_eq!(frame_len(((MAX_FRAME + 1) as u32).to_le_bytes()), Err(ProtoError::FrameTooLong(MAX_FRAME + 1)));
        // A string announcing more bytes than the frame holds.
        let mut f = Request::Attach { spec: DeviceSpec::Pci("0000:00:1e.0".into()) }.encode();
        f[8] = 0xff;
        assert!(matches!(Request::decode(&f[4..]), Err(ProtoError::Truncated { .. })));
        // Non-UTF-8 in a string.
        let mut f = Request::Attach { spec: DeviceSpec::Pci("ab".into()) }.encode();
        let n = f.len();
        f[n - 1] = 0xff;
        assert_eq!(Request::decode(&f[4..]), Err(ProtoError::Utf8));
        // A long name is cut at a character boundary, not refused.
        let long = "é".repeat(MAX_STR);
        let f = Request::Hello { role: Role::Tool, command: long, runtime_version: String::new() }.encode();
        match Request::decode(&f[4..]).unwrap() {
            Request::Hello { command, .. } => assert!(command.len() <= MAX_STR && command.chars().all(|c| c == 'é')),
            m => panic!("{m:?}"),
        }
    }
}
