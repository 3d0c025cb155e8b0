//! The Prometheus renderer of a report (`/metrics`).

use std::fmt::Write as _;

use runtime::counters::ErrorKind;

use super::model::{DeviceHealth, NcReport, Report};

pub(super) fn esc(v: &str) -> String {
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
    // A device by its identity; each NC with the process that owns it.
    let nc_labels = |n: &NcReport| format!("device=\"{}\",nc=\"{}\",pid=\"{}\"", esc(&n.device_id), n.nc, n.pid);
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
    let dev = |h: &DeviceHealth| format!("device=\"{}\"", esc(&h.device_id));
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

/// The instance labels AWS's exporter puts on every sample, from `instance_info`, in its
/// names.
pub fn instance_labels(report: &serde_json::Value) -> Vec<(String, String)> {
    let i = &report["instance_info"];
    let s = |k: &str| i[k].as_str().unwrap_or("").to_string();
    vec![
        ("instance_name".into(), s("instance_name")),
        ("instance_id".into(), s("instance_id")),
        ("instance_type".into(), s("instance_type")),
        ("availability_zone".into(), s("instance_availability_zone")),
        ("region".into(), s("instance_region")),
        ("subnet_id".into(), s("subnet_id")),
    ]
}

/// Families of samples by metric name, in first-seen order, with their type and help.
#[derive(Default)]
struct Families {
    order: Vec<(String, &'static str, &'static str)>,
    samples: std::collections::HashMap<String, Vec<String>>,
}

impl Families {
    fn add(&mut self, name: &str, kind: &'static str, help: &'static str, labels: &[(String, String)], v: f64) {
        if !self.samples.contains_key(name) {
            self.order.push((name.to_string(), kind, help));
        }
        let mut sorted: Vec<&(String, String)> = labels.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let l: Vec<String> = sorted.iter().map(|(k, x)| format!("{k}=\"{}\"", esc(x))).collect();
        self.samples.entry(name.to_string()).or_default().push(format!("{name}{{{}}} {v}", l.join(",")));
    }

    fn render(self) -> String {
        let mut o = String::new();
        for (name, kind, help) in &self.order {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} {kind}");
            for s in self.samples.get(name).into_iter().flatten() {
                let _ = writeln!(o, "{s}");
            }
        }
        o
    }
}

fn with(base: &[(String, String)], extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut v = base.to_vec();
    v.extend(extra.iter().map(|(k, x)| (k.to_string(), x.clone())));
    v
}

