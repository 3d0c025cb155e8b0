//! Shared devices, reached through the broker (docs/sharing.md): `sim:shared[:ARCH[:N]]`, the
//! host's shared simulated devices, and any VFIO device once a broker runs. The broker owns
//! the devices; this process attaches them, leases its cores, is granted device memory for
//! them, and drives its cores over the data path the broker hands it — for a simulated device
//! a vfio-user connection ([`vfio::user::VfioUserPlatform`]), for a VFIO device the device's
//! own descriptors ([`vfio::VfioPlatform::from_fds`]: BARs mapped here, DMA mapped by this
//! process inside its IOVA window). The lease lives as long as the [`SharedLease`] (held by
//! [`crate::Opened`]); dropping it gives everything back.

use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use broker_client::client::{Connect, Loss, Rejoin, Session};
use broker_client::protocol::{DeviceSpec, ErrorCode, Grant, Handoff, Role, Want};
use csr_maps::Arch;
use platform::Platform;

use crate::SelectError;

/// How a broker opens the VFIO devices it shares, from the environment select reads
/// (`NEURON_VFIO_SYSFS` and `NEURON_VFIO_DEVDIR`: [`crate::sysfs`], [`crate::dev_dir`];
/// `NEURON_VFIO_BACKEND`): always through iommufd (the interface whose address space can be
/// handed to other processes), and in no-IOMMU mode only when the operator chose it
/// (`NEURON_VFIO_BACKEND=noiommu`) for a device no IOMMU translates.
#[derive(Debug, Clone)]
pub struct BrokerVfio {
    pub sysfs: vfio::Sysfs,
    /// The device-node root.
    pub dev: PathBuf,
    pub allow_noiommu: bool,
}

impl BrokerVfio {
    /// The settings of this process's environment.
    pub fn from_env() -> Self {
        let allow_noiommu = std::env::var("NEURON_VFIO_BACKEND").is_ok_and(|b| b.trim() == "noiommu");
        Self { sysfs: crate::sysfs(), dev: crate::dev_dir(), allow_noiommu }
    }
}

/// Which cores to reserve, as libnrt decides at `nrt_init` (global logical NeuronCore indices
/// over the devices of the set, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// Every core of every device (libnrt's default).
    All,
    /// Any free contiguous range of this many cores (`NEURON_RT_NUM_CORES`).
    Count(usize),
    /// Exactly these (contiguous) cores (`NEURON_RT_VISIBLE_CORES`).
    Cores(Vec<usize>),
}

/// One device of the set with this process's lease on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedDevice {
    /// The device as the broker knows it (its location: `sim:shared:ARCH:k` or the BDF).
    pub name: String,
    /// The device's index in the set (`sim:shared:ARCH:N` devices 0..N).
    pub index: usize,
    /// The broker's number for it.
    pub broker_device: u32,
    /// Leased NCs (device-local).
    pub ncs: Range<usize>,
    /// Device memory granted: (HBM channel, device address, bytes).
    pub hbm: Vec<(usize, u64, u64)>,
    /// This process's IOVA window on the device.
    pub iova: Range<u64>,
}

/// What this process holds on one device, as a later broker is told it ([`Session::rejoin`]).
#[derive(Clone)]
struct Held {
    spec: DeviceSpec,
    rejoin: Rejoin,
    /// A VFIO device: its descriptors go to a broker that does not have it open.
    vfio: Option<Arc<vfio::VfioPlatform>>,
    /// The device's number at the current broker.
    number: Arc<AtomicU32>,
}

/// This process's session with the broker and what it leased. Dropped: every lease and grant
/// is given back (the broker resets the cores) and the devices detached.
///
/// While it lives, a thread watches the broker: when the broker dies (the device does not: a
/// VFIO device is held by this process too, a shared simulated device lives in a host process
/// of its own), it connects to the next broker — starting one when this lease was allowed to —
/// and re-registers what it holds ([`Session::rejoin`]); the cores keep running meanwhile. A
/// broker that stopped and revoked its leases is not rejoined.
pub struct SharedLease {
    session: Arc<Session>,
    /// The process that leased (a forked child inherits the object but not the lease).
    pid: u32,
    pub arch: &'static Arch,
    /// Physical cores per logical core of the lease.
    lnc: usize,
    pub devices: Vec<LeasedDevice>,
    held: Arc<Vec<Held>>,
    watcher: Option<(UnixStream, JoinHandle<()>)>,
}

