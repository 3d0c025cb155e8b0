//! neuron-monitor's report: one JSON object per line with `neuron_runtime_data` (an entry per
//! application: its metric groups), `system_data`, `instance_info` and
//! `neuron_hardware_info` (field names and meanings: docs/monitoring.md, from AWS's
//! neuron-monitor user guide). Each metric group is collected on its own period (the
//! configuration file's); a report is written whenever a group was collected, carrying the
//! latest collection of every group.
//!
//! The figures come from the same sources as the native format: the counters segments every
//! runtime publishes (`model`), the device ECC registers read through the runtimes' debug
//! endpoints, and the host's `/proc` (`host`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use runtime::counters::{ErrorKind, Snapshot, LAT_BUCKETS};
use serde_json::{json, Map, Value};

use super::config::{MonitorConfig, RtGroup, SysGroup};
use super::model::{collect_health, host_index, legacy_label, percentile_us, report, sample, DeviceHealth, Report};
use crate::host::{self, CpuTimes, MemInfo};

/// The percentiles of `latency_stats`, as (name, quantile).
pub const PERCENTILES: [(&str, f64); 7] =
    [("p0", 0.0), ("p1", 0.01), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p99", 0.99), ("p100", 1.0)];

/// `error_summary` keys, and the [`ErrorKind`]s each sums.
pub fn error_classes() -> [(&'static str, &'static [ErrorKind]); 6] {
    use ErrorKind as K;
    [
        ("generic", &[K::Timeout, K::Other]),
        ("numerical", &[K::Numerical]),
        ("transient", &[]),
        ("model", &[]),
        ("runtime", &[K::NqOverflow]),
        ("hardware", &[K::DmaAbort, K::HbmUe, K::NcUe]),
    ]
}

fn error_summary(e: &[u64; 7]) -> Value {
    Value::Object(
        error_classes()
            .iter()
            .map(|(name, kinds)| (name.to_string(), json!(kinds.iter().map(|k| e[*k as usize]).sum::<u64>())))
            .collect(),
    )
}

fn execution_summary(executions: u64, failed: u64, e: &[u64; 7]) -> Value {
    let num = e[ErrorKind::Numerical as usize];
    let timeout = e[ErrorKind::Timeout as usize];
    json!({
        "completed": executions.saturating_sub(failed),
        "completed_with_err": failed.saturating_sub(num).saturating_sub(timeout),
        "completed_with_num_err": num,
        "timed_out": timeout,
        "incorrect_input": 0,
        "failed_to_queue": 0,
    })
}

/// The arch of an NC version number.
fn arch_of(nc_version: u64) -> Option<&'static csr_maps::Arch> {
    csr_maps::Arch::by_nc_version(nc_version)
}

/// The instance-wide index of the logical NeuronCore of physical NC `nc` at size `lnc`: the
/// device's index on the host ([`host_index`]) × logical cores per device + `nc / lnc`.
pub fn global_nc(device: u64, nc: u64, nc_version: u64, lnc: u64) -> u64 {
    let lnc = lnc.max(1);
    let per = arch_of(nc_version).map(|a| a.counts.ncs / lnc).unwrap_or(0);
    device.saturating_mul(per).saturating_add(nc / lnc)
}

