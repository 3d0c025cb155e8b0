//! Tests of the model, the renderers and the `top` rows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use runtime::counters::{DeviceId, ErrorKind, Holding, NcCounters, Snapshot, LAT_BUCKETS};

use super::json::report_json;
use super::model::*;
use super::prometheus::prometheus_text;
use super::text::report_text;
use super::top::*;

fn nc(execs: u64, busy: u64, lat_bucket: usize) -> NcCounters {
    let mut n = NcCounters { executions: execs, busy_ns: busy, nc_version: 3, ..Default::default() };
    n.latency[lat_bucket] = execs;
    n.latency_sum_ns = execs * 3_000;
    n
}

#[test]
fn percentiles_come_from_the_histogram() {
    let mut h = [0u64; LAT_BUCKETS];
    assert_eq!(percentile_us(&h, 0.5), None);
    h[2] = 98; // < 4 µs
    h[10] = 2; // < 1024 µs
    assert_eq!(percentile_us(&h, 0.5), Some(4));
    assert_eq!(percentile_us(&h, 0.98), Some(4));
    assert_eq!(percentile_us(&h, 0.99), Some(1024));
}

#[test]
fn a_report_is_the_difference_over_the_period() {
    let p = PathBuf::from("/x/neuron-vfio.1.0.counters");
    let snap = |ncs| Snapshot { pid: 1, started_ns: 5, devices: 1, ncs, ..Default::default() };
    let before = BTreeMap::from([(p.clone(), snap(vec![nc(10, 1_000, 2), nc(0, 0, 0)]))]);
    let mut busy = nc(30, 251_000, 2);
    busy.errors[ErrorKind::Timeout as usize] = 2;
    busy.barrier_warnings = 3;
    let now = BTreeMap::from([(p.clone(), snap(vec![busy, nc(0, 0, 0)]))]);
    let r = report(&before, &now, 1_000_000);
    assert_eq!(r.ncs.len(), 2);
    assert_eq!(r.ncs[0].executions, 20);
    assert!((r.ncs[0].utilization - 0.25).abs() < 1e-9);
    assert_eq!(r.ncs[0].errors[ErrorKind::Timeout as usize], 2);
    assert_eq!(r.ncs[0].p50_us, Some(4));
    assert_eq!(r.ncs[1].executions, 0);
    assert_eq!(r.ncs[1].p50_us, None);
    let v = report_json(&r);
    assert_eq!(v["neuroncores"][0]["executions"], 20);
    assert_eq!(v["neuroncores"][0]["errors"]["timeout"], 2);
    assert_eq!(
        (v["neuroncores"][0]["barrier_warnings"].as_u64(), v["neuroncores"][1]["barrier_warnings"].as_u64()),
        (Some(3), Some(0))
    );
    assert!(report_text(&r).contains("barrier_warnings=3"), "{}", report_text(&r));
    assert!(prometheus_text(&r).contains("neuron_nc_barrier_warnings_total{"), "{}", prometheus_text(&r));
    assert_eq!(v["devices"][0]["arch"], "cayman");
    // A restarted process (same path, new start time) counts from zero.
    let restarted = BTreeMap::from([(p, Snapshot { started_ns: 6, ..snap(vec![nc(3, 0, 1)]) })]);
    assert_eq!(report(&before, &restarted, 1).ncs[0].executions, 3);
}

