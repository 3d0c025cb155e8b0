//! End to end from C: compile tests/c/allreduce.c with the system C compiler against
//! include/nrt.h and the built libnrt.so, run it on the simulator, check what it printed.
//!
//! Without a C compiler the tests print a notice and pass, unless NEURON_VFIO_REQUIRE_CC=1.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success());
    if ok {
        return Some(cc);
    }
    let msg = format!("no C compiler (`{cc} --version` failed; set CC)");
    if std::env::var("NEURON_VFIO_REQUIRE_CC").as_deref() == Ok("1") {
        panic!("{msg}, and NEURON_VFIO_REQUIRE_CC=1");
    }
    eprintln!("notice: {msg}: skipping the C end-to-end test");
    None
}

/// The directory holding libnrt.so: next to the test binary (target/<profile>/deps) or one
/// level up (target/<profile>).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("test binary directory").to_path_buf();
    for d in [deps.clone(), deps.parent().map(Path::to_path_buf).unwrap_or_default()] {
        if d.join("libnrt.so").is_file() {
            return d;
        }
    }
    panic!("libnrt.so not found next to {} (or its parent)", exe.display());
}

/// Compile the program once per test binary.
fn program() -> Option<&'static PathBuf> {
    static PROG: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROG.get_or_init(|| {
        let cc = cc()?;
        let lib = lib_dir();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-allreduce");
        let src = manifest().join("tests/c/allreduce.c");
        let o = Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(manifest().join("include"))
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .arg(format!("-L{}", lib.display()))
            .arg("-lnrt")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .output()
            .expect("run the C compiler");
        assert!(
            o.status.success(),
            "{cc} failed on {}:\n{}{}",
            src.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Some(out)
    })
    .as_ref()
}

fn run(device: &str) {
    let Some(prog) = program() else { return };
    let ex = manifest().join("../examples");
    let o = Command::new(prog)
        .arg(ex.join("allreduce_1nc.neff"))
        .arg(ex.join("allreduce_2nc.neff"))
        .arg(ex.join("input_32xf32.bin"))
        // The library this build made, first: cargo's LD_LIBRARY_PATH also lists
        // target/debug, where an older uplifted libnrt.so may lie (RUNPATH comes after it).
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("NEURON_VFIO_DEVICE", device)
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .output()
        .expect("run the C program");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("--- NEURON_VFIO_DEVICE={device}: exit {:?}\n{stdout}--- stderr\n{stderr}", o.status.code());
    assert!(o.status.success(), "the C program failed on {device}:\n{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("ALL OK"));
    for want in [
        "ok   nrt_load before nrt_init -> 13",
        "ok   nrt_init -> 0",
        "ok   output output == 1x input (0 mismatches",
        "ok   output output == 2x input (0 mismatches",
        "ok   nrt_unload(NULL) -> 2",
        "ok   nrt_execute(NULL model) -> 2",
        "ok   nrt_load after nrt_close -> 14",
    ] {
        assert!(stdout.contains(want), "missing `{want}` in:\n{stdout}");
    }
    assert!(stdout.contains("nrt_get_model_nc_count -> 0 (2 NCs)"), "the 2-NC model spans 2 NCs:\n{stdout}");
}

#[test]
fn c_program_on_the_default_simulator() {
    run("sim");
}

#[test]
fn c_program_on_a_simulated_cayman() {
    run("sim:cayman");
}
