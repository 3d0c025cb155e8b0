//! The plugin's gRPC side: one `DevicePlugin` server per resource (each on its own socket in
//! the kubelet's device plugin directory, as the kubelet wants one endpoint per resource), its
//! registration with the kubelet, and re-registration whenever the kubelet's socket is
//! recreated (a kubelet restart removes every plugin socket and makes a new `kubelet.sock`).

use crate::api::device_plugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::registration::registration_client::RegistrationClient;
use crate::api::*;
use crate::inventory::Snapshot;
use platform::sync::lock;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// What a resource hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Logical NeuronCores (`aws.amazon.com/neuroncore`), ids `nc<global logical index>`.
    Core,
    /// Whole devices (`aws.amazon.com/neuron`), ids `nd<index in the selection>`.
    Device,
}

/// One resource the plugin registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    /// The extended resource name (e.g. `aws.amazon.com/neuroncore`).
    pub name: String,
}

impl Resource {
    /// The socket file name in the device plugin directory.
    pub fn endpoint(&self) -> String {
        let tail = self.name.rsplit('/').next().unwrap_or("neuron");
        format!("neuron-vfio-{tail}.sock")
    }
}

/// How the plugin is set up.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The kubelet's device plugin directory (its `kubelet.sock`, the plugins' sockets).
    pub dir: PathBuf,
    pub resources: Vec<Resource>,
    /// The selection's text (a container's `NEURON_VFIO_DEVICE`).
    pub selection: String,
    /// The broker socket on the host and where a container sees it.
    pub broker_socket: PathBuf,
    pub container_broker_dir: PathBuf,
    /// The logical NeuronCore size given to the plugin, passed on to containers.
    pub lnc: Option<u32>,
    /// Where the broker's view is written as Prometheus text (node exporter's textfile form).
    pub metrics_file: Option<PathBuf>,
}

/// Why an allocation request is refused (the kubelet sees it as the RPC's status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("unknown device id `{0}`")]
    UnknownId(String),
    #[error("an allocation of no devices")]
    Empty,
    #[error("NeuronCore {core} is leased by pid {pid} outside any allocation; it is not handed out twice")]
    HeldOutside { core: u32, pid: u32 },
}

impl From<AllocError> for Status {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::UnknownId(_) | AllocError::Empty => Status::invalid_argument(e.to_string()),
            AllocError::HeldOutside { .. } => Status::failed_precondition(e.to_string()),
        }
    }
}

/// The index of an id `<prefix><n>`.
fn id_index(prefix: &str, id: &str) -> Result<u32, AllocError> {
    id.strip_prefix(prefix).and_then(|n| n.parse().ok()).ok_or_else(|| AllocError::UnknownId(id.to_string()))
}

/// One allocated core's process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Allocated {
    /// Who leased it when Allocate ran: a previous container of the pod (its init container,
    /// the kubelet reusing its devices) whose lease the broker has not reclaimed yet — not this
    /// allocation's process.
    before: Option<u32>,
    /// The first other process seen leasing it since.
    first: Option<u32>,
}

/// The state every resource's server shares.
pub struct Shared {
    cfg: PluginConfig,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Global logical cores handed out by Allocate. The kubelet never says when a pod's devices
    /// come back: an allocation of a core ends when its process no longer leases it (the
    /// container's process exited).
    allocated: Mutex<BTreeMap<u32, Allocated>>,
    /// (pid, core) pairs already reported as held outside any allocation, and how many.
    foreign: Mutex<(BTreeSet<(u32, u32)>, u64)>,
    /// Bumped when an allocation changes what ListAndWatch reports.
    alloc_tick: watch::Sender<u64>,
}

