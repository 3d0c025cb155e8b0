//! The launcher: starts one worker process per rank (this program again, with the same command
//! line and `--worker RANK JOB`), merges their reports into the table as each size completes,
//! and stops every worker when one fails.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::args::Plan;
use crate::data;
use crate::report::{self, Row};
use crate::worker::{DEVICE_VAR, FAULT_VAR};

/// With `NEURON_VFIO_SIM_FAULT` set, the rank whose worker gets it (default: every worker).
pub const FAULT_RANK_VAR: &str = "NEURON_VFIO_SIM_FAULT_RANK";

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{DEVICE_VAR}={0}: a private simulator lives in one process; workers share `sim:shared[:ARCH]`")]
    PrivateSim(String),
    #[error("device: {0}")]
    Select(#[from] select::SelectError),
    #[error("starting worker {rank}: {source}")]
    Spawn { rank: usize, source: std::io::Error },
    #[error("{FAULT_RANK_VAR}={0}: not a rank")]
    FaultRank(String),
    #[error(
        "{what}: {source} (a multi-host run needs Open MPI's mpirun (Debian: openmpi-bin), or srun in Slurm mode)"
    )]
    Launcher { what: String, source: std::io::Error },
    #[error("the data collector on port {port}: {source}")]
    Collector { port: u16, source: std::io::Error },
}

/// What a run printed and found.
pub struct Outcome {
    pub rows: Vec<Row>,
    /// Every failure, each naming its rank.
    pub errors: Vec<String>,
    pub device: String,
    pub algorithm: String,
}

/// What the merge hears from the workers (through their pipes, or from the node processes of
/// a multi-host run).
#[derive(Debug)]
pub enum Event {
    /// One line a worker printed.
    Line(usize, String),
    /// A worker's reports ended (its pipe closed, or its node process said so or went away).
    Ended(usize),
    /// The node processes' launcher (`mpirun`, `srun`) exited, with this description.
    LauncherExited(String),
}

/// The device the workers share: `NEURON_VFIO_DEVICE` when set, else the first Neuron device
/// on vfio-pci, else a shared simulated cayman.
pub fn device() -> Result<String, LaunchError> {
    if let Some(d) = std::env::var(DEVICE_VAR).ok().filter(|d| !d.trim().is_empty()) {
        return match select::Spec::parse(Some(&d))? {
            select::Spec::Sim { .. } => Err(LaunchError::PrivateSim(d)),
            _ => Ok(d),
        };
    }
    Ok(match select::resolve_default(&select::sysfs()) {
        Ok((select::Spec::Pci(a), _)) => a.to_string(),
        _ => "sim:shared:cayman".into(),
    })
}

/// The algorithm column's value for `device`.
pub fn algorithm(device: &str) -> String {
    if device.starts_with("sim") { "sim-hub" } else { "device" }.to_string()
}

/// A job id (the communicator ids of its sizes derive from it; every worker of the job gets it).
pub fn job_id() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (u64::from(std::process::id()) << 20) ^ (t as u64)
}

/// Every row's shape, in order; a size that rounds to nothing is skipped with a line on
/// stderr.
pub fn shapes(plan: &Plan) -> Vec<data::Shape> {
    let mut shapes = Vec::new();
    for &s in &plan.sizes {
        match data::shape(plan.op, plan.dtype, plan.ranks, s) {
            Some(sh) => shapes.push(sh),
            None => eprintln!(
                "nccom-test: size {s}: rounds to 0 bytes for {} {} over {} ranks; skipped",
                plan.op.name(),
                plan.dtype.name(),
                plan.ranks
            ),
        }
    }
    shapes
}

/// The worker processes this process started.
pub struct Workers {
    children: Vec<(usize, Child)>,
}

