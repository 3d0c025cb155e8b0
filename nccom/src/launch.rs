//! The launcher: starts one worker process per rank (this program again, with the same command
//! line and `--worker RANK JOB`), merges their reports into the table as each size completes,
//! and stops every worker when one fails.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
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
    #[error("{0}")]
    Unsupported(#[from] crate::ops::Unsupported),
    #[error("{DEVICE_VAR}={0}: a private simulator lives in one process; workers share `sim:shared[:ARCH]`")]
    PrivateSim(String),
    #[error("device: {0}")]
    Select(#[from] select::SelectError),
    #[error("starting worker {rank}: {source}")]
    Spawn { rank: usize, source: std::io::Error },
    #[error("{FAULT_RANK_VAR}={0}: not a rank")]
    FaultRank(String),
}

/// What a run printed and found.
pub struct Outcome {
    pub rows: Vec<Row>,
    /// Every failure, each naming its rank.
    pub errors: Vec<String>,
    pub device: String,
    pub algorithm: String,
}

/// The device the workers share: `NEURON_VFIO_DEVICE` when set, else the first Neuron device
/// on vfio-pci, else a shared simulated cayman.
fn device() -> Result<String, LaunchError> {
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

fn job_id() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (u64::from(std::process::id()) << 20) ^ (t as u64)
}

fn stop(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
    }
}

/// Run `plan`: `exe` + `prefix` re-runs this command (`nccom-test`, or `neuron-vfio
/// nccom-test`), `args` is the user's command line.
pub fn run(plan: &Plan, exe: &std::path::Path, prefix: &[OsString], args: &[OsString]) -> Result<Outcome, LaunchError> {
    // Every row's shape first: an operation or type the engine lacks is refused before any
    // worker starts.
    let mut shapes = Vec::new();
    for &s in &plan.sizes {
        match data::shape(plan.op, plan.dtype, plan.ranks, s)? {
            Some(sh) => shapes.push(sh),
            None => eprintln!(
                "nccom-test: size {s}: rounds to 0 bytes for {} {} over {} ranks; skipped",
                plan.op.name(),
                plan.dtype.name(),
                plan.ranks
            ),
        }
    }
    let device = device()?;
    let algorithm = if device.starts_with("sim") { "sim-hub" } else { "device" }.to_string();
    let fault_rank = match std::env::var(FAULT_RANK_VAR) {
        Ok(v) => Some(v.trim().parse::<usize>().map_err(|_| LaunchError::FaultRank(v))?),
        Err(_) => None,
    };
    let job = job_id();
    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let mut children = Vec::new();
    for rank in 0..plan.ranks {
        let mut c = Command::new(exe);
        c.args(prefix).args(args).arg("--worker").arg(rank.to_string()).arg(job.to_string());
        c.env(DEVICE_VAR, &device).stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
        if fault_rank.is_some_and(|f| f != rank) {
            c.env_remove(FAULT_VAR);
        }
        let mut child = match c.spawn() {
            Ok(ch) => ch,
            Err(source) => {
                stop(&mut children);
                return Err(LaunchError::Spawn { rank, source });
            }
        };
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines() {
                    match l {
                        Ok(l) => {
                            if tx.send((rank, Some(l))).is_err() {
                                return;
                            }
                        }
                        Err(_) => break,
                    }
                }
                let _ = tx.send((rank, None));
            });
        }
        children.push((rank, child));
    }
    drop(tx);
    println!("{}", report::header(plan));
    let mut got: Vec<HashMap<usize, Value>> = vec![HashMap::new(); shapes.len()];
    let mut next = 0;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    let mut open = plan.ranks;
    // After a failure the others get a moment to report the row they were running (a
    // damaged contribution shows in their checks), then they are stopped.
    let mut deadline: Option<Instant> = None;
    while open > 0 {
        let msg = match deadline {
            None => rx.recv().ok(),
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())).ok(),
        };
        let Some((rank, line)) = msg else {
            stop(&mut children);
            break;
        };
        let Some(line) = line else {
            open -= 1;
            let done = got.iter().all(|g| g.contains_key(&rank));
            if !done && deadline.is_none() {
                errors.push(format!("rank {rank}: worker ended before reporting every size"));
                deadline = Some(Instant::now() + GRACE);
            }
            continue;
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
            println!("{}", report::line(plan, &row, &algorithm));
            check_failures(plan, &row, &mut errors);
            rows.push(row);
            next += 1;
        }
    }
    // A row some ranks did not finish: the checks of those that did.
    if let Some(k) = (next < shapes.len()).then_some(next) {
        let row = merge(plan, shapes[k].size, &got[k]);
        check_failures(plan, &row, &mut errors);
    }
    for (rank, c) in children.iter_mut() {
        match c.wait() {
            // A worker stopped because another failed is not an error of its own.
            Ok(st) if !st.success() && errors.is_empty() => {
                errors.push(format!("rank {rank}: worker exited with {st}"))
            }
            Err(e) => errors.push(format!("rank {rank}: {e}")),
            _ => {}
        }
    }
    if !rows.is_empty() {
        println!("{}", report::avg_line(plan, &rows));
    }
    Ok(Outcome { rows, errors, device, algorithm })
}

/// How long the other workers may still report after a failure.
const GRACE: Duration = Duration::from_secs(2);

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