impl Shared {
    pub fn new(cfg: PluginConfig, snapshot: watch::Receiver<Arc<Snapshot>>) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            snapshot,
            allocated: Mutex::new(BTreeMap::new()),
            foreign: Mutex::new((BTreeSet::new(), 0)),
            alloc_tick: watch::Sender::new(0),
        })
    }

    /// Cores leased by a process although no allocation includes them. Each new (pid, core)
    /// is logged once and counted.
    pub fn foreign_holders(&self, snap: &Snapshot) -> BTreeMap<u32, u32> {
        let allocated: BTreeSet<u32> = {
            let mut a = lock(&self.allocated);
            a.retain(|&core, al| {
                let holder = snap.holder_of(core).map(|h| h.pid);
                match (al.first, holder) {
                    // Not leased yet: the container has not started its runtime (and the
                    // previous container's process, if any, is gone).
                    (None, None) => {
                        al.before = None;
                        true
                    }
                    // The previous container's lease, not reclaimed yet.
                    (None, Some(pid)) if al.before == Some(pid) => true,
                    (None, Some(pid)) => {
                        al.first = Some(pid);
                        true
                    }
                    (Some(p), Some(pid)) if p == pid => true,
                    // Its process is gone (possibly replaced by another one already).
                    (Some(_), _) => {
                        tracing::info!("NeuronCore {core}: its allocation's process is gone, the core is free");
                        false
                    }
                }
            });
            a.keys().copied().collect()
        };
        let mut out = BTreeMap::new();
        let mut f = lock(&self.foreign);
        for h in &snap.holders {
            for core in h.cores.clone() {
                if allocated.contains(&core) {
                    continue;
                }
                out.insert(core, h.pid);
                if f.0.insert((h.pid, core)) {
                    f.1 += 1;
                    tracing::warn!(
                        "NeuronCore {core} is leased by pid {} (`{}`) outside any allocation: reported unhealthy until it is free",
                        h.pid,
                        h.command
                    );
                }
            }
        }
        out
    }

    /// Writes the metrics file (if configured) from the broker's view now: also while no
    /// kubelet has asked for the devices yet.
    pub fn publish_metrics(&self) {
        let snap = self.snapshot.borrow().clone();
        let foreign = self.foreign_holders(&snap);
        self.write_metrics(&snap, &foreign);
    }

    /// The devices a resource lists now.
    pub fn devices(&self, kind: Kind) -> Vec<Device> {
        let snap = self.snapshot.borrow().clone();
        let foreign = self.foreign_holders(&snap);
        self.write_metrics(&snap, &foreign);
        let health = |ok: bool| if ok { HEALTHY } else { UNHEALTHY }.to_string();
        match kind {
            Kind::Core => snap
                .cores()
                .map(|c| {
                    let dev_ok = snap.device_of(c).is_some_and(|d| snap.device_healthy(d.index));
                    Device { id: format!("nc{c}"), health: health(dev_ok && !foreign.contains_key(&c)), topology: None }
                })
                .collect(),
            Kind::Device => snap
                .devices
                .iter()
                .map(|d| {
                    let held = d.logical_range().any(|c| foreign.contains_key(&c));
                    Device {
                        id: format!("nd{}", d.index),
                        health: health(snap.device_healthy(d.index) && !held),
                        topology: None,
                    }
                })
                .collect(),
        }
    }

    /// The global logical cores an id names (a core, or every core of a device).
    fn cores_of(&self, snap: &Snapshot, kind: Kind, id: &str) -> Result<Vec<u32>, AllocError> {
        let bad = || AllocError::UnknownId(id.to_string());
        match kind {
            Kind::Core => {
                let c = id_index("nc", id)?;
                snap.device_of(c).ok_or_else(bad)?;
                Ok(vec![c])
            }
            Kind::Device => {
                let i = id_index("nd", id)?;
                let d = snap.devices.iter().find(|d| d.index == i).ok_or_else(bad)?;
                Ok(d.logical_range().collect())
            }
        }
    }

    /// One container's allocation: the broker's socket directory mounted, the cores and the
    /// device named in the environment.
    fn allocate_one(&self, kind: Kind, ids: &[String]) -> Result<ContainerAllocateResponse, AllocError> {
        let snap = self.snapshot.borrow().clone();
        let mut cores = BTreeSet::new();
        for id in ids {
            cores.extend(self.cores_of(&snap, kind, id)?);
        }
        if cores.is_empty() {
            return Err(AllocError::Empty);
        }
        let foreign = self.foreign_holders(&snap);
        if let Some((core, pid)) = cores.iter().find_map(|c| foreign.get(c).map(|p| (*c, *p))) {
            return Err(AllocError::HeldOutside { core, pid });
        }
        lock(&self.allocated)
            .extend(cores.iter().map(|&c| (c, Allocated { before: snap.holder_of(c).map(|h| h.pid), first: None })));
        self.alloc_tick.send_modify(|t| *t += 1);
        let cores: Vec<u32> = cores.into_iter().collect();
        let mut envs = HashMap::new();
        envs.insert("NEURON_RT_VISIBLE_CORES".to_string(), core_list(&cores));
        envs.insert("NEURON_VFIO_DEVICE".to_string(), self.cfg.selection.clone());
        let sock_name = self.cfg.broker_socket.file_name().map(PathBuf::from).unwrap_or_else(|| "broker.sock".into());
        envs.insert(
            "NEURON_VFIO_BROKER_SOCKET".to_string(),
            self.cfg.container_broker_dir.join(sock_name).display().to_string(),
        );
        if let Some(l) = self.cfg.lnc {
            envs.insert("NEURON_LOGICAL_NC_CONFIG".to_string(), l.to_string());
        }
        let host_dir = self.cfg.broker_socket.parent().map(Path::to_path_buf).unwrap_or_default();
        let mounts = vec![Mount {
            container_path: self.cfg.container_broker_dir.display().to_string(),
            host_path: host_dir.display().to_string(),
            read_only: false,
        }];
        tracing::info!(cores = %core_list(&cores), "allocated");
        Ok(ContainerAllocateResponse { envs, mounts, ..Default::default() })
    }

    /// The broker's view as Prometheus text: each core's holder, the count of foreign leases.
    fn write_metrics(&self, snap: &Snapshot, foreign: &BTreeMap<u32, u32>) {
        let Some(path) = &self.cfg.metrics_file else { return };
        let mut s = String::new();
        s.push_str("# HELP neuron_vfio_core_holder_pid The pid leasing a logical NeuronCore (0: free).\n");
        s.push_str("# TYPE neuron_vfio_core_holder_pid gauge\n");
        for c in snap.cores() {
            let pid = snap.holder_of(c).map_or(0, |h| h.pid);
            let alloc = lock(&self.allocated).contains_key(&c);
            s.push_str(&format!("neuron_vfio_core_holder_pid{{core=\"{c}\",allocated=\"{alloc}\"}} {pid}\n"));
        }
        s.push_str(
            "# HELP neuron_vfio_cores_held_outside_allocation Logical NeuronCores leased outside any allocation now.\n",
        );
        s.push_str("# TYPE neuron_vfio_cores_held_outside_allocation gauge\n");
        s.push_str(&format!("neuron_vfio_cores_held_outside_allocation {}\n", foreign.len()));
        s.push_str("# HELP neuron_vfio_foreign_leases_total Leases seen on cores outside any allocation.\n");
        s.push_str("# TYPE neuron_vfio_foreign_leases_total counter\n");
        s.push_str(&format!("neuron_vfio_foreign_leases_total {}\n", lock(&self.foreign).1));
        // One writer at a time: each resource's task writes it (one temporary name).
        static WRITING: Mutex<()> = Mutex::new(());
        let _one = lock(&WRITING);
        let tmp = path.with_extension("tmp");
        if let Err(e) = std::fs::write(&tmp, s).and_then(|_| std::fs::rename(&tmp, path)) {
            tracing::warn!("metrics file {}: {e}", path.display());
        }
    }
}

