//! The node's Neuron devices and their cores as the broker sees them: which devices the plugin
//! serves, their logical NeuronCores, whether each device is reachable, and which process leases
//! which cores (`Query`). A thread keeps a [`Snapshot`] fresh; the plugin reads it.

use broker_client::client::{Connect, Session};
use broker_client::protocol::DeviceInfo;
use broker_client::{DeviceSpec, Role};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Why the device set could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("device selection `{0}`: expected sim:shared[:ARCH[:N]] (N 1..16) or a PCI address")]
    BadSelection(String),
    #[error("arch `{arch}`: {problem}")]
    Arch { arch: String, problem: String },
    #[error("logical NeuronCore size {lnc} does not divide {arch}'s cores or exceeds its maximum")]
    BadLnc { arch: String, lnc: u32 },
    #[error("broker: {0}")]
    Broker(#[from] broker_client::ClientError),
}

/// The devices a plugin serves: one selection, as `NEURON_VFIO_DEVICE` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The selection's text (what a container's `NEURON_VFIO_DEVICE` is set to).
    pub text: String,
    /// Its devices in order (the runtime numbers logical cores across them in this order).
    pub specs: Vec<DeviceSpec>,
}

impl Selection {
    /// `sim:shared[:ARCH[:N]]` (devices 0..N of the host's shared simulated devices) or one
    /// PCI address (a VFIO device reached through the broker).
    pub fn parse(s: &str) -> Result<Self, InventoryError> {
        let s = s.trim();
        let bad = || InventoryError::BadSelection(s.to_string());
        let specs = if let Some(rest) = s.strip_prefix("sim:shared") {
            let mut it = rest.split(':');
            if it.next() != Some("") {
                return Err(bad());
            }
            let arch = match it.next() {
                None | Some("") => "sunda".to_string(),
                Some(a) => a.to_string(),
            };
            let n = match it.next() {
                None => 1,
                Some(n) => n.parse::<u32>().ok().filter(|n| (1..=16).contains(n)).ok_or_else(bad)?,
            };
            if it.next().is_some() {
                return Err(bad());
            }
            (0..n).map(|index| DeviceSpec::Sim { arch: arch.clone(), index }).collect()
        } else if s.len() >= 7 && s.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') && s.contains(':') {
            vec![DeviceSpec::Pci(s.to_string())]
        } else {
            return Err(bad());
        };
        Ok(Self { text: s.to_string(), specs })
    }
}

/// One device of the selection, once attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    /// Its index in the selection.
    pub index: u32,
    /// The broker's number for it (what `Query` reports it under).
    pub broker_device: u32,
    pub arch: String,
    /// Physical NeuronCores.
    pub ncs: u32,
    /// Physical cores per logical core.
    pub lnc: u32,
    /// The global logical index of its first logical core (cores are numbered across the
    /// selection's devices in order, as the runtime numbers `NEURON_RT_VISIBLE_CORES`).
    pub first_logical: u32,
}

impl DeviceEntry {
    /// Logical cores on this device.
    pub fn logical(&self) -> u32 {
        self.ncs / self.lnc
    }
    /// Global logical indices of this device's logical cores.
    pub fn logical_range(&self) -> std::ops::Range<u32> {
        self.first_logical..self.first_logical + self.logical()
    }
}

/// A process's lease, in global logical cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub command: String,
    pub device: u32,
    pub cores: std::ops::Range<u32>,
}

/// What the broker said at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The devices (empty until the first attach succeeded).
    pub devices: Vec<DeviceEntry>,
    /// Per device of `devices`: whether the broker answers for it.
    pub healthy: Vec<bool>,
    /// Every lease on the selection's devices.
    pub holders: Vec<Holder>,
}

