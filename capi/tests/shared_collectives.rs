//! A fork-per-rank libnrt job on one shared simulated device: N rank processes, each with
//! `NEURON_VFIO_DEVICE=sim:shared:cayman` and `NEURON_RT_VISIBLE_CORES=rank` (the torchrun
//! pattern), `nrt_init` (each leases its core from the broker), `nrt_load_collectives` the same
//! all-reduce NEFF as rank R of N (global communicator bootstrapped over
//! `NEURON_RT_ROOT_COMM_ID`), execute, and compare the output bit for bit with the host
//! reference. All ranks are NCs of the same device, so the collective meets in that device's
//! hub — the device path — not in the transport between processes: the broker's count of the
//! device's collectives shows it. A 9th process asking for a held core fails `nrt_init`.
//!
//! The same job as a C program (`tests/c/shared_ranks.c`: the parent forks one process per
//! rank, each sets `NEURON_RT_VISIBLE_CORES=rank` before `nrt_init`), compiled against
//! `include/` and the built libnrt.so (skipped with a notice without a C compiler, unless
//! NEURON_VFIO_REQUIRE_CC=1).
//!
//! The test binary is its own rank process (`SHARED_COLL_CHILD=rank,size`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use broker::client::{Connect, Session};
use broker::protocol::{DeviceSpec, Role};
use fabric::reduce::{pattern, reference_all_reduce};
use fabric::{DType, ReduceOp};
use nrt::*;

const ELEMS: usize = 32;
const CHILD: &str = "SHARED_COLL_CHILD";
const RANKS: usize = 4;

fn inputs(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|r| pattern(r, ELEMS * 4, DType::F32, 0x5c)).collect()
}

fn neff(n: usize) -> Vec<u8> {
    let mut m = neff::builder::allreduce_model(1);
    m.graphs[0].replica_groups = vec![(0..n as u32).collect()];
    m.target = "cayman".into();
    m.build().unwrap_or_default()
}

fn rank_main(rank: usize, size: usize) -> Result<Vec<u8>, String> {
    let check = |what: &str, s: i32| if s == 0 { Ok(()) } else { Err(format!("{what} -> {s}")) };
    // SAFETY: the C API called as nrt.h documents, with valid pointers throughout.
    unsafe {
        check("nrt_init", nrt_init(0, std::ptr::null(), std::ptr::null()))?;
        let bytes = neff(size);
        let mut model = std::ptr::null_mut();
        check(
            "nrt_load_collectives",
            nrt_load_collectives(bytes.as_ptr().cast(), bytes.len(), -1, -1, rank as u32, size as u32, &mut model),
        )?;
        let input = &inputs(size)[rank];
        let (mut tin, mut tout) = (std::ptr::null_mut(), std::ptr::null_mut());
        let (nin, nout) = (c"input", c"output");
        check("alloc in", nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, ELEMS * 4, nin.as_ptr(), &mut tin))?;
        check("alloc out", nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, ELEMS * 4, nout.as_ptr(), &mut tout))?;
        check("write", nrt_tensor_write(tin, input.as_ptr().cast(), 0, input.len()))?;
        let (mut sin, mut sout) = (std::ptr::null_mut(), std::ptr::null_mut());
        check("set in", nrt_allocate_tensor_set(&mut sin))?;
        check("set out", nrt_allocate_tensor_set(&mut sout))?;
        check("add in", nrt_add_tensor_to_tensor_set(sin, nin.as_ptr(), tin))?;
        check("add out", nrt_add_tensor_to_tensor_set(sout, nout.as_ptr(), tout))?;
        check("nrt_execute", nrt_execute(model, sin, sout))?;
        let mut out = vec![0u8; ELEMS * 4];
        check("read", nrt_tensor_read(tout, out.as_mut_ptr().cast(), 0, out.len()))?;
        nrt_close();
        Ok(out)
    }
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[path = "support/libnrt.rs"]
mod libnrt;
use libnrt::lib_dir;

