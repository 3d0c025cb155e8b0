//! Multi-host runs (docs/collectives.md "Several hosts"), as the page describes them: the
//! process the user started launches one node process per host (`mpirun` in MPI mode, `srun`
//! in Slurm mode), each node process starts the workers of its host, and their reports come
//! back to the launching process — the page's data collector — which prints the table.
//!
//! - The collector listens on `--data-collector-port` (all interfaces); the node processes
//!   reach it at `--data-collector-host:port` and send newline-separated JSON: first
//!   `{"job": J, "node": K}`, then their workers' report lines as the workers printed them,
//!   and `{"ended": R}` when worker R's output closes. A connection is another process's
//!   word: a wrong job, a node or rank out of range, a line over [`MAX_LINE`] bytes or that is
//!   not JSON ends or skips it, and a node whose connection ends has ended all its ranks.
//! - The workers of host K are ranks `K·L … K·L+L−1` (`L = -r / -N`), on that host's device
//!   (each host's own `NEURON_VFIO_DEVICE`, or its default); the device hosts of the hosts
//!   join one libfabric world at `NEURON_RT_ROOT_COMM_ID` and carry the part of each
//!   collective on other hosts (`sim_serve::seam`; the workers send the control lines).
//! - The launching process stops the run by closing the connections: a node process whose
//!   connection closes stops its workers and exits.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::args::Plan;
use crate::launch::{self, Event, LaunchError, Outcome, Workers};
use crate::nodes::{self, Launcher, Multi};
use crate::report;

/// The longest line a node process may send (a report of 20 timings is under 1 KiB; a
/// million timings under 16 MiB).
pub const MAX_LINE: u64 = 16 << 20;

/// The variables the node processes on other hosts get from this one (`mpirun -x`): the run's
/// device, logical core size, timeouts, faults and transport. The broker's socket is the
/// host's own and is not passed.
const FORWARDED: &[&str] = &[
    nodes::ROOT_VAR,
    "NEURON_RT_EXEC_TIMEOUT",
    "NEURON_RT_LOG_LEVEL",
    "NEURON_LOGICAL_NC_CONFIG",
    "NEURON_RT_VIRTUAL_CORE_SIZE",
    "NEURON_VFIO_DEVICE",
    "NEURON_VFIO_SIM_FAULT",
    "NEURON_VFIO_SIM_FAULT_RANK",
    "FI_PROVIDER",
];

/// `host:port`, with brackets around an IPv6 host.
fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The command that starts one node process per host: `exe prefix args --node ADDR JOB`
/// under `mpirun` or `srun`.
fn launcher_command(
    m: &Multi,
    nnodes: usize,
    exe: &Path,
    prefix: &[OsString],
    args: &[OsString],
    collector: &str,
    job: u64,
) -> Command {
    let mut c = match &m.launcher {
        Launcher::Mpi { hosts } => {
            let mut c = Command::new("mpirun");
            let slots: Vec<String> = hosts.iter().map(|h| format!("{h}:1")).collect();
            c.arg("-np").arg(nnodes.to_string()).arg("--host").arg(slots.join(","));
            for v in FORWARDED.iter().filter(|v| std::env::var_os(v).is_some()) {
                c.arg("-x").arg(v);
            }
            c
        }
        Launcher::Slurm { job: slurm_job } => {
            let mut c = Command::new("srun");
            c.arg(format!("--jobid={slurm_job}"))
                .arg(format!("--nodes={nnodes}"))
                .arg(format!("--ntasks={nnodes}"))
                .arg("--ntasks-per-node=1")
                .arg("--export=ALL");
            c
        }
    };
    c.arg(exe).args(prefix).args(args).arg("--node").arg(collector).arg(job.to_string());
    c.stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
    c
}

/// One bounded line of `r` (without its newline), `None` at the end of the stream, `Err` for a
/// line over [`MAX_LINE`] or a read error.
fn read_line(r: &mut impl BufRead) -> Result<Option<String>, String> {
    let mut buf = Vec::new();
    let n = r.by_ref().take(MAX_LINE + 1).read_until(b'\n', &mut buf).map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') && n as u64 > MAX_LINE {
        return Err(format!("a line over {MAX_LINE} bytes"));
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map(Some).map_err(|_| "a line that is not UTF-8".into())
}

/// Serves one node process's connection: its hello, then its lines as events; when it ends,
/// every rank of its node not yet ended ends.
fn serve_node(stream: TcpStream, job: u64, nnodes: usize, per: usize, tx: mpsc::Sender<Event>) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut r = BufReader::new(stream);
    let hello = match read_line(&mut r) {
        Ok(Some(l)) => serde_json::from_str::<Value>(&l).ok(),
        _ => None,
    };
    let node = hello.as_ref().and_then(|h| {
        let (j, k) = (h.get("job")?.as_u64()?, h.get("node")?.as_u64()?);
        (j == job && (k as usize) < nnodes).then_some(k as usize)
    });
    let Some(node) = node else {
        eprintln!("nccom-test: data collector: {peer}: not a node process of this run; closed");
        return;
    };
    let ranks = node * per..(node + 1) * per;
    let mut ended = vec![false; per];
    loop {
        let line = match read_line(&mut r) {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                eprintln!("nccom-test: data collector: node {node}: {e}; closed");
                break;
            }
        };
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        let rank = v.get("ended").or_else(|| v.get("rank")).and_then(Value::as_u64).map(|x| x as usize);
        let Some(rank) = rank.filter(|r| ranks.contains(r)) else { continue };
        let ev = if v.get("ended").is_some() {
            ended[rank - ranks.start] = true;
            Event::Ended(rank)
        } else {
            Event::Line(rank, line)
        };
        if tx.send(ev).is_err() {
            return;
        }
    }
    for (i, e) in ended.iter().enumerate() {
        if !e && tx.send(Event::Ended(ranks.start + i)).is_err() {
            return;
        }
    }
}

