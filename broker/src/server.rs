//! The broker: owns the devices and, per device, what the kmod kept — the NC lease table,
//! device memory granted to each process, an IOVA window per process, device-level init and
//! reset — and cleans up after a process that goes away (docs/sharing.md).
//!
//! One thread accepts; one thread per client reads its requests and watches it (its socket
//! and a pidfd: a process that dies while a forked child still holds its socket is noticed
//! too). All tables sit behind one mutex; requests are short (no device wait under it except
//! a dead client's cleanup, which must finish before its cores are leased again).

use std::collections::HashMap;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csr_maps::Arch;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt};

use crate::protocol::{ClientInfo, DeviceInfo, DeviceSpec, ErrorCode, Grant, Handoff, Reply, Request, Role, Want};
use crate::wire::{self, WireError};

/// Processes per device (attached, with or without cores): the kmod's limit.
pub const MAX_CLIENTS: usize = csr_maps::consts::process::MAX_PER_DEVICE;

/// How the broker runs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The socket to listen on (ignored when a listener is handed over, e.g. by systemd).
    pub socket: PathBuf,
    /// Exit after this long with no client and no lease (`None`: never).
    pub idle_exit: Option<Duration>,
    /// HBM per stack of the simulated devices (`None`: the arch's).
    pub sim_hbm_bytes: Option<u64>,
    /// The `neuron-vfio` executable that hosts each simulated device in a process of its own
    /// (`sim-host`, socket beside the broker's), so that the device — and every client's data
    /// path to it — outlives the broker, as a real device does. `None`: the devices live in
    /// this process and die with it (tests, embedding).
    pub sim_host: Option<PathBuf>,
    /// Longest a client may take to send the rest of a frame it started.
    pub frame_timeout: Duration,
    /// How long a device this broker found live (its previous broker's clients still use it)
    /// waits for them to re-register ([`Request::Rejoin`]) before what nobody re-registered is
    /// taken back and new leases are served.
    pub adopt_grace: Duration,
}

impl BrokerConfig {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            idle_exit: Some(Duration::from_secs(2)),
            sim_hbm_bytes: None,
            sim_host: None,
            frame_timeout: Duration::from_secs(10),
            adopt_grace: Duration::from_secs(2),
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker socket {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
    #[error("another broker listens on {0}")]
    Running(PathBuf),
}

/// IOVA window `slot` of a device of `arch`: the upper half of the device's IOVA space (below
/// the PCIe route bits the host window ORs in) split in [`MAX_CLIENTS`] windows; the lower
/// half is the broker's own (its in-process mappings). No two clients' IOVAs overlap.
pub fn iova_window(arch: &Arch, slot: usize) -> std::ops::Range<u64> {
    let bits = arch.consts.host_route_mask.trailing_zeros().min(47);
    let half = 1u64 << (bits - 1);
    let w = half / MAX_CLIENTS as u64;
    let start = half + w * slot as u64;
    start..start + w
}

/// The data path of one leased client, served by the broker. A simulated device: one
/// vfio-user connection on a thread (it ends when the client's end closes or the broker shuts
/// its end down, and every mapping the client made is gone when the thread has returned). A
/// VFIO device: the connection only carried the device's descriptors; the client maps its
/// DMA itself into the device's IOMMU address space inside its window, which ending the
/// path unmaps (a dead client's mappings outlive it there: the address space is shared).
struct DataPath {
    /// The broker's end of the connection (none for a path re-registered after a restart).
    shut: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    /// A hosted simulated device: its host's socket and the connection's id there.
    host: Option<(PathBuf, u64)>,
    window: Option<(Arc<vfio::VfioPlatform>, std::ops::Range<u64>)>,
}

impl DataPath {
    /// Close the connection and wait until the client's mappings are gone.
    fn end(mut self) {
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

enum Backend {
    /// A simulated device in this process.
    Sim(sim::SimDevice),
    /// A simulated device in a host process of its own (`sim-host`, at `socket`): the broker's
    /// handle and every client reach it through a vfio-user connection of their own.
    Hosted { socket: PathBuf },
    /// A PCI function the broker opened through VFIO (iommufd, or no-IOMMU mode): clients get
    /// its descriptors and drive their NCs through their own BAR mappings.
    Vfio(Arc<vfio::VfioPlatform>),
}

struct Device {
    index: u32,
    name: String,
    spec: DeviceSpec,
    arch: &'static Arch,
    backend: Backend,
    /// The broker's own driver handle: device init, cleanup of dead clients, HBM grants.
    hal: hal::Device,
    /// Per NC: the client leasing it.
    leases: Vec<Option<u64>>,
    /// Per IOVA window: the client attached in it.
    slots: Vec<Option<u64>>,
    /// Device memory granted: handle → (client, memory).
    hbm: HashMap<u64, (u64, hal::DevBuf)>,
    /// Data paths by client.
    paths: HashMap<u64, DataPath>,
    /// A device found live (a previous broker's clients still use it) is adopted: until
    /// [`BrokerConfig::adopt_grace`] has passed and what nobody re-registered has been taken
    /// back ([`settle`]), only [`Request::Rejoin`] is served on it — no new attachment, no
    /// new lease — so that nothing a live client holds is handed out twice.
    adopting: bool,
}

impl Device {
    /// A device just opened: no lease, no client, no grant.
    fn new(
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
    fn ops(&self) -> DeviceOps {
        match &self.backend {
            Backend::Hosted { socket } => DeviceOps::Host(socket.clone()),
            _ => DeviceOps::Hal(self.hal.clone()),
        }
    }

    fn client_ncs(&self, client: u64) -> Option<(u32, u32)> {
        let first = self.leases.iter().position(|l| *l == Some(client))?;
        let count = self.leases.iter().filter(|l| **l == Some(client)).count();
        Some((first as u32, count as u32))
    }

    fn free_ncs(&self) -> usize {
        self.leases.iter().filter(|l| l.is_none()).count()
    }

    /// (IOMMU mappings, collectives completed by the device's hub).
    fn stats(&self) -> (u64, u64) {
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

struct Client {
    pid: u32,
    role: Role,
    command: String,
    runtime_version: String,
    /// Devices attached (broker device numbers).
    attached: Vec<u32>,
    /// The connection, to tell the client when the broker stops ([`Broker::run`]).
    sock: Option<UnixStream>,
}

#[derive(Default)]
struct State {
    devices: Vec<Device>,
    clients: HashMap<u64, Client>,
    next_client: u64,
    next_handle: u64,
    last_activity: Option<Instant>,
}

struct Shared {
    cfg: BrokerConfig,
    st: Mutex<State>,
    uid: u32,
    stop: AtomicBool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running broker (from [`Broker::bind`] until [`Broker::run`] returns).
pub struct Broker {
    shared: Arc<Shared>,
    listener: UnixListener,
    /// The socket file this broker created (removed when it stops).
    owned_path: Option<PathBuf>,
}

/// What stopping a broker from another thread takes ([`Broker::stopper`]).
#[derive(Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    /// Make [`Broker::run`] return (within its poll period).
    pub fn stop(&self) {
        self.0.stop.store(true, Ordering::Release);
    }
}

impl Broker {
    /// Listen on `cfg.socket`: the directory is made owner-only, a stale socket (nobody
    /// answers) is replaced, a live one is [`BrokerError::Running`].
    pub fn bind(cfg: BrokerConfig) -> Result<Self, BrokerError> {
        let path = cfg.socket.clone();
        let err = |source| BrokerError::Socket { path: path.clone(), source };
        crate::paths::prepare_dir(&path).map_err(err)?;
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if UnixStream::connect(&path).is_ok() {
                    return Err(BrokerError::Running(path));
                }
                std::fs::remove_file(&path).map_err(err)?;
                UnixListener::bind(&path).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        crate::paths::restrict_socket(&path).map_err(err)?;
        Ok(Self::with_listener(cfg, listener, Some(path)))
    }

    /// Serve on a listener handed over (systemd socket activation: `LISTEN_FDS`).
    pub fn from_listener(cfg: BrokerConfig, listener: UnixListener) -> Self {
        Self::with_listener(cfg, listener, None)
    }

    fn with_listener(cfg: BrokerConfig, listener: UnixListener, owned_path: Option<PathBuf>) -> Self {
        let shared = Arc::new(Shared {
            cfg,
            st: Mutex::new(State { last_activity: Some(Instant::now()), ..State::default() }),
            uid: crate::paths::uid(),
            stop: AtomicBool::new(false),
        });
        Self { shared, listener, owned_path }
    }

    /// A handle that stops [`Broker::run`].
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shared.clone())
    }

    /// Accept and serve clients until stopped or idle for [`BrokerConfig::idle_exit`].
    pub fn run(self) -> std::io::Result<()> {
        let result = self.accept_loop();
        // Clients still connected lose their sessions: each is told (so that it does not
        // re-register with a later broker what this one takes back now), then cleaned up as
        // at a death.
        let ids: Vec<u64> = {
            let st = lock(&self.shared.st);
            let farewell = error(ErrorCode::Stopped, 0, "the broker stopped: every lease is revoked").encode();
            for c in st.clients.values() {
                if let Some(s) = &c.sock {
                    let _ = wire::send(s, &farewell, &[]);
                }
            }
            st.clients.keys().copied().collect()
        };
        for id in ids {
            cleanup(&self.shared, id);
        }
        if let Some(p) = &self.owned_path {
            let _ = std::fs::remove_file(p);
        }
        result
    }

    fn accept_loop(&self) -> std::io::Result<()> {
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(idle) = self.shared.cfg.idle_exit {
                let st = lock(&self.shared.st);
                let busy = !st.clients.is_empty() || st.devices.iter().any(|d| d.leases.iter().any(Option::is_some));
                if !busy && st.last_activity.is_some_and(|t| t.elapsed() >= idle) {
                    tracing::info!("no client and no lease for {idle:?}: the broker exits");
                    return Ok(());
                }
            }
            let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(100u16)) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let sock = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {
                    continue
                }
                Err(e) => {
                    tracing::warn!(%e, "accept failed");
                    continue;
                }
            };
            // A client mid-handshake keeps the broker from exiting idle.
            lock(&self.shared.st).last_activity = Some(Instant::now());
            let shared = self.shared.clone();
            std::thread::Builder::new().name("broker-client".into()).spawn(move || serve_client(shared, sock))?;
        }
    }
}

/// `pidfd_open(pid)`: a descriptor readable once `pid` has exited.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory
    // is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn error(code: ErrorCode, owner_pid: u32, message: impl Into<String>) -> Reply {
    Reply::Error { code, owner_pid, message: message.into() }
}

