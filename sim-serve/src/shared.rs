//! One simulated device, many vfio-user connections: how the processes sharing a simulated
//! device (`sim:shared`, through the broker) each reach it.
//!
//! [`serve_connection`] serves one already connected client on the calling thread until the
//! client disconnects; every connection of a device shares its [`SimDevice`] (its registers,
//! HBM, IOMMU, interrupt lines). What a connection may do is bounded by its [`ConnOptions`]:
//!
//! - DMA_MAP only inside its IOVA window (the windows of a device's connections do not
//!   overlap, so no client can replace or remove another's mapping), DMA_UNMAP only there
//!   (UNMAP_ALL removes only its own);
//! - SET_IRQS only on the MSI-X vectors of its NCs (vector N is NC N's);
//! - no DEVICE_RESET and no configuration-space write (both act on the whole function, which
//!   others use: resetting a client's NCs is the broker's job);
//! - register and HBM-window accesses as any client (processes sharing a device trust each
//!   other's code as threads would; the NEFF confinement is the loader's).
//!
//! When the connection ends — end of file, an error, a malformed message — every mapping it
//! made is unmapped (device accesses in flight finish first) and its eventfds are forgotten,
//! before [`serve_connection`] returns.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::ops::Range;
use std::os::unix::net::UnixStream;

use sim::SimDevice;
use vfio::user::wire::{self, Command, Message, WireError};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_NONE,
    VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS,
    VFIO_PCI_NUM_REGIONS,
};
use vfio_user::{DmaMapFlags, ServerBackend};

use crate::{ServeError, SimBackend, DEFAULT_BAR4_WINDOW};

/// What one connection may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnOptions {
    /// The IOVAs the client may map.
    pub iova_window: Range<u64>,
    /// Its NCs: the MSI-X vectors it may take.
    pub ncs: Range<usize>,
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

const EINVAL: u32 = 22;
const EPERM: u32 = 1;
const ENOTSUP: u32 = 95;

/// A request refused: the errno for the reply and why (logged).
struct Refusal(u32, String);

fn refuse<T>(errno: u32, why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(errno, why.into()))
}

struct Conn {
    backend: SimBackend,
    opts: ConnOptions,
    /// This connection's mappings: IOVA → length.
    maps: BTreeMap<u64, u64>,
    vectors: BTreeSet<u32>,
    summary: ConnSummary,
}

impl Conn {
    fn in_window(&self, start: u64, len: u64) -> bool {
        len > 0
            && start >= self.opts.iova_window.start
            && start.checked_add(len).is_some_and(|end| end <= self.opts.iova_window.end)
    }

    fn own_vector(&self, v: u32) -> bool {
        self.opts.ncs.contains(&(v as usize))
    }

    /// Forget this connection's mappings overlapping `[start, start + len)` (after the
    /// device's IOMMU dropped them).
    fn forget_maps(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        self.maps.retain(|&s, l| !(s < end && s.saturating_add(*l) > start));
    }