/// Run `plan` over the hosts of `m` (module docs): the launching process.
pub fn run(plan: &Plan, m: &Multi, exe: &Path, prefix: &[OsString], args: &[OsString]) -> Result<Outcome, LaunchError> {
    let shapes = launch::shapes(plan);
    let job = launch::job_id();
    let nnodes = plan.nnodes;
    let per = plan.ranks / nnodes.max(1);
    let listener = TcpListener::bind(("0.0.0.0", m.collector_port))
        .map_err(|source| LaunchError::Collector { port: m.collector_port, source })?;
    let port =
        listener.local_addr().map_err(|source| LaunchError::Collector { port: m.collector_port, source })?.port();
    let (tx, rx) = mpsc::channel::<Event>();
    let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    {
        let (tx, conns) = (tx.clone(), conns.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { continue };
                if let Ok(c) = s.try_clone() {
                    platform::sync::lock(&conns).push(c);
                }
                let tx = tx.clone();
                std::thread::spawn(move || serve_node(s, job, nnodes, per, tx));
            }
        });
    }
    let mut cmd = launcher_command(m, nnodes, exe, prefix, args, &addr(&m.collector_host, port), job);
    let what = format!("{:?}", cmd.get_program());
    let child: Arc<Mutex<Child>> =
        Arc::new(Mutex::new(cmd.spawn().map_err(|source| LaunchError::Launcher { what, source })?));
    {
        let (tx, child) = (tx.clone(), child.clone());
        std::thread::spawn(move || loop {
            let st = platform::sync::lock(&child).try_wait();
            match st {
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Ok(Some(st)) => {
                    let _ = tx.send(Event::LauncherExited(st.to_string()));
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Event::LauncherExited(e.to_string()));
                    return;
                }
            }
        });
    }
    drop(tx);
    let close = || {
        for c in platform::sync::lock(&conns).drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    };
    let device = launch::device()?;
    let algorithm = launch::algorithm(&device);
    let (rows, mut errors) = launch::collect(plan, &shapes, &rx, &algorithm, &mut || close());
    // The node processes stop once their connection closes; the launcher then exits.
    close();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let st = platform::sync::lock(&child).try_wait();
        match st {
            Ok(Some(st)) => {
                if !st.success() && errors.is_empty() {
                    errors.push(format!("the node processes' launcher exited with {st}"));
                }
                break;
            }
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = platform::sync::lock(&child).kill();
                errors.push("the node processes' launcher did not exit; stopped".into());
                break;
            }
        }
    }
    if !rows.is_empty() {
        println!("{}", report::avg_line(plan, &rows));
    }
    let device = format!("{device} (each host's own; {nnodes} hosts)");
    Ok(Outcome { rows, errors, device, algorithm })
}

/// Why a node process failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node process: {0}")]
    Environment(String),
    #[error("node {node}: the data collector {addr}: {source}")]
    Collector { node: usize, addr: String, source: std::io::Error },
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// The node process of host K (module docs): starts the host's workers and sends their
/// reports to the collector at `collector`.
pub fn node(
    plan: &Plan,
    m: &Multi,
    exe: &Path,
    prefix: &[OsString],
    args: &[OsString],
    collector: &str,
    job: u64,
) -> Result<(), NodeError> {
    let k = nodes::node_index(&m.launcher, plan.nnodes, |v| std::env::var(v).ok()).map_err(NodeError::Environment)?;
    let per = plan.ranks / plan.nnodes.max(1);
    let bad = |source| NodeError::Collector { node: k, addr: collector.into(), source };
    let stream = TcpStream::connect(collector).map_err(bad)?;
    let mut out = stream.try_clone().map_err(bad)?;
    writeln!(out, "{}", json!({"job": job, "node": k})).map_err(bad)?;
    let device = launch::device()?;
    let (tx, rx) = mpsc::channel::<Event>();
    let workers = Arc::new(Mutex::new(Workers::start(exe, prefix, args, job, &device, k * per..(k + 1) * per, &tx)?));
    drop(tx);
    // The collector closing the connection stops the workers (and so this process).
    {
        let workers = workers.clone();
        let mut s = stream;
        std::thread::spawn(move || {
            let mut sink = [0u8; 256];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            platform::sync::lock(&workers).stop();
        });
    }
    for ev in rx {
        let line = match ev {
            Event::Line(_, l) => l,
            Event::Ended(r) => json!({ "ended": r }).to_string(),
            Event::LauncherExited(_) => continue,
        };
        if writeln!(out, "{line}").is_err() {
            platform::sync::lock(&workers).stop();
        }
    }
    let failed = platform::sync::lock(&workers).wait();
    for f in &failed {
        eprintln!("nccom-test: node {k}: {f}");
    }
    Ok(())
}
