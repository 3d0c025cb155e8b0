//! The device host: one shared simulated device in a process of its own, so that it outlives
//! the broker that started it as hardware does.
//!
//! On real hardware a broker that dies leaves its clients' devices working (they hold their
//! own descriptors). A simulated device living inside the broker would die with it, and every
//! client with it. So the broker starts a small *device host* ([`spawn`]: `neuron-vfio
//! sim-host`), which owns the [`SimDevice`] and listens on a socket; the broker and each client
//! get a vfio-user connection to it ([`connect`]), served by [`crate::shared::serve_connection`]
//! exactly as the broker served them in-process (bounded to the connection's IOVA window and
//! NCs, cleaned up when it ends). When the broker dies the clients' connections keep working,
//! and a restarted broker reconnects to the same socket.
//!
//! Every connection to the socket starts with one request frame ([`wire`]) and its reply:
//!
//! - `Connect` → `Connected { id }`, and the stream becomes the vfio-user data path (refused
//!   when its IOVA window overlaps a live connection's);
//! - `End { id }` → the host shuts that connection down, waits for its cleanup (its mappings
//!   and eventfds gone), then answers `Ok` ([`end`]) — how the broker takes a dead client's
//!   connection away even while a copy of its descriptor lives on elsewhere;
//! - `Stats` → the simulator's counters ([`stats`]);
//! - `Control { line }` → [`crate::control_command`] (fault injection, as `sim-serve
//!   --control`; [`control`]);
//! - `Describe { id }` → the IOVA window and NCs live connection `id` is bounded to
//!   ([`describe`]: how a restarted broker checks a client's claim to a connection).
//!
//! Only the host's own user (or root) is served (SO_PEERCRED); the socket is 0600 besides.
//! The host exits on its own: once it has served a data connection, when none has been live
//! for [`HostConfig::linger`]; before that, when none arrived within
//! [`HostConfig::first_connect`] (a broker that died before connecting leaves no orphan).

pub mod wire;

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt};
use platform::sync::{lock, wait_timeout_while};
use sim::{SimConfig, SimDevice, SimStats};

use crate::conn::ConnOptions;
use crate::shared::serve_connection;
use crate::ServeError;
pub use wire::{Reply, Request, WireError};

/// Default [`HostConfig::linger`].
pub const DEFAULT_LINGER: Duration = Duration::from_secs(1);
/// Default [`HostConfig::first_connect`].
pub const DEFAULT_FIRST_CONNECT: Duration = Duration::from_secs(10);
/// How long either side waits for the other's frame (and the bound on [`spawn`]'s wait for
/// the socket): a host or client that stalls is an error, not a hang.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long `End` waits for the connection's cleanup before answering with an error: below
/// [`TIMEOUT`], so the client reads that error rather than timing out.
const END_WAIT: Duration = Duration::from_secs(8);
/// How often the accept loop re-checks the exit policy.
const TICK_MS: u16 = 50;

/// What the host serves and when it leaves.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub arch: &'static csr_maps::Arch,
    /// Simulated HBM per stack (the broker's `sim_hbm_bytes`; default: the simulator's).
    pub hbm_bytes: Option<u64>,
    /// The socket to listen on.
    pub socket: PathBuf,
    /// After the last data connection ends, how long the host waits for another before it
    /// exits (a restarting broker reconnects within it).
    pub linger: Duration,
    /// How long the host waits for its first `Connect` before it exits.
    pub first_connect: Duration,
}

impl HostConfig {
    /// A host of `arch` on `socket`, with the default HBM, linger and first-connect wait.
    pub fn new(arch: &'static csr_maps::Arch, socket: impl Into<PathBuf>) -> Self {
        Self {
            arch,
            hbm_bytes: None,
            socket: socket.into(),
            linger: DEFAULT_LINGER,
            first_connect: DEFAULT_FIRST_CONNECT,
        }
    }
}

/// A device host with its socket bound, not yet serving ([`Host::run`]).
pub struct Host {
    cfg: HostConfig,
    sim: SimDevice,
    /// The host's own driver handle: it brought the device up and does what acts on the
    /// device as a whole for the broker ([`reclaim`], [`reset_ncs`], [`fwio`]), in this
    /// process — a reclaim is a thousand register accesses, not a thousand messages.
    hal: hal::Device,
    listener: UnixListener,
    /// Device and inode of the socket file this host made: on exit it removes the file only
    /// if it is still this one (a successor may have replaced it).
    file_id: (u64, u64),
}

