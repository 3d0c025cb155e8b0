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
//!
//! The server is the crate's one vfio-user stack (`crate::conn`), the same that serves a VM's
//! QEMU the whole function; here it serves a bounded connection (`conn::Scope::Bounded`).

use std::os::unix::net::UnixStream;

use sim::SimDevice;

use crate::conn::{self, ConnOptions, ConnSummary, Scope};
use crate::{ServeError, SimBackend, DEFAULT_BAR4_WINDOW};

/// Serve `device` to the client at the other end of `stream` until it disconnects, within
/// `opts`. Blocks; returns once everything the connection mapped is unmapped and its
/// eventfds are forgotten — after a clean end of file with what was cleaned, after a broken
/// or malformed stream with the error.
pub fn serve_connection(device: SimDevice, stream: UnixStream, opts: ConnOptions) -> Result<ConnSummary, ServeError> {
    let mut backend = SimBackend::new(device, DEFAULT_BAR4_WINDOW)?;
    conn::serve(&mut backend, &stream, Scope::Bounded(opts))
}