#[test]
fn health_decodes_heartbeat_and_ecc_and_is_exported() {
    let regs = health_regs(&csr_maps::CAYMAN).expect("regs");
    assert_eq!(regs.len(), 5 + csr_maps::CAYMAN.counts.hbm_stacks as usize);
    // api 7; health_seq heartbeat 0x5a; sram ecc corrected 3, uncorrected 1; stack 1: 9 repairable, 2 uncorrectable.
    let mut vals = vec![7, 0, 0x5a << 12, (3 << 16) | 1, 1];
    vals.extend((0..csr_maps::CAYMAN.counts.hbm_stacks).map(|k| if k == 1 { (2 << 12) | 9 } else { 0 }));
    let h = decode_health(&regs, &vals, 42, 0, "0000:10:1c.0");
    assert_eq!((h.fw_api_version, h.heartbeat, h.sram_corrected, h.sram_uncorrected), (7, 0x5a, 3, 1));
    assert_eq!(h.hbm[1], (9, 2));
    assert_eq!(h.hbm[0], (0, 0));
    let n = NcReport { pid: 42, device_id: "0000:10:1c.0".into(), nc: 0, nc_version: 3, ..Default::default() };
    let r = Report { ncs: vec![n], health: vec![h], ..Report::default() };
    let j = report_json(&r);
    assert_eq!(j["devices"][0]["firmware"]["heartbeat"], 0x5a);
    assert_eq!(j["devices"][0]["ecc"]["hbm"][1]["uncorrectable"], 2);
    assert_eq!(j["devices"][0]["ecc"]["sram"]["corrected"], 3);
    let p = prometheus_text(&r);
    assert!(p.contains("neuron_device_firmware_heartbeat{device=\"0000:10:1c.0\"} 90"), "{p}");
    assert!(
        p.contains("neuron_device_ecc_errors{device=\"0000:10:1c.0\",memory=\"hbm1\",kind=\"uncorrectable\"} 2"),
        "{p}"
    );
    assert!(report_text(&r).contains("heartbeat 90"));
}

#[test]
fn live_top_renders_8_cayman_rows_into_a_test_backend() {
    use ratatui::backend::TestBackend;
    let mut r = Report { period_ns: 1_000_000_000, ..Report::default() };
    let mut busy = NcReport {
        pid: 7,
        device_id: "sim:shared:cayman:0".into(),
        nc: 1,
        nc_version: 3,
        lnc: 1,
        utilization: 0.5,
        executions: 1234,
        models: 1,
        ..Default::default()
    };
    busy.p50_us = Some(32);
    busy.errors[0] = 2;
    r.ncs.push(busy);
    let t = TopTarget {
        arch: &csr_maps::CAYMAN,
        label: "sim:shared:cayman".into(),
        devices: TopDevices::Named(vec!["sim:shared:cayman:0".into()]),
    };
    let mut term = ratatui::Terminal::new(TestBackend::new(130, 16)).expect("terminal");
    term.draw(|f| top_ui(f, &t, &r, true)).expect("draw");
    let buf = term.backend().buffer();
    let lines: Vec<String> =
        (0..buf.area.height).map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect::<String>()).collect();
    let text = lines.join("\n");
    assert!(
        lines[0].contains(&format!(
            "sim:shared:cayman (cayman, {}): 1 device(s), 1 runtime process(es)",
            match crate::procs::shown_lnc(&csr_maps::CAYMAN) {
                2 => "4 NeuronCores per device at LNC=2, 8 physical",
                _ => "8 NeuronCores per device",
            }
        )),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.starts_with("device sim:shared:cayman:0: process(es) 7")), "{text}");
    let rows: Vec<&String> =
        lines.iter().filter(|l| l.get(..4).is_some_and(|c| c.trim().parse::<u32>().is_ok())).collect();
    assert_eq!(rows.len(), 8, "{text}");
    for (i, l) in rows.iter().enumerate() {
        assert!(l.starts_with(&format!("{i:>3}")), "{l}");
    }
    assert!(rows[1].contains("50.0%") && rows[1].contains("1234") && rows[1].contains("32"), "{}", rows[1]);
    // Each row names the NC's owner; an NC no process owns has none.
    assert_eq!(rows[1].split_whitespace().nth(1), Some("7"), "{}", rows[1]);
    assert_eq!(rows[0].split_whitespace().nth(1), Some("-"), "{}", rows[0]);
    assert!(rows[0].contains("0.0%"), "{}", rows[0]);
    // The bar of NC 1 is half filled (gauge cells are styled), NC 0's is empty.
    let filled = |y: u16| (13..38u16).filter(|&x| buf[(x, y)].style().fg == Some(ratatui::style::Color::Red)).count();
    let y1 = lines.iter().position(|l| l == rows[1]).unwrap_or(0) as u16;
    let y0 = lines.iter().position(|l| l == rows[0]).unwrap_or(0) as u16;
    assert!(filled(y1) >= 8, "{}", filled(y1));
    assert_eq!(filled(y0), 0);
    assert!(lines.iter().any(|l| l.contains("q/Esc: quit")), "{text}");
}

