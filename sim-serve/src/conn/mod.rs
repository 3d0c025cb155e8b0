//! The vfio-user server: one connection to a [`SimBackend`], served on the calling thread until
//! the client disconnects. It is the one server stack of the crate — its two uses differ only
//! in what a connection may act on ([`Scope`]):
//!
//! - [`Scope::Function`]: the whole function, for its only client — a VM's QEMU (`sim-serve`,
//!   [`crate::SimServer`]): any IOVA, every MSI-X vector, configuration space (an FLR resets the
//!   device) and DEVICE_RESET;
//! - [`Scope::Bounded`]: a part of a function others share (`sim:shared`,
//!   [`crate::serve_connection`]): DMA_MAP and DMA_UNMAP only inside its IOVA window (UNMAP_ALL
//!   removes only its own), SET_IRQS only on its NCs' vectors and only their trigger, no
//!   configuration write and no reset (each acts on the whole function).
//!
//! The wire format is `vfio::user::wire`, the one this project's client
//! (`vfio::user::VfioUserPlatform`) speaks too. Writes the client posts (NO_REPLY) get no reply.
//! When the connection ends — end of file, an error, a malformed message — what it left is
//! undone before [`serve`] returns: a bounded connection's mappings are unmapped (device
//! accesses in flight finish first) and its eventfds forgotten; a function's client leaves no
//! mapping and no eventfd at all.
//!
//! A bounded connection may ask for this project's fast path (`Command::FastPath`, `fast.rs`):
//! its register writes then come on a ring in shared memory, its reads of the device's
//! published registers need no message, and its messages come after a marker on the ring.

mod fast;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::ops::Range;
use std::os::unix::net::UnixStream;

use vfio::user::wire::{self, Command, Message, WireError};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
};

use crate::{ServeError, SimBackend};

/// What one connection may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnOptions {
    /// The IOVAs the client may map.
    pub iova_window: Range<u64>,
    /// Its NCs: the MSI-X vectors it may take.
    pub ncs: Range<usize>,
}

/// What a connection may act on (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The whole function, for its only client.
    Function,
    /// An IOVA window and the vectors of some NCs of a shared function.
    Bounded(ConnOptions),
}

/// How a connection ended and what it left behind (all of it undone by then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnSummary {
    /// Requests served.
    pub requests: u64,
    /// Requests refused (error replies).
    pub refused: u64,
    /// Mappings still in place at the end, unmapped by the cleanup.
    pub mappings_cleaned: usize,
    /// Interrupt vectors still routed at the end, forgotten by the cleanup.
    pub vectors_cleaned: usize,
}

/// The protocol's minor version this server speaks (the major is 0). A client that proposes
/// less gets its own (QEMU 11 proposes 0 and refuses a greater one).
const MINOR: u16 = 1;

const EINVAL: u32 = 22;
const EPERM: u32 = 1;
const ENOTSUP: u32 = 95;

/// A request refused: the errno for the reply and why (logged).
struct Refusal(u32, String);

fn refuse<T>(errno: u32, why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(errno, why.into()))
}

fn invalid(e: impl ToString) -> Refusal {
    Refusal(EINVAL, e.to_string())
}

struct Conn<'a> {
    backend: &'a mut SimBackend,
    scope: Scope,
    /// This connection's mappings: IOVA → length.
    maps: BTreeMap<u64, u64>,
    vectors: BTreeSet<u32>,
    summary: ConnSummary,
    /// The fast path, from the reply that set it up until the loop serving it takes it.
    fast: Option<fast::FastServer>,
    /// Whether the fast path was set up (once per connection).
    fast_offered: bool,
}

