//! `neuron-vfio bench collectives`: collective bandwidth between rank processes over
//! libfabric, in the manner of nccom-test / nccl-tests.
//!
//! - `--ranks N` alone launches N local rank processes (this binary re-executed with
//!   `--rank R --ranks N --root 127.0.0.1:PORT`) and merges their results;
//! - `--rank R --ranks N --root HOST:PORT` (or rank/size from the launcher's environment and
//!   the root from `NEURON_RT_ROOT_COMM_ID`) joins a run started by any launcher; rank 0
//!   prints the results.
//!
//! Figures: `bytes` is the buffer size per rank as in nccl-tests (all-reduce: the buffer;
//! all-gather: the output; reduce-scatter: the input); `algbw = bytes / time`;
//! `busbw = algbw * 2(n-1)/n` for all-reduce and `algbw * (n-1)/n` for all-gather and
//! reduce-scatter; time is the slowest rank's mean over `--iters`. `correct` compares every
//! rank's output with the host reference (fabric::reduce). `socket_gbps` is a plain TCP socket
//! copy of `bytes` around the same ring, measured in the same run with the same statistic
//! (one warm-up, the slowest rank's mean over `--iters`), and `ratio` is `busbw / socket_gbps`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use fabric::bootstrap::{self, Oob, RankSpec};
use fabric::coll::CollConfig;
use fabric::ofi::OfiTransport;
use fabric::reduce::{self, segment, DType, ReduceOp};
use fabric::{Communicator, FabricError};
use serde_json::{json, Value};

use crate::report::{CliError, NrtStatus};

/// The collective to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CollOp {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl CollOp {
    fn name(self) -> &'static str {
        match self {
            CollOp::AllReduce => "all-reduce",
            CollOp::AllGather => "all-gather",
            CollOp::ReduceScatter => "reduce-scatter",
        }
    }
    /// busbw / algbw (nccl-tests' factors).
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            CollOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollOp::AllGather | CollOp::ReduceScatter => (n - 1.0) / n,
        }
    }
}

#[derive(Args, Clone, Debug)]
pub struct CollectivesArgs {
    /// Number of ranks: alone, launch that many local rank processes; with --rank (or a
    /// launcher's environment), the size of the job to join.
    #[arg(long)]
    ranks: Option<usize>,
    /// This process's rank (default: OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or RANK).
    #[arg(long)]
    rank: Option<usize>,
    /// host:port of rank 0's rendezvous (default: NEURON_RT_ROOT_COMM_ID).
    #[arg(long)]
    root: Option<String>,
    /// Collective.
    #[arg(long, value_enum, default_value = "all-reduce")]
    op: CollOp,
    /// Element type: fp32, bf16, fp16, int32.
    #[arg(long, default_value = "fp32")]
    dtype: String,
    /// Reduction: add, max, min.
    #[arg(long, default_value = "add")]
    reduce: String,
    /// Buffer sizes per rank, comma-separated, with K/M/G suffixes (binary).
    #[arg(long, default_value = "4K,64K,1M,8M")]
    sizes: String,
    /// Timed iterations per size (after one warm-up).
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// This rank exits abruptly (SIGKILL) in the first size's timed loop; the others must
    /// report NRT_NETWORK_PROXY_FAILURE (1206) or NRT_EXEC_HW_ERR_COLLECTIVES (1200).
    #[arg(long)]
    kill_rank: Option<usize>,
    /// Seconds without progress after which a collective (or the rendezvous) fails (default:
    /// three quarters of NEURON_RT_EXEC_TIMEOUT, libnrt's default 600 s when unset — as
    /// libnrt's own collectives). A rank whose process is gone is noticed sooner, in about a
    /// second (the out-of-band links close).
    #[arg(long)]
    timeout: Option<f64>,
    /// Pipeline chunk of the ring algorithms (K/M suffixes).
    #[arg(long, default_value = "512K")]
    chunk: String,
    /// Set by the local launcher on the processes it starts: print this rank's rows.
    #[arg(long, hide = true)]
    child: bool,
}

fn parse_size(s: &str) -> Result<usize, CliError> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(mul))
        .ok_or_else(|| CliError::invalid(format!("size {s:?} is not a number with an optional K/M/G suffix")))
}

fn fab_err(e: &FabricError) -> CliError {
    CliError::new(e.status(), e.to_string())
}