fn serve_client(shared: Arc<Shared>, sock: UnixStream) {
    let cred = match getsockopt(&sock, sockopt::PeerCredentials) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%e, "SO_PEERCRED failed: connection refused");
            return;
        }
    };
    let (pid, uid) = (cred.pid() as u32, cred.uid());
    if uid != shared.uid && uid != 0 {
        let r = error(ErrorCode::Sequence, 0, format!("uid {uid} may not use the broker of uid {}", shared.uid));
        let _ = wire::send(&sock, &r.encode(), &[]);
        tracing::warn!(pid, uid, "refused a client of another user");
        return;
    }
    let _ = sock.set_read_timeout(Some(shared.cfg.frame_timeout));
    let pidfd = pidfd_open(pid);
    let mut id: Option<u64> = None;
    loop {
        let mut fds = vec![PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(_) => break,
        }
        let dead = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        let readable = fds[0].revents().is_some_and(|r| !r.is_empty());
        if dead {
            tracing::info!(pid, "client process exited");
            break;
        }
        if !readable {
            continue;
        }
        let (body, fds) = match wire::recv(&sock) {
            Ok(m) => m,
            Err(WireError::Closed) => break,
            Err(WireError::Proto(e)) => {
                let _ = wire::send(&sock, &error(ErrorCode::BadMessage, 0, e.to_string()).encode(), &[]);
                break;
            }
            Err(WireError::Io(e)) => {
                tracing::info!(pid, %e, "client connection failed");
                break;
            }
        };
        let req = match Request::decode(&body) {
            Ok(r) => r,
            Err(e) => {
                let code = if matches!(e, crate::protocol::ProtoError::Version(_)) {
                    ErrorCode::Version
                } else {
                    ErrorCode::BadMessage
                };
                let _ = wire::send(&sock, &error(code, 0, e.to_string()).encode(), &[]);
                break;
            }
        };
        let (reply, fds) = handle(&shared, &mut id, pid, &sock, req, fds);
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        if wire::send(&sock, &reply.encode(), &borrowed).is_err() {
            break;
        }
    }
    if let Some(id) = id {
        let t0 = Instant::now();
        cleanup(&shared, id);
        tracing::info!(pid, us = t0.elapsed().as_micros() as u64, "client cleaned up");
    }
}