#[test]
fn top_has_a_row_per_nc() {
    let r = Report { period_ns: 1_000_000_000, ..Report::default() };
    // Named devices are shown with no process on them: every NC idle, owned by none.
    let t = TopTarget {
        arch: &csr_maps::CAYMAN,
        label: "sim:shared:cayman".into(),
        devices: TopDevices::Named(vec!["sim:shared:cayman:0".into(), "sim:shared:cayman:1".into()]),
    };
    let f = top_frame(&t, &r);
    let rows: Vec<&str> =
        f.lines().filter(|l| l.trim_start().split(' ').next().is_some_and(|w| w.parse::<u32>().is_ok())).collect();
    // A row per logical NeuronCore at the LNC the environment asks for (Trn2's default: 2).
    let per = (csr_maps::CAYMAN.counts.ncs as usize) / crate::procs::shown_lnc(&csr_maps::CAYMAN);
    assert_eq!(rows.len(), 2 * per, "{f}");
    assert!(rows.iter().all(|l| l.split_whitespace().nth(1) == Some("-")), "{f}");
    // Private simulated devices exist only in their processes: none running, none shown.
    let t = TopTarget { arch: &csr_maps::CAYMAN, label: "sim:cayman".into(), devices: TopDevices::PrivateSims };
    let f = top_frame(&t, &r);
    assert!(f.contains("0 device(s)") && f.contains("no runtime process drives a sim:cayman device"), "{f}");
}

/// Two processes' segments on one shared device (each leased some NCs; their slots cover
/// the whole device) and one process on a private simulated device.
fn shared_and_private() -> (BTreeMap<PathBuf, Snapshot>, BTreeMap<PathBuf, Snapshot>) {
    let shared = |owned: std::ops::Range<usize>| DeviceId {
        identity: "sim:shared:cayman:0".into(),
        holding: Holding::Leased,
        owned,
    };
    let slots = |busy: &[usize]| -> Vec<NcCounters> {
        (0..8u64)
            .map(|i| {
                let mut n = if busy.contains(&(i as usize)) { nc(10 + i, 100_000, 2) } else { nc(0, 0, 0) };
                n.nc = i;
                n
            })
            .collect()
    };
    let seg = |pid, id: DeviceId, busy: &[usize]| Snapshot {
        pid,
        started_ns: 1,
        devices: 1,
        device_ids: vec![id],
        ncs: slots(busy),
        ..Default::default()
    };
    let private = DeviceId { identity: "sim:300/0".into(), holding: Holding::Whole, owned: 0..8 };
    let now = BTreeMap::from([
        (PathBuf::from("/x/neuron-vfio.100.0.counters"), seg(100, shared(1..2), &[1])),
        // Its slots of NCs it does not own (one counts executions: a stale view) are not its.
        (PathBuf::from("/x/neuron-vfio.200.0.counters"), seg(200, shared(4..6), &[1, 4, 5])),
        (PathBuf::from("/x/neuron-vfio.300.0.counters"), seg(300, private, &[0])),
    ]);
    let before = now.iter().map(|(p, s)| (p.clone(), Snapshot { ncs: slots(&[]), ..s.clone() })).collect();
    (before, now)
}

