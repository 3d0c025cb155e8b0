//! The Neuron SDK layout (docs/sdk.md): libnrt's SONAME is `libnrt.so.1`; scripts/install.sh
//! lays out lib/, include/nrt/, include/ndl/, bin/ and lib/pkgconfig/nrt.pc under a prefix;
//! a CMake project that finds libnrt the way SDK clients do (tests/cmake/) and a program
//! compiled with `pkg-config --cflags --libs nrt` both build against that prefix, record
//! `NEEDED libnrt.so.1`, resolve it there (ldd) and run a model on the simulator with exact
//! outputs.
//!
//! The install reuses this build's artifacts (`--from-target`: CI builds one profile).
//! Without cmake, pkg-config, readelf or a C compiler the checks that need them print a
//! notice and pass, unless NEURON_VFIO_REQUIRE_CMAKE=1 (CI), which makes a missing tool fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// target/<profile> of this build (the test binary lies in its deps/).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent().and_then(|d| d.parent()).expect("target dir").to_path_buf()
}

/// The built libnrt.so (`cargo test --workspace` builds it into deps/; a `cargo build` also
/// copies it up, where an older copy may lie: deps/ first).
fn built_lib() -> PathBuf {
    let d = profile_dir();
    [d.join("deps/libnrt.so"), d.join("libnrt.so")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no libnrt.so in {} (cargo test --workspace builds it)", d.display()))
}

/// Whether `tool` runs; a missing tool fails only with NEURON_VFIO_REQUIRE_CMAKE=1.
fn have(tool: &str) -> bool {
    if Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(
        std::env::var("NEURON_VFIO_REQUIRE_CMAKE").as_deref() != Ok("1"),
        "{tool} is not installed, and NEURON_VFIO_REQUIRE_CMAKE=1 (scripts/test-all.sh installs it)"
    );
    eprintln!("notice: {tool} is not installed: skipping its checks");
    false
}

fn ok(what: &str, o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{what} failed ({:?}):\n{out}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    out
}

fn run(what: &str, c: &mut Command) -> String {
    ok(what, c.output().unwrap_or_else(|e| panic!("run {what}: {e}")))
}

fn readelf_dynamic(file: &Path) -> String {
    run("readelf -d", Command::new("readelf").arg("-d").arg(file))
}

/// The prefix scripts/install.sh filled (once per test binary, shared by the tests).
fn installed() -> PathBuf {
    static PREFIX: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-prefix");
            let _ = std::fs::remove_dir_all(&prefix);
            let out = run(
                "scripts/install.sh",
                Command::new(root().join("scripts/install.sh"))
                    .arg("--prefix")
                    .arg(&prefix)
                    .arg("--from-target")
                    .arg(profile_dir()),
            );
            println!("{out}");
            prefix
        })
        .clone()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Run a client built against `prefix` on the simulator: its outputs equal the input
/// (allreduce_1nc is the identity), and ldd resolves libnrt.so.1 inside `prefix`.
fn check_client(prog: &Path, prefix: &Path) {
    let lib = prefix.join("lib/libnrt.so.1");
    let dynamic = readelf_dynamic(prog);
    assert!(dynamic.contains("Shared library: [libnrt.so.1]"), "{} needs libnrt.so.1:\n{dynamic}", prog.display());
    if have("ldd") {
        // RUNPATH (CMake) or LD_LIBRARY_PATH (the pkg-config build) points into the prefix;
        // cargo's LD_LIBRARY_PATH is dropped so nothing else can answer.
        let ldd = run(
            "ldd",
            Command::new("ldd").arg(prog).env_remove("LD_LIBRARY_PATH").env("LD_LIBRARY_PATH", prefix.join("lib")),
        );
        let line = ldd.lines().find(|l| l.contains("libnrt")).unwrap_or_else(|| panic!("ldd names no libnrt:\n{ldd}"));
        let resolved = line.split("=>").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("");
        assert!(line.trim_start().starts_with("libnrt.so.1 "), "{line}");
        assert_eq!(
            std::fs::canonicalize(resolved).ok(),
            std::fs::canonicalize(&lib).ok(),
            "libnrt.so.1 resolves to the prefix's: {line}"
        );
    }
    let ex = root().join("examples");
    let out = run(
        "the client",
        Command::new(prog)
            .arg(ex.join("allreduce_1nc.neff"))
            .arg(ex.join("input_32xf32.bin"))
            .env("LD_LIBRARY_PATH", prefix.join("lib"))
            .env("NEURON_VFIO_DEVICE", "sim")
            .env_remove("NEURON_RT_VISIBLE_CORES"),
    );
    let input = floats(&std::fs::read(ex.join("input_32xf32.bin")).expect("input"));
    let line = out.lines().find(|l| l.starts_with("output ")).unwrap_or_else(|| panic!("no output line:\n{out}"));
    let got: Vec<f32> = line
        .split_once(':')
        .map(|(_, v)| v.split_whitespace().map(|x| x.parse().expect("a float")).collect())
        .unwrap_or_default();
    assert_eq!(got, input, "allreduce_1nc's output is its input, exactly:\n{out}");
}

#[test]
fn libnrt_has_libnrts_soname() {
    if !have("readelf") {
        return;
    }
    let d = readelf_dynamic(&built_lib());
    assert!(d.contains("Library soname: [libnrt.so.1]"), "{d}");
}

