//! How a broker runs ([`BrokerConfig`]) and where things are: the IOVA windows of a device
//! (the broker's own half, one window per client slot) and a device host's socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use csr_maps::Arch;

/// Processes per device (attached, with or without cores): the kmod's limit.
pub const MAX_CLIENTS: usize = csr_maps::consts::process::MAX_PER_DEVICE;

/// How the broker runs.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The socket to listen on (ignored when a listener is handed over, e.g. by systemd).
    pub socket: PathBuf,
    /// Exit after this long with no client and no lease (`None`: never).
    pub idle_exit: Option<Duration>,
    /// HBM per stack of the simulated devices (`None`: the arch's).
    pub sim_hbm_bytes: Option<u64>,
    /// The `neuron-vfio` executable that hosts each simulated device in a process of its own
    /// (`sim-host`, socket beside the broker's), so that the device — and every client's data
    /// path to it — outlives the broker, as a real device does. `None`: the devices live in
    /// this process and die with it (tests, embedding).
    pub sim_host: Option<PathBuf>,
    /// Longest a client may take to send the rest of a frame it started.
    pub frame_timeout: Duration,
    /// How long a device this broker found live (its previous broker's clients still use it)
    /// waits for them to re-register ([`Request::Rejoin`]) before what nobody re-registered is
    /// taken back and new leases are served.
    pub adopt_grace: Duration,
    /// How VFIO devices are opened: sysfs, the device-node root, no-IOMMU mode allowed
    /// (select reads them from the environment).
    pub vfio: select::shared::BrokerVfio,
}

impl BrokerConfig {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            idle_exit: Some(Duration::from_secs(2)),
            sim_hbm_bytes: None,
            sim_host: None,
            frame_timeout: Duration::from_secs(10),
            adopt_grace: Duration::from_secs(2),
            vfio: select::shared::BrokerVfio::from_env(),
        }
    }
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker socket {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
    #[error("another broker listens on {0}")]
    Running(PathBuf),
}

/// IOVA window `slot` of a device of `arch`: the upper half of the device's IOVA space (below
/// the PCIe route bits the host window ORs in) split in [`MAX_CLIENTS`] windows; the lower
/// half is the broker's own (its in-process mappings). No two clients' IOVAs overlap.
pub fn iova_window(arch: &Arch, slot: usize) -> std::ops::Range<u64> {
    let bits = arch.consts.host_route_mask.trailing_zeros().min(47);
    let half = 1u64 << (bits - 1);
    let w = half / MAX_CLIENTS as u64;
    let start = half + w * slot as u64;
    start..start + w
}

/// The broker's own IOVAs on a device of `arch`: the lower half of its IOVA space (the
/// clients' windows are the upper half, [`iova_window`]).
pub fn broker_window(arch: &Arch) -> std::ops::Range<u64> {
    let w = iova_window(arch, 0);
    0..w.start
}

/// The socket of the host of simulated device `index` of `arch`: beside the broker's.
pub fn host_socket(broker_socket: &Path, arch: &Arch, index: u32) -> PathBuf {
    let dir = broker_socket.parent().unwrap_or_else(|| Path::new("."));
    dir.join(format!("sim-{}-{index}.sock", arch.name))
}

/// The broker's driver options for a simulated device.
pub(super) fn sim_options(cfg: &BrokerConfig) -> hal::DeviceOptions {
    hal::DeviceOptions { poll: hal::PollTiming::fast(), hbm_limit: cfg.sim_hbm_bytes, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker's own IOVAs and the 16 clients' windows never overlap, and all of them
    /// stay below the PCIe route bits (an IOVA with one of them set would not reach the host).
    #[test]
    fn iova_windows_are_disjoint_and_below_the_route_bits() {
        for arch in csr_maps::ARCHES {
            let mine = broker_window(arch);
            assert_eq!(mine.start, 0);
            let mut last_end = mine.end;
            for slot in 0..MAX_CLIENTS {
                let w = iova_window(arch, slot);
                assert!(w.start >= last_end && w.start < w.end, "{}: slot {slot} {w:x?}", arch.name);
                assert_eq!(
                    (w.end - 1) & arch.consts.host_route_mask,
                    0,
                    "{}: slot {slot} reaches the route bits",
                    arch.name
                );
                last_end = w.end;
            }
        }
    }
}
