//! The C API area by area, from C (and C++): load/execute/lifecycle statuses (c/allreduce.c),
//! then each other program in tests/c/ (tests/cpp/) is
//! compiled with `-Wall -Wextra -Werror` against include/ and linked to the built libnrt.so,
//! then run on the simulator (`sim`) and a simulated cayman (`sim:cayman`).
//!
//! - Without a C compiler the tests print a notice and pass, unless NEURON_VFIO_REQUIRE_CC=1.
//! - Programs run under valgrind (memcheck; errors fail the test) when valgrind is installed
//!   or NEURON_VFIO_REQUIRE_VALGRIND=1 (then a missing valgrind fails the test);
//!   NEURON_VFIO_VALGRIND=0 turns it off.

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn examples() -> PathBuf {
    manifest().join("../examples")
}

fn compiler(var: &str, default: &str) -> Option<String> {
    let cc = std::env::var(var).unwrap_or_else(|_| default.into());
    let ok = Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success());
    if ok {
        return Some(cc);
    }
    let msg = format!("no compiler (`{cc} --version` failed; set {var})");
    if std::env::var("NEURON_VFIO_REQUIRE_CC").as_deref() == Ok("1") {
        panic!("{msg}, and NEURON_VFIO_REQUIRE_CC=1");
    }
    eprintln!("notice: {msg}: skipping");
    None
}

#[path = "support/libnrt.rs"]
mod libnrt;

fn lib_dir() -> PathBuf {
    libnrt::lib_dir().expect("libnrt.so next to the test binary (or its parent)")
}

/// Compile `src` (C, or C++ when it ends in .cpp); None without a compiler.
fn build(src: &str) -> Option<PathBuf> {
    let cpp = src.ends_with(".cpp");
    let cc = if cpp { compiler("CXX", "c++")? } else { compiler("CC", "cc")? };
    let lib = lib_dir();
    let stem = Path::new(src).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{stem}"));
    let std = if cpp { "-std=c++17" } else { "-std=c11" };
    let o = Command::new(&cc)
        .args([std, "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-I"])
        .arg(manifest().join("include"))
        .arg(manifest().join("tests").join(src))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lnrt")
        .arg("-Wl,--no-undefined")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .expect("run the compiler");
    assert!(
        o.status.success(),
        "{cc} failed on {src}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out)
}

/// valgrind, if the programs should run under it.
fn valgrind() -> Option<&'static str> {
    let required = std::env::var("NEURON_VFIO_REQUIRE_VALGRIND").as_deref() == Ok("1");
    if !required && std::env::var("NEURON_VFIO_VALGRIND").as_deref() == Ok("0") {
        return None;
    }
    let present = Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    match (present, required) {
        (true, _) => Some("valgrind"),
        (false, true) => panic!("NEURON_VFIO_REQUIRE_VALGRIND=1 but valgrind is not installed"),
        (false, false) => None,
    }
}

/// Run a built program on `device`; its stdout (all checks passed).
fn run(prog: &Path, args: &[PathBuf], device: &str) -> String {
    run_env(prog, args, device, &[])
}