impl std::fmt::Debug for SharedLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLease").field("arch", &self.arch.name).field("devices", &self.devices).finish()
    }
}

impl SharedLease {
    /// The broker's pid.
    pub fn broker_pid(&self) -> u32 {
        self.session.broker_pid()
    }

    /// The session with the broker.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The firmware mailbox of leased device `d`, through the broker.
    pub fn firmware(&self, d: &LeasedDevice) -> Arc<dyn hal::FirmwareGate> {
        let k = self.devices.iter().position(|x| x.index == d.index);
        let device = match k.and_then(|k| self.held.get(k)) {
            Some(h) => h.number.clone(),
            None => Arc::new(AtomicU32::new(d.broker_device)),
        };
        Arc::new(broker_client::client::BrokerFirmware { session: self.session.clone(), device })
    }

    /// Start the thread that re-registers this lease with a later broker (see the type).
    fn watch(&mut self) {
        let Ok((stop, theirs)) = UnixStream::pair() else {
            tracing::warn!("no broker watch: a restarted broker will not know this process's cores");
            return;
        };
        let (session, held) = (self.session.clone(), self.held.clone());
        match std::thread::Builder::new().name("broker-watch".into()).spawn(move || watch(&session, &held, &theirs)) {
            Ok(t) => self.watcher = Some((stop, t)),
            Err(e) => tracing::warn!(%e, "no broker watch: a restarted broker will not know this process's cores"),
        }
    }

    /// The broker's current numbers of the leased devices, in order.
    fn numbers(&self) -> Vec<u32> {
        self.held.iter().map(|h| h.number.load(Ordering::Relaxed)).collect()
    }

    /// The leased logical cores as the runtime numbers them (its devices are the leased ones,
    /// in order): the runtime's visible cores.
    pub fn visible_cores(&self) -> Vec<usize> {
        let per = self.arch.counts.ncs as usize;
        let physical: Vec<usize> =
            self.devices.iter().enumerate().flat_map(|(k, d)| d.ncs.clone().map(move |nc| k * per + nc)).collect();
        let lnc = self.lnc.max(1);
        let mut out: Vec<usize> = physical.iter().map(|p| p / lnc).collect();
        out.dedup();
        out
    }

    /// The logical NeuronCore size the cores were leased in.
    pub fn lnc(&self) -> usize {
        self.lnc
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        // In a forked child the lease is the parent's: leave it alone.
        if std::process::id() != self.pid {
            return;
        }
        if let Some((stop, t)) = self.watcher.take() {
            drop(stop);
            let _ = t.join();
        }
        for device in self.numbers() {
            if let Err(e) = self.session.detach(device) {
                tracing::warn!(device, %e, "detaching a shared device failed");
            }
        }
    }
}

/// The watch of [`SharedLease`]: until `stop` is readable (its other end dropped), wait for
/// the broker to go; when it died, re-register with the next one.
fn watch(session: &Session, held: &[Held], stop: &UnixStream) {
    loop {
        match session.wait_for_loss(stop.as_fd()) {
            Loss::Stopped => return,
            Loss::Revoked(why) => {
                tracing::error!("{why}: this process's shared cores are no longer its own");
                return;
            }
            Loss::Died => {
                tracing::warn!(pid = session.broker_pid(), "the broker died: re-registering with the next one");
                if !rejoin_all(session, held, stop) {
                    return;
                }
            }
        }
    }
}

/// Whether `stop` becomes readable within `wait`.
fn stopped(stop: &UnixStream, wait: Duration) -> bool {
    use std::io::Read;
    if stop.set_read_timeout(Some(wait.max(Duration::from_millis(1)))).is_err() {
        return true;
    }
    // Nothing is ever written to it: the end of file (or any byte) is the stop.
    match (&mut &*stop).read_exact(&mut [0u8; 1]) {
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
        ),
        Ok(()) => true,
    }
}