/// `neuroncore_counters` of application `pid`: every logical NeuronCore it owns and has a
/// model on or executed on, keyed by its instance-wide logical index (at the application's LNC;
/// the logical core's physical NCs merged: utilization averaged, an execution counted once).
pub fn neuroncore_counters(r: &Report, pid: u64, secs: f64) -> Value {
    let mut merged: std::collections::BTreeMap<u64, (f64, u64, u64, u64, String, u64)> = Default::default();
    for n in r.ncs.iter().filter(|n| n.pid == pid && (n.models > 0 || n.executions > 0)) {
        let lnc = n.lnc.max(1);
        let per = arch_of(n.nc_version).map(|a| a.counts.ncs / lnc).unwrap_or(0);
        let idx = n.neuron_device.saturating_mul(per).saturating_add(n.nc / lnc);
        let e = merged.entry(idx).or_insert((0.0, 0, 0, n.neuron_device, n.device_id.clone(), 0));
        e.0 += n.utilization * 100.0;
        e.1 += 1;
        e.2 = e.2.max(n.executions);
    }
    let mut in_use = Map::new();
    for (idx, (util, count, executions, dev_index, dev_id, _)) in merged {
        in_use.insert(
            idx.to_string(),
            json!({
                "neuroncore_utilization": util / count.max(1) as f64,
                "flops": 0,
                // Ours, beside neuron-monitor's fields:
                "neuron_device_index": dev_index,
                "neuron_device": dev_id,
                "executions": executions,
            }),
        );
    }
    json!({"period": secs, "neuroncores_in_use": in_use, "error": ""})
}

/// `execution_stats` of application `pid` over the period, with our cumulative `totals`.
pub fn execution_stats(r: &Report, pid: u64, secs: f64) -> Value {
    let Some(p) = r.runtimes.iter().find(|p| p.pid == pid) else {
        return json!({"period": secs, "error": format!("no counters for pid {pid}")});
    };
    // The application's NCs' histograms, merged (an execution spanning NCs is in each: the
    // percentiles are unchanged by that).
    let merged = |pick: fn(&super::model::NcReport) -> &[u64; LAT_BUCKETS]| {
        let mut h = [0u64; LAT_BUCKETS];
        for n in r.ncs.iter().filter(|n| n.pid == pid) {
            for (x, y) in h.iter_mut().zip(pick(n)) {
                *x += y;
            }
        }
        h
    };
    let percentiles = |hist: [u64; LAT_BUCKETS]| {
        if hist.iter().sum::<u64>() == 0 {
            return Value::Null;
        }
        Value::Object(
            PERCENTILES
                .iter()
                .map(|(name, q)| {
                    (name.to_string(), json!(percentile_us(&hist, *q).map(|us| us as f64 / 1e6).unwrap_or(0.0)))
                })
                .collect(),
        )
    };
    let total_latency = percentiles(merged(|n| &n.latency_hist));
    let device_latency = percentiles(merged(|n| &n.device_hist));
    json!({
        "period": secs,
        "error_summary": error_summary(&p.errors),
        "execution_summary": execution_summary(p.executions, p.failed, &p.errors),
        "latency_stats": {"total_latency": total_latency, "device_latency": device_latency},
        // Ours: the same figures since the application started (what Prometheus counters carry).
        "totals": {
            "error_summary": error_summary(&p.errors_total),
            "execution_summary": execution_summary(p.executions_total, p.failed_total, &p.errors_total),
        },
        "error": "",
    })
}

/// neuron-monitor's `loaded_models` from a runtime's models file: a subgraph per NC a model
/// spans (`sg_00`, …), with the device memory its staging took there (`snap`: the segment,
/// for the NCs' devices).
pub fn loaded_models(models: &[runtime::counters::ListedModel], snap: &Snapshot) -> Value {
    let list: Vec<Value> = models
        .iter()
        .map(|m| {
            let mut sgs = Map::new();
            for (i, &g) in m.ncs.iter().enumerate() {
                let bytes = m.bytes_per_nc.get(i).copied().unwrap_or(0);
                let (device, nc, ver) = snap
                    .ncs
                    .get(g)
                    .map(|n| {
                        let id = snap
                            .device_ids
                            .get(n.device as usize)
                            .map(|d| d.identity.clone())
                            .unwrap_or_else(|| legacy_label(snap.pid, n.device));
                        (host_index(&id, n.device), n.nc, n.nc_version)
                    })
                    .unwrap_or((0, g as u64, 0));
                sgs.insert(
                    format!("sg_{i:02}"),
                    json!({
                        "memory_used_bytes": {
                            "host": 0,
                            "neuron_device": bytes,
                            "usage_breakdown": {
                                "host": {"application_memory": 0, "constants": 0, "dma_buffers": 0, "tensors": 0},
                                "neuron_device": {"constants": 0, "model_code": bytes, "runtime_memory": 0, "tensors": 0},
                            },
                        },
                        "neuroncore_index": global_nc(device, nc, ver, snap.lnc),
                        "neuron_device_index": device,
                    }),
                );
            }
            json!({"name": m.name, "uuid": m.uuid, "model_id": m.id, "is_running": true, "subgraphs": sgs})
        })
        .collect();
    Value::Array(list)
}

