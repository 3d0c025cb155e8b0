//! `neuron-vfio-k8s-device-plugin`: the Kubernetes device plugin (docs/kubernetes.md).

use clap::Parser;
use k8s::inventory::{self, BrokerAccess, Selection};
use k8s::plugin::{self, Kind, PluginConfig, Resource, Shared};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Hand out NeuronCores and Neuron devices to pods through the kubelet's device plugin API;
/// the cores are leased through the neuron-vfio broker.
#[derive(Parser, Debug)]
#[command(name = "neuron-vfio-k8s-device-plugin", version)]
struct Args {
    /// The devices served, as NEURON_VFIO_DEVICE names them: sim:shared[:ARCH[:N]] or a PCI
    /// address (default: NEURON_VFIO_DEVICE).
    #[arg(long)]
    device: Option<String>,
    /// The kubelet's device plugin directory.
    #[arg(long, default_value = k8s::api::DEVICE_PLUGIN_PATH)]
    plugin_dir: PathBuf,
    /// The resource handing out logical NeuronCores ("" to not register it).
    #[arg(long, default_value = "aws.amazon.com/neuroncore")]
    core_resource: String,
    /// The resource handing out whole devices ("" to not register it).
    #[arg(long, default_value = "aws.amazon.com/neuron")]
    device_resource: String,
    /// The broker's socket on the host (default: NEURON_VFIO_BROKER_SOCKET, else the broker's
    /// own default for this user).
    #[arg(long)]
    broker_socket: Option<PathBuf>,
    /// Where a container sees the broker socket's directory.
    #[arg(long, default_value = "/run/neuron-vfio")]
    container_broker_dir: PathBuf,
    /// The logical NeuronCore size (default: the arch's; passed to containers when given).
    #[arg(long)]
    lnc: Option<u32>,
    /// How often the broker's lease table is read, ms.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// How often the kubelet's socket is checked (and registration retried), ms.
    #[arg(long, default_value_t = 500)]
    watch_ms: u64,
    /// Write the broker's view as Prometheus text here (node exporter's textfile collector).
    #[arg(long)]
    metrics_file: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    let device = a.device.clone().or_else(|| std::env::var("NEURON_VFIO_DEVICE").ok()).unwrap_or_default();
    let sel = match Selection::parse(&device) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("neuron-vfio-k8s-device-plugin: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut resources = Vec::new();
    if !a.core_resource.is_empty() {
        resources.push(Resource { kind: Kind::Core, name: a.core_resource.clone() });
    }
    if !a.device_resource.is_empty() {
        resources.push(Resource { kind: Kind::Device, name: a.device_resource.clone() });
    }
    if resources.is_empty() {
        eprintln!("neuron-vfio-k8s-device-plugin: no resource to register");
        return std::process::ExitCode::from(2);
    }
    let broker_socket = a.broker_socket.clone().unwrap_or_else(broker_client::paths::socket_path);
    let access = BrokerAccess { socket: broker_socket.clone(), spawn: sel.text.starts_with("sim:shared"), lnc: a.lnc };
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(inventory::Snapshot::default()));
    let stop_broker = Arc::new(AtomicBool::new(false));
    let poll = Duration::from_millis(a.poll_ms.max(1));
    let watcher = {
        let (sel, stop) = (sel.clone(), stop_broker.clone());
        std::thread::spawn(move || inventory::watch(sel, access, poll, tx, stop))
    };
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
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("neuron-vfio-k8s-device-plugin: tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let retry = Duration::from_millis(a.watch_ms.max(1));
        let tasks: Vec<_> = resources
            .into_iter()
            .map(|r| tokio::spawn(plugin::serve_resource(shared.clone(), r, retry, stop_rx.clone())))
            .collect();
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("neuron-vfio-k8s-device-plugin: signals: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = stop_tx.send(true);
        let mut code = std::process::ExitCode::SUCCESS;
        for t in tasks {
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    eprintln!("neuron-vfio-k8s-device-plugin: {e}");
                    code = std::process::ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("neuron-vfio-k8s-device-plugin: {e}");
                    code = std::process::ExitCode::FAILURE;
                }
            }
        }
        code
    });
    stop_broker.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watcher.join();
    code
}
