//! `neuron-vfio monitor` (periodic reports: text, JSON lines, Prometheus `/metrics`) and
//! `neuron-vfio top` (a live per-NC view; `--once` prints one frame). Both read the
//! counters every runtime on this machine publishes in shared memory (runtime's `counters`
//! module, layout in docs/monitoring.md), so they see work done by other processes without
//! touching the devices those processes own.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use runtime::counters::{self, ErrorKind, NcCounters, Snapshot, LAT_BUCKETS};
use serde_json::{json, Value};

use crate::device::DeviceSpec;
use crate::report::CliError;

/// Arguments of `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// Report period in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub period_ms: u64,
    /// Number of reports (default: until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Also serve the figures at http://ADDR:PORT/metrics in the Prometheus text format
    /// (port 0: any free port; the address is printed on stderr).
    #[arg(long, value_name = "ADDR:PORT")]
    pub prometheus: Option<String>,
}

/// Arguments of `top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// Print one frame as text (for scripts) and exit.
    #[arg(long)]
    pub once: bool,
    /// Refresh period in milliseconds (also the sampling window of `--once`).
    #[arg(long, default_value_t = 1000)]
    pub period_ms: u64,
}

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
}

/// One report: every NC of every publishing process.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    pub timestamp_ns: u64,
    pub period_ns: u64,
    pub ncs: Vec<NcReport>,
    /// (pid, devices, host DMA bytes held by tensors).
    pub processes: Vec<(u64, u64, u64)>,
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
fn collect_health() -> Vec<DeviceHealth> {
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

fn health_json(h: &DeviceHealth) -> (Value, Value) {
    (
        json!({"api_version": h.fw_api_version, "heartbeat": h.heartbeat, "health_status": h.health_status}),
        json!({"sram": {"corrected": h.sram_corrected, "uncorrected": h.sram_uncorrected},
               "hbm": h.hbm.iter().enumerate().map(|(k, (r, u))| json!({"stack": k, "repairable": r, "uncorrectable": u})).collect::<Vec<_>>(),
               "hbm_repair_state": h.hbm_repair_state}),
    )
}

fn arch_name(nc_version: u64) -> &'static str {
    csr_maps::ARCHES.iter().find(|a| a.nc_version as u64 == nc_version).map(|a| a.name).unwrap_or("unknown")
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

fn delta_nc(now: &NcCounters, before: Option<&NcCounters>, pid: u64, period_ns: u64) -> NcReport {
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
        for (i, nc) in s.ncs.iter().enumerate() {
            r.ncs.push(delta_nc(nc, prev.and_then(|p| p.ncs.get(i)), s.pid, period_ns));
        }
    }
    r
}

/// Snapshots of every live segment in the counters directory.
fn sample() -> BTreeMap<PathBuf, Snapshot> {
    let dir = counters::shm_dir();
    counters::discover(&dir).into_iter().map(|rd| (rd.path().to_path_buf(), rd.snapshot())).collect()
}

fn errors_json(e: &[u64; 7]) -> Value {
    Value::Object(ErrorKind::ALL.iter().map(|k| (k.name().to_string(), json!(e[*k as usize]))).collect())
}

fn device_label(pid: u64, device: u64) -> String {
    format!("{pid}/{device}")
}