impl Host {
    /// Create the simulated device and bind the socket (mode 0600; its directory, if missing,
    /// is made 0700). A socket file nobody answers on (a host that died) is replaced; one a
    /// live host answers on is [`ServeError::HostRunning`] — two brokers starting a host at
    /// once leave one host.
    ///
    /// The device is made as the broker makes its in-process ones ([`SimConfig::new`] with the
    /// HBM size), with inline timing: the device work a register write starts runs on the
    /// thread that applies the write — a client's connection thread, draining its fast path —
    /// with no device thread to wake in between (docs/sharing.md, "What an execute costs").
    pub fn bind(cfg: &HostConfig) -> Result<Host, ServeError> {
        let mut sc = SimConfig::new(cfg.arch).timing(sim::Timing::Inline);
        if let Some(b) = cfg.hbm_bytes {
            sc = sc.hbm_bytes(b);
        }
        let sim = SimDevice::new(sc)?;
        let hal = bring_up(&sim, cfg.hbm_bytes)?;
        let path = &cfg.socket;
        let err = |source| ServeError::HostSocket { path: path.clone(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
        }
        let listener = match UnixListener::bind(path) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if UnixStream::connect(path).is_ok() {
                    return Err(ServeError::HostRunning(path.clone()));
                }
                std::fs::remove_file(path).map_err(err)?;
                UnixListener::bind(path).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        // Polled before each accept: a client gone in between must not block the exit policy.
        listener.set_nonblocking(true).map_err(err)?;
        let m = std::fs::symlink_metadata(path).map_err(err)?;
        Ok(Host { cfg: cfg.clone(), sim, hal, listener, file_id: (m.dev(), m.ino()) })
    }

    /// The simulated device (the same one every connection reaches).
    pub fn device(&self) -> &SimDevice {
        &self.sim
    }

    /// Serve until the exit policy says stop (module docs), then remove the socket file if it
    /// is still this host's. Each request is answered on a thread of its own, each data
    /// connection served on its thread; a request still being answered (a `Connect` in
    /// particular) holds the exit off.
    pub fn run(self) -> Result<(), ServeError> {
        let shared = Arc::new(Shared {
            sim: self.sim.clone(),
            hal: self.hal.clone(),
            uid: nix::unistd::geteuid().as_raw(),
            st: Mutex::new(State::default()),
        });
        // The socket file goes when `self` does (Drop).
        self.accept_loop(&shared)
    }

    fn accept_loop(&self, shared: &Arc<Shared>) -> Result<(), ServeError> {
        let started = Instant::now();
        let err = |source| ServeError::HostSocket { path: self.cfg.socket.clone(), source };
        loop {
            {
                let st = lock(&shared.st);
                if st.pending == 0 && st.conns.is_empty() {
                    match st.last_live {
                        None if started.elapsed() >= self.cfg.first_connect => {
                            tracing::info!("no connection within {:?}: the sim host exits", self.cfg.first_connect);
                            return Ok(());
                        }
                        Some(t) if t.elapsed() >= self.cfg.linger => {
                            tracing::info!("no connection for {:?}: the sim host exits", self.cfg.linger);
                            return Ok(());
                        }
                        _ => {}
                    }
                }
            }
            let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(TICK_MS)) {
                Ok(0) | Err(nix::Error::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(err(e.into())),
            }
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                // The client went away between poll and accept.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    // Out of descriptors, say: not a reason to stop serving the live
                    // connections, but no reason to spin either.
                    tracing::warn!(%e, "sim host: accept failed");
                    std::thread::sleep(Duration::from_millis(TICK_MS.into()));
                    continue;
                }
            };
            // The listener is non-blocking; its connections are served blocking.
            if let Err(e) = stream.set_nonblocking(false) {
                tracing::warn!(%e, "sim host: connection dropped");
                continue;
            }
            // Counted here, on the thread that checks the exit policy, so no request is
            // accepted and then abandoned by an exit.
            lock(&shared.st).pending += 1;
            let pending = Pending(shared.clone());
            let spawned =
                std::thread::Builder::new().name("sim-host-conn".into()).spawn(move || serve_request(pending, stream));
            if let Err(e) = spawned {
                // The closure (and with it the pending count) was dropped.
                tracing::warn!(%e, "sim host: no thread for a connection");
            }
        }
    }
}

