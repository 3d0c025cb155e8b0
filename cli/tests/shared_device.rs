//! Issue 29's acceptance on the simulator: 8 processes on one shared simulated cayman (one NC
//! each, leased at init from NEURON_RT_VISIBLE_CORES), each with exact outputs; a 9th asking
//! for a held core is refused with libnrt's line and NRT_FAILURE; `ls` lists the processes;
//! clients without cores attach beside them up to 16 per device, the 17th refused. The first
//! process starts the broker (auto-start); it exits once everything is gone.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use broker::client::{Connect, Session};
use broker::protocol::{DeviceSpec, ErrorCode, Role};

const BIN: &str = env!("CARGO_BIN_EXE_neuron-vfio");
const ONE: &str = "examples/allreduce_1nc.neff";
const INPUT: &str = "input=examples/input_32xf32.bin";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn input() -> Vec<f32> {
    let b = std::fs::read(root().join("examples/input_32xf32.bin")).unwrap();
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn cmd(socket: &std::path::Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(root())
        .env("NEURON_VFIO_BROKER_SOCKET", socket)
        .env("NEURON_VFIO_BROKER_EXE", BIN)
        // The example these processes run is compiled for LNC=1 (cayman's default is 2:
        // `two_processes_each_hold_one_logical_core_at_trn2s_default` runs the LNC=2 one).
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
        .env_remove("NEURON_RT_NUM_CORES")
        .env_remove("NEURON_RT_VISIBLE_CORES");
    c
}

/// `run` on core `nc` of the shared cayman, holding its lease after executing until a line
/// arrives on its stdin.
fn spawn_run(socket: &std::path::Path, nc: u32) -> (Child, BufReader<std::process::ChildStderr>) {
    let mut child = cmd(socket)
        .env("NEURON_RT_VISIBLE_CORES", nc.to_string())
        .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT, "--repeat", "5"])
        .arg("--pause-after-exec")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    (child, err)
}

/// A persistent broker in the foreground on `socket`, listening.
fn start_broker(socket: &std::path::Path) -> Child {
    let b = Command::new(BIN)
        .args(["broker", "--foreground", "--persist", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the broker did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    b
}

fn wait_line(err: &mut BufReader<std::process::ChildStderr>, want: &str) {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).unwrap();
        assert!(n > 0, "stderr closed before `{want}`: {seen}");
        if line.contains(want) {
            return;
        }
        seen.push_str(&line);
    }
}

