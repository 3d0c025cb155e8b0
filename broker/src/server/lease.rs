//! Leases of cores (with the data path to the device) and grants of device memory, and the
//! check that a client may use the firmware mailbox.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use broker_client::protocol::{ErrorCode, Reply, Role, Want};

use super::config::iova_window;
use super::device::{Backend, DataPath, Device};
use super::ops::DeviceOps;
use super::reply::{error, nc_range, not_attached};
use super::state::{adopting, attached, State};

/// The broker's handle on device `device` for client `me`'s use of the firmware mailbox: the
/// client must hold a lease there and, for a reset (`mask`), every NC of the mask. The
/// mailbox is used after the tables' lock is released; the handle serializes it with the
/// broker's own uses (reclaims) and every other client's.
pub(super) fn mailbox_user(st: &State, me: u64, device: u32, mask: Option<u32>) -> Result<DeviceOps, Reply> {
    let d = attached(st, me, device).ok_or_else(|| not_attached(device))?;
    let dev = &st.devices[d];
    let (first, count) =
        dev.client_ncs(me).ok_or_else(|| error(ErrorCode::Invalid, 0, "the firmware mailbox goes with a lease"))?;
    if mask == Some(0) {
        return Err(error(ErrorCode::Invalid, 0, "a reset of no NC"));
    }
    if let Some(mask) = mask {
        let mine = (first..first + count).fold(0u64, |m, nc| m | 1u64 << nc);
        if u64::from(mask) & !mine != 0 {
            let other = (0..32u32).find(|n| mask & (1 << n) != 0 && mine & (1u64 << n) == 0).unwrap_or(0);
            let owner = dev.leases.get(other as usize).copied().flatten();
            let owner_pid = owner.and_then(|o| st.clients.get(&o)).map_or(0, |c| c.pid);
            return Err(error(
                ErrorCode::CoresUnavailable,
                owner_pid,
                format!("reset of NC mask {mask:#x}: this process leases {}", nc_range(first, count)),
            ));
        }
    }
    Ok(dev.ops())
}

pub(super) fn lease(st: &mut State, me: u64, device: u32, want: Want, lnc: u8) -> (Reply, Vec<OwnedFd>) {
    let Some(d) = attached(st, me, device) else { return (not_attached(device), Vec::new()) };
    if st.clients.get(&me).is_some_and(|c| c.role == Role::Tool) {
        return (error(ErrorCode::Invalid, 0, "a tool client leases no cores"), Vec::new());
    }
    let pids: HashMap<u64, u32> = st.clients.iter().map(|(k, c)| (*k, c.pid)).collect();
    let dev = &mut st.devices[d];
    if dev.client_ncs(me).is_some() {
        return (error(ErrorCode::AlreadyLeased, 0, format!("already holding cores on {}", dev.name)), Vec::new());
    }
    if dev.adopting {
        return (adopting(dev), Vec::new());
    }
    let phys = dev.leases.len() as u32;
    let k = u32::from(lnc);
    if k == 0 || !phys.is_multiple_of(k) {
        return (
            error(ErrorCode::Invalid, 0, format!("{} has no logical cores of {lnc} physical cores", dev.name)),
            Vec::new(),
        );
    }
    // Logical cores: `n` of them, logical `l` is physical `l·k .. (l+1)·k`.
    let n = phys / k;
    let free = |dev: &Device, l: u32| dev.leases[(l * k) as usize..((l + 1) * k) as usize].iter().all(Option::is_none);
    let range = match want {
        Want::All => Some((0, n)),
        Want::Count(0) | Want::Range { count: 0, .. } => {
            return (error(ErrorCode::Invalid, 0, "a lease of 0 cores"), Vec::new());
        }
        Want::Count(c) if c > n => None,
        Want::Count(c) => (0..=n - c).find(|&f| (f..f + c).all(|l| free(dev, l))).map(|f| (f, c)),
        Want::Range { first, count } => {
            if first.checked_add(count).is_none_or(|e| e > n) {
                return (
                    error(
                        ErrorCode::Invalid,
                        0,
                        format!("{} is beyond {}'s {n} cores", nc_range(first, count), dev.name),
                    ),
                    Vec::new(),
                );
            }
            Some((first, count))
        }
    };
    let requested = match want {
        Want::All => nc_range(0, n),
        Want::Count(c) => format!("{c} cores"),
        Want::Range { first, count } => nc_range(first, count),
    };
    let conflict = match range {
        Some((f, c)) => dev.leases[(f * k) as usize..((f + c) * k) as usize].iter().flatten().next().copied(),
        None => dev.leases.iter().flatten().next().copied(),
    };
    let (first, count) = match (range, conflict) {
        (Some((f, c)), None) => (f * k, c * k),
        _ => {
            let owner = conflict.and_then(|o| pids.get(&o).copied()).unwrap_or(0);
            let available = (0..n).filter(|&l| free(dev, l)).count();
            return (
                error(
                    ErrorCode::CoresUnavailable,
                    owner,
                    format!("NeuronCore(s) not available - Requested:{requested} Available:{available}"),
                ),
                Vec::new(),
            );
        }
    };
    for l in &mut dev.leases[first as usize..(first + count) as usize] {
        *l = Some(me);
    }
    let slot = dev.slots.iter().position(|s| *s == Some(me)).unwrap_or(0);
    let window = iova_window(dev.arch, slot);
    match open_path(dev, window, first as usize..(first + count) as usize) {
        Ok((path, fd, id)) => {
            dev.paths.insert(me, path);
            (Reply::Leased { device, first, count, fds: 1, path: id }, vec![fd])
        }
        Err(e) => {
            for l in &mut dev.leases[first as usize..(first + count) as usize] {
                *l = None;
            }
            (error(ErrorCode::Device, 0, format!("data path: {e}")), Vec::new())
        }
    }
}