/// A host bound and dropped (after [`Host::run`], or never run) takes its socket file with
/// it — only if the file is still the one it bound: a successor may have replaced it.
impl Drop for Host {
    fn drop(&mut self) {
        let p = &self.cfg.socket;
        match std::fs::symlink_metadata(p) {
            Ok(m) if (m.dev(), m.ino()) == self.file_id => {
                let _ = std::fs::remove_file(p);
            }
            Ok(_) => tracing::info!("{} is no longer this host's socket: left in place", p.display()),
            Err(_) => {}
        }
    }
}

/// What the request threads share.
struct Shared {
    sim: SimDevice,
    hal: hal::Device,
    uid: u32,
    st: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Live data connections by id.
    conns: HashMap<u64, Live>,
    next_id: u64,
    /// Requests accepted and not yet answered (a `Connect` until its connection is live).
    pending: usize,
    /// When a data connection was last live (`None`: never).
    last_live: Option<Instant>,
}

/// A live data connection: the host's handle of its stream (to shut it down), the flag its
/// serving thread raises once the connection's cleanup is done, and its IOVA window.
struct Live {
    stream: UnixStream,
    done: Arc<Done>,
    iova_window: std::ops::Range<u64>,
    ncs: std::ops::Range<usize>,
}

#[derive(Default)]
struct Done {
    finished: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn finish(&self) {
        *lock(&self.finished) = true;
        self.cv.notify_all();
    }

    /// Whether it finished within `limit`.
    fn wait(&self, limit: Duration) -> bool {
        let (g, _) = wait_timeout_while(&self.cv, lock(&self.finished), limit, |f| !*f);
        *g
    }
}

/// One accepted request in flight; dropping it (on every path out of [`serve_request`])
/// uncounts it.
struct Pending(Arc<Shared>);

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = lock(&self.0.st);
        st.pending = st.pending.saturating_sub(1);
    }
}

fn send(stream: &UnixStream, r: &Reply) -> Result<(), WireError> {
    wire::write_frame(stream, &r.encode())
}

/// Answer the one request on `stream`; a `Connect` goes on to serve the data path here.
fn serve_request(pending: Pending, stream: UnixStream) {
    let shared = pending.0.clone();
    let uid = match getsockopt(&stream, sockopt::PeerCredentials) {
        Ok(c) => c.uid(),
        Err(e) => {
            tracing::warn!(%e, "sim host: SO_PEERCRED failed, connection closed");
            return;
        }
    };
    if uid != shared.uid && uid != 0 {
        tracing::warn!(uid, "sim host: refused a client of another user");
        let _ = send(&stream, &Reply::Error(format!("uid {uid} may not use the sim host of uid {}", shared.uid)));
        return;
    }
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let req = match wire::read_frame(&mut &stream).and_then(|f| Ok(Request::decode(&f)?)) {
        Ok(r) => r,
        // A readiness probe ([`spawn`]): connected and closed.
        Err(WireError::Closed) => return,
        Err(e) => {
            tracing::info!(%e, "sim host: malformed request");
            let _ = send(&stream, &Reply::Error(format!("malformed request: {e}")));
            return;
        }
    };
    let reply = match req {
        Request::Connect { iova_window, ncs } => return serve_data(pending, stream, ConnOptions { iova_window, ncs }),
        Request::End { id } => end_connection(&shared, id),
        Request::Stats => Reply::Stats(Box::new(shared.sim.stats())),
        Request::Reclaim { nc } => device_op(shared.hal.reclaim_nc(nc as usize).map(|()| Reply::Ok)),
        Request::ResetNcs { mask } => device_op(shared.hal.firmware_reset_ncs(mask).map(|()| Reply::Ok)),
        Request::Fwio { cmd, payload } => device_op(shared.hal.fwio(cmd, &payload).map(Reply::Fwio)),
        Request::Describe { id } => match lock(&shared.st).conns.get(&id) {
            Some(l) => Reply::Described { iova_window: l.iova_window.clone(), ncs: l.ncs.clone() },
            None => Reply::Error(format!("no live data connection {id}")),
        },
        Request::Control { line } => {
            let r = crate::control_command(&shared.sim, &line);
            tracing::info!("sim host control: {} -> {r}", line.trim());
            Reply::Control(r)
        }
    };
    if let Err(e) = send(&stream, &reply) {
        tracing::info!(%e, "sim host: reply not delivered");
    }
}

