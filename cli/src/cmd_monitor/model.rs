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
    pub pid: u64,
    pub device: u64,
    pub nc: u64,
    pub nc_version: u64,
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
    pub pid: u64,
    pub device: u64,
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
pub fn decode_health(regs: &[csr_maps::RegInstance], vals: &[u64], pid: u64, device: u64) -> DeviceHealth {
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
        fw_api_version: val(0),
        health_status: val(1),
        heartbeat: field(2, "heartbeat"),
        sram_uncorrected: field(3, "uncorrected"),
        sram_corrected: field(3, "corrected"),
        hbm_repair_state: field(4, "state"),
        hbm: (5..regs.len().min(vals.len())).map(|i| (field(i, "repairable"), field(i, "uncorrectable"))).collect(),
    }
}

/// [`DeviceHealth`] of every device of every process serving a debug endpoint (processes
/// that do not answer are left out).
pub(super) fn collect_health() -> Vec<DeviceHealth> {
    let mut out = Vec::new();
    for (pid, _, path) in runtime::debug_endpoint::discover(&counters::shm_dir()) {
        let Ok(mut r) = crate::follow::Remote::connect_to(pid, &path, 0) else { continue };
        for d in 0..r.devices {
            if d > 0 && r.select(d).is_err() {
                break;
            }
            let Ok(regs) = health_regs(r.arch) else { continue };
            let refs: Vec<&csr_maps::RegInstance> = regs.iter().collect();
            match r.read_regs(&refs) {
                Ok(vals) => out.push(decode_health(&regs, &vals, pid as u64, d as u64)),
                Err(e) => tracing::debug!("health of {pid}/{d}: {e}"),
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

pub(super) fn delta_nc(now: &NcCounters, before: Option<&NcCounters>, pid: u64, period_ns: u64) -> NcReport {
    let zero = NcCounters::default();
    let b = before.unwrap_or(&zero);
    let d = |x: u64, y: u64| x.saturating_sub(y);
    let hist: [u64; LAT_BUCKETS] = std::array::from_fn(|i| d(now.latency[i], b.latency[i]));
    let executions = d(now.executions, b.executions);
    let lat_sum = d(now.latency_sum_ns, b.latency_sum_ns);
    NcReport {
        pid,
        device: now.device,
        nc: now.nc,
        nc_version: now.nc_version,
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
/// this period counts from zero).
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
            r.ncs.push(delta_nc(nc, prev.and_then(|p| p.ncs.get(i)), s.pid, period_ns));
        }
    }
    r
}

/// Snapshots of every live segment in the counters directory.
pub(super) fn sample() -> BTreeMap<PathBuf, Snapshot> {
    let dir = counters::shm_dir();
    counters::discover(&dir).into_iter().map(|rd| (rd.path().to_path_buf(), rd.snapshot())).collect()
}

pub(super) fn device_label(pid: u64, device: u64) -> String {
    format!("{pid}/{device}")
}