/// `run` with extra environment variables.
fn run_env(prog: &Path, args: &[PathBuf], device: &str, envs: &[(&str, &Path)]) -> String {
    let vg = valgrind();
    let mut c = match vg {
        Some(v) => {
            let mut c = Command::new(v);
            c.args([
                "-q",
                "--error-exitcode=97",
                "--leak-check=full",
                "--show-leak-kinds=definite",
                "--errors-for-leak-kinds=definite",
            ])
            .arg(prog);
            c
        }
        None => Command::new(prog),
    };
    let o = c
        .args(args)
        // The library this build made, first: cargo's LD_LIBRARY_PATH also lists
        // target/debug, where an older uplifted libnrt.so may lie (RUNPATH comes after it).
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("NEURON_VFIO_DEVICE", device)
        .env("NEURON_VFIO_NRT_QUIET", "1")
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .env_remove("NEURON_RT_NUM_CORES")
        .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
        // The example NEFFs these programs load are compiled for LNC=1; Trn2 and Trn3 default
        // to LNC=2 (`logical_neuroncores_at_the_trn2_default` runs the LNC=2 example there).
        .env("NEURON_LOGICAL_NC_CONFIG", if device.contains("cayman") || device.contains("mariana") { "1" } else { "" })
        .envs(envs.iter().copied())
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!(
        "--- {} on {device} (valgrind: {}): exit {:?}\n{stdout}--- stderr\n{stderr}",
        prog.display(),
        vg.is_some(),
        o.status.code()
    );
    assert!(
        o.status.success(),
        "{} failed on {device} (exit {:?}):\n{stdout}\n{stderr}",
        prog.display(),
        o.status.code()
    );
    assert!(!stdout.lines().any(|l| l.starts_with("FAIL")), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("ALL OK"), "{stdout}");
    stdout
}

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a temporary directory");
    d
}

const DEVICES: [&str; 2] = ["sim", "sim:cayman"];

#[test]
fn info_status_and_unsupported_calls() {
    let Some(p) = build("c/info.c") else { return };
    for (dev, family) in DEVICES.iter().zip(["instance family 2 ", "instance family 5 "]) {
        let out = run(&p, &[examples().join("allreduce_1nc.neff")], dev);
        assert!(out.contains(family), "{dev}: expected `{family}` in\n{out}");
    }
}

#[test]
fn load_execute_and_lifecycle_statuses() {
    let Some(p) = build("c/allreduce.c") else { return };
    for dev in DEVICES {
        let ex = examples();
        let args = [ex.join("allreduce_1nc.neff"), ex.join("allreduce_2nc.neff"), ex.join("input_32xf32.bin")];
        let out = run(&p, &args, dev);
        for want in [
            "ok   nrt_load before nrt_init -> 13",
            "ok   nrt_init -> 0",
            "ok   output output == 1x input (0 mismatches",
            "ok   output output == 2x input (0 mismatches",
            "ok   nrt_unload(NULL) -> 2",
            "ok   nrt_execute(NULL model) -> 2",
            "ok   nrt_load after nrt_close -> 14",
            "nrt_get_model_nc_count -> 0 (2 NCs)",
        ] {
            assert!(out.contains(want), "{dev}: missing `{want}` in:\n{out}");
        }
    }
}

#[test]
fn logical_cores_and_init_close_cycles() {
    let Some(p) = build("c/lifecycle.c") else { return };
    // One visible core that is not physical core 0; 8 init/close cycles with live handles
    // (3 under valgrind, which is slow to map a device).
    let cycles = if valgrind().is_some() { "3" } else { "8" };
    for dev in DEVICES {
        run_env(
            &p,
            &[examples().join("allreduce_1nc.neff"), PathBuf::from(cycles)],
            dev,
            &[("NEURON_RT_VISIBLE_CORES", Path::new("1"))],
        );
    }
}

/// Logical NeuronCores at Trn2's default (LNC=2) and as the SDK's tutorials set them: counts,
/// the deprecated `_nc_` twins, placement of an LNC=2 NEFF on the first and last visible
/// logical cores, an LNC=1 NEFF refused.
#[test]
fn logical_neuroncores_at_the_trn2_default() {
    let Some(p) = build("c/lnc.c") else { return };
    let ex = examples();
    let args = |total: &str, visible: &str| -> Vec<PathBuf> {
        vec![
            ex.join("allreduce_lnc2.neff"),
            ex.join("allreduce_1nc.neff"),
            ex.join("input_32xf32.bin"),
            PathBuf::from(total),
            PathBuf::from(visible),
        ]
    };
    let none = Path::new("");
    let two = Path::new("2");
    // No LNC variable: 4 logical cores of 2.
    run_env(&p, &args("4", "4"), "sim:cayman", &[("NEURON_LOGICAL_NC_CONFIG", none)]);
    // The tutorials' variable, NEURON_RT_NUM_CORES = NUM_CORES / LNC.
    run_env(
        &p,
        &args("4", "2"),
        "sim:cayman",
        &[("NEURON_LOGICAL_NC_CONFIG", none), ("NEURON_RT_VIRTUAL_CORE_SIZE", two), ("NEURON_RT_NUM_CORES", two)],
    );
    // One visible logical core that is physical cores 2-3.
    run_env(
        &p,
        &args("4", "1"),
        "sim:cayman",
        &[("NEURON_LOGICAL_NC_CONFIG", two), ("NEURON_RT_VISIBLE_CORES", Path::new("1"))],
    );
}

