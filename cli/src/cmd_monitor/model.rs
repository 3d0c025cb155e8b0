//! The model: per-NC and per-device figures over one period, from two samples of the
//! shared-memory counters, and the device health read through the debug endpoints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use runtime::counters::{self, NcCounters, Snapshot, LAT_BUCKETS};

use crate::report::CliError;

/// One NC's figures over one period.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NcReport {
    /// The process that owns the NC (whose segment the figures come from).
    pub pid: u64,
    /// The device's identity ([`runtime::counters::DeviceId::identity`]): the same in every
    /// process using the device.
    pub device_id: String,
    /// The device's index in the owning process's runtime.
    pub device: u64,
    /// The device's index on this host (neuron-monitor's `neuron_device_index`):
    /// [`host_index`].
    pub neuron_device: u64,
    /// The NC's index on its device (device-local).
    pub nc: u64,
    pub nc_version: u64,
    /// The owning process's logical NeuronCore size (physical NCs per logical one; 0 read
    /// as 1): listings name its logical core `nc / lnc`.
    pub lnc: u64,
    pub utilization: f64,
    pub executions: u64,
    pub executions_total: u64,
    pub failed: u64,
    pub models: u64,
    pub mem_model: u64,
    pub mem_tensors: u64,
    /// Latency percentiles over the period (µs, upper bound of the histogram bucket).
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub mean_us: Option<f64>,
    /// Errors over the period, [`ErrorKind::ALL`] order.
    pub errors: [u64; 7],
    /// Errors since the runtime started.
    pub errors_total: [u64; 7],
    /// Collectives barrier warnings over the period (an execution's barrier wait passed the
    /// warning threshold; docs/faults.md), and since the runtime started.
    pub barrier_warnings: u64,
    pub barrier_warnings_total: u64,
    /// The period's host latency histogram ([`counters::bucket_upper_us`] buckets).
    pub latency_hist: [u64; LAT_BUCKETS],
    /// The period's device-time histogram (same buckets).
    pub device_hist: [u64; LAT_BUCKETS],
}

/// One runtime process's figures over one period: its executions each counted once,
/// whatever NCs they span (the NC rows count an execution on each of its NCs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcReport {
    pub pid: u64,
    pub devices: u64,
    pub host_tensor_bytes: u64,
    pub executions: u64,
    pub failed: u64,
    /// Errors over the period, [`ErrorKind::ALL`](runtime::counters::ErrorKind::ALL) order.
    pub errors: [u64; 7],
    pub executions_total: u64,
    pub failed_total: u64,
    pub errors_total: [u64; 7],
}

/// One report: every NC of every publishing process.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    pub timestamp_ns: u64,
    pub period_ns: u64,
    pub ncs: Vec<NcReport>,
    /// (pid, devices, host DMA bytes held by tensors).
    pub processes: Vec<(u64, u64, u64)>,
    /// Every publishing runtime process, with its own execution counts.
    pub runtimes: Vec<ProcReport>,
    /// Firmware and ECC figures of the devices whose owners serve a debug endpoint.
    pub health: Vec<DeviceHealth>,
}

/// Firmware heartbeat and ECC counters of one device: the misc RAM registers the firmware
/// maintains (kmod `neuron_fw_io.h`), read through the owning process's debug endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceHealth {
    /// The process whose debug endpoint the registers were read through.
    pub pid: u64,
    /// The device's index in that process's runtime.
    pub device: u64,
    /// The device's identity (as [`NcReport::device_id`]).
    pub device_id: String,
    /// Its index on this host ([`host_index`]).
    pub neuron_device: u64,
    pub fw_api_version: u64,
    pub health_status: u64,
    /// `health_seq.heartbeat` (8 bits; the firmware advances it).
    pub heartbeat: u64,
    pub sram_corrected: u64,
    pub sram_uncorrected: u64,
    /// Per HBM stack: (repairable, uncorrectable).
    pub hbm: Vec<(u64, u64)>,
    pub hbm_repair_state: u64,
}

/// The registers [`DeviceHealth`] is made of, in the order [`decode_health`] takes them.
pub fn health_regs(arch: &'static csr_maps::Arch) -> Result<Vec<csr_maps::RegInstance>, CliError> {
    let mut names: Vec<String> = ["fw_api_version", "health_status", "health_seq", "sram_ecc", "hbm_repair_state"]
        .iter()
        .map(|n| format!("misc_ram.{n}"))
        .collect();
    names.extend((0..arch.counts.hbm_stacks).map(|k| format!("misc_ram.hbm_ecc[{k}]")));
    names.iter().map(|n| Ok(arch.resolve(n)?)).collect()
}