/// `memory_used` of application `pid` (`rss`: its resident host memory; `models`: its
/// [`loaded_models`]).
pub fn memory_used(r: &Report, pid: u64, secs: f64, rss: Option<u64>, models: Value) -> Value {
    let host_tensors = r.runtimes.iter().find(|p| p.pid == pid).map(|p| p.host_tensor_bytes).unwrap_or(0);
    let host = rss.unwrap_or(0).max(host_tensors);
    // Per logical NeuronCore (its physical NCs' memory summed).
    let mut per: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    let mut device = 0u64;
    for n in r.ncs.iter().filter(|n| n.pid == pid) {
        device += n.mem_model + n.mem_tensors;
        if n.mem_model + n.mem_tensors > 0 || n.models > 0 {
            let e = per.entry(global_nc(n.neuron_device, n.nc, n.nc_version, n.lnc)).or_default();
            e.0 += n.mem_model;
            e.1 += n.mem_tensors;
        }
    }
    let mut per_nc = Map::new();
    for (idx, (model, tensors)) in per {
        per_nc.insert(
            idx.to_string(),
            json!({"constants": 0, "model_code": model, "model_shared_scratchpad": 0,
                   "runtime_memory": 0, "tensors": tensors}),
        );
    }
    json!({
        "period": secs,
        "neuron_runtime_used_bytes": {
            "host": host,
            "neuron_device": device,
            "usage_breakdown": {
                "host": {"application_memory": host - host_tensors, "constants": 0, "dma_buffers": 0, "tensors": host_tensors},
                "neuroncore_memory_usage": per_nc,
            },
        },
        "loaded_models": models,
        "error": if rss.is_some() { String::new() } else { format!("/proc/{pid}/statm unreadable: host memory unknown") },
    })
}

/// `neuron_runtime_vcpu_usage` from the application's CPU time over the period, as a share
/// of all vCPUs (percent).
pub fn runtime_vcpu(secs: f64, usage: Option<(f64, f64)>) -> Value {
    match usage {
        Some((u, s)) => json!({"period": secs, "vcpu_usage": {"user": u, "system": s}, "error": ""}),
        None => {
            json!({"period": secs, "vcpu_usage": {"user": 0.0, "system": 0.0}, "error": "process CPU time unreadable"})
        }
    }
}

/// `neuron_hw_counters`: each device's ECC events over the period (`before` → `now`), with
/// our cumulative `totals` (the registers' values); a device once, however many processes
/// use it.
pub fn hw_counters(secs: f64, before: &[DeviceHealth], now: &[DeviceHealth]) -> Value {
    let figures = |h: &DeviceHealth| {
        let (rep, unc) = h.hbm.iter().fold((0u64, 0u64), |a, (r, u)| (a.0 + r, a.1 + u));
        [rep, unc, h.sram_corrected, h.sram_uncorrected]
    };
    let names = ["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"];
    let devices: Vec<Value> = now
        .iter()
        .map(|h| {
            let n = figures(h);
            let b = before.iter().find(|b| b.device_id == h.device_id).map(figures).unwrap_or([0; 4]);
            let mut o = Map::new();
            o.insert("neuron_device_index".into(), json!(h.neuron_device));
            o.insert("neuron_device".into(), json!(h.device_id));
            for (i, k) in names.iter().enumerate() {
                o.insert(k.to_string(), json!(n[i].saturating_sub(b[i])));
            }
            o.insert(
                "totals".into(),
                Value::Object(names.iter().zip(n).map(|(k, v)| (k.to_string(), json!(v))).collect()),
            );
            Value::Object(o)
        })
        .collect();
    json!({"period": secs, "neuron_devices": devices, "error": ""})
}

