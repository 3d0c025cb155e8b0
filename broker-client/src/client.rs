//! The broker's client: what `select` (and through it libnrt.so and the CLI) and the tools use.
//!
//! [`Session::connect`] finds the broker at [`crate::paths::socket_path`]; with none running
//! and [`Connect::spawn`] set, it starts one ([`spawn_broker`]) and retries for a bounded
//! time. A session is one client of the broker: dropping it (or the process exiting) releases
//! everything it holds.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use nrt_status::{NrtStatus, Status};

use crate::protocol::{self as wire, WireError};
use crate::protocol::{DeviceInfo, DeviceSpec, ErrorCode, Grant, Handoff, Reply, Request, Role, Want};
use platform::sync::lock;

/// The environment variable naming the `neuron-vfio` executable a client starts the broker
/// with (else: the current executable when it is `neuron-vfio`, else `neuron-vfio` beside it,
/// else on `PATH`).
pub const EXE_VAR: &str = "NEURON_VFIO_BROKER_EXE";

/// How long a client that started a broker waits for it to listen.
pub const SPAWN_WAIT: Duration = Duration::from_secs(10);

/// Why a broker request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("broker at {path}: {source}")]
    Connect { path: PathBuf, source: std::io::Error },
    #[error("cannot start the broker ({exe}): {source}")]
    Spawn { exe: String, source: std::io::Error },
    #[error(
        "cannot start the broker: no {BROKER_EXE_NAME} executable found (looked at: {looked}); set {EXE_VAR} \
         or install neuron-vfio beside libnrt.so or on PATH"
    )]
    NoBrokerExe { looked: String },
    #[error("the broker started ({exe}) but does not listen on {path} after {waited_ms} ms")]
    SpawnTimeout { exe: String, path: PathBuf, waited_ms: u64 },
    #[error("broker connection: {0}")]
    Wire(#[from] WireError),
    /// The broker refused the request; `owner_pid` is the process holding what was asked for.
    #[error("{message}{}", if *owner_pid != 0 { format!(" (held by pid {owner_pid})") } else { String::new() })]
    Refused { code: ErrorCode, owner_pid: u32, message: String },
    #[error("unexpected broker reply: {0}")]
    Unexpected(String),
}

impl ClientError {
    /// The `NRT_STATUS` a front end reports: a request out of range is NRT_INVALID, memory
    /// exhausted NRT_RESOURCE, anything else (cores taken, too many processes, no broker)
    /// NRT_FAILURE — libnrt's `nrt_init` status when its cores are not available.
    pub fn status(&self) -> NrtStatus {
        match self {
            ClientError::Refused { code: ErrorCode::Invalid | ErrorCode::NoSuchDevice, .. } => NrtStatus::Invalid,
            ClientError::Refused { code: ErrorCode::OutOfMemory, .. } => NrtStatus::Resource,
            ClientError::Refused { code: ErrorCode::FirmwareTimeout, .. } => NrtStatus::Timeout,
            ClientError::Refused { code: ErrorCode::Firmware, .. } => NrtStatus::HwError,
            _ => NrtStatus::Failure,
        }
    }

    /// The code of a refusal.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl Status for ClientError {
    fn status(&self) -> NrtStatus {
        ClientError::status(self)
    }
}

/// How to reach the broker.
#[derive(Debug, Clone)]
pub struct Connect {
    pub socket: PathBuf,
    pub role: Role,
    /// Shown by `ls` (default: this process's command line).
    pub command: String,
    pub runtime_version: String,
    /// Start a broker when none listens.
    pub spawn: bool,
}

impl Connect {
    /// The default socket, this process's command, no spawning.
    pub fn new(role: Role) -> Self {
        Self {
            socket: crate::paths::socket_path(),
            role,
            command: command_line(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            spawn: false,
        }
    }
}

/// This process's command line (from `/proc/self/cmdline`, else its executable's name).
pub fn command_line() -> String {
    match std::fs::read("/proc/self/cmdline") {
        Ok(b) if !b.is_empty() => b
            .split(|&c| c == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s))
            .collect::<Vec<_>>()
            .join(" "),
        _ => std::env::args().next().unwrap_or_default(),
    }
}