#[test]
fn install_lays_out_the_sdk_tree() {
    let p = installed();
    let lib = p.join("lib");
    assert!(lib.join("libnrt.so.1").is_file());
    assert_eq!(std::fs::read_link(lib.join("libnrt.so")).ok(), Some(PathBuf::from("libnrt.so.1")));
    for h in std::fs::read_dir(root().join("capi/include/nrt")).expect("capi/include/nrt") {
        let name = h.expect("entry").file_name();
        assert!(p.join("include/nrt").join(&name).is_file(), "include/nrt/{name:?}");
    }
    for h in std::fs::read_dir(root().join("capi/include/ndl")).expect("capi/include/ndl") {
        let name = h.expect("entry").file_name();
        assert!(p.join("include/ndl").join(&name).is_file(), "include/ndl/{name:?}");
    }
    // Every binary of the cli package this build made.
    let toml = std::fs::read_to_string(root().join("cli/Cargo.toml")).expect("cli/Cargo.toml");
    let mut bins: Vec<String> = toml
        .split("[[bin]]")
        .skip(1)
        .filter_map(|s| s.lines().find(|l| l.trim_start().starts_with("name")))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect();
    for f in std::fs::read_dir(root().join("cli/src/bin")).into_iter().flatten().flatten() {
        if let Some(stem) = f.path().file_stem().and_then(|s| s.to_str()) {
            bins.push(stem.to_string());
        }
    }
    assert!(bins.iter().any(|b| b == "neuron-vfio"), "{bins:?}");
    for b in bins.iter().filter(|b| profile_dir().join(b).is_file()) {
        assert!(p.join("bin").join(b).is_file(), "bin/{b} installed");
    }
    let pc = std::fs::read_to_string(lib.join("pkgconfig/nrt.pc")).expect("nrt.pc");
    for want in ["Name: nrt", "Version: ", "Libs: -L${libdir} -lnrt", "Cflags: -I${includedir}"] {
        assert!(pc.contains(want), "nrt.pc lacks `{want}`:\n{pc}");
    }
    // The installed tool runs from the prefix.
    let v = run("bin/neuron-vfio --help", Command::new(p.join("bin/neuron-vfio")).arg("--help"));
    assert!(v.contains("Usage"), "{v}");
}

#[test]
fn cmake_project_finds_links_and_runs_libnrt() {
    if !have("cmake") || !have("cc") || !have("readelf") {
        return;
    }
    let prefix = installed();
    let build = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-cmake-build");
    let _ = std::fs::remove_dir_all(&build);
    let conf = run(
        "cmake configure",
        Command::new("cmake")
            .arg("-S")
            .arg(root().join("tests/cmake"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DNEURON_ROOT={}", prefix.display())),
    );
    assert!(conf.contains(&format!("libnrt: {}", prefix.join("lib/libnrt.so").display())), "{conf}");
    run("cmake build", Command::new("cmake").arg("--build").arg(&build));
    check_client(&build.join("nrt_client"), &prefix);
}

#[test]
fn pkg_config_gives_the_prefix_flags() {
    if !have("pkg-config") || !have("cc") || !have("readelf") {
        return;
    }
    let prefix = installed();
    let flags = run(
        "pkg-config",
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "nrt"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
    );
    let abs = std::fs::canonicalize(&prefix).expect("prefix");
    let words: Vec<&str> = flags.split_whitespace().collect();
    assert_eq!(
        words,
        [
            format!("-I{}", abs.join("include").display()),
            format!("-L{}", abs.join("lib").display()),
            "-lnrt".to_string()
        ],
        "{flags}"
    );
    let prog = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-pkgconfig-client");
    run(
        "cc",
        Command::new("cc")
            .arg("-std=c11")
            .arg(root().join("tests/cmake/nrt_client.c"))
            .arg("-o")
            .arg(&prog)
            .args(&words),
    );
    check_client(&prog, &prefix);
}

#[test]
fn install_honours_neuron_root_and_refuses_what_it_cannot_install() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk-fake");
    let _ = std::fs::remove_dir_all(&tmp);
    let (target, empty, root_dir) = (tmp.join("target"), tmp.join("empty"), tmp.join("root"));
    for d in [&target, &empty] {
        std::fs::create_dir_all(d).expect("temporary directory");
    }
    std::fs::write(target.join("libnrt.so"), b"the library").expect("write");
    let script = root().join("scripts/install.sh");
    let install = |from: &Path, env_root: Option<&Path>| {
        let mut c = Command::new(&script);
        c.arg("--from-target").arg(from).env_remove("NEURON_ROOT");
        if let Some(r) = env_root {
            c.env("NEURON_ROOT", r);
        }
        c.output().expect("run scripts/install.sh")
    };
    // No binary built: refused before anything is written, as is a directory without the library.
    let o = install(&target, Some(&root_dir));
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no cli binary"), "{o:?}");
    assert!(!root_dir.exists(), "a refused install writes nothing");
    let o = install(&empty, Some(&root_dir));
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no libnrt.so"), "{o:?}");
    // NEURON_ROOT is the default prefix; binaries not built are skipped by name.
    std::fs::write(target.join("neuron-vfio"), b"#!/bin/sh\n").expect("write");
    let o = install(&target, Some(&root_dir));
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("neuron-vfio-bench is not built"), "{o:?}");
    assert_eq!(std::fs::read(root_dir.join("lib/libnrt.so")).ok().as_deref(), Some(&b"the library"[..]));
    assert!(root_dir.join("bin/neuron-vfio").is_file() && !root_dir.join("bin/neuron-vfio-bench").exists());
    let o = Command::new(&script).arg("--bogus").output().expect("run scripts/install.sh");
    assert_eq!(o.status.code(), Some(2), "an unknown option: usage, exit 2");
}
