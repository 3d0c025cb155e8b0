//! `monitor` and `top` reading the counters another process's runtime publishes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod common;

use common::{cli_in as cli, Runner};

const INPUT: &str = "input=examples/input_32xf32.bin";

fn shm_dir(tag: &str) -> PathBuf {
    common::shm_dir("mon", tag)
}

/// A process executing the 2-NC model on sim:cayman for a long while, once its counters
/// segment exists and it has had time to load and start executing.
fn runner(shm: &Path) -> Runner {
    let published = |shm: &Path| std::fs::read_dir(shm).map(|d| d.count()).unwrap_or(0) > 0;
    Runner::start(shm, "counters", published, Duration::from_millis(300))
}

#[test]
fn monitor_json_sees_another_process_executing() {
    let shm = shm_dir("json");
    let runner = runner(&shm);
    let out = cli(&shm)
        .args(["--json", "monitor", "--format", "native", "--count", "2", "--period-ms", "400"])
        .output()
        .expect("monitor");
    drop(runner);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("a JSON object per line")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for v in &lines {
        assert!(v["timestamp"].as_f64().is_some_and(|t| t > 1e9), "{v}");
        let devs = v["devices"].as_array().expect("devices");
        assert_eq!(devs.len(), 1, "{v}");
        assert_eq!(devs[0]["arch"], "cayman");
        // Firmware and ECC figures, read through the runner's debug endpoint.
        assert!(devs[0]["firmware"]["api_version"].as_u64().is_some_and(|v| v > 0), "{v}");
        assert!(devs[0]["firmware"]["heartbeat"].as_u64().is_some(), "{v}");
        assert_eq!(devs[0]["ecc"]["hbm"].as_array().map(|a| a.len()), Some(4), "{v}");
        assert_eq!(devs[0]["ecc"]["sram"]["uncorrected"], 0, "{v}");
        let ncs = v["neuroncores"].as_array().expect("neuroncores");
        assert_eq!(ncs.len(), 8, "every NC of the runner's cayman: {v}");
        // The model runs on NCs 0 and 1; the others are idle.
        for n in &ncs[..2] {
            assert!(n["executions"].as_u64().unwrap_or(0) > 0, "{n}");
            assert!(n["utilization"].as_f64().unwrap_or(0.0) > 0.0, "{n}");
            assert!(n["latency_us"]["p50"].as_u64().is_some(), "{n}");
            assert!(n["memory_by_kind"]["model"].as_u64().unwrap_or(0) > 0, "{n}");
            assert_eq!(n["models_loaded"], 1);
            assert_eq!(n["errors"]["nq_overflow"], 0);
        }
        for n in &ncs[2..] {
            assert_eq!(n["executions"], 0, "{n}");
            assert_eq!(n["utilization"], 0.0, "{n}");
        }
    }
    let _ = std::fs::remove_dir_all(&shm);
}

/// A minimal check of the Prometheus text exposition format: HELP/TYPE comments, then
/// `name{label="value",…} number` samples of a declared family.
fn check_prometheus(text: &str) -> Vec<(String, String, f64)> {
    let mut families = std::collections::HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            families.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line}");
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line}"));
        let (name, labels) = series.split_once('{').expect("labels");
        let labels = labels.strip_suffix('}').expect("closing brace");
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
        assert!(name.starts_with("neuron_"), "{line}");
        assert!(families.contains_key(name), "{name} has no # TYPE");
        for l in labels.split(',') {
            let (k, v) = l.split_once('=').expect("label=value");
            assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
            assert!(v.starts_with('"') && v.ends_with('"') && v.len() >= 2, "{line}");
        }
        samples.push((name.to_string(), labels.to_string(), value));
    }
    samples
}

