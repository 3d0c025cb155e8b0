//! What the plugin's acceptance tests share: the built binaries, the plugin started against a
//! shared simulated cayman, the LNC=2 example's check, the broker's lease table.
#![allow(dead_code)]

use broker_client::client::{Connect, Session};
use broker_client::Role;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

pub const PLUGIN: &str = env!("CARGO_BIN_EXE_neuron-vfio-k8s-device-plugin");
pub const CORES: &str = "aws.amazon.com/neuroncore";
pub const DEVICES: &str = "aws.amazon.com/neuron";
/// The LNC=2 example (one logical core; doubles its input) and its input, from the repository.
pub const NEFF: &str = "examples/allreduce_lnc2.neff";
pub const LNC1_NEFF: &str = "examples/allreduce_1nc.neff";
pub const INPUT_FILE: &str = "examples/input_32xf32.bin";

pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The cargo profile directory of this build (target/<profile>/, the parent of deps/ where the
/// test executable is).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// The `neuron-vfio` binary of this build.
pub fn neuron_vfio() -> PathBuf {
    let p = profile_dir().join("neuron-vfio");
    assert!(p.exists(), "{} is missing: build it first (cargo build -p cli)", p.display());
    p
}

pub fn input() -> Vec<f32> {
    let b = std::fs::read(root().join(INPUT_FILE)).expect("input");
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Kills a child when dropped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How the plugin is started: its own binary, or `neuron-vfio k8s-device-plugin`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PluginExe {
    Binary,
    Cli,
}

/// The plugin serving `sim:shared:cayman` at its default LNC for the kubelet in
/// `dir/device-plugins`, its broker on `broker_sock` (started by the plugin), the metrics in
/// `metrics`; its log in `dir/plugin.log`.
pub fn start_plugin(exe: PluginExe, dir: &Path, broker_sock: &Path, metrics: &Path) -> Reaped {
    let log = std::fs::File::create(dir.join("plugin.log")).expect("log");
    let mut c = match exe {
        PluginExe::Binary => Command::new(PLUGIN),
        PluginExe::Cli => {
            let mut c = Command::new(neuron_vfio());
            c.arg("k8s-device-plugin");
            c
        }
    };
    c.args(["--device", "sim:shared:cayman", "--plugin-dir"])
        .arg(dir.join("device-plugins"))
        .arg("--broker-socket")
        .arg(broker_sock)
        .arg("--metrics-file")
        .arg(metrics)
        .args(["--watch-ms", "200", "--poll-ms", "50"])
        .env("NEURON_VFIO_BROKER_EXE", neuron_vfio())
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
        .env_remove("NEURON_RT_LOG_LEVEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    Reaped(c.spawn().expect("plugin"))
}

/// Read `err` until a line containing `want` (panics if it closes first).
pub fn wait_line(err: &mut BufReader<ChildStderr>, want: &str) {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).expect("read");
        assert!(n > 0, "stderr closed before `{want}`: {seen}");
        if line.contains(want) {
            return;
        }
        seen.push_str(&line);
    }
}

/// A `neuron-vfio run --json` result: the LNC=2 example's output is exactly twice its input.
pub fn check_exact(out: &str, what: &str) {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"));
    assert_eq!(v["status"], "NRT_SUCCESS", "{what}: {out}");
    let got: Vec<f32> = v["outputs"]["output"]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no values: {out}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    assert_eq!(got, input().iter().map(|x| x * 2.0).collect::<Vec<_>>(), "{what}");
}

/// Let a held model (`run --pause-after-exec`) finish and check its output exact.
pub fn finish_exact(run: &mut Child, what: &str) {
    run.stdin.take().expect("stdin").write_all(b"\n").expect("stdin");
    let mut out = String::new();
    run.stdout.take().expect("stdout").read_to_string(&mut out).expect("stdout");
    let st = run.wait().expect("wait");
    assert!(st.success(), "{what}: {out}");
    check_exact(&out, what);
}

/// A tool session with the broker on `sock`.
pub fn tool(sock: &Path) -> Session {
    let mut c = Connect::new(Role::Tool);
    c.socket = sock.to_path_buf();
    Session::connect(&c).expect("broker")
}

/// Physical cores leased on the broker's devices now, by pid.
pub fn leases(session: &Session) -> Vec<(u32, std::ops::Range<u32>)> {
    let devs = session.query().expect("query");
    devs.iter()
        .flat_map(|d| d.clients.iter())
        .filter(|c| c.count > 0)
        .map(|c| (c.pid, c.first..c.first + c.count))
        .collect()
}

/// Poll `f` every 2 ms until it holds; the time it took (panics after `limit`).
pub fn within(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
    t0.elapsed()
}

/// Abort the test process if it runs past `limit` (a hang is a failure, not a stuck run).
pub fn watchdog(limit: Duration, what: &'static str) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("{what} did not finish in {limit:?}");
        std::process::abort();
    });
}

/// A fresh directory for one test run.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}
