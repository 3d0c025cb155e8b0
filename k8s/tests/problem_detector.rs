//! The node problem detector's signal: an execution that ends with a hardware error (an
//! injected fault on the simulator: uncorrectable ECC in the NC's memory and in HBM, a DMA
//! abort, an NC hang) writes a `NEURON_HW_ERR=` line, and the Neuron node problem detector's
//! rules (tests/fixtures, from aws-neuron-sdk at the commit named there) match it as the
//! detector matches: the pattern with `\z` appended, searched in its buffer of the last
//! messages joined by newlines. Fails if a rule stops matching or matches the wrong kind.

use regex::Regex;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn neuron_vfio() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let p = exe.parent().and_then(|d| d.parent()).expect("target dir").join("neuron-vfio");
    assert!(p.exists(), "{} is missing: build it first (cargo build -p cli)", p.display());
    p
}

/// The detector's kmsg rules: (reason, pattern compiled as the detector compiles it).
fn rules() -> (usize, Vec<(String, Regex)>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/neuron-problem-detector-rules.json"
    ))
    .expect("fixture");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let size = v["bufferSize"].as_u64().expect("bufferSize") as usize;
    let rules = v["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            let pat = r["pattern"].as_str().expect("pattern");
            (r["reason"].as_str().expect("reason").to_string(), Regex::new(&format!("{pat}\\z")).expect("regex"))
        })
        .collect();
    (size, rules)
}

/// The reasons the detector reports as each message arrives.
fn detect(messages: &[String]) -> Vec<String> {
    let (size, rules) = rules();
    let mut buf: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    for m in messages {
        buf.push(m);
        if buf.len() > size {
            buf.remove(0);
        }
        let joined = buf.join("\n");
        found.extend(rules.iter().filter(|(_, re)| re.is_match(&joined)).map(|(r, _)| r.clone()));
    }
    found
}

/// Run the LNC=2 example on a private simulated cayman with `fault`; the lines it wrote.
fn lines_for(fault: &str, extra: &[&str]) -> (String, Vec<String>) {
    let log =
        std::env::temp_dir().join(format!("nv-hwerr-{}-{}.log", std::process::id(), fault.replace(['@', ':'], "-")));
    let _ = std::fs::remove_file(&log);
    std::fs::write(&log, "").expect("log");
    let out = Command::new(neuron_vfio())
        .current_dir(root())
        .env("NEURON_VFIO_HW_ERR_LOG", &log)
        .env("NEURON_VFIO_COUNTERS", "0")
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .args(["--json", "--device", "sim:cayman", "run", "examples/allreduce_lnc2.neff"])
        .args(["--input", "input=examples/input_32xf32.bin", "--sim-fault", fault])
        .args(extra)
        .output()
        .expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let status = v["status"].as_str().unwrap_or("").to_string();
    let lines = std::fs::read_to_string(&log).expect("log").lines().map(str::to_string).collect();
    let _ = std::fs::remove_file(&log);
    (status, lines)
}

#[test]
fn injected_hardware_errors_are_seen_by_the_node_problem_detectors_rules() {
    for (fault, extra, status, reason) in [
        ("nc-ue@nc0", &[][..], "NRT_EXEC_HW_ERR_NC_UE", "NeuronHasError_SRAM_UNCORRECTABLE_ERROR"),
        ("hbm-ue@nc0", &[][..], "NRT_EXEC_HW_ERR_HBM_UE", "NeuronHasError_HBM_UNCORRECTABLE_ERROR"),
        ("dma-abort@nc0", &[][..], "NRT_EXEC_HW_ERR_DMA_ABORT", "NeuronHasError_DMA_ERROR"),
        ("hang@nc0:pe", &["--timeout", "1"][..], "NRT_TIMEOUT", "NeuronHasError_NC_UNCORRECTABLE_ERROR"),
    ] {
        let (got, lines) = lines_for(fault, extra);
        assert_eq!(got, status, "{fault}: {lines:?}");
        assert_eq!(lines.len(), 1, "{fault}: one line per failed execution: {lines:?}");
        assert!(lines[0].contains("device=") && lines[0].contains("nc=0,1"), "{fault}: {}", lines[0]);
        // Alone, and after unrelated kernel messages in the detector's buffer.
        assert_eq!(detect(&lines), [reason], "{fault}: {lines:?}");
        let mut noisy: Vec<String> = (0..12).map(|i| format!("eth0: link up {i}")).collect();
        noisy.extend(lines.iter().cloned());
        assert_eq!(detect(&noisy), [reason], "{fault}");
    }
    // A clean run writes nothing.
    let (got, lines) = lines_for("fp-nan@nc0:act", &[]);
    assert_ne!(got, "");
    assert!(lines.is_empty(), "{lines:?}");
    // The rules do not match near misses (no word before, no space after the kind).
    assert!(detect(&["NEURON_HW_ERR=DMA_ERROR x".to_string()]).is_empty());
    assert!(detect(&["k: NEURON_HW_ERR=DMA_ERROR".to_string()]).is_empty());
}
