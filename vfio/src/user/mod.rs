//! [`platform::Platform`] over a vfio-user connection: a device served by another process
//! (the simulator served by `sim-serve` or by the broker of a shared device) driven through
//! the same hal path as a local one.
//!
//! - identity: the served function's configuration space (vendor, device, revision);
//! - BARs: every 32/64-bit access is a REGION_READ / REGION_WRITE message, unless the server
//!   offers the region by descriptor (the MMAP flag and a file in the region-info reply), in
//!   which case the region is mapped here and accessed directly. The simulator's registers
//!   have side effects (a write starts a queue, a read pops a notification), so it offers no
//!   descriptor and its BARs go through messages — or, when both ends speak this project's
//!   fast path ([`UserOptions::fast_path`], `fast.rs`), writes are posted on a ring in shared
//!   memory and the registers the server publishes are read from shared memory, so that an
//!   execute sends no message;
//! - DMA: host memory must be shareable, so a mapping's memory is a memfd
//!   ([`HostMem::alloc_shared`]; a caller's anonymous buffer is moved into one, contents
//!   copied, once at map time), mapped by DMA_MAP with its descriptor at an IOVA from this
//!   client's window ([`UserOptions::iova_window`], allocated by [`IovaAllocator`]), and
//!   unmapped by DMA_UNMAP when the [`DmaMapping`] drops;
//! - interrupts: SET_IRQS hands the server an eventfd per MSI-X vector named in
//!   [`UserOptions::irq_vectors`] (other vectors: `Ok(None)`, the driver polls);
//! - reset: DEVICE_RESET. A server shared between processes refuses it (a client must not
//!   reset a function others use): the refusal is [`PlatformError::Reset`].
//!
//! A connection that fails (the server died) makes register accesses fail with
//! [`MmioError::Lost`]; nothing panics.

mod fast;
pub mod ring;
pub mod wire;

pub use fast::FastPathError;

/// The atomics [`ring`] is written against (std here; its loom model substitutes loom's).
mod atomic {
    pub use std::sync::atomic::{AtomicU64, Ordering};
}

use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use platform::{DeviceIdentity, DmaDir, DmaMapping, DmaUnmap, HostMem, Mmio, MmioError, Platform, PlatformError};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};

use crate::device::EventFd;
use crate::iova::{IovaAllocator, IovaRange};
use wire::{Command, Header, Message, WireError};

/// How a client uses its connection.
#[derive(Debug, Clone)]
pub struct UserOptions {
    /// The IOVAs this client may map (a shared device gives each client its own window).
    pub iova_window: Range<u64>,
    /// MSI-X vectors this client takes eventfds for (a shared device: its NCs' vectors).
    pub irq_vectors: Vec<u32>,
    /// Whether the driver may write modeled registers: `true` when the server is the
    /// simulator (its owner, e.g. the broker that serves it, knows); else as
    /// [`crate::ALLOW_MODELED_ENV`] says.
    pub modeled_writes: bool,
    /// What [`Platform::identity`] reports as the location (e.g. `sim:shared:0`).
    pub location: String,
    /// Register writes as posted writes, the way PCIe carries a memory write: sent with the
    /// vfio-user `NO_REPLY` flag, not waited for. The server applies them in order before any
    /// later message, so a read after a write still sees it; a write the server refuses is
    /// only logged there. For servers known to honour the flag (this project's
    /// `sim_serve::serve_connection`); off by default.
    pub posted_writes: bool,
    /// Ask the server for the fast path ([`wire::Command::FastPath`]: writes posted on a ring
    /// in shared memory, published registers read from shared memory); used when offered,
    /// messages otherwise. For this project's servers; off by default.
    pub fast_path: bool,
}

impl Default for UserOptions {
    fn default() -> Self {
        Self {
            iova_window: 0..u64::MAX,
            irq_vectors: Vec::new(),
            modeled_writes: false,
            location: "vfio-user".into(),
            posted_writes: false,
            fast_path: false,
        }
    }
}

