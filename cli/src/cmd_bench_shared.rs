//! `neuron-vfio bench shared`: a process on a shared simulated device (docs/sharing.md) next to
//! one on a private simulator — attach and lease time, execute host time interleaved against
//! the private path, syscalls per execute (`strace -c -f` over two iteration counts), the time
//! from SIGKILL of a client to its core leasable again, and the execute rate of eight processes
//! on one device (one NC each, the torchrun-style job of docs/sharing.md) against one process's
//! on the same device. The bench runs its own broker on a private socket.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use serde_json::json;

use crate::report::CliError;

/// Arguments of `bench shared`.
#[derive(Args, Debug)]
pub struct SharedBenchArgs {
    /// Simulated arch of the shared device.
    #[arg(long, default_value = "cayman")]
    pub arch: String,
    /// Interleaved execute pairs (shared, private).
    #[arg(long, default_value_t = 2000)]
    pub iters: u32,
    /// Attach + lease + grant cycles timed.
    #[arg(long, default_value_t = 20)]
    pub leases: u32,
    /// SIGKILLs timed (a `run` process on the last core).
    #[arg(long, default_value_t = 5)]
    pub kills: u32,
    /// Seconds each round of the execute-rate figure runs (one process, then eight; two
    /// rounds each, alternated). 0: not measured.
    #[arg(long, default_value_t = 2.0)]
    pub rate_seconds: f64,
    /// Internal: execute `--iters` times on core 0 of the shared device and exit (what the
    /// syscall count traces).
    #[arg(long, hide = true)]
    pub exec_only: bool,
    /// Internal, with `--exec-only`: once loaded print `ready`, wait for a line on stdin, execute
    /// for `--rate-seconds`, print how many executes (the rate figure's processes).
    #[arg(long, hide = true)]
    pub rate_child: bool,
    /// Internal, with `--exec-only`: wait for completions with `usleep(1)` between polls
    /// (libnrt's synchronous wait) instead of spinning.
    #[arg(long, hide = true)]
    pub usleep_wait: bool,
}

fn e(e: runtime::RtError) -> CliError {
    CliError::new(e.status, e.message())
}

/// A runtime on core `nc` of the shared device set `spec` (as `nrt_init` opens it), waiting for
/// completions as `poll` says.
fn open_shared(
    spec: &select::Spec,
    nc: usize,
    poll: runtime::PollPolicy,
) -> Result<(Runtime, select::Opened), CliError> {
    let opened = select::open_reserving(spec, select::SimTiming::Inline, &select::Reserve::Cores(vec![nc]), Some(1))?;
    let mut base = RuntimeConfig::physical();
    base.poll = poll;
    let (devices, cfg) = crate::cmd_run::device_setup(&opened, base, hal::DeviceOptions::default());
    let rt = Runtime::new();
    rt.init_devices(devices, cfg).map_err(e)?;
    Ok((rt, opened))
}

struct Loop {
    m: runtime::ModelHandle,
    ins: TensorSet,
    outs: TensorSet,
}

fn prepare(rt: &Runtime, bytes: &[u8]) -> Result<Loop, CliError> {
    let m = rt.load(bytes, None, None).map_err(e)?;
    let ti = rt.alloc_tensor("input", 128, false, 0).map_err(e)?;
    let to = rt.alloc_tensor("output", 128, false, 0).map_err(e)?;
    ti.write(0, &[0x3f; 128]).map_err(e)?;
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to);
    Ok(Loop { m, ins, outs })
}

fn exec(rt: &Runtime, l: &Loop) -> Result<u64, CliError> {
    let (s, t) = rt.execute(&l.m, &l.ins, &l.outs).map_err(e)?;
    if s != NrtStatus::Success {
        return Err(CliError::new(s, "execute failed"));
    }
    Ok(t.total_ns)
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0)
}

/// A process of the rate figure: `ready`, a line on stdin, executes for `secs`, their count.
fn rate_child(rt: &Runtime, l: &Loop, secs: f64) -> Result<(), CliError> {
    use std::io::{BufRead, Write};
    println!("ready");
    std::io::stdout().flush().map_err(CliError::failure)?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).map_err(CliError::failure)?;
    let t = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while t.elapsed() < limit {
        exec(rt, l)?;
        n += 1;
    }
    println!("{n} {}", t.elapsed().as_nanos());
    Ok(())
}

