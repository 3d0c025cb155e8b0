//! `broker`: the device broker (docs/sharing.md) — one per host and user, owning the shared
//! devices (`sim:shared…`) for every process that uses them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::report::CliError;

/// Arguments of `broker`.
#[derive(Args, Debug)]
pub struct BrokerArgs {
    /// The socket to listen on (default: NEURON_VFIO_BROKER_SOCKET, else
    /// $XDG_RUNTIME_DIR/neuron-vfio/broker.sock, else /run/user/$UID/…, else
    /// /tmp/neuron-vfio-$UID/broker.sock). Ignored under systemd socket activation.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Stay in the foreground (default: a new session, detached from the terminal).
    #[arg(long)]
    pub foreground: bool,
    /// Never exit on idle (default: exit after --idle-ms with no client and no lease).
    #[arg(long)]
    pub persist: bool,
    /// Idle time before exiting, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub idle_ms: u64,
    /// Start a detached broker with these options and return at once (what a client that
    /// finds no broker runs).
    #[arg(long, hide = true)]
    pub spawn: bool,
}

pub fn run(a: BrokerArgs) -> Result<(), CliError> {
    let socket = a.socket.clone().unwrap_or_else(broker::paths::socket_path);
    if a.spawn {
        let exe = std::env::current_exe().map_err(CliError::failure)?;
        let mut c = std::process::Command::new(exe);
        c.arg("broker").arg("--socket").arg(&socket).arg("--idle-ms").arg(a.idle_ms.to_string());
        if a.persist {
            c.arg("--persist");
        }
        // Not waited for: this process exits at once and the broker is re-parented.
        c.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        c.spawn().map_err(CliError::failure)?;
        return Ok(());
    }
    if !a.foreground {
        // A session of its own: no controlling terminal, no signals from the starter's.
        let _ = nix::unistd::setsid();
    }
    let mut cfg = broker::BrokerConfig::new(&socket);
    cfg.idle_exit = (!a.persist).then(|| Duration::from_millis(a.idle_ms));
    // Each simulated device in a host process of its own (`sim-host`): it outlives this
    // broker, and a later broker adopts it from its clients (docs/sharing.md).
    cfg.sim_host = Some(std::env::current_exe().map_err(CliError::failure)?);
    let b = match broker::server::activated_listener() {
        Some(l) => broker::Broker::from_listener(cfg, l),
        None => match broker::Broker::bind(cfg) {
            Ok(b) => b,
            // Two clients started a broker at once: the other one serves.
            Err(broker::BrokerError::Running(p)) => {
                tracing::info!("a broker already listens on {}", p.display());
                return Ok(());
            }
            Err(e) => return Err(CliError::failure(e)),
        },
    };
    stop_on_signal(&b)?;
    tracing::info!(socket = %socket.display(), pid = std::process::id(), "broker listening");
    b.run().map_err(CliError::failure)
}

/// SIGTERM or SIGINT stop the broker cleanly (what an init or a service manager sends at
/// shutdown): its clients are cleaned up as at their death and its socket removed. The signals
/// are blocked in this thread before any other exists (the client threads inherit the mask)
/// and taken by one thread that waits for them.
fn stop_on_signal(b: &broker::Broker) -> Result<(), CliError> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(CliError::failure)?;
    let stopper = b.stopper();
    std::thread::Builder::new()
        .name("broker-signals".into())
        .spawn(move || match set.wait() {
            Ok(sig) => {
                tracing::info!("{sig}: the broker stops");
                stopper.stop();
            }
            Err(e) => {
                // Let the signals take their default action here (end the process) rather
                // than stay blocked everywhere.
                tracing::warn!(%e, "waiting for signals failed: SIGTERM ends the broker without cleanup");
                let _ = set.thread_unblock();
                loop {
                    std::thread::park();
                }
            }
        })
        .map_err(CliError::failure)?;
    Ok(())
}