/// Apply one request of client `id` (None before Hello).
fn handle(
    shared: &Arc<Shared>,
    id: &mut Option<u64>,
    pid: u32,
    sock: &UnixStream,
    req: Request,
    fds: Vec<OwnedFd>,
) -> (Reply, Vec<OwnedFd>) {
    let mut st = lock(&shared.st);
    st.last_activity = Some(Instant::now());
    let Some(me) = *id else {
        return match req {
            Request::Hello { role, command, runtime_version } => {
                st.next_client += 1;
                let c = st.next_client;
                let sock = sock.try_clone().ok();
                st.clients.insert(c, Client { pid, role, command, runtime_version, attached: Vec::new(), sock });
                *id = Some(c);
                (Reply::Hello { broker_pid: std::process::id() }, Vec::new())
            }
            _ => (error(ErrorCode::Sequence, 0, "the first request must be Hello"), Vec::new()),
        };
    };
    match req {
        Request::Hello { .. } => (error(ErrorCode::Sequence, 0, "Hello was already sent"), Vec::new()),
        Request::Query => (Reply::Query(query(&st)), Vec::new()),
        Request::Attach { spec } => (attach(shared, &mut st, me, spec), Vec::new()),
        Request::Lease { device, want, lnc } => lease(&mut st, me, device, want, lnc),
        Request::Rejoin { spec, iova_start, first, count, path, grants, handoff } => {
            let held = Held { iova_start, first, count, path, grants };
            (rejoin(shared, &mut st, me, spec, held, handoff, fds), Vec::new())
        }
        Request::Release { device } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            if st.devices[d].client_ncs(me).is_none() {
                return (error(ErrorCode::Invalid, 0, format!("no lease on device {device}")), Vec::new());
            }
            drop(st);
            release(shared, me, d);
            (Reply::Ok, Vec::new())
        }
        Request::AllocHbm { device, chan, len } => (alloc_hbm(&mut st, me, device, chan, len), Vec::new()),
        Request::FreeHbm { device, handle } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            match st.devices[d].hbm.get(&handle) {
                Some((owner, _)) if *owner == me => {
                    st.devices[d].hbm.remove(&handle);
                    (Reply::Ok, Vec::new())
                }
                _ => (error(ErrorCode::NoSuchHandle, 0, format!("no device memory {handle} of yours")), Vec::new()),
            }
        }
        Request::Detach { device } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            drop(st);
            detach(shared, me, d);
            (Reply::Ok, Vec::new())
        }
        Request::ResetNcs { device, mask } => {
            let ops = match mailbox_user(&st, me, device, Some(mask)) {
                Ok(h) => h,
                Err(r) => return (r, Vec::new()),
            };
            drop(st);
            (ops.reset_ncs(mask), Vec::new())
        }
        Request::Fwio { device, cmd, payload } => {
            let ops = match mailbox_user(&st, me, device, None) {
                Ok(h) => h,
                Err(r) => return (r, Vec::new()),
            };
            drop(st);
            (ops.fwio(cmd, &payload), Vec::new())
        }
    }
}

/// The broker's handle on device `device` for client `me`'s use of the firmware mailbox: the
/// client must hold a lease there and, for a reset (`mask`), every NC of the mask. The
/// mailbox is used after the tables' lock is released; the handle serializes it with the
/// broker's own uses (reclaims) and every other client's.
fn mailbox_user(st: &State, me: u64, device: u32, mask: Option<u32>) -> Result<DeviceOps, Reply> {
    let d = attached(st, me, device).ok_or_else(|| not_attached(device))?;
    let dev = &st.devices[d];
    let (first, count) =
        dev.client_ncs(me).ok_or_else(|| error(ErrorCode::Invalid, 0, "the firmware mailbox goes with a lease"))?;
    if mask == Some(0) {
        return Err(error(ErrorCode::Invalid, 0, "a reset of no NC"));
    }
    if let Some(mask) = mask {
        let mine = (first..first + count).fold(0u64, |m, nc| m | 1u64 << nc);
        if u64::from(mask) & !mine != 0 {
            let other = (0..32u32).find(|n| mask & (1 << n) != 0 && mine & (1u64 << n) == 0).unwrap_or(0);
            let owner = dev.leases.get(other as usize).copied().flatten();
            let owner_pid = owner.and_then(|o| st.clients.get(&o)).map_or(0, |c| c.pid);
            return Err(error(
                ErrorCode::CoresUnavailable,
                owner_pid,
                format!("reset of NC mask {mask:#x}: this process leases {}", nc_range(first, count)),
            ));
        }
    }
    Ok(dev.ops())
}

/// What acts on a device as a whole — reclaiming an NC, the firmware mailbox: the broker's own
/// driver handle, or for a hosted simulated device its host (which does it in its process: a
/// reclaim is about a thousand register accesses, each a message over a connection). Used
/// after the tables' lock is released; either serializes the mailbox with every other use.
enum DeviceOps {
    Hal(hal::Device),
    Host(PathBuf),
}

impl DeviceOps {
    fn reclaim(&self, nc: usize) -> Result<(), String> {
        match self {
            DeviceOps::Hal(h) => h.reclaim_nc(nc).map_err(|e| e.to_string()),
            DeviceOps::Host(s) => sim_serve::host::reclaim(s, nc as u32).map_err(|e| e.to_string()),
        }
    }

    fn reset_ncs(&self, mask: u32) -> Reply {
        match self {
            DeviceOps::Hal(h) => h.firmware_reset_ncs(mask).map_or_else(|e| firmware_error(&e), |()| Reply::Ok),
            DeviceOps::Host(s) => sim_serve::host::reset_ncs(s, mask).map_or_else(|e| host_error(&e), |()| Reply::Ok),
        }
    }

    fn fwio(&self, cmd: u8, payload: &[u8]) -> Reply {
        match self {
            DeviceOps::Hal(h) => h.fwio(cmd, payload).map_or_else(|e| firmware_error(&e), |data| Reply::Fwio { data }),
            DeviceOps::Host(s) => {
                sim_serve::host::fwio(s, cmd, payload).map_or_else(|e| host_error(&e), |data| Reply::Fwio { data })
            }
        }
    }
}

/// A device host's failure as a reply, keeping a firmware failure's kind.
fn host_error(e: &sim_serve::host::HostError) -> Reply {
    use sim_serve::host::{wire::Failure, HostError};
    let code = match e {
        HostError::Failed { kind: Failure::FirmwareTimeout, .. } => ErrorCode::FirmwareTimeout,
        HostError::Failed { kind: Failure::Firmware, .. } => ErrorCode::Firmware,
        HostError::Failed { kind: Failure::Invalid, .. } => ErrorCode::Invalid,
        _ => ErrorCode::Device,
    };
    error(code, 0, e.to_string())
}

/// A firmware failure as a reply: a timeout and the firmware's own error keep their kind.
fn firmware_error(e: &hal::HalError) -> Reply {
    let code = match e {
        hal::HalError::FwioTimeout { .. } | hal::HalError::ResetTimeout { .. } => ErrorCode::FirmwareTimeout,
        hal::HalError::Fwio { .. } => ErrorCode::Firmware,
        hal::HalError::FwioPayload(_) => ErrorCode::Invalid,
        _ => ErrorCode::Device,
    };
    error(code, 0, e.to_string())
}

fn not_attached(device: u32) -> Reply {
    error(ErrorCode::NotAttached, 0, format!("device {device} is not attached by this process"))
}

/// Index of broker device `device` if client `me` attached it.
fn attached(st: &State, me: u64, device: u32) -> Option<usize> {
    let c = st.clients.get(&me)?;
    c.attached.contains(&device).then_some(device as usize).filter(|&d| d < st.devices.len())
}

fn query(st: &State) -> Vec<DeviceInfo> {
    st.devices
        .iter()
        .map(|d| {
            let mut ids: Vec<u64> = d.slots.iter().flatten().copied().collect();
            ids.sort_unstable();
            let clients = ids
                .iter()
                .filter_map(|id| {
                    let c = st.clients.get(id)?;
                    let (first, count) = d.client_ncs(*id).unwrap_or((0, 0));
                    let hbm_bytes = d.hbm.values().filter(|(o, _)| o == id).map(|(_, b)| b.len()).sum();
                    Some(ClientInfo {
                        pid: c.pid,
                        command: c.command.clone(),
                        runtime_version: c.runtime_version.clone(),
                        first,
                        count,
                        hbm_bytes,
                    })
                })
                .collect();
            let (iommu_mappings, collectives) = d.stats();
            DeviceInfo {
                device: d.index,
                name: d.name.clone(),
                arch: d.arch.name.to_string(),
                ncs: d.leases.len() as u32,
                hbm_granted: d.hbm.values().map(|(_, b)| b.len()).sum(),
                iova_windows: d.slots.iter().filter(|s| s.is_some()).count() as u32,
                iommu_mappings,
                collectives,
                adopting: d.adopting,
                clients,
            }
        })
        .collect()
}