/// The device as the host serves it: driven by its own handle (every engine brought up, every
/// notification queue halted, the dummy ring reclaims park queues on allocated), as the
/// broker brought up the simulated devices it kept in its own process. The handle's DMA goes
/// through the simulator's own IOVA allocator (the bottom of the IOVA space), clear of the
/// connections' windows.
fn bring_up(sim: &SimDevice, hbm_bytes: Option<u64>) -> Result<hal::Device, ServeError> {
    let opts = hal::DeviceOptions { poll: hal::PollTiming::fast(), hbm_limit: hbm_bytes, ..Default::default() };
    let dev = hal::Device::open(Arc::new(sim.clone()), opts)?;
    dev.init()?;
    dev.prepare_reclaim()?;
    Ok(dev)
}

/// A device operation's result as a reply: a firmware timeout and the firmware's own error
/// keep their kind.
fn device_op(r: hal::Result<Reply>) -> Reply {
    match r {
        Ok(r) => r,
        Err(e) => {
            let kind = match &e {
                hal::HalError::FwioTimeout { .. } | hal::HalError::ResetTimeout { .. } => {
                    wire::Failure::FirmwareTimeout
                }
                hal::HalError::Fwio { .. } => wire::Failure::Firmware,
                hal::HalError::FwioPayload(_) | hal::HalError::NoSuchNc { .. } => wire::Failure::Invalid,
                _ => wire::Failure::Device,
            };
            Reply::Failed { kind, message: e.to_string() }
        }
    }
}

/// Register the data connection, answer `Connected`, and serve vfio-user on it until it ends.
fn serve_data(pending: Pending, stream: UnixStream, opts: ConnOptions) {
    let shared = pending.0.clone();
    let handle = match stream.try_clone() {
        Ok(h) => h,
        Err(e) => {
            let _ = send(&stream, &Reply::Error(format!("sim host: {e}")));
            return;
        }
    };
    let done = Arc::new(Done::default());
    let id = {
        let mut st = lock(&shared.st);
        // serve_connection bounds each connection to its window on the premise that the
        // windows of live connections do not overlap (a DMA_MAP replaces what it overlaps):
        // enforced here, where every connection of the device is known. A broker that lost
        // its state (restarted) and hands out a window still in use is refused, not allowed
        // to replace a live client's mappings. NC ranges may overlap (an owner bringing the
        // whole device up takes every NC).
        let w = &opts.iova_window;
        if let Some((other, o)) =
            st.conns.iter().find(|(_, l)| w.start < l.iova_window.end && l.iova_window.start < w.end)
        {
            let msg = format!(
                "IOVA window {:#x}..{:#x} overlaps live connection {other}'s {:#x}..{:#x}",
                w.start, w.end, o.iova_window.start, o.iova_window.end
            );
            drop(st);
            let _ = send(&stream, &Reply::Error(msg));
            return;
        }
        st.next_id += 1;
        let id = st.next_id;
        st.conns.insert(id, Live { stream: handle, done: done.clone(), iova_window: w.clone(), ncs: opts.ncs.clone() });
        st.last_live = Some(Instant::now());
        id
    };
    // Live now: it holds the exit off itself.
    drop(pending);
    tracing::info!(id, window = ?opts.iova_window, ncs = ?opts.ncs, "sim host: data connection");
    // If the reply is lost the client is gone: serving ends at once, cleaning up nothing.
    let _ = send(&stream, &Reply::Connected { id });
    // vfio-user waits as long as the client is idle.
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(None);
    match serve_connection(shared.sim.clone(), stream, opts) {
        Ok(s) => tracing::info!(id, ?s, "sim host: data connection ended"),
        Err(e) => tracing::info!(id, %e, "sim host: data connection failed (cleaned up)"),
    }
    {
        let mut st = lock(&shared.st);
        st.conns.remove(&id);
        st.last_live = Some(Instant::now());
    }
    done.finish();
}