#[test]
fn a_shared_device_is_one_device_with_every_clients_cores() {
    let (before, now) = shared_and_private();
    let r = report(&before, &now, 1_000_000);
    let owners: Vec<(&str, u64, u64)> = r.ncs.iter().map(|n| (n.device_id.as_str(), n.nc, n.pid)).collect();
    // By device name, then NC.
    let mut want: Vec<(&str, u64, u64)> = (0..8).map(|nc| ("sim:300/0", nc, 300)).collect();
    want.extend([("sim:shared:cayman:0", 1, 100), ("sim:shared:cayman:0", 4, 200), ("sim:shared:cayman:0", 5, 200)]);
    assert_eq!(owners, want);
    // NC 1's figures are its owner's (100: 11 executions), not process 200's stale slot.
    assert_eq!((r.ncs[8].executions, r.ncs[8].neuron_device), (11, 0));
    assert_eq!(r.ncs[10].executions, 15);

    let v = report_json(&r);
    let devs = v["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 2, "{v}");
    let d = devs.iter().find(|d| d["device"] == "sim:shared:cayman:0").expect("the shared device");
    assert_eq!(
        d["clients"],
        serde_json::json!([
            {"pid": 100, "ncs": [1], "host_dma_tensor_bytes": 0},
            {"pid": 200, "ncs": [4, 5], "host_dma_tensor_bytes": 0},
        ])
    );
    assert_eq!(
        (d["neuroncores"].as_u64(), d["arch"].as_str(), d["index"].as_u64()),
        (Some(8), Some("cayman"), Some(0))
    );
    assert!(d.get("pid").is_none(), "a device is not a process's: {d}");
    for n in v["neuroncores"].as_array().expect("ncs") {
        let label = n["device"].as_str().expect("device");
        assert!(!label.contains("100") && !label.contains("200"), "{n}");
    }

    let p = prometheus_text(&r);
    assert!(p.contains("neuron_nc_executions_total{device=\"sim:shared:cayman:0\",nc=\"4\",pid=\"200\"} 14"), "{p}");
    assert!(!p.contains("nc=\"1\",pid=\"200\""), "{p}");
    let text = report_text(&r);
    assert!(
        text.lines().any(|l| l.split_whitespace().take(3).collect::<Vec<_>>() == ["sim:shared:cayman:0", "5", "200"]),
        "{text}"
    );

    let t = TopTarget {
        arch: &csr_maps::CAYMAN,
        label: "sim:shared:cayman".into(),
        devices: TopDevices::Named(vec!["sim:shared:cayman:0".into()]),
    };
    let f = top_frame(&t, &r);
    assert!(f.contains("device sim:shared:cayman:0: process(es) 100, 200"), "{f}");
    let owners: Vec<(String, String)> = f
        .lines()
        .filter(|l| l.trim_start().split(' ').next().is_some_and(|w| w.parse::<u32>().is_ok()))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[1].to_string())
        })
        .collect();
    let want: Vec<(String, String)> = ["-", "100", "-", "-", "200", "200", "-", "-"]
        .iter()
        .enumerate()
        .map(|(i, p)| (i.to_string(), p.to_string()))
        .collect();
    assert_eq!(owners, want, "{f}");
    // The private device is its process's alone: `top` on `sim` shows it, not the shared one.
    let t = TopTarget { arch: &csr_maps::CAYMAN, label: "sim:cayman".into(), devices: TopDevices::PrivateSims };
    let f = top_frame(&t, &r);
    assert!(f.contains("device sim:300/0: process(es) 300") && !f.contains("sim:shared"), "{f}");
}

#[test]
fn the_host_view_shows_every_device_with_its_own_arch() {
    let (before, now) = shared_and_private();
    let r = report(&before, &now, 1_000_000);
    // An idle sunda PCI function of the host, and the two devices processes drive.
    let t = TopTarget {
        arch: &csr_maps::SUNDA,
        label: "every device".into(),
        devices: TopDevices::Host(vec![("0000:10:1e.0".into(), &csr_maps::SUNDA)]),
    };
    let f = top_frame(&t, &r);
    assert!(f.contains("every device of this host: 3 device(s), 3 runtime process(es)"), "{f}");
    assert!(f.contains("device 0000:10:1e.0 (sunda, 2 NeuronCores): process(es) none"), "{f}");
    assert!(f.contains("device sim:300/0 (cayman, 8 NeuronCores): process(es) 300"), "{f}");
    assert!(f.contains("device sim:shared:cayman:0 (cayman, 8 NeuronCores): process(es) 100, 200"), "{f}");
    let (devices, _, _) = top_rows(&t, &r);
    let rows: Vec<usize> = devices.iter().map(|d| d.rows.len()).collect();
    let per = |a: &csr_maps::Arch| a.counts.ncs as usize / crate::procs::shown_lnc(a);
    // The idle device at the environment's LNC; the driven ones at their processes' (1 here).
    assert_eq!(rows, [per(&csr_maps::SUNDA), 8, 8], "{f}");
    // Nothing at all: said so.
    let empty = Report { period_ns: 1_000_000_000, ..Report::default() };
    let t = TopTarget { devices: TopDevices::Host(Vec::new()), ..t };
    let f = top_frame(&t, &empty);
    assert!(f.contains("0 device(s)") && f.contains("no runtime process drives a device"), "{f}");
}

