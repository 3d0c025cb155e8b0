//! A device the broker owns: its backend, its tables (leases, IOVA windows, grants) and each
//! client's data path.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use broker_client::protocol::DeviceSpec;
use csr_maps::Arch;

use super::config::MAX_CLIENTS;
use super::ops::DeviceOps;

/// The data path of one leased client, served by the broker. A simulated device: one
/// vfio-user connection on a thread (it ends when the client's end closes or the broker shuts
/// its end down, and every mapping the client made is gone when the thread has returned). A
/// VFIO device: the connection only carried the device's descriptors; the client maps its
/// DMA itself into the device's IOMMU address space inside its window, which ending the
/// path unmaps (a dead client's mappings outlive it there: the address space is shared).
pub(super) struct DataPath {
    /// The broker's end of the connection (none for a path re-registered after a restart).
    pub(super) shut: Option<UnixStream>,
    pub(super) thread: Option<JoinHandle<()>>,
    /// A hosted simulated device: its host's socket and the connection's id there.
    pub(super) host: Option<(PathBuf, u64)>,
    pub(super) window: Option<(Arc<vfio::VfioPlatform>, std::ops::Range<u64>)>,
}

impl DataPath {
    /// Close the connection and wait until the client's mappings are gone.
    pub(super) fn end(mut self) {
        if let Some(s) = &self.shut {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((socket, id)) = self.host.take() {
            // Returns once the host has unmapped everything the connection mapped.
            if let Err(e) = sim_serve::host::end(&socket, id) {
                tracing::warn!(%e, id, "ending a client's connection to its device host");
            }
        }
        if let Some((p, w)) = self.window.take() {
            // One unmap of the whole window takes every mapping inside it; a window with none
            // left (the client unmapped its own) is not an error worth more than a note.
            if let Err(e) = p.device().dma().unmap_raw(w.start, w.end - w.start) {
                tracing::debug!(%e, start = w.start, "unmapping a client's IOVA window");
            }
        }
    }
}

pub(super) enum Backend {
    /// A simulated device in this process.
    Sim(sim::SimDevice),
    /// A simulated device in a host process of its own (`sim-host`, at `socket`): the broker's
    /// handle and every client reach it through a vfio-user connection of their own.
    Hosted { socket: PathBuf },
    /// A PCI function the broker opened through VFIO (iommufd, or no-IOMMU mode): clients get
    /// its descriptors and drive their NCs through their own BAR mappings.
    Vfio(Arc<vfio::VfioPlatform>),
}

pub(super) struct Device {
    pub(super) index: u32,
    pub(super) name: String,
    pub(super) spec: DeviceSpec,
    pub(super) arch: &'static Arch,
    pub(super) backend: Backend,
    /// The broker's own driver handle: device init, cleanup of dead clients, HBM grants.
    pub(super) hal: hal::Device,
    /// Per NC: the client leasing it.
    pub(super) leases: Vec<Option<u64>>,
    /// Per IOVA window: the client attached in it.
    pub(super) slots: Vec<Option<u64>>,
    /// Device memory granted: handle → (client, memory).
    pub(super) hbm: HashMap<u64, (u64, hal::DevBuf)>,
    /// Data paths by client.
    pub(super) paths: HashMap<u64, DataPath>,
    /// A device found live (a previous broker's clients still use it) is adopted: until
    /// [`BrokerConfig::adopt_grace`] has passed and what nobody re-registered has been taken
    /// back ([`settle`]), only [`Request::Rejoin`] is served on it — no new attachment, no
    /// new lease — so that nothing a live client holds is handed out twice.
    pub(super) adopting: bool,
}

impl Device {
    /// A device just opened: no lease, no client, no grant.
    pub(super) fn new(
        index: u32,
        name: String,
        spec: DeviceSpec,
        arch: &'static Arch,
        backend: Backend,
        hal: hal::Device,
    ) -> Self {
        Self {
            index,
            name,
            spec,
            arch,
            backend,
            hal,
            leases: vec![None; arch.counts.ncs as usize],
            slots: vec![None; MAX_CLIENTS],
            hbm: HashMap::new(),
            paths: HashMap::new(),
            adopting: false,
        }
    }

    /// What acts on the device as a whole ([`DeviceOps`]).
    pub(super) fn ops(&self) -> DeviceOps {
        match &self.backend {
            Backend::Hosted { socket } => DeviceOps::Host(socket.clone()),
            _ => DeviceOps::Hal(self.hal.clone()),
        }
    }

    pub(super) fn client_ncs(&self, client: u64) -> Option<(u32, u32)> {
        let first = self.leases.iter().position(|l| *l == Some(client))?;
        let count = self.leases.iter().filter(|l| **l == Some(client)).count();
        Some((first as u32, count as u32))
    }

    pub(super) fn free_ncs(&self) -> usize {
        self.leases.iter().filter(|l| l.is_none()).count()
    }

    /// (IOMMU mappings, collectives completed by the device's hub).
    pub(super) fn stats(&self) -> (u64, u64) {
        match &self.backend {
            Backend::Sim(s) => {
                let st = s.stats();
                (st.iommu_mappings, st.collectives)
            }
            Backend::Hosted { socket } => match sim_serve::host::stats(socket) {
                Ok(st) => (st.iommu_mappings, st.collectives),
                Err(e) => {
                    tracing::debug!(%e, "the device host's statistics");
                    (0, 0)
                }
            },
            // The kernel's IOMMU tables are not listed to userspace (docs/sharing.md).
            Backend::Vfio(_) => (0, 0),
        }
    }
}
