//! The node problem detector's signal: an execution that ends with a hardware error (an
//! injected fault on the simulator — `docs/faults.md`'s specs: uncorrectable ECC in the NC's
//! memory `nc-ue@nc0` and in HBM `hbm-ue@nc0`, a DMA abort on the queue every NEFF uses
//! `dma-abort@nc0:q0`, an NC hang `hang@nc0:pe` ended by a 1 s execution timeout) writes one
//! `NEURON_HW_ERR=` line, and the Neuron node problem detector's rules (tests/fixtures, from
//! aws-neuron-sdk at the commit named there) match it as the detector matches: the pattern with
//! `\z` appended, searched in its buffer of the last messages joined by newlines. Fails if a
//! rule stops matching or matches the wrong kind.
//!
//! The lines go where `NEURON_VFIO_HW_ERR_LOG` says — here a file of the test's and stderr,
//! never the host's kernel log: a simulated device writes nothing to `/dev/kmsg` by default,
//! which the test checks by reading the kernel log (when it may) around such a run.

use regex::Regex;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

/// Run the LNC=2 example on a private simulated cayman with `fault`, `NEURON_VFIO_HW_ERR_LOG`
/// set to `log` (None: unset); its status, stderr and pid.
fn run(fault: &str, extra: &[&str], log: Option<&str>) -> (String, String, u32) {
    let mut c = Command::new(neuron_vfio());
    c.current_dir(root())
        .env("NEURON_VFIO_COUNTERS", "0")
        .env("NEURON_VFIO_DEBUG_ENDPOINT", "0")
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .env_remove("NEURON_VFIO_DEVICE")
        .env_remove("NEURON_VFIO_SIM_FAULT")
        .args(["--json", "--device", "sim:cayman", "run", "examples/allreduce_lnc2.neff"])
        .args(["--input", "input=examples/input_32xf32.bin", "--sim-fault", fault])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match log {
        Some(l) => c.env("NEURON_VFIO_HW_ERR_LOG", l),
        None => c.env_remove("NEURON_VFIO_HW_ERR_LOG"),
    };
    let child = c.spawn().expect("run");
    let pid = child.id();
    let out = child.wait_with_output().expect("run");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (v["status"].as_str().unwrap_or("").to_string(), String::from_utf8_lossy(&out.stderr).into_owned(), pid)
}

/// The lines written to a file of the test's for `fault`.
fn lines_for(fault: &str, extra: &[&str]) -> (String, Vec<String>) {
    let log =
        std::env::temp_dir().join(format!("nv-hwerr-{}-{}.log", std::process::id(), fault.replace(['@', ':'], "-")));
    let _ = std::fs::remove_file(&log);
    let (status, _, _) = run(fault, extra, Some(log.to_str().expect("utf-8 path")));
    // The runtime creates the file: no line, no file.
    let lines = std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect();
    let _ = std::fs::remove_file(&log);
    (status, lines)
}

/// The injected faults: (spec, extra arguments, the run's status, the detector's reason).
const FAULTS: [(&str, &[&str], &str, &str); 4] = [
    ("nc-ue@nc0", &[], "NRT_EXEC_HW_ERR_NC_UE", "NeuronHasError_SRAM_UNCORRECTABLE_ERROR"),
    ("hbm-ue@nc0", &[], "NRT_EXEC_HW_ERR_HBM_UE", "NeuronHasError_HBM_UNCORRECTABLE_ERROR"),
    ("dma-abort@nc0:q0", &[], "NRT_EXEC_HW_ERR_DMA_ABORT", "NeuronHasError_DMA_ERROR"),
    ("hang@nc0:pe", &["--timeout", "1"], "NRT_TIMEOUT", "NeuronHasError_NC_UNCORRECTABLE_ERROR"),
];

