//! The CLI's `--json` error status and libnrt.so's return code agree for the same failure:
//! both take it from the error's own `status()` (docs/facts/libnrt.md §5.7). Each failure is
//! produced once through the `neuron-vfio` binary and once through the C API (`nrt_init` /
//! `nrt_load` of the capi crate, in this process).

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use neff::NrtStatus;

/// The status of a failed `neuron-vfio --json ARGS` run (its JSON error line), with `env`.
fn cli_status(args: &[&str], env: &[(&str, &Path)]) -> NrtStatus {
    let mut c = Command::cargo_bin("neuron-vfio").expect("binary");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.arg("--json").args(args).output().expect("run");
    assert!(!out.status.success(), "{args:?} succeeded");
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {line}"));
    let code = v["code"].as_u64().expect("code") as u32;
    let status = NrtStatus::from_code(code).expect("a libnrt status");
    assert_eq!(v["status"], status.name());
    let exit = if (1..=255).contains(&code) { code as i32 } else { 1 };
    assert_eq!(out.status.code(), Some(exit), "{args:?}");
    status
}

fn init_status() -> NrtStatus {
    // SAFETY: nrt_init with null version strings, as nrt.h allows.
    let code = unsafe { nrt::nrt_init(0, std::ptr::null(), std::ptr::null()) };
    NrtStatus::from_code(code as u32).expect("a libnrt status")
}

fn load_status(bytes: &[u8], nc: i32) -> NrtStatus {
    let mut model = std::ptr::null_mut();
    // SAFETY: a valid buffer of `bytes.len()` bytes and a valid out pointer.
    let code = unsafe { nrt::nrt_load(bytes.as_ptr().cast(), bytes.len(), nc, -1, &mut model) };
    assert!(model.is_null() || code == 0);
    NrtStatus::from_code(code as u32).expect("a libnrt status")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("status-agree-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn the_cli_and_the_c_api_report_the_same_status() {
    std::env::set_var("NEURON_VFIO_NRT_QUIET", "1");
    let empty_sysfs = tmp("sysfs");
    std::fs::create_dir_all(&empty_sysfs).unwrap();
    let sysfs = [("NEURON_VFIO_SYSFS", empty_sysfs.as_path())];

    // Device selection (select::SelectError): refused before anything is opened.
    let mut compared = 0;
    for (spec, want) in [
        ("sim:inf1", NrtStatus::Invalid),     // unknown arch
        ("sim:sunda:17", NrtStatus::Invalid), // device count out of range
        ("gpu0", NrtStatus::Invalid),         // neither sim nor a PCI address
        ("0000:99:00.0", NrtStatus::Invalid), // no such PCI device (empty sysfs)
    ] {
        let cli = cli_status(&["--device", spec, "info"], &sysfs);
        std::env::set_var("NEURON_VFIO_SYSFS", &empty_sysfs);
        std::env::set_var("NEURON_VFIO_DEVICE", spec);
        let capi = init_status();
        assert_eq!((spec, cli), (spec, capi), "CLI and C API disagree");
        assert_eq!(cli, want, "{spec}");
        compared += 1;
    }

    // A loaded runtime: NEFF refusals (neff::NeffError) and admission (runtime::RtError).
    std::env::set_var("NEURON_VFIO_DEVICE", "sim");
    assert_eq!(init_status(), NrtStatus::Success);
    let good = neff::builder::single_nc_allreduce().build().unwrap();
    let mut bad_digest = good.clone();
    let last = bad_digest.len() - 1;
    bad_digest[last] ^= 0xff;
    let cases: [(&str, Vec<u8>, i32, &str, NrtStatus); 3] = [
        ("short", vec![0u8; 100], 0, "0", NrtStatus::Invalid),
        ("digest", bad_digest, 0, "0", NrtStatus::Invalid),
        ("far-nc", good, 7, "7", NrtStatus::LoadNotEnoughNc),
    ];
    for (name, bytes, nc, nc_arg, want) in cases {
        let f = tmp(&format!("{name}.neff"));
        std::fs::write(&f, &bytes).unwrap();
        let cli = cli_status(&["--device", "sim", "load", f.to_str().unwrap(), "--nc", nc_arg], &[]);
        let capi = load_status(&bytes, nc);
        assert_eq!((name, cli), (name, capi), "CLI and C API disagree");
        assert_eq!(cli, want, "{name}");
        compared += 1;
    }
    nrt::nrt_close();
    assert_eq!(compared, 7);
    let _ = std::fs::remove_dir_all(empty_sysfs.parent().unwrap());
}