/// The JSON line of a report.
pub fn report_json(r: &Report) -> Value {
    let mut devices: BTreeMap<String, Value> = BTreeMap::new();
    for n in &r.ncs {
        let label = device_label(n.pid, n.device);
        let host = r.processes.iter().find(|p| p.0 == n.pid).map(|p| p.2).unwrap_or(0);
        let e = devices.entry(label.clone()).or_insert_with(|| {
            json!({"device": label, "pid": n.pid, "index": n.device, "arch": arch_name(n.nc_version),
                   "neuroncores": 0, "memory_used_bytes": 0, "host_dma_tensor_bytes": host})
        });
        e["neuroncores"] = json!(e["neuroncores"].as_u64().unwrap_or(0) + 1);
        e["memory_used_bytes"] = json!(e["memory_used_bytes"].as_u64().unwrap_or(0) + n.mem_model + n.mem_tensors);
    }
    for h in &r.health {
        if let Some(e) = devices.get_mut(&device_label(h.pid, h.device)) {
            let (fw, ecc) = health_json(h);
            e["firmware"] = fw;
            e["ecc"] = ecc;
        }
    }
    let ncs: Vec<Value> = r
        .ncs
        .iter()
        .map(|n| {
            json!({
                "device": device_label(n.pid, n.device), "pid": n.pid, "nc": n.nc,
                "utilization": n.utilization,
                "executions": n.executions, "executions_total": n.executions_total, "failed": n.failed,
                "models_loaded": n.models,
                "memory_used_bytes": n.mem_model + n.mem_tensors,
                "memory_by_kind": {"model": n.mem_model, "tensors": n.mem_tensors},
                "latency_us": {"p50": n.p50_us, "p99": n.p99_us, "mean": n.mean_us},
                "errors": errors_json(&n.errors),
                "errors_total": errors_json(&n.errors_total),
                "barrier_warnings": n.barrier_warnings,
                "barrier_warnings_total": n.barrier_warnings_total,
            })
        })
        .collect();
    json!({
        "timestamp": r.timestamp_ns as f64 / 1e9,
        "period_ms": r.period_ns / 1_000_000,
        "devices": devices.into_values().collect::<Vec<_>>(),
        "neuroncores": ncs,
    })
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The report in the Prometheus text exposition format (version 0.0.4).
pub fn prometheus_text(r: &Report) -> String {
    let mut o = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        }
    };
    let nc_labels = |n: &NcReport| format!("device=\"{}\",nc=\"{}\"", esc(&device_label(n.pid, n.device)), n.nc);
    family(
        "neuron_nc_utilization_ratio",
        "gauge",
        "Share of the last period the NeuronCore was busy (device START to END records).",
        r.ncs.iter().map(|n| (nc_labels(n), format!("{}", n.utilization))).collect(),
    );
    family(
        "neuron_nc_executions_total",
        "counter",
        "Executions finished on the NeuronCore (any status).",
        r.ncs.iter().map(|n| (nc_labels(n), n.executions_total.to_string())).collect(),
    );
    family(
        "neuron_nc_execution_errors_total",
        "counter",
        "Executions that ended in an error, by kind.",
        r.ncs
            .iter()
            .flat_map(|n| {
                ErrorKind::ALL.iter().map(move |k| {
                    (format!("{},kind=\"{}\"", nc_labels(n), k.name()), n.errors_total[*k as usize].to_string())
                })
            })
            .collect(),
    );
    family(
        "neuron_nc_execution_latency_microseconds",
        "gauge",
        "Execution latency over the last period at a quantile (histogram bucket upper bound).",
        r.ncs
            .iter()
            .flat_map(|n| {
                [("0.5", n.p50_us), ("0.99", n.p99_us)]
                    .into_iter()
                    .filter_map(move |(q, v)| v.map(|v| (format!("{},quantile=\"{q}\"", nc_labels(n)), v.to_string())))
            })
            .collect(),
    );
    family(
        "neuron_nc_memory_used_bytes",
        "gauge",
        "Device memory held on the NeuronCore's HBM, by kind (model staging, tensors).",
        r.ncs
            .iter()
            .flat_map(|n| {
                [("model", n.mem_model), ("tensors", n.mem_tensors)]
                    .into_iter()
                    .map(move |(k, v)| (format!("{},kind=\"{k}\"", nc_labels(n)), v.to_string()))
            })
            .collect(),
    );
    family(
        "neuron_nc_barrier_warnings_total",
        "counter",
        "Collectives barrier warnings: an execution's wait on its replica group passed the warning threshold (doubling each time).",
        r.ncs.iter().map(|n| (nc_labels(n), n.barrier_warnings_total.to_string())).collect(),
    );
    family(
        "neuron_nc_models_loaded",
        "gauge",
        "Models loaded on the NeuronCore.",
        r.ncs.iter().map(|n| (nc_labels(n), n.models.to_string())).collect(),
    );
    let dev = |h: &DeviceHealth| format!("device=\"{}\"", esc(&device_label(h.pid, h.device)));
    family(
        "neuron_device_firmware_heartbeat",
        "gauge",
        "Firmware heartbeat (misc RAM health_seq[19:12]); it advances while the firmware runs.",
        r.health.iter().map(|h| (dev(h), h.heartbeat.to_string())).collect(),
    );
    family(
        "neuron_device_ecc_errors",
        "gauge",
        "ECC error counts the firmware keeps in misc RAM, by memory (sram, hbm0…) and kind.",
        r.health
            .iter()
            .flat_map(|h| {
                let mut v = vec![
                    (format!("{},memory=\"sram\",kind=\"corrected\"", dev(h)), h.sram_corrected.to_string()),
                    (format!("{},memory=\"sram\",kind=\"uncorrected\"", dev(h)), h.sram_uncorrected.to_string()),
                ];
                for (k, (rep, unc)) in h.hbm.iter().enumerate() {
                    v.push((format!("{},memory=\"hbm{k}\",kind=\"repairable\"", dev(h)), rep.to_string()));
                    v.push((format!("{},memory=\"hbm{k}\",kind=\"uncorrectable\"", dev(h)), unc.to_string()));
                }
                v
            })
            .collect(),
    );
    family(
        "neuron_host_dma_memory_used_bytes",
        "gauge",
        "Host DMA memory held by tensors placed in host memory, per runtime process.",
        r.processes.iter().map(|(pid, _, b)| (format!("pid=\"{pid}\""), b.to_string())).collect(),
    );
    o
}

