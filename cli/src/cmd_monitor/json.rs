//! The JSON-lines renderer of a report.

use std::collections::BTreeMap;

use runtime::counters::ErrorKind;
use serde_json::{json, Value};

use super::model::{device_label, DeviceHealth, Report};

pub(super) fn health_json(h: &DeviceHealth) -> (Value, Value) {
    (
        json!({"api_version": h.fw_api_version, "heartbeat": h.heartbeat, "health_status": h.health_status}),
        json!({"sram": {"corrected": h.sram_corrected, "uncorrected": h.sram_uncorrected},
               "hbm": h.hbm.iter().enumerate().map(|(k, (r, u))| json!({"stack": k, "repairable": r, "uncorrectable": u})).collect::<Vec<_>>(),
               "hbm_repair_state": h.hbm_repair_state}),
    )
}

pub(super) fn arch_name(nc_version: u64) -> &'static str {
    csr_maps::ARCHES.iter().find(|a| a.nc_version as u64 == nc_version).map(|a| a.name).unwrap_or("unknown")
}

pub(super) fn errors_json(e: &[u64; 7]) -> Value {
    Value::Object(ErrorKind::ALL.iter().map(|k| (k.name().to_string(), json!(e[*k as usize]))).collect())
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