#[test]
fn prometheus_metrics_parse_and_count_executions() {
    let shm = shm_dir("prom");
    let runner = runner(&shm);
    let mut mon = cli(&shm)
        .args(["monitor", "--format", "native", "--count", "8", "--period-ms", "250", "--prometheus", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("monitor");
    let mut line = String::new();
    BufReader::new(mon.stderr.take().expect("stderr")).read_line(&mut line).expect("address line");
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect("an URL on stderr").to_string();
    let hostport = url.trim_start_matches("http://").trim_end_matches("/metrics");
    // After the first period the figures cover the runner's executions.
    std::thread::sleep(Duration::from_millis(700));
    let mut s = std::net::TcpStream::connect(hostport).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("response");
    let _ = mon.wait();
    drop(runner);
    let (head, body) = resp.split_once("\r\n\r\n").expect("headers and body");
    assert!(head.starts_with("HTTP/1.") && head.contains(" 200 "), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    let samples = check_prometheus(body);
    let execs: f64 = samples
        .iter()
        .filter(|(n, l, _)| n == "neuron_nc_executions_total" && l.contains("nc=\"0\""))
        .map(|(_, _, v)| v)
        .sum();
    assert!(execs > 0.0, "{body}");
    assert!(samples.iter().any(|(n, l, _)| n == "neuron_nc_memory_used_bytes" && l.contains("kind=\"model\"")));
    assert!(samples.iter().any(|(n, l, _)| n == "neuron_nc_execution_errors_total" && l.contains("kind=\"hbm_ue\"")));
    let _ = std::fs::remove_dir_all(&shm);
}

#[test]
fn top_once_renders_a_row_per_nc() {
    let shm = shm_dir("top");
    let runner = runner(&shm);
    let out = cli(&shm).args(["--device", "sim:cayman", "top", "--once", "--period-ms", "300"]).output().expect("top");
    let pid = runner.0.id();
    drop(runner);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\x1b'), "no escape codes off a terminal: {text:?}");
    let rows: Vec<&str> =
        text.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u32>().is_ok())).collect();
    assert_eq!(rows.len(), 8, "{text}");
    // The runner's private device, named after it; each NC owned by the runner.
    let pid = pid.to_string();
    assert!(text.contains(&format!("device sim:{pid}/0: process(es) {pid}")), "{text}");
    assert!(rows.iter().all(|r| r.split_whitespace().nth(1) == Some(pid.as_str())), "{text}");
    // NC 0 runs the model: a non-empty bar and executions per second.
    let nc0: Vec<&str> = rows[0].split_whitespace().collect();
    assert!(nc0[2].contains('#'), "{}", rows[0]);
    assert!(nc0[4].parse::<f64>().unwrap_or(0.0) > 0.0, "{}", rows[0]);
    assert!(rows[7].contains("[....................]"), "{}", rows[7]);
    let _ = std::fs::remove_dir_all(&shm);
}

/// With no `--device`, `top`, `monitor` and `ls` show every device a process drives, of
/// every arch: a cayman and a sunda workload, each on its private simulated device.
#[test]
fn without_a_device_the_tools_show_every_device_of_every_arch() {
    let shm = shm_dir("every");
    let segments = |n: usize| move |shm: &Path| std::fs::read_dir(shm).map(|d| d.count()).unwrap_or(0) >= n;
    let cayman = Runner::start_on(&shm, "sim:cayman", "counters", segments(1), Duration::from_millis(0));
    let sunda = Runner::start_on(&shm, "sim:sunda", "counters", segments(2), Duration::from_millis(300));
    let (pc, ps) = (cayman.pid(), sunda.pid());
    // A host with no Neuron PCI function and no broker: what the counters show.
    let host = |c: &mut std::process::Command| {
        c.env("NEURON_VFIO_SYSFS", shm.join("no-sysfs")).env("NEURON_VFIO_BROKER_SOCKET", shm.join("no-broker.sock"));
    };
    let mut top = cli(&shm);
    host(&mut top);
    let out = top.args(["top", "--once", "--period-ms", "300"]).output().expect("top");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(frame.contains("every device of this host: 2 device(s), 2 runtime process(es)"), "{frame}");
    assert!(frame.contains(&format!("device sim:{pc}/0 (cayman, 8 NeuronCores): process(es) {pc}")), "{frame}");
    assert!(frame.contains(&format!("device sim:{ps}/0 (sunda, 2 NeuronCores): process(es) {ps}")), "{frame}");
    // --device narrows to one arch.
    let mut top = cli(&shm);
    host(&mut top);
    let out = top.args(["--device", "sim:sunda", "top", "--once", "--period-ms", "200"]).output().expect("top");
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(frame.contains(&format!("device sim:{ps}/0: process(es) {ps}")) && !frame.contains(&pc), "{frame}");
    // monitor: both devices, each with its arch.
    let mut mon = cli(&shm);
    host(&mut mon);
    let out = mon.args(["--json", "monitor", "--format", "native", "--count", "1", "--period-ms", "300"]).output();
    let out = out.expect("monitor");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    let mut archs: Vec<&str> =
        v["devices"].as_array().expect("devices").iter().filter_map(|d| d["arch"].as_str()).collect();
    archs.sort_unstable();
    assert_eq!(archs, ["cayman", "sunda"], "{v}");
    // ls: both private devices, each with the process that drives it.
    let mut ls = cli(&shm);
    host(&mut ls);
    let out = ls.args(["--json", "ls"]).output().expect("ls");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows: Vec<(String, String, String)> = v
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| {
            let pid = d["neuron_processes"][0]["pid"].to_string();
            (d["bdf"].as_str().unwrap_or("").to_string(), d["arch"].as_str().unwrap_or("").to_string(), pid)
        })
        .collect();
    let mut want = vec![
        (format!("sim:{pc}/0"), "cayman".to_string(), pc.clone()),
        (format!("sim:{ps}/0"), "sunda".into(), ps.clone()),
    ];
    want.sort();
    assert_eq!(rows, want, "{v}");
    drop((cayman, sunda));
    let _ = std::fs::remove_dir_all(&shm);
}