/// `memory_info`.
pub fn memory_info(secs: f64, m: &Result<MemInfo, String>) -> Value {
    match m {
        Ok(m) => json!({"period": secs, "memory_total_bytes": m.total, "memory_used_bytes": m.used,
                        "swap_total_bytes": m.swap_total, "swap_used_bytes": m.swap_used, "error": ""}),
        Err(e) => json!({"period": secs, "memory_total_bytes": 0, "memory_used_bytes": 0,
                         "swap_total_bytes": 0, "swap_used_bytes": 0, "error": e}),
    }
}

/// neuron-monitor's names for an arch: (device type, device version, NeuronCore version).
/// Trn1 and Inf2 share the sunda arch; it is named after Trn1.
pub fn arch_names(arch: &csr_maps::Arch) -> (String, String, String) {
    let ty = match arch.nc_version {
        2 => "trainium".to_string(),
        v => format!("trainium{}", v - 1),
    };
    (ty, format!("v{}", arch.nc_version + 1), format!("v{}", arch.nc_version))
}

/// `neuron_hardware_info`: the Neuron functions in sysfs, else the devices the publishing
/// runtimes drive (simulated ones).
pub fn hardware_info(sysfs: &Path, latest: &BTreeMap<PathBuf, Snapshot>) -> Value {
    let sys = vfio::Sysfs::new(sysfs);
    let pci: Vec<&'static csr_maps::Arch> = crate::device::neuron_functions(&sys)
        .map(|fs| fs.iter().filter_map(crate::device::arch_of).collect())
        .unwrap_or_default();
    let (arch, count) = match pci.first() {
        Some(a) => (Some(*a), pci.len() as u64),
        None => {
            let a = latest.values().flat_map(|s| s.ncs.first()).find_map(|n| arch_of(n.nc_version));
            // Devices by identity (a shared device once, whatever processes use it); segments
            // without a device table count their runtime's devices.
            let named: std::collections::BTreeSet<&str> =
                latest.values().flat_map(|s| s.device_ids.iter().map(|d| d.identity.as_str())).collect();
            let unnamed = latest.values().filter(|s| s.device_ids.is_empty()).map(|s| s.devices).max().unwrap_or(0);
            (a, named.len() as u64 + unnamed)
        }
    };
    // Logical NeuronCores: the publishing runtimes' size, else what the environment asks.
    let lnc = |a: &csr_maps::Arch| -> u64 {
        latest
            .values()
            .find(|s| s.ncs.first().is_some_and(|n| n.nc_version == a.nc_version as u64))
            .map(|s| s.lnc.max(1))
            .unwrap_or_else(|| crate::procs::shown_lnc(a) as u64)
    };
    match arch {
        Some(a) => {
            let (ty, dv, nv) = arch_names(a);
            let lnc = lnc(a);
            json!({
                "neuron_device_type": ty, "neuron_device_version": dv, "neuroncore_version": nv,
                "neuron_device_count": count,
                "neuron_device_memory_size": a.consts.hbm_active_size.saturating_mul(a.counts.hbm_stacks),
                "neuroncore_per_device_count": a.counts.ncs / lnc,
                "logical_neuroncore_config": lnc,
                "error": if pci.is_empty() { "no Neuron device in sysfs: the simulated devices of the running applications" } else { "" },
            })
        }
        None => json!({
            "neuron_device_type": "", "neuron_device_version": "", "neuroncore_version": "",
            "neuron_device_count": 0, "neuron_device_memory_size": 0, "neuroncore_per_device_count": 0,
            "logical_neuroncore_config": 1,
            "error": "no Neuron device in sysfs and no application publishing counters",
        }),
    }
}