impl Conn<'_> {
    /// Count a request served (and, refused, log it).
    fn count(&mut self, r: &Result<(), Refusal>) {
        self.summary.requests += 1;
        if let Err(Refusal(errno, why)) = r {
            self.summary.refused += 1;
            tracing::debug!("vfio-user posted write refused (errno {errno}): {why}");
        }
    }

    /// A register (or configuration-space) write, from a message or the fast path's ring.
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refusal> {
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.whole_function("a configuration-space write")?;
        }
        self.backend.region_write(region, offset, data).map_err(invalid)
    }

    /// FAST_PATH: a bounded connection's ring and bell, and the device's published registers.
    fn fast_path(&mut self) -> Result<wire::FastPathInfo, Refusal> {
        if self.bounded().is_none() {
            return refuse(ENOTSUP, "the fast path is for a shared function's clients");
        }
        if self.fast_offered {
            return refuse(EINVAL, "the fast path is already set up");
        }
        let published = self.backend.device().publish_registers().map_err(invalid)?;
        let (f, info) = fast::FastServer::new(published).map_err(invalid)?;
        self.fast = Some(f);
        self.fast_offered = true;
        Ok(info)
    }

    fn bounded(&self) -> Option<&ConnOptions> {
        match &self.scope {
            Scope::Function => None,
            Scope::Bounded(o) => Some(o),
        }
    }

    /// Refuse what a bounded connection may not do (`what`: the request, for the reason).
    fn whole_function(&self, what: &str) -> Result<(), Refusal> {
        match self.scope {
            Scope::Function => Ok(()),
            Scope::Bounded(_) => refuse(EPERM, format!("{what}: the function is shared; that is its owner's")),
        }
    }

    /// Refuse a DMA range outside a bounded connection's window.
    fn check_window(&self, what: &str, start: u64, len: u64) -> Result<(), Refusal> {
        let Some(o) = self.bounded() else { return Ok(()) };
        let w = &o.iova_window;
        if len > 0 && start >= w.start && start.checked_add(len).is_some_and(|end| end <= w.end) {
            return Ok(());
        }
        refuse(
            EPERM,
            format!("{what} {start:#x}+{len:#x}: outside this client's IOVA window {:#x}..{:#x}", w.start, w.end),
        )
    }

    /// Forget this connection's mappings overlapping `[start, start + len)` (after the
    /// device's IOMMU dropped them).
    fn forget_maps(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        self.maps.retain(|&s, l| !(s < end && s.saturating_add(*l) > start));
    }

    fn handle(&mut self, m: Message) -> Result<Vec<u8>, Refusal> {
        let Some(cmd) = Command::from_u16(m.header.command) else {
            return refuse(ENOTSUP, format!("unknown command {}", m.header.command));
        };
        match cmd {
            Command::Version => self.version(&m.body),
            Command::DeviceGetInfo => {
                // A shared function is not reset by its clients: no VFIO_DEVICE_FLAGS_RESET.
                let reset = if self.bounded().is_some() { 0 } else { VFIO_DEVICE_FLAGS_RESET };
                Ok(wire::DeviceInfo {
                    flags: VFIO_DEVICE_FLAGS_PCI | reset,
                    num_regions: VFIO_PCI_NUM_REGIONS,
                    num_irqs: VFIO_PCI_NUM_IRQS,
                }
                .encode())
            }
            Command::DeviceGetRegionInfo => {
                let q = wire::RegionInfo::decode(&m.body).map_err(invalid)?;
                match self.backend.regions().into_iter().find(|r| r.index == q.index) {
                    Some(r) => Ok(r.encode()),
                    None => refuse(EINVAL, format!("no region {}", q.index)),
                }
            }
            Command::GetIrqInfo => {
                let q = wire::IrqInfo::decode(&m.body).map_err(invalid)?;
                match self.backend.irqs().into_iter().find(|i| i.index == q.index) {
                    Some(i) => Ok(i.encode()),
                    None => refuse(EINVAL, format!("no interrupt index {}", q.index)),
                }
            }
            Command::SetIrqs => self.set_irqs(&m.body, m.fds.into_iter().map(File::from).collect()),
            Command::RegionRead => {
                let (a, _) = wire::RegionAccess::decode(&m.body).map_err(invalid)?;
                let mut data = vec![0u8; a.count as usize];
                self.backend.region_read(a.region, a.offset, &mut data).map_err(invalid)?;
                Ok(a.encode(&data))
            }
            Command::RegionWrite => {
                let (a, data) = wire::RegionAccess::decode(&m.body).map_err(invalid)?;
                if data.len() != a.count as usize {
                    return refuse(EINVAL, format!("REGION_WRITE of {} bytes carries {}", a.count, data.len()));
                }
                self.region_write(a.region, a.offset, data)?;
                Ok(a.encode(&[]))
            }
            Command::DmaMap => {
                let q = wire::DmaMap::decode(&m.body).map_err(invalid)?;
                self.check_window("DMA_MAP", q.address, q.size)?;
                let mut fds = m.fds;
                // A function's client may map memory without a descriptor (QEMU: ROM, VGA
                // memory): the device cannot reach it (`SimBackend::dma_map`).
                let needed = if self.bounded().is_some() { 1..=1 } else { 0..=1 };
                if !needed.contains(&fds.len()) {
                    return refuse(EINVAL, format!("DMA_MAP with {} descriptors", fds.len()));
                }
                self.backend
                    .dma_map(q.flags, q.offset, q.address, q.size, fds.pop().map(File::from))
                    .map_err(invalid)?;
                // Mappings it replaced (its own: a bounded window is its own) are gone.
                self.forget_maps(q.address, q.size);
                self.maps.insert(q.address, q.size);
                Ok(Vec::new())
            }
            Command::DmaUnmap => {
                let q = wire::DmaUnmap::decode(&m.body).map_err(invalid)?;
                if q.flags & wire::DMA_UNMAP_ALL != 0 {
                    let maps = std::mem::take(&mut self.maps);
                    match self.scope {
                        Scope::Function => self.backend.dma_unmap(q.flags, q.address, q.size).map_err(invalid)?,
                        // Its own mappings only.
                        Scope::Bounded(_) => maps.into_iter().for_each(|(s, l)| {
                            self.backend.device().unmap_external(s, l);
                        }),
                    }
                } else {
                    self.check_window("DMA_UNMAP", q.address, q.size)?;
                    self.backend.dma_unmap(q.flags, q.address, q.size).map_err(invalid)?;
                    self.forget_maps(q.address, q.size);
                }
                Ok(q.encode())
            }
            Command::DeviceReset => {
                self.whole_function("DEVICE_RESET")?;
                self.backend.reset().map_err(invalid)?;
                Ok(Vec::new())
            }
            other => refuse(ENOTSUP, format!("{other:?} is not offered")),
        }
    }

    /// VERSION: the major must be 0; the reply proposes the lower minor and this server's
    /// capabilities.
    fn version(&self, body: &[u8]) -> Result<Vec<u8>, Refusal> {
        let mut f = wire::Fields::new("VERSION", body);
        let (major, minor) = (f.u16().map_err(invalid)?, f.u16().map_err(invalid)?);
        if major != 0 {
            return refuse(ENOTSUP, format!("protocol version {major}"));
        }
        // How many descriptors the client may send in one message: QEMU refuses more than 16
        // and then sends one eventfd per SET_IRQS, as the guest test runs it; this project's
        // client sends a lease's vectors in one.
        let fds = if self.bounded().is_some() { wire::MAX_MESSAGE_FDS } else { 1 };
        let caps =
            format!(r#"{{"capabilities":{{"max_msg_fds":{fds},"max_data_xfer_size":{}}}}}"#, wire::MAX_DATA_XFER);
        Ok(wire::version_body(0, minor.min(MINOR), &caps))
    }

    /// SET_IRQS: MSI-X only. A bounded connection takes only its NCs' vectors and only the
    /// trigger action; "disable all" releases its own vectors only.
    fn set_irqs(&mut self, body: &[u8], fds: Vec<File>) -> Result<Vec<u8>, Refusal> {
        let q = wire::SetIrqs::decode(body).map_err(invalid)?;
        if q.index >= VFIO_PCI_NUM_IRQS {
            return refuse(EINVAL, format!("SET_IRQS index {}", q.index));
        }
        if q.flags & VFIO_IRQ_SET_DATA_BOOL != 0 {
            return refuse(ENOTSUP, "SET_IRQS: boolean data is not offered");
        }
        let data = q.flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let Some(o) = self.bounded() else {
            // The function's client: the device model takes it as it is (masking is QEMU's).
            self.backend.set_irqs(q.index, q.flags, q.start, q.count, fds).map_err(invalid)?;
            return Ok(Vec::new());
        };
        if q.flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            return refuse(ENOTSUP, "SET_IRQS: only the trigger action");
        }
        if q.index != VFIO_PCI_MSIX_IRQ_INDEX {
            return refuse(EINVAL, format!("SET_IRQS index {}: only MSI-X is offered", q.index));
        }
        if data == VFIO_IRQ_SET_DATA_NONE && q.count == 0 {
            // "Disable all": this connection's vectors only.
            let sim = self.backend.device().clone();
            for v in std::mem::take(&mut self.vectors) {
                let _ = sim.set_irq_eventfd(v, None);
            }
            return Ok(Vec::new());
        }
        let end = q.start.checked_add(q.count).ok_or_else(|| invalid("SET_IRQS range wraps"))?;
        if let Some(v) = (q.start..end).find(|&v| !o.ncs.contains(&(v as usize))) {
            return refuse(EPERM, format!("SET_IRQS vector {v}: this client's NCs are {:?}", o.ncs));
        }
        self.backend.set_irqs(q.index, q.flags, q.start, q.count, fds).map_err(invalid)?;
        for v in q.start..end {
            if data == VFIO_IRQ_SET_DATA_NONE {
                self.vectors.remove(&v);
            } else {
                self.vectors.insert(v);
            }
        }
        Ok(Vec::new())
    }

    /// Undo what the connection left (module docs).
    fn cleanup(&mut self) {
        let sim = self.backend.device().clone();
        self.summary.mappings_cleaned = self.maps.len();
        self.summary.vectors_cleaned = self.vectors.len();
        match self.scope {
            Scope::Function => {
                sim.clear_irq_eventfds();
                sim.unmap_all_external();
                self.maps.clear();
                self.vectors.clear();
            }
            Scope::Bounded(_) => {
                for (s, l) in std::mem::take(&mut self.maps) {
                    sim.unmap_external(s, l);
                }
                for v in std::mem::take(&mut self.vectors) {
                    let _ = sim.set_irq_eventfd(v, None);
                }
            }
        }
    }
}