/// `NEURON_RT_VISIBLE_CORES` for sorted cores: runs as `a-b`, joined by commas.
pub fn core_list(cores: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { cores[i].to_string() } else { format!("{}-{}", cores[i], cores[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// One resource's `DevicePlugin` service.
pub struct Service {
    pub shared: Arc<Shared>,
    pub kind: Kind,
}

type ListStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ListStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<ListStream>, Status> {
        let shared = self.shared.clone();
        let kind = self.kind;
        let mut snap = shared.snapshot.clone();
        let mut tick = shared.alloc_tick.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut last: Option<Vec<Device>> = None;
            loop {
                let now = shared.devices(kind);
                if last.as_ref() != Some(&now) {
                    if tx.send(Ok(ListAndWatchResponse { devices: now.clone() })).await.is_err() {
                        return;
                    }
                    last = Some(now);
                }
                tokio::select! {
                    r = snap.changed() => if r.is_err() { return },
                    r = tick.changed() => if r.is_err() { return },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let snap = self.shared.snapshot.borrow().clone();
        let (prefix, group): (&str, Box<dyn Fn(u32) -> u32 + Send>) = match self.kind {
            Kind::Core => {
                let s = snap.clone();
                ("nc", Box::new(move |c| s.device_of(c).map_or(u32::MAX, |d| d.index)))
            }
            Kind::Device => ("nd", Box::new(|_| 0)),
        };
        let busy = |i: u32| match self.kind {
            Kind::Core => snap.holder_of(i).is_some(),
            Kind::Device => snap.holders.iter().any(|h| h.device == i),
        };
        let parse =
            |ids: &[String]| -> Result<Vec<u32>, AllocError> { ids.iter().map(|id| id_index(prefix, id)).collect() };
        let mut container_responses = Vec::new();
        for r in &req.get_ref().container_requests {
            let avail = parse(&r.available_device_ids)?;
            let must = parse(&r.must_include_device_ids)?;
            let size = usize::try_from(r.allocation_size).unwrap_or(0);
            let ids = crate::prefer::prefer(&avail, &must, size, &group, busy);
            container_responses.push(ContainerPreferredAllocationResponse {
                device_ids: ids.iter().map(|i| format!("{prefix}{i}")).collect(),
            });
        }
        Ok(Response::new(PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let container_responses = req
            .get_ref()
            .container_requests
            .iter()
            .map(|c| self.shared.allocate_one(self.kind, &c.devices_ids))
            .collect::<Result<Vec<_>, AllocError>>()?;
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// What the plugin offers: preferred allocations, no pre-start hook.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }
}

/// A gRPC channel over a unix socket.
pub async fn unix_channel(path: PathBuf) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::from_static("http://[::1]:1")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let p = path.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("socket {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
}

/// The identity of a file (device and inode), to notice it was recreated.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Serve one resource until `stop` fires: bind its socket, register with the kubelet (retrying
/// every `retry` until it answers), and start over — a fresh socket, a new registration —
/// whenever the kubelet's socket is recreated or the plugin's own socket removed.
pub async fn serve_resource(
    shared: Arc<Shared>,
    res: Resource,
    retry: Duration,
    mut stop: watch::Receiver<bool>,
) -> Result<(), PluginError> {
    let dir = shared.cfg.dir.clone();
    let kubelet = dir.join(KUBELET_SOCKET);
    let endpoint = res.endpoint();
    let sock = dir.join(&endpoint);
    loop {
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock)
            .map_err(|source| PluginError::Socket { path: sock.clone(), source })?;
        let mine = identity(&sock);
        let (down_tx, mut down_rx) = watch::channel(false);
        let svc = DevicePluginServer::new(Service { shared: shared.clone(), kind: res.kind });
        let server = tokio::spawn(tonic::transport::Server::builder().add_service(svc).serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            async move {
                let _ = down_rx.wait_for(|d| *d).await;
            },
        ));
        tracing::info!(resource = %res.name, endpoint = %sock.display(), "serving the device plugin API");
        // Register (the kubelet dials the endpoint back: the server is up first).
        let mut said_waiting = false;
        let registered_with = loop {
            if *stop.borrow() {
                break None;
            }
            shared.publish_metrics();
            let id = identity(&kubelet);
            if id.is_none() && !said_waiting {
                tracing::info!(resource = %res.name, "waiting for the kubelet's socket {}", kubelet.display());
                said_waiting = true;
            }
            if id.is_some() {
                match register(&kubelet, &res, &endpoint).await {
                    Ok(()) => {
                        tracing::info!(resource = %res.name, endpoint = %endpoint, "registered with the kubelet");
                        break id;
                    }
                    Err(e) => tracing::warn!(resource = %res.name, "registration with the kubelet failed: {e}"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = stop.changed() => {}
            }
        };
        // Watch for the kubelet's restart.
        if registered_with.is_some() {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(retry) => {}
                    _ = stop.changed() => {}
                }
                if *stop.borrow() {
                    break;
                }
                if identity(&kubelet) != registered_with || identity(&sock) != mine {
                    tracing::info!(resource = %res.name, "the kubelet's socket was recreated: registering again");
                    break;
                }
            }
        }
        // A graceful stop waits for open streams (a ListAndWatch the old kubelet may not have
        // closed): give it a moment, then end the server.
        let _ = down_tx.send(true);
        let abort = server.abort_handle();
        if tokio::time::timeout(Duration::from_millis(500), server).await.is_err() {
            abort.abort();
        }
        if *stop.borrow() {
            let _ = std::fs::remove_file(&sock);
            return Ok(());
        }
    }
}

async fn register(
    kubelet: &Path,
    res: &Resource,
    endpoint: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let ch = unix_channel(kubelet.to_path_buf()).await?;
    let mut c = RegistrationClient::new(ch);
    c.register(RegisterRequest {
        version: VERSION.to_string(),
        endpoint: endpoint.to_string(),
        resource_name: res.name.clone(),
        options: Some(options()),
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(holders: &[(u32, std::ops::Range<u32>)]) -> Snapshot {
        let d = crate::inventory::DeviceEntry {
            index: 0,
            broker_device: 0,
            arch: "cayman".into(),
            ncs: 8,
            lnc: 2,
            first_logical: 0,
        };
        Snapshot {
            devices: vec![d],
            healthy: vec![true],
            holders: holders
                .iter()
                .map(|(pid, cores)| crate::inventory::Holder {
                    pid: *pid,
                    command: "p".into(),
                    device: 0,
                    cores: cores.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn an_allocation_ends_with_its_process_and_a_later_lease_is_foreign() {
        let cfg = PluginConfig {
            dir: "/nonexistent".into(),
            resources: vec![],
            selection: "sim:shared:cayman".into(),
            broker_socket: "/run/x/broker.sock".into(),
            container_broker_dir: "/run/neuron-vfio".into(),
            lnc: None,
            metrics_file: None,
        };
        // The pod's init container: allocated cores 0-1, leased by its process (pid 10).
        let (tx, rx) = watch::channel(Arc::new(snapshot(&[])));
        let sh = Shared::new(cfg, rx);
        let ids = ["nc0".to_string(), "nc1".to_string()];
        let a = sh.allocate_one(Kind::Core, &ids).expect("allocate");
        assert_eq!(a.envs["NEURON_RT_VISIBLE_CORES"], "0-1");
        assert_eq!(a.envs["NEURON_VFIO_BROKER_SOCKET"], "/run/neuron-vfio/broker.sock");
        assert_eq!(
            (a.mounts[0].host_path.as_str(), a.mounts[0].container_path.as_str()),
            ("/run/x", "/run/neuron-vfio")
        );
        assert!(sh.foreign_holders(&snapshot(&[(10, 0..2)])).is_empty());
        // The main container's Allocate while the broker has not reclaimed pid 10's lease yet:
        // that lease is not the new allocation's process, so the main container's (pid 11) is
        // not foreign.
        tx.send_replace(Arc::new(snapshot(&[(10, 0..2)])));
        sh.allocate_one(Kind::Core, &ids).expect("allocate again");
        assert!(sh.foreign_holders(&snapshot(&[(10, 0..2)])).is_empty());
        assert!(sh.foreign_holders(&snapshot(&[(11, 0..2)])).is_empty());
        // A process outside the allocation on core 2 is foreign; Allocate refuses its core.
        assert_eq!(sh.foreign_holders(&snapshot(&[(11, 0..2), (20, 2..3)])), BTreeMap::from([(2, 20)]));
        tx.send_replace(Arc::new(snapshot(&[(11, 0..2), (20, 2..3)])));
        let e = sh.allocate_one(Kind::Core, &["nc2".to_string()]).expect_err("held by pid 20");
        assert_eq!(e, AllocError::HeldOutside { core: 2, pid: 20 });
        assert_eq!(Status::from(e).code(), tonic::Code::FailedPrecondition);
        // Pid 11 gone: the allocation ended; a later lease on its cores is foreign.
        assert!(sh.foreign_holders(&snapshot(&[])).is_empty());
        assert_eq!(sh.foreign_holders(&snapshot(&[(12, 0..1)])), BTreeMap::from([(0, 12)]));
        assert_eq!(sh.allocate_one(Kind::Core, &["nc9".to_string()]), Err(AllocError::UnknownId("nc9".into())));
        assert_eq!(sh.allocate_one(Kind::Core, &[]), Err(AllocError::Empty));
        assert_eq!(Status::from(AllocError::Empty).code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn visible_cores_are_written_as_runs() {
        assert_eq!(core_list(&[0, 1]), "0-1");
        assert_eq!(core_list(&[2]), "2");
        assert_eq!(core_list(&[0, 1, 3, 5, 6, 7]), "0-1,3,5-7");
        assert_eq!(core_list(&[]), "");
    }
}
