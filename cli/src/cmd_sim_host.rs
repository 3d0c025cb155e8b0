//! `sim-host` (hidden): a shared simulated device in a process of its own, the *device host*
//! the broker starts so the device outlives the broker ([`sim_serve::host`]).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use csr_maps::Arch;

use crate::report::CliError;

/// Arguments of `sim-host`.
#[derive(Args, Debug)]
pub struct SimHostArgs {
    /// The simulated arch: sunda, cayman or mariana (or an alias).
    #[arg(long)]
    pub arch: String,
    /// The socket to listen on (replaced if stale; a live host there makes this one leave).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Simulated HBM bytes per stack (default: the simulator's).
    #[arg(long, value_name = "BYTES")]
    pub hbm_bytes: Option<u64>,
    /// How long to stay after the last data connection ends, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = sim_serve::host::DEFAULT_LINGER.as_millis() as u64)]
    pub linger_ms: u64,
    /// How long to wait for the first data connection, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = sim_serve::host::DEFAULT_FIRST_CONNECT.as_millis() as u64)]
    pub first_connect_ms: u64,
    /// Start a detached host with these options (a session of its own) and return at once:
    /// what `sim_serve::host::spawn` runs.
    #[arg(long)]
    pub spawn: bool,
}

pub fn run(a: SimHostArgs) -> Result<(), CliError> {
    let arch: &'static Arch = Arch::by_name(&a.arch).map_err(CliError::invalid)?;
    if a.spawn {
        let exe = std::env::current_exe().map_err(CliError::failure)?;
        let mut c = std::process::Command::new(exe);
        c.arg("sim-host").arg("--arch").arg(arch.name).arg("--socket").arg(&a.socket);
        if let Some(b) = a.hbm_bytes {
            c.arg("--hbm-bytes").arg(b.to_string());
        }
        c.arg("--linger-ms").arg(a.linger_ms.to_string());
        c.arg("--first-connect-ms").arg(a.first_connect_ms.to_string());
        c.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and calls only setsid(2),
        // which is async-signal-safe and touches no memory of the parent.
        unsafe {
            c.pre_exec(|| nix::unistd::setsid().map(drop).map_err(std::io::Error::from));
        }
        // Not waited for: this process exits at once and the host is re-parented. A session
        // of its own: no controlling terminal, no signals meant for the starter's group.
        c.spawn().map_err(CliError::failure)?;
        return Ok(());
    }
    let mut cfg = sim_serve::host::HostConfig::new(arch, &a.socket);
    cfg.hbm_bytes = a.hbm_bytes;
    cfg.linger = Duration::from_millis(a.linger_ms);
    cfg.first_connect = Duration::from_millis(a.first_connect_ms);
    let host = match sim_serve::host::Host::bind(&cfg) {
        Ok(h) => h,
        // Two brokers started a host at once: the other one serves.
        Err(sim_serve::ServeError::HostRunning(p)) => {
            tracing::info!("a sim host already listens on {}", p.display());
            return Ok(());
        }
        Err(e) => return Err(CliError::failure(e)),
    };
    tracing::info!(socket = %a.socket.display(), arch = arch.name, pid = std::process::id(), "sim host listening");
    host.run().map_err(CliError::failure)
}