/// A device attached through the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    pub device: u32,
    pub arch: String,
    pub ncs: u32,
    /// This client's IOVA window.
    pub iova: std::ops::Range<u64>,
}

/// Cores leased, and the data path to the device.
#[derive(Debug)]
pub struct Lease {
    pub device: u32,
    pub first: u32,
    pub count: u32,
    /// The connection the device's descriptors (VFIO) or its vfio-user protocol (a
    /// simulated device) arrive on.
    pub data_path: Option<OwnedFd>,
    /// The data path's id at the device's host (what [`Session::rejoin`] names; 0: none).
    pub path: u64,
}

/// Device memory the broker granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hbm {
    pub handle: u64,
    pub addr: u64,
    pub len: u64,
}

/// One client of the broker: a connection, replaced by [`Session::reconnect`] when the broker
/// it reached has gone.
pub struct Session {
    sock: Mutex<UnixStream>,
    broker_pid: AtomicU32,
    path: PathBuf,
    connect: Connect,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("broker_pid", &self.broker_pid()).field("path", &self.path).finish()
    }
}

/// How a session's broker went ([`Session::wait_for_loss`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loss {
    /// The caller's stop descriptor became readable: nothing was lost.
    Stopped,
    /// The connection ended without a word: the broker died. What this client holds is still
    /// its own; a later broker takes it back once it is re-registered ([`Session::rejoin`]).
    Died,
    /// The broker stopped and revoked every lease (its message).
    Revoked(String),
}

fn connect_once(path: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(path)
}

/// Whether a connect error means nobody listens (start one).
fn nobody_listens(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused)
}

/// A connection to the broker `c` names (started if asked and none listens), Hello said: the
/// socket and the broker's pid.
fn open(c: &Connect) -> Result<(UnixStream, u32), ClientError> {
    let sock = match connect_once(&c.socket) {
        Ok(s) => s,
        Err(e) if c.spawn && nobody_listens(&e) => {
            let exe = broker_exe()?;
            spawn_broker(&exe, &c.socket)?;
            let start = Instant::now();
            let mut wait = Duration::from_millis(5);
            loop {
                match connect_once(&c.socket) {
                    Ok(s) => break s,
                    Err(e) if nobody_listens(&e) && start.elapsed() < SPAWN_WAIT => {
                        std::thread::sleep(wait);
                        wait = (wait * 2).min(Duration::from_millis(100));
                    }
                    Err(e) if nobody_listens(&e) => {
                        return Err(ClientError::SpawnTimeout {
                            exe: exe.display().to_string(),
                            path: c.socket.clone(),
                            waited_ms: start.elapsed().as_millis() as u64,
                        })
                    }
                    Err(source) => return Err(ClientError::Connect { path: c.socket.clone(), source }),
                }
            }
        }
        Err(source) => return Err(ClientError::Connect { path: c.socket.clone(), source }),
    };
    let hello = Request::Hello { role: c.role, command: c.command.clone(), runtime_version: c.runtime_version.clone() };
    match exchange(&sock, &hello, &[])? {
        (Reply::Hello { broker_pid }, _) => Ok((sock, broker_pid)),
        (r, _) => Err(unexpected(r)),
    }
}

/// Send a request on `sock`, read its reply (a refusal is [`ClientError::Refused`]).
fn exchange(sock: &UnixStream, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
    wire::send(sock, &req.encode(), fds)?;
    let (frame, fds) = wire::recv(sock)?;
    match Reply::decode(&frame).map_err(WireError::from)? {
        Reply::Error { code, owner_pid, message } => Err(ClientError::Refused { code, owner_pid, message }),
        r => Ok((r, fds)),
    }
}

