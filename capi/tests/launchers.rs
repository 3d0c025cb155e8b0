//! A libnrt C program (tests/c/ranks.c) as the ranks of multi-process jobs started the ways
//! real jobs start:
//!
//! - Open MPI's `mpirun` (Debian's `openmpi-bin`) starts 4 ranks; rank and size come from
//!   `OMPI_COMM_WORLD_RANK/SIZE`, the visible core from `OMPI_COMM_WORLD_LOCAL_RANK`;
//! - torchrun's environment, exactly the variables torchrun gives its workers (RANK,
//!   WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT, …, no NEURON_RT_ROOT_COMM_ID and no
//!   NEURON_RT_VISIBLE_CORES: libnrt derives both), with MASTER_PORT held by a listener as
//!   torchrun's store holds it;
//! - Slurm's (`srun`'s SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, …) with the
//!   NEURON_RT_ROOT_COMM_ID a batch script exports;
//! - two hosts: two network namespaces joined by a veth pair (198.18.0.1/2, the benchmarking
//!   range), two ranks in each: all-reduce, all-gather and reduce-scatter exact across them;
//!   then the link goes down in the middle of a loop of 1 MiB all-reduces and every rank's
//!   failing execution must report NRT_NETWORK_PROXY_FAILURE (or NRT_EXEC_HW_ERR_COLLECTIVES)
//!   within NEURON_RT_EXEC_TIMEOUT (the measured times are printed).
//!
//! Every rank checks its outputs byte for byte against the host reference (`fabric::reduce`).
//! Skips (with a notice) without a C compiler, `mpirun`, or root and `ip` for the namespaces,
//! unless NEURON_VFIO_REQUIRE_CC / NEURON_VFIO_REQUIRE_MPI / NEURON_VFIO_REQUIRE_NETNS is 1
//! (CI sets them).

#[path = "support/collective.rs"]
#[allow(dead_code)]
mod collective;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use collective::{case_expect, case_input, case_neff, Case, Kind};
use fabric::{DType, ReduceOp};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Skips with a notice, or fails when `require` is set to 1.
fn unavailable(require: &str, why: &str) {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{why}, and {require}=1");
    }
    eprintln!("NOTICE: skipping: {why} (set {require}=1 to make this a failure)");
}

#[path = "support/libnrt.rs"]
mod libnrt;

fn lib_dir() -> PathBuf {
    libnrt::lib_dir().expect("libnrt.so next to the test binary (or its parent)")
}

/// The linker arguments that bind a C program to the libnrt this build made: the one place
/// that names the library.
fn link_libnrt(cc: &mut Command) {
    let lib = lib_dir();
    cc.arg(format!("-L{}", lib.display())).arg("-lnrt").arg(format!("-Wl,-rpath,{}", lib.display()));
}

/// tests/c/ranks.c, compiled once per test binary run; None without a C compiler.
fn ranks_program() -> Option<PathBuf> {
    static PROG: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    PROG.get_or_init(|| {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        if !Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
            unavailable("NEURON_VFIO_REQUIRE_CC", &format!("no C compiler (`{cc} --version` failed)"));
            return None;
        }
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-ranks");
        let mut c = Command::new(&cc);
        c.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(manifest().join("include"))
            .arg(manifest().join("tests/c/ranks.c"))
            .arg("-o")
            .arg(&out);
        link_libnrt(&mut c);
        let o = c.output().expect("run the compiler");
        assert!(o.status.success(), "{cc} failed on ranks.c:\n{}", String::from_utf8_lossy(&o.stderr));
        Some(out)
    })
    .clone()
}

/// A fresh directory for one job.
fn job_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("launchers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the job directory");
    d
}

