//! The Prometheus renderer of a report (`/metrics`).

use std::fmt::Write as _;

use runtime::counters::ErrorKind;

use super::model::{device_label, DeviceHealth, NcReport, Report};

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