impl Workers {
    /// Starts workers `ranks` of job `job` on `device` (this program again: `exe` + `prefix`
    /// re-runs the command, `args` is the user's command line), each line they print sent to
    /// `tx`, then [`Event::Ended`] when their output closes.
    pub fn start(
        exe: &Path,
        prefix: &[OsString],
        args: &[OsString],
        job: u64,
        device: &str,
        ranks: Range<usize>,
        tx: &mpsc::Sender<Event>,
    ) -> Result<Workers, LaunchError> {
        let fault_rank = match std::env::var(FAULT_RANK_VAR) {
            Ok(v) => Some(v.trim().parse::<usize>().map_err(|_| LaunchError::FaultRank(v))?),
            Err(_) => None,
        };
        let mut w = Workers { children: Vec::new() };
        for rank in ranks {
            let mut c = Command::new(exe);
            c.args(prefix).args(args).arg("--worker").arg(rank.to_string()).arg(job.to_string());
            c.env(DEVICE_VAR, device).stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
            if fault_rank.is_some_and(|f| f != rank) {
                c.env_remove(FAULT_VAR);
            }
            let mut child = match c.spawn() {
                Ok(ch) => ch,
                Err(source) => {
                    w.stop();
                    return Err(LaunchError::Spawn { rank, source });
                }
            };
            if let Some(out) = child.stdout.take() {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for l in BufReader::new(out).lines() {
                        match l {
                            Ok(l) => {
                                if tx.send(Event::Line(rank, l)).is_err() {
                                    return;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                    let _ = tx.send(Event::Ended(rank));
                });
            }
            w.children.push((rank, child));
        }
        Ok(w)
    }

    /// Kills every worker still running.
    pub fn stop(&mut self) {
        for (_, c) in self.children.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
        }
    }

    /// Waits for every worker: the failures (a worker that exited unsuccessfully), each naming
    /// its rank.
    pub fn wait(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for (rank, c) in self.children.iter_mut() {
            match c.wait() {
                Ok(st) if !st.success() => errors.push(format!("rank {rank}: worker exited with {st}")),
                Err(e) => errors.push(format!("rank {rank}: {e}")),
                _ => {}
            }
        }
        errors
    }
}

/// Run `plan` on this host: `exe` + `prefix` re-runs this command (`nccom-test`, or
/// `neuron-vfio nccom-test`), `args` is the user's command line.
pub fn run(plan: &Plan, exe: &Path, prefix: &[OsString], args: &[OsString]) -> Result<Outcome, LaunchError> {
    let shapes = shapes(plan);
    let device = device()?;
    let algorithm = algorithm(&device);
    let job = job_id();
    let (tx, rx) = mpsc::channel::<Event>();
    let mut workers = Workers::start(exe, prefix, args, job, &device, 0..plan.ranks, &tx)?;
    drop(tx);
    let (rows, mut errors) = collect(plan, &shapes, &rx, &algorithm, &mut || workers.stop());
    let exits = workers.wait();
    // A worker stopped because another failed is not an error of its own.
    if errors.is_empty() {
        errors = exits;
    }
    if !rows.is_empty() {
        println!("{}", report::avg_line(plan, &rows));
    }
    Ok(Outcome { rows, errors, device, algorithm })
}

/// How long the other workers may still report after a failure.
pub const GRACE: Duration = Duration::from_secs(2);

/// The merge: prints the header, then each row once every rank reported its size (with the
/// failed checks under it); after a failure the others get [`GRACE`] to report the row they
/// were running, then `stop` is called. Returns the rows and every failure, each naming its
/// rank.
pub fn collect(
    plan: &Plan,
    shapes: &[data::Shape],
    rx: &mpsc::Receiver<Event>,
    algorithm: &str,
    stop: &mut dyn FnMut(),
) -> (Vec<Row>, Vec<String>) {
    println!("{}", report::header(plan));
    let mut got: Vec<HashMap<usize, Value>> = vec![HashMap::new(); shapes.len()];
    let mut next = 0;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    let mut open = vec![true; plan.ranks];
    let mut deadline: Option<Instant> = None;
    while open.iter().any(|&o| o) {
        let msg = match deadline {
            None => rx.recv().ok(),
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())).ok(),
        };
        let Some(ev) = msg else {
            stop();
            break;
        };
        let (rank, line) = match ev {
            Event::LauncherExited(st) => {
                // The node processes are gone: what is still in flight arrives within the
                // grace, then the ranks still open are missing.
                if open.iter().any(|&o| o) {
                    errors.push(format!("the node processes' launcher exited ({st})"));
                }
                deadline.get_or_insert(Instant::now() + GRACE);
                continue;
            }
            Event::Ended(rank) => {
                if let Some(o) = open.get_mut(rank) {
                    if std::mem::replace(o, false) && !got.iter().all(|g| g.contains_key(&rank)) && deadline.is_none() {
                        errors.push(format!("rank {rank}: worker ended before reporting every size"));
                        deadline = Some(Instant::now() + GRACE);
                    }
                }
                continue;
            }
            Event::Line(rank, line) => (rank, line),
        };
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            errors.push(format!("rank {rank}: {e}"));
            deadline.get_or_insert(Instant::now() + GRACE);
            continue;
        }
        let size = v.get("size").and_then(Value::as_u64);
        if let Some(k) = shapes.iter().position(|s| Some(s.size) == size) {
            got[k].insert(rank, v);
        }
        while next < shapes.len() && got[next].len() == plan.ranks {
            let row = merge(plan, shapes[next].size, &got[next]);
            println!("{}", report::line(plan, &row, algorithm));
            check_failures(plan, &row, &mut errors);
            rows.push(row);
            next += 1;
        }
    }
    let missing: Vec<usize> = (0..plan.ranks).filter(|&r| open[r]).collect();
    if !missing.is_empty() && errors.is_empty() {
        errors.push(format!("ranks {missing:?}: no report before the run was stopped"));
    }
    // A row some ranks did not finish: the checks of those that did.
    if let Some(k) = (next < shapes.len()).then_some(next) {
        let row = merge(plan, shapes[k].size, &got[k]);
        check_failures(plan, &row, &mut errors);
    }
    (rows, errors)
}

/// Each failed check of `row`, printed under it and kept, naming its rank.
fn check_failures(plan: &Plan, row: &Row, errors: &mut Vec<String>) {
    for (r, m) in &row.failures {
        let e = format!("rank {r}: size {}: check {} failed: {m}", row.size, plan.check.map_or("", |c| c.name()));
        println!("    {e}");
        errors.push(e);
    }
}

/// One row from every rank's report of it.
fn merge(plan: &Plan, size: u64, per: &HashMap<usize, Value>) -> Row {
    let mut times: Vec<u64> = Vec::new();
    let mut failures = Vec::new();
    for r in 0..plan.ranks {
        let Some(v) = per.get(&r) else { continue };
        let t: Vec<u64> = v
            .get("times_ns")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if times.len() < t.len() {
            times.resize(t.len(), 0);
        }
        for (acc, x) in times.iter_mut().zip(t) {
            *acc = (*acc).max(x);
        }
        if let Some(m) = v.get("check").and_then(Value::as_str).filter(|m| *m != "pass") {
            failures.push((r, m.to_string()));
        }
    }
    Row { size, count: size / plan.dtype.size() as u64, times_ns: times, failures, checked: plan.check.is_some() }
}