/// The figures from the values of [`health_regs`].
pub fn decode_health(
    regs: &[csr_maps::RegInstance],
    vals: &[u64],
    pid: u64,
    device: u64,
    device_id: &str,
) -> DeviceHealth {
    let field = |i: usize, f: &str| -> u64 {
        match (regs.get(i), vals.get(i)) {
            (Some(r), Some(v)) => r.decode(*v).into_iter().find(|(n, _)| *n == f).map(|(_, x)| x).unwrap_or(0),
            _ => 0,
        }
    };
    let val = |i: usize| vals.get(i).copied().unwrap_or(0);
    DeviceHealth {
        pid,
        device,
        device_id: device_id.to_string(),
        neuron_device: host_index(device_id, device),
        fw_api_version: val(0),
        health_status: val(1),
        heartbeat: field(2, "heartbeat"),
        sram_uncorrected: field(3, "uncorrected"),
        sram_corrected: field(3, "corrected"),
        hbm_repair_state: field(4, "state"),
        hbm: (5..regs.len().min(vals.len())).map(|i| (field(i, "repairable"), field(i, "uncorrectable"))).collect(),
    }
}

/// [`DeviceHealth`] of every device some process serving a debug endpoint drives, once per
/// device (a shared device is read through the first of its processes that answers;
/// processes that do not answer are left out).
pub(super) fn collect_health() -> Vec<DeviceHealth> {
    let mut out: Vec<DeviceHealth> = Vec::new();
    for (pid, _, path) in runtime::debug_endpoint::discover(&counters::shm_dir()) {
        let Ok(mut r) = crate::follow::Remote::connect_to(pid, &path, 0) else { continue };
        for d in 0..r.devices {
            if d > 0 && r.select(d).is_err() {
                break;
            }
            let id = r.label();
            if out.iter().any(|h| h.device_id == id) {
                continue;
            }
            let Ok(regs) = health_regs(r.arch) else { continue };
            let refs: Vec<&csr_maps::RegInstance> = regs.iter().collect();
            match r.read_regs(&refs) {
                Ok(vals) => out.push(decode_health(&regs, &vals, pid as u64, d as u64, &id)),
                Err(e) => tracing::debug!("health of {id} (through pid {pid}): {e}"),
            }
        }
    }
    out
}

/// The latency below which a fraction `q` of the period's executions finished (bucket upper
/// bounds; the open last bucket reports its lower bound).
pub fn percentile_us(hist: &[u64; LAT_BUCKETS], q: f64) -> Option<u64> {
    let n: u64 = hist.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = ((n as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (b, &c) in hist.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(counters::bucket_upper_us(b).unwrap_or(1 << (LAT_BUCKETS - 2)));
        }
    }
    None
}

pub(super) fn delta_nc(
    now: &NcCounters,
    before: Option<&NcCounters>,
    pid: u64,
    device_id: &str,
    period_ns: u64,
) -> NcReport {
    let zero = NcCounters::default();
    let b = before.unwrap_or(&zero);
    let d = |x: u64, y: u64| x.saturating_sub(y);
    let hist: [u64; LAT_BUCKETS] = std::array::from_fn(|i| d(now.latency[i], b.latency[i]));
    let executions = d(now.executions, b.executions);
    let lat_sum = d(now.latency_sum_ns, b.latency_sum_ns);
    NcReport {
        pid,
        device_id: device_id.to_string(),
        device: now.device,
        neuron_device: host_index(device_id, now.device),
        nc: now.nc,
        nc_version: now.nc_version,
        lnc: 1,
        utilization: if period_ns == 0 { 0.0 } else { (d(now.busy_ns, b.busy_ns) as f64 / period_ns as f64).min(1.0) },
        executions,
        executions_total: now.executions,
        failed: d(now.failed, b.failed),
        models: now.models,
        mem_model: now.mem_model,
        mem_tensors: now.mem_tensors,
        p50_us: percentile_us(&hist, 0.50),
        p99_us: percentile_us(&hist, 0.99),
        mean_us: (executions > 0).then(|| lat_sum as f64 / executions as f64 / 1000.0),
        errors: std::array::from_fn(|k| d(now.errors[k], b.errors[k])),
        errors_total: now.errors,
        barrier_warnings: d(now.barrier_warnings, b.barrier_warnings),
        barrier_warnings_total: now.barrier_warnings,
        latency_hist: hist,
        device_hist: std::array::from_fn(|i| d(now.device_latency[i], b.device_latency[i])),
    }
}

