//! End-to-end tests of `neuron-vfio neff inspect` and `bench neff-load`.

use std::path::PathBuf;

use assert_cmd::Command;
use neff::builder;
use neff::NeffHeader;
use serde_json::Value;

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("neff-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).expect("write temp");
    p
}

fn bin() -> Command {
    Command::cargo_bin("neuron-vfio").expect("binary")
}

#[test]
fn inspect_prints_model_and_disasm() {
    let p = temp("ok.neff", &builder::single_nc_allreduce().build().expect("build"));
    let out = bin().args(["neff", "inspect", "--disasm"]).arg(&p).output().expect("run");
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("graph sg00 (sg00/def.json)"), "{s}");
    assert!(s.contains("queue q_gradient_out"), "{s}");
    assert!(s.contains("dma block 0 on q_gradient_in: 1 desc"), "{s}");
    assert!(s.contains("PSEUDO_DMA_TRIGGER $S[22]>0 q_gradient_out block_id=0;"), "{s}");
    let _ = std::fs::remove_file(p);
}

#[test]
fn inspect_json_describes_the_model() {
    let p = temp("ok2.neff", &builder::two_nc_allreduce().build().expect("build"));
    let out = bin().args(["--json", "neff", "inspect", "--disasm"]).arg(&p).output().expect("run");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "NRT_SUCCESS");
    assert_eq!(v["graphs"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["graphs"][0]["vars"][0]["name"], "input");
    assert_eq!(v["graphs"][1]["replica_groups"][0][1], 1);
    assert_eq!(v["disasm"]["sg00/pool"][2], "EVENT_SEMAPHORE $S[11]>0;");
    let _ = std::fs::remove_file(p);
}

#[test]
fn gate_failure_exits_nonzero_with_status_json() {
    let mut b = builder::single_nc_allreduce().build().expect("build");
    let mut h = NeffHeader::decode(&b).expect("hdr");
    h.neff_version_major = 3;
    b[..1024].copy_from_slice(&h.encode());
    let p = temp("v3.neff", &b);
    let out = bin().args(["--json", "neff", "inspect"]).arg(&p).output().expect("run");
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "NRT_UNSUPPORTED_NEFF_VERSION");
    assert_eq!(v["code"], 10);
    assert!(v["error"].as_str().is_some_and(|e| e.contains("neff_version_major 3")), "{v}");
    // Text mode: non-zero exit and the status name on stderr.
    let out = bin().args(["neff", "inspect"]).arg(&p).output().expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NRT_UNSUPPORTED_NEFF_VERSION"));
    let _ = std::fs::remove_file(p);
}

#[test]
fn missing_file_reports_json_error() {
    let out = bin().args(["--json", "neff", "inspect", "/nonexistent/x.neff"]).output().expect("run");
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("/nonexistent/x.neff")));
}

#[test]
fn bench_neff_load_sweep() {
    let out = bin().args(["--json", "bench", "neff-load", "--sizes", "2M,3M", "--runs", "1"]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["sizes"].as_array().expect("sizes");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["weights_mib"], 2.0);
    assert_eq!(rows[1]["weights_mib"], 3.0);
    assert!(rows.iter().all(|r| r["ratio"].as_f64().is_some() && r["peak_rss_mib"].as_f64().is_some()));
    let bad = bin().args(["bench", "neff-load", "--sizes", "12X"]).output().expect("run");
    assert!(!bad.status.success());
}

#[test]
fn bench_neff_load_small() {
    let out = bin().args(["--json", "bench", "neff-load", "--size-mib", "2", "--runs", "1"]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["bench"], "neff-load");
    assert!(v["inflated_bytes"].as_u64().is_some_and(|p| p > 2 << 20));
    assert!(v["ratio"].as_f64().is_some_and(|r| r > 0.0));
    // The weights went to (simulated) device memory, not the host payload.
    assert!(v["sim_device_mib"].as_f64().is_some_and(|m| m >= 2.0), "{v}");
    assert!(v["peak_rss_mib"].as_f64().is_some(), "{v}");
    // It says up front what it writes and needs; no progress output off a terminal.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs ~2 MiB") && err.contains("writing a ~1 MB NEFF"), "{err}");
    assert!(!err.contains('\x1b') && !err.contains("generating the NEFF"), "{err:?}");
}

#[test]
fn bench_large_var_costs_no_host_memory_for_zeroed_device_memory() {
    // 512 MiB of device memory zeroed for the var: the simulator writes no host page for it.
    for reader in [None, Some("--in-memory")] {
        let mut cmd = bin();
        cmd.args(["--json", "bench", "large-var", "--size", "512M"]);
        if let Some(r) = reader {
            cmd.arg(r);
        }
        let out = cmd.output().expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["bench"], "large-var");
        assert_eq!(v["var_bytes"], 512u64 << 20);
        assert!(v["load_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
        assert!(v["peak_rss_mib"].as_f64().is_some_and(|m| m > 0.0 && m < 256.0), "{v}");
    }
    // A var that cannot fit the arch's HBM stack is a clear error.
    let bad = bin().args(["--json", "bench", "large-var", "--size", "64G"]).output().expect("run");
    assert!(!bad.status.success());
    let v: Value = serde_json::from_slice(&bad.stdout).expect("json error");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("does not fit")), "{v}");
}
