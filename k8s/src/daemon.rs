//! The plugin as a long-running process: its command line ([`PluginArgs`]) and [`run`], shared
//! by the `neuron-vfio-k8s-device-plugin` binary and `neuron-vfio k8s-device-plugin` (one
//! implementation): the broker watcher thread, one gRPC server per resource, SIGTERM/SIGINT to
//! stop.

use crate::inventory::{self, BrokerAccess, InventoryError, Selection};
use crate::plugin::{self, Kind, PluginConfig, PluginError, Resource, Shared};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The plugin's options (the device selection is `--device`, which `neuron-vfio` has as a
/// global option; see [`run`]).
#[derive(clap::Args, Debug, Clone)]
pub struct PluginArgs {
    /// The kubelet's device plugin directory.
    #[arg(long, default_value = crate::api::DEVICE_PLUGIN_PATH)]
    pub plugin_dir: PathBuf,
    /// The resource handing out logical NeuronCores ("" to not register it).
    #[arg(long, default_value = "aws.amazon.com/neuroncore")]
    pub core_resource: String,
    /// The resource handing out whole devices ("" to not register it).
    #[arg(long, default_value = "aws.amazon.com/neuron")]
    pub device_resource: String,
    /// The broker's socket on the host (default: NEURON_VFIO_BROKER_SOCKET, else the broker's
    /// own default for this user).
    #[arg(long)]
    pub broker_socket: Option<PathBuf>,
    /// Where a container sees the broker socket's directory.
    #[arg(long, default_value = "/run/neuron-vfio")]
    pub container_broker_dir: PathBuf,
    /// The logical NeuronCore size (default: the arch's; passed to containers when given).
    #[arg(long)]
    pub lnc: Option<u32>,
    /// How often the broker's lease table is read, ms.
    #[arg(long, default_value_t = 100)]
    pub poll_ms: u64,
    /// How often the kubelet's socket is checked (and registration retried), ms.
    #[arg(long, default_value_t = 500)]
    pub watch_ms: u64,
    /// Write the broker's view as Prometheus text here (node exporter's textfile collector).
    #[arg(long)]
    pub metrics_file: Option<PathBuf>,
}

/// Why the plugin did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The device selection does not parse (a usage error).
    #[error(transparent)]
    Selection(#[from] InventoryError),
    #[error("no resource to register (--core-resource and --device-resource are both empty)")]
    NoResource,
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("signals: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Serve(#[from] PluginError),
    #[error("a resource's server task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl DaemonError {
    /// Whether the command line was at fault (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Selection(_) | Self::NoResource)
    }
}

/// Serve the resources of `device` (a selection as `NEURON_VFIO_DEVICE` names it; None: that
/// variable) until SIGTERM or SIGINT.
pub fn run(device: Option<&str>, a: &PluginArgs) -> Result<(), DaemonError> {
    let device = device.map(str::to_string).or_else(|| std::env::var("NEURON_VFIO_DEVICE").ok()).unwrap_or_default();
    let sel = Selection::parse(&device)?;
    let mut resources = Vec::new();
    if !a.core_resource.is_empty() {
        resources.push(Resource { kind: Kind::Core, name: a.core_resource.clone() });
    }
    if !a.device_resource.is_empty() {
        resources.push(Resource { kind: Kind::Device, name: a.device_resource.clone() });
    }
    if resources.is_empty() {
        return Err(DaemonError::NoResource);
    }
    let broker_socket = a.broker_socket.clone().unwrap_or_else(broker_client::paths::socket_path);
    let access = BrokerAccess { socket: broker_socket.clone(), spawn: sel.text.starts_with("sim:shared"), lnc: a.lnc };
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(inventory::Snapshot::default()));
    let cfg = PluginConfig {
        dir: a.plugin_dir.clone(),
        resources: resources.clone(),
        selection: sel.text.clone(),
        broker_socket,
        container_broker_dir: a.container_broker_dir.clone(),
        lnc: a.lnc,
        metrics_file: a.metrics_file.clone(),
    };
    let shared = Shared::new(cfg, rx);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let stop_broker = Arc::new(AtomicBool::new(false));
    let poll = Duration::from_millis(a.poll_ms.max(1));
    let watcher = {
        let stop = stop_broker.clone();
        std::thread::spawn(move || inventory::watch(sel, access, poll, tx, stop))
    };
    let retry = Duration::from_millis(a.watch_ms.max(1));
    let r = rt.block_on(serve(shared, resources, retry));
    stop_broker.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    r
}

async fn serve(shared: Arc<Shared>, resources: Vec<Resource>, retry: Duration) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = resources
        .into_iter()
        .map(|r| tokio::spawn(plugin::serve_resource(shared.clone(), r, retry, stop_rx.clone())))
        .collect();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = stop_tx.send(true);
    let mut first = None;
    for t in tasks {
        let r = match t.await {
            Ok(r) => r.map_err(DaemonError::from),
            Err(e) => Err(DaemonError::from(e)),
        };
        if let Err(e) = r {
            tracing::error!("{e}");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}