/// Start serving the data path of a client leasing `ncs`; returns it and the client's end.
/// A VFIO device's descriptors are sent on the connection before the client has it
/// ([`vfio::shared::send_device`]; they wait in the socket).
pub(super) fn open_path(
    dev: &Device,
    window: std::ops::Range<u64>,
    ncs: std::ops::Range<usize>,
) -> std::io::Result<(DataPath, OwnedFd, u64)> {
    let (mine, theirs) = UnixStream::pair()?;
    let shut = mine.try_clone()?;
    match &dev.backend {
        Backend::Sim(s) => {
            let s = s.clone();
            let opts = sim_serve::ConnOptions { iova_window: window, ncs };
            let thread = std::thread::Builder::new().name("broker-datapath".into()).spawn(move || {
                if let Err(e) = sim_serve::serve_connection(s, mine, opts) {
                    tracing::info!(%e, "data path ended");
                }
            })?;
            Ok((
                DataPath { shut: Some(shut), thread: Some(thread), window: None, host: None },
                OwnedFd::from(theirs),
                0,
            ))
        }
        Backend::Vfio(p) => {
            let fds = p.device().share().map_err(std::io::Error::other)?;
            vfio::shared::send_device(&mine, &fds).map_err(std::io::Error::other)?;
            let window = Some((p.clone(), window));
            Ok((DataPath { shut: Some(shut), thread: None, window, host: None }, OwnedFd::from(theirs), 0))
        }
        Backend::Hosted { socket } => {
            drop((mine, shut, theirs));
            let opts = sim_serve::ConnOptions { iova_window: window, ncs };
            let (id, stream) = sim_serve::host::connect(socket, &opts).map_err(std::io::Error::other)?;
            let path = DataPath { shut: None, thread: None, window: None, host: Some((socket.clone(), id)) };
            Ok((path, OwnedFd::from(stream), id))
        }
    }
}

pub(super) fn alloc_hbm(st: &mut State, me: u64, device: u32, chan: u32, len: u64) -> Reply {
    let Some(d) = attached(st, me, device) else { return not_attached(device) };
    st.next_handle += 1;
    let handle = st.next_handle;
    let dev = &mut st.devices[d];
    if dev.client_ncs(me).is_none() {
        return error(ErrorCode::Invalid, 0, "device memory goes with a lease: lease cores first");
    }
    if chan as usize >= dev.hal.allocator().channels() || len == 0 {
        return error(ErrorCode::Invalid, 0, format!("no HBM channel {chan} of {len} bytes on {}", dev.name));
    }
    // A naturally aligned block: the client's allocator carves it like a whole channel.
    let Some(size) = len.checked_next_power_of_two() else {
        return error(ErrorCode::OutOfMemory, 0, format!("{len} bytes"));
    };
    match dev.hal.allocator().alloc(chan as usize, size, size) {
        Ok(b) => {
            let addr = b.addr();
            dev.hbm.insert(handle, (me, b));
            Reply::Hbm { handle, addr, len: size }
        }
        Err(e) => error(ErrorCode::OutOfMemory, 0, e.to_string()),
    }
}
