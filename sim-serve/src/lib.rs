//! sim-serve: the simulator as a vfio-user server — a virtual Neuron device for VMs.
//!
//! A QEMU with the vfio-user client (`-device vfio-user-pci`) connects to the socket and
//! presents the served function to its guest as a PCI device: the guest kernel's vfio-pci
//! binds it like real hardware, and the driver in the guest (`hal`, the runtime, the CLI over
//! `VfioPlatform`) drives the very [`sim::SimDevice`] the in-process simulator is. What the
//! client sees:
//!
//! - configuration space ([`config`]): the arch's vendor/device ids, BAR0 (registers, the
//!   arch's size, 64-bit), BAR2 (the MSI-X table and PBA, which QEMU emulates), BAR4 (a
//!   window onto HBM stack 0, 64-bit prefetchable; the arch's BAR4 spans every stack's full
//!   HBM, far more than a small guest can place, so [`ServeConfig::bar4_window`] bytes are
//!   served — the driver uses BAR4 only for direct device-memory access such as `csr read`
//!   of HBM), an MSI-X capability and a PCI Express capability with Function Level Reset;
//! - BAR accesses as messages, each one a register access on the simulator;
//! - DMA: the client maps its memory (guest RAM, a shareable memfd) by file descriptor; each
//!   mapping is mmapped here and entered into the simulator's IOMMU at the client's IOVA
//!   ([`sim::SimDevice::map_external`]), so device accesses resolve into guest memory and
//!   any other IOVA faults as in-process;
//! - MSI-X vectors: the client's eventfds become the simulator's interrupt lines (vector N =
//!   NC N);
//! - reset (vfio-user DEVICE_RESET, or an FLR through config space) resets the simulator;
//! - a control socket ([`ServeConfig::control`]): one fault spec per line (`hbm-ue@nc0`, as
//!   `run --sim-fault` takes) is injected while the guest runs; the reply is `ok SPEC` or
//!   `error: REASON`. `stats` replies with the simulator's counters.
//!
//! One device can also be served to many clients at once ([`shared`]: each connection
//! bounded to its IOVA window and its NCs' vectors, cleaned up when it ends) — how the
//! processes sharing a simulated device reach it — and hosted in a process of its own
//! ([`host`]: `neuron-vfio sim-host`) so that it outlives the broker that started it.

pub mod config;
pub mod host;
pub mod shared;

pub use shared::{serve_connection, ConnOptions, ConnSummary};

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use config::{BarDef, ConfigEffect, ConfigSpace, MsixDef};
use csr_maps::Arch;
use memmap2::{Mmap, MmapMut, MmapOptions};
use platform::{Mmio, Platform};
use sim::{ExternalDma, FaultSpec, SimConfig, SimDevice, Timing};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

/// Default size of the served BAR4 window onto HBM: small enough for any guest's 64-bit
/// PCI window.
pub const DEFAULT_BAR4_WINDOW: u64 = 64 << 20;
/// BAR holding the MSI-X table (at 0) and PBA (at [`MSIX_PBA_OFFSET`]); the arch's BARs are
/// 0 (registers) and 4 (device memory), so 2 is free.
pub const MSIX_BAR: u8 = 2;
pub const MSIX_BAR_SIZE: u64 = 8192;
pub const MSIX_PBA_OFFSET: u32 = 4096;

/// Errors serving a device.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Sim(#[from] sim::SimError),
    #[error("platform: {0}")]
    Platform(#[from] platform::PlatformError),
    #[error("vfio-user: {0}")]
    VfioUser(String),
    #[error("control socket {path}: {source}")]
    Control { path: PathBuf, source: std::io::Error },
    #[error("BAR4 window {0:#x}: must be a power of two of at least 4 KiB")]
    Bar4Window(u64),
    /// The device host's driver handle (bringing the device up).
    #[error("driver: {0}")]
    Hal(#[from] hal::HalError),
    /// The device host's socket ([`host::Host`]).
    #[error("sim host socket {path}: {source}")]
    HostSocket { path: PathBuf, source: std::io::Error },
    /// A live device host already answers on the socket.
    #[error("a sim host already listens on {0}")]
    HostRunning(PathBuf),
}

/// What to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub arch: &'static Arch,
    /// The vfio-user socket (must not exist yet).
    pub socket: PathBuf,
    /// Faults armed before the client connects.
    pub faults: Vec<FaultSpec>,
    /// The fault-injection control socket.
    pub control: Option<PathBuf>,
    /// Bytes of HBM stack 0 served through BAR4 (power of two, ≥ 4 KiB; at most the arch's
    /// BAR4).
    pub bar4_window: u64,
}