#[test]
fn neuron_monitor_groups_from_a_report() {
    use super::aws::*;
    // One process: a 2-NC model (NCs 0, 1 of cayman device 1), 10 executions in the period
    // of which 2 failed (one numerical, one NQ overflow); 40 since it started.
    let mut n0 = NcReport {
        pid: 9,
        device_id: "sim:9/1".into(),
        device: 1,
        neuron_device: 1,
        nc: 0,
        nc_version: 3,
        utilization: 0.5,
        executions: 10,
        models: 1,
        mem_model: 4096,
        ..Default::default()
    };
    n0.latency_hist[3] = 9; // < 8 µs
    n0.latency_hist[10] = 1; // < 1024 µs
    let mut n1 = NcReport { nc: 1, latency_hist: n0.latency_hist, ..n0.clone() };
    n1.device_hist[2] = 10; // < 4 µs on the device
    let idle = NcReport { pid: 9, device: 1, neuron_device: 1, nc: 2, nc_version: 3, ..Default::default() };
    let mut p = ProcReport {
        pid: 9,
        devices: 2,
        host_tensor_bytes: 100,
        executions: 10,
        failed: 2,
        executions_total: 40,
        failed_total: 3,
        ..Default::default()
    };
    p.errors[ErrorKind::Numerical as usize] = 1;
    p.errors[ErrorKind::NqOverflow as usize] = 1;
    p.errors_total = p.errors;
    p.errors_total[ErrorKind::HbmUe as usize] = 1;
    let r = Report { ncs: vec![n0, n1, idle], runtimes: vec![p], ..Report::default() };

    let nc = neuroncore_counters(&r, 9, 1.0);
    let in_use = nc["neuroncores_in_use"].as_object().expect("in use");
    assert_eq!(
        in_use.keys().collect::<Vec<_>>(),
        ["8", "9"],
        "device 1 of 8-NC cayman: NCs 8 and 9; idle NC 10 left out"
    );
    assert_eq!(in_use["8"]["neuroncore_utilization"], 50.0);
    assert_eq!(nc["period"], 1.0);
    assert_eq!(nc["error"], "");

    // The same process at LNC=2: NCs 0 and 1 of device 1 are its logical core 4 (4 per
    // device), one entry, utilization averaged, the execution counted once.
    let at_lnc2 = |mut n: NcReport, util: f64| {
        n.lnc = 2;
        n.utilization = util;
        n
    };
    let r2 = Report {
        ncs: vec![at_lnc2(r.ncs[0].clone(), 0.5), at_lnc2(r.ncs[1].clone(), 0.3), at_lnc2(r.ncs[2].clone(), 0.0)],
        runtimes: r.runtimes.clone(),
        ..Report::default()
    };
    let nc2 = neuroncore_counters(&r2, 9, 1.0);
    let in_use2 = nc2["neuroncores_in_use"].as_object().expect("in use");
    assert_eq!(in_use2.keys().collect::<Vec<_>>(), ["4"], "{nc2}");
    assert!((in_use2["4"]["neuroncore_utilization"].as_f64().unwrap_or(0.0) - 40.0).abs() < 1e-9, "{nc2}");
    assert_eq!(in_use2["4"]["executions"], 10);
    let mem2 = memory_used(&r2, 9, 1.0, None, serde_json::json!([]));
    let per_nc = &mem2["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"];
    assert_eq!(
        per_nc.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["4".to_string()]),
        "{mem2}"
    );
    assert_eq!(per_nc["4"]["model_code"], 2 * 4096, "the logical core's two physical NCs summed");

    let ex = execution_stats(&r, 9, 1.0);
    assert_eq!(ex["execution_summary"]["completed"], 8);
    assert_eq!(ex["execution_summary"]["completed_with_num_err"], 1);
    assert_eq!(ex["execution_summary"]["completed_with_err"], 1);
    assert_eq!(ex["error_summary"]["numerical"], 1);
    assert_eq!(ex["error_summary"]["runtime"], 1);
    assert_eq!(ex["error_summary"]["hardware"], 0);
    assert_eq!(ex["totals"]["error_summary"]["hardware"], 1);
    assert_eq!(ex["totals"]["execution_summary"]["completed"], 37);
    let lat = &ex["latency_stats"]["total_latency"];
    assert_eq!((lat["p50"].as_f64(), lat["p100"].as_f64()), (Some(8e-6), Some(1024e-6)));
    assert_eq!(ex["latency_stats"]["device_latency"]["p50"].as_f64(), Some(4e-6));
    assert!(execution_stats(&r, 77, 1.0)["error"].as_str().is_some_and(|e| !e.is_empty()));

    let listed = vec![runtime::counters::ListedModel {
        id: 4,
        name: "m".into(),
        uuid: "00".repeat(16),
        ncs: vec![0, 1],
        bytes_per_nc: vec![4096, 4096],
    }];
    let snap = Snapshot {
        ncs: vec![
            NcCounters { device: 1, nc: 0, nc_version: 3, ..Default::default() },
            NcCounters { device: 1, nc: 1, nc_version: 3, ..Default::default() },
        ],
        ..Default::default()
    };
    let models = loaded_models(&listed, &snap);
    assert_eq!(models[0]["subgraphs"]["sg_01"]["neuroncore_index"], 9);
    assert_eq!(models[0]["subgraphs"]["sg_01"]["memory_used_bytes"]["neuron_device"], 4096);
    assert_eq!((models[0]["model_id"].as_u64(), models[0]["is_running"].as_bool()), (Some(4), Some(true)));
    let mem = memory_used(&r, 9, 1.0, Some(1000), models);
    let used = &mem["neuron_runtime_used_bytes"];
    assert_eq!((used["host"].as_u64(), used["neuron_device"].as_u64()), (Some(1000), Some(8192)));
    assert_eq!(used["usage_breakdown"]["host"]["application_memory"], 900);
    assert_eq!(used["usage_breakdown"]["neuroncore_memory_usage"]["9"]["model_code"], 4096);

    // ECC: the period's events and the registers' totals.
    let h = |sram_uncorrected, hbm| DeviceHealth {
        pid: 9,
        device: 1,
        device_id: "sim:9/1".into(),
        neuron_device: 1,
        sram_uncorrected,
        hbm,
        ..Default::default()
    };
    let before = vec![h(0, vec![(1, 0), (0, 0)])];
    let now = vec![h(2, vec![(1, 0), (3, 1)])];
    let hw = hw_counters(1.0, &before, &now);
    let d = &hw["neuron_devices"][0];
    assert_eq!((d["neuron_device_index"].as_u64(), d["mem_ecc_corrected"].as_u64()), (Some(1), Some(3)));
    assert_eq!(d["neuron_device"], "sim:9/1");
    assert_eq!((d["mem_ecc_uncorrected"].as_u64(), d["sram_ecc_uncorrected"].as_u64()), (Some(1), Some(2)));
    assert_eq!(d["totals"]["mem_ecc_corrected"], 4);

    // The exporter's families from a report with these groups.
    let report = serde_json::json!({
        "neuron_runtime_data": [{"pid": 9, "address": "", "neuron_runtime_tag": "app", "error": "",
            "report": {"neuroncore_counters": nc, "execution_stats": ex, "memory_used": mem,
                       "neuron_runtime_vcpu_usage": runtime_vcpu(1.0, Some((25.0, 5.0)))}}],
        "system_data": {"neuron_hw_counters": hw},
        "instance_info": {"instance_id": "i-1", "instance_type": "trn2.48xlarge", "instance_name": "",
                          "instance_availability_zone": "", "instance_region": "", "subnet_id": ""},
        "neuron_hardware_info": {"neuron_device_count": 2, "neuroncore_per_device_count": 8},
    });
    let t = super::prometheus::exporter_text(&report);
    // Labels sorted by name, instance labels on every sample.
    let want = "neuroncore_utilization_ratio{availability_zone=\"\",instance_id=\"i-1\",instance_name=\"\",\
                instance_type=\"trn2.48xlarge\",neuroncore=\"8\",region=\"\",runtime_tag=\"app\",subnet_id=\"\"} 0.5";
    assert!(t.lines().any(|l| l == want), "{t}");
    assert!(
        t.lines().any(|l| l.starts_with("execution_errors_total{")
            && l.contains("error_type=\"hardware\"")
            && l.ends_with(" 1")),
        "{t}"
    );
    assert!(t.contains("# TYPE execution_errors_total counter"), "{t}");
    assert!(
        t.lines().any(|l| l.starts_with("execution_status_total{")
            && l.contains("status_type=\"completed\"")
            && l.ends_with(" 37")),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("neuron_runtime_vcpu_usage_ratio{")
            && l.contains("usage_type=\"user\"")
            && l.ends_with(" 0.25")),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("hardware_ecc_events_total{")
            && l.contains("event_type=\"mem_ecc_corrected\"")
            && l.contains("neuron_device_index=\"1\"")
            && l.ends_with(" 4")),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("neuroncore_memory_usage_model_code{")
            && l.contains("memory_location=\"None\"")
            && l.ends_with(" 4096")),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("neuron_hardware_info{") && l.contains("neuron_device_count=\"2\"")),
        "{t}"
    );
    assert!(t.lines().any(|l| l.starts_with("instance_info{") && l.ends_with(" 1")), "{t}");
    // A group that failed to collect is left out, as the exporter does.
    let mut bad = report.clone();
    bad["neuron_runtime_data"][0]["report"]["execution_stats"]["error"] = "x".into();
    assert!(!super::prometheus::exporter_text(&bad).contains("execution_errors_total{"));
    // Two processes' private simulated devices, each its runtime's device 1: one series per
    // label set, their counts added (a family repeating a label set is not valid exposition).
    let mut two = report.clone();
    let dev = hw["neuron_devices"][0].clone();
    two["system_data"]["neuron_hw_counters"]["neuron_devices"] = serde_json::json!([dev.clone(), dev]);
    let t = super::prometheus::exporter_text(&two);
    let ecc: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("hardware_ecc_events_total{") && l.contains("event_type=\"mem_ecc_corrected\""))
        .collect();
    assert_eq!(ecc.len(), 1, "{t}");
    assert!(ecc[0].ends_with(" 8"), "{t}");
}