/// Runs the command.
pub fn run(a: CollectivesArgs, json: bool) -> Result<(), CliError> {
    let dt = DType::parse(&a.dtype).ok_or_else(|| CliError::invalid(format!("unknown dtype {:?}", a.dtype)))?;
    let rop =
        ReduceOp::parse(&a.reduce).ok_or_else(|| CliError::invalid(format!("unknown reduction {:?}", a.reduce)))?;
    let sizes = a.sizes.split(',').map(parse_size).collect::<Result<Vec<_>, _>>()?;
    if sizes.is_empty() || a.iters == 0 || a.timeout.is_some_and(|t| !t.is_finite() || t <= 0.0) {
        return Err(CliError::invalid("need at least one size, --iters > 0 and --timeout > 0"));
    }
    let launcher_env = bootstrap::LAUNCHER_ENV.iter().any(|(r, _)| std::env::var_os(r).is_some());
    if a.rank.is_none() && !launcher_env {
        let n = a
            .ranks
            .ok_or_else(|| CliError::invalid("give --ranks N (local launch) or --rank R --ranks N --root HOST:PORT"))?;
        return launch(&a, n, json);
    }
    let spec = bootstrap::rank_from_env(a.rank, a.ranks).map_err(|e| fab_err(&e))?;
    let root = match &a.root {
        Some(r) => r.clone(),
        None => bootstrap::root_from_env().map_err(|e| fab_err(&e))?,
    };
    let rows = rank_run(&a, spec, &root, dt, rop, &sizes)?;
    if a.child || spec.rank == 0 {
        report(&rows, json);
    }
    verdict(&rows, a.kill_rank)
}

/// `--timeout`, else the transport timeout of NEURON_RT_EXEC_TIMEOUT (libnrt's default when
/// unset).
fn timeout_of(a: &CollectivesArgs) -> Result<Duration, CliError> {
    if let Some(t) = a.timeout {
        return Ok(Duration::from_secs_f64(t));
    }
    let secs = match std::env::var(runtime::env::EXEC_TIMEOUT_VAR) {
        Ok(v) => runtime::env::parse_exec_timeout(&v).map_err(|e| CliError::invalid(e.to_string()))?,
        Err(_) => runtime::env::DEFAULT_EXEC_TIMEOUT_SECS,
    };
    Ok(fabric::transport_timeout(secs))
}