/// A neuron-monitor report as AWS's exporter (`neuron-monitor-prometheus.py`) serves it: its
/// metric names, label names and units (ratios 0–1, seconds, bytes). Counters carry the
/// totals since each application started (the report's `totals`), where the exporter sums
/// the periods it has seen.
pub fn exporter_text(report: &serde_json::Value) -> String {
    use serde_json::Value;
    let f64v = |v: &Value| v.as_f64().unwrap_or(0.0);
    let inst = instance_labels(report);
    let mut fam = Families::default();
    for rt in report["neuron_runtime_data"].as_array().into_iter().flatten() {
        if rt["error"].as_str().is_some_and(|e| !e.is_empty()) {
            continue;
        }
        let tag = match &rt["neuron_runtime_tag"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let base = with(&inst, &[("runtime_tag", tag)]);
        let rep = &rt["report"];
        let ok = |g: &Value| g.is_object() && g["error"].as_str().is_none_or(str::is_empty);
        let nc = &rep["neuroncore_counters"];
        if ok(nc) {
            for (idx, d) in nc["neuroncores_in_use"].as_object().into_iter().flatten() {
                let l = with(&base, &[("neuroncore", idx.clone())]);
                fam.add(
                    "neuroncore_utilization_ratio",
                    "gauge",
                    "Share of the period the NeuronCore was busy (0 to 1)",
                    &l,
                    f64v(&d["neuroncore_utilization"]) / 100.0,
                );
            }
        }
        let mem = &rep["memory_used"];
        if ok(mem) {
            let used = &mem["neuron_runtime_used_bytes"];
            for loc in ["host", "neuron_device"] {
                let l = with(&base, &[("memory_location", loc.to_string())]);
                fam.add(
                    "neuron_runtime_memory_used_bytes",
                    "gauge",
                    "Memory the application holds, by location (bytes)",
                    &l,
                    f64v(&used[loc]),
                );
            }
            let kinds: [(&str, &'static str, &'static str); 5] = [
                (
                    "constants",
                    "neuroncore_memory_usage_constants",
                    "Device memory the application holds on the NeuronCore: constants (bytes)",
                ),
                (
                    "model_code",
                    "neuroncore_memory_usage_model_code",
                    "Device memory the application holds on the NeuronCore: model_code (bytes)",
                ),
                (
                    "model_shared_scratchpad",
                    "neuroncore_memory_usage_model_shared_scratchpad",
                    "Device memory the application holds on the NeuronCore: model_shared_scratchpad (bytes)",
                ),
                (
                    "runtime_memory",
                    "neuroncore_memory_usage_runtime_memory",
                    "Device memory the application holds on the NeuronCore: runtime_memory (bytes)",
                ),
                (
                    "tensors",
                    "neuroncore_memory_usage_tensors",
                    "Device memory the application holds on the NeuronCore: tensors (bytes)",
                ),
            ];
            for (key, name, help) in kinds {
                for (idx, d) in used["usage_breakdown"]["neuroncore_memory_usage"].as_object().into_iter().flatten() {
                    // The exporter leaves memory_location unset on these: "None".
                    let l = with(&base, &[("memory_location", "None".into()), ("neuroncore", idx.clone())]);
                    fam.add(name, "gauge", help, &l, f64v(&d[key]));
                }
            }
        }
        let cpu = &rep["neuron_runtime_vcpu_usage"];
        if ok(cpu) {
            for t in ["user", "system"] {
                let l = with(&base, &[("usage_type", t.to_string())]);
                fam.add(
                    "neuron_runtime_vcpu_usage_ratio",
                    "gauge",
                    "CPU time of the application over the period, as a share of all vCPUs (0 to 1)",
                    &l,
                    f64v(&cpu["vcpu_usage"][t]) / 100.0,
                );
            }
        }
        let ex = &rep["execution_stats"];
        if ok(ex) {
            for (k, v) in ex["totals"]["error_summary"].as_object().into_iter().flatten() {
                let l = with(&base, &[("error_type", k.clone())]);
                fam.add(
                    "execution_errors_total",
                    "counter",
                    "Executions that ended in an error, by class, since the application started",
                    &l,
                    f64v(v),
                );
            }
            for (k, v) in ex["totals"]["execution_summary"].as_object().into_iter().flatten() {
                let l = with(&base, &[("status_type", k.clone())]);
                fam.add(
                    "execution_status_total",
                    "counter",
                    "Executions by outcome since the application started",
                    &l,
                    f64v(v),
                );
            }
            for (k, v) in ex["latency_stats"]["total_latency"].as_object().into_iter().flatten() {
                let l = with(&base, &[("percentile", k.clone())]);
                fam.add(
                    "execution_latency_seconds",
                    "gauge",
                    "Host latency of the period's executions at a percentile (seconds)",
                    &l,
                    f64v(v),
                );
            }
        }
    }
    let sys = &report["system_data"];
    let ok = |g: &Value| g.is_object() && g["error"].as_str().is_none_or(str::is_empty);
    let hw = &sys["neuron_hw_counters"];
    if ok(hw) {
        // One series per (event type, device index): simulated devices private to their
        // processes can share an index (each process numbers its own from 0), and a
        // family must not repeat a label set; their counts add up.
        let mut ecc: std::collections::BTreeMap<(String, &str), f64> = std::collections::BTreeMap::new();
        for d in hw["neuron_devices"].as_array().into_iter().flatten() {
            for ev in ["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"] {
                *ecc.entry((d["neuron_device_index"].to_string(), ev)).or_default() += f64v(&d["totals"][ev]);
            }
        }
        for ((index, ev), v) in ecc {
            let l = with(&inst, &[("event_type", ev.to_string()), ("neuron_device_index", index)]);
            fam.add("hardware_ecc_events_total", "counter", "ECC events the device counted, by memory and kind", &l, v);
        }
    }
    let vc = &sys["vcpu_usage"];
    if ok(vc) {
        let n = vc["usage_data"].as_object().map(|m| m.len()).unwrap_or(0);
        fam.add("system_vcpu_count", "gauge", "vCPUs of this host", &inst, n as f64);
        let avg = &vc["average_usage"];
        for (t, parts) in [("user", &["user", "nice"][..]), ("system", &["system", "io_wait", "irq", "soft_irq"][..])] {
            let sum: f64 = parts.iter().map(|p| f64v(&avg[*p])).sum();
            let l = with(&inst, &[("usage_type", t.to_string())]);
            fam.add(
                "system_vcpu_usage_ratio",
                "gauge",
                "Host CPU time over the period, as a share (0 to 1), user or system",
                &l,
                sum.min(100.0) / 100.0,
            );
        }
    }
    let mi = &sys["memory_info"];
    if ok(mi) {
        let m: [(&str, &str, &'static str); 4] = [
            ("system_memory_total_bytes", "memory_total_bytes", "Host memory, total (bytes)"),
            ("system_memory_used_bytes", "memory_used_bytes", "Host memory in use (bytes)"),
            ("system_swap_total_bytes", "swap_total_bytes", "Host swap, total (bytes)"),
            ("system_swap_used_bytes", "swap_used_bytes", "Host swap in use (bytes)"),
        ];
        for (name, key, help) in m {
            fam.add(name, "gauge", help, &inst, f64v(&mi[key]));
        }
    }
    fam.add("instance_info", "gauge", "The instance this host is (its identity in the labels; always 1)", &inst, 1.0);
    let hi = &report["neuron_hardware_info"];
    let hl = with(
        &inst,
        &[
            ("neuron_device_count", hi["neuron_device_count"].to_string()),
            ("neuroncore_per_device_count", hi["neuroncore_per_device_count"].to_string()),
        ],
    );
    fam.add(
        "neuron_hardware_info",
        "gauge",
        "The Neuron devices of this host (counts in the labels; always 1)",
        &hl,
        1.0,
    );
    fam.render()
}