#[test]
fn top_rows_are_logical_neuroncores_at_the_owners_lnc() {
    // A process at LNC=2 on physical NCs 2-3 of a cayman: its logical core 1, one row.
    let r = Report {
        period_ns: 1_000_000_000,
        ncs: [(2, 0.2, 10u64, 100u64), (3, 0.6, 10, 50)]
            .into_iter()
            .map(|(nc, utilization, executions, mem_model)| NcReport {
                pid: 9,
                device_id: "sim:shared:cayman:0".into(),
                nc,
                nc_version: 3,
                lnc: 2,
                utilization,
                executions,
                models: 1,
                mem_model,
                ..Default::default()
            })
            .collect(),
        ..Report::default()
    };
    let t = TopTarget {
        arch: &csr_maps::CAYMAN,
        label: "sim:shared:cayman".into(),
        devices: TopDevices::Named(vec!["sim:shared:cayman:0".into()]),
    };
    let (devices, procs, _) = top_rows(&t, &r);
    assert_eq!(procs, 1);
    let rows = &devices[0].rows;
    assert_eq!(rows.iter().map(|r| r.nc).collect::<Vec<_>>(), [0, 1, 2, 3], "{rows:?}");
    assert_eq!(rows[1].pid, Some(9));
    assert!((rows[1].utilization - 0.4).abs() < 1e-9, "{:?}", rows[1]);
    assert_eq!((rows[1].exec_per_s, rows[1].memory), (10.0, 150));
    assert!(rows.iter().filter(|r| r.nc != 1).all(|r| r.pid.is_none()));
}
