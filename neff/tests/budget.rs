//! The manifest parser's memory budget: a neff.json that repeats a node a million times is
//! refused before a value tree is built, within a bounded peak RSS (measured in a child
//! process from /proc/self/status VmHWM).

use neff::builder::{self, pack, Body, WriteOptions};
use neff::manifest::{json_budget, JsonCost, MAX_JSON_OBJECTS};
use neff::*;

/// The single-NC model with `extra` inserted at the front of neff.json's `nodes` array.
fn with_nodes(extra: &str) -> Vec<u8> {
    let m = builder::single_nc_allreduce();
    let mut ms: Vec<(String, Vec<u8>)> = m.members().into_iter().map(|(n, b)| (n, b.to_vec())).collect();
    let e = ms.iter_mut().find(|(n, _)| n == "neff.json").expect("neff.json");
    let v: serde_json::Value = serde_json::from_slice(&e.1).expect("json");
    let text = serde_json::to_string(&v).expect("ser");
    let at = text.find("\"nodes\":[").expect("nodes") + "\"nodes\":[".len();
    e.1 = format!("{}{}{}", &text[..at], extra, &text[at..]).into_bytes();
    let bodies: Vec<(String, Body<'_>)> = ms.iter().map(|(n, b)| (n.clone(), Body::Borrowed(b))).collect();
    pack(&bodies, m.header(), &WriteOptions::default()).expect("pack")
}

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

const NODE: &str = r#"{"op":"null","name":"n","inputs":[]},"#;
const COPIES: usize = 1_200_000;

#[test]
fn million_node_manifest_is_refused_in_bounded_memory() {
    if let Ok(path) = std::env::var("NEFF_BUDGET_CHILD") {
        // Child: parse the NEFF file and report the peak RSS.
        let bytes = std::fs::read(&path).expect("read");
        let r = Neff::parse(&bytes, &ReadOptions::default());
        let Err(e) = r else { panic!("a 1.2M-node neff.json must be refused") };
        assert_eq!(e.status(), NrtStatus::Invalid, "{e}");
        println!("ERROR={e}");
        println!("VMHWM_KIB={}", vm_hwm_kib().unwrap_or(0));
        return;
    }
    let neff = with_nodes(&NODE.repeat(COPIES));
    let dir = std::env::temp_dir().join(format!("neff-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("nodes.neff");
    std::fs::write(&path, &neff).expect("write");
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "million_node_manifest_is_refused_in_bounded_memory", "--nocapture", "--test-threads=1"])
        .env("NEFF_BUDGET_CHILD", &path)
        .output()
        .expect("child");
    let _ = std::fs::remove_dir_all(&dir);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{so}{}", String::from_utf8_lossy(&out.stderr));
    let err =
        so.lines().find_map(|l| l.split_once("ERROR=").map(|x| x.1)).unwrap_or_else(|| panic!("no error line: {so}"));
    assert!(err.contains("neff.json") && err.contains("JSON objects, over the limit"), "{err}");
    let hwm: u64 =
        so.lines().find_map(|l| l.split_once("VMHWM_KIB=").map(|x| x.1)).and_then(|v| v.parse().ok()).expect("hwm");
    eprintln!("NEFF {} bytes, neff.json {} nodes: refused, child peak RSS {} KiB", neff.len(), COPIES, hwm);
    assert!(hwm > 0 && hwm <= 256 * 1024, "peak RSS {hwm} KiB");
}

#[test]
fn tiny_objects_over_the_budget_are_refused() {
    // 100k `{"a":0}` objects: under the object limit, but each costs a map node (~600 bytes)
    // for 8 bytes of JSON, far over 64x.
    let n = 100_000;
    assert!((n as u64) < MAX_JSON_OBJECTS);
    let extra =
        format!("{{\"op\":\"null\",\"name\":\"pad\",\"attrs\":{{\"pad\":[{}{{}}]}}}},", r#"{"a":0},"#.repeat(n));
    let Err(e) = Neff::parse(&with_nodes(&extra), &ReadOptions::default()) else { panic!("not refused") };
    assert_eq!(e.status(), NrtStatus::Invalid);
    let s = e.to_string();
    assert!(s.contains("neff.json") && s.contains("over the budget of 64 x"), "{s}");
    // The same objects, few enough, load (the model still parses).
    let extra =
        format!("{{\"op\":\"null\",\"name\":\"pad\",\"attrs\":{{\"pad\":[{}{{}}]}}}},", r#"{"a":0},"#.repeat(50));
    Neff::parse(&with_nodes(&extra), &ReadOptions::default()).expect("small padding parses");
}

#[test]
fn json_cost_counts_exactly() {
    let c = JsonCost::scan(br#"{"a":[1,2,{"b":"x\"y,:{["}],"c":[],"d":{}}"#).expect("scan");
    assert_eq!(
        c,
        JsonCost { objects: 3, entries: 4, arrays: 2, elements: 3, strings: 5, string_bytes: 1 + 1 + 8 + 1 + 1 }
    );
    let deep = "[".repeat(200);
    assert!(JsonCost::scan(deep.as_bytes()).is_err());
    // Budget: 64 x bytes + 1 MiB.
    assert_eq!(json_budget(1000), 64_000 + (1 << 20));
    assert_eq!(json_budget(u64::MAX), u64::MAX);
    // The real models' manifests are well inside the budget.
    let m = builder::single_nc_allreduce();
    for (n, b) in m.members() {
        if n.ends_with(".json") {
            let b = b.to_vec();
            let c = JsonCost::scan(&b).expect("scan");
            assert!(c.estimated_bytes() <= json_budget(b.len() as u64), "{n}: {c:?}");
        }
    }
}
