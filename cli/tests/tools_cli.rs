//! The Neuron tools' own formats, checked against schemas written from AWS's public documents
//! (`cli/tests/schemas/`): `ls --json` / `neuron-ls -j`, the neuron-monitor report, and the
//! Prometheus exporter's metric families, with a model running in another process.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{cli_in, root, shm_dir, Runner};

fn schema(name: &str) -> Value {
    let p = root().join("cli/tests/schemas").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("schema file")).expect("schema JSON")
}

/// Check `v` against the JSON Schema subset the schemas use (type, properties, required,
/// additionalProperties, items, minimum, maximum); returns every violation, by path.
fn violations(v: &Value, s: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(x) => vec![x.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let is = |ty: &str| match ty {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_u64() || v.is_i64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        };
        if !types.iter().any(|ty| is(ty)) {
            out.push(format!("{at}: {v} is not {types:?}"));
            return;
        }
    }
    if let Some(x) = v.as_f64() {
        if s.get("minimum").and_then(Value::as_f64).is_some_and(|m| x < m) {
            out.push(format!("{at}: {x} below {}", s["minimum"]));
        }
        if s.get("maximum").and_then(Value::as_f64).is_some_and(|m| x > m) {
            out.push(format!("{at}: {x} above {}", s["maximum"]));
        }
    }
    if let Some(o) = v.as_object() {
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !o.contains_key(r) {
                out.push(format!("{at}: missing {r}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, x) in o {
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => violations(x, ps, &format!("{at}.{k}"), out),
                (None, Some(Value::Bool(false))) => out.push(format!("{at}: unexpected {k}")),
                (None, Some(a @ Value::Object(_))) => violations(x, a, &format!("{at}.{k}"), out),
                _ => {}
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, x) in a.iter().enumerate() {
            violations(x, items, &format!("{at}[{i}]"), out);
        }
    }
}

fn assert_schema(v: &Value, name: &str) {
    let mut out = Vec::new();
    violations(v, &schema(name), "$", &mut out);
    assert!(out.is_empty(), "{name}:\n{}\nin {v}", out.join("\n"));
}

#[test]
fn the_checker_refuses_what_the_schema_does_not_allow() {
    let s = schema("neuron-ls.schema.json");
    let mut out = Vec::new();
    let bad = serde_json::json!([{"neuron_device": "0", "bdf": "x", "nc_count": -1,
                                   "neuron_processes": [{"pid": 1, "command": "c"}]}]);
    violations(&bad, &s, "$", &mut out);
    for want in ["$[0].neuron_device", "missing memory_size", "$[0].nc_count", "missing neuron_runtime_version"] {
        assert!(out.iter().any(|e| e.contains(want)), "{want} not in {out:?}");
    }
}

fn bin(name: &str, shm: &Path) -> Command {
    let p = PathBuf::from(cli_in(shm).get_program()).with_file_name(name);
    let mut c = Command::new(p);
    c.current_dir(root())
        .env("NEURON_VFIO_SHM_DIR", shm)
        .env_remove("NEURON_VFIO_COUNTERS")
        .env_remove("NEURON_VFIO_DEBUG_ENDPOINT");
    c
}

/// A process running the 2-NC example model on sim:cayman with `tag` as its
/// NEURON_PROCESS_TAG, once it has published its counters and executed for a while.
fn tagged_runner(shm: &Path, tag: &str) -> Runner {
    let child = cli_in(shm)
        .env("NEURON_PROCESS_TAG", tag)
        // The LNC=1 example (cayman's default is 2).
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .args(["--device", "sim:cayman", "run", "examples/allreduce_2nc.neff", "--input"])
        .args(["input=examples/input_32xf32.bin", "--repeat", "2000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the runner");
    let runner = Runner(child);
    let t0 = Instant::now();
    while std::fs::read_dir(shm).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the runner published no counters");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    runner
}

#[test]
fn ls_json_carries_neuron_ls_fields() {
    let shm = shm_dir("tools", "ls");
    let runner = tagged_runner(&shm, "ls_runner");
    let out = cli_in(&shm).args(["--json", "--device", "sim:cayman:2", "ls"]).output().expect("ls");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_schema(&v, "neuron-ls.schema.json");
    assert_eq!(v[1]["neuron_device"], 1);
    // Logical NeuronCores at Trn2's default LNC=2: 4 per device, numbered across devices.
    assert_eq!(v[1]["neuroncore_ids"], serde_json::json!([4, 5, 6, 7]));
    assert_eq!((v[0]["logical_neuroncore_config"].as_u64(), v[0]["arch"].as_str()), (Some(2), Some("cayman")));
    // The simulated devices live in the listing process, which is not listed as their user.
    assert_eq!(v[0]["neuron_processes"], serde_json::json!([]), "{v}");
    assert_eq!(v[0]["processes"], serde_json::json!([]), "{v}");
    // neuron-ls -j: the same, and without -a only runtime processes.
    let out = bin("neuron-ls", &shm).args(["-j", "--device", "sim"]).output().expect("neuron-ls");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_schema(&v, "neuron-ls.schema.json");
    assert!(v[0].get("logical_neuroncore_config").is_none(), "sunda has no logical NeuronCores: {v}");
    assert_eq!(v[0]["neuron_processes"], serde_json::json!([]));
    let out = bin("neuron-ls", &shm).args(["--wide", "-a", "--device", "sim"]).output().expect("neuron-ls");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| NEURON DEVICE |") && text.contains("| PID "), "{text}");
    drop(runner);
    let _ = std::fs::remove_dir_all(&shm);
}

/// Lines of a child's stdout, read on a thread (so a wait can time out).
fn lines_of(out: ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_report(rx: &std::sync::mpsc::Receiver<String>) -> Value {
    let l = rx.recv_timeout(Duration::from_secs(60)).expect("a report line");
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

/// The `/metrics` address a monitor prints on stderr.
fn metrics_addr(err: ChildStderr) -> String {
    let mut line = String::new();
    BufReader::new(err).read_line(&mut line).expect("address line");
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect("an URL on stderr");
    url.trim_start_matches("http://").trim_end_matches("/metrics").to_string()
}

/// A scrape's samples: (name, labels, value).
type Samples = Vec<(String, HashMap<String, String>, f64)>;

/// One scrape, parsed: (name, labels, value) per sample; families' types.
fn scrape(addr: &str) -> (Samples, HashMap<String, String>) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("headers and body");
    assert!(head.contains(" 200 "), "{head}");
    let mut types = HashMap::new();
    let mut samples = Vec::new();
    for line in body.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (n, k) = rest.split_once(' ').expect("TYPE name kind");
            types.insert(n.to_string(), k.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let (name, labels) = series.split_once('{').expect("labels");
        let labels = labels.strip_suffix('}').expect("closing brace");
        let mut m = HashMap::new();
        // Label values here hold no commas or quotes.
        for l in labels.split(',').filter(|l| !l.is_empty()) {
            let (k, v) = l.split_once('=').expect("label=value");
            m.insert(k.to_string(), v.trim_matches('"').to_string());
        }
        samples.push((name.to_string(), m, value.parse().unwrap_or_else(|_| panic!("value in {line}"))));
    }
    (samples, types)
}

/// Every exporter family in the scrape has the schema's type and exactly its labels, with
/// documented values; `need` families must be present.
fn check_exporter(samples: &Samples, types: &HashMap<String, String>, need: &[&str]) {
    let s = schema("prometheus-exporter.json");
    let fams = s["families"].as_object().expect("families");
    for n in need {
        assert!(samples.iter().any(|(x, _, _)| x == n), "no {n} in the scrape");
    }
    for (name, labels, v) in samples {
        let Some(f) = fams.get(name) else { continue };
        assert_eq!(types.get(name).map(String::as_str), f["type"].as_str(), "{name}'s type");
        let mut want: Vec<&str> = f["labels"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let mut got: Vec<&str> = labels.keys().map(String::as_str).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{name}'s labels");
        for (k, x) in labels {
            if let Some(allowed) = s["label_values"][k.as_str()].as_array() {
                assert!(allowed.iter().any(|a| a == x.as_str()), "{name}: {k}={x} not documented");
            }
        }
        if s["ratios_0_1"].as_array().into_iter().flatten().any(|r| r == name.as_str()) {
            assert!((0.0..=1.0).contains(v), "{name} = {v} is not a ratio");
        }
    }
}

#[test]
fn monitor_report_and_scrape_while_a_model_runs() {
    let shm = shm_dir("tools", "mon");
    let runner = tagged_runner(&shm, "acc_model");
    let pid = runner.0.id() as u64;
    let conf = shm.join("monitor.conf");
    std::fs::write(
        &conf,
        r#"{"period": "400ms",
            "neuron_runtimes": [{"tag_filter": "other_.*", "metrics": [{"type": "memory_used"}]},
                                {"tag_filter": "acc_.*", "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"},
                                  {"type": "neuron_runtime_vcpu_usage"}, {"type": "execution_stats"}]}],
            "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}, {"type": "neuron_hw_counters", "period": "800ms"}]}"#,
    )
    .expect("config");
    let mut mon = bin("neuron-monitor", &shm)
        .args(["-c"])
        .arg(&conf)
        .args(["--count", "6", "--prometheus", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("neuron-monitor");
    let addr = metrics_addr(mon.stderr.take().expect("stderr"));
    let rx = lines_of(mon.stdout.take().expect("stdout"));
    let mut reports: Vec<Value> = (0..3).map(|_| next_report(&rx)).collect();
    let (samples, types) = scrape(&addr);
    reports.extend((0..3).map(|_| next_report(&rx)));
    let _ = mon.wait();
    drop(runner);
    // Every report: the schema, the one application, its two NCs (the 2-NC model runs on
    // NCs 0 and 1, and only there), and its execution count equal to each NC's (each
    // execution spans both). Which periods saw executions depends on scheduling: some did.
    let (mut busy, mut done_sum) = (0, 0);
    for r in &reports {
        assert_schema(r, "neuron-monitor.schema.json");
        let rt = r["neuron_runtime_data"].as_array().expect("runtimes");
        assert_eq!(rt.len(), 1, "{r}");
        assert_eq!((rt[0]["pid"].as_u64(), rt[0]["neuron_runtime_tag"].as_str()), (Some(pid), Some("acc_model")));
        let rep = &rt[0]["report"];
        let ncs = rep["neuroncore_counters"]["neuroncores_in_use"].as_object().expect("ncs in use");
        assert_eq!(ncs.keys().collect::<Vec<_>>(), ["0", "1"], "{r}");
        let ex = &rep["execution_stats"];
        let done = ex["execution_summary"]["completed"].as_u64().expect("completed");
        // A period may end between an NC counting an execution and the process recording it
        // completed (the next period gets it): one execution at most, per NC, in flight.
        for nc in ["0", "1"] {
            let ex = ncs[nc]["executions"].as_u64().expect("executions");
            assert!(ex.abs_diff(done) <= 1, "NC {nc}: {ex} executions, {done} completed: {r}");
        }
        assert!(ex["error_summary"].as_object().expect("errors").values().all(|e| e == 0), "{r}");
        if done > 0 {
            busy += 1;
            done_sum += done;
            assert!(ncs.values().all(|n| n["neuroncore_utilization"].as_f64().unwrap_or(0.0) > 0.0), "{r}");
            for l in ["total_latency", "device_latency"] {
                assert!(ex["latency_stats"][l]["p50"].as_f64().is_some_and(|s| s > 0.0 && s < 10.0), "{l}: {r}");
            }
        }
        let used = &rep["memory_used"]["neuron_runtime_used_bytes"];
        assert!(used["usage_breakdown"]["neuroncore_memory_usage"]["0"]["model_code"].as_u64().unwrap_or(0) > 0, "{r}");
        assert!(used["host"].as_u64().unwrap_or(0) > 0, "{r}");
        // The loaded model, by its NEFF's name, a subgraph on each of its NCs.
        let models = rep["memory_used"]["loaded_models"].as_array().expect("loaded models");
        assert_eq!(models.len(), 1, "{r}");
        assert_eq!(models[0]["name"], "allreduce_nnc");
        let sgs = models[0]["subgraphs"].as_object().expect("subgraphs");
        let on: Vec<u64> = sgs.values().filter_map(|s| s["neuroncore_index"].as_u64()).collect();
        assert_eq!(on, [0, 1], "{r}");
        assert_eq!(r["neuron_hardware_info"]["neuron_device_type"], "trainium2");
        assert_eq!(r["neuron_hardware_info"]["neuroncore_per_device_count"], 8);
        let sys = &r["system_data"];
        assert!(sys["memory_info"]["memory_total_bytes"].as_u64().unwrap_or(0) > 0, "{r}");
        assert!(sys["vcpu_usage"]["usage_data"].as_object().is_some_and(|m| !m.is_empty()), "{r}");
    }
    assert!(busy > 0 && done_sum > 0, "no report saw the runner execute");
    // The 800 ms group is in some reports (collected every other period), with the runner's device.
    let hw: Vec<&Value> = reports.iter().filter_map(|r| r["system_data"].get("neuron_hw_counters")).collect();
    assert!(!hw.is_empty());
    assert!(hw.iter().all(|h| h["period"].as_f64().is_some_and(|p| p > 0.6)), "{hw:?}");
    assert!(hw
        .iter()
        .all(|h| h["neuron_devices"][0]["neuron_device_index"] == 0
            && h["neuron_devices"][0]["mem_ecc_uncorrected"] == 0));
    check_exporter(
        &samples,
        &types,
        &[
            "neuroncore_utilization_ratio",
            "neuroncore_memory_usage_model_code",
            "neuron_runtime_memory_used_bytes",
            "neuron_runtime_vcpu_usage_ratio",
            "execution_errors_total",
            "execution_status_total",
            "execution_latency_seconds",
            "hardware_ecc_events_total",
            "system_memory_total_bytes",
            "system_vcpu_count",
            "system_vcpu_usage_ratio",
            "instance_info",
            "neuron_hardware_info",
        ],
    );
    let util = |nc: &str| {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == "neuroncore_utilization_ratio" && l["neuroncore"] == nc && l["runtime_tag"] == "acc_model"
            })
            .map(|s| s.2)
    };
    // NC 0 is in use (its utilization in the last period depends on scheduling).
    assert!(util("0").is_some_and(|u| (0.0..=1.0).contains(&u)), "{samples:?}");
    assert_eq!(util("2"), None, "an idle NC is not in use");
    let completed = samples
        .iter()
        .find(|(n, l, _)| n == "execution_status_total" && l["status_type"] == "completed")
        .map(|s| s.2)
        .unwrap_or(0.0);
    assert!(completed > 0.0);
    let _ = std::fs::remove_dir_all(&shm);
}

/// A runner that executes once with `fault` armed, pausing before and after (stdin lines).
fn paused_runner(shm: &Path, fault: &str) -> (Child, BufReader<ChildStderr>) {
    let mut child = cli_in(shm)
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .args(["--device", "sim:cayman", "run", "examples/allreduce_2nc.neff", "--input"])
        .args(["input=examples/input_32xf32.bin", "--sim-fault", fault, "--pause-before-exec", "--pause-after-exec"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the runner");
    let err = BufReader::new(child.stderr.take().expect("stderr"));
    (child, err)
}

fn wait_for(err: &mut BufReader<ChildStderr>, what: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).expect("runner stderr") > 0, "the runner ended before {what}");
        if line.contains(what) {
            return;
        }
    }
}

#[test]
fn an_injected_fault_shows_in_error_summary_and_execution_errors_total() {
    let shm = shm_dir("tools", "fault");
    let (mut child, mut err) = paused_runner(&shm, "fp-nan@nc0:pe");
    wait_for(&mut err, "run: loaded");
    let mut mon = cli_in(&shm)
        .args(["monitor", "--period-ms", "300", "--prometheus", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("monitor");
    let addr = metrics_addr(mon.stderr.take().expect("stderr"));
    let rx = lines_of(mon.stdout.take().expect("stdout"));
    // A first report: the monitor has sampled the loaded, idle runner.
    let first = next_report(&rx);
    assert_eq!(first["neuron_runtime_data"][0]["report"]["execution_stats"]["execution_summary"]["completed"], 0);
    child.stdin.as_mut().expect("stdin").write_all(b"\n").expect("go");
    wait_for(&mut err, "run: executed");
    let (mut num, mut with_num, mut execs) = (0, 0, 0);
    let t0 = Instant::now();
    while num == 0 && t0.elapsed() < Duration::from_secs(60) {
        let r = next_report(&rx);
        assert_schema(&r, "neuron-monitor.schema.json");
        let ex = &r["neuron_runtime_data"][0]["report"]["execution_stats"];
        num += ex["error_summary"]["numerical"].as_u64().unwrap_or(0);
        with_num += ex["execution_summary"]["completed_with_num_err"].as_u64().unwrap_or(0);
        execs +=
            ex["execution_summary"].as_object().map(|m| m.values().filter_map(Value::as_u64).sum::<u64>()).unwrap_or(0);
    }
    // Give the endpoint one more period to hold the report that saw it.
    let _ = next_report(&rx);
    let (samples, types) = scrape(&addr);
    let _ = mon.kill();
    let _ = mon.wait();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!((num, with_num, execs), (1, 1, 1), "one execution, with a numerical error");
    check_exporter(&samples, &types, &["execution_errors_total", "execution_status_total"]);
    let get = |name: &str, label: &str, value: &str| {
        samples.iter().find(|(n, l, _)| n == name && l.get(label).is_some_and(|x| x == value)).map(|s| s.2)
    };
    assert_eq!(get("execution_errors_total", "error_type", "numerical"), Some(1.0));
    assert_eq!(get("execution_errors_total", "error_type", "hardware"), Some(0.0));
    assert_eq!(get("execution_status_total", "status_type", "completed_with_num_err"), Some(1.0));
    assert_eq!(get("execution_status_total", "status_type", "completed"), Some(0.0));
    let _ = std::fs::remove_dir_all(&shm);
}

#[test]
fn a_bad_configuration_is_refused_with_its_reason() {
    let shm = shm_dir("tools", "conf");
    let conf = shm.join("bad.conf");
    for (text, why) in [
        (r#"{"period": "soon"}"#, "bad period"),
        (r#"{"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]}"#, "tag_filter"),
        ("not json", "not JSON"),
    ] {
        std::fs::write(&conf, text).expect("config");
        let out = bin("neuron-monitor", &shm).arg("-c").arg(&conf).args(["--count", "1"]).output().expect("run");
        assert!(!out.status.success(), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NRT_INVALID") && err.contains(why), "{text}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = bin("neuron-monitor", &shm).args(["-c", "/nonexistent/monitor.conf"]).output().expect("run");
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&shm);
}
