//! What a new user hit first (issue 17): each rough edge, checked.

use std::path::PathBuf;
use std::process::Command as StdCommand;

use assert_cmd::Command;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn cli() -> Command {
    let mut c = Command::cargo_bin("neuron-vfio").expect("binary");
    c.current_dir(root()).env("NEURON_VFIO_COUNTERS", "0");
    c
}

const ONE: &str = "examples/allreduce_1nc.neff";
const INPUT: &str = "input=examples/input_32xf32.bin";

#[test]
fn no_colour_codes_when_stderr_is_not_a_terminal() {
    // An unknown log level is warned about through the logger.
    let out = cli().env("NEURON_RT_LOG_LEVEL", "loud").args(["neff", "inspect", ONE]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NEURON_RT_LOG_LEVEL") && err.contains("\"loud\""), "{err}");
    assert!(!err.contains('\x1b'), "escape codes in a pipe: {err:?}");
    // The rule itself: a terminal, and NO_COLOR unset or empty.
    use std::ffi::OsStr;
    assert!(cli::use_colour(true, None));
    assert!(cli::use_colour(true, Some(OsStr::new(""))));
    assert!(!cli::use_colour(true, Some(OsStr::new("1"))));
    assert!(!cli::use_colour(false, None));
}

#[test]
fn an_unknown_input_name_is_named_with_the_models_inputs() {
    let out = cli().args(["--device", "sim", "run", ONE, "--input", "foo=examples/input_32xf32.bin"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model has no input `foo` (inputs: input)"), "{err}");
    assert!(!err.contains("no --input for model input"), "{err}");
}

#[test]
fn every_json_failure_has_status_code_and_error() {
    let cases: [&[&str]; 3] = [
        &[
            "--json",
            "--device",
            "sim",
            "run",
            ONE,
            "--input",
            INPUT,
            "--sim-fault",
            "nq-overflow@nc0",
            "--timeout",
            "1",
        ],
        &["--json", "--device", "sim", "run", ONE, "--input", INPUT, "--sim-fault", "fp-nan@nc0:act"],
        &["--json", "--device", "sim", "run", ONE],
    ];
    for args in cases {
        let out = cli().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["status"].as_str().is_some_and(|s| s.starts_with("NRT_") && s != "NRT_SUCCESS"), "{v}");
        assert!(v["code"].as_u64().is_some_and(|c| c > 0), "{v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{args:?}: {v}");
    }
}

#[test]
fn help_lists_only_the_options_that_apply() {
    let help = |args: &[&str]| {
        let out = cli().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    for deviceless in
        [&["neff", "--help"][..], &["neff", "inspect", "--help"], &["csr", "list", "--help"], &["bind", "--help"]]
    {
        let h = help(deviceless);
        assert!(!h.contains("--device") && !h.contains("--sim-timing"), "{deviceless:?}:\n{h}");
        assert!(h.contains("--json"), "{deviceless:?}:\n{h}");
    }
    let h = help(&["csr", "read", "--help"]);
    assert!(h.contains("--device") && h.contains("--sim-timing"), "{h}");
    // Hidden, not removed: still accepted where given.
    assert!(cli().args(["--device", "sim", "neff", "inspect", ONE]).output().unwrap().status.success());
}

#[test]
fn csr_list_sources_are_readable_and_blocked_is_explained() {
    let out = cli().args(["csr", "list", "--arch", "cayman"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().take(3).any(|l| l.starts_with('#') && l.contains("blocked:")), "{}", &text[..400]);
    assert!(
        !text.contains(concat!("NEURON_HW", "_FACTS")) && !text.contains(concat!("NRT", "_FACTS")),
        "internal note ids"
    );
    assert!(!text.contains("(m:") && !text.contains(" m:"), "source tags");
    assert!(text.contains("kmod udma/udma_regs.h"), "public file names");
}

fn script(name: &str) -> StdCommand {
    let mut c = StdCommand::new("bash");
    c.arg(root().join("scripts").join(name));
    c
}

#[test]
fn scripts_print_usage_and_use_the_tools_environment_names() {
    for s in ["vfio-bind.sh", "vfio-unbind.sh"] {
        let out = script(s).arg("-h").output().unwrap();
        assert!(out.status.success(), "{s} -h");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage:") && text.contains(s), "{s}: {text}");
        assert!(!script(s).arg("-Z").output().unwrap().status.success(), "{s} -Z");
    }
    for s in ["vfio-bind.sh", "vfio-unbind.sh", "hugepages.sh"] {
        let text = std::fs::read_to_string(root().join("scripts").join(s)).unwrap();
        assert!(!text.contains("SYSFS_ROOT") && !text.contains("${VFIO_STATE_DIR"), "{s}");
    }
    // vfio-unbind.sh on a fabricated tree: NEURON_VFIO_SYSFS and NEURON_VFIO_STATE_DIR are
    // the ones it reads (it clears the override and forgets the recorded driver).
    let t = std::env::temp_dir().join(format!("nv-scripts-{}", std::process::id()));
    let dev = t.join("sys/bus/pci/devices/0000:00:1e.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("vendor"), "0x1d0f\n").unwrap();
    std::fs::write(dev.join("device"), "0x7264\n").unwrap();
    std::fs::write(dev.join("driver_override"), "vfio-pci\n").unwrap();
    std::fs::create_dir_all(t.join("state")).unwrap();
    std::fs::write(t.join("state/0000:00:1e.0.driver"), "\n").unwrap();
    let out = script("vfio-unbind.sh")
        .env("NEURON_VFIO_SYSFS", t.join("sys"))
        .env("NEURON_VFIO_STATE_DIR", t.join("state"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0000:00:1e.0: no driver -> no driver"));
    assert!(!t.join("state/0000:00:1e.0.driver").exists());
    assert_eq!(std::fs::read_to_string(dev.join("driver_override")).unwrap().trim(), "");
    let _ = std::fs::remove_dir_all(&t);
}
