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
#[derive(Debug, Clone, PartialEq)]
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
}

/// One report: every NC of every publishing process.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    pub timestamp_ns: u64,
    pub period_ns: u64,
    pub ncs: Vec<NcReport>,
    /// (pid, devices, host DMA bytes held by tensors).
    pub processes: Vec<(u64, u64, u64)>,
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
        "neuron_nc_models_loaded",
        "gauge",
        "Models loaded on the NeuronCore.",
        r.ncs.iter().map(|n| (nc_labels(n), n.models.to_string())).collect(),
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
        let errs: Vec<String> = ErrorKind::ALL
            .iter()
            .filter(|k| n.errors[**k as usize] > 0)
            .map(|k| format!("{}={}", k.name(), n.errors[*k as usize]))
            .collect();
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
        let r = report(&before, &now, elapsed.as_nanos() as u64);
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

/// One `top` frame: a row per NeuronCore of `arch` (figures summed over every process whose
/// runtime drives a device of that arch — the device of `label`).
pub fn top_frame(arch: &'static csr_maps::Arch, label: &str, r: &Report) -> String {
    let ncs = arch.counts.ncs as usize;
    let mine: Vec<&NcReport> = r.ncs.iter().filter(|n| n.nc_version == arch.nc_version as u64).collect();
    let pids: std::collections::BTreeSet<u64> = mine.iter().map(|n| n.pid).collect();
    let secs = (r.period_ns as f64 / 1e9).max(1e-9);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "neuron-vfio top — {label} ({}, {ncs} NeuronCores), {} runtime process(es), period {} ms",
        arch.name,
        pids.len(),
        r.period_ns / 1_000_000
    );
    let _ = writeln!(
        o,
        "{:>3} {:<22} {:>6} {:>10} {:>9} {:>9} {:>6} {:>10} {:>7}",
        "NC", "utilization", "util%", "exec/s", "p50 µs", "p99 µs", "models", "memory", "errors"
    );
    for nc in 0..ncs {
        let rows: Vec<&&NcReport> = mine.iter().filter(|n| n.nc as usize == nc).collect();
        let util = rows.iter().map(|n| n.utilization).sum::<f64>().min(1.0);
        let execs: u64 = rows.iter().map(|n| n.executions).sum();
        let p50 = rows.iter().filter_map(|n| n.p50_us).max();
        let p99 = rows.iter().filter_map(|n| n.p99_us).max();
        let models: u64 = rows.iter().map(|n| n.models).sum();
        let mem: u64 = rows.iter().map(|n| n.mem_model + n.mem_tensors).sum();
        let errs: u64 = rows.iter().map(|n| n.errors.iter().sum::<u64>()).sum();
        let _ = writeln!(
            o,
            "{nc:>3} {:<22} {:>6.1} {:>10.0} {:>9} {:>9} {:>6} {:>10} {:>7}",
            bar(util, 20),
            util * 100.0,
            execs as f64 / secs,
            opt_us(p50),
            opt_us(p99),
            models,
            fmt_bytes(mem),
            errs
        );
    }
    let host: u64 = r.processes.iter().filter(|p| pids.contains(&p.0)).map(|p| p.2).sum();
    let _ = writeln!(o, "host DMA memory held by tensors: {}", fmt_bytes(host));
    o
}

/// `top`.
pub fn top(a: TopArgs, spec: &DeviceSpec, json_out: bool) -> Result<(), CliError> {
    use std::io::IsTerminal;
    let p = period(a.period_ms)?;
    let (arch, label) = top_target(spec)?;
    let interactive = !a.once && std::io::stdout().is_terminal();
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
        assert_eq!(v["devices"][0]["arch"], "cayman");
        // A restarted process (same path, new start time) counts from zero.
        let restarted = BTreeMap::from([(p, Snapshot { started_ns: 6, ..snap(vec![nc(3, 0, 1)]) })]);
        assert_eq!(report(&before, &restarted, 1).ncs[0].executions, 3);
    }

    #[test]
    fn top_has_a_row_per_nc() {
        let r = Report { period_ns: 1_000_000_000, ..Report::default() };
        let f = top_frame(&csr_maps::CAYMAN, "sim:cayman", &r);
        let rows = f.lines().filter(|l| l.trim_start().split(' ').next().is_some_and(|w| w.parse::<u32>().is_ok()));
        assert_eq!(rows.count(), 8, "{f}");
    }
}