/// What one period's window computed at its last collection.
#[derive(Debug, Clone)]
struct Collected {
    secs: f64,
    report: Report,
    proc_vcpu: HashMap<u64, (f64, f64)>,
    vcpu: Result<Map<String, Value>, String>,
    health_before: Vec<DeviceHealth>,
    health: Vec<DeviceHealth>,
}

/// The samples of one period, and what it collected last.
#[derive(Debug)]
struct Window {
    period: Duration,
    t: Instant,
    before: BTreeMap<PathBuf, Snapshot>,
    cpu: Result<CpuTimes, String>,
    proc_cpu: HashMap<u64, (u64, u64)>,
    health: Vec<DeviceHealth>,
    wants_health: bool,
    last: Option<Collected>,
}

fn proc_cpus(s: &BTreeMap<PathBuf, Snapshot>) -> HashMap<u64, (u64, u64)> {
    s.values().filter_map(|x| host::proc_cpu(x.pid).map(|c| (x.pid, c))).collect()
}

/// The neuron-monitor collector: one window per distinct period of the configuration.
pub struct NeuronMonitor {
    cfg: MonitorConfig,
    sysfs: PathBuf,
    windows: Vec<Window>,
    latest: BTreeMap<PathBuf, Snapshot>,
    instance: Value,
}

impl NeuronMonitor {
    /// Take the first samples of every window (`sysfs`: where devices and DMI tables are).
    pub fn new(cfg: MonitorConfig, sysfs: PathBuf) -> Self {
        let now = sample();
        let hw_periods: Vec<Duration> =
            cfg.system.iter().filter(|(g, _)| *g == SysGroup::HwCounters).map(|(_, p)| *p).collect();
        let health = if hw_periods.is_empty() { Vec::new() } else { collect_health() };
        // A configuration without any group still reports (instance and hardware) every
        // root period.
        let mut periods = cfg.periods();
        if periods.is_empty() {
            periods.push(cfg.period);
        }
        let windows = periods
            .into_iter()
            .map(|p| Window {
                period: p,
                t: Instant::now(),
                before: now.clone(),
                cpu: host::cpu_times(),
                proc_cpu: proc_cpus(&now),
                health: health.clone(),
                wants_health: hw_periods.contains(&p),
                last: None,
            })
            .collect();
        let instance = host::instance_info(&sysfs);
        Self { cfg, sysfs, windows, latest: now, instance }
    }

    /// How long until the next window is due.
    pub fn next_due(&self) -> Duration {
        self.windows
            .iter()
            .map(|w| w.period.saturating_sub(w.t.elapsed()))
            .min()
            .unwrap_or(super::config::DEFAULT_PERIOD)
    }

    /// Collect every window that is due; whether any was.
    pub fn step(&mut self) -> bool {
        let due: Vec<usize> = (0..self.windows.len())
            .filter(|&i| {
                let w = &self.windows[i];
                w.t.elapsed() + Duration::from_millis(2) >= w.period
            })
            .collect();
        if due.is_empty() {
            return false;
        }
        let now = sample();
        let cpu = host::cpu_times();
        let pcpu = proc_cpus(&now);
        let health = if due.iter().any(|&i| self.windows[i].wants_health) { collect_health() } else { Vec::new() };
        let (tck, ncpu) = (host::clk_tck() as f64, host::vcpus() as f64);
        for i in due {
            let w = &mut self.windows[i];
            let elapsed = w.t.elapsed();
            w.t = Instant::now();
            let secs = elapsed.as_secs_f64();
            let rep = report(&w.before, &now, elapsed.as_nanos() as u64);
            let proc_vcpu = pcpu
                .iter()
                .map(|(pid, (u, s))| {
                    let (bu, bs) = w.proc_cpu.get(pid).copied().unwrap_or((*u, *s));
                    // Tick accounting is coarse: a share a tick above all vCPUs is all of them.
                    let pct = |d: u64| if secs > 0.0 { (d as f64 / tck / secs / ncpu * 100.0).min(100.0) } else { 0.0 };
                    (*pid, (pct(u.saturating_sub(bu)), pct(s.saturating_sub(bs))))
                })
                .collect();
            let vcpu = match (&w.cpu, &cpu) {
                (Ok(b), Ok(n)) => Ok(host::vcpu_usage(b, n)),
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            };
            let (health_before, health_now) = if w.wants_health {
                (std::mem::replace(&mut w.health, health.clone()), health.clone())
            } else {
                (Vec::new(), Vec::new())
            };
            w.last = Some(Collected { secs, report: rep, proc_vcpu, vcpu, health_before, health: health_now });
            w.before = now.clone();
            w.cpu = cpu.clone();
            w.proc_cpu = pcpu.clone();
        }
        self.latest = now;
        true
    }