impl Session {
    /// Connect (starting a broker if asked and none listens) and say Hello.
    pub fn connect(c: &Connect) -> Result<Self, ClientError> {
        let (sock, broker_pid) = open(c)?;
        Ok(Self {
            sock: Mutex::new(sock),
            broker_pid: AtomicU32::new(broker_pid),
            path: c.socket.clone(),
            connect: c.clone(),
        })
    }

    /// Connect again as [`Session::connect`] did (starting a broker if it was allowed to),
    /// and continue on the new connection. Nothing this client held under the previous broker
    /// is known to the new one until re-registered ([`Session::rejoin`]).
    pub fn reconnect(&self) -> Result<(), ClientError> {
        let (sock, broker_pid) = open(&self.connect)?;
        *lock(&self.sock) = sock;
        self.broker_pid.store(broker_pid, Ordering::Relaxed);
        Ok(())
    }

    /// Block until the broker is gone or `stop` becomes readable. Between requests the broker
    /// sends nothing but a last frame when it stops ([`ErrorCode::Stopped`]); a reply to a
    /// request in flight is left to its caller.
    pub fn wait_for_loss(&self, stop: BorrowedFd<'_>) -> Loss {
        loop {
            let Ok(s) = lock(&self.sock).try_clone() else { return Loss::Died };
            let flags = PollFlags::POLLIN;
            let mut fds = [PollFd::new(s.as_fd(), flags), PollFd::new(stop, PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(_) => return Loss::Died,
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                return Loss::Stopped;
            }
            if fds[0].revents().is_none_or(|r| r.is_empty()) {
                continue;
            }
            // Readable: a reply a caller is about to read, or the end. Holding the lock, the
            // caller (if any) has read its reply; look again without waiting.
            let g = lock(&self.sock);
            let mut again = [PollFd::new(g.as_fd(), flags)];
            if !matches!(poll(&mut again, PollTimeout::ZERO), Ok(n) if n > 0) {
                continue;
            }
            let mut b = [0u8; 1];
            match nix::sys::socket::recv(
                std::os::fd::AsRawFd::as_raw_fd(&*g),
                &mut b,
                nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return Loss::Died,
                Ok(_) => {}
                Err(nix::Error::EAGAIN | nix::Error::EINTR) => continue,
                Err(_) => return Loss::Died,
            }
            // A frame nobody asked for: the broker's last word.
            return match wire::recv(&g).map(|(body, _)| Reply::decode(&body)) {
                Ok(Ok(Reply::Error { code: ErrorCode::Stopped, message, .. })) => Loss::Revoked(message),
                Ok(Ok(r)) => Loss::Revoked(format!("unexpected broker frame {r:?}")),
                Ok(Err(e)) => Loss::Revoked(e.to_string()),
                Err(_) => Loss::Died,
            };
        }
    }

    /// The broker's pid.
    pub fn broker_pid(&self) -> u32 {
        self.broker_pid.load(Ordering::Relaxed)
    }

    /// The socket this session is connected to.
    pub fn socket(&self) -> &Path {
        &self.path
    }

    /// Send a request, read its reply (a refusal is [`ClientError::Refused`]).
    pub fn call(&self, req: &Request) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
        self.call_with(req, &[])
    }

    /// [`Session::call`] with descriptors sent beside the request.
    fn call_with(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
        exchange(&lock(&self.sock), req, fds)
    }