/// `End { id }`: shut the connection down and wait for its serving thread's cleanup.
fn end_connection(shared: &Shared, id: u64) -> Reply {
    let done = {
        let st = lock(&shared.st);
        let Some(live) = st.conns.get(&id) else {
            // Unknown or already ended: nothing left of it, which is what End asks for.
            return Reply::Ok;
        };
        let _ = live.stream.shutdown(std::net::Shutdown::Both);
        live.done.clone()
    };
    if done.wait(END_WAIT) {
        Reply::Ok
    } else {
        Reply::Error(format!("connection {id} was shut down but its cleanup did not finish within {END_WAIT:?}"))
    }
}

/// Why a request to a device host failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// No host answers on the socket (none started, or it exited).
    #[error("sim host {}: {source}", socket.display())]
    Connect { socket: PathBuf, source: std::io::Error },
    /// The exchange broke: an I/O error, a timeout ([`TIMEOUT`]) or a malformed reply.
    #[error("sim host {}: {source}", socket.display())]
    Exchange { socket: PathBuf, source: WireError },
    /// The host answered with an error (the request was refused).
    #[error("sim host {}: {message}", socket.display())]
    Refused { socket: PathBuf, message: String },
    /// A well-formed reply that does not answer the request.
    #[error("sim host {}: unexpected reply {reply}", socket.display())]
    Unexpected { socket: PathBuf, reply: String },
    /// [`spawn`] could not run the executable.
    #[error("{}: {source}", exe.display())]
    Spawn { exe: PathBuf, source: std::io::Error },
    /// [`spawn`]: `EXE sim-host … --spawn` failed.
    #[error("{} sim-host --spawn: {status}", exe.display())]
    SpawnStatus { exe: PathBuf, status: std::process::ExitStatus },
    /// A device operation ([`reclaim`], [`reset_ncs`], [`fwio`]) failed on the device.
    #[error("sim host {}: {message}", socket.display())]
    Failed { socket: PathBuf, kind: wire::Failure, message: String },
    /// [`spawn`]: the started host's socket did not accept connections in time.
    #[error("{} sim-host: its socket {} did not accept connections within {waited:?} ({last})",
        exe.display(), socket.display())]
    NotReady { exe: PathBuf, socket: PathBuf, waited: Duration, last: std::io::Error },
}

/// One request and its reply (an `Error` reply is [`HostError::Refused`]); the stream, for a
/// `Connect`, carries on.
fn exchange(socket: &Path, req: &Request) -> Result<(Reply, UnixStream), HostError> {
    let stream = UnixStream::connect(socket).map_err(|source| HostError::Connect { socket: socket.into(), source })?;
    let ex = |source| HostError::Exchange { socket: socket.into(), source };
    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| ex(e.into()))?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| ex(e.into()))?;
    wire::write_frame(&stream, &req.encode()).map_err(ex)?;
    let reply = wire::read_frame(&mut &stream).and_then(|f| Ok(Reply::decode(&f)?)).map_err(ex)?;
    match reply {
        Reply::Error(message) => return Err(HostError::Refused { socket: socket.into(), message }),
        Reply::Failed { kind, message } => return Err(HostError::Failed { socket: socket.into(), kind, message }),
        _ => {}
    }
    Ok((reply, stream))
}

fn unexpected(socket: &Path, r: Reply) -> HostError {
    HostError::Unexpected { socket: socket.into(), reply: format!("{r:?}") }
}