impl ServeConfig {
    pub fn new(arch: &'static Arch, socket: impl Into<PathBuf>) -> Self {
        Self { arch, socket: socket.into(), faults: Vec::new(), control: None, bar4_window: DEFAULT_BAR4_WINDOW }
    }
}

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.into())
}

/// Guest memory the client mapped, mmapped from its descriptor.
enum ClientMem {
    Rw(MmapMut),
    Ro(Mmap),
}

impl ExternalDma for ClientMem {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            ClientMem::Rw(m) => m.as_ptr() as *mut u8,
            ClientMem::Ro(m) => m.as_ptr() as *mut u8,
        }
    }
    fn len(&self) -> usize {
        match self {
            ClientMem::Rw(m) => m.len(),
            ClientMem::Ro(m) => m.len(),
        }
    }
}

/// The vfio-user device model: configuration space and BARs over a [`SimDevice`].
pub struct SimBackend {
    sim: SimDevice,
    config: ConfigSpace,
    bar0: Arc<dyn Mmio>,
    bar4: Arc<dyn Mmio>,
    bar0_index: u8,
    bar4_index: u8,
    bar4_window: u64,
}

impl SimBackend {
    /// The device model of `sim`, with `bar4_window` bytes of BAR4 served.
    pub fn new(sim: SimDevice, bar4_window: u64) -> Result<Self, ServeError> {
        let arch = sim.arch();
        let bar0 = sim.bar(arch.bars.apb)?;
        let bar4 = sim.bar(arch.bars.dram)?;
        if !bar4_window.is_power_of_two() || bar4_window < 4096 {
            return Err(ServeError::Bar4Window(bar4_window));
        }
        let bar4_window = bar4_window.min(bar4.size().next_power_of_two());
        let id = sim.identity();
        let config = ConfigSpace::new(
            id.vendor,
            id.device,
            &[
                BarDef {
                    index: arch.bars.apb,
                    size: bar0.size().next_power_of_two(),
                    bits64: true,
                    prefetchable: false,
                },
                BarDef { index: MSIX_BAR, size: MSIX_BAR_SIZE, bits64: false, prefetchable: false },
                BarDef { index: arch.bars.dram, size: bar4_window, bits64: true, prefetchable: true },
            ],
            MsixDef { vectors: sim.irq_vectors() as u16, bar: MSIX_BAR, table_offset: 0, pba_offset: MSIX_PBA_OFFSET },
        );
        Ok(Self { bar0_index: arch.bars.apb, bar4_index: arch.bars.dram, sim, config, bar0, bar4, bar4_window })
    }

    /// The simulated device.
    pub fn device(&self) -> &SimDevice {
        &self.sim
    }

    /// The configuration space.
    pub fn config(&self) -> &ConfigSpace {
        &self.config
    }

    /// Region sizes by vfio region index (BARs and config; 0 = absent).
    pub fn region_size(&self, index: u32) -> u64 {
        match index {
            i if i == self.bar0_index as u32 => self.bar0.size().next_power_of_two(),
            i if i == self.bar4_index as u32 => self.bar4_window,
            i if i == MSIX_BAR as u32 => MSIX_BAR_SIZE,
            VFIO_PCI_CONFIG_REGION_INDEX => config::CONFIG_SIZE as u64,
            _ => 0,
        }
    }

    /// The regions to announce to the client.
    pub fn regions(&self) -> Vec<ServerRegion> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = self.region_size(index);
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: size_of::<vfio_region_info>() as u32,
                        index,
                        size,
                        flags: if size > 0 { VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE } else { 0 },
                        ..Default::default()
                    },
                    sparse_areas: Vec::new(),
                    mmap_fd: None,
                }
            })
            .collect()
    }

    /// The interrupts to announce: MSI-X only, one vector per NC.
    pub fn irqs(&self) -> Vec<IrqInfo> {
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    IrqInfo {
                        index,
                        count: self.sim.irq_vectors(),
                        flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                    }
                } else {
                    IrqInfo { index, count: 0, flags: 0 }
                }
            })
            .collect()
    }

    fn bar(&self, region: u32) -> Option<(&dyn Mmio, u64)> {
        if region == self.bar0_index as u32 {
            Some((self.bar0.as_ref(), self.region_size(region)))
        } else if region == self.bar4_index as u32 {
            Some((self.bar4.as_ref(), self.bar4_window))
        } else {
            None
        }
    }

    fn reset_device(&mut self) -> Result<(), std::io::Error> {
        self.sim.reset().map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// A 4-byte word of a BAR; past the model's size (the BAR rounds up to a power of two) reads
/// 0 and drops writes, as unclaimed addresses on a bus do.
fn word_read(m: &dyn Mmio, off: u64) -> Result<u32, std::io::Error> {
    if off + 4 > m.size() {
        return Ok(0);
    }
    m.read32(off).map_err(|e| std::io::Error::other(e.to_string()))
}

fn word_write(m: &dyn Mmio, off: u64, v: u32) -> Result<(), std::io::Error> {
    if off + 4 > m.size() {
        return Ok(());
    }
    m.write32(off, v).map_err(|e| std::io::Error::other(e.to_string()))
}

fn check_range(region: u32, offset: u64, len: usize, size: u64) -> Result<(), std::io::Error> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io_err(format!("region {region}: access of {len} bytes at {offset:#x} beyond {size:#x}"))),
    }
}

