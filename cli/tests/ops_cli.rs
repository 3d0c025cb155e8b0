//! `csr read|write|dump|watch`, `nq dump|watch`, `dma copy|bench` on the simulator.

mod common;
use common::*;

use csr_maps::{Arch, CAYMAN, SUNDA};

const SIMS: [(&str, &Arch); 2] = [("sim", &SUNDA), ("sim:cayman", &CAYMAN)];

#[test]
fn csr_write_then_read_in_one_call() {
    for (spec, arch) in SIMS {
        let v = json_ok(&[
            "--json",
            "--device",
            spec,
            "csr",
            "write",
            "tpb_sem[0].sem_set[3]",
            "5",
            "--force",
            "--then-read",
            "tpb_sem[0].sem_read[3]",
            "tpb_sem[0].sem_read[4]",
        ]);
        let set = arch.resolve("tpb_sem[0].sem_set[3]").expect("reg");
        assert_eq!(v["written"]["offset"], set.offset);
        assert_eq!(v["written"]["value"], 5);
        assert_eq!(v["reads"][0]["name"], "tpb_sem[0].sem_read[3]");
        assert_eq!(v["reads"][0]["value"], 5, "{spec}");
        assert_eq!(v["reads"][1]["value"], 0, "{spec}");
    }
    // Text form; --then-read with no names reads the written register back.
    let out = cli()
        .args(["--device", "sim", "csr", "write", "tpb_sem[1].event[7]", "1", "--then-read"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("wrote 0x1 to tpb_sem[1].event[7]") && s.contains("= 0x00000001"), "{s}");
}

#[test]
fn csr_read_several_by_name_and_offset() {
    for (spec, arch) in SIMS {
        let head = arch.resolve("udma[33].m2s.q[0].head").expect("reg");
        let off = format!("{:#x}", head.offset);
        let v = json_ok(&["--json", "--device", spec, "csr", "read", "misc_ram.fw_api_version", &off]);
        assert_eq!(v[0]["name"], "misc_ram.fw_api_version");
        assert_eq!(v[0]["value"], 7);
        assert_eq!(v[1]["name"], "udma[33].m2s.q[0].head");
        // init() brought the engine up: ring id starts at 1.
        assert_eq!(v[1]["fields"]["ring_id"], 1, "{spec}");
        assert_eq!(v[1]["fields"]["idx"], 0);
    }
}

#[test]
fn csr_errors_are_one_line() {
    let e = err_line(cli().args(["--device", "sim", "csr", "read", "udma[33].m2s.q[0].bogus"]));
    assert!(e.contains("NRT_INVALID") && e.contains("`bogus` is not in block"), "{e}");
    let e = err_line(cli().args(["--device", "sim", "csr", "read", "nosuch.reg"]));
    assert!(e.contains("unknown register name `nosuch.reg`"), "{e}");
    let e = err_line(cli().args(["--device", "sim", "csr", "read", "udma[99].m2s.q[0].head"]));
    assert!(e.contains("no instance 99 of `udma`"), "{e}");
    let e = err_line(cli().args(["--device", "sim:cayman", "csr", "read", "tpb_sem[0].sem_read[999]"]));
    assert!(e.contains("index 999 of `sem_read` out of range"), "{e}");
    let e = err_line(cli().args(["--device", "sim", "csr", "read", "tpb_sem[0].sem_set[0]"]));
    assert!(e.contains("write-only"), "{e}");
    let e = err_line(cli().args(["--device", "sim", "csr", "write", "tpb_sem[0].sem_set[0]", "0x1_0000_0000"]));
    assert!(e.contains("does not fit"), "{e}");
    let out = cli().args(["--json", "--device", "sim", "csr", "dump", "udma[99]"]).output().expect("run");
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "NRT_INVALID");
}

