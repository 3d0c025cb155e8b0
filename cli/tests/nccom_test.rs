//! `nccom-test` (crate `nccom`, docs/collectives.md) end to end: worker processes on their own
//! logical cores of a shared simulated cayman, reached through a broker of the test's own
//! (a private socket), collectives NEFFs built per size, outputs checked per rank.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// The runs share two CPUs: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Run {
    dir: PathBuf,
}

impl Run {
    fn new(name: &str) -> Run {
        let dir = std::env::temp_dir().join(format!("nv-nccom-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Run { dir }
    }

    fn cmd(&self, exe: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(exe);
        c.args(args)
            .env("NEURON_VFIO_BROKER_SOCKET", self.dir.join("broker.sock"))
            .env("NEURON_VFIO_BROKER_EXE", env!("CARGO_BIN_EXE_neuron-vfio"))
            .env("NEURON_RT_EXEC_TIMEOUT", "60")
            .env_remove("NEURON_VFIO_DEVICE")
            .env_remove("NEURON_LOGICAL_NC_CONFIG")
            .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
            .env_remove("NEURON_VFIO_SIM_FAULT")
            .env_remove("NEURON_VFIO_SIM_FAULT_RANK");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn nccom(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.cmd(env!("CARGO_BIN_EXE_nccom-test"), args, env)
    }

    fn json(&self) -> PathBuf {
        self.dir.join("report.json")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The table's data rows: (size, count, type, busbw).
fn rows(o: &Output) -> Vec<(u64, u64, String, f64)> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let size = f.first()?.parse().ok()?;
            Some((size, f.get(1)?.parse().ok()?, f.get(2)?.to_string(), f.get(5)?.parse().ok()?))
        })
        .collect()
}

/// Runs `args` with a JSON report and checks: exit 0, one table row per size of `sizes`, the
/// Avg bus bandwidth line, every row's check passing in the report.
fn passes(r: &Run, args: &[&str], env: &[(&str, &str)], sizes: &[u64]) {
    let json = r.json();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--report-to-json-file", json.to_str().unwrap()]);
    let o = r.nccom(&a, env);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    let got: Vec<u64> = rows(&o).iter().map(|r| r.0).collect();
    assert_eq!(got, sizes, "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Avg bus bandwidth:"), "{}", text(&o));
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = j["results"].as_array().unwrap();
    assert_eq!(results.len(), sizes.len());
    for x in results {
        assert_eq!(x["check"], "pass", "{x}");
        assert!(x["time_us"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(j["errors"].as_array().map(Vec::len), Some(0));
}

fn doubling(from: u64, to: u64) -> Vec<u64> {
    std::iter::successors(Some(from), |s| Some(s * 2)).take_while(|&s| s <= to).collect()
}

/// The acceptance command at LNC=1 (nccom-test's default type, uint8): 8 workers, one per
/// physical core (the sweep stops at 1 MiB with 2 + 1 iterations here; the 64 MiB run, ~3 min
/// on the development machine, is in docs/collectives.md).
#[test]
fn all_reduce_over_8_workers_at_lnc1_passes_all_ones() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = Run::new("lnc1");
    passes(
        &r,
        &["allr", "-r", "8", "-b", "8", "-e", "1M", "-f", "2", "-c", "all_ones", "-n", "2", "-w", "1"],
        &[("NEURON_LOGICAL_NC_CONFIG", "1")],
        &doubling(8, 1 << 20),
    );
}

/// The same with 4 workers at cayman's default LNC (2: four logical cores).
#[test]
fn all_reduce_over_4_workers_at_the_default_lnc_passes_all_ones() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = Run::new("lnc2");
    passes(
        &r,
        &["allr", "-r", "4", "-b", "8", "-e", "1M", "-f", "2", "-c", "all_ones", "-n", "2", "-w", "1"],
        &[],
        &doubling(8, 1 << 20),
    );
    // A fifth worker has no logical core: it fails, named.
    let o = r.nccom(&["allr", "-r", "5", "-b", "64", "-e", "64", "-d", "fp32", "-n", "1", "-w", "0"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("rank 4:"), "{}", text(&o));
}

/// Every operation and data type, with random inputs checked bit for bit against the host
/// reference, through both entry points: the reductions and all-gather over every type
/// (fp8 reductions included), the exchanges (send/receive, all-to-all, all-to-allv, permute: no
/// arithmetic) over one type of each width and fp8.
#[test]
fn every_operation_and_type_passes_the_random_check() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = Run::new("matrix");
    let every = ["fp32", "bf16", "fp16", "int32", "uint32", "uint8", "int8", "uint16", "int16", "fp8_e4m3", "fp8_e5m2"];
    for op in ["all_reduce", "reduce_scatter", "all_gather", "sendrecv", "alltoall", "alltoallv", "permute"] {
        let types: &[&str] = if ["sendrecv", "alltoall", "alltoallv", "permute"].contains(&op) {
            &["fp32", "bf16", "uint8", "fp8_e5m2"]
        } else {
            &every
        };
        // All-to-allv of 4 ranks sends units of n(n+1)/2 = 10 elements.
        let (b, e, sizes) =
            if op == "alltoallv" { ("80", "5K", [80, 640, 5120]) } else { ("64", "4K", [64, 512, 4096]) };
        for d in types {
            let a = [
                "-r", "4", "-b", b, "-e", e, "-f", "8", "-d", d, "-c", "random", "--seed", "11", "-n", "1", "-w", "0",
                op,
            ];
            passes(&r, &a, &[], &sizes);
        }
    }
    let o = r.cmd(
        env!("CARGO_BIN_EXE_neuron-vfio"),
        &[
            "--device",
            "sim:shared:cayman",
            "nccom-test",
            "redsct",
            "-r",
            "3",
            "-b",
            "96",
            "-e",
            "96",
            "-d",
            "bf16",
            "-c",
            "random",
            "-n",
            "1",
            "-w",
            "0",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(rows(&o).iter().map(|r| (r.0, r.1, r.2.as_str())).collect::<Vec<_>>(), vec![(96, 48, "bf16")]);
}

/// What cannot run is refused by name with exit status 2, before any worker starts.
#[test]
fn what_cannot_be_honoured_is_refused_by_name() {
    let r = Run::new("refusals");
    for (args, name) in [
        (vec!["alltoallv", "-r", "2", "--alltoallv-metadata", "m.json"], "--alltoallv-metadata"),
        (vec!["allr", "-r", "2", "--custom-src-target-pairs", "p.json"], "--custom-src-target-pairs"),
        (vec!["allr", "-r", "2", "--data-parallel-dimension", "2"], "--data-parallel-dimension"),
        (vec!["allr", "-r", "8", "-d", "fp32", "--slurm-job-id", "7"], "--slurm-job-id"),
        (vec!["allr", "-r", "8", "-d", "fp32", "-c", "zeros"], "-c/--check"),
    ] {
        let o = r.nccom(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(name), "{args:?}: {}", text(&o));
    }
    let o = r.nccom(&["allr", "-r", "2", "-d", "fp32"], &[("NEURON_VFIO_DEVICE", "sim:cayman")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// An uncorrectable HBM error injected into one worker's core corrupts its contribution: that
/// worker's execution fails, the run exits non-zero naming the rank.
#[test]
fn a_corrupted_contribution_fails_the_run_naming_the_rank() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = Run::new("fault");
    let o = r.nccom(
        &["allr", "-r", "4", "-b", "64", "-e", "256", "-f", "2", "-d", "fp32", "-c", "all_ones", "-n", "2", "-w", "0"],
        &[("NEURON_VFIO_SIM_FAULT", "hbm-ue@nc0"), ("NEURON_VFIO_SIM_FAULT_RANK", "2")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rank 2: execute: size 64: NRT_EXEC_HW_ERR_HBM_UE (1201)"), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("errors found - test failed"), "{}", text(&o));
}

/// A permute of custom source-target pairs (the page's file format): 0 <-> 1, 2 -> 3, and
/// rank 2 receives from no one — zeros, which the check expects; a send/receive ring of 3.
#[test]
fn permute_follows_the_pairs_file() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let r = Run::new("permute");
    let pairs = r.dir.join("pairs.json");
    std::fs::write(&pairs, r#"{"src_target_pairs": [[[0, 1], [1, 0], [2, 3]]]}"#).unwrap();
    for check in ["random", "all_ones"] {
        let a = [
            "permute",
            "-r",
            "4",
            "-b",
            "256",
            "-e",
            "256",
            "-d",
            "int16",
            "-c",
            check,
            "-n",
            "2",
            "-w",
            "1",
            "--custom-src-target-pairs",
            pairs.to_str().unwrap(),
        ];
        passes(&r, &a, &[], &[256]);
    }
    // busbw over algbw in the report (unrounded): 1 for send/receive, (n-1)/n for all-to-all.
    for (op, factor) in [("sendrecv", 1.0), ("alltoall", 2.0 / 3.0)] {
        let json = r.json();
        let a = ["-r", "3", "-b", "3K", "-e", "3K", "-d", "fp32", "-c", "-n", "2", "-w", "0", op];
        let o = r.nccom(&[&a[..], &["--report-to-json-file", json.to_str().unwrap()]].concat(), &[]);
        assert!(o.status.success(), "{}", text(&o));
        let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let x = &j["results"][0];
        let (alg, bus) = (x["algbw_gibps"].as_f64().unwrap(), x["busbw_gibps"].as_f64().unwrap());
        assert!(alg > 0.0 && (bus / alg - factor).abs() < 1e-9, "{op}: {x}");
        assert_eq!(x["check"], "pass", "{op}: {x}");
    }
    // A pairs file naming a rank that does not exist is refused by name.
    std::fs::write(&pairs, r#"{"src_target_pairs": [[[0, 4]]]}"#).unwrap();
    let o = r.nccom(&["permute", "-r", "4", "--custom-src-target-pairs", pairs.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--custom-src-target-pairs"), "{}", text(&o));
}