/// The collectives of a job of `n` ranks: element counts that split evenly over 2 and 4
/// ranks, so every rank's reduce-scatter segment is the whole output tensor.
fn ops(n: usize) -> Vec<(&'static str, Case)> {
    let group: Vec<u32> = (0..n as u32).collect();
    let c = |kind, dt, op, elems| Case { kind, dt, op, elems, group: group.clone() };
    vec![
        ("allreduce", c(Kind::AllReduce, DType::F32, ReduceOp::Add, 1000)),
        ("allgather", c(Kind::AllGather, DType::I32, ReduceOp::Add, 257)),
        ("reducescatter", c(Kind::ReduceScatter, DType::Bf16, ReduceOp::Max, 4000)),
        ("bigallreduce", c(Kind::AllReduce, DType::F32, ReduceOp::Add, 1 << 18)),
    ]
}

/// Writes OP.neff, OP.in.R and OP.want.R for every op into `dir`.
fn write_job(dir: &Path, n: usize) {
    for (k, (name, c)) in ops(n).iter().enumerate() {
        std::fs::write(dir.join(format!("{name}.neff")), case_neff(c, 1).expect("NEFF")).expect("write");
        for r in 0..n {
            std::fs::write(dir.join(format!("{name}.in.{r}")), case_input(c, k, r as u32)).expect("write");
            std::fs::write(dir.join(format!("{name}.want.{r}")), case_expect(c, k, r, 1).expect("reference"))
                .expect("write");
        }
    }
}

