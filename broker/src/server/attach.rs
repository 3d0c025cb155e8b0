//! Attaching a device (an IOVA window slot, at most 16 processes) and the listing of devices
//! and their processes.

use std::sync::Arc;

use broker_client::protocol::{ClientInfo, DeviceInfo, DeviceSpec, ErrorCode, Reply};

use super::config::{iova_window, MAX_CLIENTS};
use super::open::device_for;
use super::reply::error;
use super::state::{adopting, Shared, State};

pub(super) fn query(st: &State) -> Vec<DeviceInfo> {
    st.devices
        .iter()
        .map(|d| {
            let mut ids: Vec<u64> = d.slots.iter().flatten().copied().collect();
            ids.sort_unstable();
            let clients = ids
                .iter()
                .filter_map(|id| {
                    let c = st.clients.get(id)?;
                    let (first, count) = d.client_ncs(*id).unwrap_or((0, 0));
                    let hbm_bytes = d.hbm.values().filter(|(o, _)| o == id).map(|(_, b)| b.len()).sum();
                    Some(ClientInfo {
                        pid: c.pid,
                        command: c.command.clone(),
                        runtime_version: c.runtime_version.clone(),
                        first,
                        count,
                        hbm_bytes,
                    })
                })
                .collect();
            let (iommu_mappings, collectives) = d.stats();
            DeviceInfo {
                device: d.index,
                name: d.name.clone(),
                arch: d.arch.name.to_string(),
                ncs: d.leases.len() as u32,
                hbm_granted: d.hbm.values().map(|(_, b)| b.len()).sum(),
                iova_windows: d.slots.iter().filter(|s| s.is_some()).count() as u32,
                iommu_mappings,
                collectives,
                adopting: d.adopting,
                clients,
            }
        })
        .collect()
}

pub(super) fn attach(shared: &Arc<Shared>, st: &mut State, me: u64, spec: DeviceSpec) -> Reply {
    let d = match device_for(shared, st, &spec) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let dev = &mut st.devices[d];
    let index = dev.index;
    if dev.adopting {
        return adopting(dev);
    }
    if let Some(slot) = dev.slots.iter().position(|s| *s == Some(me)) {
        let w = iova_window(dev.arch, slot);
        return Reply::Attached {
            device: index,
            arch: dev.arch.name.into(),
            ncs: dev.leases.len() as u32,
            iova_start: w.start,
            iova_len: w.end - w.start,
        };
    }
    let Some(slot) = dev.slots.iter().position(Option::is_none) else {
        return error(
            ErrorCode::TooManyClients,
            0,
            format!(
                "{} already has {MAX_CLIENTS} processes (NEURON_MAX_PROCESS_PER_DEVICE); close one first",
                dev.name
            ),
        );
    };
    dev.slots[slot] = Some(me);
    let w = iova_window(dev.arch, slot);
    let reply = Reply::Attached {
        device: index,
        arch: dev.arch.name.into(),
        ncs: dev.leases.len() as u32,
        iova_start: w.start,
        iova_len: w.end - w.start,
    };
    if let Some(c) = st.clients.get_mut(&me) {
        c.attached.push(index);
    }
    reply
}