/// A libnrt program given nothing but `LD_LIBRARY_PATH` (no `NEURON_VFIO_BROKER_EXE`, `PATH`
/// without the project) on a shared device starts its broker from where `libnrt.so` is
/// installed: an install's layout, `PREFIX/lib/libnrt.so.1` and `PREFIX/bin/neuron-vfio`
/// (issue 43; docs/sharing.md "Which broker"; the order of the places is unit-tested in the
/// broker crate).
#[test]
fn libnrt_starts_its_broker_from_where_it_is_installed() {
    let Some(p) = build("c/lnc.c") else { return };
    let built_lib = std::fs::canonicalize(lib_dir().join("libnrt.so.1")).expect("libnrt.so");
    let target = built_lib.parent().and_then(Path::parent).expect("target dir");
    let exe = [target.join("neuron-vfio"), built_lib.with_file_name("neuron-vfio")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("neuron-vfio built (cargo test --workspace builds it)");
    let dir = tmpdir("capi-broker-install");
    let (lib, bin) = (dir.join("lib"), dir.join("bin"));
    std::fs::create_dir_all(&lib).expect("lib");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::copy(&built_lib, lib.join("libnrt.so.1")).expect("install libnrt");
    std::os::unix::fs::symlink("libnrt.so.1", lib.join("libnrt.so")).expect("install libnrt");
    std::os::unix::fs::symlink(&exe, bin.join("neuron-vfio")).expect("install neuron-vfio");
    let socket = dir.join("broker.sock");
    let ex = examples();
    let args = [
        ex.join("allreduce_lnc2.neff"),
        ex.join("allreduce_1nc.neff"),
        ex.join("input_32xf32.bin"),
        PathBuf::from("4"),
        PathBuf::from("4"),
    ];
    let out = Command::new(&p)
        .args(&args)
        .env_clear()
        .env("LD_LIBRARY_PATH", &lib)
        .env("PATH", "/usr/bin:/bin")
        .env("NEURON_VFIO_DEVICE", "sim:shared:cayman")
        .env("NEURON_VFIO_BROKER_SOCKET", &socket)
        .env("NEURON_VFIO_NRT_QUIET", "1")
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.trim_end().ends_with("ALL OK"), "{stdout}");
    // The broker it started exits once idle, removing its socket.
    let t0 = std::time::Instant::now();
    while socket.exists() {
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the broker did not exit when idle");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The acceptance for a libnrt program found by `LD_LIBRARY_PATH` alone (nothing of
/// the project on `PATH`, no `NEURON_VFIO_BROKER_EXE`) on `sim:shared:cayman`, for both
/// places the library lies: the build's own directory (the broker beside `libnrt.so`) and an
/// install's `PREFIX/lib` (the broker in `PREFIX/bin`). The first process starts the broker and
/// holds core 0; a second asking for core 0 is refused; a third gets core 1; once the first is
/// SIGKILLed core 0 can be leased again (the time it took is printed; `bench shared` measures
/// it).
#[test]
fn libnrt_by_its_library_path_alone_holds_shares_and_frees_cores() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let Some(p) = build("c/hold.c") else { return };
    let built_lib = std::fs::canonicalize(lib_dir().join("libnrt.so.1")).expect("libnrt.so");
    let target = built_lib.parent().and_then(Path::parent).expect("target dir");
    let exe = [target.join("neuron-vfio"), built_lib.with_file_name("neuron-vfio")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("neuron-vfio built (cargo test --workspace builds it)");
    let dir = tmpdir("capi-hold-layouts");
    // A build's directory (target/release): libnrt.so with neuron-vfio beside it. The library
    // is a file of its own there (a hard link, else a copy): a symbolic link would resolve to
    // where this test's build keeps it (deps/).
    let beside = dir.join("beside");
    std::fs::create_dir_all(&beside).expect("dir");
    if std::fs::hard_link(&built_lib, beside.join("libnrt.so")).is_err() {
        std::fs::copy(&built_lib, beside.join("libnrt.so")).expect("copy libnrt");
    }
    std::os::unix::fs::symlink("libnrt.so", beside.join("libnrt.so.1")).expect("link libnrt");
    std::os::unix::fs::symlink(&exe, beside.join("neuron-vfio")).expect("link neuron-vfio");
    // An install: PREFIX/lib/libnrt.so.1 (a copy, so nothing is beside it) and PREFIX/bin.
    let prefix = dir.join("prefix");
    let (lib, bin) = (prefix.join("lib"), prefix.join("bin"));
    std::fs::create_dir_all(&lib).expect("lib");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::copy(&built_lib, lib.join("libnrt.so.1")).expect("install libnrt");
    std::os::unix::fs::symlink("libnrt.so.1", lib.join("libnrt.so")).expect("install libnrt");
    std::os::unix::fs::symlink(&exe, bin.join("neuron-vfio")).expect("install neuron-vfio");
    for (layout, libdir) in [("the build's directory", &beside), ("an install's lib/", &lib)] {
        let socket = dir.join(format!("broker-{}.sock", libdir.file_name().and_then(|n| n.to_str()).unwrap_or("x")));
        let cmd = |mode: &str, core: &str, expect: Option<&str>| {
            let mut c = Command::new(&p);
            c.arg(mode)
                .args(expect)
                .env_clear()
                .env("LD_LIBRARY_PATH", libdir)
                .env("PATH", "/usr/bin:/bin")
                .env("NEURON_VFIO_DEVICE", "sim:shared:cayman")
                .env("NEURON_VFIO_BROKER_SOCKET", &socket)
                .env("NEURON_VFIO_NRT_QUIET", "1")
                .env("NEURON_RT_VISIBLE_CORES", core);
            c
        };
        let try_core = |core: &str| {
            let o = cmd("try", core, None).output().expect("run hold try");
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            let status = out.trim().strip_prefix("init ").and_then(|v| v.parse::<i32>().ok());
            (status, format!("{out}{}", String::from_utf8_lossy(&o.stderr)))
        };
        let mut holder = cmd("hold", "0", None)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the holder");
        let mut first = String::new();
        BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut first).expect("holder's line");
        assert_eq!(first.trim(), "init 0", "{layout}: the first process (starting the broker) holds core 0");
        let (second, out) = try_core("0");
        assert!(
            matches!(second, Some(s) if s != 0),
            "{layout}: core 0 is held, a second process got {second:?}: {out}"
        );
        let (third, out) = try_core("1");
        assert_eq!(third, Some(0), "{layout}: a third process gets core 1: {out}");
        // SAFETY: kill(2) of our own child, which has not been waited for (its pid is live).
        let r = unsafe { libc::kill(holder.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(r, 0);
        let killed = std::time::Instant::now();
        let _ = holder.wait();
        let freed = loop {
            let (s, out) = try_core("0");
            if s == Some(0) {
                break killed.elapsed();
            }
            assert!(killed.elapsed() < std::time::Duration::from_secs(60), "{layout}: core 0 never freed: {out}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        println!("{layout}: core 0 leasable again {freed:?} after the SIGKILL (the retrying process's start included)");
    }
}

#[test]
fn tensor_operations() {
    let Some(p) = build("c/tensor_ops.c") else { return };
    for dev in DEVICES {
        run(&p, &[examples().join("allreduce_1nc.neff"), examples().join("input_32xf32.bin")], dev);
    }
}

#[test]
fn async_execution_units() {
    let Some(p) = build("c/async.c") else { return };
    for dev in DEVICES {
        run(&p, &[examples().join("allreduce_1nc.neff"), examples().join("input_32xf32.bin")], dev);
    }
}

#[test]
fn profiling_and_system_trace() {
    let Some(p) = build("c/profile.c") else { return };
    for dev in DEVICES {
        let dir = tmpdir(&format!("capi-profile-{}", dev.replace(':', "-")));
        let env_dir = dir.join("env");
        let out = run_env(
            &p,
            &[examples().join("allreduce_1nc.neff"), examples().join("input_32xf32.bin"), dir.clone()],
            dev,
            // Device traces are off by default (the profiler's variables page): `session` asks.
            &[
                ("NEURON_RT_INSPECT_ENABLE", Path::new("1")),
                ("NEURON_RT_INSPECT_DEVICE_PROFILE", Path::new("session")),
                ("NEURON_RT_INSPECT_OUTPUT_DIR", &env_dir),
            ],
        );
        // Every trace is valid JSON in the trace-event format with engine lanes.
        let files: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("file ")).collect();
        assert_eq!(files.len(), 5, "{out}");
        for f in files {
            let text = std::fs::read_to_string(f).expect("read the trace");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{f}: {e}\n{text}"));
            let events = v["traceEvents"].as_array().unwrap_or_else(|| panic!("{f}: no traceEvents"));
            let dev_spans: Vec<_> = events.iter().filter(|e| e["cat"] == "device_exec").collect();
            assert!(!dev_spans.is_empty(), "{f}: no device spans");
            for s in &dev_spans {
                assert_eq!(s["ph"], "X");
                assert!(s["dur"].as_f64().is_some_and(|d| d >= 0.0), "{f}: {s}");
                assert!(s["args"]["engine"].is_string(), "{f}: {s}");
            }
            let execs: Vec<_> = events.iter().filter(|e| e["cat"] == "model_exec").collect();
            let mut prev_first = f64::NEG_INFINITY;
            for x in &execs {
                assert_eq!(x["args"]["status_name"], "NRT_SUCCESS", "{f}: {x}");
                let t0 = x["ts"].as_f64().unwrap_or(f64::NAN);
                let t1 = t0 + x["dur"].as_f64().unwrap_or(f64::NAN);
                // The engines' START..END spans (device clock, mapped to host time by the sync
                // taken at load) last no longer than the host's kickoff..completion span, and
                // executions follow each other on the device as on the host.
                let mine = dev_spans
                    .iter()
                    .filter(|s| s["args"]["seq"] == x["args"]["seq"] && s["args"]["model_id"] == x["args"]["model_id"]);
                let mut k = 0;
                let mut first = f64::INFINITY;
                for s in mine {
                    k += 1;
                    let d = s["dur"].as_f64().unwrap_or(f64::NAN);
                    first = first.min(s["ts"].as_f64().unwrap_or(f64::NAN));
                    assert!(d <= t1 - t0 + 100.0, "{f}: device span of {d} us in an execution of {} us", t1 - t0);
                }
                assert!(
                    first >= prev_first,
                    "{f}: execution {} starts on the device before the previous one",
                    x["args"]["seq"]
                );
                prev_first = first;
                assert!(k >= 1, "{f}: execution without device spans: {x}");
            }
            assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "PE"), "{f}: engine lanes are named");
        }
    }
}

#[test]
fn cpp_raii_client() {
    let Some(p) = build("cpp/raii.cpp") else { return };
    for dev in DEVICES {
        let dir = tmpdir(&format!("capi-raii-{}", dev.replace(':', "-")));
        let trace = dir.join("raii.json");
        run(&p, &[examples().join("allreduce_1nc.neff"), examples().join("input_32xf32.bin"), trace.clone()], dev);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&trace).expect("read the trace")).expect("valid JSON");
        let execs = v["traceEvents"].as_array().map_or(0, |a| a.iter().filter(|e| e["cat"] == "model_exec").count());
        assert_eq!(execs, 2, "two profiled executions");
    }
}

/// The `file NAME PATH` documents a program printed, parsed.
fn documents(out: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix("file "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}\n{text}"));
            (name.to_string(), v)
        })
        .collect()
}

