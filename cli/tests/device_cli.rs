//! `ls`, `info`, `bind`, `unbind` and device selection, on the simulator and on
//! fabricated sysfs trees.

mod common;
use common::*;

use csr_maps::{CAYMAN, SUNDA};

#[test]
fn ls_lists_simulated_devices() {
    let v = json_ok(&["--json", "--device", "sim", "ls"]);
    let a = v.as_array().expect("array");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["bdf"], "sim:0");
    assert_eq!(a[0]["arch"], "sunda");
    assert_eq!(a[0]["nc_count"], SUNDA.counts.ncs);
    assert_eq!(a[0]["hbm_bytes"], SUNDA.consts.hbm_active_size * SUNDA.counts.hbm_stacks);
    assert_eq!(a[0]["driver"], "sim");
    assert!(a[0]["iommu_group"].is_null());

    // NeuronCores as the SDK's tools count them: logical ones (Trn2's default LNC=2).
    let v = json_ok(&["--json", "--device", "sim:cayman", "ls"]);
    assert_eq!(v[0]["arch"], "cayman");
    assert_eq!(v[0]["nc_count"], CAYMAN.counts.ncs / 2);
    assert_eq!(v[0]["physical_nc_count"], CAYMAN.counts.ncs);
    assert_eq!(v[0]["logical_neuroncore_config"], 2);
    let out = cli()
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .args(["--json", "--device", "sim:cayman", "ls"])
        .output()
        .expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (v[0]["nc_count"].as_u64(), v[0]["logical_neuroncore_config"].as_u64()),
        (Some(CAYMAN.counts.ncs), Some(1))
    );

    let v = json_ok(&["--json", "--device", "sim:mariana:2", "ls"]);
    let a = v.as_array().expect("array");
    assert_eq!(a.iter().map(|d| d["bdf"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["sim:0", "sim:1"]);
    assert!(a.iter().all(|d| d["arch"] == "mariana"));

    let out = cli().args(["--device", "sim", "ls"]).output().expect("run");
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("DEVICE") && s.contains("sim:0") && s.contains("sunda"), "{s}");
    // neuron-ls's -j under neuron-vfio's name is --json.
    let j = cli().args(["--device", "sim", "ls", "-j"]).output().expect("run");
    assert!(j.status.success(), "{}", String::from_utf8_lossy(&j.stderr));
    let jv: serde_json::Value = serde_json::from_slice(&j.stdout).expect("ls -j is JSON");
    assert_eq!(jv[0]["bdf"], "sim:0");
}

#[test]
fn ls_reads_sysfs_with_any_driver() {
    let t = FakeTree::new("ls");
    let dev = SUNDA.pci_devices[0];
    t.add("0000:10:1e.0", SUNDA.pci_vendor, dev, Some("vfio-pci"), Some(7));
    t.add("0000:20:1e.0", CAYMAN.pci_vendor, CAYMAN.pci_devices[0], Some("neuron"), Some(9));
    t.add("0000:30:1e.0", CAYMAN.pci_vendor, CAYMAN.pci_devices[0], None, None);
    t.add("0000:00:03.0", 0x8086, 0x10d3, Some("e1000e"), Some(2));
    let out = t.cmd().args(["--json", "ls"]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let a = v.as_array().expect("array");
    assert_eq!(a.len(), 3, "{v}");
    assert_eq!(a[0]["bdf"], "0000:10:1e.0");
    assert_eq!(a[0]["arch"], "sunda");
    assert_eq!(a[0]["driver"], "vfio-pci");
    assert_eq!(a[0]["iommu_group"], 7);
    assert_eq!(a[1]["arch"], "cayman");
    assert_eq!(a[1]["driver"], "neuron");
    assert_eq!(a[1]["nc_count"], CAYMAN.counts.ncs / 2, "logical NeuronCores at Trn2's default LNC=2");
    assert!(a[2]["driver"].is_null() && a[2]["iommu_group"].is_null());
    // One BDF.
    let out = t.cmd().args(["--json", "--device", "20:1e.0", "ls"]).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["bdf"], "0000:20:1e.0");
}