/// Executes per second of `procs` processes, one NC each (NCs 0..procs), on the shared device
/// at `socket`, all started together and each executing for `secs` (waiting for completions
/// with `usleep(1)` when `usleep`, else spinning): the sum of their rates.
fn rate(exe: &Path, socket: &Path, arch: &str, procs: usize, secs: f64, usleep: bool) -> Result<f64, CliError> {
    use std::io::{BufRead, BufReader, Write};
    let mut children = Vec::new();
    let fail = |children: &mut Vec<std::process::Child>, m: String| {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        CliError::failure(m)
    };
    for nc in 0..procs {
        let spawned = Command::new(exe)
            .args(["bench", "shared", "--exec-only", "--rate-child", "--arch", arch])
            .args(["--rate-seconds", &secs.to_string()])
            .args(usleep.then_some("--usleep-wait"))
            .env(broker::paths::SOCKET_VAR, socket)
            .env("NEURON_RT_VISIBLE_CORES", nc.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(c) => children.push(c),
            Err(err) => return Err(fail(&mut children, format!("{}: {err}", exe.display()))),
        }
    }
    let mut outs = Vec::new();
    for i in 0..children.len() {
        let Some(out) = children[i].stdout.take() else {
            return Err(fail(&mut children, "a rate process without its output".into()));
        };
        let mut out = BufReader::new(out);
        let mut line = String::new();
        if out.read_line(&mut line).map_err(CliError::failure)? == 0 || line.trim() != "ready" {
            return Err(fail(&mut children, format!("rate process {i} did not get ready ({line:?})")));
        }
        outs.push(out);
    }
    for c in children.iter_mut() {
        if let Some(stdin) = c.stdin.as_mut() {
            stdin.write_all(b"go\n").map_err(CliError::failure)?;
        }
    }
    let mut total = 0.0;
    for (i, out) in outs.iter_mut().enumerate() {
        let mut line = String::new();
        out.read_line(&mut line).map_err(CliError::failure)?;
        let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        match f.as_slice() {
            [n, ns] if *ns > 0.0 => total += n / (ns / 1e9),
            _ => return Err(fail(&mut children, format!("rate process {i} reported {line:?}"))),
        }
    }
    for c in children.iter_mut() {
        let st = c.wait().map_err(CliError::failure)?;
        if !st.success() {
            return Err(CliError::failure(format!("a rate process exited with {st}")));
        }
    }
    Ok(total)
}

/// `strace -c -f` total syscalls of `exe bench shared --exec-only --iters n`.
fn traced_syscalls(exe: &Path, socket: &Path, arch: &str, n: u32) -> Result<u64, CliError> {
    let out = std::env::temp_dir().join(format!("nv-bench-shared-strace-{}-{n}", std::process::id()));
    let st = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(&out)
        .arg(exe)
        .args(["bench", "shared", "--exec-only", "--arch", arch, "--iters", &n.to_string()])
        .env("NEURON_VFIO_BROKER_SOCKET", socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|err| CliError::failure(format!("strace: {err}")))?;
    if !st.success() {
        return Err(CliError::failure(format!("strace of the execute loop exited with {st}")));
    }
    let text = std::fs::read_to_string(&out).map_err(CliError::failure)?;
    let _ = std::fs::remove_file(&out);
    // strace -c's last line: "100.00 <seconds> <usecs/call> <calls> <errors> total".
    let total = text
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with("total"))
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(f.len().saturating_sub(3)).and_then(|c| c.parse::<u64>().ok())
        })
        .ok_or_else(|| CliError::failure("no total line in strace -c output"))?;
    Ok(total)
}