fn fmt_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1}K", b as f64 / 1024.0),
        b => format!("{b}B"),
    }
}

fn opt_us(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The text form of a report (one block per period).
pub fn report_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<10} {:>3} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9}  errors",
        "device", "nc", "util%", "execs", "p50 µs", "p99 µs", "model", "tensors"
    );
    if r.ncs.is_empty() {
        let _ = writeln!(o, "(no runtime is publishing counters in {})", counters::shm_dir().display());
    }
    for n in &r.ncs {
        let mut errs: Vec<String> = ErrorKind::ALL
            .iter()
            .filter(|k| n.errors[**k as usize] > 0)
            .map(|k| format!("{}={}", k.name(), n.errors[*k as usize]))
            .collect();
        if n.barrier_warnings > 0 {
            errs.push(format!("barrier_warnings={}", n.barrier_warnings));
        }
        let _ = writeln!(
            o,
            "{:<10} {:>3} {:>6.1} {:>8} {:>9} {:>9} {:>9} {:>9}  {}",
            device_label(n.pid, n.device),
            n.nc,
            n.utilization * 100.0,
            n.executions,
            opt_us(n.p50_us),
            opt_us(n.p99_us),
            fmt_bytes(n.mem_model),
            fmt_bytes(n.mem_tensors),
            if errs.is_empty() { "-".into() } else { errs.join(" ") }
        );
    }
    for h in &r.health {
        let hbm: Vec<String> = h.hbm.iter().map(|(rep, unc)| format!("{rep}/{unc}")).collect();
        let _ = writeln!(
            o,
            "{:<10} firmware api {} heartbeat {} status {:#x}; ECC sram corrected {} uncorrected {}; hbm repairable/uncorrectable {}",
            device_label(h.pid, h.device),
            h.fw_api_version,
            h.heartbeat,
            h.health_status,
            h.sram_corrected,
            h.sram_uncorrected,
            hbm.join(" ")
        );
    }
    o
}

fn period(ms: u64) -> Result<Duration, CliError> {
    if ms == 0 {
        return Err(CliError::invalid("--period-ms must be at least 1"));
    }
    Ok(Duration::from_millis(ms))
}

/// Serve `/metrics` from `latest` on `addr` in a background thread; returns the bound address.
fn serve_metrics(addr: &str, latest: Arc<Mutex<String>>) -> Result<String, CliError> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| CliError::invalid(format!("--prometheus {addr}: cannot listen: {e}")))?;
    let bound = server.server_addr().to_string();
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let ctype = "text/plain; version=0.0.4; charset=utf-8";
            for req in server.incoming_requests() {
                let resp = if req.url() == "/metrics" {
                    let body = latest.lock().map(|s| s.clone()).unwrap_or_default();
                    let mut r = tiny_http::Response::from_string(body);
                    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
                        r.add_header(h);
                    }
                    r
                } else {
                    tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })
        .map_err(CliError::failure)?;
    Ok(bound)
}