#[test]
fn default_device_falls_back_to_the_simulator_with_a_notice() {
    let t = FakeTree::new("default");
    // A Neuron device exists but is not on vfio-pci: not chosen.
    t.add("0000:10:1e.0", SUNDA.pci_vendor, SUNDA.pci_devices[0], Some("neuron"), Some(7));
    let out = t.cmd().args(["--json", "info"]).output().expect("run");
    assert!(out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("notice:") && e.contains("simulator"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["simulated"], true);
    // With nothing at all: same.
    let empty = FakeTree::new("default-empty");
    let out = empty.cmd().args(["--json", "ls"]).output().expect("run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("notice:"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["bdf"], "sim:0");
}

#[test]
fn info_describes_the_device() {
    for (spec, arch) in [("sim", &SUNDA), ("sim:cayman", &CAYMAN)] {
        let v = json_ok(&["--json", "--device", spec, "info"]);
        assert_eq!(v["arch"], arch.name);
        assert_eq!(v["simulated"], true);
        assert_eq!(v["fw_api_version"], 7);
        assert_eq!(v["device_id"], 0);
        assert!(v["serial"].as_str().is_some_and(|s| s.starts_with("0x")));
        assert_eq!(v["counts"]["ncs"], arch.counts.ncs);
        assert_eq!(v["hbm"].as_array().map(Vec::len), Some(arch.counts.hbm_stacks as usize));
        assert_eq!(v["hbm"][0]["ecc_uncorrectable"], 0);
        let ncs = v["ncs"].as_array().expect("ncs");
        assert_eq!(ncs.len(), arch.counts.ncs as usize);
        assert_eq!(ncs[0]["engines"].as_array().map(Vec::len), Some(5));
        assert_eq!(ncs[0]["engines"][0]["engine"], "pe");
        assert_eq!(ncs[0]["engines"][0]["state"], "idle");
        assert_eq!(ncs[0]["fatal"]["dma_abort"], false);
    }
    // A topology: commands act on device 0.
    let v = json_ok(&["--json", "--device", "sim:mariana:2", "info"]);
    assert_eq!(
        (v["arch"].as_str(), v["device"].as_str(), v["device_id"].as_u64()),
        (Some("mariana"), Some("sim:0"), Some(0))
    );
    let out = cli().args(["--device", "sim", "info"]).output().expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("firmware: API version 7") && s.contains("NC 1: engines pe=idle"), "{s}");
}

#[test]
fn device_errors_are_one_clear_line() {
    let t = FakeTree::new("errors");
    t.add("0000:10:1e.0", SUNDA.pci_vendor, SUNDA.pci_devices[0], Some("neuron"), Some(7));
    t.add("0000:11:1e.0", SUNDA.pci_vendor, SUNDA.pci_devices[0], None, Some(8));
    let e = err_line(t.cmd().args(["--device", "0000:00:09.0", "info"]));
    assert!(e.contains("no PCI device 0000:00:09.0"), "{e}");
    let e = err_line(t.cmd().args(["--device", "0000:10:1e.0", "csr", "read", "misc_ram.device_id"]));
    assert!(e.contains("0000:10:1e.0 is bound to neuron; run: neuron-vfio bind 0000:10:1e.0"), "{e}");
    let e = err_line(t.cmd().args(["--device", "11:1e.0", "info"]));
    assert!(e.contains("not bound to any driver; run: neuron-vfio bind 0000:11:1e.0"), "{e}");
    // On vfio-pci but no VFIO in /dev: what to load.
    t.set_driver("0000:10:1e.0", Some("vfio-pci"));
    let e = err_line(t.cmd().args(["--device", "0000:10:1e.0", "info"]));
    assert!(e.contains("modprobe vfio-pci"), "{e}");
    let e = err_line(cli().args(["--device", "gpu0", "info"]));
    assert!(e.contains("bad device `gpu0`"), "{e}");
    let out = cli().args(["--json", "--device", "sim:inf1", "info"]).output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "NRT_INVALID");
}

#[test]
fn bind_checks_the_environment_and_reports_what_happened() {
    let t = FakeTree::new("bind");
    let bdf = "0000:10:1e.0";
    t.add(bdf, SUNDA.pci_vendor, SUNDA.pci_devices[0], Some("neuron"), Some(7));
    // No /dev/vfio: say which modules to load.
    let e = err_line(t.cmd().args(["bind", bdf]));
    assert!(e.contains("modprobe vfio-pci") && e.contains("vfio_iommu_type1"), "{e}");
    t.with_vfio_node();
    // A group member on another driver: not viable, names it.
    t.add("0000:10:1e.1", 0x8086, 0x10d3, Some("e1000e"), Some(7));
    let e = err_line(t.cmd().args(["bind", bdf]));
    assert!(e.contains("not viable") && e.contains("0000:10:1e.1 (driver e1000e)"), "{e}");
    t.set_driver("0000:10:1e.1", None);
    // The fabricated kernel never rebinds: the attempt is made, noticed and undone.
    let e = err_line(t.cmd().args(["bind", bdf]));
    assert!(e.contains("did not take effect") && e.contains("driver now: neuron"), "{e}");
    assert_eq!(t.read("sys/bus/pci/drivers/neuron/unbind"), bdf);
    assert_eq!(t.read("sys/bus/pci/drivers_probe"), bdf);
    assert_eq!(t.read(&format!("sys/devices/pci0000:00/{bdf}/driver_override")), "\n");
    // Already on vfio-pci: nothing to do.
    t.set_driver(bdf, Some("vfio-pci"));
    let out = t.cmd().args(["--json", "bind", bdf]).output().expect("run");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["changed"], false);
    // Not a Neuron device: refused.
    let e = err_line(t.cmd().args(["bind", "0000:10:1e.1"]));
    assert!(e.contains("not a Neuron device"), "{e}");
    let e = err_line(t.cmd().args(["bind", "0000:77:00.0"]));
    assert!(e.contains("no PCI device 0000:77:00.0"), "{e}");
}

