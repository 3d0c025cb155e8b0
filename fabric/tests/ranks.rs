//! Rank processes over libfabric's tcp provider on loopback: 2 and 4 ranks run every op ×
//! dtype × a size sweep against the host reference, then a rank is killed mid-run and the
//! survivors must fail with NRT 1206/1200 within the timeout.
//!
//! `harness = false`: the binary is both the driver (no environment) and a rank (environment
//! `FABRIC_TEST_RANK`, …, set by the driver when it re-executes itself).

use std::net::TcpListener;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use fabric::bootstrap::RankSpec;
use fabric::coll::CollConfig;
use fabric::reduce::{self, segment, DType, ReduceOp};
use fabric::{FabricError, NRT_EXEC_HW_ERR_COLLECTIVES, NRT_NETWORK_PROXY_FAILURE};

const TIMEOUT: Duration = Duration::from_secs(3);
/// Small (direct), unaligned to the ring partition, one chunk, several pipelined chunks.
const SIZES: [usize; 5] = [4, 2 * 7 * 3, 12 << 10, 100 << 10, 300 << 10];

/// `FABRIC_TEST_LOG=1`: small messages take Bruck's log-round gather at any rank count.
fn cfg() -> CollConfig {
    let log_min_ranks = if env("FABRIC_TEST_LOG") == Some(1) { 2 } else { CollConfig::default().log_min_ranks };
    CollConfig { chunk_bytes: 64 << 10, direct_max_bytes: 16 << 10, log_min_ranks }
}