/// Serve `backend` to the client at the other end of `stream` until it disconnects, within
/// `scope`. Blocks; returns once what the connection left is undone — after a clean end of
/// file with what was cleaned, after a broken or malformed stream with the error.
pub(crate) fn serve(backend: &mut SimBackend, stream: &UnixStream, scope: Scope) -> Result<ConnSummary, ServeError> {
    let mut conn = Conn {
        backend,
        scope,
        maps: BTreeMap::new(),
        vectors: BTreeSet::new(),
        summary: Default::default(),
        fast: None,
        fast_offered: false,
    };
    let r = serve_loop(&mut conn, stream);
    conn.cleanup();
    r.map(|()| conn.summary.clone())
}

fn serve_loop(conn: &mut Conn<'_>, stream: &UnixStream) -> Result<(), ServeError> {
    loop {
        let Some(m) = wire::read_message(stream)? else { return Ok(()) };
        if serve_one(conn, stream, m)? == Served::HungUp {
            return Ok(());
        }
        if let Some(f) = conn.fast.take() {
            // From the reply on, the client speaks through the fast path.
            return fast::serve(conn, stream, f);
        }
    }
}

/// What became of a message [`serve_one`] served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// Answered (or it asked for no answer).
    Done,
    /// The client hung up before its answer could be written (EPIPE, ECONNRESET): the same
    /// clean end as its end of file, which a client cut off mid-request reaches either way.
    HungUp,
}