    fn handle(&mut self, m: Message) -> Result<Vec<u8>, Refusal> {
        let bad = |e: WireError| Refusal(EINVAL, e.to_string());
        let Some(cmd) = Command::from_u16(m.header.command) else {
            return refuse(ENOTSUP, format!("unknown command {}", m.header.command));
        };
        let sim = self.backend.device().clone();
        match cmd {
            Command::Version => {
                let mut f = wire::Fields::new("VERSION", &m.body);
                let major = f.u16().map_err(bad)?;
                if major != 0 {
                    return refuse(ENOTSUP, format!("protocol version {major}"));
                }
                let caps = format!(
                    r#"{{"capabilities":{{"max_msg_fds":{},"max_data_xfer_size":{}}}}}"#,
                    wire::MAX_MESSAGE_FDS,
                    wire::MAX_DATA_XFER
                );
                Ok(wire::version_body(0, 1, &caps))
            }
            Command::DeviceGetInfo => {
                // No VFIO_DEVICE_FLAGS_RESET: a shared function is not reset by its clients.
                Ok(wire::DeviceInfo {
                    flags: VFIO_DEVICE_FLAGS_PCI,
                    num_regions: VFIO_PCI_NUM_REGIONS,
                    num_irqs: VFIO_PCI_NUM_IRQS,
                }
                .encode())
            }
            Command::DeviceGetRegionInfo => {
                let q = wire::RegionInfo::decode(&m.body).map_err(bad)?;
                let Some(r) = self.backend.regions().into_iter().find(|r| r.region_info.index == q.index) else {
                    return refuse(EINVAL, format!("no region {}", q.index));
                };
                let i = r.region_info;
                Ok(wire::RegionInfo {
                    argsz: wire::RegionInfo::LEN as u32,
                    flags: i.flags,
                    index: i.index,
                    cap_offset: 0,
                    size: i.size,
                    offset: 0,
                }
                .encode())
            }
            Command::GetIrqInfo => {
                let q = wire::IrqInfo::decode(&m.body).map_err(bad)?;
                let Some(i) = self.backend.irqs().into_iter().find(|i| i.index == q.index) else {
                    return refuse(EINVAL, format!("no interrupt index {}", q.index));
                };
                Ok(wire::IrqInfo { flags: i.flags, index: i.index, count: i.count }.encode())
            }
            Command::SetIrqs => {
                let q = wire::SetIrqs::decode(&m.body).map_err(bad)?;
                if q.flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
                    return refuse(ENOTSUP, "SET_IRQS: only the trigger action");
                }
                if q.index != VFIO_PCI_MSIX_IRQ_INDEX {
                    return refuse(EINVAL, format!("SET_IRQS index {}: only MSI-X is offered", q.index));
                }
                let data = q.flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
                if data == VFIO_IRQ_SET_DATA_NONE && q.count == 0 {
                    // "Disable all": this connection's vectors only.
                    for v in std::mem::take(&mut self.vectors) {
                        let _ = sim.set_irq_eventfd(v, None);
                    }
                    return Ok(Vec::new());
                }
                let end = q.start.checked_add(q.count).ok_or_else(|| Refusal(EINVAL, "SET_IRQS range wraps".into()))?;
                if let Some(v) = (q.start..end).find(|&v| !self.own_vector(v)) {
                    return refuse(EPERM, format!("SET_IRQS vector {v}: this client's NCs are {:?}", self.opts.ncs));
                }
                let fds: Vec<File> = m.fds.into_iter().map(File::from).collect();
                self.backend
                    .set_irqs(q.index, q.flags, q.start, q.count, fds)
                    .map_err(|e| Refusal(EINVAL, e.to_string()))?;
                for v in q.start..end {
                    if data == VFIO_IRQ_SET_DATA_NONE {
                        self.vectors.remove(&v);
                    } else {
                        self.vectors.insert(v);
                    }
                }
                Ok(Vec::new())
            }
            Command::RegionRead => {
                let (a, _) = wire::RegionAccess::decode(&m.body).map_err(bad)?;
                let mut data = vec![0u8; a.count as usize];
                self.backend.region_read(a.region, a.offset, &mut data).map_err(|e| Refusal(EINVAL, e.to_string()))?;
                Ok(a.encode(&data))
            }
            Command::RegionWrite => {
                let (a, data) = wire::RegionAccess::decode(&m.body).map_err(bad)?;
                if data.len() != a.count as usize {
                    return refuse(EINVAL, format!("REGION_WRITE of {} bytes carries {}", a.count, data.len()));
                }
                if a.region == VFIO_PCI_CONFIG_REGION_INDEX {
                    return refuse(EPERM, "configuration space is the device owner's (the broker's)");
                }
                self.backend.region_write(a.region, a.offset, data).map_err(|e| Refusal(EINVAL, e.to_string()))?;
                Ok(a.encode(&[]))
            }
            Command::DmaMap => {
                let q = wire::DmaMap::decode(&m.body).map_err(bad)?;
                if !self.in_window(q.address, q.size) {
                    return refuse(
                        EPERM,
                        format!(
                            "DMA_MAP {:#x}+{:#x}: outside this client's IOVA window {:#x}..{:#x}",
                            q.address, q.size, self.opts.iova_window.start, self.opts.iova_window.end
                        ),
                    );
                }
                let mut fds = m.fds;
                if fds.len() != 1 {
                    return refuse(EINVAL, format!("DMA_MAP with {} descriptors (one needed)", fds.len()));
                }
                let fd = fds.pop().map(File::from);
                self.backend
                    .dma_map(DmaMapFlags::from_bits_retain(q.flags), q.offset, q.address, q.size, fd)
                    .map_err(|e| Refusal(EINVAL, e.to_string()))?;
                // Mappings it replaced (its own: the window is its own) are gone.
                self.forget_maps(q.address, q.size);
                self.maps.insert(q.address, q.size);
                Ok(Vec::new())
            }
            Command::DmaUnmap => {
                let q = wire::DmaUnmap::decode(&m.body).map_err(bad)?;
                if q.flags & wire::DMA_UNMAP_ALL != 0 {
                    for (s, l) in std::mem::take(&mut self.maps) {
                        sim.unmap_external(s, l);
                    }
                } else {
                    if !self.in_window(q.address, q.size) {
                        return refuse(
                            EPERM,
                            format!("DMA_UNMAP {:#x}+{:#x}: outside this client's window", q.address, q.size),
                        );
                    }
                    sim.unmap_external(q.address, q.size);
                    self.forget_maps(q.address, q.size);
                }
                Ok(q.encode())
            }
            Command::DeviceReset => refuse(EPERM, "a shared device is not reset by one of its clients"),
            other => refuse(ENOTSUP, format!("{other:?} is not offered")),
        }
    }

    fn cleanup(&mut self) {
        let sim = self.backend.device().clone();
        self.summary.mappings_cleaned = self.maps.len();
        for (s, l) in std::mem::take(&mut self.maps) {
            sim.unmap_external(s, l);
        }
        self.summary.vectors_cleaned = self.vectors.len();
        for v in std::mem::take(&mut self.vectors) {
            let _ = sim.set_irq_eventfd(v, None);
        }
    }
}