/// Errors setting up a vfio-user platform.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("vfio-user socket {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("vfio-user server: {0}")]
    Server(String),
    #[error("IOVA window {start:#x}..{end:#x} is empty")]
    EmptyWindow { start: u64, end: u64 },
    #[error(transparent)]
    FastPath(#[from] FastPathError),
}

/// The connection: one request in flight at a time.
struct Conn {
    stream: Mutex<(UnixStream, u16)>,
    messages: AtomicU64,
    /// Register accesses served by the fast path: writes posted, published registers read.
    fast_accesses: AtomicU64,
    /// Reads of published registers that asked the server instead ([`fast::Published::Busy`]).
    fast_fallbacks: AtomicU64,
    lost: AtomicBool,
    /// [`UserOptions::posted_writes`].
    posted_writes: bool,
    /// The fast path, once the server offered it.
    fast: OnceLock<fast::FastPath>,
}

/// Whether the peer of `s` has hung up (a zero-timeout poll; no event asked for: poll reports
/// a hang-up and errors regardless).
fn hung_up(s: &UnixStream) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(s.as_fd(), PollFlags::empty())];
    matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

impl Conn {
    fn request(&self, cmd: Command, body: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<Message, WireError> {
        let mut g = platform::sync::lock(&self.stream);
        if self.lost.load(Ordering::Relaxed) {
            return Err(WireError::Closed);
        }
        if let Some(f) = self.fast.get() {
            // The server takes the message when it reaches this marker: after every write
            // posted before it.
            if let Err(e) = f.post(ring::Entry::Message, || !hung_up(&g.0)) {
                self.lost.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        let id = g.1;
        g.1 = g.1.wrapping_add(1);
        let r = (|| {
            let h = Header { id, command: u16::from(cmd), size: 0, flags: wire::flags::COMMAND, error: 0 };
            wire::write_message(&g.0, h, body, fds)?;
            let m = wire::read_message(&g.0)?.ok_or(WireError::Closed)?;
            if m.header.id != id || m.header.command != u16::from(cmd) || !m.header.is_reply() {
                return Err(WireError::Protocol(format!(
                    "reply {:?} does not answer {cmd:?} (message {id})",
                    m.header
                )));
            }
            Ok(m)
        })();
        self.messages.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(m) if m.header.is_error() => Err(WireError::Refused { command: cmd, errno: m.header.error }),
            Ok(m) => Ok(m),
            Err(e) => {
                // The stream is out of step or gone: nothing more can be said on it.
                self.lost.store(true, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Whether the server is still there: the connection not lost and its peer not gone
    /// (a zero-timeout poll for hang-up; a request in progress is taken as a sign of life).
    fn alive(&self) -> bool {
        if self.lost.load(Ordering::Relaxed) {
            return false;
        }
        let Ok(g) = self.stream.try_lock() else { return true };
        // The peer closed: both directions shut.
        let gone = hung_up(&g.0);
        if gone {
            self.lost.store(true, Ordering::Relaxed);
        }
        !gone
    }

    fn shutdown(&self) {
        let g = platform::sync::lock(&self.stream);
        self.lost.store(true, Ordering::Relaxed);
        let _ = g.0.shutdown(std::net::Shutdown::Both);
    }

    fn region_read(&self, region: u32, offset: u64, out: &mut [u8]) -> Result<(), WireError> {
        let a = wire::RegionAccess { offset, region, count: out.len() as u32 };
        let m = self.request(Command::RegionRead, &a.encode(&[]), &[])?;
        let (got, data) = wire::RegionAccess::decode(&m.body)?;
        if got.count as usize != out.len() || data.len() != out.len() {
            return Err(WireError::Protocol(format!(
                "REGION_READ of {} bytes answered with {}",
                out.len(),
                data.len()
            )));
        }
        out.copy_from_slice(data);
        Ok(())
    }

    fn region_write(&self, region: u32, offset: u64, data: &[u8]) -> Result<(), WireError> {
        if let (Some(f), Ok(region8)) = (self.fast.get(), u8::try_from(region)) {
            let value = match *data {
                [a, b, c, d] => Some(u32::from_le_bytes([a, b, c, d]) as u64),
                [a, b, c, d, e, f, g, h] => Some(u64::from_le_bytes([a, b, c, d, e, f, g, h])),
                _ => None,
            };
            let e = value.map(|value| ring::Entry::Write { region: region8, offset, width: data.len() as u8, value });
            if let Some(e) = e.filter(|e| e.encode().is_some()) {
                if self.lost.load(Ordering::Relaxed) {
                    return Err(WireError::Closed);
                }
                let r = f.post(e, || self.alive());
                if r.is_err() {
                    self.lost.store(true, Ordering::Relaxed);
                } else {
                    self.fast_accesses.fetch_add(1, Ordering::Relaxed);
                }
                return r;
            }
        }
        let a = wire::RegionAccess { offset, region, count: data.len() as u32 };
        if self.posted_writes {
            return self.post(Command::RegionWrite, &a.encode(data));
        }
        self.request(Command::RegionWrite, &a.encode(data), &[]).map(|_| ())
    }

    /// Send a command that wants no reply (`NO_REPLY`): ordered with every other message on
    /// the connection, not waited for.
    fn post(&self, cmd: Command, body: &[u8]) -> Result<(), WireError> {
        let mut g = platform::sync::lock(&self.stream);
        if self.lost.load(Ordering::Relaxed) {
            return Err(WireError::Closed);
        }
        let id = g.1;
        g.1 = g.1.wrapping_add(1);
        let h = Header {
            id,
            command: u16::from(cmd),
            size: 0,
            flags: wire::flags::COMMAND | wire::flags::NO_REPLY,
            error: 0,
        };
        let r = wire::write_message(&g.0, h, body, &[]);
        self.messages.fetch_add(1, Ordering::Relaxed);
        if r.is_err() {
            self.lost.store(true, Ordering::Relaxed);
        }
        r
    }
}

/// A BAR reached through messages.
struct MessageBar {
    conn: Arc<Conn>,
    region: u32,
    size: u64,
}

impl Mmio for MessageBar {
    fn size(&self) -> u64 {
        self.size
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        platform::mmio::check(offset, 4, self.size)?;
        if let Some(f) = self.conn.fast.get() {
            match f.read32(self.region, offset) {
                fast::Published::Value(v) => {
                    self.conn.fast_accesses.fetch_add(1, Ordering::Relaxed);
                    return Ok(v);
                }
                fast::Published::Busy => {
                    self.conn.fast_fallbacks.fetch_add(1, Ordering::Relaxed);
                }
                fast::Published::No => {}
            }
        }
        let mut b = [0u8; 4];
        self.conn.region_read(self.region, offset, &mut b).map_err(|_| MmioError::Lost { offset })?;
        Ok(u32::from_le_bytes(b))
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        platform::mmio::check(offset, 4, self.size)?;
        self.conn.region_write(self.region, offset, &value.to_le_bytes()).map_err(|_| MmioError::Lost { offset })
    }
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        platform::mmio::check(offset, 8, self.size)?;
        let mut b = [0u8; 8];
        self.conn.region_read(self.region, offset, &mut b).map_err(|_| MmioError::Lost { offset })?;
        Ok(u64::from_le_bytes(b))
    }
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        platform::mmio::check(offset, 8, self.size)?;
        self.conn.region_write(self.region, offset, &value.to_le_bytes()).map_err(|_| MmioError::Lost { offset })
    }
}

/// A BAR the server offered by descriptor, mapped here.
struct MappedBar {
    // Declared first: dropped before the mapping it points into.
    mmio: platform::VolatileMmio,
    _map: memmap2::MmapRaw,
}

impl Mmio for MappedBar {
    fn size(&self) -> u64 {
        self.mmio.size()
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        self.mmio.read32(offset)
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        self.mmio.write32(offset, value)
    }
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        self.mmio.read64(offset)
    }
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        self.mmio.write64(offset, value)
    }
}

/// A region as the server described it.
struct RegionDesc {
    size: u64,
    /// The descriptor and offset to map it by, when offered.
    mmap: Option<(OwnedFd, u64)>,
}

/// Unmaps this client's DMA mappings and returns their IOVAs.
struct UserDma {
    conn: Arc<Conn>,
    iova: Mutex<IovaAllocator>,
}

impl DmaUnmap for UserDma {
    fn unmap(&self, iova: u64, len: u64) {
        // A failed unmap means the connection is gone, and the server dropped every mapping
        // of this connection with it.
        let _ =
            self.conn.request(Command::DmaUnmap, &wire::DmaUnmap { flags: 0, address: iova, size: len }.encode(), &[]);
        platform::sync::lock(&self.iova).free(iova);
    }
}

/// A device served over vfio-user, as a [`Platform`].
pub struct VfioUserPlatform {
    conn: Arc<Conn>,
    identity: DeviceIdentity,
    regions: Vec<RegionDesc>,
    bars: Mutex<Vec<Option<Arc<dyn Mmio>>>>,
    dma: Arc<UserDma>,
    irqs: Mutex<Vec<(u32, EventFd)>>,
    opts: UserOptions,
}

impl VfioUserPlatform {
    /// Connect to the server listening at `path`.
    pub fn connect(path: &Path, opts: UserOptions) -> Result<Self, UserError> {
        let stream = UnixStream::connect(path)
            .map_err(|source| UserError::Connect { path: path.display().to_string(), source })?;
        Self::from_stream(stream, opts)
    }

    /// Use an already connected stream (e.g. one end of a socket pair another process
    /// passed over SCM_RIGHTS): negotiate the version, read the device and region info and
    /// the identity.
    pub fn from_stream(stream: UnixStream, opts: UserOptions) -> Result<Self, UserError> {
        let (start, end) = (opts.iova_window.start, opts.iova_window.end);
        let window =
            IovaRange::with_len(start, end.saturating_sub(start)).ok_or(UserError::EmptyWindow { start, end })?;
        let conn = Arc::new(Conn {
            stream: Mutex::new((stream, 0)),
            messages: AtomicU64::new(0),
            fast_accesses: AtomicU64::new(0),
            fast_fallbacks: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            posted_writes: opts.posted_writes,
            fast: OnceLock::new(),
        });
        let caps = format!(
            r#"{{"capabilities":{{"max_msg_fds":{},"max_data_xfer_size":{}}}}}"#,
            wire::MAX_MESSAGE_FDS,
            wire::MAX_DATA_XFER
        );
        let v = conn.request(Command::Version, &wire::version_body(0, 1, &caps), &[])?;
        let mut f = wire::Fields::new("VERSION reply", &v.body);
        let (major, minor) = (f.u16()?, f.u16()?);
        if major != 0 {
            return Err(UserError::Server(format!("protocol version {major}.{minor}, this client speaks 0.x")));
        }
        let info = wire::DeviceInfo::decode(
            &conn
                .request(
                    Command::DeviceGetInfo,
                    &wire::DeviceInfo { flags: 0, num_regions: 0, num_irqs: 0 }.encode(),
                    &[],
                )?
                .body,
        )?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(UserError::Server("the served device is not a PCI function".into()));
        }
        let mut regions = Vec::new();
        for index in 0..info.num_regions.min(64) {
            let q = wire::RegionInfo { argsz: wire::RegionInfo::LEN as u32, index, ..Default::default() };
            let mut m = conn.request(Command::DeviceGetRegionInfo, &q.encode(), &[])?;
            let r = wire::RegionInfo::decode(&m.body)?;
            let mmap = match m.fds.pop() {
                Some(fd) if r.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 => Some((fd, r.offset)),
                _ => None,
            };
            regions.push(RegionDesc { size: r.size, mmap });
        }
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        if regions.get(cfg as usize).is_none_or(|r| r.size < 64) {
            return Err(UserError::Server("no PCI configuration space region".into()));
        }
        let mut b = [0u8; 4];
        conn.region_read(cfg, 0, &mut b)?;
        let (vendor, device) = (u16::from_le_bytes([b[0], b[1]]), u16::from_le_bytes([b[2], b[3]]));
        conn.region_read(cfg, 8, &mut b)?;
        let identity = DeviceIdentity { vendor, device, revision: b[0], location: opts.location.clone() };
        if opts.fast_path {
            match conn.request(Command::FastPath, &[], &[]) {
                Ok(m) => {
                    let f = fast::FastPath::new(wire::FastPathInfo::decode(&m.body)?, m.fds)?;
                    // Only this thread has the connection yet: the cell is empty.
                    let _ = conn.fast.set(f);
                }
                // A server without it: messages.
                Err(WireError::Refused { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let dma = Arc::new(UserDma { conn: conn.clone(), iova: Mutex::new(IovaAllocator::new(&[window], None)) });
        Ok(Self { conn, identity, bars: Mutex::new(vec![None; 6]), regions, dma, irqs: Mutex::new(Vec::new()), opts })
    }

    /// Messages exchanged so far (requests, each with its reply).
    pub fn messages(&self) -> u64 {
        self.conn.messages.load(Ordering::Relaxed)
    }

    /// Whether the server offered the fast path ([`UserOptions::fast_path`]) and it is used.
    pub fn fast_path(&self) -> bool {
        self.conn.fast.get().is_some()
    }

    /// Register accesses the fast path served so far, without a message (writes posted,
    /// published registers read).
    pub fn fast_accesses(&self) -> u64 {
        self.conn.fast_accesses.load(Ordering::Relaxed)
    }

    /// Reads of published registers that were asked of the server with a message instead (the
    /// server had not taken this client's writes in time, or the device stayed busy).
    pub fn fast_fallbacks(&self) -> u64 {
        self.conn.fast_fallbacks.load(Ordering::Relaxed)
    }

    /// IOVA bytes this client has mapped now.
    pub fn mapped_bytes(&self) -> u64 {
        platform::sync::lock(&self.dma.iova).allocated()
    }

    /// The options the platform was created with.
    pub fn options(&self) -> &UserOptions {
        &self.opts
    }

    fn map_bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let r = self.regions.get(index as usize).filter(|r| r.size > 0).ok_or(PlatformError::NoSuchBar(index))?;
        let Some((fd, offset)) = &r.mmap else {
            return Ok(Arc::new(MessageBar { conn: self.conn.clone(), region: index as u32, size: r.size }));
        };
        let len = usize::try_from(r.size).map_err(|_| PlatformError::NoSuchBar(index))?;
        let map = memmap2::MmapOptions::new().offset(*offset).len(len).map_raw(fd)?;
        let base = NonNull::new(map.as_mut_ptr()).ok_or(PlatformError::NoSuchBar(index))?;
        // SAFETY: `map` is a shared mapping of `len` bytes that lives in the same MappedBar as
        // the VolatileMmio (dropped after it), and the region is only accessed through it.
        let mmio = unsafe { platform::VolatileMmio::new(base, r.size) };
        Ok(Arc::new(MappedBar { mmio, _map: map }))
    }
}

fn copy_into_shared(mem: HostMem) -> Result<HostMem, PlatformError> {
    if mem.shared_fd().is_some() {
        return Ok(mem);
    }
    let shared = HostMem::alloc_shared(mem.len())?;
    let mut buf = vec![0u8; (64 << 10).min(mem.len())];
    let mut at = 0;
    while at < mem.len() {
        let n = buf.len().min(mem.len() - at);
        mem.read(at, &mut buf[..n])?;
        shared.write(at, &buf[..n])?;
        at += n;
    }
    Ok(shared)
}

fn wire_perr(e: WireError) -> PlatformError {
    match e {
        WireError::Io(io) => PlatformError::Io(io),
        other => PlatformError::Other(other.to_string()),
    }
}

impl Platform for VfioUserPlatform {
    fn identity(&self) -> DeviceIdentity {
        self.identity.clone()
    }

    fn reachable(&self) -> bool {
        self.conn.alive()
    }

    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let mut bars = platform::sync::lock(&self.bars);
        let slot = bars.get_mut(index as usize).ok_or(PlatformError::NoSuchBar(index))?;
        if let Some(b) = slot {
            return Ok(b.clone());
        }
        let m = self.map_bar(index)?;
        *slot = Some(m.clone());
        Ok(m)
    }

    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        let mem = copy_into_shared(mem)?;
        let len = mem.len() as u64;
        let iova =
            platform::sync::lock(&self.dma.iova).alloc(len, 4096).map_err(|_| PlatformError::IovaExhausted { len })?;
        let mut flags = 0;
        if dir.device_reads() {
            flags |= wire::DMA_READ;
        }
        if dir.device_writes() {
            flags |= wire::DMA_WRITE;
        }
        let body = wire::DmaMap { flags, offset: 0, address: iova, size: len }.encode();
        let sent = match mem.shared_fd() {
            Some(fd) => self.conn.request(Command::DmaMap, &body, &[fd]),
            None => Err(WireError::Protocol("shareable memory without a descriptor".into())),
        };
        if let Err(e) = sent {
            platform::sync::lock(&self.dma.iova).free(iova);
            return Err(PlatformError::DmaMap(e.to_string()));
        }
        Ok(DmaMapping::new(mem, iova, dir, self.dma.clone()))
    }

    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError> {
        if !self.opts.irq_vectors.contains(&vector) {
            return Ok(None);
        }
        let irq_err = |reason: String| PlatformError::Irq { vector, reason };
        let mut irqs = platform::sync::lock(&self.irqs);
        if let Some((_, e)) = irqs.iter().find(|(v, _)| *v == vector) {
            return e.try_clone().map(Some).map_err(|e| irq_err(e.to_string()));
        }
        let efd = EventFd::new().map_err(|e| irq_err(e.to_string()))?;
        let body = wire::SetIrqs {
            flags: VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            index: VFIO_PCI_MSIX_IRQ_INDEX,
            start: vector,
            count: 1,
        }
        .encode();
        self.conn.request(Command::SetIrqs, &body, &[efd.as_fd()]).map_err(|e| irq_err(e.to_string()))?;
        let out = efd.try_clone().map_err(|e| irq_err(e.to_string()))?;
        irqs.push((vector, efd));
        Ok(Some(out))
    }

    fn reset(&self) -> Result<(), PlatformError> {
        self.conn.request(Command::DeviceReset, &[], &[]).map(|_| ()).map_err(|e| PlatformError::Reset(e.to_string()))
    }

    fn modeled_writes_allowed(&self) -> bool {
        self.opts.modeled_writes || platform::allow_modeled_from_env()
    }
}

impl Drop for VfioUserPlatform {
    fn drop(&mut self) {
        // Give the vectors back (the server also forgets them when the connection ends).
        let irqs = std::mem::take(platform::sync::get_mut(&mut self.irqs));
        for (v, _) in &irqs {
            let body = wire::SetIrqs {
                flags: VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                index: VFIO_PCI_MSIX_IRQ_INDEX,
                start: *v,
                count: 1,
            }
            .encode();
            let _ = self.conn.request(Command::SetIrqs, &body, &[]);
        }
        // The connection ends with the platform, even if a BAR or a mapping outlives it (their
        // accesses then fail as `Lost`; the server drops this client's mappings at the end).
        self.conn.shutdown();
    }
}

impl From<UserError> for PlatformError {
    fn from(e: UserError) -> Self {
        match e {
            UserError::Wire(w) => wire_perr(w),
            other => PlatformError::Other(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection is alive while its peer is (unread bytes from it are no sign of death),
    /// and dead for good once the peer has closed its end.
    #[test]
    fn a_connection_whose_peer_closed_is_not_alive() {
        let (a, b) = UnixStream::pair().unwrap();
        let conn = Conn {
            stream: Mutex::new((a, 0)),
            messages: AtomicU64::new(0),
            fast_accesses: AtomicU64::new(0),
            fast_fallbacks: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            posted_writes: false,
            fast: OnceLock::new(),
        };
        assert!(conn.alive());
        std::io::Write::write_all(&mut &b, b"pending").unwrap();
        assert!(conn.alive());
        drop(b);
        assert!(!conn.alive());
        assert!(conn.lost.load(Ordering::Relaxed), "remembered: the next request fails at once");
    }
}
