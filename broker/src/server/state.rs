//! The broker's tables behind one mutex: devices, clients, the counters of handles.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Instant;

use broker_client::protocol::{ErrorCode, Reply, Role};

use super::config::BrokerConfig;
use super::device::Device;
use super::reply::error;

pub(super) struct Client {
    pub(super) pid: u32,
    pub(super) role: Role,
    pub(super) command: String,
    pub(super) runtime_version: String,
    /// Devices attached (broker device numbers).
    pub(super) attached: Vec<u32>,
    /// The connection, to tell the client when the broker stops ([`Broker::run`]).
    pub(super) sock: Option<UnixStream>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) devices: Vec<Device>,
    pub(super) clients: HashMap<u64, Client>,
    pub(super) next_client: u64,
    pub(super) next_handle: u64,
    pub(super) last_activity: Option<Instant>,
}

pub(super) struct Shared {
    pub(super) cfg: BrokerConfig,
    pub(super) st: Mutex<State>,
    pub(super) uid: u32,
    pub(super) stop: AtomicBool,
}

/// Index of broker device `device` if client `me` attached it.
pub(super) fn attached(st: &State, me: u64, device: u32) -> Option<usize> {
    let c = st.clients.get(&me)?;
    c.attached.contains(&device).then_some(device as usize).filter(|&d| d < st.devices.len())
}

/// The refusal of a request other than [`Request::Rejoin`] on a device being adopted.
pub(super) fn adopting(dev: &Device) -> Reply {
    error(ErrorCode::Adopting, 0, format!("{} waits for the previous broker's clients to re-register; retry", dev.name))
}

/// The lease-holder id under which [`settle`] holds the cores it takes back (client ids
/// start at 1).
pub(super) const SETTLING: u64 = 0;