/// `monitor`.
pub fn monitor(a: MonitorArgs, json_out: bool) -> Result<(), CliError> {
    let p = period(a.period_ms)?;
    let latest = Arc::new(Mutex::new(String::new()));
    if let Some(addr) = &a.prometheus {
        let bound = serve_metrics(addr, latest.clone())?;
        eprintln!("serving Prometheus metrics at http://{bound}/metrics");
    }
    let mut before = sample();
    let mut t = Instant::now();
    if let Ok(mut l) = latest.lock() {
        *l = prometheus_text(&report(&before, &before, 0));
    }
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        std::thread::sleep(p.saturating_sub(t.elapsed()));
        let now = sample();
        let elapsed = t.elapsed();
        t = Instant::now();
        let mut r = report(&before, &now, elapsed.as_nanos() as u64);
        r.health = collect_health();
        if let Ok(mut l) = latest.lock() {
            *l = prometheus_text(&r);
        }
        let out = if json_out { format!("{}\n", report_json(&r)) } else { report_text(&r) + "\n" };
        let mut so = std::io::stdout().lock();
        if so.write_all(out.as_bytes()).and_then(|_| so.flush()).is_err() {
            return Ok(());
        }
        before = now;
        n += 1;
    }
    Ok(())
}

/// NC count and name of the device `top` shows, from the selection without opening it (the
/// device belongs to the processes running on it).
fn top_target(spec: &DeviceSpec) -> Result<(&'static csr_maps::Arch, String), CliError> {
    let spec = match spec {
        DeviceSpec::Default => crate::device::resolve_default(&crate::device::sysfs())?,
        s => s.clone(),
    };
    match spec {
        DeviceSpec::Sim { arch, .. } => Ok((arch, format!("sim:{}", arch.name))),
        DeviceSpec::Pci(addr) => {
            let f = crate::device::function(&crate::device::sysfs(), addr)?;
            let arch = crate::device::arch_of(&f)
                .ok_or_else(|| CliError::invalid(format!("{addr}: not a Neuron device this tool knows")))?;
            Ok((arch, addr.to_string()))
        }
        DeviceSpec::Default => Err(CliError::failure("no device selected")),
    }
}

fn bar(frac: f64, width: usize) -> String {
    let fill = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(fill), ".".repeat(width - fill))
}

/// One NeuronCore row of `top`: figures summed over every process whose runtime drives a
/// device of the arch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopRow {
    pub nc: usize,
    pub utilization: f64,
    pub exec_per_s: f64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub models: u64,
    pub memory: u64,
    pub errors: u64,
}

/// What `top` shows: (rows, one per NC of `arch`; runtime processes; host DMA bytes).
pub fn top_rows(arch: &'static csr_maps::Arch, r: &Report) -> (Vec<TopRow>, usize, u64) {
    let ncs = arch.counts.ncs as usize;
    let mine: Vec<&NcReport> = r.ncs.iter().filter(|n| n.nc_version == arch.nc_version as u64).collect();
    let pids: std::collections::BTreeSet<u64> = mine.iter().map(|n| n.pid).collect();
    let secs = (r.period_ns as f64 / 1e9).max(1e-9);
    let rows = (0..ncs)
        .map(|nc| {
            let rows: Vec<&&NcReport> = mine.iter().filter(|n| n.nc as usize == nc).collect();
            TopRow {
                nc,
                utilization: rows.iter().map(|n| n.utilization).sum::<f64>().min(1.0),
                exec_per_s: rows.iter().map(|n| n.executions).sum::<u64>() as f64 / secs,
                p50_us: rows.iter().filter_map(|n| n.p50_us).max(),
                p99_us: rows.iter().filter_map(|n| n.p99_us).max(),
                models: rows.iter().map(|n| n.models).sum(),
                memory: rows.iter().map(|n| n.mem_model + n.mem_tensors).sum(),
                errors: rows.iter().map(|n| n.errors.iter().sum::<u64>()).sum(),
            }
        })
        .collect();
    let host: u64 = r.processes.iter().filter(|p| pids.contains(&p.0)).map(|p| p.2).sum();
    (rows, pids.len(), host)
}

/// One `top` frame: a row per NeuronCore of `arch` (figures summed over every process whose
/// runtime drives a device of that arch — the device of `label`).
pub fn top_frame(arch: &'static csr_maps::Arch, label: &str, r: &Report) -> String {
    let (rows, procs, host) = top_rows(arch, r);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "neuron-vfio top — {label} ({}, {} NeuronCores), {procs} runtime process(es), period {} ms",
        arch.name,
        rows.len(),
        r.period_ns / 1_000_000
    );
    let _ = writeln!(
        o,
        "{:>3} {:<22} {:>6} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "utilization", "util%", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    for t in &rows {
        let _ = writeln!(
            o,
            "{:>3} {:<22} {:>6.1} {:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
            t.nc,
            bar(t.utilization, 20),
            t.utilization * 100.0,
            t.exec_per_s,
            opt_us(t.p50_us),
            opt_us(t.p99_us),
            t.models,
            fmt_bytes(t.memory),
            t.errors
        );
    }
    let _ = writeln!(o, "host DMA memory held by tensors: {}", fmt_bytes(host));
    o
}