fn events(doc: &serde_json::Value) -> &[serde_json::Value] {
    doc["events"].as_array().map(Vec::as_slice).unwrap_or_else(|| panic!("no events array: {doc}"))
}

/// `nc_exec_running` pairs matched by tracking id, as public clients match them:
/// (exec_id, NC, device start ns, device stop ns, CPU start ns, CPU stop ns).
fn running_pairs(ev: &[serde_json::Value]) -> Vec<(u64, u64, u64, u64, u64, u64)> {
    let mut open = std::collections::BTreeMap::new();
    let mut pairs = Vec::new();
    for e in ev.iter().filter(|e| e["event_type"] == "nc_exec_running") {
        let id = e["tracking_id"].as_u64().expect("tracking_id");
        let nc_ts = e["data"]["nc_timestamp_ns"].as_u64().expect("data.nc_timestamp_ns");
        let cpu = e["timestamp_ns"].as_u64().expect("timestamp_ns");
        match e["phase"].as_str() {
            Some("start") => assert!(open.insert(id, e.clone()).is_none(), "tracking id {id} started twice"),
            Some("stop") => {
                let s = open.remove(&id).unwrap_or_else(|| panic!("stop without a start: {e}"));
                assert_eq!(s["data"]["exec_id"], e["data"]["exec_id"]);
                assert_eq!(s["nc_idx"], e["nc_idx"]);
                pairs.push((
                    s["data"]["exec_id"].as_u64().expect("exec_id"),
                    s["nc_idx"].as_u64().expect("nc_idx"),
                    s["data"]["nc_timestamp_ns"].as_u64().expect("start nc_timestamp_ns"),
                    nc_ts,
                    s["timestamp_ns"].as_u64().expect("start timestamp_ns"),
                    cpu,
                ));
            }
            p => panic!("phase {p:?}: {e}"),
        }
    }
    assert!(open.is_empty(), "unmatched starts: {open:?}");
    pairs
}