/// Serve `device` to the client at the other end of `stream` until it disconnects, within
/// `opts`. Blocks; returns once everything the connection mapped is unmapped and its
/// eventfds are forgotten — after a clean end of file with what was cleaned, after a broken
/// or malformed stream with the error.
pub fn serve_connection(device: SimDevice, stream: UnixStream, opts: ConnOptions) -> Result<ConnSummary, ServeError> {
    let backend = SimBackend::new(device, DEFAULT_BAR4_WINDOW)?;
    let mut conn =
        Conn { backend, opts, maps: BTreeMap::new(), vectors: BTreeSet::new(), summary: ConnSummary::default() };
    let r = serve_loop(&mut conn, &stream);
    conn.cleanup();
    r.map(|()| conn.summary.clone())
}

fn serve_loop(conn: &mut Conn, stream: &UnixStream) -> Result<(), ServeError> {
    loop {
        let Some(m) = wire::read_message(stream)? else { return Ok(()) };
        let header = m.header;
        if header.is_reply() {
            return Err(ServeError::VfioUser(format!("unexpected reply {header:?} from the client")));
        }
        conn.summary.requests += 1;
        let r = conn.handle(m);
        if let Err(Refusal(errno, why)) = &r {
            conn.summary.refused += 1;
            tracing::debug!("vfio-user request {:?} refused (errno {errno}): {why}", Command::from_u16(header.command));
        }
        if header.no_reply() {
            continue;
        }
        match &r {
            Ok(body) => wire::reply(stream, &header, Ok(body))?,
            Err(Refusal(errno, _)) => wire::reply(stream, &header, Err(*errno))?,
        }
    }
}

impl From<WireError> for ServeError {
    fn from(e: WireError) -> Self {
        ServeError::VfioUser(e.to_string())
    }
}