#[test]
fn csr_write_refuses_blocked_registers_without_force() {
    for (spec, arch) in SIMS {
        let r = arch.resolve("misc_ram.trigger").expect("reg");
        assert!(r.def.blocked);
        let e = err_line(cli().args(["--device", spec, "csr", "write", "misc_ram.trigger", "0"]));
        assert!(e.contains("write-blocked") && e.contains("--force"), "{e}");
        // By offset too.
        let off = format!("{:#x}", r.offset);
        let e = err_line(cli().args(["--device", spec, "csr", "write", &off, "0"]));
        assert!(e.contains("write-blocked"), "{e}");
    }
    let out =
        cli().args(["--device", "sim", "csr", "write", "misc_ram.trigger", "0", "--force"]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn csr_write_refuses_guarded_registers_without_force() {
    for (spec, arch) in SIMS {
        for (reg, class) in [
            ("udma[33].m2s.q[0].ring_base_lo", "dma-address"),
            ("udma[33].s2m.q[1].comp_base_hi", "dma-address"),
            ("sdma[0].trace_nq.nq[0].base_lo", "dma-address"),
            ("notific[0].nq[48].base_lo", "dma-address"),
            ("seq[0].eng[0].ifq_base_lo", "dma-address"),
            ("seq[0].eng[1].ctrl", "sequencer-control"),
            ("q7[0].ll_addr", "dma-address"),
            ("nx[0].log_addr", "dma-address"),
            ("misc_ram.reset_request", "reset"),
            ("misc_ram.reset_map", "reset"),
            ("tpb_sem[1].sem_set[0]", "semaphore"),
            ("tpb_sem[0].sem_dec[9]", "semaphore"),
        ] {
            let r = arch.resolve(reg).unwrap_or_else(|e| panic!("{reg}: {e}"));
            let e = err_line(cli().args(["--device", spec, "csr", "write", reg, "0"]));
            assert!(
                e.contains("NRT_INVALID") && e.contains(&format!("guard `{class}`")) && e.contains("--force"),
                "{spec} {reg}: {e}"
            );
            // By BAR0 offset too.
            let off = format!("{:#x}", r.offset);
            let e = err_line(cli().args(["--device", spec, "csr", "write", &off, "0"]));
            assert!(e.contains(&format!("guard `{class}`")), "{spec} {reg} @ {off}: {e}");
        }
    }
    // The refused write did not happen; --force performs it.
    let v = json_ok(&[
        "--json",
        "--device",
        "sim",
        "csr",
        "write",
        "tpb_sem[0].sem_set[5]",
        "9",
        "--force",
        "--then-read",
        "tpb_sem[0].sem_read[5]",
    ]);
    assert_eq!(v["reads"][0]["value"], 9);
    // Unguarded registers are written without --force.
    let v = json_ok(&["--json", "--device", "sim", "csr", "write", "tpb_sem[0].event[2]", "1", "--then-read"]);
    assert_eq!(v["reads"][0]["value"], 1);
}

#[test]
fn csr_dump_prefix_with_values_and_fields() {
    for (spec, arch) in SIMS {
        let v = json_ok(&["--json", "--device", spec, "csr", "dump", "udma[33].m2s.q[0]"]);
        let regs = v["registers"].as_array().expect("registers");
        let expect = arch.registers().into_iter().filter(|r| r.name.starts_with("udma[33].m2s.q[0].")).count();
        assert_eq!(regs.len(), expect);
        let head = regs.iter().find(|r| r["name"] == "udma[33].m2s.q[0].head").expect("head");
        assert_eq!(head["fields"]["ring_id"], 1);
        let tail_inc = regs.iter().find(|r| r["name"] == "udma[33].m2s.q[0].tail_inc").expect("tail_inc");
        assert!(tail_inc["value"].is_null(), "write-only registers are not read");
        let v = json_ok(&["--json", "--device", spec, "csr", "dump", "misc_ram"]);
        let regs = v["registers"].as_array().expect("registers");
        let ver = regs.iter().find(|r| r["name"] == "misc_ram.fw_api_version").expect("fw_api_version");
        assert_eq!(ver["value"], 7);
    }
    // Every queue of an engine: an index left out matches all.
    let v = json_ok(&["--json", "--device", "sim", "csr", "dump", "udma[33].m2s.q"]);
    let n = v["registers"].as_array().map(Vec::len).unwrap_or(0);
    let one = SUNDA.registers().into_iter().filter(|r| r.name.starts_with("udma[33].m2s.q[0].")).count();
    assert_eq!(n, one * 16);
    let out = cli().args(["--device", "sim", "csr", "dump", "misc_ram"]).output().expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("misc_ram.fw_api_version") && s.contains("= 0x00000007"), "{s}");
}

#[test]
fn csr_watch_prints_initial_values_and_stops() {
    let out = cli()
        .args(["--json", "--device", "sim", "csr", "watch", "misc_ram.fw_api_version", "misc_ram.device_id"])
        .args(["--interval-ms", "5", "--count", "3"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    // Values do not change on an idle device: the first poll prints both, later ones nothing.
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["value"], 7);
    assert!(lines[0]["previous"].is_null());
    let e = err_line(cli().args(["--device", "sim", "csr", "watch", "tpb_sem[0].sem_inc[0]", "--count", "1"]));
    assert!(e.contains("write-only"), "{e}");
}

#[test]
fn nq_dump_demo_decodes_start_custom_end() {
    for (spec, arch) in SIMS {
        let nc = (arch.counts.ncs - 1).to_string();
        let v = json_ok(&["--json", "--device", spec, "nq", "dump", "--demo", "--nc", &nc]);
        let slots = v["slots"].as_array().expect("slots");
        assert_eq!(slots.len(), 5, "{spec}: one ring per TPB engine");
        for (e, s) in slots.iter().enumerate() {
            assert_eq!(s["head"], 0);
            assert_eq!(s["tail"], 64);
            assert_eq!(s["location"], "host (this process)");
            assert_eq!(s["status"]["overflow"], false);
            let recs = s["records"].as_array().expect("records");
            let kinds: Vec<&str> = recs.iter().map(|r| r["subtype"].as_str().unwrap_or("")).collect();
            assert_eq!(kinds, ["START", "CUSTOM", "CUSTOM", "END"], "{spec} engine {e}");
            assert_eq!(recs[1]["sub_id"], 6);
            assert_eq!(recs[2]["sub_id"], 7);
            let engine = csr_maps::Engine::ALL[e].name();
            assert!(recs.iter().all(|r| r["engine"] == engine && r["phase"] == true && r["sw_overflow"] == false));
            let ts: Vec<u64> = recs.iter().map(|r| r["timestamp_ps"].as_u64().unwrap_or(0)).collect();
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
        }
    }
    // A fresh device has nothing programmed.
    let v = json_ok(&["--json", "--device", "sim", "nq", "dump"]);
    assert_eq!(v["slots"].as_array().map(Vec::len), Some(0));
    let out = cli().args(["--device", "sim", "nq", "dump", "--demo"]).output().expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("5 programmed") && s.contains("pe") && s.contains("START") && s.contains("END"), "{s}");
    let e = err_line(cli().args(["--device", "sim", "nq", "dump", "--nc", "9"]));
    assert!(e.contains("NeuronCore 9 does not exist"), "{e}");
}

#[test]
fn nq_watch_counts_records_or_times_out() {
    for (spec, _) in SIMS {
        let out = cli()
            .args(["--json", "--device", spec, "nq", "watch", "--demo", "--count", "7", "--interval-ms", "1"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let recs: Vec<serde_json::Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs[0]["subtype"], "START");
    }
    let out = cli().args(["--device", "sim", "nq", "watch", "--timeout-ms", "50"]).output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 record(s)"));
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("neuron-cli-{}-{name}", std::process::id()))
}

#[test]
fn dma_copy_round_trip_and_errors() {
    for (spec, arch) in SIMS {
        let inp = temp(&format!("{spec}-in.bin"));
        let back = temp(&format!("{spec}-back.bin"));
        let data: Vec<u8> = (0..(3 << 20) + 123).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        std::fs::write(&inp, &data).expect("write");
        let last = format!("hbm:{}:0x2000000", arch.counts.hbm_stacks - 1);
        let v = json_ok(&[
            "--json",
            "--device",
            spec,
            "dma",
            "copy",
            "--to-device",
            inp.to_str().unwrap_or_default(),
            "--addr",
            &last,
            "--out",
            back.to_str().unwrap_or_default(),
        ]);
        assert_eq!(v["len"], data.len());
        assert_eq!(v["addr"], arch.hbm_dev_addr(arch.counts.hbm_stacks - 1, 0x200_0000).unwrap_or(0));
        assert!(std::fs::read(&back).expect("read") == data, "{spec}");
        // A fresh device reads zeros.
        let z = temp(&format!("{spec}-z.bin"));
        let addr = format!("{:#x}", arch.hbm_dev_addr(0, 0x300_0000).unwrap_or(0));
        json_ok(&[
            "--json",
            "--device",
            spec,
            "dma",
            "copy",
            "--from-device",
            &addr,
            "--len",
            "8K",
            "--out",
            z.to_str().unwrap_or_default(),
        ]);
        assert_eq!(std::fs::read(&z).expect("read"), vec![0u8; 8192]);
        for p in [inp, back, z] {
            let _ = std::fs::remove_file(p);
        }
    }
    let f = temp("small.bin");
    std::fs::write(&f, b"hello").expect("write");
    let fs = f.to_str().unwrap_or_default();
    let e = err_line(cli().args(["--device", "sim", "dma", "copy", "--to-device", fs, "--addr", "hbm:0:0"]));
    assert!(e.contains("firmware carve-out"), "{e}");
    // The whole channel outside the carve-out is reachable, up to its last byte.
    let end = csr_maps::SUNDA.consts.hbm_active_size;
    let tail = format!("hbm:0:{:#x}", end - 5);
    json_ok(&["--json", "--device", "sim", "dma", "copy", "--to-device", fs, "--addr", &tail]);
    let past = format!("hbm:0:{:#x}", end - 4);
    let e = err_line(cli().args(["--device", "sim", "dma", "copy", "--to-device", fs, "--addr", &past]));
    assert!(e.contains("not inside one HBM channel"), "{e}");
    let e = err_line(cli().args(["--device", "sim", "dma", "copy", "--to-device", fs, "--addr", "hbm:9:0x1000000"]));
    assert!(e.contains("HBM channel 9 out of range"), "{e}");
    let e = err_line(cli().args([
        "--device",
        "sim",
        "dma",
        "copy",
        "--to-device",
        "/nonexistent/x",
        "--addr",
        "hbm:0:0x1000000",
    ]));
    assert!(e.contains("/nonexistent/x"), "{e}");
    let _ = std::fs::remove_file(f);
}

#[test]
fn dma_bench_reports_every_direction_next_to_memcpy() {
    for (spec, _) in SIMS {
        let v = json_ok(&["--json", "--device", spec, "dma", "bench", "--size", "1M", "--iters", "2"]);
        assert_eq!(v["size"], 1 << 20);
        assert_eq!(v["sim_timing"], "inline");
        let m = v["memcpy_gbps"].as_f64().expect("memcpy");
        assert!(m > 0.0);
        for d in ["h2d", "d2h", "d2d"] {
            let g = v[d]["gbps"].as_f64().expect("gbps");
            let r = v[d]["ratio_vs_memcpy"].as_f64().expect("ratio");
            assert!(g > 0.0, "{d}");
            assert_eq!(v[d]["memcpy_gbps"].as_f64(), Some(m));
            assert!((r - g / m).abs() < 1e-9, "{d}");
        }
    }
    let out = cli().args(["--device", "sim", "dma", "bench", "--size", "256K", "--iters", "1"]).output().expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("H2D") && s.contains("D2H") && s.contains("D2D") && s.contains("memcpy"), "{s}");
    let e = err_line(cli().args(["--device", "sim", "dma", "bench", "--size", "lots"]));
    assert!(e.contains("bad size"), "{e}");
}
