//! `nccom-test` across two hosts (docs/collectives.md "Several hosts"): two network namespaces
//! joined by a veth pair (198.18.0.1/2, the benchmarking range) are the hosts, each with its
//! own broker and shared simulated cayman; four workers on each.
//!
//! - MPI mode: nccom-test runs in host a and starts Open MPI's `mpirun` (Debian's
//!   `openmpi-bin`), whose rsh agent (`OMPI_MCA_plm_rsh_agent`, a script of the test) starts
//!   host b's node process inside host b's namespace, as ssh would on another machine. The
//!   collectives are checked bit for bit (`--check random`); then host b is killed (every
//!   process in its namespace) in the middle of a run, which must end non-zero, naming a
//!   rank, within NEURON_RT_EXEC_TIMEOUT.
//! - Slurm mode: the same hosts as a Slurm allocation; `srun` is a script of the test that
//!   starts one task per node with the environment srun gives a task (SLURM_JOB_ID,
//!   SLURM_PROCID, SLURM_NTASKS, SLURM_NODEID, SLURM_LOCALID, SLURM_JOB_NODELIST, …).
//!
//! Skips (with a notice) without root, `ip` or `mpirun`, unless NEURON_VFIO_REQUIRE_NETNS=1 or
//! NEURON_VFIO_REQUIRE_MPI=1 (CI sets them).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The runs share two CPUs: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Skips with a notice, or fails when `require` is set to 1.
fn unavailable(require: &str, why: &str) {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{why}, and {require}=1");
    }
    eprintln!("NOTICE: skipping: {why} (set {require}=1 to make this a failure)");
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// Two hosts: network namespaces joined by a veth pair, each with a directory of its own (its
/// broker's socket); all deleted on drop, with every process left in them.
struct TwoHosts {
    ns: [String; 2],
    dir: PathBuf,
}

