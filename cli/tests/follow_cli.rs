//! `nq watch|dump --pid`, `csr watch|snapshot --pid`: following the device another process
//! drives, through its runtime's read-only debug endpoint.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{cli_in as cli, root, Runner};

fn shm_dir(tag: &str) -> PathBuf {
    common::shm_dir("fol", tag)
}

/// A process executing the 2-NC model on sim:cayman repeatedly, once its debug endpoint exists
/// and it has had time to load.
fn runner(shm: &Path) -> Runner {
    let has_endpoint = |shm: &Path| {
        std::fs::read_dir(shm)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".debug") && e.path().join("sock").exists())
    };
    Runner::start(shm, "debug endpoint", has_endpoint, Duration::from_millis(500))
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines().map(|l| serde_json::from_str(l).expect("a JSON object per line")).collect()
}

#[test]
fn another_process_records_and_registers_are_followed() {
    let shm = shm_dir("run");
    let runner = runner(&shm);
    let pid = runner.pid();

    // The runner's rings for NC 0 are programmed; their records are readable.
    let dump = ok(&cli(&shm).args(["--json", "nq", "dump", "--pid", &pid, "--nc", "0"]).output().expect("nq dump"));
    let dump: Value = serde_json::from_str(&dump).expect("json");
    assert_eq!(dump["device"], format!("sim:{pid}/0"));
    let slots = dump["slots"].as_array().expect("slots");
    assert!(slots.len() >= 2, "{dump}");
    assert!(slots.iter().all(|s| s["location"].as_str().is_some_and(|l| l.contains(&pid))), "{dump}");
    let slot = slots[0]["slot"].as_u64().expect("slot");

    // New records appear while the runner executes.
    let w = ok(&cli(&shm)
        .args(["--json", "nq", "watch", "--pid", &pid, "--nc", "0", "--count", "6", "--timeout-ms", "30000"])
        .output()
        .expect("nq watch"));
    let recs = json_lines(&w);
    assert_eq!(recs.len(), 6, "{w}");
    assert!(recs.iter().all(|r| r["engine"].as_str().is_some() && r["raw"].as_str().is_some_and(|x| x.len() == 32)));
    assert!(recs.iter().any(|r| r["subtype"].as_str().is_some_and(|s| !s.is_empty())));

    // A ring's tail register moves.
    let reg = format!("notific[0].nq[{slot}].tail");
    let w = ok(&cli(&shm)
        .args(["--json", "csr", "watch", "--follow", &reg, "--count", "8", "--interval-ms", "150"])
        .output()
        .expect("csr watch"));
    let vals: Vec<u64> = json_lines(&w).iter().filter_map(|v| v["value"].as_u64()).collect();
    assert!(vals.len() >= 2, "the tail did not move: {w}");

    // Two snapshots of NC 0's NOTIFIC block differ in a ring pointer. A ring's pointers come
    // back to the same values every 128 executions (two records each in 256-record rings),
    // so a later snapshot is taken again (a few times) when the two happen to match.
    let a = shm.join("a.json");
    let b = shm.join("b.json");
    let snapshot = |f: &Path| {
        ok(&cli(&shm).args(["csr", "snapshot", "--pid", &pid, "notific[0]", "-o"]).arg(f).output().expect("snapshot"));
    };
    let pointer_moved = |d: &Value| {
        d["changed"].as_array().is_some_and(|c| {
            c.iter().any(|c| c["name"].as_str().is_some_and(|n| n.ends_with(".tail") || n.ends_with(".head")))
        })
    };
    snapshot(&a);
    let mut d = Value::Null;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(300));
        snapshot(&b);
        d = serde_json::from_str(&ok(&cli(&shm)
            .arg("--json")
            .args(["csr", "diff"])
            .arg(&a)
            .arg(&b)
            .output()
            .expect("diff")))
        .expect("json");
        if pointer_moved(&d) {
            break;
        }
    }
    drop(runner);
    let snap: Value = serde_json::from_str(&std::fs::read_to_string(&a).expect("a")).expect("json");
    assert_eq!(snap["device"], format!("sim:{pid}/0"));
    assert_eq!(snap["arch"], "cayman");
    assert!(pointer_moved(&d), "{d}");
    let _ = std::fs::remove_dir_all(&shm);
}

#[test]
fn no_endpoint_no_follow() {
    let shm = shm_dir("none");
    let o = cli(&shm).args(["nq", "watch", "--pid", "1", "--count", "1"]).output().expect("run");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("serves no debug endpoint"));
    let o = cli(&shm).args(["csr", "watch", "--follow", "misc_ram.device_id", "--count", "1"]).output().expect("run");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no process serves a debug endpoint"));
    // A snapshot of a local device, and a diff against itself, need no endpoint.
    let f = shm.join("s.json");
    let t = ok(&cli(&shm)
        .args(["--device", "sim:cayman", "csr", "snapshot", "udma[1].gen", "-o"])
        .arg(&f)
        .output()
        .expect("snap"));
    assert!(t.contains("not read"), "{t}");
    let t = ok(&cli(&shm).args(["csr", "diff"]).arg(&f).arg(&f).output().expect("diff"));
    assert!(t.contains("0 register(s) changed"), "{t}");
    let o = cli(&shm).args(["csr", "diff"]).arg(&f).arg(root().join("Cargo.toml")).output().expect("diff");
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&shm);
}