/// `tests/c/shared_ranks.c` compiled against include/ and libnrt.so (None without a C
/// compiler, unless NEURON_VFIO_REQUIRE_CC=1).
fn build_c() -> Result<Option<(PathBuf, PathBuf)>, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if !Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        if std::env::var("NEURON_VFIO_REQUIRE_CC").as_deref() == Ok("1") {
            return Err(format!("no C compiler (`{cc}`), and NEURON_VFIO_REQUIRE_CC=1"));
        }
        eprintln!("notice: no C compiler (`{cc} --version` failed; set CC): the C rank program is skipped");
        return Ok(None);
    }
    let lib = lib_dir().ok_or("libnrt.so not found next to the test binary")?;
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-shared_ranks");
    let o = Command::new(&cc)
        .args(["-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-I"])
        .arg(manifest().join("include"))
        .arg(manifest().join("tests/c/shared_ranks.c"))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lnrt")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cc} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(Some((out, lib)))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn child(spec: &str) -> ExitCode {
    if spec == "init" {
        // SAFETY: nrt_init with NULL version strings, as nrt.h allows.
        let s = unsafe { nrt_init(0, std::ptr::null(), std::ptr::null()) };
        println!("init={s}");
        return ExitCode::SUCCESS;
    }
    let mut it = spec.split(',').map(|x| x.parse::<usize>().unwrap_or(usize::MAX));
    let (rank, size) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    match rank_main(rank, size) {
        Ok(out) => {
            println!("out={}", hex(&out));
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("error={e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec);
    }
    let dir = std::env::temp_dir().join(format!("nv-shared-coll-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut cfg = broker::BrokerConfig::new(&socket);
    cfg.idle_exit = None;
    let b = broker::Broker::bind(cfg).expect("broker");
    let stop = b.stopper();
    let broker_thread = std::thread::spawn(move || b.run());
    let probe = Session::connect(&Connect { socket: socket.clone(), ..Connect::new(Role::Tool) }).expect("probe");
    probe.attach(DeviceSpec::Sim { arch: "cayman".into(), index: 0 }).expect("attach");
    let before = probe.query().expect("query")[0].collectives;

    let port = free_port();
    let exe = std::env::current_exe().expect("exe");
    let spawn = |rank: usize, cores: &str| {
        Command::new(&exe)
            .env(CHILD, format!("{rank},{RANKS}"))
            .env("NEURON_VFIO_DEVICE", "sim:shared:cayman")
            .env("NEURON_LOGICAL_NC_CONFIG", "1")
            .env("NEURON_VFIO_BROKER_SOCKET", &socket)
            .env("NEURON_RT_VISIBLE_CORES", cores)
            .env("NEURON_RT_ROOT_COMM_ID", format!("127.0.0.1:{port}"))
            .env("NEURON_RT_EXEC_TIMEOUT", "60")
            .env("FI_PROVIDER", "tcp")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rank process")
    };
    let ranks: Vec<_> = (0..RANKS).map(|r| spawn(r, &r.to_string())).collect();
    let ins = inputs(RANKS);
    let parts: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    let want = reference_all_reduce(&parts, DType::F32, ReduceOp::Add).expect("reference");
    let mut failed = false;
    for (r, c) in ranks.into_iter().enumerate() {
        let o = c.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let got = stdout.lines().find_map(|l| l.strip_prefix("out=")).map(str::to_string);
        if got.as_deref() != Some(hex(&want).as_str()) {
            eprintln!("rank {r}: {stdout}\n{}", String::from_utf8_lossy(&o.stderr));
            failed = true;
        }
    }
    let after = probe.query().expect("query")[0].collectives;
    println!("device-path collectives on the shared device: {} (Rust rank processes: {RANKS})", after - before);
    if after < before + 1 {
        eprintln!("the collective did not meet in the shared device's hub");
        failed = true;
    }

    // The C program: fork per rank.
    match build_c() {
        Err(e) => {
            eprintln!("{e}");
            failed = true;
        }
        Ok(None) => {}
        Ok(Some((prog, lib))) => {
            let files = dir.join("c");
            let _ = std::fs::create_dir_all(&files);
            let (nf, inf, wf) = (files.join("allreduce.neff"), files.join("inputs.bin"), files.join("want.bin"));
            std::fs::write(&nf, neff(RANKS)).expect("neff");
            std::fs::write(&inf, ins.concat()).expect("inputs");
            std::fs::write(&wf, &want).expect("expected");
            let o = Command::new(&prog)
                .args([&nf, &inf, &wf])
                .arg(RANKS.to_string())
                .env("LD_LIBRARY_PATH", &lib)
                .env("NEURON_VFIO_DEVICE", "sim:shared:cayman")
                .env("NEURON_LOGICAL_NC_CONFIG", "1")
                .env("NEURON_VFIO_BROKER_SOCKET", &socket)
                .env("NEURON_RT_ROOT_COMM_ID", format!("127.0.0.1:{}", free_port()))
                .env("NEURON_RT_EXEC_TIMEOUT", "60")
                .env("FI_PROVIDER", "tcp")
                .env_remove("NEURON_RT_VISIBLE_CORES")
                .output()
                .expect("run the C program");
            let stdout = String::from_utf8_lossy(&o.stdout);
            if !o.status.success() || !stdout.trim_end().ends_with("ALL OK") {
                eprintln!("C rank program:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
                failed = true;
            }
            let c_after = probe.query().expect("query")[0].collectives;
            println!("device-path collectives on the shared device: {} (C fork-per-rank program)", c_after - after);
            if c_after < after + 1 {
                eprintln!("the C program's collective did not meet in the shared device's hub");
                failed = true;
            }
        }
    }

    // A process asking for a core another holds (part of it): nrt_init fails as libnrt's does (NRT_FAILURE,
    // its log line), and our line names the holder.
    let holder = Session::connect(&Connect { socket: socket.clone(), ..Connect::new(Role::Runtime) }).expect("holder");
    let d = holder.attach(DeviceSpec::Sim { arch: "cayman".into(), index: 0 }).expect("attach").device;
    // The holder leases physical core 4 (LNC=1); the process at Trn2's default LNC=2 asking for
    // logical core 2 (physical 4-5) is refused: a logical core is free only whole.
    holder.lease(d, broker::protocol::Want::Range { first: 4, count: 1 }).expect("lease");
    let o = Command::new(&exe)
        .env(CHILD, "init")
        .env("NEURON_VFIO_DEVICE", "sim:shared:cayman")
        .env("NEURON_VFIO_BROKER_SOCKET", &socket)
        .env("NEURON_RT_VISIBLE_CORES", "2")
        .output()
        .expect("init process");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !out.contains("init=1")
        || !err.contains("NeuronCore(s) not available - Requested:nc2-nc2 Available:")
        || !err.contains(&format!("held by process {}", std::process::id()))
    {
        eprintln!("a held core was not refused as libnrt refuses it:\n{out}\n{err}");
        failed = true;
    }
    drop(holder);
    drop(probe);
    stop.stop();
    let _ = broker_thread.join();
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        ExitCode::FAILURE
    } else {
        println!("shared_collectives: {RANKS} rank processes on one shared cayman, bit-exact, device path");
        ExitCode::SUCCESS
    }
}