/// Draw the live `top` view into `f`: a header, a row per NeuronCore (utilization bar, then
/// execution rate, latency, models, memory, errors), and a footer.
pub fn top_ui(f: &mut ratatui::Frame, arch: &'static csr_maps::Arch, label: &str, r: &Report, colour: bool) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Color, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Gauge, Paragraph};
    let (rows, procs, host) = top_rows(arch, r);
    let mut v = vec![Constraint::Length(2)];
    v.extend(rows.iter().map(|_| Constraint::Length(1)));
    v.push(Constraint::Length(2));
    v.push(Constraint::Min(0));
    let area = Layout::vertical(v).split(f.area());
    let head = format!(
        "neuron-vfio top — {label} ({}, {} NeuronCores), {procs} runtime process(es), period {} ms",
        arch.name,
        rows.len(),
        r.period_ns / 1_000_000
    );
    let cols = format!(
        "{:>3} {:<24} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "utilization", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    f.render_widget(Paragraph::new(vec![Line::from(head), Line::from(cols)]), area[0]);
    for (i, t) in rows.iter().enumerate() {
        let cells =
            Layout::horizontal([Constraint::Length(4), Constraint::Length(25), Constraint::Min(0)]).split(area[1 + i]);
        f.render_widget(Paragraph::new(format!("{:>3}", t.nc)), cells[0]);
        let style = match (colour, t.errors > 0) {
            (false, _) => Style::default(),
            (true, true) => Style::default().fg(Color::Red),
            (true, false) => Style::default().fg(Color::Green),
        };
        let g = Gauge::default()
            .gauge_style(style)
            .ratio(t.utilization.clamp(0.0, 1.0))
            .label(format!("{:5.1}%", t.utilization * 100.0));
        f.render_widget(g, Rect { width: cells[1].width.saturating_sub(1), ..cells[1] });
        let rest = format!(
            "{:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
            t.exec_per_s,
            opt_us(t.p50_us),
            opt_us(t.p99_us),
            t.models,
            fmt_bytes(t.memory),
            t.errors
        );
        f.render_widget(Paragraph::new(rest), cells[2]);
    }
    let foot = format!("host DMA memory held by tensors: {}    q/Esc: quit", fmt_bytes(host));
    f.render_widget(Paragraph::new(foot), area[1 + rows.len()]);
}

use ratatui::layout::Rect;

/// The live terminal UI until q, Esc or Ctrl-C: samples every `p`, redraws on each sample and
/// on resize. The terminal is restored on every exit path.
fn top_live(arch: &'static csr_maps::Arch, label: &str, p: Duration) -> Result<(), CliError> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::crossterm::{execute, terminal};
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = terminal::disable_raw_mode();
            let _ = execute!(std::io::stdout(), terminal::LeaveAlternateScreen, ratatui::crossterm::cursor::Show);
        }
    }
    let io = |e: std::io::Error| CliError::failure(format!("terminal: {e}"));
    terminal::enable_raw_mode().map_err(io)?;
    let _restore = Restore;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen).map_err(io)?;
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout())).map_err(io)?;
    let colour = crate::use_colour(true, std::env::var_os("NO_COLOR").as_deref());
    let mut before = sample();
    let mut t = Instant::now();
    let mut r = report(&before, &before, 0);
    term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
    loop {
        let wait = p.saturating_sub(t.elapsed());
        if event::poll(wait).map_err(io)? {
            match event::read().map_err(io)? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
                Event::Resize(..) => {
                    term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
                }
                _ => {}
            }
            continue;
        }
        let now = sample();
        r = report(&before, &now, t.elapsed().as_nanos() as u64);
        t = Instant::now();
        before = now;
        term.draw(|f| top_ui(f, arch, label, &r, colour)).map_err(io)?;
    }
}

