//! Opening the device a spec names: a simulated device in this process or in its own host
//! process, a VFIO device through iommufd (or no-IOMMU mode); each brought up once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker_client::protocol::{DeviceSpec, ErrorCode, Reply};
use csr_maps::Arch;

use super::config::{broker_window, host_socket, sim_options, MAX_CLIENTS};
use super::device::{Backend, Device};
use super::reply::error;
use super::settle::start_adoption;
use super::state::{Shared, State};
use select::shared::BrokerVfio;

/// Open (or find) the device `spec` names.
pub(super) fn device_for(shared: &Arc<Shared>, st: &mut State, spec: &DeviceSpec) -> Result<usize, Reply> {
    if let Some(i) = st.devices.iter().position(|d| &d.spec == spec) {
        return Ok(i);
    }
    match spec {
        DeviceSpec::Sim { arch, index } => {
            let arch = Arch::by_name(arch).map_err(|e| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if *index as usize >= MAX_CLIENTS {
                return Err(error(
                    ErrorCode::NoSuchDevice,
                    0,
                    format!("sim:shared:{} has 16 devices at most", arch.name),
                ));
            }
            if let Some(exe) = &shared.cfg.sim_host {
                return open_hosted(shared, st, spec, arch, *index, Some(exe));
            }
            let mut cfg = sim::SimConfig::new(arch);
            if let Some(b) = shared.cfg.sim_hbm_bytes {
                cfg = cfg.hbm_bytes(b);
            }
            let s = sim::SimDevice::new(cfg).map_err(|e| error(ErrorCode::Device, 0, e.to_string()))?;
            let dev = bring_up(Arc::new(s.clone()), sim_options(&shared.cfg))
                .map_err(|e| error(ErrorCode::Device, 0, e.to_string()))?;
            let index = st.devices.len() as u32;
            let name = format!("sim:shared:{}#{index}", arch.name);
            st.devices.push(Device::new(index, name, spec.clone(), arch, Backend::Sim(s), dev));
            tracing::info!(device = index, arch = arch.name, "simulated device created");
            Ok(index as usize)
        }
        DeviceSpec::Pci(bdf) => {
            let addr: vfio::PciAddress =
                bdf.parse().map_err(|e: vfio::Error| error(ErrorCode::NoSuchDevice, 0, e.to_string()))?;
            if let Some(i) = st.devices.iter().position(|d| {
                matches!(&d.spec, DeviceSpec::Pci(b)
                if b.parse::<vfio::PciAddress>().ok() == Some(addr))
            }) {
                return Ok(i);
            }
            let index = st.devices.len() as u32;
            let (p, dev, arch) = open_vfio(addr, &shared.cfg.vfio).map_err(|e| {
                // One opener per device cdev: processes still holding it (a previous
                // broker's clients) keep it until they exit (docs/sharing.md).
                // Held: they re-register it with this broker shortly (Rejoin: it is adopted
                // then), or keep it until they exit (their broker stopped and revoked their
                // leases). Adopting: a client retries for a while.
                let held = matches!(&e, OpenVfioError::Vfio(vfio::Error::Ioctl { op: "VFIO_DEVICE_BIND_IOMMUFD", .. }));
                if held {
                    let hint = "; it is still held by processes a previous broker served: they re-register it with this broker, or keep it until they exit";
                    return error(ErrorCode::Adopting, 0, format!("{addr}: {e}{hint}"));
                }
                error(ErrorCode::Device, 0, format!("{addr}: {e}"))
            })?;
            st.devices.push(Device::new(index, addr.to_string(), spec.clone(), arch, Backend::Vfio(p), dev));
            tracing::info!(device = index, %addr, arch = arch.name, "VFIO device opened");
            Ok(index as usize)
        }
    }
}

/// Open simulated device `index` of `arch` in its host process. A host that answers is a
/// device a previous broker served, still used by its clients: it is adopted (not brought up
/// again; leases wait for its clients to re-register). Else, with `spawn` (the `neuron-vfio`
/// executable), a new host is started and the device brought up; without, there is no such
/// device.
pub(super) fn open_hosted(
    shared: &Arc<Shared>,
    st: &mut State,
    spec: &DeviceSpec,
    arch: &'static Arch,
    index: u32,
    spawn: Option<&PathBuf>,
) -> Result<usize, Reply> {
    let socket = host_socket(&shared.cfg.socket, arch, index);
    let mut live = sim_serve::host::stats(&socket).is_ok();
    let name = format!("sim:shared:{}:{index}", arch.name);
    let failed = |what: &str, e: &dyn std::fmt::Display| error(ErrorCode::Device, 0, format!("{name}: {what}: {e}"));
    let start_host = |exe: &PathBuf| {
        let mut cfg = sim_serve::host::HostConfig::new(arch, &socket);
        cfg.hbm_bytes = shared.cfg.sim_hbm_bytes;
        sim_serve::host::spawn(exe, &cfg).map_err(|e| failed("starting its host", &e))
    };
    if !live {
        let Some(exe) = spawn else {
            return Err(error(ErrorCode::NoSuchDevice, 0, format!("{name} ended with the broker that served it")));
        };
        start_host(exe)?;
    }
    // The broker's handle maps nothing (the host brought the device up and does its reclaims):
    // a small window at the top of the broker's half, clear of the host's own mappings at the
    // bottom of the IOVA space.
    let bw = broker_window(arch);
    let w = bw.end.saturating_sub(1 << 20).max(bw.start)..bw.end;
    let opts = sim_serve::ConnOptions { iova_window: w.clone(), ncs: 0..arch.counts.ncs as usize };
    // A host found live may have lingered out since (start another, when allowed), and one
    // whose previous broker just died may still be cleaning up that broker's connection (its
    // window is refused until then): both pass; bounded.
    let start = Instant::now();
    let stream = loop {
        match sim_serve::host::connect(&socket, &opts) {
            Ok((_, s)) => break s,
            Err(e) if start.elapsed() < Duration::from_secs(3) => {
                tracing::debug!(%e, "connecting to a device host: retrying");
                if let (sim_serve::host::HostError::Connect { .. }, Some(exe)) = (&e, spawn) {
                    start_host(exe)?;
                    // A new host: a fresh device, brought up below.
                    live = false;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Err(e) => return Err(failed("connecting to its host", &e)),
        }
    };
    let uopts = vfio::user::UserOptions {
        iova_window: w,
        irq_vectors: Vec::new(),
        modeled_writes: true,
        location: name.clone(),
        posted_writes: true,
        // Its handle grants memory; it makes no register accesses worth a ring.
        fast_path: false,
    };
    let p: Arc<dyn platform::Platform> = Arc::new(
        vfio::user::VfioUserPlatform::from_stream(stream, uopts).map_err(|e| failed("its vfio-user connection", &e))?,
    );
    // Opened only: its allocator grants the device's memory; the host brought it up.
    let hal = hal::Device::open(p, sim_options(&shared.cfg)).map_err(|e| failed("opening it", &e))?;
    let d = st.devices.len() as u32;
    let name = format!("sim:shared:{}#{d}", arch.name);
    st.devices.push(Device::new(d, name, spec.clone(), arch, Backend::Hosted { socket }, hal));
    tracing::info!(device = d, arch = arch.name, live, "simulated device opened in its host");
    if live {
        start_adoption(shared, st, d as usize)?;
    }
    Ok(d as usize)
}

/// Why the broker could not open a VFIO device.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenVfioError {
    #[error("{0}")]
    Vfio(#[from] vfio::Error),
    #[error("{0}")]
    Hal(#[from] hal::HalError),
    #[error("PCI id {vendor:04x}:{device:04x} is not a Neuron device this broker knows")]
    NotNeuron { vendor: u16, device: u16 },
}

/// Open PCI function `addr` for sharing: through iommufd (the interface whose address space
/// can be handed to other processes; the legacy container cannot), or in no-IOMMU mode when
/// the operator chose it (`NEURON_VFIO_BACKEND=noiommu`) and no IOMMU translates the device.
/// The broker's own DMA stays below the clients' windows ([`broker_window`]). Then the
/// device is brought up once and the dummy ring for reclaims allocated.
pub(super) fn open_vfio(
    addr: vfio::PciAddress,
    settings: &BrokerVfio,
) -> Result<(Arc<vfio::VfioPlatform>, hal::Device, &'static Arch), OpenVfioError> {
    let f = settings.sysfs.function(addr)?;
    let arch =
        Arch::by_pci_id(f.vendor, f.device).ok_or(OpenVfioError::NotNeuron { vendor: f.vendor, device: f.device })?;
    let w = broker_window(arch);
    let opts = vfio::OpenOptions {
        backend: vfio::Backend::Iommufd,
        sysfs: settings.sysfs.clone(),
        dev: settings.dev.clone(),
        iova_window: vfio::IovaRange::with_len(w.start, w.end - w.start),
        allow_noiommu: settings.allow_noiommu,
    };
    let p = Arc::new(vfio::VfioPlatform::open(addr, &opts)?);
    let dev = bring_up(p.clone(), hal::DeviceOptions::default())?;
    Ok((p, dev, arch))
}

/// The broker's driver handle on a device it owns: opened, brought up once (every engine and
/// queue), and the dummy ring for reclaims allocated.
pub(super) fn bring_up(p: Arc<dyn platform::Platform>, opts: hal::DeviceOptions) -> hal::Result<hal::Device> {
    let dev = hal::Device::open(p, opts)?;
    dev.init()?;
    dev.prepare_reclaim()?;
    Ok(dev)
}