/// Connect to the next broker (retrying until one answers or `stop`) and re-register every
/// device held. False when stopped first.
fn rejoin_all(session: &Session, held: &[Held], stop: &UnixStream) -> bool {
    let mut wait = Duration::from_millis(20);
    let mut said = false;
    loop {
        match session.reconnect() {
            Ok(()) => break,
            Err(e) => {
                if !said {
                    tracing::info!(%e, "waiting for a broker");
                    said = true;
                }
                if stopped(stop, wait) {
                    return false;
                }
                wait = (wait * 2).min(Duration::from_millis(200));
            }
        }
    }
    for h in held {
        let (handoff, fds) = match &h.vfio {
            Some(p) => match p.device().share() {
                Ok(f) => handoff_of(f),
                Err(e) => {
                    tracing::warn!(%e, "the device's descriptors cannot be handed over");
                    (Handoff::None, Vec::new())
                }
            },
            None => (Handoff::None, Vec::new()),
        };
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        match session.rejoin(h.spec.clone(), &h.rejoin, handoff, &borrowed) {
            Ok(n) => {
                h.number.store(n, Ordering::Relaxed);
                tracing::info!(device = n, broker = session.broker_pid(), "re-registered with the new broker");
            }
            Err(e) => tracing::error!(
                %e,
                "the new broker did not take this process's cores back: it may lease them to another process"
            ),
        }
    }
    true
}

/// A device's descriptors as a [`broker_client::protocol::Request::Rejoin`] carries them.
fn handoff_of(f: vfio::shared::DeviceFds) -> (Handoff, Vec<OwnedFd>) {
    match f.iommu {
        vfio::shared::IommuFds::Iommufd { iommufd, ioas } => (Handoff::Iommufd { ioas }, vec![f.device, iommufd]),
        vfio::shared::IommuFds::NoIommu { container, group } => (Handoff::NoIommu, vec![f.device, container, group]),
    }
}

