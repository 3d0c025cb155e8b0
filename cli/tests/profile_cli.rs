//! `run --profile DIR` and `NEURON_RT_INSPECT_ENABLE`: the trace files a person opens, read
//! back with a JSON parser not written here (serde_json) against the trace-event format's
//! rules — metadata events name the tracks (a process per NeuronCore, a thread per engine and
//! one for its executions), complete events (`ph: "X"`) are the slices — and the system trace
//! as libnrt's document.

mod common;
use common::*;

use serde_json::Value;

fn read_json(p: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// The track names of a trace-event document: (pid, tid or None for the process) → name.
fn tracks(doc: &Value) -> Vec<(u64, Option<u64>, String)> {
    let ev = doc["traceEvents"].as_array().expect("traceEvents");
    ev.iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| {
            let name = e["args"]["name"].as_str().expect("metadata name").to_string();
            match e["name"].as_str() {
                Some("process_name") => (e["pid"].as_u64().expect("pid"), None, name),
                Some("thread_name") => (e["pid"].as_u64().expect("pid"), e["tid"].as_u64(), name),
                other => panic!("metadata event {other:?}"),
            }
        })
        .collect()
}

fn slices<'a>(doc: &'a Value, cat: &str) -> Vec<&'a Value> {
    doc["traceEvents"].as_array().expect("traceEvents").iter().filter(|e| e["ph"] == "X" && e["cat"] == cat).collect()
}

fn check_trace_dir(dir: &std::path::Path, repeat: usize) {
    let trace = read_json(&dir.join("trace.json"));
    let t = tracks(&trace);
    for (pid, nc) in [(1, 0), (2, 1)] {
        assert!(t.contains(&(pid, None, format!("NeuronCore {nc}"))), "{t:?}");
        for (tid, engine) in ["PE", "ACT", "POOL", "DVE", "SP", "executions"].iter().enumerate() {
            assert!(t.contains(&(pid, Some(tid as u64), engine.to_string())), "NC {nc} {engine}: {t:?}");
        }
    }
    let execs = slices(&trace, "model_exec");
    assert_eq!(execs.len(), repeat, "one slice per execute: {execs:?}");
    for (i, e) in execs.iter().enumerate() {
        assert_eq!(e["args"]["seq"], (i + 1) as u64);
        assert_eq!(e["args"]["status_name"], "NRT_SUCCESS");
        assert_eq!(e["args"]["ncs"], serde_json::json!([0, 1]));
        assert!(e["dur"].as_f64().is_some_and(|d| d > 0.0), "{e}");
    }
    // Every NC's engines ran within their execute's host span.
    let dev = slices(&trace, "device_exec");
    for nc_pid in [1, 2] {
        let mine: Vec<&&Value> = dev.iter().filter(|e| e["pid"] == nc_pid).collect();
        assert!(mine.len() >= repeat, "engine slices on NC pid {nc_pid}: {dev:?}");
        for e in mine {
            let seq = e["args"]["seq"].as_u64().expect("seq") as usize;
            let x = execs[seq - 1];
            let (ts, dur) = (e["ts"].as_f64().expect("ts"), e["dur"].as_f64().expect("dur"));
            let (xts, xdur) = (x["ts"].as_f64().expect("ts"), x["dur"].as_f64().expect("dur"));
            assert!(dur >= 0.0 && ts >= xts - 1.0 && ts + dur <= xts + xdur + 1.0, "{e} outside {x}");
        }
    }
    let sys: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("sys_trace_pid")))
        .collect();
    assert_eq!(sys.len(), 1, "{sys:?}");
    let doc = read_json(&sys[0]);
    let events = doc["events"].as_array().expect("events");
    let running: Vec<&Value> = events.iter().filter(|e| e["event_type"] == "nc_exec_running").collect();
    assert_eq!(running.len(), repeat * 2 * 2, "start and stop per NC per execute: {running:?}");
}

#[test]
fn run_profile_writes_a_timeline_and_the_system_trace() {
    let dir = std::env::temp_dir().join(format!("nv-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = cli()
        .current_dir(root())
        .args(["run", "examples/allreduce_2nc.neff", "--input", "input=examples/input_32xf32.bin", "--repeat", "3"])
        .arg("--profile")
        .arg(&dir)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("trace.json"), "says where it wrote");
    check_trace_dir(&dir, 3);
    let _ = std::fs::remove_dir_all(&dir);

    // libnrt's knobs do the same, into NEURON_RT_INSPECT_OUTPUT_DIR.
    let out = cli()
        .current_dir(root())
        .env("NEURON_RT_INSPECT_ENABLE", "1")
        .env("NEURON_RT_INSPECT_OUTPUT_DIR", &dir)
        .args(["run", "examples/allreduce_2nc.neff", "--input", "input=examples/input_32xf32.bin"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    check_trace_dir(&dir, 1);
    let _ = std::fs::remove_dir_all(&dir);

    // Without either, nothing is written.
    let out = cli()
        .current_dir(root())
        .env_remove("NEURON_RT_INSPECT_ENABLE")
        .args(["run", "examples/allreduce_1nc.neff", "--input", "input=examples/input_32xf32.bin"])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("profile: wrote"));
}