impl Snapshot {
    /// Every global logical core of the selection.
    pub fn cores(&self) -> impl Iterator<Item = u32> + '_ {
        self.devices.iter().flat_map(DeviceEntry::logical_range)
    }
    /// The device a global logical core is on.
    pub fn device_of(&self, core: u32) -> Option<&DeviceEntry> {
        self.devices.iter().find(|d| d.logical_range().contains(&core))
    }
    /// The process leasing a global logical core.
    pub fn holder_of(&self, core: u32) -> Option<&Holder> {
        self.holders.iter().find(|h| h.cores.contains(&core))
    }
    /// Whether device `index` is reachable.
    pub fn device_healthy(&self, index: u32) -> bool {
        self.healthy.get(index as usize).copied().unwrap_or(false)
    }
}

/// How the inventory reaches the broker.
#[derive(Debug, Clone)]
pub struct BrokerAccess {
    pub socket: PathBuf,
    /// Start a broker when none listens (a shared simulated device; a VFIO device's broker is
    /// the operator's service).
    pub spawn: bool,
    /// The logical NeuronCore size (None: the arch's default).
    pub lnc: Option<u32>,
}

/// A tool session attached to every device of the selection.
pub struct Attachment {
    session: Session,
    devices: Vec<DeviceEntry>,
}

impl Attachment {
    /// Connect to the broker as a tool and attach each device (a shared simulated device is
    /// created by its first attachment).
    pub fn open(sel: &Selection, access: &BrokerAccess) -> Result<Self, InventoryError> {
        let mut c = Connect::new(Role::Tool);
        c.socket = access.socket.clone();
        c.spawn = access.spawn;
        c.command = "neuron-vfio-k8s-device-plugin".into();
        let session = Session::connect(&c)?;
        let mut devices = Vec::new();
        let mut first_logical = 0;
        for (index, spec) in sel.specs.iter().enumerate() {
            let a = session.attach(spec.clone())?;
            let arch = csr_maps::Arch::by_name(&a.arch)
                .map_err(|e| InventoryError::Arch { arch: a.arch.clone(), problem: e.to_string() })?;
            let lnc = arch
                .lnc(access.lnc)
                .ok_or_else(|| InventoryError::BadLnc { arch: a.arch.clone(), lnc: access.lnc.unwrap_or(0) })?
                as u32;
            let d = DeviceEntry {
                index: index as u32,
                broker_device: a.device,
                arch: a.arch,
                ncs: a.ncs,
                lnc,
                first_logical,
            };
            first_logical += d.logical();
            devices.push(d);
        }
        Ok(Self { session, devices })
    }

    /// The broker's view now.
    pub fn snapshot(&self) -> Result<Snapshot, InventoryError> {
        let info = self.session.query()?;
        Ok(snapshot_of(&self.devices, &info))
    }
}

/// The snapshot the broker's `Query` answer gives for `devices`.
pub fn snapshot_of(devices: &[DeviceEntry], info: &[DeviceInfo]) -> Snapshot {
    let mut healthy = Vec::new();
    let mut holders = Vec::new();
    for d in devices {
        let found = info.iter().find(|i| i.device == d.broker_device && i.ncs == d.ncs);
        healthy.push(found.is_some());
        for c in found.map(|i| i.clients.as_slice()).unwrap_or_default() {
            if c.count == 0 {
                continue;
            }
            // Physical cores first..first+count on the device, as logical cores (a lease is
            // aligned to logical cores; any partial one counts as held).
            let lo = c.first / d.lnc;
            let hi = (c.first + c.count).div_ceil(d.lnc);
            holders.push(Holder {
                pid: c.pid,
                command: c.command.clone(),
                device: d.index,
                cores: d.first_logical + lo..d.first_logical + hi.min(d.logical()),
            });
        }
    }
    Snapshot { devices: devices.to_vec(), healthy, holders }
}

