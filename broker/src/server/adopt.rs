//! After a broker restart: a previous broker's client re-registers what it holds
//! ([`Request::Rejoin`]), and a device found live is adopted from it.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use broker_client::protocol::{DeviceSpec, ErrorCode, Grant, Handoff, Reply, Role};
use csr_maps::Arch;

use super::config::{broker_window, iova_window, MAX_CLIENTS};
use super::device::{Backend, DataPath, Device};
use super::open::{open_hosted, OpenVfioError};
use super::reply::{error, nc_range};
use super::settle::start_adoption;
use super::state::{Shared, State};

/// What a client of a previous broker holds on a device ([`Request::Rejoin`]).
pub(super) struct Held {
    pub(super) iova_start: u64,
    pub(super) first: u32,
    pub(super) count: u32,
    pub(super) path: u64,
    pub(super) grants: Vec<Grant>,
}

/// Client `me` re-registers what it held on device `spec` under a previous broker. The
/// device must be one this broker adopted (found live, [`Device::adopting`]); the window,
/// the cores and the memory must all be free here; then all of it becomes the client's as
/// if this broker had granted it, or nothing does.
pub(super) fn rejoin(
    shared: &Arc<Shared>,
    st: &mut State,
    me: u64,
    spec: DeviceSpec,
    held: Held,
    handoff: Handoff,
    fds: Vec<OwnedFd>,
) -> Reply {
    if st.clients.get(&me).is_none_or(|c| c.role == Role::Tool) {
        return error(ErrorCode::Invalid, 0, "a tool client holds nothing to re-register");
    }
    let d = match find_device(st, &spec) {
        Some(d) => d,
        None => match adopt_device(shared, st, &spec, handoff, fds) {
            Ok(d) => d,
            Err(r) => return r,
        },
    };
    let pids: HashMap<u64, u32> = st.clients.iter().map(|(k, c)| (*k, c.pid)).collect();
    let handles = st.next_handle;
    let dev = &mut st.devices[d];
    if !dev.adopting {
        return error(
            ErrorCode::Invalid,
            0,
            format!("{} was opened by this broker: nothing of a previous broker's is left to re-register", dev.name),
        );
    }
    let Some(slot) = (0..MAX_CLIENTS).find(|&k| iova_window(dev.arch, k).start == held.iova_start) else {
        return error(
            ErrorCode::Invalid,
            0,
            format!("no IOVA window of {} starts at {:#x}", dev.name, held.iova_start),
        );
    };
    if dev.slots.contains(&Some(me)) {
        return error(ErrorCode::AlreadyLeased, 0, format!("already attached to {}", dev.name));
    }
    if let Some(o) = dev.slots[slot] {
        let owner = pids.get(&o).copied().unwrap_or(0);
        return error(
            ErrorCode::CoresUnavailable,
            owner,
            format!("IOVA window {slot} of {} is another process's", dev.name),
        );
    }
    let n = dev.leases.len() as u32;
    let (first, count) = (held.first, held.count);
    if count == 0 || first.checked_add(count).is_none_or(|e| e > n) {
        return error(
            ErrorCode::Invalid,
            0,
            format!("{} is not a range of {}'s {n} cores", nc_range(first, count), dev.name),
        );
    }
    let ncs = first as usize..(first + count) as usize;
    if let Some(o) = dev.leases[ncs.clone()].iter().flatten().next() {
        let owner = pids.get(o).copied().unwrap_or(0);
        let available = dev.free_ncs();
        return error(
            ErrorCode::CoresUnavailable,
            owner,
            format!("NeuronCore(s) not available - Requested:{} Available:{available}", nc_range(first, count)),
        );
    }
    // Every grant or none: a refusal drops those taken so far (freed).
    let mut bufs = Vec::with_capacity(held.grants.len());
    for g in &held.grants {
        match dev.hal.allocator().reserve(g.chan as usize, g.addr, g.len) {
            Ok(b) => bufs.push(b),
            Err(e) => {
                return error(
                    ErrorCode::Invalid,
                    0,
                    format!("device memory {:#x} + {:#x} on HBM channel {}: {e}", g.addr, g.len, g.chan),
                )
            }
        }
    }
    let window = iova_window(dev.arch, slot);
    let path = match &dev.backend {
        Backend::Vfio(p) => DataPath { shut: None, thread: None, window: Some((p.clone(), window)), host: None },
        Backend::Hosted { socket } => {
            // The connection it names must be one to this device bounded to exactly its
            // window and cores: a client re-registers its own data path, not another's.
            match sim_serve::host::describe(socket, held.path) {
                Ok((w, n)) if w == window && n == ncs => {}
                Ok((w, n)) => {
                    return error(
                        ErrorCode::Invalid,
                        0,
                        format!(
                            "data path {} is bounded to {w:#x?} and NCs {n:?}, not this window and cores",
                            held.path
                        ),
                    )
                }
                Err(e) => return error(ErrorCode::Invalid, 0, format!("data path {}: {e}", held.path)),
            }
            DataPath { shut: None, thread: None, window: None, host: Some((socket.clone(), held.path)) }
        }
        // A simulated device in this process was not found live: it is never adopted.
        Backend::Sim(_) => return error(ErrorCode::Device, 0, format!("{} has no data path to re-register", dev.name)),
    };
    dev.slots[slot] = Some(me);
    for l in &mut dev.leases[ncs] {
        *l = Some(me);
    }
    let granted = bufs.len() as u64;
    for (k, b) in bufs.into_iter().enumerate() {
        dev.hbm.insert(handles + 1 + k as u64, (me, b));
    }
    dev.paths.insert(me, path);
    let index = dev.index;
    st.next_handle += granted;
    if let Some(c) = st.clients.get_mut(&me) {
        c.attached.push(index);
    }
    tracing::info!(device = index, client = me, first, count, "a previous broker's client re-registered");
    Reply::Leased { device: index, first, count, fds: 0, path: held.path }
}