#[test]
fn bind_all_selects_by_neuron_ids_and_reports_each_device() {
    let t = FakeTree::new("bind-all");
    t.with_vfio_node();
    t.add("0000:10:1e.0", SUNDA.pci_vendor, SUNDA.pci_devices[0], Some("vfio-pci"), Some(7));
    t.add("0000:20:1e.0", CAYMAN.pci_vendor, CAYMAN.pci_devices[0], Some("vfio-pci"), Some(8));
    t.add("0000:30:1e.0", CAYMAN.pci_vendor, CAYMAN.pci_devices[0], Some("neuron"), Some(9));
    t.add("0000:00:03.0", 0x8086, 0x10d3, Some("e1000e"), Some(2));
    // Only the sunda id: one device, already on vfio-pci.
    let sunda = format!("{:04x}:{:04x}", SUNDA.pci_vendor, SUNDA.pci_devices[0]);
    let out = t.cmd().args(["--json", "bind", "--ids", &sunda]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["bdf"], "0000:10:1e.0");
    assert_eq!(v[0]["changed"], false);
    // Every Neuron device (never the e1000e): the one the fabricated kernel does not rebind
    // is reported with its error, and the command fails.
    let out = t.cmd().args(["--json", "bind", "--all"]).output().expect("run");
    assert!(!out.status.success());
    let first = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string();
    let v: serde_json::Value = serde_json::from_str(&first).expect("json");
    let a = v.as_array().expect("array");
    assert_eq!(
        a.iter().map(|d| d["bdf"].as_str().unwrap_or("")).collect::<Vec<_>>(),
        ["0000:10:1e.0", "0000:20:1e.0", "0000:30:1e.0"]
    );
    assert!(a[2]["error"].as_str().is_some_and(|e| e.contains("did not take effect")), "{v}");
    assert!(a[0].get("error").is_none() && a[1].get("error").is_none(), "{v}");
    // A non-Neuron id is refused before anything is touched; a BDF and --all conflict.
    let e = err_line(t.cmd().args(["bind", "--ids", "8086:10d3"]));
    assert!(e.contains("not a Neuron PCI id"), "{e}");
    let e = err_line(t.cmd().args(["bind", "--ids", "zz"]));
    assert!(e.contains("bad PCI id"), "{e}");
    let out = t.cmd().args(["bind", "0000:10:1e.0", "--all"]).output().expect("run");
    assert!(!out.status.success());
}

#[test]
fn unbind_restores_the_recorded_driver_or_reprobes() {
    let t = FakeTree::new("unbind");
    let bdf = "0000:10:1e.0";
    t.add(bdf, SUNDA.pci_vendor, SUNDA.pci_devices[0], Some("neuron"), Some(7));
    t.set_driver(bdf, Some("vfio-pci"));
    std::fs::write(t.path(&format!("state/{bdf}.driver")), "neuron\n").expect("state");
    let out = t.cmd().args(["--json", "unbind", bdf]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["restored"], "neuron");
    assert_eq!(t.read("sys/bus/pci/drivers/vfio-pci/unbind"), bdf);
    assert_eq!(t.read("sys/bus/pci/drivers/neuron/bind"), bdf);
    assert_eq!(t.read(&format!("sys/devices/pci0000:00/{bdf}/driver_override")), "\n");
    assert!(!exists(&t.path(&format!("state/{bdf}.driver"))), "record consumed");
    // Unknown original driver: clear the override and reprobe.
    let out = t.cmd().args(["unbind", bdf]).output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("reprobed"));
    assert_eq!(t.read("sys/bus/pci/drivers_probe"), bdf);
    // Not on vfio-pci: nothing to do.
    t.set_driver(bdf, Some("neuron"));
    let out = t.cmd().args(["unbind", bdf]).output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to do"));
}

#[test]
fn log_level_controls_stderr() {
    let out = cli().env("NEURON_RT_LOG_LEVEL", "debug").args(["--device", "sim", "info"]).output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("opened the simulator"));
    let out = cli().args(["--device", "sim", "info"]).output().expect("run");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