/// Serve one message and send its reply (unless it asked for none).
fn serve_one(conn: &mut Conn<'_>, stream: &UnixStream, m: Message) -> Result<Served, ServeError> {
    let header = m.header;
    if header.is_reply() {
        return Err(ServeError::VfioUser(format!("unexpected reply {header:?} from the client")));
    }
    conn.summary.requests += 1;
    let r = if header.command == u16::from(Command::FastPath) {
        conn.fast_path().map(|info| info.encode())
    } else {
        conn.handle(m)
    };
    if let Err(Refusal(errno, why)) = &r {
        conn.summary.refused += 1;
        tracing::debug!("vfio-user request {:?} refused (errno {errno}): {why}", Command::from_u16(header.command));
    }
    if header.no_reply() {
        return Ok(Served::Done);
    }
    let sent = match &r {
        Ok(body) => {
            let fds = conn.fast.as_ref().filter(|_| header.command == u16::from(Command::FastPath));
            let fds = fds.map(|f| f.fds().to_vec()).unwrap_or_default();
            wire::reply_with(stream, &header, Ok(body), &fds)
        }
        Err(Refusal(errno, _)) => wire::reply(stream, &header, Err(*errno)),
    };
    match sent {
        Ok(()) => Ok(Served::Done),
        Err(WireError::Io(e))
            if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) =>
        {
            Ok(Served::HungUp)
        }
        Err(e) => Err(e.into()),
    }
}

impl From<WireError> for ServeError {
    fn from(e: WireError) -> Self {
        ServeError::VfioUser(e.to_string())
    }
}