/// The environment every rank gets besides its launcher's variables.
fn rank_env(cmd: &mut Command, exec_timeout: u32) {
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        // Two simulated Trn1 devices: 4 NeuronCores, one per local rank.
        .env("NEURON_VFIO_DEVICE", "sim:sunda:2")
        .env("NEURON_RT_LOG_LEVEL", "WARN")
        .env("NEURON_RT_EXEC_TIMEOUT", exec_timeout.to_string())
        .env("FI_PROVIDER", "tcp");
    for v in [
        "NEURON_RT_ROOT_COMM_ID",
        "NEURON_RT_VISIBLE_CORES",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "PMI_RANK",
        "PMI_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
    ] {
        cmd.env_remove(v);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Every rank's output must end in "ALL OK" with the one visible core its local rank names.
fn check_ranks(outs: &[Output], n: usize, ops: &str) {
    assert_eq!(outs.len(), n);
    for (r, o) in outs.iter().enumerate() {
        println!(
            "--- rank {r}: {:?}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (r, o) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "rank {r} failed: {stdout}");
        assert!(!stdout.lines().any(|l| l.starts_with("FAIL")), "{stdout}");
        assert!(stdout.contains("visible_nc=1"), "rank {r}: one visible core per rank expected: {stdout}");
        for op in ops.split(' ') {
            assert!(stdout.contains(&format!("{op}: output equals the host reference")), "rank {r} {op}: {stdout}");
        }
    }
}

/// Starts one rank per environment and collects the outputs.
fn run_ranks(prog: &Path, dir: &Path, envs: &[Vec<(String, String)>], ops: &str) -> Vec<Output> {
    let kids: Vec<Child> = envs
        .iter()
        .map(|e| {
            let mut c = Command::new(prog);
            rank_env(&mut c, 30);
            c.arg(dir).args(ops.split(' ')).envs(e.iter().map(|(k, v)| (k, v)));
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start a rank")
        })
        .collect();
    kids.into_iter().map(|k| k.wait_with_output().expect("wait for a rank")).collect()
}

const OPS: &str = "allreduce allgather reducescatter";
/// Scheduling slack on a bound that a loaded machine can overrun by a few milliseconds to
/// seconds: the bounds check that nothing waits for ever, not how fast it ends.
const SCHED_SLACK_S: f64 = 5.0;

#[test]
fn mpirun_starts_four_ranks_of_a_libnrt_program() {
    let Some(prog) = ranks_program() else { return };
    if !Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return unavailable("NEURON_VFIO_REQUIRE_MPI", "no mpirun (Debian: apt-get install openmpi-bin)");
    }
    let n = 4;
    let dir = job_dir("mpirun");
    write_job(&dir, n);
    let root = format!("127.0.0.1:{}", free_port());
    let mut c = Command::new("mpirun");
    rank_env(&mut c, 30);
    // As root Open MPI wants --allow-run-as-root; 4 ranks on fewer cores need --oversubscribe.
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", &n.to_string()])
        .args(["-x", "NEURON_VFIO_DEVICE", "-x", "NEURON_RT_LOG_LEVEL", "-x", "NEURON_RT_EXEC_TIMEOUT"])
        .args(["-x", "FI_PROVIDER", "-x", "LD_LIBRARY_PATH", "-x", "NEURON_RT_ROOT_COMM_ID"])
        .env("NEURON_RT_ROOT_COMM_ID", &root)
        .arg(&prog)
        .arg(&dir)
        .args(OPS.split(' '));
    let t0 = Instant::now();
    let o = c.output().expect("run mpirun");
    let stdout = String::from_utf8_lossy(&o.stdout);
    println!("--- mpirun ({:?}): {:?}\n{stdout}{}", t0.elapsed(), o.status, String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "mpirun failed: {stdout}");
    assert_eq!(stdout.lines().filter(|l| *l == "ALL OK").count(), n, "{stdout}");
    assert!(!stdout.lines().any(|l| l.starts_with("FAIL")), "{stdout}");
    for r in 0..n {
        assert!(stdout.contains(&format!("rank {r}/{n}: visible_nc=1")), "rank {r}: {stdout}");
        for op in OPS.split(' ') {
            assert!(stdout.contains(&format!("rank {r} {op}: output equals the host reference")), "{stdout}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn torchrun_environment_derives_the_root_and_the_visible_core() {
    let Some(prog) = ranks_program() else { return };
    let n = 4;
    let dir = job_dir("torchrun");
    write_job(&dir, n);
    // torchrun's store holds MASTER_PORT; libnrt's rendezvous takes MASTER_PORT + 1.
    let (store, port) = loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let p = l.local_addr().expect("addr").port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            break (l, p);
        }
    };
    let envs: Vec<Vec<(String, String)>> = (0..n)
        .map(|r| {
            [
                ("RANK", r.to_string()),
                ("LOCAL_RANK", r.to_string()),
                ("GROUP_RANK", "0".into()),
                ("ROLE_RANK", r.to_string()),
                ("ROLE_NAME", "default".into()),
                ("LOCAL_WORLD_SIZE", n.to_string()),
                ("WORLD_SIZE", n.to_string()),
                ("GROUP_WORLD_SIZE", "1".into()),
                ("ROLE_WORLD_SIZE", n.to_string()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", port.to_string()),
                ("TORCHELASTIC_RESTART_COUNT", "0".into()),
                ("TORCHELASTIC_MAX_RESTARTS", "0".into()),
                ("TORCHELASTIC_RUN_ID", "none".into()),
                ("TORCHELASTIC_USE_AGENT_STORE", "True".into()),
                ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into()),
                ("OMP_NUM_THREADS", "1".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        })
        .collect();
    let outs = run_ranks(&prog, &dir, &envs, OPS);
    drop(store);
    check_ranks(&outs, n, OPS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slurm_environment_with_the_batch_scripts_root() {
    let Some(prog) = ranks_program() else { return };
    let n = 2;
    let dir = job_dir("slurm");
    write_job(&dir, n);
    let root = format!("127.0.0.1:{}", free_port());
    let envs: Vec<Vec<(String, String)>> = (0..n)
        .map(|r| {
            [
                ("SLURM_PROCID", r.to_string()),
                ("SLURM_LOCALID", r.to_string()),
                ("SLURM_NTASKS", n.to_string()),
                ("SLURM_NPROCS", n.to_string()),
                ("SLURM_STEP_NUM_TASKS", n.to_string()),
                ("SLURM_NODEID", "0".into()),
                ("SLURM_NNODES", "1".into()),
                ("SLURM_JOB_ID", "4242".into()),
                ("SLURM_STEP_ID", "0".into()),
                ("SLURM_JOB_NODELIST", "node-0".into()),
                ("SLURM_STEP_NODELIST", "node-0".into()),
                ("SLURM_TASKS_PER_NODE", n.to_string()),
                ("SLURMD_NODENAME", "node-0".into()),
                ("NEURON_RT_ROOT_COMM_ID", root.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        })
        .collect();
    let outs = run_ranks(&prog, &dir, &envs, OPS);
    check_ranks(&outs, n, OPS);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a usable libfabric, a multi-process `nrt_load_collectives` fails with NRT_FAILURE
/// and a message naming what to install; `nrt_init` and everything single-process still work.
#[test]
fn without_libfabric_only_the_multi_process_load_fails() {
    let Some(prog) = ranks_program() else { return };
    let n = 2;
    let dir = job_dir("nolibfabric");
    write_job(&dir, n);
    let root = format!("127.0.0.1:{}", free_port());
    let envs: Vec<Vec<(String, String)>> = (0..n)
        .map(|r| {
            [
                ("SLURM_PROCID", r.to_string()),
                ("SLURM_NTASKS", n.to_string()),
                ("SLURM_LOCALID", r.to_string()),
                ("NEURON_RT_ROOT_COMM_ID", root.clone()),
                ("NEURON_VFIO_LIBFABRIC", "/nonexistent/libfabric.so.1".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        })
        .collect();
    for (r, o) in run_ranks(&prog, &dir, &envs, "allreduce").iter().enumerate() {
        let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        println!("--- rank {r}: {:?}\n{stdout}{stderr}", o.status);
        assert!(!o.status.success());
        assert!(stdout.contains(&format!("ok   rank {r}/{n}: nrt_init -> 0")), "{stdout}");
        assert!(stdout.contains(&format!("FAIL rank {r}/{n} allreduce: nrt_load_collectives -> 1\n")), "{stdout}");
        assert!(stderr.contains("apt-get install libfabric1"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two network namespaces joined by a veth pair, deleted (with the pair) on drop.
struct TwoHosts {
    ns: [String; 2],
    veth: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

impl TwoHosts {
    const ADDR: [&'static str; 2] = ["198.18.0.1", "198.18.0.2"];

    fn new() -> Result<TwoHosts, String> {
        let id = format!("{}{}", std::process::id() % 100_000, Instant::now().elapsed().subsec_nanos() % 100);
        let h = TwoHosts {
            ns: [format!("nvf{id}a"), format!("nvf{id}b")],
            veth: [format!("nvf{id}a"), format!("nvf{id}b")],
        };
        ip(&["netns", "add", &h.ns[0]])?;
        ip(&["netns", "add", &h.ns[1]])?;
        ip(&[
            "link", "add", &h.veth[0], "netns", &h.ns[0], "type", "veth", "peer", "name", &h.veth[1], "netns", &h.ns[1],
        ])?;
        for i in 0..2 {
            ip(&["-n", &h.ns[i], "addr", "add", &format!("{}/30", Self::ADDR[i]), "dev", &h.veth[i]])?;
            ip(&["-n", &h.ns[i], "link", "set", &h.veth[i], "up"])?;
            ip(&["-n", &h.ns[i], "link", "set", "lo", "up"])?;
        }
        // libfabric's tcp provider picks its address among the interfaces that are up when it
        // starts: wait for both ends to have carrier.
        let t0 = Instant::now();
        for i in 0..2 {
            loop {
                let o = Command::new("ip")
                    .args(["-n", &h.ns[i], "-o", "link", "show", "dev", &h.veth[i]])
                    .output()
                    .map_err(|e| format!("ip: {e}"))?;
                let s = String::from_utf8_lossy(&o.stdout);
                if s.contains("LOWER_UP") && s.contains("state UP") {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(20) {
                    return Err(format!("{} did not come up: {s}", h.veth[i]));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(h)
    }

    /// A rank's command in host `i`'s namespace (libfabric's tcp provider finds the veth as
    /// the namespace's one interface besides loopback).
    fn command(&self, i: usize, prog: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i]]).arg(prog);
        c
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Children killed on drop (a failed assertion leaves no rank behind).
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn two_hosts_in_network_namespaces() {
    let Some(prog) = ranks_program() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return unavailable("NEURON_VFIO_REQUIRE_NETNS", "network namespaces need root");
    }
    if !Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success()) {
        return unavailable("NEURON_VFIO_REQUIRE_NETNS", "no `ip` (Debian: apt-get install iproute2)");
    }
    let hosts = TwoHosts::new().unwrap_or_else(|e| panic!("setting up the namespaces: {e}"));
    let n = 4;
    let dir = job_dir("netns");
    write_job(&dir, n);
    let root = format!("{}:{}", TwoHosts::ADDR[0], 29_400 + std::process::id() % 1000);
    let exec_timeout = 5;
    // Ranks 0, 1 on host a; 2, 3 on host b.
    let start = |args: &[&str]| -> Ranks {
        Ranks(
            (0..n)
                .map(|r| {
                    let mut c = hosts.command(r / 2, &prog);
                    rank_env(&mut c, exec_timeout);
                    c.env("OMPI_COMM_WORLD_RANK", r.to_string())
                        .env("OMPI_COMM_WORLD_SIZE", n.to_string())
                        .env("OMPI_COMM_WORLD_LOCAL_RANK", (r % 2).to_string())
                        .env("NEURON_RT_ROOT_COMM_ID", &root)
                        .arg(&dir)
                        .args(args)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("start a rank")
                })
                .collect(),
        )
    };
    let wait = |mut ranks: Ranks| -> Vec<Output> {
        ranks.0.drain(..).map(|k| k.wait_with_output().expect("wait for a rank")).collect()
    };
    let outs = wait(start(&OPS.split(' ').collect::<Vec<_>>()));
    check_ranks(&outs, n, OPS);

    // The link goes down while every rank loops on 1 MiB all-reduces.
    let ranks = start(&["--loop", "bigallreduce"]);
    let t0 = Instant::now();
    while (0..n).any(|r| !dir.join(format!("ready.rank.{r}")).exists()) {
        assert!(t0.elapsed() < Duration::from_secs(120), "the ranks did not start their loops");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    ip(&["-n", &hosts.ns[0], "link", "set", &hosts.veth[0], "down"]).expect("link down");
    let down = Instant::now();
    // A rank still looping after twice the timeout has missed the failure: stop it (its
    // status 0 then fails the check below).
    let stopper = {
        let stop = dir.join("stop");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2 * exec_timeout as u64 + 10));
            let _ = std::fs::write(stop, "");
        })
    };
    let outs = wait(ranks);
    println!("link down: all ranks returned {:?} after it", down.elapsed());
    drop(stopper);
    for (r, o) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&o.stdout);
        println!("--- rank {r} (host {}): {stdout}{}", r / 2, String::from_utf8_lossy(&o.stderr));
        let line = stdout.lines().find(|l| l.starts_with("loop bigallreduce status")).unwrap_or_default();
        let mut w = line.split(' ');
        let status: i64 = w.nth(3).and_then(|s| s.parse().ok()).unwrap_or(-1);
        let secs: f64 = w.nth(1).and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
        println!("rank {r}: status {status}, the failing execution took {secs:.3} s");
        assert!(matches!(status, 1206 | 1200), "rank {r}: {line:?}");
        // The failing execution ends at the execution timeout, not at the stopper (2 × timeout
        // + 10 s): a bound with room for a loaded machine's scheduling (the clean room measured
        // 5.037 s for a 5 s timeout at load 9), not a timing figure.
        let bound = exec_timeout as f64 + SCHED_SLACK_S;
        assert!(
            secs <= bound,
            "rank {r}: {secs} s is beyond NEURON_RT_EXEC_TIMEOUT={exec_timeout} + {SCHED_SLACK_S} s"
        );
    }
    drop(hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