#[test]
fn nothing_published_when_counters_are_off() {
    let shm = shm_dir("off");
    let out = cli(&shm)
        .env("NEURON_VFIO_COUNTERS", "0")
        .args(["--device", "sim", "run", "examples/allreduce_1nc.neff", "--input", INPUT])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(std::fs::read_dir(&shm).map(|d| d.count()).unwrap_or(1), 0);
    let out = cli(&shm)
        .args(["--json", "monitor", "--format", "native", "--count", "1", "--period-ms", "10"])
        .output()
        .expect("monitor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["neuroncores"], serde_json::json!([]));
    let _ = std::fs::remove_dir_all(&shm);
}

/// Processes killed when dropped (a failed assertion leaves none behind).
struct Procs(Vec<std::process::Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One native JSON report (`period_ms` long) as the monitor writes it.
fn native_report(shm: &Path, period_ms: &str) -> serde_json::Value {
    let out = cli(shm)
        .args(["--json", "monitor", "--format", "native", "--count", "1", "--period-ms", period_ms])
        .output()
        .expect("monitor");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn a_shared_device_is_one_device_listing_every_processs_cores() {
    let shm = shm_dir("shared");
    // The test's own broker: its socket in a directory of the test's (started by the first
    // process that needs it, as any client starts one).
    let socket = shm.join("broker/broker.sock");
    let cores = [2u32, 5];
    let procs = Procs(
        cores
            .iter()
            .map(|k| {
                cli(&shm)
                    .env("NEURON_VFIO_BROKER_SOCKET", &socket)
                    .env("NEURON_VFIO_BROKER_EXE", env!("CARGO_BIN_EXE_neuron-vfio"))
                    .env("NEURON_RT_VISIBLE_CORES", k.to_string())
                    // The LNC=1 example (cayman's default is 2).
                    .env("NEURON_LOGICAL_NC_CONFIG", "1")
                    .env_remove("NEURON_RT_NUM_CORES")
                    .args(["--device", "sim:shared:cayman", "run", "examples/allreduce_1nc.neff", "--input", INPUT])
                    .args(["--repeat", "2000000"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn a process on the shared device")
            })
            .collect(),
    );
    let pids: Vec<u64> = procs.0.iter().map(|c| c.id() as u64).collect();
    // Until both have executed on their cores (each report covers 300 ms).
    let t0 = std::time::Instant::now();
    let v = loop {
        let v = native_report(&shm, "300");
        let executed = |nc: u32, pid: u64| {
            v["neuroncores"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|n| n["nc"] == nc && n["pid"] == pid && n["executions_total"].as_u64().is_some_and(|e| e > 0))
        };
        if cores.iter().zip(&pids).all(|(k, p)| executed(*k, *p)) {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the two processes never both executed: {v}");
    };
    // One device, named by its identity, listing both processes' cores with their pids.
    let devs = v["devices"].as_array().expect("devices");
    assert_eq!(devs.len(), 1, "{v}");
    let d = &devs[0];
    assert_eq!(
        (d["device"].as_str(), d["arch"].as_str(), d["index"].as_u64()),
        (Some("sim:shared:cayman:0"), Some("cayman"), Some(0)),
        "{d}"
    );
    let want_clients: Vec<serde_json::Value> =
        cores.iter().zip(&pids).map(|(k, p)| serde_json::json!({"pid": p, "ncs": [k]})).collect();
    let mut clients: Vec<serde_json::Value> = d["clients"]
        .as_array()
        .expect("clients")
        .iter()
        .map(|c| serde_json::json!({"pid": c["pid"], "ncs": c["ncs"]}))
        .collect();
    clients.sort_by_key(|c| c["ncs"][0].as_u64());
    assert_eq!(clients, want_clients, "{d}");
    // A row per core the processes own (device-local NC, its owner), and no other.
    let rows: Vec<(String, u64, u64)> = v["neuroncores"]
        .as_array()
        .expect("neuroncores")
        .iter()
        .map(|n| {
            (
                n["device"].as_str().unwrap_or("").to_string(),
                n["nc"].as_u64().unwrap_or(99),
                n["pid"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want_rows: Vec<(String, u64, u64)> =
        cores.iter().zip(&pids).map(|(k, p)| ("sim:shared:cayman:0".to_string(), *k as u64, *p)).collect();
    assert_eq!(rows, want_rows, "{v}");
    // No device label holds a pid: not in our JSON, Prometheus, the text table or top.
    let no_pid = |what: &str, text: &str| {
        for p in &pids {
            for l in text.lines().filter(|l| l.contains("sim:shared")) {
                let label = l.split_whitespace().find(|w| w.contains("sim:shared")).unwrap_or("");
                assert!(!label.contains(&p.to_string()), "{what}: a device label with pid {p}: {l}");
            }
        }
    };
    no_pid("json", &v.to_string().replace(',', "\n"));
    let text =
        cli(&shm).args(["monitor", "--format", "native", "--count", "1", "--period-ms", "100"]).output().expect("text");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    no_pid("text", &text);
    for (k, p) in cores.iter().zip(&pids) {
        assert!(
            text.lines().any(|l| l.split_whitespace().take(3).collect::<Vec<_>>()
                == ["sim:shared:cayman:0", &k.to_string(), &p.to_string()]),
            "{text}"
        );
    }
    // neuron-monitor's report: each application's NC by its instance-wide index (device 0).
    let out = cli(&shm).args(["monitor", "--count", "1", "--period-ms", "300"]).output().expect("neuron-monitor");
    let nm: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a neuron-monitor report");
    for (k, p) in cores.iter().zip(&pids) {
        let app = nm["neuron_runtime_data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["pid"] == *p)
            .expect("the application");
        let in_use = app["report"]["neuroncore_counters"]["neuroncores_in_use"].as_object().expect("in use");
        assert_eq!(in_use.keys().collect::<Vec<_>>(), [&k.to_string()], "{app}");
        assert_eq!(in_use[&k.to_string()]["neuron_device"], "sim:shared:cayman:0", "{app}");
    }
    // top: the device once, each of its NCs with its owner ("-": none).
    let out = cli(&shm)
        .env("NEURON_VFIO_BROKER_SOCKET", &socket)
        .args(["--device", "sim:shared:cayman", "top", "--once", "--period-ms", "200"])
        .output()
        .expect("top");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = String::from_utf8_lossy(&out.stdout).into_owned();
    no_pid("top", &frame);
    assert_eq!(frame.lines().filter(|l| l.starts_with("device ")).count(), 1, "{frame}");
    assert!(
        frame.contains(&format!(
            "device sim:shared:cayman:0: process(es) {}, {}",
            pids[0].min(pids[1]),
            pids[0].max(pids[1])
        )),
        "{frame}"
    );
    let owners: Vec<String> = frame
        .lines()
        .filter(|l| l.trim_start().split(' ').next().is_some_and(|w| w.parse::<u32>().is_ok()))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect();
    let want: Vec<String> = (0..8u32)
        .map(|nc| cores.iter().position(|k| *k == nc).map(|i| pids[i].to_string()).unwrap_or_else(|| "-".into()))
        .collect();
    assert_eq!(owners, want, "{frame}");
    drop(procs);
    let _ = std::fs::remove_dir_all(&shm);
}