impl ServerBackend for SimBackend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), std::io::Error> {
        check_range(region, offset, data.len(), self.region_size(region))?;
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config.read(offset, data);
            return Ok(());
        }
        let Some((m, _)) = self.bar(region) else {
            // The MSI-X BAR: QEMU emulates the table and PBA; nothing else lives there.
            data.fill(0);
            return Ok(());
        };
        // Register accesses are 32-bit: wider ones split into words, narrower ones take
        // their bytes of the word.
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let word = at & !3;
            let skip = (at - word) as usize;
            let v = word_read(m, word)?.to_le_bytes();
            let n = (4 - skip).min(data.len() - done);
            data[done..done + n].copy_from_slice(&v[skip..skip + n]);
            done += n;
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        check_range(region, offset, data.len(), self.region_size(region))?;
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            if self.config.write(offset, data) == ConfigEffect::FunctionReset {
                // The client's interrupt routing (its eventfds) survives: it virtualizes MSI-X
                // and restores the guest's state around the reset itself.
                tracing::info!("function level reset");
                self.config.reset();
                self.reset_device()?;
            }
            return Ok(());
        }
        let Some((m, _)) = self.bar(region) else { return Ok(()) };
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let word = at & !3;
            let skip = (at - word) as usize;
            let n = (4 - skip).min(data.len() - done);
            let v = if n == 4 {
                u32::from_le_bytes([data[done], data[done + 1], data[done + 2], data[done + 3]])
            } else {
                // A partial word: read-modify-write (registers are written 32 bits wide by
                // the driver; this serves byte-wise tools).
                let mut b = word_read(m, word)?.to_le_bytes();
                b[skip..skip + n].copy_from_slice(&data[done..done + n]);
                u32::from_le_bytes(b)
            };
            word_write(m, word, v)?;
            done += n;
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        let Some(fd) = fd else {
            // Client memory without a descriptor (ROM, VGA memory): the device cannot reach
            // it, and accesses there fault as to any unmapped IOVA. The vfio-user DMA_READ/WRITE
            // messages that would reach it are not used.
            tracing::debug!("dma_map iova {address:#x} size {size:#x}: no descriptor, not reachable by the device");
            return Ok(());
        };
        let len = usize::try_from(size).map_err(|_| io_err("DMA map size"))?;
        let readable = flags.contains(DmaMapFlags::READ);
        let writable = flags.contains(DmaMapFlags::WRITE);
        let mut opts = MmapOptions::new();
        opts.offset(offset).len(len);
        let mem = if writable {
            // SAFETY: a shared mapping of the client's memory file. The client (the VM) may
            // change it concurrently, as it may change real DMA memory under a device: the
            // simulator only copies bytes in and out of it through raw pointers, never
            // forms references that assume exclusivity.
            ClientMem::Rw(unsafe { opts.map_mut(&fd) }?)
        } else {
            // SAFETY: as above, read-only.
            ClientMem::Ro(unsafe { opts.map(&fd) }?)
        };
        tracing::debug!("dma_map iova {address:#x} size {size:#x} offset {offset:#x} r{readable} w{writable}");
        self.sim.map_external(address, Box::new(mem), readable, writable).map_err(|e| io_err(e.to_string()))?;
        Ok(())
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> Result<(), std::io::Error> {
        let n = if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            self.sim.unmap_all_external()
        } else {
            self.sim.unmap_external(address, size)
        };
        tracing::debug!("dma_unmap iova {address:#x} size {size:#x}: {n} mappings");
        Ok(())
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        tracing::info!("device reset");
        self.sim.clear_irq_eventfds();
        self.reset_device()
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return if count == 0 { Ok(()) } else { Err(io_err(format!("IRQ index {index}: only MSI-X is offered"))) };
        }
        if flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            // Masking is QEMU's (it emulates the table); nothing to do here.
            return Ok(());
        }
        let vectors = self.sim.irq_vectors();
        match flags & VFIO_IRQ_SET_DATA_TYPE_MASK {
            VFIO_IRQ_SET_DATA_NONE if count == 0 => self.sim.clear_irq_eventfds(),
            // Descriptors cannot be -1 on the wire: the client releases vectors this way.
            VFIO_IRQ_SET_DATA_NONE => {
                for v in start..start.saturating_add(count).min(vectors) {
                    self.sim.set_irq_eventfd(v, None).map_err(|e| io_err(e.to_string()))?;
                }
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                if fds.len() != count as usize {
                    return Err(io_err(format!(
                        "SET_IRQS: {count} vectors from {start} but {} descriptors",
                        fds.len()
                    )));
                }
                for (i, f) in fds.into_iter().enumerate() {
                    let v = start + i as u32;
                    self.sim.set_irq_eventfd(v, Some(OwnedFd::from(f))).map_err(|e| io_err(e.to_string()))?;
                }
            }
            other => return Err(io_err(format!("SET_IRQS data type {other:#x} not supported"))),
        }
        tracing::debug!("set_irqs MSI-X start {start} count {count}");
        Ok(())
    }
}