/// `f` again while the broker answers [`ErrorCode::Adopting`] (a broker that just found its
/// devices live waits for their clients to re-register; bounded).
fn patient<T>(mut f: impl FnMut() -> Result<T, broker_client::ClientError>) -> Result<T, broker_client::ClientError> {
    let start = Instant::now();
    loop {
        match f() {
            Err(e) if e.code() == Some(ErrorCode::Adopting) && start.elapsed() < ADOPT_WAIT => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Longest [`patient`] waits.
const ADOPT_WAIT: Duration = Duration::from_secs(30);

/// Device memory granted for `count` leased NCs on one HBM channel of `arch`: their share of
/// the channel's usable memory, rounded down to a power of two (the broker grants naturally
/// aligned blocks).
pub fn hbm_grant(arch: &Arch, count: usize) -> u64 {
    let c = &arch.counts;
    let per_chan = (c.ncs / c.hbm_stacks.max(1)).max(1);
    let usable = arch.consts.hbm_active_size.saturating_sub(arch.consts.fw_carveout);
    let share = usable / per_chan * (count as u64).min(per_chan);
    if share == 0 {
        return 0;
    }
    1u64 << (63 - share.leading_zeros())
}

/// The HBM channel of NC `nc` (hal's mapping: NCs spread evenly over the stacks).
fn chan_of(arch: &Arch, nc: usize) -> usize {
    let c = &arch.counts;
    ((nc as u64 * c.hbm_stacks) / c.ncs.max(1)).min(c.hbm_stacks.saturating_sub(1)) as usize
}

fn broker_err(e: broker_client::ClientError) -> SelectError {
    SelectError::Broker(Box::new(e))
}

/// Open `n` devices of the shared `arch` set and lease `reserve` on them: the platforms of the
/// devices this process leased cores on (in order) and the lease. Starts a broker when none
/// runs.
pub fn open(
    arch: &'static Arch,
    n: usize,
    reserve: &Reserve,
    lnc: Option<u32>,
) -> Result<(Vec<Arc<dyn Platform>>, SharedLease), SelectError> {
    let c = Connect { spawn: true, ..Connect::new(Role::Runtime) };
    let session = Session::connect(&c).map_err(broker_err)?;
    let specs = (0..n).map(|k| DeviceSpec::Sim { arch: arch.name.to_string(), index: k as u32 }).collect();
    open_set(session, arch, specs, reserve, lnc)
}

/// The broker, when one runs (at the documented socket): a VFIO device is reached through it
/// then. `None` when nobody listens there (no socket, a stale one, or a kernel without unix
/// sockets, where no broker can run); a socket this process may not use is an error.
pub fn running_broker() -> Result<Option<Session>, SelectError> {
    match Session::connect(&Connect::new(Role::Runtime)) {
        Ok(s) => Ok(Some(s)),
        Err(broker_client::ClientError::Connect { source, .. }) if nobody_listens(&source) => Ok(None),
        Err(e) => Err(broker_err(e)),
    }
}

fn nobody_listens(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused)
        // A kernel without AF_UNIX.
        || e.raw_os_error() == Some(libc::EAFNOSUPPORT)
}

/// The VFIO device `addr` (of `arch`) through the broker `session`, leasing `reserve`.
pub fn open_pci(
    session: Session,
    arch: &'static Arch,
    addr: vfio::PciAddress,
    reserve: &Reserve,
    lnc: Option<u32>,
) -> Result<(Vec<Arc<dyn Platform>>, SharedLease), SelectError> {
    open_set(session, arch, vec![DeviceSpec::Pci(addr.to_string())], reserve, lnc)
}

/// Lease `reserve` on the devices `specs` (a set of one arch, global NC numbers over them in
/// order).
fn open_set(
    session: Session,
    arch: &'static Arch,
    specs: Vec<DeviceSpec>,
    reserve: &Reserve,
    lnc: Option<u32>,
) -> Result<(Vec<Arc<dyn Platform>>, SharedLease), SelectError> {
    let n = specs.len();
    let lnc = arch.lnc(lnc).unwrap_or(1);
    let mut lease = SharedLease {
        session: Arc::new(session),
        pid: std::process::id(),
        arch,
        lnc,
        devices: Vec::new(),
        held: Arc::new(Vec::new()),
        watcher: None,
    };
    // Logical cores per device.
    let per = arch.counts.ncs as usize / lnc;
    let mut platforms = Vec::new();
    // Which devices to lease on, and what.
    let plan: Vec<(usize, Want)> = match reserve {
        Reserve::All => (0..n).map(|k| (k, Want::All)).collect(),
        Reserve::Cores(cores) => (0..n)
            .filter_map(|k| {
                let local: Vec<usize> = cores.iter().filter(|&&g| g / per == k).map(|&g| g % per).collect();
                let first = *local.first()?;
                Some((k, Want::Range { first: first as u32, count: local.len() as u32 }))
            })
            .collect(),
        Reserve::Count(c) => vec![(usize::MAX, Want::Count(*c as u32))],
    };
    if let Reserve::Cores(cores) = reserve {
        if let Some(&g) = cores.iter().find(|&&g| g >= per * n) {
            return Err(SelectError::SharedCores(format!(
                "core {g} is not on {} ({} cores)",
                set_name(&specs),
                per * n
            )));
        }
    }
    for (k, want) in plan {
        let candidates: Vec<usize> = if k == usize::MAX { (0..n).collect() } else { vec![k] };
        let mut last = None;
        for k in candidates {
            match lease_one(&lease.session, arch, k, &specs[k], want, lnc) {
                Ok((p, d, h)) => {
                    platforms.push(p);
                    lease.devices.push(d);
                    let mut held = Vec::clone(&lease.held);
                    held.push(h);
                    lease.held = Arc::new(held);
                    last = None;
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(e) = last {
            return Err(e);
        }
    }
    lease.watch();
    Ok((platforms, lease))
}

/// A device set's name for messages.
fn set_name(specs: &[DeviceSpec]) -> String {
    match specs.first() {
        Some(DeviceSpec::Sim { arch, .. }) => format!("sim:shared:{arch}:{}", specs.len()),
        Some(DeviceSpec::Pci(bdf)) => bdf.clone(),
        None => "no device".into(),
    }
}

/// A leased device's platform and, for a VFIO device, the same as such.
type DataPath = (Arc<dyn Platform>, Option<Arc<vfio::VfioPlatform>>);

/// The data path of a leased device: the platform this process drives its NCs through (and,
/// for a VFIO device, the same as such: its descriptors go to a later broker).
fn data_path(
    spec: &DeviceSpec,
    fd: std::os::fd::OwnedFd,
    iova: &Range<u64>,
    ncs: &Range<usize>,
) -> Result<DataPath, SelectError> {
    let stream = UnixStream::from(fd);
    match spec {
        DeviceSpec::Sim { arch, index } => {
            let opts = vfio::user::UserOptions {
                iova_window: iova.clone(),
                irq_vectors: ncs.clone().map(|n| n as u32).collect(),
                // The broker serves its simulator: the modeled registers are the model's.
                modeled_writes: true,
                location: format!("sim:shared:{arch}:{index}"),
                // The device's host serves it with sim_serve::serve_connection.
                posted_writes: true,
                // Register writes on a ring, the registers read on the execute path from memory
                // the host publishes: no message per execute (docs/sharing.md).
                fast_path: true,
            };
            let p = vfio::user::VfioUserPlatform::from_stream(stream, opts)
                .map_err(|e| SelectError::SharedCores(format!("data path to sim:shared:{arch}:{index}: {e}")))?;
            Ok((Arc::new(p), None))
        }
        DeviceSpec::Pci(bdf) => {
            let bad = |e: vfio::Error| SelectError::SharedCores(format!("data path to {bdf}: {e}"));
            let fds = vfio::shared::recv_device(&stream).map_err(bad)?;
            let window = vfio::IovaRange::with_len(iova.start, iova.end.saturating_sub(iova.start))
                .ok_or_else(|| SelectError::SharedCores(format!("{bdf}: the broker gave an empty IOVA window")))?;
            let p = Arc::new(vfio::VfioPlatform::from_fds(fds, window).map_err(bad)?);
            Ok((p.clone(), Some(p)))
        }
    }
}

/// Attach device `k` (`spec`), lease `want`, connect its data path, get the device memory.
fn lease_one(
    s: &Session,
    arch: &'static Arch,
    k: usize,
    spec: &DeviceSpec,
    want: Want,
    lnc: usize,
) -> Result<(Arc<dyn Platform>, LeasedDevice, Held), SelectError> {
    let a = patient(|| s.attach(spec.clone())).map_err(broker_err)?;
    let undo = |e: SelectError| {
        let _ = s.detach(a.device);
        e
    };
    if a.arch != arch.name {
        return Err(undo(SelectError::SharedCores(format!(
            "{}: the broker says {}, this process expected {}",
            set_name(std::slice::from_ref(spec)),
            a.arch,
            arch.name
        ))));
    }
    let l = patient(|| s.lease_logical(a.device, want, lnc as u8)).map_err(broker_err).map_err(undo)?;
    let ncs = l.first as usize..(l.first + l.count) as usize;
    let Some(fd) = l.data_path else {
        return Err(undo(broker_err(broker_client::ClientError::Refused {
            code: ErrorCode::Device,
            owner_pid: 0,
            message: "the broker sent no data path".into(),
        })));
    };
    let path = l.path;
    let (p, vfio) = data_path(spec, fd, &a.iova, &ncs).map_err(undo)?;
    let mut chans: Vec<(usize, usize)> = Vec::new();
    for nc in ncs.clone() {
        let ch = chan_of(arch, nc);
        match chans.iter_mut().find(|(c, _)| *c == ch) {
            Some((_, count)) => *count += 1,
            None => chans.push((ch, 1)),
        }
    }
    let mut hbm = Vec::new();
    for (ch, count) in chans {
        let g = s.alloc_hbm(a.device, ch as u32, hbm_grant(arch, count)).map_err(broker_err).map_err(undo)?;
        hbm.push((ch, g.addr, g.len));
    }
    let name = p.identity().location;
    let held = Held {
        spec: spec.clone(),
        rejoin: Rejoin {
            iova_start: a.iova.start,
            first: ncs.start as u32,
            count: ncs.len() as u32,
            path,
            grants: hbm.iter().map(|&(chan, addr, len)| Grant { chan: chan as u32, addr, len }).collect(),
        },
        vfio,
        number: Arc::new(AtomicU32::new(a.device)),
    };
    let d = LeasedDevice { name, index: k, broker_device: a.device, ncs, hbm, iova: a.iova };
    Ok((p, d, held))
}

/// Whether a broker error is "the cores are taken" (libnrt's refusal at `nrt_init`).
pub fn cores_unavailable(e: &SelectError) -> Option<(u32, &str)> {
    match e {
        SelectError::Broker(b) => match b.as_ref() {
            broker_client::ClientError::Refused { code: ErrorCode::CoresUnavailable, owner_pid, message } => {
                Some((*owner_pid, message.as_str()))
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_powers_of_two_within_the_channel() {
        for arch in csr_maps::ARCHES {
            let usable = arch.consts.hbm_active_size - arch.consts.fw_carveout;
            let per_chan = (arch.counts.ncs / arch.counts.hbm_stacks).max(1);
            for k in 1..=per_chan as usize {
                let g = hbm_grant(arch, k);
                assert!(g.is_power_of_two() && g <= usable, "{}: {g:#x}", arch.name);
            }
            // Every NC of a channel can be granted its share at once.
            assert!(hbm_grant(arch, 1) * per_chan <= usable, "{}", arch.name);
        }
    }
}