    fn collected(&self, p: Duration) -> Option<&Collected> {
        self.windows.iter().find(|w| w.period == p).and_then(|w| w.last.as_ref())
    }

    /// The report: the latest collection of every group.
    pub fn report(&self) -> Value {
        let endpoints: HashMap<u64, PathBuf> = runtime::debug_endpoint::discover(&runtime::counters::shm_dir())
            .into_iter()
            .map(|(pid, _, p)| (pid as u64, p))
            .collect();
        let mut rts = Vec::new();
        let pids: std::collections::BTreeSet<u64> = self.latest.values().map(|s| s.pid).collect();
        for pid in pids {
            let tag = host::proc_tag(pid);
            let Some(groups) = self.cfg.groups_for(&tag) else { continue };
            let mut rep = Map::new();
            for (g, p) in groups {
                let Some(c) = self.collected(*p) else { continue };
                let v = match g {
                    RtGroup::NeuroncoreCounters => neuroncore_counters(&c.report, pid, c.secs),
                    RtGroup::ExecutionStats => execution_stats(&c.report, pid, c.secs),
                    RtGroup::MemoryUsed => {
                        let models = self
                            .latest
                            .iter()
                            .find(|(_, s)| s.pid == pid)
                            .map(|(path, s)| loaded_models(&runtime::counters::read_models(path), s))
                            .unwrap_or_else(|| Value::Array(Vec::new()));
                        memory_used(&c.report, pid, c.secs, host::proc_rss(pid), models)
                    }
                    RtGroup::VcpuUsage => runtime_vcpu(c.secs, c.proc_vcpu.get(&pid).copied()),
                };
                rep.insert(g.name().into(), v);
            }
            rts.push(json!({
                "pid": pid,
                "address": endpoints.get(&pid).map(|p| p.display().to_string()).unwrap_or_default(),
                "neuron_runtime_tag": tag,
                "error": "",
                "report": rep,
            }));
        }
        let mut sys = Map::new();
        for (g, p) in &self.cfg.system {
            let Some(c) = self.collected(*p) else { continue };
            let v = match g {
                SysGroup::HwCounters => hw_counters(c.secs, &c.health_before, &c.health),
                SysGroup::VcpuUsage => match &c.vcpu {
                    Ok(m) => {
                        let mut m = m.clone();
                        m.insert("period".into(), json!(c.secs));
                        m.insert("error".into(), json!(""));
                        Value::Object(m)
                    }
                    Err(e) => json!({"period": c.secs, "error": e}),
                },
                SysGroup::MemoryInfo => memory_info(c.secs, &host::meminfo()),
            };
            sys.insert(g.name().into(), v);
        }
        json!({
            "neuron_runtime_data": rts,
            "system_data": sys,
            "instance_info": self.instance,
            "neuron_hardware_info": hardware_info(&self.sysfs, &self.latest),
        })
    }

    /// The shortest window's last native report (for the native Prometheus families).
    pub fn native(&self) -> Option<Report> {
        self.windows.iter().find_map(|w| w.last.as_ref()).map(|c| {
            let mut r = c.report.clone();
            r.health = c.health.clone();
            r
        })
    }
}