/// Open (or find) the device `spec` names.
fn device_for(shared: &Arc<Shared>, st: &mut State, spec: &DeviceSpec) -> Result<usize, Reply> {
    if let Some(i) = st.devices.iter().position(|d| &d.spec == spec) {
        return Ok(i);
    }
    match spec {
        DeviceSpec::Sim { arch, index } => {
            let arch = Arch::by_name(arch).map_err(|e| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if *index as usize >= MAX_CLIENTS {
                return Err(error(
                    ErrorCode::NoSuchDevice,
                    0,
                    format!("sim:shared:{} has 16 devices at most", arch.name),
                ));
            }
            if let Some(exe) = &shared.cfg.sim_host {
                return open_hosted(shared, st, spec, arch, *index, Some(exe));
            }
            let mut cfg = sim::SimConfig::new(arch);
            if let Some(b) = shared.cfg.sim_hbm_bytes {
                cfg = cfg.hbm_bytes(b);
            }
            let s = sim::SimDevice::new(cfg).map_err(|e| error(ErrorCode::Device, 0, e.to_string()))?;
            let dev = bring_up(Arc::new(s.clone()), sim_options(&shared.cfg))
                .map_err(|e| error(ErrorCode::Device, 0, e.to_string()))?;
            let index = st.devices.len() as u32;
            let name = format!("sim:shared:{}#{index}", arch.name);
            st.devices.push(Device::new(index, name, spec.clone(), arch, Backend::Sim(s), dev));
            tracing::info!(device = index, arch = arch.name, "simulated device created");
            Ok(index as usize)
        }
        DeviceSpec::Pci(bdf) => {
            let addr: vfio::PciAddress =
                bdf.parse().map_err(|e: vfio::Error| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if let Some(i) = st.devices.iter().position(|d| {
                matches!(&d.spec, DeviceSpec::Pci(b)
                if b.parse::<vfio::PciAddress>().ok() == Some(addr))
            }) {
                return Ok(i);
            }
            let index = st.devices.len() as u32;
            let (p, dev, arch) = open_vfio(addr).map_err(|e| {
                // One opener per device cdev: processes still holding it (a previous
                // broker's clients) keep it until they exit (docs/sharing.md).
                // Held: they re-register it with this broker shortly (Rejoin: it is adopted
                // then), or keep it until they exit (their broker stopped and revoked their
                // leases). Adopting: a client retries for a while.
                let held = matches!(&e, OpenVfioError::Vfio(vfio::Error::Ioctl { op: "VFIO_DEVICE_BIND_IOMMUFD", .. }));
                if held {
                    let hint = "; it is still held by processes a previous broker served: they re-register it with this broker, or keep it until they exit";
                    return error(ErrorCode::Adopting, 0, format!("{addr}: {e}{hint}"));
                }
                error(ErrorCode::Device, 0, format!("{addr}: {e}"))
            })?;
            st.devices.push(Device::new(index, addr.to_string(), spec.clone(), arch, Backend::Vfio(p), dev));
            tracing::info!(device = index, %addr, arch = arch.name, "VFIO device opened");
            Ok(index as usize)
        }
    }
}

/// The broker's driver options for a simulated device.
fn sim_options(cfg: &BrokerConfig) -> hal::DeviceOptions {
    hal::DeviceOptions { poll: hal::PollTiming::fast(), hbm_limit: cfg.sim_hbm_bytes, ..Default::default() }
}

/// The socket of the host of simulated device `index` of `arch`: beside the broker's.
pub fn host_socket(broker_socket: &Path, arch: &Arch, index: u32) -> PathBuf {
    let dir = broker_socket.parent().unwrap_or_else(|| Path::new("."));
    dir.join(format!("sim-{}-{index}.sock", arch.name))
}

/// Open simulated device `index` of `arch` in its host process. A host that answers is a
/// device a previous broker served, still used by its clients: it is adopted (not brought up
/// again; leases wait for its clients to re-register). Else, with `spawn` (the `neuron-vfio`
/// executable), a new host is started and the device brought up; without, there is no such
/// device.
fn open_hosted(
    shared: &Arc<Shared>,
    st: &mut State,
    spec: &DeviceSpec,
    arch: &'static Arch,
    index: u32,
    spawn: Option<&PathBuf>,
) -> Result<usize, Reply> {
    let socket = host_socket(&shared.cfg.socket, arch, index);
    let mut live = sim_serve::host::stats(&socket).is_ok();
    let name = format!("sim:shared:{}:{index}", arch.name);
    let failed = |what: &str, e: &dyn std::fmt::Display| error(ErrorCode::Device, 0, format!("{name}: {what}: {e}"));
    let start_host = |exe: &PathBuf| {
        let mut cfg = sim_serve::host::HostConfig::new(arch, &socket);
        cfg.hbm_bytes = shared.cfg.sim_hbm_bytes;
        sim_serve::host::spawn(exe, &cfg).map_err(|e| failed("starting its host", &e))
    };
    if !live {
        let Some(exe) = spawn else {
            return Err(error(ErrorCode::NoSuchDevice, 0, format!("{name} ended with the broker that served it")));
        };
        start_host(exe)?;
    }
    // The broker's handle maps nothing (the host brought the device up and does its reclaims):
    // a small window at the top of the broker's half, clear of the host's own mappings at the
    // bottom of the IOVA space.
    let bw = broker_window(arch);
    let w = bw.end.saturating_sub(1 << 20).max(bw.start)..bw.end;
    let opts = sim_serve::shared::ConnOptions { iova_window: w.clone(), ncs: 0..arch.counts.ncs as usize };
    // A host found live may have lingered out since (start another, when allowed), and one
    // whose previous broker just died may still be cleaning up that broker's connection (its
    // window is refused until then): both pass; bounded.
    let start = Instant::now();
    let stream = loop {
        match sim_serve::host::connect(&socket, &opts) {
            Ok((_, s)) => break s,
            Err(e) if start.elapsed() < Duration::from_secs(3) => {
                tracing::debug!(%e, "connecting to a device host: retrying");
                if let (sim_serve::host::HostError::Connect { .. }, Some(exe)) = (&e, spawn) {
                    start_host(exe)?;
                    // A new host: a fresh device, brought up below.
                    live = false;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Err(e) => return Err(failed("connecting to its host", &e)),
        }
    };
    let uopts = vfio::user::UserOptions {
        iova_window: w,
        irq_vectors: Vec::new(),
        modeled_writes: true,
        location: name.clone(),
        posted_writes: true,
    };
    let p: Arc<dyn platform::Platform> = Arc::new(
        vfio::user::VfioUserPlatform::from_stream(stream, uopts).map_err(|e| failed("its vfio-user connection", &e))?,
    );
    // Opened only: its allocator grants the device's memory; the host brought it up.
    let hal = hal::Device::open(p, sim_options(&shared.cfg)).map_err(|e| failed("opening it", &e))?;
    let d = st.devices.len() as u32;
    let name = format!("sim:shared:{}#{d}", arch.name);
    st.devices.push(Device::new(d, name, spec.clone(), arch, Backend::Hosted { socket }, hal));
    tracing::info!(device = d, arch = arch.name, live, "simulated device opened in its host");
    if live {
        start_adoption(shared, st, d as usize)?;
    }
    Ok(d as usize)
}

/// Why the broker could not open a VFIO device.
#[derive(Debug, thiserror::Error)]
enum OpenVfioError {
    #[error("{0}")]
    Vfio(#[from] vfio::Error),
    #[error("{0}")]
    Hal(#[from] hal::HalError),
    #[error("PCI id {vendor:04x}:{device:04x} is not a Neuron device this broker knows")]
    NotNeuron { vendor: u16, device: u16 },
}

/// Open PCI function `addr` for sharing: through iommufd (the interface whose address space
/// can be handed to other processes; the legacy container cannot), or in no-IOMMU mode when
/// the operator chose it (`NEURON_VFIO_BACKEND=noiommu`) and no IOMMU translates the device.
/// The broker's own DMA stays below the clients' windows ([`broker_window`]). Then the
/// device is brought up once and the dummy ring for reclaims allocated.
fn open_vfio(addr: vfio::PciAddress) -> Result<(Arc<vfio::VfioPlatform>, hal::Device, &'static Arch), OpenVfioError> {
    let sysfs = vfio::Sysfs::new(std::env::var_os("NEURON_VFIO_SYSFS").unwrap_or_else(|| "/sys".into()));
    let f = sysfs.function(addr)?;
    let arch =
        Arch::by_pci_id(f.vendor, f.device).ok_or(OpenVfioError::NotNeuron { vendor: f.vendor, device: f.device })?;
    let w = broker_window(arch);
    let opts = vfio::OpenOptions {
        backend: vfio::Backend::Iommufd,
        sysfs,
        dev: std::env::var_os("NEURON_VFIO_DEVDIR").unwrap_or_else(|| "/dev".into()).into(),
        iova_window: vfio::IovaRange::with_len(w.start, w.end - w.start),
        allow_noiommu: std::env::var("NEURON_VFIO_BACKEND").is_ok_and(|b| b.trim() == "noiommu"),
    };
    let p = Arc::new(vfio::VfioPlatform::open(addr, &opts)?);
    let dev = bring_up(p.clone(), hal::DeviceOptions::default())?;
    Ok((p, dev, arch))
}

/// The broker's driver handle on a device it owns: opened, brought up once (every engine and
/// queue), and the dummy ring for reclaims allocated.
fn bring_up(p: Arc<dyn platform::Platform>, opts: hal::DeviceOptions) -> hal::Result<hal::Device> {
    let dev = hal::Device::open(p, opts)?;
    dev.init()?;
    dev.prepare_reclaim()?;
    Ok(dev)
}

/// The broker's own IOVAs on a device of `arch`: the lower half of its IOVA space (the
/// clients' windows are the upper half, [`iova_window`]).
pub fn broker_window(arch: &Arch) -> std::ops::Range<u64> {
    let w = iova_window(arch, 0);
    0..w.start
}

fn attach(shared: &Arc<Shared>, st: &mut State, me: u64, spec: DeviceSpec) -> Reply {
    let d = match device_for(shared, st, &spec) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let dev = &mut st.devices[d];
    let index = dev.index;
    if dev.adopting {
        return adopting(dev);
    }
    if let Some(slot) = dev.slots.iter().position(|s| *s == Some(me)) {
        let w = iova_window(dev.arch, slot);
        return Reply::Attached {
            device: index,
            arch: dev.arch.name.into(),
            ncs: dev.leases.len() as u32,
            iova_start: w.start,
            iova_len: w.end - w.start,
        };
    }
    let Some(slot) = dev.slots.iter().position(Option::is_none) else {
        return error(
            ErrorCode::TooManyClients,
            0,
            format!(
                "{} already has {MAX_CLIENTS} processes (NEURON_MAX_PROCESS_PER_DEVICE); close one first",
                dev.name
            ),
        );
    };
    dev.slots[slot] = Some(me);
    let w = iova_window(dev.arch, slot);
    let reply = Reply::Attached {
        device: index,
        arch: dev.arch.name.into(),
        ncs: dev.leases.len() as u32,
        iova_start: w.start,
        iova_len: w.end - w.start,
    };
    if let Some(c) = st.clients.get_mut(&me) {
        c.attached.push(index);
    }
    reply
}

/// The refusal of a request other than [`Request::Rejoin`] on a device being adopted.
fn adopting(dev: &Device) -> Reply {
    error(ErrorCode::Adopting, 0, format!("{} waits for the previous broker's clients to re-register; retry", dev.name))
}

/// The lease-holder id under which [`settle`] holds the cores it takes back (client ids
/// start at 1).
const SETTLING: u64 = 0;

/// What a client of a previous broker holds on a device ([`Request::Rejoin`]).
struct Held {
    iova_start: u64,
    first: u32,
    count: u32,
    path: u64,
    grants: Vec<Grant>,
}

/// Client `me` re-registers what it held on device `spec` under a previous broker. The
/// device must be one this broker adopted (found live, [`Device::adopting`]); the window,
/// the cores and the memory must all be free here; then all of it becomes the client's as
/// if this broker had granted it, or nothing does.
fn rejoin(
    shared: &Arc<Shared>,
    st: &mut State,
    me: u64,
    spec: DeviceSpec,
    held: Held,
    handoff: Handoff,
    fds: Vec<OwnedFd>,
) -> Reply {
    if st.clients.get(&me).is_none_or(|c| c.role == Role::Tool) {
        return error(ErrorCode::Invalid, 0, "a tool client holds nothing to re-register");
    }
    let d = match find_device(st, &spec) {
        Some(d) => d,
        None => match adopt_device(shared, st, &spec, handoff, fds) {
            Ok(d) => d,
            Err(r) => return r,
        },
    };
    let pids: HashMap<u64, u32> = st.clients.iter().map(|(k, c)| (*k, c.pid)).collect();
    let handles = st.next_handle;
    let dev = &mut st.devices[d];
    if !dev.adopting {
        return error(
            ErrorCode::Invalid,
            0,
            format!("{} was opened by this broker: nothing of a previous broker's is left to re-register", dev.name),
        );
    }
    let Some(slot) = (0..MAX_CLIENTS).find(|&k| iova_window(dev.arch, k).start == held.iova_start) else {
        return error(
            ErrorCode::Invalid,
            0,
            format!("no IOVA window of {} starts at {:#x}", dev.name, held.iova_start),
        );
    };
    if dev.slots.contains(&Some(me)) {
        return error(ErrorCode::AlreadyLeased, 0, format!("already attached to {}", dev.name));
    }
    if let Some(o) = dev.slots[slot] {
        let owner = pids.get(&o).copied().unwrap_or(0);
        return error(
            ErrorCode::CoresUnavailable,
            owner,
            format!("IOVA window {slot} of {} is another process's", dev.name),
        );
    }
    let n = dev.leases.len() as u32;
    let (first, count) = (held.first, held.count);
    if count == 0 || first.checked_add(count).is_none_or(|e| e > n) {
        return error(
            ErrorCode::Invalid,
            0,
            format!("{} is not a range of {}'s {n} cores", nc_range(first, count), dev.name),
        );
    }
    let ncs = first as usize..(first + count) as usize;
    if let Some(o) = dev.leases[ncs.clone()].iter().flatten().next() {
        let owner = pids.get(o).copied().unwrap_or(0);
        let available = dev.free_ncs();
        return error(
            ErrorCode::CoresUnavailable,
            owner,
            format!("NeuronCore(s) not available - Requested:{} Available:{available}", nc_range(first, count)),
        );
    }
    // Every grant or none: a refusal drops those taken so far (freed).
    let mut bufs = Vec::with_capacity(held.grants.len());
    for g in &held.grants {
        match dev.hal.allocator().reserve(g.chan as usize, g.addr, g.len) {
            Ok(b) => bufs.push(b),
            Err(e) => {
                return error(
                    ErrorCode::Invalid,
                    0,
                    format!("device memory {:#x} + {:#x} on HBM channel {}: {e}", g.addr, g.len, g.chan),
                )
            }
        }
    }
    let window = iova_window(dev.arch, slot);
    let path = match &dev.backend {
        Backend::Vfio(p) => DataPath { shut: None, thread: None, window: Some((p.clone(), window)), host: None },
        Backend::Hosted { socket } => {
            // The connection it names must be one to this device bounded to exactly its
            // window and cores: a client re-registers its own data path, not another's.
            match sim_serve::host::describe(socket, held.path) {
                Ok((w, n)) if w == window && n == ncs => {}
                Ok((w, n)) => {
                    return error(
                        ErrorCode::Invalid,
                        0,
                        format!(
                            "data path {} is bounded to {w:#x?} and NCs {n:?}, not this window and cores",
                            held.path
                        ),
                    )
                }
                Err(e) => return error(ErrorCode::Invalid, 0, format!("data path {}: {e}", held.path)),
            }
            DataPath { shut: None, thread: None, window: None, host: Some((socket.clone(), held.path)) }
        }
        // A simulated device in this process was not found live: it is never adopted.
        Backend::Sim(_) => return error(ErrorCode::Device, 0, format!("{} has no data path to re-register", dev.name)),
    };
    dev.slots[slot] = Some(me);
    for l in &mut dev.leases[ncs] {
        *l = Some(me);
    }
    let granted = bufs.len() as u64;
    for (k, b) in bufs.into_iter().enumerate() {
        dev.hbm.insert(handles + 1 + k as u64, (me, b));
    }
    dev.paths.insert(me, path);
    let index = dev.index;
    st.next_handle += granted;
    if let Some(c) = st.clients.get_mut(&me) {
        c.attached.push(index);
    }
    tracing::info!(device = index, client = me, first, count, "a previous broker's client re-registered");
    Reply::Leased { device: index, first, count, fds: 0, path: held.path }
}

/// The device `spec` names, if this broker has it open.
fn find_device(st: &State, spec: &DeviceSpec) -> Option<usize> {
    st.devices.iter().position(|d| match (&d.spec, spec) {
        (DeviceSpec::Pci(a), DeviceSpec::Pci(b)) => {
            a.parse::<vfio::PciAddress>().ok().is_some_and(|a| b.parse::<vfio::PciAddress>().ok() == Some(a))
        }
        (a, b) => a == b,
    })
}

/// Adopt device `spec` from a client of a previous broker that still uses it: a VFIO device
/// through the descriptors the client handed over (the kernel lets one process open it; the
/// clients hold it). The device is not brought up again — its other clients are running on
/// it — and the previous broker's own IOVAs (the lower half) are unmapped before this broker
/// maps its own there. New leases wait until [`settle`] ran, after [`BrokerConfig::adopt_grace`].
fn adopt_device(
    shared: &Arc<Shared>,
    st: &mut State,
    spec: &DeviceSpec,
    handoff: Handoff,
    fds: Vec<OwnedFd>,
) -> Result<usize, Reply> {
    let (backend, hal, arch, name) = match spec {
        DeviceSpec::Pci(bdf) => {
            let addr: vfio::PciAddress =
                bdf.parse().map_err(|e: vfio::Error| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            let mut it = fds.into_iter();
            let (device, iommu) = match (handoff, it.next(), it.next(), it.next(), it.next()) {
                (Handoff::Iommufd { ioas }, Some(device), Some(iommufd), None, None) => {
                    (device, vfio::shared::IommuFds::Iommufd { iommufd, ioas })
                }
                (Handoff::NoIommu, Some(device), Some(container), Some(group), None) => {
                    (device, vfio::shared::IommuFds::NoIommu { container, group })
                }
                _ => {
                    return Err(error(
                        ErrorCode::Invalid,
                        0,
                        format!("{addr}: a VFIO device is re-registered with its descriptors ({handoff:?})"),
                    ))
                }
            };
            let fds = vfio::shared::DeviceFds { address: addr, device, iommu };
            let (p, hal, arch) =
                adopt_vfio(fds).map_err(|e| error(ErrorCode::Device, 0, format!("adopting {addr}: {e}")))?;
            (Backend::Vfio(p), hal, arch, addr.to_string())
        }
        DeviceSpec::Sim { arch, index } => {
            let name = format!("sim:shared:{arch}:{index}");
            let arch = Arch::by_name(arch).map_err(|e| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if shared.cfg.sim_host.is_none() || *index as usize >= MAX_CLIENTS {
                return Err(error(
                    ErrorCode::NoSuchDevice,
                    0,
                    format!("{name} ended with the broker that simulated it"),
                ));
            }
            return open_hosted(shared, st, spec, arch, *index, None);
        }
    };
    let index = st.devices.len() as u32;
    st.devices.push(Device::new(index, name, spec.clone(), arch, backend, hal));
    start_adoption(shared, st, index as usize)?;
    Ok(index as usize)
}

/// Device `d` (just opened, found live) is adopted: only re-registrations are served on it
/// until [`BrokerConfig::adopt_grace`] has passed and [`settle`] ran.
fn start_adoption(shared: &Arc<Shared>, st: &mut State, d: usize) -> Result<(), Reply> {
    st.devices[d].adopting = true;
    tracing::info!(
        device = d,
        grace_ms = shared.cfg.adopt_grace.as_millis() as u64,
        "device adopted from a previous broker's clients"
    );
    let shared = shared.clone();
    let spawned = std::thread::Builder::new().name("broker-settle".into()).spawn(move || {
        let until = Instant::now() + shared.cfg.adopt_grace;
        while Instant::now() < until && !shared.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())));
        }
        settle(&shared, d);
    });
    if let Err(e) = spawned {
        // Without its timer the device would refuse leases for ever: not adopted.
        st.devices.pop();
        return Err(error(ErrorCode::Device, 0, format!("adopting a device: {e}")));
    }
    Ok(())
}

/// A VFIO device a previous broker opened, from its descriptors: this broker's handle on it,
/// its own IOVAs in the lower half (the previous broker's mappings there unmapped first).
fn adopt_vfio(
    fds: vfio::shared::DeviceFds,
) -> Result<(Arc<vfio::VfioPlatform>, hal::Device, &'static Arch), OpenVfioError> {
    let sysfs = vfio::Sysfs::new(std::env::var_os("NEURON_VFIO_SYSFS").unwrap_or_else(|| "/sys".into()));
    let f = sysfs.function(fds.address)?;
    let arch =
        Arch::by_pci_id(f.vendor, f.device).ok_or(OpenVfioError::NotNeuron { vendor: f.vendor, device: f.device })?;
    let w = broker_window(arch);
    let window = vfio::IovaRange::with_len(w.start, w.end - w.start)
        .ok_or(OpenVfioError::Vfio(vfio::Error::BadHandoff("an empty broker window".into())))?;
    let p = Arc::new(vfio::VfioPlatform::from_fds(fds, window)?);
    // The previous broker's dummy ring and bounce buffers: its pages stay pinned until unmapped.
    if let Err(e) = p.device().dma().unmap_raw(w.start, w.end - w.start) {
        tracing::debug!(%e, "unmapping the previous broker's IOVAs");
    }
    let hal = hal::Device::open(p.clone(), hal::DeviceOptions::default())?;
    hal.prepare_reclaim()?;
    Ok((p, hal, arch))
}

/// The end of an adoption: the cores nobody re-registered are taken back as a dead client's
/// are (their process went while no broker ran), the IOVA windows nobody re-registered are
/// unmapped, and the device serves new attachments and leases again.
fn settle(shared: &Shared, d: usize) {
    let (ncs, windows, ops) = {
        let mut st = lock(&shared.st);
        let dev = &mut st.devices[d];
        let ncs: Vec<usize> = (0..dev.leases.len()).filter(|&i| dev.leases[i].is_none()).collect();
        for &nc in &ncs {
            dev.leases[nc] = Some(SETTLING);
        }
        let windows: Vec<_> = match &dev.backend {
            Backend::Vfio(p) => (0..MAX_CLIENTS)
                .filter(|&k| dev.slots[k].is_none())
                .map(|k| (p.clone(), iova_window(dev.arch, k)))
                .collect(),
            // A dead client's connection to a device host was cleaned up by the host.
            Backend::Sim(_) | Backend::Hosted { .. } => Vec::new(),
        };
        (ncs, windows, dev.ops())
    };
    for &nc in &ncs {
        if let Err(e) = ops.reclaim(nc) {
            tracing::warn!(nc, %e, "taking back a core nobody re-registered failed");
        }
    }
    for (p, w) in windows {
        if let Err(e) = p.device().dma().unmap_raw(w.start, w.end - w.start) {
            tracing::debug!(%e, start = w.start, "unmapping a window nobody re-registered");
        }
    }
    let mut st = lock(&shared.st);
    let dev = &mut st.devices[d];
    for l in dev.leases.iter_mut().filter(|l| **l == Some(SETTLING)) {
        *l = None;
    }
    dev.adopting = false;
    tracing::info!(device = d, taken_back = ncs.len(), "adoption settled: new leases are served");
    st.last_activity = Some(Instant::now());
}

/// libnrt's core-range notation: `nc1-nc1`.
fn nc_range(first: u32, count: u32) -> String {
    format!("nc{first}-nc{}", first + count.saturating_sub(1))
}

fn lease(st: &mut State, me: u64, device: u32, want: Want, lnc: u8) -> (Reply, Vec<OwnedFd>) {
    let Some(d) = attached(st, me, device) else { return (not_attached(device), Vec::new()) };
    if st.clients.get(&me).is_some_and(|c| c.role == Role::Tool) {
        return (error(ErrorCode::Invalid, 0, "a tool client leases no cores"), Vec::new());
    }
    let pids: HashMap<u64, u32> = st.clients.iter().map(|(k, c)| (*k, c.pid)).collect();
    let dev = &mut st.devices[d];
    if dev.client_ncs(me).is_some() {
        return (error(ErrorCode::AlreadyLeased, 0, format!("already holding cores on {}", dev.name)), Vec::new());
    }
    if dev.adopting {
        return (adopting(dev), Vec::new());
    }
    let phys = dev.leases.len() as u32;
    let k = u32::from(lnc);
    if k == 0 || !phys.is_multiple_of(k) {
        return (
            error(ErrorCode::Invalid, 0, format!("{} has no logical cores of {lnc} physical cores", dev.name)),
            Vec::new(),
        );
    }
    // Logical cores: `n` of them, logical `l` is physical `l·k .. (l+1)·k`.
    let n = phys / k;
    let free = |dev: &Device, l: u32| dev.leases[(l * k) as usize..((l + 1) * k) as usize].iter().all(Option::is_none);
    let range = match want {
        Want::All => Some((0, n)),
        Want::Count(0) | Want::Range { count: 0, .. } => {
            return (error(ErrorCode::Invalid, 0, "a lease of 0 cores"), Vec::new());
        }
        Want::Count(c) if c > n => None,
        Want::Count(c) => (0..=n - c).find(|&f| (f..f + c).all(|l| free(dev, l))).map(|f| (f, c)),
        Want::Range { first, count } => {
            if first.checked_add(count).is_none_or(|e| e > n) {
                return (
                    error(
                        ErrorCode::Invalid,
                        0,
                        format!("{} is beyond {}'s {n} cores", nc_range(first, count), dev.name),
                    ),
                    Vec::new(),
                );
            }
            Some((first, count))
        }
    };
    let requested = match want {
        Want::All => nc_range(0, n),
        Want::Count(c) => format!("{c} cores"),
        Want::Range { first, count } => nc_range(first, count),
    };
    let conflict = match range {
        Some((f, c)) => dev.leases[(f * k) as usize..((f + c) * k) as usize].iter().flatten().next().copied(),
        None => dev.leases.iter().flatten().next().copied(),
    };
    let (first, count) = match (range, conflict) {
        (Some((f, c)), None) => (f * k, c * k),
        _ => {
            let owner = conflict.and_then(|o| pids.get(&o).copied()).unwrap_or(0);
            let available = (0..n).filter(|&l| free(dev, l)).count();
            return (
                error(
                    ErrorCode::CoresUnavailable,
                    owner,
                    format!("NeuronCore(s) not available - Requested:{requested} Available:{available}"),
                ),
                Vec::new(),
            );
        }
    };
    for l in &mut dev.leases[first as usize..(first + count) as usize] {
        *l = Some(me);
    }
    let slot = dev.slots.iter().position(|s| *s == Some(me)).unwrap_or(0);
    let window = iova_window(dev.arch, slot);
    match open_path(dev, window, first as usize..(first + count) as usize) {
        Ok((path, fd, id)) => {
            dev.paths.insert(me, path);
            (Reply::Leased { device, first, count, fds: 1, path: id }, vec![fd])
        }
        Err(e) => {
            for l in &mut dev.leases[first as usize..(first + count) as usize] {
                *l = None;
            }
            (error(ErrorCode::Device, 0, format!("data path: {e}")), Vec::new())
        }
    }
}

/// Start serving the data path of a client leasing `ncs`; returns it and the client's end.
/// A VFIO device's descriptors are sent on the connection before the client has it
/// ([`vfio::shared::send_device`]; they wait in the socket).
fn open_path(
    dev: &Device,
    window: std::ops::Range<u64>,
    ncs: std::ops::Range<usize>,
) -> std::io::Result<(DataPath, OwnedFd, u64)> {
    let (mine, theirs) = UnixStream::pair()?;
    let shut = mine.try_clone()?;
    match &dev.backend {
        Backend::Sim(s) => {
            let s = s.clone();
            let opts = sim_serve::ConnOptions { iova_window: window, ncs };
            let thread = std::thread::Builder::new().name("broker-datapath".into()).spawn(move || {
                if let Err(e) = sim_serve::serve_connection(s, mine, opts) {
                    tracing::info!(%e, "data path ended");
                }
            })?;
            Ok((
                DataPath { shut: Some(shut), thread: Some(thread), window: None, host: None },
                OwnedFd::from(theirs),
                0,
            ))
        }
        Backend::Vfio(p) => {
            let fds = p.device().share().map_err(std::io::Error::other)?;
            vfio::shared::send_device(&mine, &fds).map_err(std::io::Error::other)?;
            let window = Some((p.clone(), window));
            Ok((DataPath { shut: Some(shut), thread: None, window, host: None }, OwnedFd::from(theirs), 0))
        }
        Backend::Hosted { socket } => {
            drop((mine, shut, theirs));
            let opts = sim_serve::shared::ConnOptions { iova_window: window, ncs };
            let (id, stream) = sim_serve::host::connect(socket, &opts).map_err(std::io::Error::other)?;
            let path = DataPath { shut: None, thread: None, window: None, host: Some((socket.clone(), id)) };
            Ok((path, OwnedFd::from(stream), id))
        }
    }
}

fn alloc_hbm(st: &mut State, me: u64, device: u32, chan: u32, len: u64) -> Reply {
    let Some(d) = attached(st, me, device) else { return not_attached(device) };
    st.next_handle += 1;
    let handle = st.next_handle;
    let dev = &mut st.devices[d];
    if dev.client_ncs(me).is_none() {
        return error(ErrorCode::Invalid, 0, "device memory goes with a lease: lease cores first");
    }
    if chan as usize >= dev.hal.allocator().channels() || len == 0 {
        return error(ErrorCode::Invalid, 0, format!("no HBM channel {chan} of {len} bytes on {}", dev.name));
    }
    // A naturally aligned block: the client's allocator carves it like a whole channel.
    let Some(size) = len.checked_next_power_of_two() else {
        return error(ErrorCode::OutOfMemory, 0, format!("{len} bytes"));
    };
    match dev.hal.allocator().alloc(chan as usize, size, size) {
        Ok(b) => {
            let addr = b.addr();
            dev.hbm.insert(handle, (me, b));
            Reply::Hbm { handle, addr, len: size }
        }
        Err(e) => error(ErrorCode::OutOfMemory, 0, e.to_string()),
    }
}

/// Take client `me`'s cores back on device `d`: end its data path (its IOVAs unmapped),
/// reclaim each NC (engines stopped, queues parked, NQ slots halted, NC reset) and free them.
fn release(shared: &Shared, me: u64, d: usize) {
    take_back(shared, me, d, false)
}

/// [`release`], and with `detach` also the client's IOVA window and attachment — all in one
/// step of the tables, so nobody sees the cores free and the window still taken.
fn take_back(shared: &Shared, me: u64, d: usize, detach: bool) {
    let (path, ncs, dev) = {
        let mut st = lock(&shared.st);
        let dev = &mut st.devices[d];
        let ncs: Vec<usize> = (0..dev.leases.len()).filter(|&i| dev.leases[i] == Some(me)).collect();
        (dev.paths.remove(&me), ncs, dev.ops())
    };
    for &nc in &ncs {
        if let Err(e) = dev.reclaim(nc) {
            tracing::warn!(nc, %e, "reclaiming a core failed");
        }
    }
    if let Some(p) = path {
        p.end();
    }
    let mut st = lock(&shared.st);
    let dev = &mut st.devices[d];
    // The client's memory goes after its engines stopped.
    dev.hbm.retain(|_, (o, _)| *o != me);
    for l in dev.leases.iter_mut() {
        if *l == Some(me) {
            *l = None;
        }
    }
    if detach {
        for s in dev.slots.iter_mut() {
            if *s == Some(me) {
                *s = None;
            }
        }
        let index = dev.index;
        if let Some(c) = st.clients.get_mut(&me) {
            c.attached.retain(|&x| x != index);
        }
    }
    st.last_activity = Some(Instant::now());
}

fn detach(shared: &Shared, me: u64, d: usize) {
    take_back(shared, me, d, true)
}

/// Everything client `id` held, on every device, released; the client forgotten.
fn cleanup(shared: &Shared, id: u64) {
    let devices: Vec<u32> = lock(&shared.st).clients.get(&id).map(|c| c.attached.clone()).unwrap_or_default();
    for d in devices {
        detach(shared, id, d as usize);
    }
    let mut st = lock(&shared.st);
    st.clients.remove(&id);
    st.last_activity = Some(Instant::now());
}

/// The listener systemd handed over (`LISTEN_PID` is this process, `LISTEN_FDS` ≥ 1: fd 3).
pub fn activated_listener() -> Option<UnixListener> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let n: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || n < 1 {
        return None;
    }
    const SD_LISTEN_FDS_START: i32 = 3;
    // SAFETY: under socket activation descriptor 3 is the listening socket systemd passed to
    // this process (LISTEN_PID is ours); nothing else in the process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(SD_LISTEN_FDS_START) };
    let l = UnixListener::from(fd);
    // A descriptor that is not a listening unix socket is refused (and closed).
    l.local_addr().ok()?;
    let _ = nix::fcntl::fcntl(&l, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    Some(l)
}

/// The socket a broker config listens on, for messages.
pub fn describe(p: &Path) -> String {
    p.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker's own IOVAs and the 16 clients' windows never overlap, and all of them
    /// stay below the PCIe route bits (an IOVA with one of them set would not reach the host).
    #[test]
    fn iova_windows_are_disjoint_and_below_the_route_bits() {
        for arch in csr_maps::ARCHES {
            let mine = broker_window(arch);
            assert_eq!(mine.start, 0);
            let mut last_end = mine.end;
            for slot in 0..MAX_CLIENTS {
                let w = iova_window(arch, slot);
                assert!(w.start >= last_end && w.start < w.end, "{}: slot {slot} {w:x?}", arch.name);
                assert_eq!(
                    (w.end - 1) & arch.consts.host_route_mask,
                    0,
                    "{}: slot {slot} reaches the route bits",
                    arch.name
                );
                last_end = w.end;
            }
        }
    }
}