/// Local launch: N rank processes of this binary on loopback.
fn launch(a: &CollectivesArgs, n: usize, json: bool) -> Result<(), CliError> {
    if n == 0 || n > fabric::coll::MAX_RANKS {
        return Err(CliError::invalid(format!("--ranks {n} is not in 1..={}", fabric::coll::MAX_RANKS)));
    }
    if a.kill_rank.is_some_and(|k| k >= n) {
        return Err(CliError::invalid("--kill-rank is not a rank of the run"));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| CliError::failure(format!("no free port: {e}")))?
        .port();
    let exe = std::env::current_exe().map_err(|e| CliError::failure(format!("current_exe: {e}")))?;
    let mut kids = Vec::new();
    for r in 0..n {
        let mut c = Command::new(&exe);
        c.args(["--json", "bench", "collectives", "--child"])
            .args(["--rank", &r.to_string(), "--ranks", &n.to_string()])
            .args(["--root", &format!("127.0.0.1:{port}")])
            .args(["--op", a.op.name()])
            .args(["--dtype", &a.dtype, "--reduce", &a.reduce, "--sizes", &a.sizes, "--chunk", &a.chunk])
            .args(["--iters", &a.iters.to_string(), "--timeout", &timeout_of(a)?.as_secs_f64().to_string()])
            .stdout(Stdio::piped());
        if let Some(k) = a.kill_rank {
            c.args(["--kill-rank", &k.to_string()]);
        }
        kids.push(c.spawn().map_err(|e| CliError::failure(format!("cannot start rank {r}: {e}")))?);
    }
    let mut per_rank: Vec<Option<Vec<Value>>> = Vec::new();
    // What ranks that produced no rows said instead (their error, as JSON under --json).
    let mut said = Vec::new();
    for (r, k) in kids.into_iter().enumerate() {
        let out = k.wait_with_output().map_err(|e| CliError::failure(format!("rank wait: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = text.lines().next().unwrap_or_default();
        let rows = serde_json::from_str::<Vec<Value>>(first).ok();
        if rows.is_none() && a.kill_rank != Some(r) {
            said.push(format!("rank {r}: {}", text.trim()));
        }
        per_rank.push(rows);
    }
    let rows = merge(&per_rank);
    if rows.is_empty() {
        return Err(CliError::failure(format!("no rank reported results: {}", said.join("; "))));
    }
    report(&rows, json);
    if let Some(k) = a.kill_rank {
        // Every survivor must have failed (the merged rows show only the first failure).
        for (r, rank_rows) in per_rank.iter().enumerate().filter(|(r, _)| *r != k) {
            let fail = rank_rows.as_ref().and_then(|v| v.iter().find(|x| x["code"] != 0));
            match fail {
                Some(x) => eprintln!(
                    "bench collectives: rank {r}: {} after {:.3} s",
                    x["status"].as_str().unwrap_or(""),
                    x["failed_after_s"].as_f64().unwrap_or(f64::NAN)
                ),
                None => {
                    return Err(CliError::failure(format!("rank {k} was killed but rank {r} reported no failure")));
                }
            }
        }
    }
    verdict(&rows, a.kill_rank)
}

/// One row per (op, bytes) over the ranks that reported: correct only if every rank was, the
/// first failure's status, the slowest rank's bandwidth.
fn merge(per_rank: &[Option<Vec<Value>>]) -> Vec<Value> {
    let mut rows: Vec<Value> = Vec::new();
    for rank_rows in per_rank.iter().flatten() {
        for r in rank_rows {
            let key = (r["op"].clone(), r["bytes"].clone());
            match rows.iter_mut().find(|m| (m["op"].clone(), m["bytes"].clone()) == key) {
                None => rows.push(r.clone()),
                Some(m) => {
                    let ok = m["code"] == 0;
                    if ok && r["code"] != 0 {
                        for f in ["status", "code", "error", "failed_after_s"] {
                            m[f] = r[f].clone();
                        }
                    }
                    m["correct"] = json!(m["correct"].as_bool() == Some(true) && r["correct"].as_bool() == Some(true));
                    for f in ["algbw_gbps", "busbw_gbps", "socket_gbps"] {
                        if let (Some(x), Some(y)) = (m[f].as_f64(), r[f].as_f64()) {
                            m[f] = json!(x.min(y));
                        }
                    }
                    if let (Some(b), Some(s)) = (m["busbw_gbps"].as_f64(), m["socket_gbps"].as_f64()) {
                        m["ratio"] = json!(if s > 0.0 { b / s } else { 0.0 });
                    }
                }
            }
        }
    }
    rows.sort_by_key(|r| r["bytes"].as_u64().unwrap_or(0));
    rows
}

fn report(rows: &[Value], json: bool) {
    if json {
        println!("{}", Value::Array(rows.to_vec()));
        return;
    }
    println!(
        "{:>15} {:>12} {:>6} {:>11} {:>11} {:>11} {:>7} {:>8}  status",
        "op", "bytes", "ranks", "algbw GB/s", "busbw GB/s", "socket GB/s", "ratio", "correct"
    );
    for r in rows {
        let f = |k: &str| r[k].as_f64().map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{:>15} {:>12} {:>6} {:>11} {:>11} {:>11} {:>7} {:>8}  {}",
            r["op"].as_str().unwrap_or(""),
            r["bytes"].to_string(),
            r["ranks"].to_string(),
            f("algbw_gbps"),
            f("busbw_gbps"),
            f("socket_gbps"),
            f("ratio"),
            r["correct"].to_string(),
            r["status"].as_str().unwrap_or("")
        );
    }
}

/// The exit status: success only when every row succeeded with results equal to the host
/// reference. Any failed row fails the command with that row's status; with `--kill-rank`
/// the failure is the expected outcome when every row failed with 1206/1200 (the message says
/// so) and a plain NRT_FAILURE otherwise (no survivor noticed, or another status).
fn verdict(rows: &[Value], kill: Option<usize>) -> Result<(), CliError> {
    let failed: Vec<&Value> = rows.iter().filter(|r| r["code"] != 0).collect();
    if rows.iter().any(|r| r["code"] == 0 && r["correct"] != true) {
        return Err(CliError::failure("results differ from the host reference"));
    }
    let status_of = |r: &Value| {
        if r["code"] == 1200 {
            NrtStatus::ExecHwErrCollectives
        } else {
            NrtStatus::NetworkProxyFailure
        }
    };
    match kill {
        None => {
            if let Some(r) = failed.first() {
                return Err(CliError::new(status_of(r), format!("{} of {} B: {}", r["op"], r["bytes"], r["error"])));
            }
            if rows.is_empty() {
                return Err(CliError::failure("no results"));
            }
            Ok(())
        }
        Some(k) => {
            let Some(first) = failed.first() else {
                return Err(CliError::failure(format!("rank {k} was killed but no survivor reported a failure")));
            };
            if let Some(r) = failed.iter().find(|r| r["code"] != 1206 && r["code"] != 1200) {
                return Err(CliError::failure(format!("survivor failed with {} instead of 1206/1200", r["code"])));
            }
            Err(CliError::new(
                status_of(first),
                format!(
                    "rank {k} was killed: the survivors report {} (expected), after {}",
                    first["status"].as_str().unwrap_or(""),
                    first["failed_after_s"]
                ),
            ))
        }
    }
}

/// A ring of plain TCP connections next to the fabric: the baseline copy.
struct SocketRing {
    to_next: TcpStream,
    from_prev: TcpStream,
}

impl SocketRing {
    fn connect(oob: &mut Oob, timeout: Duration) -> Result<SocketRing, FabricError> {
        let RankSpec { rank, size } = oob.spec();
        let l = TcpListener::bind(SocketAddr::new(oob.local_ip(), 0)).map_err(|e| fabric_io("baseline listen", e))?;
        let me = l.local_addr().map_err(|e| fabric_io("baseline listen", e))?.to_string();
        let all = oob.allgather(me.as_bytes())?;
        let next_addr: SocketAddr = String::from_utf8_lossy(&all[(rank + 1) % size])
            .parse()
            .map_err(|_| FabricError::Bootstrap("bad baseline address".into()))?;
        let to_next = TcpStream::connect_timeout(&next_addr, timeout).map_err(|e| fabric_io("baseline connect", e))?;
        let (from_prev, _) = l.accept().map_err(|e| fabric_io("baseline accept", e))?;
        for s in [&to_next, &from_prev] {
            s.set_nodelay(true).map_err(|e| fabric_io("baseline", e))?;
            s.set_read_timeout(Some(timeout)).map_err(|e| fabric_io("baseline", e))?;
            s.set_write_timeout(Some(timeout)).map_err(|e| fabric_io("baseline", e))?;
        }
        Ok(SocketRing { to_next, from_prev })
    }

    /// Sends `data` to the next rank while receiving as many bytes from the previous one.
    fn copy(&mut self, data: &[u8], into: &mut [u8]) -> Result<Duration, FabricError> {
        let t0 = Instant::now();
        let to_next = &mut self.to_next;
        let from_prev = &mut self.from_prev;
        std::thread::scope(|s| {
            let w = s.spawn(move || to_next.write_all(data));
            let r = from_prev.read_exact(into);
            let w = w.join().unwrap_or_else(|_| Err(std::io::Error::other("writer panicked")));
            r.and(w)
        })
        .map_err(|e| fabric_io("baseline copy", e))?;
        Ok(t0.elapsed())
    }
}

fn fabric_io(what: &str, e: std::io::Error) -> FabricError {
    FabricError::Bootstrap(format!("{what}: {e}"))
}

fn row(op: CollOp, bytes: usize, n: usize) -> Value {
    json!({"op": op.name(), "bytes": bytes, "ranks": n, "algbw_gbps": null, "busbw_gbps": null,
           "correct": false, "status": "NRT_SUCCESS", "code": 0, "socket_gbps": null, "ratio": null})
}

fn fail_row(mut r: Value, e: &FabricError, after: Duration) -> Value {
    r["failed_after_s"] = json!(after.as_secs_f64());
    r["status"] = json!(e.status_name());
    r["code"] = json!(e.status_code());
    r["error"] = json!(e.to_string());
    r
}

/// One collective on this rank (all-reduce works on a copy of `input` in `out`).
fn one(
    c: &mut Communicator<OfiTransport>,
    op: CollOp,
    input: &[u8],
    out: &mut [u8],
    dt: DType,
    rop: ReduceOp,
) -> Result<(), FabricError> {
    match op {
        CollOp::AllReduce => {
            out.copy_from_slice(input);
            c.all_reduce(out, dt, rop)
        }
        CollOp::AllGather => c.all_gather(input, out),
        CollOp::ReduceScatter => c.reduce_scatter(input, out, dt, rop),
    }
}

fn rank_run(
    a: &CollectivesArgs,
    spec: RankSpec,
    root: &str,
    dt: DType,
    rop: ReduceOp,
    sizes: &[usize],
) -> Result<Vec<Value>, CliError> {
    let timeout = timeout_of(a)?;
    let cfg = CollConfig { chunk_bytes: parse_size(&a.chunk)?.max(1), ..CollConfig::default() };
    let (mut c, mut oob) = fabric::ofi::join(root, spec, timeout, cfg).map_err(|e| fab_err(&e))?;
    tracing::info!("bench collectives: rank {} of {} on {}", spec.rank, spec.size, c.transport().provider());
    let n = spec.size;
    let r = spec.rank;
    let mut ring = if n > 1 { Some(SocketRing::connect(&mut oob, timeout).map_err(|e| fab_err(&e))?) } else { None };
    let es = dt.size();
    let mut rows = Vec::new();
    for (si, &bytes) in sizes.iter().enumerate() {
        // Per-rank input and output of nccl-tests' `bytes`.
        let (in_len, out_len) = match a.op {
            CollOp::AllReduce => (bytes / es * es, bytes / es * es),
            CollOp::AllGather => (bytes / n / es * es, bytes / n / es * es * n),
            CollOp::ReduceScatter => {
                let count = bytes / es;
                (count * es, segment(count, n, r).len() * es)
            }
        };
        let mut rw = row(a.op, bytes, n);
        let inputs: Vec<Vec<u8>> = (0..n).map(|k| reduce::pattern(k, in_len, dt, bytes as u64)).collect();
        let mut out = vec![0u8; out_len];
        // Start of the step in progress (a failure reports the time since).
        let started = std::cell::Cell::new(Instant::now());
        let res = (|| -> Result<(f64, f64, bool), FabricError> {
            let socket_secs = match ring.as_mut() {
                Some(ring) => {
                    let mut sink = vec![0u8; bytes];
                    let src = vec![0x5au8; bytes];
                    // The same statistic as the collective's: one warm-up copy, then the
                    // mean of `iters` copies, the slowest rank's.
                    started.set(Instant::now());
                    oob.barrier()?;
                    ring.copy(&src, &mut sink)?;
                    oob.barrier()?;
                    let mut total = Duration::ZERO;
                    for _ in 0..a.iters {
                        total += ring.copy(&src, &mut sink)?;
                    }
                    let t = total.as_secs_f64() / a.iters as f64;
                    let all = oob.allgather(&t.to_le_bytes())?;
                    max_f64(&all)
                }
                None => 0.0,
            };
            started.set(Instant::now());
            one(&mut c, a.op, &inputs[r], &mut out, dt, rop)?;
            started.set(Instant::now());
            oob.barrier()?;
            let mut total = Duration::ZERO;
            for it in 0..a.iters {
                if si == 0 && it == 0 && a.kill_rank == Some(r) {
                    // SAFETY: raising SIGKILL on this process: the rank ends here, abruptly.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
                let t0 = Instant::now();
                started.set(t0);
                one(&mut c, a.op, &inputs[r], &mut out, dt, rop)?;
                total += t0.elapsed();
            }
            let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            let want = match a.op {
                CollOp::AllReduce => reduce::reference_all_reduce(&refs, dt, rop)?,
                CollOp::AllGather => reduce::reference_all_gather(&refs),
                CollOp::ReduceScatter => reduce::reference_reduce_scatter(&refs, dt, rop, r)?,
            };
            let mine = total.as_secs_f64() / a.iters as f64;
            let mut msg = mine.to_le_bytes().to_vec();
            msg.push(u8::from(out == want));
            let all = oob.allgather(&msg)?;
            let correct = all.iter().all(|m| m.get(8) == Some(&1));
            Ok((max_f64(&all), socket_secs, correct))
        })();
        match res {
            Ok((secs, socket_secs, correct)) => {
                let algbw = if secs > 0.0 { bytes as f64 / secs / 1e9 } else { 0.0 };
                let busbw = algbw * a.op.bus_factor(n);
                rw["algbw_gbps"] = json!(algbw);
                rw["busbw_gbps"] = json!(busbw);
                rw["correct"] = json!(correct);
                if socket_secs > 0.0 {
                    let s = bytes as f64 / socket_secs / 1e9;
                    rw["socket_gbps"] = json!(s);
                    rw["ratio"] = json!(busbw / s);
                }
                rows.push(rw);
            }
            Err(e) => {
                tracing::warn!("rank {r}: {} of {bytes} B failed: {e}", a.op.name());
                rows.push(fail_row(rw, &e, started.get().elapsed()));
                // The communicator is broken: the remaining sizes are not run.
                break;
            }
        }
    }
    Ok(rows)
}

/// The largest of little-endian f64s at the start of each entry.
fn max_f64(all: &[Vec<u8>]) -> f64 {
    all.iter()
        .filter_map(|m| m.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()))
        .map(f64::from_le_bytes)
        .fold(0.0, f64::max)
}
