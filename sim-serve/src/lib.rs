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
//!   `error: REASON`. `stats` replies with the simulator's counters; `mark TEXT` hands TEXT to
//!   [`ServeConfig::marks`] (the MMIO trace's marks: a harness delimits what a guest did);
//! - [`ServeConfig::bar_wrap`]: each served BAR wrapped, e.g. to trace every access the
//!   client makes (`neuron-vfio --mmio-trace FILE sim-serve`).
//!
//! One device can also be served to many clients at once ([`shared`]: each connection
//! bounded to its IOVA window and its NCs' vectors, cleaned up when it ends) — how the
//! processes sharing a simulated device reach it — and hosted in a process of its own
//! ([`host`]: `neuron-vfio sim-host`) so that it outlives the broker that started it.
//!
//! Both are served by the crate's one vfio-user server (`conn/`, over the device model
//! [`SimBackend`]): a VM's connection acts on the whole function, a sharing client's on its
//! window of it (docs/virtual-device.md, "One vfio-user server").

mod backend;
pub mod config;
mod conn;
pub mod host;
pub mod seam;
pub mod shared;

pub use backend::SimBackend;
pub use conn::{ConnOptions, ConnSummary};
pub use shared::serve_connection;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use csr_maps::Arch;
use platform::Mmio;
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

/// Wraps a served BAR (its index, the simulator's region) before the client reaches it, e.g.
/// to trace every access ([`ServeConfig::bar_wrap`]).
pub type BarWrap = Arc<dyn Fn(u8, Arc<dyn Mmio>) -> Arc<dyn Mmio> + Send + Sync>;
/// Takes the text of each `mark TEXT` control line ([`ServeConfig::marks`]).
pub type MarkSink = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// The vfio-user socket of `sim-serve` (binding it, accepting the client).
    #[error("vfio-user socket {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
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
#[derive(Clone)]
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
    /// Applied to BAR0 and BAR4 once, before serving (None: the simulator's regions as they are).
    pub bar_wrap: Option<BarWrap>,
    /// Where `mark TEXT` control lines go (None: they are refused).
    pub marks: Option<MarkSink>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("arch", &self.arch.name)
            .field("socket", &self.socket)
            .field("faults", &self.faults)
            .field("control", &self.control)
            .field("bar4_window", &self.bar4_window)
            .field("bar_wrap", &self.bar_wrap.is_some())
            .field("marks", &self.marks.is_some())
            .finish()
    }
}

impl ServeConfig {
    pub fn new(arch: &'static Arch, socket: impl Into<PathBuf>) -> Self {
        Self {
            arch,
            socket: socket.into(),
            faults: Vec::new(),
            control: None,
            bar4_window: DEFAULT_BAR4_WINDOW,
            bar_wrap: None,
            marks: None,
        }
    }
}

/// A served device: the vfio-user socket (bound), the simulator and its control socket.
pub struct SimServer {
    socket: PathBuf,
    listener: UnixListener,
    backend: SimBackend,
    control: Option<(PathBuf, UnixListener)>,
    marks: Option<MarkSink>,
}

impl SimServer {
    /// Create the simulator and bind the sockets (the client may connect once this returns).
    pub fn new(cfg: &ServeConfig) -> Result<Self, ServeError> {
        let sim = SimDevice::new(SimConfig::new(cfg.arch).timing(Timing::Threaded))?;
        for f in &cfg.faults {
            sim.inject(f.clone());
        }
        let backend = SimBackend::with_bar_wrap(sim, cfg.bar4_window, cfg.bar_wrap.as_ref())?;
        let control = match &cfg.control {
            Some(p) => {
                let l = UnixListener::bind(p).map_err(|source| ServeError::Control { path: p.clone(), source })?;
                Some((p.clone(), l))
            }
            None => None,
        };
        let listener = UnixListener::bind(&cfg.socket)
            .map_err(|source| ServeError::Socket { path: cfg.socket.clone(), source })?;
        Ok(Self { socket: cfg.socket.clone(), listener, backend, control, marks: cfg.marks.clone() })
    }

    pub fn backend(&self) -> &SimBackend {
        &self.backend
    }

    /// Serve one client until it disconnects (the control socket is served meanwhile): the
    /// whole function, as a VM's device ([`conn::Scope::Function`]).
    pub fn run(mut self) -> Result<(), ServeError> {
        if let Some((_, l)) = &self.control {
            let l = l.try_clone().map_err(|e| ServeError::VfioUser(e.to_string()))?;
            let sim = self.backend.device().clone();
            let marks = self.marks.clone();
            std::thread::Builder::new()
                .name("sim-serve-control".into())
                .spawn(move || control_loop(l, sim, marks))
                .map_err(|e| ServeError::VfioUser(e.to_string()))?;
        }
        let (stream, _) =
            self.listener.accept().map_err(|source| ServeError::Socket { path: self.socket.clone(), source })?;
        conn::serve(&mut self.backend, &stream, conn::Scope::Function).map(drop)
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
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
    if let Some(rest) = line.strip_prefix("interhost ") {
        let words: Vec<&str> = rest.split_whitespace().collect();
        return match seam::control(sim, &words) {
            Ok(r) => r,
            Err(e) => format!("error: {e}"),
        };
    }
    match line.parse::<FaultSpec>() {
        Ok(f) => {
            sim.inject(f);
            format!("ok {line}")
        }
        Err(e) => format!("error: {e}"),
    }
}

fn control_loop(l: UnixListener, sim: SimDevice, marks: Option<MarkSink>) {
    for conn in l.incoming() {
        let Ok(conn) = conn else { continue };
        let sim = sim.clone();
        let marks = marks.clone();
        let _ =
            std::thread::Builder::new().name("sim-serve-ctl-conn".into()).spawn(move || control_conn(conn, sim, marks));
    }
}

/// A `mark TEXT` line: TEXT to the server's mark sink.
fn mark_command(marks: Option<&MarkSink>, text: &str) -> String {
    let text = text.trim();
    match marks {
        Some(m) if !text.is_empty() && !text.contains(['\n', '\r']) => {
            m(text);
            format!("ok mark {text}")
        }
        Some(_) => "error: mark: an empty text".to_string(),
        None => "error: mark: this server records no trace (neuron-vfio --mmio-trace FILE sim-serve …)".to_string(),
    }
}

fn control_conn(conn: UnixStream, sim: SimDevice, marks: Option<MarkSink>) {
    let Ok(mut out) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match line.trim().strip_prefix("mark ") {
            Some(text) => mark_command(marks.as_ref(), text),
            None => control_command(&sim, &line),
        };
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
