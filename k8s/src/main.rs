//! `neuron-vfio-k8s-device-plugin`: the Kubernetes device plugin (docs/kubernetes.md); the same
//! as `neuron-vfio k8s-device-plugin` ([`k8s::daemon`]).

use clap::Parser;

/// Hand out NeuronCores and Neuron devices to pods through the kubelet's device plugin API;
/// the cores are leased through the neuron-vfio broker.
#[derive(Parser, Debug)]
#[command(name = "neuron-vfio-k8s-device-plugin", version)]
struct Args {
    /// The devices served, as NEURON_VFIO_DEVICE names them: sim:shared[:ARCH[:N]] or a PCI
    /// address (default: NEURON_VFIO_DEVICE).
    #[arg(long)]
    device: Option<String>,
    #[command(flatten)]
    plugin: k8s::daemon::PluginArgs,
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
    match k8s::daemon::run(a.device.as_deref(), &a.plugin) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neuron-vfio-k8s-device-plugin: {e}");
            std::process::ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}