/// The report for the period between `before` and `now` (segments by path; a segment new in
/// this period counts from zero). Each process contributes the NCs it owns: on a shared device
/// the ones it leased, so that every NC of a device is reported once, by its owner. The NCs
/// come sorted by device identity, then NC.
pub fn report(before: &BTreeMap<PathBuf, Snapshot>, now: &BTreeMap<PathBuf, Snapshot>, period_ns: u64) -> Report {
    let mut r = Report {
        timestamp_ns: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0),
        period_ns,
        ..Report::default()
    };
    for (path, s) in now {
        let prev = before.get(path).filter(|p| p.pid == s.pid && p.started_ns == s.started_ns);
        r.processes.push((s.pid, s.devices, s.host_tensor_bytes));
        let zero = Snapshot::default();
        let b = prev.unwrap_or(&zero);
        r.runtimes.push(ProcReport {
            pid: s.pid,
            devices: s.devices,
            host_tensor_bytes: s.host_tensor_bytes,
            executions: s.executions.saturating_sub(b.executions),
            failed: s.failed.saturating_sub(b.failed),
            errors: std::array::from_fn(|k| s.errors[k].saturating_sub(b.errors[k])),
            executions_total: s.executions,
            failed_total: s.failed,
            errors_total: s.errors,
        });
        for (i, nc) in s.ncs.iter().enumerate() {
            let entry = s.device_ids.get(nc.device as usize);
            if entry.is_some_and(|e| !e.owns(nc.nc as usize)) {
                continue;
            }
            let id = entry.map(|e| e.identity.clone()).unwrap_or_else(|| legacy_label(s.pid, nc.device));
            let mut n = delta_nc(nc, prev.and_then(|p| p.ncs.get(i)), s.pid, &id, period_ns);
            n.lnc = s.lnc.max(1);
            r.ncs.push(n);
        }
    }
    r.ncs.sort_by(|a, b| (&a.device_id, a.nc, a.pid).cmp(&(&b.device_id, b.nc, b.pid)));
    r
}

/// One device of a report: its identity and every NC some process owns on it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceView<'a> {
    pub id: &'a str,
    /// Its index on this host ([`host_index`]).
    pub neuron_device: u64,
    pub nc_version: u64,
    /// Its NCs with an owner, by NC.
    pub ncs: Vec<&'a NcReport>,
}

impl DeviceView<'_> {
    /// The processes owning NCs of the device, each with its NCs (ascending pid).
    pub fn clients(&self) -> Vec<(u64, Vec<u64>)> {
        let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for n in &self.ncs {
            out.entry(n.pid).or_default().push(n.nc);
        }
        out.into_iter().collect()
    }
}

impl Report {
    /// The report's devices, one per identity (however many processes own NCs of it), in
    /// identity order.
    pub fn devices(&self) -> Vec<DeviceView<'_>> {
        let mut out: Vec<DeviceView<'_>> = Vec::new();
        for n in &self.ncs {
            match out.iter_mut().find(|d| d.id == n.device_id) {
                Some(d) => d.ncs.push(n),
                None => out.push(DeviceView {
                    id: &n.device_id,
                    neuron_device: n.neuron_device,
                    nc_version: n.nc_version,
                    ncs: vec![n],
                }),
            }
        }
        out.sort_by(|a, b| a.id.cmp(b.id));
        for d in &mut out {
            d.ncs.sort_by_key(|n| (n.nc, n.pid));
        }
        out
    }
}

/// The name of a device in a segment written before segments named their devices: the
/// process and the device's index in its runtime.
pub(super) fn legacy_label(pid: u64, device: u64) -> String {
    format!("{pid}/{device}")
}

/// The index on this host of the device named `id` (neuron-monitor's `neuron_device_index`,
/// neuron-ls's `neuron_device`): `K` for the shared simulated device `sim:shared:ARCH:K`, a
/// PCI device's position among the host's Neuron functions (as `ls` numbers them), else
/// (a simulated device private to its process) its index in that process's runtime.
pub fn host_index(id: &str, runtime_index: u64) -> u64 {
    if let Some(k) = id.strip_prefix("sim:shared:").and_then(|r| r.rsplit(':').next()).and_then(|k| k.parse().ok()) {
        return k;
    }
    static HOST: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        crate::device::neuron_functions(&crate::device::sysfs())
            .map(|fs| fs.iter().map(|f| f.address.to_string()).collect())
            .unwrap_or_default()
    });
    host.iter().position(|b| b == id).map(|p| p as u64).unwrap_or(runtime_index)
}

/// Snapshots of every live segment in the counters directory.
pub(super) fn sample() -> BTreeMap<PathBuf, Snapshot> {
    let dir = counters::shm_dir();
    counters::discover(&dir).into_iter().map(|rd| (rd.path().to_path_buf(), rd.snapshot())).collect()
}
