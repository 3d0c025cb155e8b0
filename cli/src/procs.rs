//! The processes using a device: neuron-ls's `neuron_processes`.
//!
//! Known without a device broker: a private simulated device lives inside the process that
//! opened it (this one, listing it); a PCI device on vfio-pci is used by the processes that
//! hold its VFIO group open (`/proc/PID/fd`). A process whose runtime publishes counters
//! (docs/monitoring.md) runs this project's runtime: its version is ours; others have none
//! (neuron-ls prints "NA").

use std::path::Path;

/// One process using a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Its command line, arguments joined by spaces.
    pub command: String,
    /// The NeuronCores its runtime publishes counters for (runtime order), when known.
    pub cores: Vec<u32>,
    /// The Neuron runtime it runs, if any.
    pub runtime_version: Option<String>,
}

/// Which device, as far as finding its users goes.
#[derive(Debug, Clone, Copy)]
pub enum DeviceUse {
    /// A private simulated device of this process.
    Sim,
    /// A private simulated device of another process (it publishes counters for it).
    PrivateOf(u32),
    /// A PCI function, by its IOMMU group (None: not isolated, no VFIO group to hold).
    Pci { iommu_group: Option<u32> },
    /// A shared simulated device: its processes are the broker's clients.
    Shared,
}

/// This project's runtime version, as `neuron_runtime_version`.
pub fn runtime_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

fn info(pid: u32, segments: &[runtime::counters::Reader]) -> ProcessInfo {
    let seg = segments.iter().find(|r| r.pid() == pid as u64);
    ProcessInfo {
        pid,
        command: crate::host::proc_cmdline(pid as u64),
        cores: seg.map(|r| (0..r.snapshot().ncs.len() as u32).collect()).unwrap_or_default(),
        runtime_version: seg.map(|_| runtime_version()),
    }
}

/// The processes using `dev` (see the module documentation) other than this one, and the clients the device
/// broker lists on the device it names `broker_name` (docs/sharing.md): a process the broker
/// knows carries its leased cores from there.
pub fn device_processes(dev: DeviceUse, broker_name: Option<&str>) -> Vec<ProcessInfo> {
    let segments = runtime::counters::discover(&runtime::counters::shm_dir());
    let mut found: Vec<ProcessInfo> = match dev {
        // This process opened it only to list it.
        DeviceUse::Sim => Vec::new(),
        DeviceUse::PrivateOf(pid) => vec![info(pid, &segments)],
        DeviceUse::Pci { iommu_group: None } | DeviceUse::Shared => Vec::new(),
        DeviceUse::Pci { iommu_group: Some(g) } => {
            let node = select::dev_dir().join("vfio").join(g.to_string());
            holders(Path::new("/proc"), &node).into_iter().map(|pid| info(pid, &segments)).collect()
        }
    };
    for c in broker_name.map(broker_clients).unwrap_or_default() {
        match found.iter_mut().find(|p| p.pid == c.pid) {
            Some(p) => p.cores = c.cores,
            None => found.push(c),
        }
    }
    // The listing process is never one of the device's users (it may hold the broker's
    // connection or the device's group only to look).
    found.retain(|p| p.pid != std::process::id());
    found.sort_by_key(|p| p.pid);
    found
}

/// The simulated devices private to other processes on this host, by the counters their
/// runtimes publish: (identity `sim:PID/INDEX`, arch, pid), in identity order.
pub fn private_sims() -> Vec<(String, &'static csr_maps::Arch, u32)> {
    let me = u64::from(std::process::id());
    let mut out: Vec<(String, &'static csr_maps::Arch, u32)> = Vec::new();
    for seg in runtime::counters::discover(&runtime::counters::shm_dir()) {
        let s = seg.snapshot();
        let Ok(pid) = u32::try_from(s.pid) else { continue };
        if s.pid == me {
            continue;
        }
        for (k, d) in s.device_ids.iter().enumerate() {
            let private = runtime::counters::is_private_sim_identity(&d.identity);
            let arch =
                s.ncs.iter().find(|n| n.device == k as u64).and_then(|n| csr_maps::Arch::by_nc_version(n.nc_version));
            if let (true, Some(arch)) = (private, arch) {
                out.push((d.identity.clone(), arch, pid));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The broker's clients on device `name` (none when no broker runs).
fn broker_clients(name: &str) -> Vec<ProcessInfo> {
    broker_client::client::processes(name)
        .into_iter()
        .map(|p| ProcessInfo {
            pid: p.pid,
            command: p.command,
            cores: p.cores.collect(),
            runtime_version: Some(p.runtime_version).filter(|v| !v.is_empty()),
        })
        .collect()
}

/// Pids under `proc` with an open file descriptor on `node`.
pub fn holders(proc: &Path, node: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(proc) else { return Vec::new() };
    let mut pids: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(proc.join(pid.to_string()).join("fd"))
                .map(|fds| fds.filter_map(|f| f.ok()).any(|f| std::fs::read_link(f.path()).is_ok_and(|t| t == node)))
                .unwrap_or(false)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The logical NeuronCore size the tools show for `arch`: the environment's request where the
/// arch has that size, else its default (`runtime::cores`; a bad request is the runtime's to
/// refuse, the tools still list).
pub(crate) fn shown_lnc(arch: &csr_maps::Arch) -> usize {
    let requested = runtime::env::lnc_request(&|k: &str| std::env::var(k).ok()).ok().flatten();
    runtime::cores::resolve_lnc(arch, requested).or_else(|_| runtime::cores::resolve_lnc(arch, None)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_found_by_their_open_files() {
        let d = std::env::temp_dir().join(format!("nv-procs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let node = d.join("dev-vfio-7");
        std::fs::create_dir_all(d.join("proc/12/fd")).expect("dir");
        std::fs::create_dir_all(d.join("proc/34/fd")).expect("dir");
        std::fs::create_dir_all(d.join("proc/self")).expect("dir");
        std::fs::write(&node, b"").expect("node");
        std::os::unix::fs::symlink(&node, d.join("proc/34/fd/5")).expect("link");
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("proc/12/fd/3")).expect("link");
        assert_eq!(holders(&d.join("proc"), &node), vec![34]);
        assert!(device_processes(DeviceUse::Sim, None).is_empty(), "the listing process is not a user");
        let me = info(std::process::id(), &[]);
        assert!(!me.command.is_empty() && me.runtime_version.is_none());
        assert!(device_processes(DeviceUse::Pci { iommu_group: None }, None).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