/// Keep `tx` fresh: attach, then query every `period`; when the broker cannot be reached, the
/// snapshot keeps the devices with every one unhealthy, and the attachment is retried every
/// second. Runs until `stop` is set.
pub fn watch(
    sel: Selection,
    access: BrokerAccess,
    period: Duration,
    tx: tokio::sync::watch::Sender<Arc<Snapshot>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut att: Option<Attachment> = None;
    let mut last_err = String::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if att.is_none() {
            match Attachment::open(&sel, &access) {
                Ok(a) => {
                    tracing::info!(devices = a.devices.len(), "attached to the broker's devices");
                    att = Some(a);
                    last_err.clear();
                }
                Err(e) => {
                    let msg = e.to_string();
                    if msg != last_err {
                        tracing::warn!("cannot reach the devices through the broker: {msg}");
                        last_err = msg;
                    }
                    mark_unhealthy(&tx);
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            }
        }
        let snap = match att.as_ref().map(Attachment::snapshot) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::warn!("the broker stopped answering: {e}; the devices are unhealthy until it does");
                att = None;
                mark_unhealthy(&tx);
                continue;
            }
            None => continue,
        };
        tx.send_if_modified(|cur| {
            if **cur == snap {
                false
            } else {
                *cur = Arc::new(snap);
                true
            }
        });
        std::thread::sleep(period);
    }
}

fn mark_unhealthy(tx: &tokio::sync::watch::Sender<Arc<Snapshot>>) {
    tx.send_if_modified(|cur| {
        if cur.healthy.iter().all(|h| !h) && cur.holders.is_empty() {
            return false;
        }
        let mut s = (**cur).clone();
        s.healthy.iter_mut().for_each(|h| *h = false);
        s.holders.clear();
        *cur = Arc::new(s);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_parse_as_the_runtime_names_them() {
        let s = Selection::parse("sim:shared:cayman:2").expect("parse");
        assert_eq!(
            s.specs,
            vec![
                DeviceSpec::Sim { arch: "cayman".into(), index: 0 },
                DeviceSpec::Sim { arch: "cayman".into(), index: 1 }
            ]
        );
        assert_eq!(
            Selection::parse("sim:shared").expect("parse").specs,
            vec![DeviceSpec::Sim { arch: "sunda".into(), index: 0 }]
        );
        assert_eq!(
            Selection::parse("0000:00:1e.0").expect("parse").specs,
            vec![DeviceSpec::Pci("0000:00:1e.0".into())]
        );
        for bad in ["sim", "sim:shared:cayman:0", "sim:shared:cayman:17", "sim:sharedx", "sim:shared:a:1:2", "/dev/x"] {
            assert!(Selection::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn leases_become_logical_cores_across_devices() {
        let devs: Vec<DeviceEntry> = (0..2)
            .map(|i| DeviceEntry {
                index: i,
                broker_device: 10 + i,
                arch: "cayman".into(),
                ncs: 8,
                lnc: 2,
                first_logical: 4 * i,
            })
            .collect();
        let client = |pid, first, count| broker_client::protocol::ClientInfo {
            pid,
            command: format!("p{pid}"),
            runtime_version: String::new(),
            first,
            count,
            hbm_bytes: 0,
        };
        let info = vec![DeviceInfo {
            device: 11,
            name: "sim:shared:cayman#1".into(),
            arch: "cayman".into(),
            ncs: 8,
            hbm_granted: 0,
            iova_windows: 0,
            iommu_mappings: 0,
            collectives: 0,
            adopting: false,
            clients: vec![client(7, 2, 4), client(8, 0, 0)],
        }];
        let s = snapshot_of(&devs, &info);
        assert_eq!(s.healthy, vec![false, true]);
        assert_eq!(s.holders.len(), 1);
        assert_eq!(s.holders[0].cores, 5..7);
        assert_eq!(s.holder_of(6).map(|h| h.pid), Some(7));
        assert_eq!(s.holder_of(4), None);
        assert_eq!(s.device_of(7).map(|d| d.index), Some(1));
        assert_eq!(s.cores().count(), 8);
    }
}