/// `top`.
pub fn top(a: TopArgs, spec: &DeviceSpec, json_out: bool) -> Result<(), CliError> {
    use std::io::IsTerminal;
    let p = period(a.period_ms)?;
    let (arch, label) = top_target(spec)?;
    let interactive = !a.once && std::io::stdout().is_terminal();
    if interactive && !json_out {
        return top_live(arch, &label, p);
    }
    let mut before = sample();
    let mut t = Instant::now();
    loop {
        std::thread::sleep(p.saturating_sub(t.elapsed()));
        let now = sample();
        let r = report(&before, &now, t.elapsed().as_nanos() as u64);
        t = Instant::now();
        before = now;
        let mut so = std::io::stdout().lock();
        let frame = if json_out { format!("{}\n", report_json(&r)) } else { top_frame(arch, &label, &r) };
        // A live view redraws in place: home the cursor and clear the screen first.
        let out = if interactive { format!("\x1b[H\x1b[2J{frame}(Ctrl-C to quit)\n") } else { frame };
        if so.write_all(out.as_bytes()).and_then(|_| so.flush()).is_err() || a.once {
            return Ok(());
        }
        if !interactive {
            let _ = so.write_all(b"\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nc(execs: u64, busy: u64, lat_bucket: usize) -> NcCounters {
        let mut n = NcCounters { executions: execs, busy_ns: busy, nc_version: 3, ..Default::default() };
        n.latency[lat_bucket] = execs;
        n.latency_sum_ns = execs * 3_000;
        n
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = [0u64; LAT_BUCKETS];
        assert_eq!(percentile_us(&h, 0.5), None);
        h[2] = 98; // < 4 µs
        h[10] = 2; // < 1024 µs
        assert_eq!(percentile_us(&h, 0.5), Some(4));
        assert_eq!(percentile_us(&h, 0.98), Some(4));
        assert_eq!(percentile_us(&h, 0.99), Some(1024));
    }

    #[test]
    fn a_report_is_the_difference_over_the_period() {
        let p = PathBuf::from("/x/neuron-vfio.1.0.counters");
        let snap = |ncs| Snapshot { pid: 1, started_ns: 5, devices: 1, ncs, ..Default::default() };
        let before = BTreeMap::from([(p.clone(), snap(vec![nc(10, 1_000, 2), nc(0, 0, 0)]))]);
        let mut busy = nc(30, 251_000, 2);
        busy.errors[ErrorKind::Timeout as usize] = 2;
        busy.barrier_warnings = 3;
        let now = BTreeMap::from([(p.clone(), snap(vec![busy, nc(0, 0, 0)]))]);
        let r = report(&before, &now, 1_000_000);
        assert_eq!(r.ncs.len(), 2);
        assert_eq!(r.ncs[0].executions, 20);
        assert!((r.ncs[0].utilization - 0.25).abs() < 1e-9);
        assert_eq!(r.ncs[0].errors[ErrorKind::Timeout as usize], 2);
        assert_eq!(r.ncs[0].p50_us, Some(4));
        assert_eq!(r.ncs[1].executions, 0);
        assert_eq!(r.ncs[1].p50_us, None);
        let v = report_json(&r);
        assert_eq!(v["neuroncores"][0]["executions"], 20);
        assert_eq!(v["neuroncores"][0]["errors"]["timeout"], 2);
        assert_eq!(
            (v["neuroncores"][0]["barrier_warnings"].as_u64(), v["neuroncores"][1]["barrier_warnings"].as_u64()),
            (Some(3), Some(0))
        );
        assert!(report_text(&r).contains("barrier_warnings=3"), "{}", report_text(&r));
        assert!(prometheus_text(&r).contains("neuron_nc_barrier_warnings_total{"), "{}", prometheus_text(&r));
        assert_eq!(v["devices"][0]["arch"], "cayman");
        // A restarted process (same path, new start time) counts from zero.
        let restarted = BTreeMap::from([(p, Snapshot { started_ns: 6, ..snap(vec![nc(3, 0, 1)]) })]);
        assert_eq!(report(&before, &restarted, 1).ncs[0].executions, 3);
    }

    #[test]
    fn health_decodes_heartbeat_and_ecc_and_is_exported() {
        let regs = health_regs(&csr_maps::CAYMAN).expect("regs");
        assert_eq!(regs.len(), 5 + csr_maps::CAYMAN.counts.hbm_stacks as usize);
        // api 7; health_seq heartbeat 0x5a; sram ecc corrected 3, uncorrected 1; stack 1: 9 repairable, 2 uncorrectable.
        let mut vals = vec![7, 0, 0x5a << 12, (3 << 16) | 1, 1];
        vals.extend((0..csr_maps::CAYMAN.counts.hbm_stacks).map(|k| if k == 1 { (2 << 12) | 9 } else { 0 }));
        let h = decode_health(&regs, &vals, 42, 0);
        assert_eq!((h.fw_api_version, h.heartbeat, h.sram_corrected, h.sram_uncorrected), (7, 0x5a, 3, 1));
        assert_eq!(h.hbm[1], (9, 2));
        assert_eq!(h.hbm[0], (0, 0));
        let n = NcReport { pid: 42, nc: 0, nc_version: 3, ..Default::default() };
        let r = Report { ncs: vec![n], health: vec![h], ..Report::default() };
        let j = report_json(&r);
        assert_eq!(j["devices"][0]["firmware"]["heartbeat"], 0x5a);
        assert_eq!(j["devices"][0]["ecc"]["hbm"][1]["uncorrectable"], 2);
        assert_eq!(j["devices"][0]["ecc"]["sram"]["corrected"], 3);
        let p = prometheus_text(&r);
        assert!(p.contains("neuron_device_firmware_heartbeat{device=\"42/0\"} 90"), "{p}");
        assert!(
            p.contains("neuron_device_ecc_errors{device=\"42/0\",memory=\"hbm1\",kind=\"uncorrectable\"} 2"),
            "{p}"
        );
        assert!(report_text(&r).contains("heartbeat 90"));
    }

    #[test]
    fn live_top_renders_8_cayman_rows_into_a_test_backend() {
        use ratatui::backend::TestBackend;
        let mut r = Report { period_ns: 1_000_000_000, ..Report::default() };
        let mut busy = NcReport {
            pid: 7,
            nc: 1,
            nc_version: 3,
            utilization: 0.5,
            executions: 1234,
            models: 1,
            ..Default::default()
        };
        busy.p50_us = Some(32);
        busy.errors[0] = 2;
        r.ncs.push(busy);
        let mut term = ratatui::Terminal::new(TestBackend::new(100, 16)).expect("terminal");
        term.draw(|f| top_ui(f, &csr_maps::CAYMAN, "sim:cayman", &r, true)).expect("draw");
        let buf = term.backend().buffer();
        let lines: Vec<String> = (0..buf.area.height)
            .map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .collect();
        let text = lines.join("\n");
        assert!(lines[0].contains("sim:cayman (cayman, 8 NeuronCores), 1 runtime process(es)"), "{text}");
        let rows: Vec<&String> =
            lines.iter().filter(|l| l.get(..4).is_some_and(|c| c.trim().parse::<u32>().is_ok())).collect();
        assert_eq!(rows.len(), 8, "{text}");
        for (i, l) in rows.iter().enumerate() {
            assert!(l.starts_with(&format!("{i:>3}")), "{l}");
        }
        assert!(rows[1].contains("50.0%") && rows[1].contains("1234") && rows[1].contains("32"), "{}", rows[1]);
        assert!(rows[0].contains("0.0%"), "{}", rows[0]);
        // The bar of NC 1 is half filled (gauge cells are styled), NC 0's is empty.
        let filled =
            |y: u16| (4..28u16).filter(|&x| buf[(x, y)].style().fg == Some(ratatui::style::Color::Red)).count();
        let y1 = lines.iter().position(|l| l == rows[1]).unwrap_or(0) as u16;
        let y0 = lines.iter().position(|l| l == rows[0]).unwrap_or(0) as u16;
        assert!(filled(y1) >= 8, "{}", filled(y1));
        assert_eq!(filled(y0), 0);
        assert!(lines.iter().any(|l| l.contains("q/Esc: quit")), "{text}");
    }

    #[test]
    fn top_has_a_row_per_nc() {
        let r = Report { period_ns: 1_000_000_000, ..Report::default() };
        let f = top_frame(&csr_maps::CAYMAN, "sim:cayman", &r);
        let rows = f.lines().filter(|l| l.trim_start().split(' ').next().is_some_and(|w| w.parse::<u32>().is_ok()));
        assert_eq!(rows.count(), 8, "{f}");
    }
}