impl TwoHosts {
    const ADDR: [&'static str; 2] = ["198.18.0.1", "198.18.0.2"];

    /// `None` (after the notice) where namespaces or mpirun are not available.
    fn new(name: &str) -> Option<TwoHosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            unavailable("NEURON_VFIO_REQUIRE_NETNS", "network namespaces need root");
            return None;
        }
        if !Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success()) {
            unavailable("NEURON_VFIO_REQUIRE_NETNS", "no `ip` (Debian: apt-get install iproute2)");
            return None;
        }
        if !Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success()) {
            unavailable("NEURON_VFIO_REQUIRE_MPI", "no mpirun (Debian: apt-get install openmpi-bin)");
            return None;
        }
        let id = format!("{}{name}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("nv-nccom-hosts-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        for h in ["a", "b", "bin"] {
            std::fs::create_dir_all(dir.join(h)).unwrap();
        }
        let h = TwoHosts { ns: [format!("ncc{id}a"), format!("ncc{id}b")], dir };
        let veth = [format!("ncc{id}a"), format!("ncc{id}b")];
        (|| -> Result<(), String> {
            ip(&["netns", "add", &h.ns[0]])?;
            ip(&["netns", "add", &h.ns[1]])?;
            ip(&[
                "link", "add", &veth[0], "netns", &h.ns[0], "type", "veth", "peer", "name", &veth[1], "netns", &h.ns[1],
            ])?;
            for ((ns, dev), addr) in h.ns.iter().zip(&veth).zip(Self::ADDR) {
                ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev])?;
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
            }
            // libfabric's tcp provider picks its address among the interfaces that are up when
            // it starts: wait for both ends to have carrier.
            let t0 = Instant::now();
            for (ns, dev) in h.ns.iter().zip(&veth) {
                loop {
                    let o = Command::new("ip")
                        .args(["-n", ns, "-o", "link", "show", "dev", dev])
                        .output()
                        .map_err(|e| format!("ip: {e}"))?;
                    let s = String::from_utf8_lossy(&o.stdout);
                    if s.contains("LOWER_UP") && s.contains("state UP") {
                        break;
                    }
                    if t0.elapsed() > Duration::from_secs(20) {
                        return Err(format!("{dev} did not come up: {s}"));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            Ok(())
        })()
        .unwrap_or_else(|e| panic!("setting up the namespaces: {e}"));
        h.scripts();
        Some(h)
    }

    fn broker(&self, i: usize) -> PathBuf {
        self.dir.join(["a", "b"][i]).join("broker.sock")
    }

    /// The rsh agent mpirun starts host b's daemon with, and the `srun` of the Slurm test: each
    /// runs a command "on" a host — in its namespace, with its broker.
    fn scripts(&self) {
        let case = |var: &str| {
            (0..2)
                .map(|i| {
                    format!(
                        "  {}) ns={}; sock={} ;;\n",
                        match var {
                            "host" => Self::ADDR[i].to_string(),
                            _ => i.to_string(),
                        },
                        self.ns[i],
                        self.broker(i).display()
                    )
                })
                .collect::<String>()
        };
        let agent = format!(
            "#!/bin/sh\n# mpirun's rsh agent: HOST COMMAND…\nhost=$1; shift\ncase \"$host\" in\n{}  *) echo \"agent: \
             unknown host $host\" >&2; exit 1 ;;\nesac\nexec ip netns exec \"$ns\" env NEURON_VFIO_BROKER_SOCKET=\"$sock\" \
             sh -c \"$*\"\n",
            case("host")
        );
        // srun --jobid=J --nodes=N --ntasks=N --ntasks-per-node=1 --export=ALL COMMAND…: one
        // task per node, with the variables srun sets for a task.
        let srun = format!(
            "#!/bin/sh\njob=; n=\nwhile [ $# -gt 0 ]; do case \"$1\" in\n  --jobid=*) job=${{1#--jobid=}} ;;\n  \
             --nodes=*) n=${{1#--nodes=}} ;;\n  --*) ;;\n  *) break ;;\nesac; shift; done\n[ \"$n\" = 2 ] || {{ echo \
             \"srun: $n nodes in a 2-node allocation\" >&2; exit 1; }}\npids=\nfor t in 0 1; do\n  case $t in\n{}  \
             esac\n  ip netns exec \"$ns\" env NEURON_VFIO_BROKER_SOCKET=\"$sock\" SLURM_JOB_ID=\"$job\" SLURM_JOBID=\"$job\" \
             SLURM_STEP_ID=0 SLURM_PROCID=$t SLURM_NTASKS=2 SLURM_NPROCS=2 SLURM_NODEID=$t SLURM_LOCALID=0 \
             SLURM_NNODES=2 SLURM_JOB_NUM_NODES=2 SLURM_JOB_NODELIST='{}' SLURM_STEP_NODELIST='{}' \
             SLURMD_NODENAME=node$t SLURM_TASKS_PER_NODE='1(x2)' \"$@\" &\n  pids=\"$pids $!\"\ndone\nrc=0\nfor p in \
             $pids; do wait $p || rc=1; done\nexit $rc\n",
            case("task"),
            "node[0-1]",
            "node[0-1]",
        );
        for (name, text) in [("agent.sh", agent), ("bin/srun", srun)] {
            let p = self.dir.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    /// nccom-test in host a (the host the user is on), with `env`.
    fn nccom(&self, args: &[&str], env: &[(&str, String)]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[0]]).arg(env!("CARGO_BIN_EXE_nccom-test")).args(args);
        let path = format!("{}:{}", self.dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        c.env("PATH", path)
            .env("NEURON_VFIO_BROKER_SOCKET", self.broker(0))
            .env("NEURON_VFIO_BROKER_EXE", env!("CARGO_BIN_EXE_neuron-vfio"))
            .env("OMPI_MCA_plm_rsh_agent", self.dir.join("agent.sh"))
            // As root Open MPI wants to be told it may run.
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("FI_PROVIDER", "tcp")
            .env("NEURON_RT_LOG_LEVEL", "WARN");
        for v in [
            "NEURON_VFIO_DEVICE",
            "NEURON_LOGICAL_NC_CONFIG",
            "NEURON_RT_VIRTUAL_CORE_SIZE",
            "NEURON_VFIO_SIM_FAULT",
            "NEURON_VFIO_SIM_FAULT_RANK",
            "SLURM_JOB_ID",
        ] {
            c.env_remove(v);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Kills every process in host `i`'s namespace.
    fn kill(&self, i: usize) -> usize {
        let o = Command::new("ip").args(["netns", "pids", &self.ns[i]]).output().expect("ip netns pids");
        let pids: Vec<i32> =
            String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect();
        for &p in &pids {
            // SAFETY: kill has no memory preconditions; the pids are the namespace's processes.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        pids.len()
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for i in 0..2 {
            self.kill(i);
        }
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A root address of its own for each run (the root host listens there).
fn root(k: u16) -> String {
    format!("{}:{}", TwoHosts::ADDR[0], 29_600 + (std::process::id() % 300) as u16 * 3 + k)
}

/// Runs `args` with a JSON report: exit 0, the sizes' rows, every check passing, 2 nodes.
fn passes(h: &TwoHosts, args: &[&str], env: &[(&str, String)], sizes: &[u64]) {
    let json = h.dir.join("report.json");
    let mut a = args.to_vec();
    a.extend(["--report-to-json-file", json.to_str().unwrap(), "--data-collector-port", "0"]);
    let o = h.nccom(&a, env).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    let j: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = j["results"].as_array().unwrap();
    let got: Vec<u64> = results.iter().filter_map(|x| x["size_bytes"].as_u64()).collect();
    assert_eq!(got, sizes, "{}", text(&o));
    for x in results {
        assert_eq!(x["check"], "pass", "{x}");
    }
    assert_eq!((j["nnodes"].as_u64(), j["nworkers"].as_u64()), (Some(2), Some(8)), "{j}");
    assert_eq!(j["errors"].as_array().map(Vec::len), Some(0), "{j}");
}

/// MPI mode: two hosts × 4 workers, every reducing and gathering operation checked bit for bit.
#[test]
fn mpi_mode_two_hosts_of_four_workers_are_correct() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = TwoHosts::new("m") else { return };
    let hosts = ["-N", "2", "-s", TwoHosts::ADDR[0], TwoHosts::ADDR[1]];
    for (k, (op, d)) in [("all_reduce", "fp32"), ("all_gather", "bf16"), ("reduce_scatter", "int16")].iter().enumerate()
    {
        let env = [("NEURON_RT_ROOT_COMM_ID", root(k as u16)), ("NEURON_RT_EXEC_TIMEOUT", "60".into())];
        let a = [
            &["-r", "8", "-b", "64", "-e", "256K", "-f", "64", "-d", d, "-c", "random", "-n", "2", "-w", "1", op][..],
            &hosts,
        ]
        .concat();
        passes(&h, &a, &env, &[64, 4096, 262144]);
    }
    // The hosts file form, and the default LNC=2 logical cores.
    let file = h.dir.join("hosts");
    std::fs::write(&file, format!("{}\n{} slots=1\n", TwoHosts::ADDR[0], TwoHosts::ADDR[1])).unwrap();
    let env = [("NEURON_RT_ROOT_COMM_ID", root(0)), ("NEURON_RT_EXEC_TIMEOUT", "60".into())];
    let a = [
        "allr",
        "-r",
        "8",
        "-N",
        "2",
        "--hosts-file",
        file.to_str().unwrap(),
        "-b",
        "1K",
        "-e",
        "1K",
        "-c",
        "all_ones",
    ];
    passes(&h, &a, &env, &[1024]);
}

/// MPI mode: two hosts × 4 workers, the exchanges (send/receive, all-to-all, all-to-allv,
/// permute) across the hosts, checked bit for bit — each crosses the device hosts' seam as its
/// plan round and its data round (docs/collectives.md "Several hosts").
#[test]
fn mpi_mode_two_hosts_exchange_across_the_seam() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = TwoHosts::new("x") else { return };
    let hosts = ["-N", "2", "-s", TwoHosts::ADDR[0], TwoHosts::ADDR[1]];
    let t0 = Instant::now();
    for (k, (op, d, sizes)) in [
        ("sendrecv", "fp32", &[64u64, 4096, 262144][..]),
        ("alltoall", "bf16", &[64, 4096, 262144][..]),
        // All-to-allv's counts need n(n+1)/2 = 36 units: sizes that are multiples of 36 elements.
        ("alltoallv", "int32", &[144 * 4, 144 * 4 * 64][..]),
        ("permute", "uint8", &[64, 4096, 262144][..]),
    ]
    .iter()
    .enumerate()
    {
        let env = [("NEURON_RT_ROOT_COMM_ID", root(k as u16)), ("NEURON_RT_EXEC_TIMEOUT", "60".into())];
        let (min, max) = (sizes[0].to_string(), sizes[sizes.len() - 1].to_string());
        let a = [
            &["-r", "8", "-b", &min, "-e", &max, "-f", "64", "-d", d, "-c", "random", "-n", "2", "-w", "1", op][..],
            &hosts,
        ]
        .concat();
        passes(&h, &a, &env, sizes);
    }
    println!("four exchanges across two hosts: {:?}", t0.elapsed());
}

/// MPI mode: host b dies in the middle of a run; the run ends non-zero, naming a rank, within
/// NEURON_RT_EXEC_TIMEOUT.
#[test]
fn mpi_mode_a_killed_host_fails_the_run_within_the_execution_timeout() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = TwoHosts::new("k") else { return };
    let exec_timeout = 10;
    let env = [("NEURON_RT_ROOT_COMM_ID", root(1)), ("NEURON_RT_EXEC_TIMEOUT", exec_timeout.to_string())];
    let a = [
        "allr",
        "-r",
        "8",
        "-N",
        "2",
        "-s",
        TwoHosts::ADDR[0],
        TwoHosts::ADDR[1],
        "-b",
        "64K",
        "-e",
        "64M",
        "-f",
        "2",
        "-d",
        "fp32",
        "-n",
        "20",
        "-w",
        "1",
        "--data-collector-port",
        "0",
    ];
    let mut child = h.nccom(&a, &env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // Wait for the first row: both hosts are up and running collectives.
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("the run ended before its first row:\n{seen}");
        }
        seen.push_str(&l);
        if l.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
    }
    assert!(h.kill(1) > 0, "no process in host b");
    let killed = Instant::now();
    let mut rest = String::new();
    for l in out.lines().map_while(Result::ok) {
        rest.push_str(&l);
        rest.push('\n');
    }
    let st = child.wait().unwrap();
    let took = killed.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    println!("host b killed: nccom-test exited {st} {took:?} later\n{seen}{rest}{err}");
    assert_eq!(st.code(), Some(1), "{seen}{rest}{err}");
    assert!(rest.contains("errors found - test failed"), "{seen}{rest}{err}");
    assert!(err.contains("nccom-test: rank "), "{err}");
    assert!(took <= Duration::from_secs(exec_timeout), "{took:?} is beyond NEURON_RT_EXEC_TIMEOUT={exec_timeout}");
}

/// Slurm mode: the same two hosts as a 2-node allocation, the tasks started by `srun` with a
/// task's environment.
#[test]
fn slurm_mode_runs_the_allocations_nodes() {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = TwoHosts::new("s") else { return };
    let env = [("NEURON_RT_ROOT_COMM_ID", root(2)), ("NEURON_RT_EXEC_TIMEOUT", "60".into())];
    let a = [
        "allr",
        "-r",
        "8",
        "-N",
        "2",
        "-S",
        "--slurm-job-id",
        "4242",
        "-b",
        "256",
        "-e",
        "16K",
        "-f",
        "64",
        "-d",
        "bf16",
        "-c",
        "random",
        "-n",
        "2",
        "-w",
        "1",
    ];
    passes(&h, &a, &env, &[256, 16384]);
    // Inside the allocation (SLURM_JOB_ID set) -S needs no job id.
    let env =
        [("NEURON_RT_ROOT_COMM_ID", root(0)), ("NEURON_RT_EXEC_TIMEOUT", "60".into()), ("SLURM_JOB_ID", "4243".into())];
    passes(
        &h,
        &["redsct", "-r", "8", "-N", "2", "--slurm-mode", "-b", "1K", "-e", "1K", "-d", "fp8_e4m3", "-c"],
        &env,
        &[1024],
    );
}

/// What a multi-host run cannot do is refused by name before anything starts (no namespaces
/// needed).
#[test]
fn multi_host_refusals() {
    let run = |args: &[&str], root: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nccom-test"));
        c.args(args).env_remove("NEURON_RT_ROOT_COMM_ID").env_remove("SLURM_JOB_ID");
        if let Some(r) = root {
            c.env("NEURON_RT_ROOT_COMM_ID", r);
        }
        c.output().unwrap()
    };
    let r = Some("127.0.0.1:29999");
    for (args, root, name) in [
        (vec!["allr", "-r", "8", "-N", "2", "-s", "a", "b"], None, "NEURON_RT_ROOT_COMM_ID"),
        (vec!["allr", "-r", "6", "-N", "4", "-s", "a", "b", "c", "d"], r, "-r/--nworkers"),
        (vec!["allr", "-r", "8", "-N", "2", "-s", "a", "b", "c"], r, "-s/--hosts"),
        (vec!["allr", "-r", "8", "-N", "2", "-S"], r, "-S/--slurm-mode"),
        (vec!["allr", "-r", "8", "--slurm-job-id", "3"], r, "--slurm-job-id"),
    ] {
        let o = run(&args, root);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(name), "{args:?}: {}", text(&o));
    }
    // A node process outside its launcher (no OMPI_COMM_WORLD_RANK) fails, naming it.
    let o = run(&["allr", "-r", "8", "-N", "2", "-s", "a", "b", "--node", "127.0.0.1:9", "1"], r);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("OMPI_COMM_WORLD_RANK"), "{}", text(&o));
}