fn env(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

fn sweep(c: &mut fabric::Communicator<fabric::ofi::OfiTransport>) -> Result<usize, String> {
    let (r, n) = (c.rank(), c.size());
    let mut checked = 0;
    for dt in DType::ALL {
        for &bytes in &SIZES {
            let len = bytes / dt.size() * dt.size();
            let inputs: Vec<Vec<u8>> = (0..n).map(|k| reduce::pattern(k, len, dt, len as u64)).collect();
            let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            for op in ReduceOp::ALL {
                let mut buf = inputs[r].clone();
                c.all_reduce(&mut buf, dt, op).map_err(|e| e.to_string())?;
                let want = reduce::reference_all_reduce(&refs, dt, op).map_err(|e| e.to_string())?;
                if buf != want {
                    return Err(format!("all-reduce {dt:?} {op:?} {len} B differs"));
                }
                let seg = segment(len / dt.size(), n, r);
                let mut out = vec![0u8; seg.len() * dt.size()];
                c.reduce_scatter(&inputs[r], &mut out, dt, op).map_err(|e| e.to_string())?;
                if out != reduce::reference_reduce_scatter(&refs, dt, op, r).map_err(|e| e.to_string())? {
                    return Err(format!("reduce-scatter {dt:?} {op:?} {len} B differs"));
                }
                checked += 2;
            }
            let mut out = vec![0u8; len * n];
            c.all_gather(&inputs[r], &mut out).map_err(|e| e.to_string())?;
            if out != reduce::reference_all_gather(&refs) {
                return Err(format!("all-gather {len} B differs"));
            }
            checked += 1;
        }
    }
    // Point-to-point around the ring, 200 KiB in several chunks.
    let msg = reduce::pattern(r, 200 << 10, DType::I32, 7);
    let mut got = vec![0u8; msg.len()];
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    if r % 2 == 0 {
        c.send(next, &msg).map_err(|e| e.to_string())?;
        c.recv(prev, &mut got).map_err(|e| e.to_string())?;
    } else {
        c.recv(prev, &mut got).map_err(|e| e.to_string())?;
        c.send(next, &msg).map_err(|e| e.to_string())?;
    }
    if got != reduce::pattern(prev, 200 << 10, DType::I32, 7) {
        return Err("send/recv differs".into());
    }
    // One exchange round: rank r sends rank d `(r + 2d) × 50 KiB + r` bytes (several chunks,
    // none to itself), each length checked by the transport's completion length.
    let len = |s: usize, d: usize| (s + 2 * d) * (50 << 10) + s;
    let out: Vec<(usize, Vec<u8>)> =
        (0..n).filter(|&d| d != r).map(|d| (d, reduce::pattern(r * n + d, len(r, d), DType::U8, 3))).collect();
    let mut ins: Vec<(usize, Vec<u8>)> = (0..n).filter(|&s| s != r).map(|s| (s, vec![0u8; len(s, r)])).collect();
    {
        let sends: Vec<(usize, &[u8])> = out.iter().map(|(d, b)| (*d, &b[..])).collect();
        let mut recvs: Vec<(usize, &mut [u8])> = ins.iter_mut().map(|(s, b)| (*s, &mut b[..])).collect();
        c.exchange(&sends, &mut recvs).map_err(|e| e.to_string())?;
    }
    for (s, b) in &ins {
        if *b != reduce::pattern(s * n + r, len(*s, r), DType::U8, 3) {
            return Err(format!("exchange from rank {s} differs"));
        }
    }
    Ok(checked + 2)
}

fn rank_main(rank: usize, size: usize, root: &str, kill: Option<usize>) -> ExitCode {
    let joined = fabric::ofi::join(root, RankSpec { rank, size }, TIMEOUT, cfg());
    let (mut c, _oob) = match joined {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rank {rank}: join: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(victim) = kill else {
        return match sweep(&mut c) {
            Ok(k) => {
                let lib = fabric::ofi::dl::api().map(|a| format!("libfabric {} from {}", a.version_string(), a.path));
                println!("rank {rank}: {k} checks ok ({})", lib.unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rank {rank}: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let mut buf = reduce::pattern(rank, 1 << 20, DType::F32, 1);
    if let Err(e) = c.all_reduce(&mut buf, DType::F32, ReduceOp::Add) {
        eprintln!("rank {rank}: warm-up all-reduce failed: {e}");
        return ExitCode::FAILURE;
    }
    if rank == victim {
        // SAFETY: raising SIGKILL on this process: it ends here, abruptly.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    let t0 = Instant::now();
    let mut res: Result<(), FabricError> = Ok(());
    for _ in 0..50 {
        res = c.all_reduce(&mut buf, DType::F32, ReduceOp::Add);
        if res.is_err() {
            break;
        }
    }
    let took = t0.elapsed();
    match res {
        Err(e) if [NRT_NETWORK_PROXY_FAILURE, NRT_EXEC_HW_ERR_COLLECTIVES].contains(&e.status_code()) => {
            println!("rank {rank}: failed with {} after {took:?}: {e}", e.status_code());
            if took > TIMEOUT * 2 + Duration::from_secs(1) {
                eprintln!("rank {rank}: failure took {took:?}, timeout {TIMEOUT:?}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {rank}: wrong failure {}: {e}", e.status_code());
            ExitCode::FAILURE
        }
        Ok(()) => {
            eprintln!("rank {rank}: all-reduces succeeded although rank {victim} is dead");
            ExitCode::FAILURE
        }
    }
}

/// Runs `n` ranks; returns each rank's exit status (None: killed by a signal).
fn launch(n: usize, kill: Option<usize>) -> Result<Vec<Option<i32>>, String> {
    launch_with(n, kill, false, None)
}

/// `lib`: the ranks' `NEURON_VFIO_LIBFABRIC`.
fn launch_with(n: usize, kill: Option<usize>, log: bool, lib: Option<&str>) -> Result<Vec<Option<i32>>, String> {
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut kids = Vec::new();
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.env("FABRIC_TEST_RANK", r.to_string())
            .env("FABRIC_TEST_SIZE", n.to_string())
            .env("FABRIC_TEST_ROOT", format!("127.0.0.1:{port}"))
            .env("FI_PROVIDER", "tcp")
            .env("FABRIC_TEST_LOG", if log { "1" } else { "0" });
        if let Some(k) = kill {
            cmd.env("FABRIC_TEST_KILL", k.to_string());
        }
        if let Some(l) = lib {
            cmd.env(fabric::ofi::dl::LIBRARY_VAR, l);
        }
        kids.push(cmd.spawn().map_err(|e| e.to_string())?);
    }
    let mut out = Vec::new();
    for mut k in kids {
        out.push(k.wait().map_err(|e| e.to_string())?.code());
    }
    Ok(out)
}

fn main() -> ExitCode {
    if let (Some(rank), Some(size), Ok(root)) =
        (env("FABRIC_TEST_RANK"), env("FABRIC_TEST_SIZE"), std::env::var("FABRIC_TEST_ROOT"))
    {
        return rank_main(rank, size, &root, env("FABRIC_TEST_KILL"));
    }
    let mut failed = 0;
    let mut check = |name: &str, got: Result<Vec<Option<i32>>, String>, want: &dyn Fn(usize, Option<i32>) -> bool| {
        let ok = got.as_ref().is_ok_and(|v| v.iter().enumerate().all(|(r, &c)| want(r, c)));
        println!("test {name} ... {} {got:?}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed += 1;
        }
    };
    let t0 = Instant::now();
    for n in [2, 3, 4] {
        check(&format!("sweep_{n}_ranks"), launch(n, None), &|_, c| c == Some(0));
    }
    for n in [3, 4] {
        check(&format!("sweep_{n}_ranks_log_rounds"), launch_with(n, None, true, None), &|_, c| c == Some(0));
    }
    // The distribution's libfabric (Debian's libfabric1, 1.17 on Debian 12) found by the dynamic
    // loader alone: what a machine without scripts/fabric/setup.sh runs on.
    let system = Command::new("ldconfig").arg("-p").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if system.as_deref().is_ok_and(|s| s.contains("libfabric.so.1 ")) {
        check("sweep_4_ranks_system_libfabric", launch_with(4, None, false, Some("libfabric.so.1")), &|_, c| {
            c == Some(0)
        });
    } else if std::env::var("NEURON_VFIO_REQUIRE_FABRIC").as_deref() == Ok("1") {
        check("sweep_4_ranks_system_libfabric", Err("no libfabric.so.1 in the loader's cache".into()), &|_, _| false);
    } else {
        println!("NOTICE: no system libfabric.so.1 (apt-get install libfabric1): sweep on it skipped");
    }
    for (n, victim) in [(2, 1), (4, 2)] {
        check(&format!("kill_rank_{victim}_of_{n}"), launch(n, Some(victim)), &|r, c| {
            if r == victim {
                c.is_none()
            } else {
                c == Some(0)
            }
        });
    }
    println!("ranks: {} failed, {:?}", failed, t0.elapsed());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