    /// Attach a device (counts toward its 16 processes).
    pub fn attach(&self, spec: DeviceSpec) -> Result<Attached, ClientError> {
        match self.call(&Request::Attach { spec })? {
            (Reply::Attached { device, arch, ncs, iova_start, iova_len }, _) => {
                let end = iova_start
                    .checked_add(iova_len)
                    .ok_or_else(|| ClientError::Unexpected("IOVA window wraps".into()))?;
                Ok(Attached { device, arch, ncs, iova: iova_start..end })
            }
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Lease cores on an attached device.
    pub fn lease(&self, device: u32, want: Want) -> Result<Lease, ClientError> {
        self.lease_logical(device, want, 1)
    }

    /// Lease `want` counted in logical NeuronCores of `lnc` physical cores each (aligned:
    /// logical core `l` is physical `l·lnc ..`); the lease names the physical cores.
    pub fn lease_logical(&self, device: u32, want: Want, lnc: u8) -> Result<Lease, ClientError> {
        self.leased(self.call(&Request::Lease { device, want, lnc })?)
    }

    /// Re-register with a new broker what this client held on device `spec` under the
    /// previous one (its IOVA window, cores, data path and device memory), handing over the
    /// device's descriptors (`handoff`, `fds`) for a broker that does not have it open; the
    /// device's number at the new broker.
    pub fn rejoin(
        &self,
        spec: DeviceSpec,
        held: &Rejoin,
        handoff: Handoff,
        fds: &[BorrowedFd<'_>],
    ) -> Result<u32, ClientError> {
        let req = Request::Rejoin {
            spec,
            iova_start: held.iova_start,
            first: held.first,
            count: held.count,
            path: held.path,
            grants: held.grants.clone(),
            handoff,
        };
        match self.call_with(&req, fds)? {
            (Reply::Leased { device, .. }, _) => Ok(device),
            (r, _) => Err(unexpected(r)),
        }
    }

    fn leased(&self, r: (Reply, Vec<OwnedFd>)) -> Result<Lease, ClientError> {
        match r {
            (Reply::Leased { device, first, count, path, .. }, fds) => {
                Ok(Lease { device, first, count, data_path: fds.into_iter().next(), path })
            }
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Give the lease on `device` back.
    pub fn release(&self, device: u32) -> Result<(), ClientError> {
        self.ok(Request::Release { device })
    }

    /// Stop using `device`.
    pub fn detach(&self, device: u32) -> Result<(), ClientError> {
        self.ok(Request::Detach { device })
    }

    /// Device memory on HBM channel `chan` (at least `len` bytes: the grant is a power of two).
    pub fn alloc_hbm(&self, device: u32, chan: u32, len: u64) -> Result<Hbm, ClientError> {
        match self.call(&Request::AllocHbm { device, chan, len })? {
            (Reply::Hbm { handle, addr, len }, _) => Ok(Hbm { handle, addr, len }),
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Give device memory back.
    pub fn free_hbm(&self, device: u32, handle: u64) -> Result<(), ClientError> {
        self.ok(Request::FreeHbm { device, handle })
    }

    /// The broker's devices and their processes.
    pub fn query(&self) -> Result<Vec<DeviceInfo>, ClientError> {
        match self.call(&Request::Query)? {
            (Reply::Query(d), _) => Ok(d),
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Reset leased NCs (`mask`, bit n: NC n) through the device's firmware mailbox, which
    /// the broker serializes.
    pub fn reset_ncs(&self, device: u32, mask: u32) -> Result<(), ClientError> {
        self.ok(Request::ResetNcs { device, mask })
    }

    /// One FW-IO request through the device's mailbox; the response payload.
    pub fn fwio(&self, device: u32, cmd: u8, payload: &[u8]) -> Result<Vec<u8>, ClientError> {
        match self.call(&Request::Fwio { device, cmd, payload: payload.to_vec() })? {
            (Reply::Fwio { data }, _) => Ok(data),
            (r, _) => Err(unexpected(r)),
        }
    }

    fn ok(&self, req: Request) -> Result<(), ClientError> {
        match self.call(&req)? {
            (Reply::Ok, _) => Ok(()),
            (r, _) => Err(unexpected(r)),
        }
    }
}

/// What a client holds on a device, as [`Session::rejoin`] re-registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejoin {
    /// The start of its IOVA window.
    pub iova_start: u64,
    pub first: u32,
    pub count: u32,
    /// Its data path's id at the device's host ([`Lease::path`]).
    pub path: u64,
    pub grants: Vec<Grant>,
}

/// A shared device's firmware mailbox reached through the broker: what a client's
/// `hal::Device` uses for NC resets and FW-IO requests ([`hal::FirmwareGate`]), so that the
/// processes sharing the device never use its one mailbox at the same moment.
pub struct BrokerFirmware {
    pub session: std::sync::Arc<Session>,
    /// The broker's number of the device (a later broker may number it differently).
    pub device: std::sync::Arc<AtomicU32>,
}

impl BrokerFirmware {
    fn err(e: ClientError) -> hal::HalError {
        hal::HalError::Owner { status: e.status(), message: e.to_string() }
    }
}

impl hal::FirmwareGate for BrokerFirmware {
    fn reset_ncs(&self, mask: u32) -> hal::Result<()> {
        self.session.reset_ncs(self.device.load(Ordering::Relaxed), mask).map_err(Self::err)
    }

    fn request(&self, cmd: u8, payload: &[u8]) -> hal::Result<Vec<u8>> {
        if payload.len() > crate::protocol::MAX_FWIO {
            return Err(hal::HalError::FwioPayload(payload.len()));
        }
        self.session.fwio(self.device.load(Ordering::Relaxed), cmd, payload).map_err(Self::err)
    }
}

fn unexpected(r: Reply) -> ClientError {
    ClientError::Unexpected(format!("{r:?}"))
}

/// The name of the executable that runs a broker.
pub const BROKER_EXE_NAME: &str = "neuron-vfio";

/// The file this code was loaded from, as the loader names it and with its links resolved
/// (`libnrt.so.1` in a directory of links → the real `libnrt.so`): `libnrt.so` when a libnrt
/// program runs it, the executable otherwise (`dladdr` on one of this crate's functions).
fn loaded_from() -> Vec<PathBuf> {
    let Some(raw) = loaded_from_raw() else { return Vec::new() };
    match std::fs::canonicalize(&raw) {
        Ok(real) if real != raw => vec![raw, real],
        _ => vec![raw],
    }
}

fn loaded_from_raw() -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let here = loaded_from_raw as *const () as *const libc::c_void;
    // SAFETY: dladdr reads the loader's tables for an address of this process's own code and
    // writes `info`, which is valid for writes; a zero return means it wrote nothing usable.
    let found = unsafe { libc::dladdr(here, info.as_mut_ptr()) };
    if found == 0 {
        return None;
    }
    // SAFETY: dladdr returned non-zero, so it initialised `info`.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader, valid while the object
    // stays loaded (this code is in it); it is copied at once.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// Where a broker executable is looked for, in order (docs/sharing.md): `NEURON_VFIO_BROKER_EXE`;
/// beside the object this code was loaded from (`libnrt.so`, or the program); the install's
/// `../bin/` from there; beside the running program; each directory of `PATH`.
pub fn broker_exe_candidates(
    var: Option<&std::ffi::OsStr>,
    loaded: &[PathBuf],
    program: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    if let Some(v) = var.filter(|v| !v.is_empty()) {
        push(PathBuf::from(v));
    }
    for obj in loaded.iter().map(PathBuf::as_path).chain(program) {
        if obj.file_name().is_some_and(|n| n == BROKER_EXE_NAME) {
            push(obj.to_path_buf());
        }
        if let Some(dir) = obj.parent() {
            push(dir.join(BROKER_EXE_NAME));
            if let Some(prefix) = dir.parent() {
                push(prefix.join("bin").join(BROKER_EXE_NAME));
            }
        }
    }
    if let Some(path) = path {
        for d in std::env::split_paths(path).filter(|d| !d.as_os_str().is_empty()) {
            push(d.join(BROKER_EXE_NAME));
        }
    }
    out
}

/// The `neuron-vfio` executable that starts a broker: the first of
/// [`broker_exe_candidates`] that is a file (`NEURON_VFIO_BROKER_EXE` is taken as given). The
/// error names every place looked.
pub fn broker_exe() -> Result<PathBuf, ClientError> {
    let var = std::env::var_os(EXE_VAR);
    let program = std::env::current_exe().ok();
    let loaded = loaded_from();
    let path = std::env::var_os("PATH");
    let candidates = broker_exe_candidates(var.as_deref(), &loaded, program.as_deref(), path.as_deref());
    if let Some(v) = var.filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(v));
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| ClientError::NoBrokerExe {
        looked: candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// Start a broker on `socket` with `exe broker --socket SOCKET --spawn`: that process starts
/// the broker detached (its own session, no terminal) and exits at once, so the broker is
/// nobody's child here and outlives this process.
pub fn spawn_broker(exe: &Path, socket: &Path) -> Result<(), ClientError> {
    let err = |source| ClientError::Spawn { exe: exe.display().to_string(), source };
    let status = Command::new(exe)
        .arg("broker")
        .arg("--socket")
        .arg(socket)
        .arg("--spawn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(err)?;
    if !status.success() {
        return Err(err(std::io::Error::other(format!("exited with {status}"))));
    }
    Ok(())
}

/// A process using a device, as the tools show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub command: String,
    /// Leased cores (device-local NC indices; empty for a tool).
    pub cores: std::ops::Range<u32>,
    pub runtime_version: String,
}

/// The broker's devices (empty when no broker runs; never starts one).
pub fn devices() -> Vec<DeviceInfo> {
    let c = Connect::new(Role::Tool);
    match Session::connect(&c) {
        Ok(s) => s.query().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// The processes using `device` (a device's broker name, e.g. `sim:shared:cayman#0`, or its
/// BDF); empty when no broker runs or it has no such device.
pub fn processes(device: &str) -> Vec<ProcessInfo> {
    devices()
        .into_iter()
        .filter(|d| d.name == device)
        .flat_map(|d| d.clients)
        .map(|c| ProcessInfo {
            pid: c.pid,
            command: c.command,
            cores: c.first..c.first + c.count,
            runtime_version: c.runtime_version,
        })
        .collect()
}

#[cfg(test)]
mod exe_tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_broker_is_looked_for_beside_libnrt_then_the_install_then_the_program_then_path() {
        let c = broker_exe_candidates(
            None,
            &[PathBuf::from("/opt/nv/lib/libnrt.so.1")],
            Some(Path::new("/home/u/app/main")),
            Some(OsStr::new("/usr/local/bin:/usr/bin")),
        );
        let want: Vec<PathBuf> = [
            "/opt/nv/lib/neuron-vfio",
            "/opt/nv/bin/neuron-vfio",
            "/home/u/app/neuron-vfio",
            "/home/u/bin/neuron-vfio",
            "/usr/local/bin/neuron-vfio",
            "/usr/bin/neuron-vfio",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(c, want);
        // The variable first; the program itself when it is neuron-vfio; no duplicates.
        let c = broker_exe_candidates(
            Some(OsStr::new("/x/nv")),
            &[PathBuf::from("/p/bin/neuron-vfio")],
            Some(Path::new("/p/bin/neuron-vfio")),
            Some(OsStr::new("/p/bin")),
        );
        assert_eq!(c, ["/x/nv", "/p/bin/neuron-vfio"].iter().map(PathBuf::from).collect::<Vec<_>>());
    }

    #[test]
    fn this_code_knows_the_file_it_was_loaded_from() {
        let me = loaded_from();
        let exe = std::fs::canonicalize(std::env::current_exe().expect("exe")).expect("exe");
        assert_eq!(me.last().and_then(|p| std::fs::canonicalize(p).ok()), Some(exe));
    }
}