#[test]
fn injected_hardware_errors_are_seen_by_the_node_problem_detectors_rules() {
    let mut reasons = Vec::new();
    for (fault, extra, status, reason) in FAULTS {
        let (got, lines) = lines_for(fault, extra);
        assert_eq!(got, status, "{fault}: {lines:?}");
        assert_eq!(lines.len(), 1, "{fault}: one line per failed execution: {lines:?}");
        assert!(lines[0].contains(" device=sim0 ") && lines[0].contains(" nc=0,1 vnc=0 "), "{fault}: {}", lines[0]);
        // Alone, and after unrelated kernel messages in the detector's buffer.
        assert_eq!(detect(&lines), [reason], "{fault}: {lines:?}");
        let mut noisy: Vec<String> = (0..12).map(|i| format!("eth0: link up {i}")).collect();
        noisy.extend(lines.iter().cloned());
        assert_eq!(detect(&noisy), [reason], "{fault}");
        reasons.push(reason);
    }
    // Every rule of the fixture is reached by one fault.
    let (_, rules) = rules();
    let mut all: Vec<&str> = rules.iter().map(|(r, _)| r.as_str()).collect();
    all.sort_unstable();
    reasons.sort_unstable();
    assert_eq!(reasons, all);
    // A run without a hardware error (a numerical error) writes nothing.
    let (got, lines) = lines_for("fp-nan@nc0:act", &[]);
    assert!(!got.is_empty() && got != "NRT_SUCCESS", "{got}");
    assert!(lines.is_empty(), "{lines:?}");
    // The rules do not match near misses (no word before, no space after the kind).
    assert!(detect(&["NEURON_HW_ERR=DMA_ERROR x".to_string()]).is_empty());
    assert!(detect(&["k: NEURON_HW_ERR=DMA_ERROR".to_string()]).is_empty());
}

#[test]
fn the_destination_is_the_operators_choice_and_a_simulated_device_spares_the_kernel_log() {
    // stderr: the bare line (the log's own error line has a timestamp and level before it).
    let (got, err, pid) = run("hbm-ue@nc0", &[], Some("stderr"));
    assert_eq!(got, "NRT_EXEC_HW_ERR_HBM_UE", "{err}");
    let bare: Vec<String> = err.lines().filter(|l| l.starts_with("neuron-vfio[")).map(str::to_string).collect();
    assert_eq!(bare.len(), 1, "{err}");
    assert!(bare[0].starts_with(&format!("neuron-vfio[{pid}]: NEURON_HW_ERR=")), "{}", bare[0]);
    assert_eq!(detect(&bare), ["NeuronHasError_HBM_UNCORRECTABLE_ERROR"]);
    // `off`: nowhere (the log's error line stays).
    let (got, err, _) = run("hbm-ue@nc0", &[], Some("off"));
    assert_eq!(got, "NRT_EXEC_HW_ERR_HBM_UE", "{err}");
    assert!(!err.lines().any(|l| l.starts_with("neuron-vfio[")), "{err}");
    // A value that names no destination fails the run's init with NRT_INVALID, by name.
    let (got, err, _) = run("hbm-ue@nc0", &[], Some("dmesg"));
    assert_eq!(got, "NRT_INVALID", "{err}");
    // Unset, on a simulated device: nothing in the host's kernel log (read when this process
    // may: root, as CI runs; the read starts at the log's end and takes nothing from it).
    let Some(mut kmsg) = KmsgTail::open() else {
        eprintln!("/dev/kmsg is not readable here: the default's absence from it is not checked");
        return;
    };
    let (got, err, pid) = run("hbm-ue@nc0", &[], None);
    assert_eq!(got, "NRT_EXEC_HW_ERR_HBM_UE", "{err}");
    assert!(err.contains("NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR"), "the log's error line names it: {err}");
    let mine = format!("neuron-vfio[{pid}]");
    let new = kmsg.read_new();
    assert!(!new.iter().any(|r| r.contains(&mine)), "a simulated device wrote to the kernel log: {new:?}");
}

/// The kernel log from its end now: records added since.
struct KmsgTail(std::fs::File);

impl KmsgTail {
    fn open() -> Option<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").ok()?;
        f.seek(SeekFrom::End(0)).ok()?;
        Some(Self(f))
    }
    /// Each read of /dev/kmsg is one record; EAGAIN at the end.
    fn read_new(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                // EPIPE: records overwritten since the last read; the next read continues.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
        out
    }
}
