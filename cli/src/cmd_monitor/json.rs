//! The JSON-lines renderer of a report.

use runtime::counters::ErrorKind;
use serde_json::{json, Value};

use super::model::{DeviceHealth, Report};

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

/// NeuronCores of a device of NeuronCore version `nc_version` (0: unknown).
pub(super) fn nc_count(nc_version: u64) -> u64 {
    csr_maps::ARCHES.iter().find(|a| a.nc_version as u64 == nc_version).map(|a| a.counts.ncs).unwrap_or(0)
}

/// The JSON line of a report: a device per identity (with the processes owning its NCs),
/// and a row per owned NC (with its owner).
pub fn report_json(r: &Report) -> Value {
    let host = |pid: u64| r.processes.iter().find(|p| p.0 == pid).map(|p| p.2).unwrap_or(0);
    let devices: Vec<Value> = r
        .devices()
        .iter()
        .map(|d| {
            let clients = d.clients();
            let mut e = json!({
                "device": d.id, "index": d.neuron_device, "arch": arch_name(d.nc_version),
                "neuroncores": nc_count(d.nc_version),
                "clients": clients.iter().map(|(pid, ncs)| json!({"pid": pid, "ncs": ncs, "host_dma_tensor_bytes": host(*pid)})).collect::<Vec<_>>(),
                "memory_used_bytes": d.ncs.iter().map(|n| n.mem_model + n.mem_tensors).sum::<u64>(),
                "host_dma_tensor_bytes": clients.iter().map(|(pid, _)| host(*pid)).sum::<u64>(),
            });
            if let Some(h) = r.health.iter().find(|h| h.device_id == d.id) {
                let (fw, ecc) = health_json(h);
                e["firmware"] = fw;
                e["ecc"] = ecc;
            }
            e
        })
        .collect();
    let ncs: Vec<Value> = r
        .ncs
        .iter()
        .map(|n| {
            json!({
                "device": n.device_id, "pid": n.pid, "nc": n.nc,
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
        "devices": devices,
        "neuroncores": ncs,
    })
}
