//! `bench collectives` (feature `fabric`): local rank processes over libfabric's tcp provider.
#![cfg(feature = "fabric")]

mod common;
use common::*;

use serde_json::Value;

fn rows(args: &[&str]) -> (bool, Vec<Value>, String) {
    let out = cli().env("FI_PROVIDER", "tcp").args(args).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = stdout.lines().next().unwrap_or_default().to_string();
    let v: Vec<Value> = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"));
    (out.status.success(), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn four_ranks_all_gather_and_reduce_scatter_are_correct_with_a_socket_baseline() {
    for (op, dtype, reduce) in [("all-gather", "fp16", "add"), ("reduce-scatter", "int32", "max")] {
        let (ok, v, err) = rows(&[
            "--json",
            "bench",
            "collectives",
            "--ranks",
            "4",
            "--op",
            op,
            "--dtype",
            dtype,
            "--reduce",
            reduce,
            "--sizes",
            "4K,1000004",
            "--iters",
            "2",
            "--chunk",
            "128K",
            "--timeout",
            "10",
        ]);
        assert!(ok, "{op}: {v:?} {err}");
        assert_eq!(v.len(), 2, "{v:?}");
        for (r, bytes) in v.iter().zip([4096, 1000004]) {
            assert_eq!(r["op"], op);
            assert_eq!(r["bytes"], bytes);
            assert_eq!(r["ranks"], 4);
            assert_eq!(r["correct"], true, "{r}");
            assert_eq!((r["status"].as_str(), r["code"].as_i64()), (Some("NRT_SUCCESS"), Some(0)));
            let (alg, bus) = (r["algbw_gbps"].as_f64().unwrap_or(0.0), r["busbw_gbps"].as_f64().unwrap_or(0.0));
            assert!(alg > 0.0 && (bus - alg * 0.75).abs() < 1e-9 * alg.max(1.0), "{r}");
            assert!(r["socket_gbps"].as_f64().unwrap_or(0.0) > 0.0 && r["ratio"].as_f64().is_some(), "{r}");
        }
    }
}

/// `--kill-rank 2` of 4 with `NEURON_RT_EXEC_TIMEOUT=5` and no `--timeout`: every survivor
/// reports NRT_NETWORK_PROXY_FAILURE (or 1200) within the execution timeout, and the command
/// exits non-zero (its rows failed).
#[test]
fn killed_rank_makes_every_survivor_fail_within_the_exec_timeout() {
    let exec_timeout = 5.0;
    let t0 = std::time::Instant::now();
    let out = cli()
        .env("FI_PROVIDER", "tcp")
        .env("NEURON_RT_EXEC_TIMEOUT", "5")
        .args(["--json", "bench", "collectives", "--ranks", "4", "--kill-rank", "2", "--sizes", "1M"])
        .output()
        .expect("run");
    let wall = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Vec<Value> = serde_json::from_str(stdout.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    assert!(!out.status.success(), "a run with failed rows must exit non-zero: {v:?} {stderr}");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(matches!(v[0]["code"].as_i64(), Some(1206 | 1200)), "{v:?}");
    // One line per survivor: "rank R: NRT_… after S s".
    let mut survivors = 0;
    for line in stderr.lines().filter(|l| l.starts_with("bench collectives: rank ")) {
        let secs: f64 =
            line.rsplit(" after ").next().and_then(|t| t.trim_end_matches(" s").parse().ok()).unwrap_or(f64::NAN);
        assert!(line.contains("NRT_NETWORK_PROXY_FAILURE") || line.contains("NRT_EXEC_HW_ERR_COLLECTIVES"), "{line}");
        assert!(secs <= exec_timeout, "{line}: not within NEURON_RT_EXEC_TIMEOUT={exec_timeout}");
        survivors += 1;
    }
    assert_eq!(survivors, 3, "{stderr}");
    eprintln!("killed rank: survivors failed as reported above; whole run {wall:?}");
}

/// Without a usable libfabric the run fails (non-zero) naming what to install.
#[test]
fn without_libfabric_the_run_fails_naming_what_to_install() {
    let out = cli()
        .env("NEURON_VFIO_LIBFABRIC", "/nonexistent/libfabric.so.1")
        .args(["bench", "collectives", "--ranks", "2", "--sizes", "4K", "--timeout", "5"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("apt-get install libfabric1") && stderr.contains("/nonexistent/libfabric.so.1"),
        "{stderr}"
    );
}

#[test]
fn joining_without_a_root_is_invalid() {
    let out = cli()
        .env_remove("NEURON_RT_ROOT_COMM_ID")
        .args(["bench", "collectives", "--rank", "0", "--ranks", "2"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NEURON_RT_ROOT_COMM_ID"));
}