#[test]
fn eight_processes_share_a_cayman_the_ninth_and_the_seventeenth_are_refused() {
    let dir = std::env::temp_dir().join(format!("nv-shared-accept-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut runs: Vec<(Child, BufReader<_>)> = Vec::new();
    for nc in 0..8 {
        runs.push(spawn_run(&socket, nc));
        if nc == 0 {
            // The first starts the broker; the others then find it.
            wait_line(&mut runs[0].1, "executed");
        }
    }
    for (_, err) in runs.iter_mut().skip(1) {
        wait_line(err, "executed");
    }
    // Every core is held: a 9th process asking for nc1 is refused as libnrt refuses it.
    let ninth = cmd(&socket)
        .env("NEURON_RT_VISIBLE_CORES", "1")
        .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT])
        .output()
        .unwrap();
    assert!(!ninth.status.success());
    let v: serde_json::Value = serde_json::from_slice(&ninth.stdout).unwrap();
    assert_eq!(v["status"], "NRT_FAILURE", "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("NeuronCore(s) not available - Requested:nc1-nc1 Available:0"), "{msg}");
    let owner = runs[1].0.id();
    assert!(msg.contains(&format!("held by pid {owner}")), "{msg}");
    // No core named: libnrt reserves all, and all are taken.
    let all =
        cmd(&socket).args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(v["status"], "NRT_FAILURE", "{v}");

    // `ls` shows the device's processes: pid and core each.
    let ls = cmd(&socket).args(["--json", "--device", "sim:shared:cayman", "ls"]).output().unwrap();
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let procs = v[0]["processes"].as_array().unwrap();
    let mut seen: Vec<(u64, Vec<u64>)> = procs
        .iter()
        .filter(|p| !p["cores"].as_array().unwrap().is_empty())
        .map(|p| {
            (p["pid"].as_u64().unwrap(), p["cores"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect())
        })
        .collect();
    seen.sort_by_key(|(_, c)| c.clone());
    let want: Vec<(u64, Vec<u64>)> =
        runs.iter().enumerate().map(|(k, (c, _))| (c.id() as u64, vec![k as u64])).collect();
    assert_eq!(seen, want);

    // Clients without cores (tools) beside the 8: up to 16 per device, the 17th refused.
    let tool = || {
        let c = Connect { socket: socket.clone(), ..Connect::new(Role::Tool) };
        Session::connect(&c).unwrap()
    };
    let spec = DeviceSpec::Sim { arch: "cayman".into(), index: 0 };
    let tools: Vec<Session> = (0..8)
        .map(|_| {
            let t = tool();
            t.attach(spec.clone()).unwrap();
            t
        })
        .collect();
    let e = tool().attach(spec.clone()).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TooManyClients), "{e}");
    assert!(e.to_string().contains("16 processes"), "{e}");
    drop(tools);

    // Let them finish: exact outputs, each on its own core.
    for (k, (mut child, _)) in runs.into_iter().enumerate() {
        child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        exact(&child.wait_with_output().unwrap(), &format!("nc{k}"));
    }
    // Idle, the broker exits and removes its socket.
    let t0 = Instant::now();
    while socket.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the broker did not exit when idle");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_stops_a_persistent_broker_cleanly() {
    let dir = std::env::temp_dir().join(format!("nv-shared-term-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut b = start_broker(&socket);
    // A client holding a device: it loses its session, the broker still stops.
    let s = Session::connect(&Connect { socket: socket.clone(), ..Connect::new(Role::Tool) }).unwrap();
    s.attach(DeviceSpec::Sim { arch: "cayman".into(), index: 0 }).unwrap();
    let pid = nix::unistd::Pid::from_raw(b.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = b.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "SIGTERM did not stop the broker");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the broker leaves no socket behind");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The processes of this test's device hosts (`sim-host` with a socket in `dir`).
fn hosts_in(dir: &std::path::Path) -> Vec<u32> {
    let want = dir.to_string_lossy().to_string();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("sim-host") && cmd.contains(&want) && !cmd.contains("--spawn") {
            pids.push(pid);
        }
    }
    pids
}

/// A tool's view of the broker on `socket`, once one answers.
fn query(socket: &std::path::Path) -> Option<Vec<broker::protocol::DeviceInfo>> {
    let s = Session::connect(&Connect { socket: socket.to_path_buf(), ..Connect::new(Role::Tool) }).ok()?;
    s.query().ok()
}

/// Exact `run --json` output.
fn exact(out: &std::process::Output, what: &str) {
    exact_times(out, what, 1.0)
}

/// `run --json` output equal to the input times `factor`.
fn exact_times(out: &std::process::Output, what: &str, factor: f32) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "NRT_SUCCESS", "{what}");
    let got: Vec<f32> =
        v["outputs"]["output"]["values"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert_eq!(got, input().iter().map(|x| x * factor).collect::<Vec<_>>(), "{what}");
}

/// Issue 40's acceptance: on a shared cayman at its default LNC=2, two processes each lease one
/// logical NeuronCore (two physical cores) from the broker and run the LNC=2 example exact; a
/// third asking for a held logical core is refused with libnrt's line naming it and its holder;
/// `ls` shows each process's physical cores and logical core.
#[test]
fn two_processes_each_hold_one_logical_core_at_trn2s_default() {
    let dir = std::env::temp_dir().join(format!("nv-shared-lnc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let lnc2 = "examples/allreduce_lnc2.neff";
    let spawn = |vnc: u32| {
        let mut child = cmd(&socket)
            .env_remove("NEURON_LOGICAL_NC_CONFIG")
            .env("NEURON_RT_VISIBLE_CORES", vnc.to_string())
            .args(["--json", "--device", "sim:shared:cayman", "run", lnc2, "--input", INPUT, "--repeat", "3"])
            .arg("--pause-after-exec")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = BufReader::new(child.stderr.take().unwrap());
        (child, err)
    };
    let mut runs = vec![spawn(0)];
    wait_line(&mut runs[0].1, "executed");
    runs.push(spawn(1));
    wait_line(&mut runs[1].1, "executed");
    // Logical core 1 (physical 2-3) is held: refused as libnrt refuses it, naming the holder.
    let third = cmd(&socket)
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .env("NEURON_RT_VISIBLE_CORES", "1")
        .args(["--json", "--device", "sim:shared:cayman", "run", lnc2, "--input", INPUT])
        .output()
        .unwrap();
    assert!(!third.status.success());
    let v: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    assert_eq!(v["status"], "NRT_FAILURE", "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("NeuronCore(s) not available - Requested:nc1-nc1 Available:2"), "{msg}");
    assert!(msg.contains(&format!("held by pid {}", runs[1].0.id())), "{msg}");
    // A free logical core (2) is served.
    let fourth = cmd(&socket)
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .env("NEURON_RT_VISIBLE_CORES", "2")
        .args(["--json", "--device", "sim:shared:cayman", "run", lnc2, "--input", INPUT])
        .output()
        .unwrap();
    exact_times(&fourth, "logical core 2", 2.0);
    // `ls`: 4 logical cores of 2; each process with its physical and logical cores.
    let ls = cmd(&socket)
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .args(["--json", "--device", "sim:shared:cayman", "ls"])
        .output()
        .unwrap();
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(v[0]["logical_neuroncore_config"], 2, "{v}");
    assert_eq!(v[0]["nc_count"], 4, "{v}");
    let mut seen: Vec<(u64, serde_json::Value, serde_json::Value)> = v[0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["cores"].as_array().unwrap().is_empty())
        .map(|p| (p["pid"].as_u64().unwrap(), p["cores"].clone(), p["logical_cores"].clone()))
        .collect();
    seen.sort_by_key(|(_, c, _)| c.to_string());
    let want = vec![
        (runs[0].0.id() as u64, serde_json::json!([0, 1]), serde_json::json!([0])),
        (runs[1].0.id() as u64, serde_json::json!([2, 3]), serde_json::json!([1])),
    ];
    assert_eq!(seen, want);
    for (k, (mut child, _)) in runs.into_iter().enumerate() {
        child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        exact_times(&child.wait_with_output().unwrap(), &format!("logical core {k}"), 2.0);
    }
    let t0 = Instant::now();
    while socket.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the broker did not exit when idle");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broker SIGKILLed while its clients hold cores — two loaded and waiting, one executing
/// without pause: the simulated device lives in its host process, so they run on; they start
/// a new broker and re-register with it (their windows, cores, memory), which refuses their
/// cores to others, serves the free ones once the grace period is over, and takes a core back
/// from a client killed under it. The loaded clients then execute, exact.
#[test]
fn a_killed_broker_is_replaced_and_its_clients_carry_on() {
    let dir = std::env::temp_dir().join(format!("nv-shared-bkill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut b = start_broker(&socket);
    let paused = |nc: u32| {
        let mut child = cmd(&socket)
            .env("NEURON_RT_VISIBLE_CORES", nc.to_string())
            .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT, "--pause-before-exec"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        wait_line(&mut err, "loaded");
        (child, err)
    };
    let (mut c0, _e0) = paused(0);
    let (mut c1, _e1) = paused(1);
    let mut long = cmd(&socket)
        .env("NEURON_RT_VISIBLE_CORES", "2")
        .args(["--device", "sim:shared:cayman", "run", ONE, "--input", INPUT, "--repeat", "100000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !query(&socket).is_some_and(|d| d.iter().any(|d| d.clients.iter().any(|c| c.pid == long.id()))) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the long client never leased its core");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let hosts = hosts_in(&dir);
    assert_eq!(hosts.len(), 1, "one device, one host: {hosts:?}");
    b.kill().unwrap();
    b.wait().unwrap();
    let killed = Instant::now();
    // The clients start a broker and re-register: each with its core.
    let want = [(c0.id(), 0), (c1.id(), 1), (long.id(), 2)];
    let adopted = loop {
        if let Some(d) = query(&socket) {
            let held: Vec<(u32, u32)> = d.iter().flat_map(|d| d.clients.iter().map(|c| (c.pid, c.first))).collect();
            if want.iter().all(|w| held.contains(w)) {
                break killed.elapsed();
            }
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "the clients never re-registered");
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("all three clients re-registered with a new broker {} ms after the SIGKILL", adopted.as_millis());
    assert!(long.try_wait().unwrap().is_none(), "the executing client runs on");
    assert_eq!(hosts_in(&dir), hosts, "the device's host outlived the broker");
    // A held core is refused, naming its holder; a free one is served (after the grace).
    let out = cmd(&socket)
        .env("NEURON_RT_VISIBLE_CORES", "1")
        .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(msg.contains("not available") && msg.contains(&format!("held by pid {}", c1.id())), "{v}");
    let out = cmd(&socket)
        .env("NEURON_RT_VISIBLE_CORES", "3")
        .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT])
        .output()
        .unwrap();
    exact(&out, "a free core under the new broker");
    // The executing client killed under the new broker: its core is taken back and served.
    long.kill().unwrap();
    long.wait().unwrap();
    let t0 = Instant::now();
    loop {
        let out = cmd(&socket)
            .env("NEURON_RT_VISIBLE_CORES", "2")
            .args(["--json", "--device", "sim:shared:cayman", "run", ONE, "--input", INPUT])
            .output()
            .unwrap();
        if out.status.success() {
            exact(&out, "the killed client's core");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", String::from_utf8_lossy(&out.stdout));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The loaded clients execute now, exact.
    for c in [&mut c0, &mut c1] {
        c.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    }
    for (k, c) in [c0, c1].into_iter().enumerate() {
        exact(&c.wait_with_output().unwrap(), &format!("client on nc{k}"));
    }
    // Nothing left: the broker's accounting is back to nothing, then it and the host exit.
    let d = query(&socket).unwrap_or_default();
    assert!(d.iter().all(|d| d.clients.is_empty() && d.hbm_granted == 0 && d.iova_windows == 0), "{d:?}");
    let t0 = Instant::now();
    while socket.exists() || !hosts_in(&dir).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the broker or the device host did not exit when idle");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The simulated device's host process SIGKILLed while a client executes on it (the device
/// itself gone, as a device that fell off the bus): the client's execution fails promptly with
/// the device unreachable — long before the execution timeout (libnrt's default, 600 s), which
/// it would otherwise wait out on notification queues no one writes any more.
#[test]
fn a_client_whose_device_dies_fails_promptly() {
    let dir = std::env::temp_dir().join(format!("nv-shared-hdie-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut b = start_broker(&socket);
    let mut child = cmd(&socket)
        .env_remove("NEURON_RT_EXEC_TIMEOUT")
        .env("NEURON_RT_VISIBLE_CORES", "0")
        .args(["--device", "sim:shared:cayman", "run", ONE, "--input", INPUT, "--repeat", "1000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Executing: the broker lists its lease.
    let t0 = Instant::now();
    while !query(&socket)
        .is_some_and(|d| d.iter().any(|d| d.clients.iter().any(|c| c.pid == child.id() && c.count == 1)))
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "the client never leased its core");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let hosts = hosts_in(&dir);
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(hosts[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the client still waits 120 s after its device died");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{status}: {err}");
    assert!(err.contains("unreachable"), "{err}");
    eprintln!("client failed {:.2} s after its device's host was SIGKILLed", t0.elapsed().as_secs_f64());
    b.kill().unwrap();
    b.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
