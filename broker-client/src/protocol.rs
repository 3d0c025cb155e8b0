//! The broker's control protocol: small, versioned, length-prefixed binary frames.
//!
//! A frame is `len: u32 LE` (the bytes that follow, at most [`MAX_FRAME`]) then `version: u16
//! LE` ([`VERSION`]), `tag: u8` and the message's fields: integers little-endian, strings as
//! `u16` length + UTF-8 bytes (at most [`MAX_STR`]), lists as `u16` count + items (at most
//! [`MAX_LIST`]). Every read is bounds-checked; an unknown version or tag, a short or long
//! frame, bad UTF-8 or a field out of range is a [`ProtoError`], never a panic: the frame is
//! the [`wire`] codec's ([`FORMAT`]). File descriptors travel beside a frame ([`send`],
//! [`recv`]: [`wire::fdpass`]); the frame says how many to expect.
//!
//! The client's pid and uid are never part of a message: the broker takes them from the
//! socket (SO_PEERCRED).

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use wire::{Dec, Enc};

/// Protocol version: a frame of another version is refused ([`ErrorCode::Version`]). 2: a
/// lease counts logical NeuronCores (`Request::Lease::lnc`).
pub const VERSION: u16 = 2;
/// Largest frame body, bytes.
pub const MAX_FRAME: usize = 64 * 1024;
/// Longest string field, bytes.
pub const MAX_STR: usize = 4096;
/// Most items in a list field.
pub const MAX_LIST: usize = 256;

/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 4;

/// The frame layout: `len: u32` first (counting what follows), `version: u16`, `tag: u8`;
/// strings, byte strings and lists counted by a `u16`.
pub static FORMAT: wire::Format = wire::Format {
    name: "broker",
    magic: b"",
    version: VERSION,
    tag: wire::Width::U8,
    length: wire::Length::Front,
    count: wire::Width::U16,
    max_len: MAX_FRAME,
};

/// Why bytes are not a message.
pub use wire::DecodeError as ProtoError;
/// Why a frame could not be sent or received.
pub use wire::FrameError as WireError;

/// Send one encoded frame with `fds`.
pub fn send(sock: &UnixStream, frame: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), WireError> {
    wire::send_frame(sock, frame, fds)
}

