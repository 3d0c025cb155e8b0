//! The grace period of an adopted device and its end: what nobody re-registered is taken back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker_client::protocol::{ErrorCode, Reply};
use platform::sync::lock;

use super::config::{iova_window, MAX_CLIENTS};
use super::device::Backend;
use super::reply::error;
use super::state::{Shared, State, SETTLING};

/// Device `d` (just opened, found live) is adopted: only re-registrations are served on it
/// until [`BrokerConfig::adopt_grace`] has passed and [`settle`] ran.
pub(super) fn start_adoption(shared: &Arc<Shared>, st: &mut State, d: usize) -> Result<(), Reply> {
    st.devices[d].adopting = true;
    tracing::info!(
        device = d,
        grace_ms = shared.cfg.adopt_grace.as_millis() as u64,
        "device adopted from a previous broker's clients"
    );
    let shared = shared.clone();
    let spawned = std::thread::Builder::new().name("broker-settle".into()).spawn(move || {
        let until = Instant::now() + shared.cfg.adopt_grace;
        while Instant::now() < until && !shared.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())));
        }
        settle(&shared, d);
    });
    if let Err(e) = spawned {
        // Without its timer the device would refuse leases for ever: not adopted.
        st.devices.pop();
        return Err(error(ErrorCode::Device, 0, format!("adopting a device: {e}")));
    }
    Ok(())
}

/// The end of an adoption: the cores nobody re-registered are taken back as a dead client's
/// are (their process went while no broker ran), the IOVA windows nobody re-registered are
/// unmapped, and the device serves new attachments and leases again.
pub(super) fn settle(shared: &Shared, d: usize) {
    let (ncs, windows, ops) = {
        let mut st = lock(&shared.st);
        let dev = &mut st.devices[d];
        let ncs: Vec<usize> = (0..dev.leases.len()).filter(|&i| dev.leases[i].is_none()).collect();
        for &nc in &ncs {
            dev.leases[nc] = Some(SETTLING);
        }
        let windows: Vec<_> = match &dev.backend {
            Backend::Vfio(p) => (0..MAX_CLIENTS)
                .filter(|&k| dev.slots[k].is_none())
                .map(|k| (p.clone(), iova_window(dev.arch, k)))
                .collect(),
            // A dead client's connection to a device host was cleaned up by the host.
            Backend::Sim(_) | Backend::Hosted { .. } => Vec::new(),
        };
        (ncs, windows, dev.ops())
    };
    for &nc in &ncs {
        if let Err(e) = ops.reclaim(nc) {
            tracing::warn!(nc, %e, "taking back a core nobody re-registered failed");
        }
    }
    for (p, w) in windows {
        if let Err(e) = p.device().dma().unmap_raw(w.start, w.end - w.start) {
            tracing::debug!(%e, start = w.start, "unmapping a window nobody re-registered");
        }
    }
    let mut st = lock(&shared.st);
    let dev = &mut st.devices[d];
    for l in dev.leases.iter_mut().filter(|l| **l == Some(SETTLING)) {
        *l = None;
    }
    dev.adopting = false;
    tracing::info!(device = d, taken_back = ncs.len(), "adoption settled: new leases are served");
    st.last_activity = Some(Instant::now());
}