/// A vfio-user connection to the host's device bounded to `opts`: its id (for [`end`]) and
/// the stream (for `vfio::user::VfioUserPlatform::from_stream`), without timeouts. Refused
/// ([`HostError::Refused`]) when `opts.iova_window` overlaps a live connection's window.
pub fn connect(socket: &Path, opts: &ConnOptions) -> Result<(u64, UnixStream), HostError> {
    let req = Request::Connect { iova_window: opts.iova_window.clone(), ncs: opts.ncs.clone() };
    match exchange(socket, &req)? {
        (Reply::Connected { id }, stream) => {
            let ex = |e: std::io::Error| HostError::Exchange { socket: socket.into(), source: e.into() };
            stream.set_read_timeout(None).map_err(ex)?;
            stream.set_write_timeout(None).map_err(ex)?;
            Ok((id, stream))
        }
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// End data connection `id` and return once its mappings and eventfds are gone from the
/// device. Idempotent: an id that is unknown or already ended is `Ok` too (nothing of it is
/// left either way), so a broker cleaning up after a client need not know whether the client
/// closed its stream first.
pub fn end(socket: &Path, id: u64) -> Result<(), HostError> {
    match exchange(socket, &Request::End { id })? {
        (Reply::Ok, _) => Ok(()),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// The IOVA window and NCs live data connection `id` is bounded to (refused when there is
/// no such live connection).
pub fn describe(socket: &Path, id: u64) -> Result<(std::ops::Range<u64>, std::ops::Range<usize>), HostError> {
    match exchange(socket, &Request::Describe { id })? {
        (Reply::Described { iova_window, ncs }, _) => Ok((iova_window, ncs)),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// Take NC `nc` back (the host's driver: engines stopped, queues parked on the dummy ring,
/// notification slots halted, the NC reset through the firmware): what the broker does for a
/// process that went. Returns once done.
pub fn reclaim(socket: &Path, nc: u32) -> Result<(), HostError> {
    match exchange(socket, &Request::Reclaim { nc })? {
        (Reply::Ok, _) => Ok(()),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// Reset NCs `mask` through the device's firmware mailbox (one at a time with every other
/// use of it: the host's handle holds the mailbox lock).
pub fn reset_ncs(socket: &Path, mask: u32) -> Result<(), HostError> {
    match exchange(socket, &Request::ResetNcs { mask })? {
        (Reply::Ok, _) => Ok(()),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// One FW-IO request through the device's firmware mailbox: the response payload.
pub fn fwio(socket: &Path, cmd: u8, payload: &[u8]) -> Result<Vec<u8>, HostError> {
    match exchange(socket, &Request::Fwio { cmd, payload: payload.to_vec() })? {
        (Reply::Fwio(d), _) => Ok(d),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// The device's counters.
pub fn stats(socket: &Path) -> Result<SimStats, HostError> {
    match exchange(socket, &Request::Stats)? {
        (Reply::Stats(s), _) => Ok(*s),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// A control line (`hbm-ue@nc0`, `stats`): the host's answer, `ok …` or `error: …`.
pub fn control(socket: &Path, line: &str) -> Result<String, HostError> {
    match exchange(socket, &Request::Control { line: line.into() })? {
        (Reply::Control(s), _) => Ok(s),
        (r, _) => Err(unexpected(socket, r)),
    }
}

/// Start a detached device host: runs `EXE sim-host --arch A --socket S [--hbm-bytes N]
/// --spawn` (plus `--linger-ms` / `--first-connect-ms` when they are not the defaults), which
/// starts the host in a session of its own and exits; then waits (at most [`TIMEOUT`]) until
/// the socket accepts connections. A host already live on the socket counts as started (the
/// new one sees it and leaves).
pub fn spawn(exe: &Path, cfg: &HostConfig) -> Result<(), HostError> {
    let mut c = std::process::Command::new(exe);
    c.arg("sim-host").arg("--arch").arg(cfg.arch.name).arg("--socket").arg(&cfg.socket);
    if let Some(b) = cfg.hbm_bytes {
        c.arg("--hbm-bytes").arg(b.to_string());
    }
    if cfg.linger != DEFAULT_LINGER {
        c.arg("--linger-ms").arg(cfg.linger.as_millis().to_string());
    }
    if cfg.first_connect != DEFAULT_FIRST_CONNECT {
        c.arg("--first-connect-ms").arg(cfg.first_connect.as_millis().to_string());
    }
    c.arg("--spawn").stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    let status = c.status().map_err(|source| HostError::Spawn { exe: exe.into(), source })?;
    if !status.success() {
        return Err(HostError::SpawnStatus { exe: exe.into(), status });
    }
    wait_ready(&cfg.socket, TIMEOUT).map_err(|(waited, last)| HostError::NotReady {
        exe: exe.into(),
        socket: cfg.socket.clone(),
        waited,
        last,
    })
}

/// Poll `socket` until it accepts a connection (backoff 5 → 100 ms), at most `limit`.
fn wait_ready(socket: &Path, limit: Duration) -> Result<(), (Duration, std::io::Error)> {
    let t0 = Instant::now();
    let mut delay = Duration::from_millis(5);
    loop {
        match UnixStream::connect(socket) {
            Ok(_) => return Ok(()),
            Err(e) => {
                let waited = t0.elapsed();
                if waited >= limit {
                    return Err((waited, e));
                }
                std::thread::sleep(delay.min(limit - waited));
                delay = (delay * 2).min(Duration::from_millis(100));
            }
        }
    }
}