pub fn run(a: SharedBenchArgs, json_out: bool) -> Result<(), CliError> {
    let arch = csr_maps::Arch::by_name(&a.arch)?;
    let spec = select::Spec::SimShared { arch, n: 1 };
    let mut d = neff::builder::single_nc_allreduce();
    d.target = arch.name.to_string();
    let bytes = d.build().map_err(CliError::failure)?;
    if a.exec_only {
        // The core: NEURON_RT_VISIBLE_CORES's first, else 0.
        let cfg = RuntimeConfig::from_env().map_err(e)?;
        let nc = cfg.visible_cores.and_then(|v| v.first().copied()).unwrap_or(0);
        let poll = if a.usleep_wait { runtime::PollPolicy::Usleep1 } else { runtime::PollPolicy::Spin };
        let (rt, opened) = open_shared(&spec, nc, poll)?;
        let l = prepare(&rt, &bytes)?;
        if a.rate_child {
            rate_child(&rt, &l, a.rate_seconds)?;
        } else {
            for _ in 0..a.iters {
                exec(&rt, &l)?;
            }
        }
        // The runtime goes before the lease and its data path.
        drop(l);
        let _ = rt.close();
        drop(rt);
        drop(opened);
        return Ok(());
    }
    // Our own broker, on a private socket.
    let dir = std::env::temp_dir().join(format!("nv-bench-shared-{}", std::process::id()));
    let socket: PathBuf = dir.join("broker.sock");
    std::env::set_var(broker::paths::SOCKET_VAR, &socket);
    let mut cfg = broker::BrokerConfig::new(&socket);
    cfg.idle_exit = None;
    // The device in its host process, as `neuron-vfio broker` runs it.
    cfg.sim_host = Some(broker::client::broker_exe().map_err(|e| CliError::failure(e.to_string()))?);
    let b = broker::Broker::bind(cfg).map_err(CliError::failure)?;
    let stopper = b.stopper();
    let broker_thread = std::thread::spawn(move || b.run());
    let result = measure(&a, arch, &spec, &bytes, &socket, json_out);
    stopper.stop();
    let _ = broker_thread.join();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(
    a: &SharedBenchArgs,
    arch: &'static csr_maps::Arch,
    spec: &select::Spec,
    bytes: &[u8],
    socket: &Path,
    json_out: bool,
) -> Result<(), CliError> {
    let ncs = arch.counts.ncs as usize;
    // Attach + lease + memory grant + data path, then give back.
    let mut lease_us = Vec::new();
    for _ in 0..a.leases.max(1) {
        let t = Instant::now();
        let o = select::open_reserving(spec, select::SimTiming::Inline, &select::Reserve::Cores(vec![0]), Some(1))?;
        lease_us.push(t.elapsed().as_micros() as u64);
        drop(o);
    }
    // Execute host time: shared (NC 0 over the broker's data path) and private (an in-process
    // simulator), interleaved.
    let (srt, sopened) = open_shared(spec, 0, runtime::PollPolicy::Spin)?;
    let sl = prepare(&srt, bytes)?;
    let sim = sim::SimDevice::new(sim::SimConfig::new(arch).timing(sim::Timing::Inline)).map_err(CliError::failure)?;
    let prt = Runtime::new();
    prt.init(
        vec![Arc::new(sim.clone()) as Arc<dyn Platform>],
        RuntimeConfig::physical(),
        hal::DeviceOptions::default(),
    )
    .map_err(e)?;
    let pl = prepare(&prt, bytes)?;
    for _ in 0..50 {
        exec(&srt, &sl)?;
        exec(&prt, &pl)?;
    }
    let (mut sh, mut pr) = (Vec::new(), Vec::new());
    for i in 0..a.iters {
        if i % 2 == 0 {
            sh.push(exec(&srt, &sl)?);
            pr.push(exec(&prt, &pl)?);
        } else {
            pr.push(exec(&prt, &pl)?);
            sh.push(exec(&srt, &sl)?);
        }
    }
    let (sh50, pr50) = (pct(&mut sh, 0.5), pct(&mut pr, 0.5));
    let (sh99, pr99) = (pct(&mut sh, 0.99), pct(&mut pr, 0.99));
    drop(sl);
    drop(pl);
    let _ = srt.close();
    let _ = prt.close();
    // NC 0 free again for the traced process.
    drop(sopened);
    // Syscalls per execute: strace over two iteration counts, the difference per execute.
    let exe = std::env::current_exe().map_err(CliError::failure)?;
    let sys = match (traced_syscalls(&exe, socket, arch.name, 200), traced_syscalls(&exe, socket, arch.name, 1200)) {
        (Ok(lo), Ok(hi)) => Some((hi.saturating_sub(lo)) as f64 / 1000.0),
        (Err(err), _) | (_, Err(err)) => {
            eprintln!("notice: syscalls per execute not measured: {err}");
            None
        }
    };
    // SIGKILL of a client executing on the last core → the core leasable again.
    let probe = broker::Session::connect(&broker::client::Connect {
        socket: socket.to_path_buf(),
        ..broker::client::Connect::new(broker::Role::Runtime)
    })
    .map_err(CliError::failure)?;
    let dev = probe
        .attach(broker::DeviceSpec::Sim { arch: arch.name.to_string(), index: 0 })
        .map_err(CliError::failure)?
        .device;
    let last = ncs - 1;
    let mut kill_ms = Vec::new();
    for _ in 0..a.kills {
        let mut child = Command::new(&exe)
            .args(["bench", "shared", "--exec-only", "--arch", arch.name, "--iters", "100000000"])
            .env(broker::paths::SOCKET_VAR, socket)
            .env("NEURON_RT_VISIBLE_CORES", last.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(CliError::failure)?;
        // Wait until it holds the core (then it executes in a loop).
        let held = Instant::now();
        loop {
            let q = probe.query().map_err(CliError::failure)?;
            if q.iter().flat_map(|d| &d.clients).any(|c| c.pid == child.id() && c.count > 0) {
                break;
            }
            if held.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                return Err(CliError::failure("the client never leased its core"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20));
        child.kill().map_err(CliError::failure)?;
        let t = Instant::now();
        let _ = child.wait();
        loop {
            if probe.lease(dev, broker::Want::Range { first: last as u32, count: 1 }).is_ok() {
                break;
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(CliError::failure("the core was never freed"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        kill_ms.push(t.elapsed().as_micros() as u64);
        probe.release(dev).map_err(CliError::failure)?;
    }
    drop(probe);
    // Eight processes on one device against one, alternated (1, 8, 1, 8).
    let procs = ncs.min(8);
    // The same with libnrt's usleep(1) wait, whose waiting leaves the CPUs to the device work
    // (what limits the spinning figure on a machine with fewer CPUs than processes).
    let mut rates: [[Vec<f64>; 2]; 2] = Default::default();
    if a.rate_seconds > 0.0 {
        for _ in 0..2 {
            for (w, usleep) in [false, true].into_iter().enumerate() {
                rates[w][0].push(rate(&exe, socket, arch.name, 1, a.rate_seconds, usleep)?);
                rates[w][1].push(rate(&exe, socket, arch.name, procs, a.rate_seconds, usleep)?);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let [[mut s1, mut s8], [mut u1, mut u8]] = rates;
    let (one, many) = (median(&mut s1), median(&mut s8));
    let (uone, umany) = (median(&mut u1), median(&mut u8));
    let kill50 = pct(&mut kill_ms, 0.5);
    let kill_max = kill_ms.iter().copied().max().unwrap_or(0);
    let lease50 = pct(&mut lease_us, 0.5);
    if json_out {
        crate::report::print_json(&json!({
            "arch": arch.name,
            "attach_lease_us_p50": lease50,
            "execute_ns_p50": {"shared": sh50, "private": pr50},
            "execute_ns_p99": {"shared": sh99, "private": pr99},
            "shared_over_private": sh50 as f64 / pr50.max(1) as f64,
            "syscalls_per_execute": sys,
            "sigkill_to_leasable_us": {"p50": kill50, "max": kill_max, "kills": a.kills},
            "execute_rate_per_s": {"one_process": one, "processes": procs, "all_processes": many,
                "ratio": one.zip(many).map(|(o, m)| m / o.max(1e-9)),
                "usleep_wait": {"one_process": uone, "all_processes": umany,
                    "ratio": uone.zip(umany).map(|(o, m)| m / o.max(1e-9))}},
        }));
    } else {
        println!("bench shared ({}, one NC per process, broker on a private socket)", arch.name);
        println!("  attach + lease + memory grant + data path: p50 {:.2} ms over {}", lease50 as f64 / 1e3, a.leases);
        println!(
            "  execute host time, interleaved ({} pairs): shared p50 {} ns p99 {} ns | private p50 {} ns p99 {} ns | shared/private {:.2}",
            a.iters,
            sh50,
            sh99,
            pr50,
            pr99,
            sh50 as f64 / pr50.max(1) as f64
        );
        match sys {
            Some(s) => println!("  syscalls per execute (strace -c -f, 1200 vs 200 executes): {s:.1}"),
            None => println!("  syscalls per execute: not measured (see the notice above)"),
        }
        println!(
            "  SIGKILL -> core leasable again: p50 {:.1} ms, max {:.1} ms over {} kills",
            kill50 as f64 / 1e3,
            kill_max as f64 / 1e3,
            a.kills
        );
        for (what, one, many) in [("spinning wait", one, many), ("usleep(1) wait", uone, umany)] {
            match (one, many) {
                (Some(o), Some(m)) => println!(
                    "  execute rate, one NC per process, {what} ({:.1} s rounds, median of 2): 1 process {o:.0}/s, {procs} processes {m:.0}/s ({:.2}x)",
                    a.rate_seconds,
                    m / o.max(1e-9)
                ),
                _ => println!("  execute rate, {what}: not measured (--rate-seconds 0)"),
            }
        }
    }
    Ok(())
}
