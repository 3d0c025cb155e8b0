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

#[test]
fn killed_rank_makes_survivors_report_network_proxy_failure() {
    let t0 = std::time::Instant::now();
    let (ok, v, err) = rows(&[
        "--json",
        "bench",
        "collectives",
        "--ranks",
        "3",
        "--kill-rank",
        "1",
        "--sizes",
        "1M",
        "--timeout",
        "2",
    ]);
    assert!(ok, "{v:?} {err}");
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(matches!(v[0]["code"].as_i64(), Some(1206 | 1200)), "{v:?}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(20), "took {:?}", t0.elapsed());
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