/// The device `spec` names, if this broker has it open.
pub(super) fn find_device(st: &State, spec: &DeviceSpec) -> Option<usize> {
    st.devices.iter().position(|d| match (&d.spec, spec) {
        (DeviceSpec::Pci(a), DeviceSpec::Pci(b)) => {
            a.parse::<vfio::PciAddress>().ok().is_some_and(|a| b.parse::<vfio::PciAddress>().ok() == Some(a))
        }
        (a, b) => a == b,
    })
}

/// Adopt device `spec` from a client of a previous broker that still uses it: a VFIO device
/// through the descriptors the client handed over (the kernel lets one process open it; the
/// clients hold it). The device is not brought up again — its other clients are running on
/// it — and the previous broker's own IOVAs (the lower half) are unmapped before this broker
/// maps its own there. New leases wait until [`settle`] ran, after [`BrokerConfig::adopt_grace`].
pub(super) fn adopt_device(
    shared: &Arc<Shared>,
    st: &mut State,
    spec: &DeviceSpec,
    handoff: Handoff,
    fds: Vec<OwnedFd>,
) -> Result<usize, Reply> {
    let (backend, hal, arch, name) = match spec {
        DeviceSpec::Pci(bdf) => {
            let addr: vfio::PciAddress =
                bdf.parse().map_err(|e: vfio::Error| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            let mut it = fds.into_iter();
            let (device, iommu) = match (handoff, it.next(), it.next(), it.next(), it.next()) {
                (Handoff::Iommufd { ioas }, Some(device), Some(iommufd), None, None) => {
                    (device, vfio::shared::IommuFds::Iommufd { iommufd, ioas })
                }
                (Handoff::NoIommu, Some(device), Some(container), Some(group), None) => {
                    (device, vfio::shared::IommuFds::NoIommu { container, group })
                }
                _ => {
                    return Err(error(
                        ErrorCode::Invalid,
                        0,
                        format!("{addr}: a VFIO device is re-registered with its descriptors ({handoff:?})"),
                    ))
                }
            };
            let fds = vfio::shared::DeviceFds { address: addr, device, iommu };
            let (p, hal, arch) = adopt_vfio(fds, &shared.cfg.vfio.sysfs)
                .map_err(|e| error(ErrorCode::Device, 0, format!("adopting {addr}: {e}")))?;
            (Backend::Vfio(p), hal, arch, addr.to_string())
        }
        DeviceSpec::Sim { arch, index } => {
            let name = format!("sim:shared:{arch}:{index}");
            let arch = Arch::by_name(arch).map_err(|e| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if shared.cfg.sim_host.is_none() || *index as usize >= MAX_CLIENTS {
                return Err(error(
                    ErrorCode::NoSuchDevice,
                    0,
                    format!("{name} ended with the broker that simulated it"),
                ));
            }
            return open_hosted(shared, st, spec, arch, *index, None);
        }
    };
    let index = st.devices.len() as u32;
    st.devices.push(Device::new(index, name, spec.clone(), arch, backend, hal));
    start_adoption(shared, st, index as usize)?;
    Ok(index as usize)
}

/// A VFIO device a previous broker opened, from its descriptors: this broker's handle on it,
/// its own IOVAs in the lower half (the previous broker's mappings there unmapped first).
pub(super) fn adopt_vfio(
    fds: vfio::shared::DeviceFds,
    sysfs: &vfio::Sysfs,
) -> Result<(Arc<vfio::VfioPlatform>, hal::Device, &'static Arch), OpenVfioError> {
    let f = sysfs.function(fds.address)?;
    let arch =
        Arch::by_pci_id(f.vendor, f.device).ok_or(OpenVfioError::NotNeuron { vendor: f.vendor, device: f.device })?;
    let w = broker_window(arch);
    let window = vfio::IovaRange::with_len(w.start, w.end - w.start)
        .ok_or(OpenVfioError::Vfio(vfio::Error::BadHandoff("an empty broker window".into())))?;
    let p = Arc::new(vfio::VfioPlatform::from_fds(fds, window)?);
    // The previous broker's dummy ring and bounce buffers: its pages stay pinned until unmapped.
    if let Err(e) = p.device().dma().unmap_raw(w.start, w.end - w.start) {
        tracing::debug!(%e, "unmapping the previous broker's IOVAs");
    }
    let hal = hal::Device::open(p.clone(), hal::DeviceOptions::default())?;
    hal.prepare_reclaim()?;
    Ok((p, hal, arch))
}