/// Receive one whole frame and the descriptors sent with it (at most [`MAX_FDS`]).
pub fn recv(sock: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>), WireError> {
    FORMAT.recv_frame(sock, MAX_FDS)
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

/// The device descriptors a [`Request::Rejoin`] carries beside its frame, in this order.
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

/// Why a request failed. The discriminants are the wire numbers; decoding is derived from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, num_enum::TryFromPrimitive, num_enum::IntoPrimitive)]
#[repr(u16)]
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
        Self::try_from(v).ok()
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

/// A frame of request or reply `tag` to write.
fn enc(tag: u8) -> Enc {
    FORMAT.encoder(tag.into())
}

/// Minimal bytes of a list's elements (a grant, a device, a client), for [`Dec::count`].
const GRANT_BYTES: usize = 20;
const DEVICE_BYTES: usize = 43;
const CLIENT_BYTES: usize = 24;

impl DeviceSpec {
    fn put(&self, w: &mut Enc) {
        match self {
            DeviceSpec::Sim { arch, index } => w.u8(0).str(arch, MAX_STR).u32(*index),
            DeviceSpec::Pci(bdf) => w.u8(1).str(bdf, MAX_STR),
        };
    }
    fn get(r: &mut Dec<'_>) -> Result<Self, ProtoError> {
        Ok(match r.u8("message")? {
            0 => DeviceSpec::Sim { arch: r.str("string", MAX_STR)?, index: r.u32("message")? },
            1 => DeviceSpec::Pci(r.str("string", MAX_STR)?),
            tag => return Err(ProtoError::Tag { what: "device spec", tag: tag.into() }),
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
                let mut w = enc(1);
                w.u8(matches!(role, Role::Tool) as u8).str(command, MAX_STR).str(runtime_version, MAX_STR);
                w.finish()
            }
            Request::Attach { spec } => {
                let mut w = enc(2);
                spec.put(&mut w);
                w.finish()
            }
            Request::Lease { device, want, lnc } => {
                let mut w = enc(3);
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
                let mut w = enc(5);
                w.u32(*device);
                w.finish()
            }
            Request::AllocHbm { device, chan, len } => {
                let mut w = enc(6);
                w.u32(*device).u32(*chan).u64(*len);
                w.finish()
            }
            Request::FreeHbm { device, handle } => {
                let mut w = enc(7);
                w.u32(*device).u64(*handle);
                w.finish()
            }
            Request::Detach { device } => {
                let mut w = enc(8);
                w.u32(*device);
                w.finish()
            }
            Request::Query => enc(9).finish(),
            Request::ResetNcs { device, mask } => {
                let mut w = enc(10);
                w.u32(*device).u32(*mask);
                w.finish()
            }
            Request::Fwio { device, cmd, payload } => {
                let mut w = enc(11);
                w.u32(*device).u8(*cmd).bytes(payload, MAX_FWIO);
                w.finish()
            }
            Request::Rejoin { spec, iova_start, first, count, path, grants, handoff } => {
                let mut w = enc(12);
                spec.put(&mut w);
                w.u64(*iova_start).u32(*first).u32(*count).u64(*path);
                let grants = &grants[..grants.len().min(MAX_LIST)];
                w.count(grants.len());
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

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, ProtoError> {
        let (tag, mut r) = FORMAT.open(frame)?;
        let m = match tag {
            1 => {
                let role = match r.u8("message")? {
                    0 => Role::Runtime,
                    1 => Role::Tool,
                    tag => return Err(ProtoError::Tag { what: "role", tag: tag.into() }),
                };
                Request::Hello { role, command: r.str("string", MAX_STR)?, runtime_version: r.str("string", MAX_STR)? }
            }
            2 => Request::Attach { spec: DeviceSpec::get(&mut r)? },
            3 => {
                let device = r.u32("message")?;
                let want = match r.u8("message")? {
                    0 => Want::All,
                    1 => Want::Count(r.u32("message")?),
                    2 => Want::Range { first: r.u32("message")?, count: r.u32("message")? },
                    tag => return Err(ProtoError::Tag { what: "lease", tag: tag.into() }),
                };
                Request::Lease { device, want, lnc: r.u8("message")? }
            }
            5 => Request::Release { device: r.u32("message")? },
            6 => Request::AllocHbm { device: r.u32("message")?, chan: r.u32("message")?, len: r.u64("message")? },
            7 => Request::FreeHbm { device: r.u32("message")?, handle: r.u64("message")? },
            8 => Request::Detach { device: r.u32("message")? },
            9 => Request::Query,
            10 => Request::ResetNcs { device: r.u32("message")?, mask: r.u32("message")? },
            11 => Request::Fwio {
                device: r.u32("message")?,
                cmd: r.u8("message")?,
                payload: r.bytes("FW-IO payload", MAX_FWIO)?,
            },
            // 4 was an early re-registration of cores alone, never sent: retired.
            12 => {
                let spec = DeviceSpec::get(&mut r)?;
                let (iova_start, first, count, path) =
                    (r.u64("message")?, r.u32("message")?, r.u32("message")?, r.u64("message")?);
                let n = r.count("grants", GRANT_BYTES, MAX_LIST)?;
                let mut grants = Vec::with_capacity(n);
                for _ in 0..n {
                    grants.push(Grant { chan: r.u32("message")?, addr: r.u64("message")?, len: r.u64("message")? });
                }
                let handoff = match r.u8("message")? {
                    0 => Handoff::None,
                    1 => Handoff::Iommufd { ioas: r.u32("message")? },
                    2 => Handoff::NoIommu,
                    tag => return Err(ProtoError::Tag { what: "handoff", tag: tag.into() }),
                };
                Request::Rejoin { spec, iova_start, first, count, path, grants, handoff }
            }
            tag => return Err(ProtoError::Tag { what: "request", tag: tag.into() }),
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
                let mut w = enc(101);
                w.u32(*broker_pid);
                w.finish()
            }
            Reply::Attached { device, arch, ncs, iova_start, iova_len } => {
                let mut w = enc(102);
                w.u32(*device).str(arch, MAX_STR).u32(*ncs).u64(*iova_start).u64(*iova_len);
                w.finish()
            }
            Reply::Leased { device, first, count, fds, path } => {
                let mut w = enc(103);
                w.u32(*device).u32(*first).u32(*count).u8(*fds).u64(*path);
                w.finish()
            }
            Reply::Hbm { handle, addr, len } => {
                let mut w = enc(104);
                w.u64(*handle).u64(*addr).u64(*len);
                w.finish()
            }
            Reply::Ok => enc(105).finish(),
            Reply::Query(devs) => {
                let mut w = enc(106);
                let devs = &devs[..devs.len().min(MAX_LIST)];
                w.count(devs.len());
                for d in devs {
                    w.u32(d.device).str(&d.name, MAX_STR).str(&d.arch, MAX_STR);
                    w.u32(d.ncs).u64(d.hbm_granted).u32(d.iova_windows);
                    w.u64(d.iommu_mappings).u64(d.collectives);
                    w.u8(d.adopting as u8);
                    let cs = &d.clients[..d.clients.len().min(MAX_LIST)];
                    w.count(cs.len());
                    for c in cs {
                        w.u32(c.pid).str(&c.command, MAX_STR).str(&c.runtime_version, MAX_STR);
                        w.u32(c.first).u32(c.count).u64(c.hbm_bytes);
                    }
                }
                w.finish()
            }
            Reply::Fwio { data } => {
                let mut w = enc(108);
                w.bytes(data, MAX_FWIO);
                w.finish()
            }
            Reply::Error { code, owner_pid, message } => {
                let mut w = enc(107);
                w.u16(u16::from(*code)).u32(*owner_pid).str(message, MAX_STR);
                w.finish()
            }
        }
    }

    /// Decode a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, ProtoError> {
        let (tag, mut r) = FORMAT.open(frame)?;
        let m = match tag {
            101 => Reply::Hello { broker_pid: r.u32("message")? },
            102 => Reply::Attached {
                device: r.u32("message")?,
                arch: r.str("string", MAX_STR)?,
                ncs: r.u32("message")?,
                iova_start: r.u64("message")?,
                iova_len: r.u64("message")?,
            },
            103 => Reply::Leased {
                device: r.u32("message")?,
                first: r.u32("message")?,
                count: r.u32("message")?,
                fds: r.u8("message")?,
                path: r.u64("message")?,
            },
            104 => Reply::Hbm { handle: r.u64("message")?, addr: r.u64("message")?, len: r.u64("message")? },
            105 => Reply::Ok,
            106 => {
                let n = r.count("devices", DEVICE_BYTES, MAX_LIST)?;
                let mut devs = Vec::with_capacity(n);
                for _ in 0..n {
                    let (device, name, arch, ncs, hbm_granted, iova_windows, iommu_mappings, collectives) = (
                        r.u32("message")?,
                        r.str("string", MAX_STR)?,
                        r.str("string", MAX_STR)?,
                        r.u32("message")?,
                        r.u64("message")?,
                        r.u32("message")?,
                        r.u64("message")?,
                        r.u64("message")?,
                    );
                    let adopting = r.bool("adopting")?;
                    let m = r.count("clients", CLIENT_BYTES, MAX_LIST)?;
                    let mut clients = Vec::with_capacity(m);
                    for _ in 0..m {
                        clients.push(ClientInfo {
                            pid: r.u32("message")?,
                            command: r.str("string", MAX_STR)?,
                            runtime_version: r.str("string", MAX_STR)?,
                            first: r.u32("message")?,
                            count: r.u32("message")?,
                            hbm_bytes: r.u64("message")?,
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
                let c = r.u16("message")?;
                let code = ErrorCode::from_u16(c).ok_or(ProtoError::Tag { what: "error code", tag: c.into() })?;
                Reply::Error { code, owner_pid: r.u32("message")?, message: r.str("string", MAX_STR)? }
            }
            108 => Reply::Fwio { data: r.bytes("FW-IO payload", MAX_FWIO)? },
            tag => return Err(ProtoError::Tag { what: "reply", tag: tag.into() }),
        };
        r.end()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests;