#[test]
fn system_trace_is_libnrts() {
    let Some(p) = build("c/sys_trace.c") else { return };
    for dev in DEVICES {
        let dir = tmpdir(&format!("capi-sys-trace-{}", dev.replace(':', "-")));
        let env_dir = dir.join("inspect");
        let ex = examples();
        let out = run_env(
            &p,
            &[ex.join("allreduce_1nc.neff"), ex.join("allreduce_2nc.neff"), ex.join("input_32xf32.bin"), dir.clone()],
            dev,
            &[
                ("NEURON_RT_INSPECT_ENABLE", Path::new("1")),
                ("NEURON_RT_INSPECT_OUTPUT_DIR", &env_dir),
                ("NEURON_RT_INSPECT_EVENT_FILTER_TYPE", Path::new("hardware,nrt_execute,^timestamp_sync_point")),
                ("NEURON_RT_INSPECT_EVENT_FILTER_NC", Path::new("1")),
            ],
        );
        let docs = documents(&out);
        let all = events(&docs["all"]);
        // Every record: libnrt's fields; CPU times ordered.
        let mut last = 0;
        for e in all {
            for k in
                ["event_type", "category", "phase", "tracking_id", "timestamp_ns", "process_id", "thread_id", "data"]
            {
                assert!(!e[k].is_null(), "{dev}: {k} missing in {e}");
            }
            let t = e["timestamp_ns"].as_u64().unwrap_or(0);
            assert!(t >= last, "{dev}: events out of CPU-time order at {e}");
            last = t;
        }
        // The runtime's own device timing of each execution: nrt_profile's per-engine device
        // spans of that execution, earliest start to latest end.
        let prof = docs["profile"]["traceEvents"].as_array().expect("profile traceEvents");
        let mut device_ns = std::collections::BTreeMap::<u64, (f64, f64)>::new();
        for s in prof.iter().filter(|e| e["cat"] == "device_exec") {
            let seq = s["args"]["seq"].as_u64().expect("seq");
            let (t0, dur) = (s["ts"].as_f64().expect("ts"), s["dur"].as_f64().expect("dur"));
            let w = device_ns.entry(seq).or_insert((f64::INFINITY, f64::NEG_INFINITY));
            *w = (w.0.min(t0), w.1.max(t0 + dur));
        }
        let pairs = running_pairs(all);
        assert_eq!(pairs.len(), 5, "{dev}: a pair per execute");
        let syncs: Vec<_> = all.iter().filter(|e| e["event_type"] == "timestamp_sync_point").collect();
        for &(exec, nc, d0, d1, c0, c1) in &pairs {
            assert_eq!(nc, 0, "{dev}: the 1-NC model ran on NC 0");
            let span = d1 - d0;
            let (w0, w1) = device_ns[&exec];
            let runtime_ns = ((w1 - w0) * 1000.0).round();
            println!("{dev}: exec {exec}: nc_exec_running {span} ns, the runtime's device timing {runtime_ns} ns");
            assert!(
                (span as f64 - runtime_ns).abs() <= runtime_ns * 0.01,
                "{dev}: exec {exec}: span {span} ns vs the runtime's {runtime_ns} ns"
            );
            // The device times in the CPU domain through the execution's sync point.
            let sp = syncs
                .iter()
                .find(|s| s["data"]["exec_id"] == exec && s["nc_idx"] == nc)
                .unwrap_or_else(|| panic!("{dev}: no sync point for exec {exec}"));
            let (sc, sd) = (
                sp["data"]["cpu_timestamp_ns"].as_u64().expect("cpu_timestamp_ns"),
                sp["data"]["nc_timestamp_ns"].as_u64().expect("nc_timestamp_ns"),
            );
            assert_eq!(c0 as i128, sc as i128 + d0 as i128 - sd as i128, "{dev}: start in the CPU domain");
            assert_eq!(c1 - c0, span, "{dev}: the CPU-domain span is the device span");
        }
        // Filters: NC 1 and nc_exec_running only.
        let filtered = events(&docs["filtered"]);
        assert!(filtered.iter().all(|e| e["event_type"] == "nc_exec_running" && e["nc_idx"] == 1), "{dev}");
        assert_eq!(running_pairs(filtered).len(), 3, "{dev}");
        // NEURON_RT_INSPECT_*: the run's trace in the output directory, filtered.
        let files: Vec<PathBuf> =
            std::fs::read_dir(&env_dir).expect("the inspect output directory").flatten().map(|e| e.path()).collect();
        assert_eq!(files.len(), 1, "{dev}: {files:?}");
        let run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&files[0]).expect("read")).expect("valid JSON");
        let ev = events(&run);
        assert!(
            ev.iter().all(|e| e["event_type"] == "nrt_execute"
                || (e["category"] == "hardware" && e["event_type"] != "timestamp_sync_point" && e["nc_idx"] == 1)),
            "{dev}: the filters hold: {run}"
        );
        // 3 + 3 executions of the 2-NC model gave NC 1 a pair each; 5 + 3 + 2 + 3 nrt_execute calls.
        assert_eq!(running_pairs(ev).len(), 6, "{dev}");
        let execs = ev.iter().filter(|e| e["event_type"] == "nrt_execute" && e["phase"] == "start").count();
        assert_eq!(execs, 13, "{dev}");
    }
}