/// A served device: the vfio-user socket (bound), the simulator and its control socket.
pub struct SimServer {
    server: Server,
    backend: SimBackend,
    control: Option<(PathBuf, UnixListener)>,
}

impl SimServer {
    /// Create the simulator and bind the sockets (the client may connect once this returns).
    pub fn new(cfg: &ServeConfig) -> Result<Self, ServeError> {
        let sim = SimDevice::new(SimConfig::new(cfg.arch).timing(Timing::Threaded))?;
        for f in &cfg.faults {
            sim.inject(f.clone());
        }
        let backend = SimBackend::new(sim, cfg.bar4_window)?;
        let control = match &cfg.control {
            Some(p) => {
                let l = UnixListener::bind(p).map_err(|source| ServeError::Control { path: p.clone(), source })?;
                Some((p.clone(), l))
            }
            None => None,
        };
        let server = Server::new(&cfg.socket, true, backend.irqs(), backend.regions())
            .map_err(|e| ServeError::VfioUser(format!("{}: {e}", cfg.socket.display())))?;
        Ok(Self { server, backend, control })
    }

    pub fn backend(&self) -> &SimBackend {
        &self.backend
    }

    /// Serve one client until it disconnects (the control socket is served meanwhile).
    pub fn run(mut self) -> Result<(), ServeError> {
        if let Some((_, l)) = &self.control {
            let l = l.try_clone().map_err(|e| ServeError::VfioUser(e.to_string()))?;
            let sim = self.backend.sim.clone();
            std::thread::Builder::new()
                .name("sim-serve-control".into())
                .spawn(move || control_loop(l, sim))
                .map_err(|e| ServeError::VfioUser(e.to_string()))?;
        }
        let r = self.server.run(&mut self.backend).map_err(|e| ServeError::VfioUser(e.to_string()));
        self.backend.sim.clear_irq_eventfds();
        self.backend.sim.unmap_all_external();
        r
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some((p, _)) = &self.control {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Answer one control line.
pub fn control_command(sim: &SimDevice, line: &str) -> String {
    let line = line.trim();
    if line == "stats" {
        return format!("{:?}", sim.stats());
    }
    match line.parse::<FaultSpec>() {
        Ok(f) => {
            sim.inject(f);
            format!("ok {line}")
        }
        Err(e) => format!("error: {e}"),
    }
}

fn control_loop(l: UnixListener, sim: SimDevice) {
    for conn in l.incoming() {
        let Ok(conn) = conn else { continue };
        let sim = sim.clone();
        let _ = std::thread::Builder::new().name("sim-serve-ctl-conn".into()).spawn(move || control_conn(conn, sim));
    }
}

fn control_conn(conn: UnixStream, sim: SimDevice) {
    let Ok(mut out) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let reply = control_command(&sim, &line);
        tracing::info!("control: {} -> {reply}", line.trim());
        if writeln!(out, "{reply}").is_err() {
            return;
        }
    }
}

/// Send one control line to a running server's control socket and return its reply.
pub fn control_send(path: &Path, line: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    writeln!(s, "{}", line.trim())?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    Ok(reply.trim_end().to_string())
}
