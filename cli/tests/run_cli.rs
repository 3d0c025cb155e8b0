//! `load`, `run` and `bench exec` on the simulator.

use assert_cmd::Command;

fn cli() -> Command {
    let mut c = Command::cargo_bin("neuron-vfio").expect("binary");
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

const ONE: &str = "examples/allreduce_1nc.neff";
const TWO: &str = "examples/allreduce_2nc.neff";
const LNC2: &str = "examples/allreduce_lnc2.neff";
const INPUT: &str = "input=examples/input_32xf32.bin";

fn input() -> Vec<f32> {
    let b = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/input_32xf32.bin")).unwrap();
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn values(v: &serde_json::Value) -> Vec<f32> {
    v["outputs"]["output"]["values"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn load_prints_tensor_info() {
    let out = cli().args(["--json", "--device", "sim", "load", TWO]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ncs"], serde_json::json!([0, 1]));
    assert_eq!(v["inputs"][0]["name"], "input");
    assert_eq!(v["inputs"][0]["size"], 128);
    assert_eq!(v["outputs"][0]["dtype"], "float32");
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, 32]));
}

#[test]
fn run_on_every_arch_with_exact_outputs() {
    // Trn2 and Trn3 at their default LNC=2 run the LNC=2 example; at LNC=1 the LNC=1 ones.
    for (dev, model, factor, lnc) in [
        ("sim", ONE, 1.0f32, ""),
        ("sim:cayman", LNC2, 2.0, ""),
        ("sim:cayman", TWO, 2.0, "1"),
        ("sim:mariana", LNC2, 2.0, ""),
        ("sim:mariana", ONE, 1.0, "1"),
    ] {
        let tmp = std::env::temp_dir().join(format!("nv-run-{}-{}{lnc}", std::process::id(), dev.replace(':', "_")));
        let out = cli()
            .env("NEURON_LOGICAL_NC_CONFIG", lnc)
            .args(["--json", "--device", dev, "run", model, "--input", INPUT, "--repeat", "3", "--output-dir"])
            .arg(&tmp)
            .output()
            .unwrap();
        assert!(out.status.success(), "{dev}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["status"], "NRT_SUCCESS");
        assert_eq!(v["code"], 0);
        assert_eq!(v["timings"]["executions"], 3);
        let want: Vec<f32> = input().iter().map(|x| x * factor).collect();
        assert_eq!(values(&v), want, "{dev}");
        let file = std::fs::read(tmp.join("output.bin")).unwrap();
        assert_eq!(file, want.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

#[test]
fn run_with_a_fault_reports_the_status_and_exits_nonzero() {
    let out = cli()
        .args([
            "--json",
            "--device",
            "sim",
            "run",
            ONE,
            "--input",
            INPUT,
            "--sim-fault",
            "hbm-ue@nc0",
            "--timeout",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "NRT_EXEC_HW_ERR_HBM_UE");
    assert_eq!(v["code"], 1201);
    let out = cli()
        .args(["--device", "sim", "run", ONE, "--input", INPUT, "--sim-fault", "fp-nan@nc0:act"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NRT_EXEC_COMPLETED_WITH_NUM_ERR (1003)"));
}

#[test]
fn sim_faults_name_logical_cores() {
    // One visible core, physical core 3 of a cayman device: `--nc 0` and `@nc0` both name it.
    let run = |lnc: &str, model: &str, fault: &str| {
        let out = cli()
            .env("NEURON_RT_VISIBLE_CORES", "3")
            .env("NEURON_LOGICAL_NC_CONFIG", lnc)
            .args([
                "--json",
                "--device",
                "sim:cayman",
                "run",
                model,
                "--nc",
                "0",
                "--input",
                INPUT,
                "--sim-fault",
                fault,
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = run("1", ONE, "fp-nan@nc0:act");
    assert_eq!(v["code"], 1003, "{v}");
    assert_eq!(v["ncs"], serde_json::json!([3]), "{v}");
    // A core that is not visible is refused, not injected into some other core.
    let v = run("1", ONE, "fp-nan@nc1:act");
    assert_eq!(v["status"], "NRT_INVALID", "{v}");
    // At LNC=2, logical core 3 is physical cores 6-7: `@nc0` names its first.
    let v = run("", LNC2, "fp-nan@nc0:act");
    assert_eq!(v["code"], 1003, "{v}");
    assert_eq!(v["ncs"], serde_json::json!([6, 7]), "{v}");
}

#[test]
fn run_errors_are_one_line() {
    let out = cli().args(["--json", "--device", "sim", "run", ONE]).output().unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "NRT_EXEC_BAD_INPUT");
    let out = cli()
        .args(["--device", "sim", "run", ONE, "--input", "nope=examples/input_32xf32.bin", "--input", INPUT])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("model has no input `nope`"), "{e}");
    let out =
        cli().args(["--device", "sim", "run", ONE, "--input", INPUT, "--sim-fault", "bogus@nc0"]).output().unwrap();
    assert!(!out.status.success());
    let out = cli().args(["--json", "--device", "sim", "run", "Cargo.toml"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "NRT_INVALID");
}

#[test]
fn bench_exec_prints_figures() {
    let out = cli().args(["--json", "bench", "exec", "--iters", "200"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["host_overhead_ns"]["p50"].as_u64().unwrap() > 0);
    assert!(v["completion_lag_ns"]["usleep1"]["p50"].as_i64().is_some());
    // `neuron-vfio bench` ran neuron-vfio-bench (installed alongside), which counts.
    assert_eq!(v["allocations_counted"], true, "{v}");
    // Steady state: the host thread never allocates, and no read/write syscalls are made.
    assert_eq!(v["host_thread_counts"]["allocs"], 0, "{v}");
    assert_eq!(v["process_counts"]["read_write_syscalls"], 0, "{v}");
}

#[test]
fn bench_binary_counts_allocations_and_runs_only_bench() {
    let bench = || Command::cargo_bin("neuron-vfio-bench").expect("bench binary");
    let out = bench().args(["--json", "bench", "exec", "--iters", "100"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["allocations_counted"], true, "{v}");
    assert_eq!(v["host_thread_counts"]["allocs"], 0, "{v}");
    // The simulator's device work allocates on the inline path: counting is really on.
    assert!(v["process_counts"]["allocs_incl_device"].as_u64().is_some(), "{v}");
    let out = bench().args(["--device", "sim", "ls"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs only the `bench` commands"));
}

#[test]
fn without_the_bench_binary_nothing_is_counted() {
    // The production binary alone in a directory: it benchmarks without a counting
    // allocator and says so, reporting no allocation figures rather than zeros.
    let dir = std::env::temp_dir().join(format!("neuron-cli-nobench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("neuron-vfio");
    std::fs::copy(assert_cmd::cargo::cargo_bin("neuron-vfio"), &exe).unwrap();
    let out = std::process::Command::new(&exe).args(["--json", "bench", "exec", "--iters", "100"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["allocations_counted"], false, "{v}");
    assert!(v["host_thread_counts"]["allocs"].is_null(), "{v}");
    assert!(v["allocs_per_exec_inline_incl_device"].is_null(), "{v}");
    assert!(v["host_overhead_ns"]["p50"].as_u64().unwrap() > 0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("without allocation counting"));
}

/// The README's first command (the main job) runs as written: `cargo run -p cli` must pick
/// the tool among the package's binaries (`default-run`), and the arguments after `--` must
/// run the model on the simulator.
#[test]
fn readme_main_job_command_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let first =
        readme.lines().skip_while(|l| !l.starts_with("```")).nth(1).expect("a command block at the top of README.md");
    let cmd = first.split('#').next().unwrap().trim();
    let args = cmd.strip_prefix("cargo run --release -p cli -- ").unwrap_or_else(|| panic!("main job: {cmd}"));
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    assert!(
        manifest.lines().any(|l| l.trim() == "default-run = \"neuron-vfio\""),
        "`cargo run -p cli` needs default-run = \"neuron-vfio\" in cli/Cargo.toml"
    );
    let out = cli().args(args.split_whitespace()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("NRT_SUCCESS (0)"), "{stdout}");
}

/// `NEURON_RT_LOG_LEVEL=QUIET` (the configuration guide's way to silence the console) runs
/// silently; a variable set but not applied draws one line naming it (at the default level),
/// never silence; a bad level is refused naming the variable.
#[test]
fn log_level_quiet_runs_silently_and_ignored_variables_are_named() {
    let run = |envs: &[(&str, &str)]| {
        let mut c = cli();
        c.env_remove("NEURON_RT_LOG_LEVEL").env_remove("RUST_LOG");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.args(["--device", "sim", "run", ONE, "--input", INPUT]).output().unwrap()
    };
    let out = run(&[("NEURON_RT_LOG_LEVEL", "QUIET"), ("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "QUIET: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.is_empty());
    let out = run(&[("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("NEURON_RT_STOCHASTIC_ROUNDING_EN").count(), 1, "{err}");
    let out = run(&[("NEURON_RT_LOG_LEVEL", "LOUD")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NEURON_RT_LOG_LEVEL"));
}
