//! The broker's life: binding the socket (or taking a listener handed over), the accept loop
//! with its idle exit, and the stop that revokes every lease.

use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use broker_client::protocol::{self as wire, ErrorCode};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use platform::sync::lock;

use super::cleanup::cleanup;
use super::config::{BrokerConfig, BrokerError};
use super::dispatch::serve_client;
use super::reply::error;
use super::state::{Shared, State};

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

    pub(super) fn with_listener(cfg: BrokerConfig, listener: UnixListener, owned_path: Option<PathBuf>) -> Self {
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

    pub(super) fn accept_loop(&self) -> std::io::Result<()> {
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
