//! The real device host process (`neuron-vfio sim-host`, hidden): started by
//! `sim_serve::host::spawn` from a process that then exits, it lives on in a session of its
//! own, serves two clients' data paths to one device, ends one on request, and exits (removing
//! its socket) after the last connection ends.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sim_serve::host::{self, HostConfig};
use sim_serve::ConnOptions;
use vfio::user::{UserOptions, VfioUserPlatform};

const BIN: &str = env!("CARGO_BIN_EXE_neuron-vfio");
const HBM: u64 = 1 << 28;
/// Set for the child run of [`spawner`]: the socket it starts the host on.
const SPAWN_ENV: &str = "NV_SIM_HOST_TEST_SOCKET";

/// Not a test by itself (passes at once without [`SPAWN_ENV`]): the body of the process that
/// spawns the host and exits, run by the test below as a child of its own.
#[test]
fn spawner() {
    let Some(socket) = std::env::var_os(SPAWN_ENV) else { return };
    let mut cfg = HostConfig::new(&csr_maps::CAYMAN, PathBuf::from(socket));
    cfg.hbm_bytes = Some(HBM);
    cfg.linger = Duration::from_millis(300);
    host::spawn(Path::new(BIN), &cfg).unwrap();
}

/// Fields of `/proc/PID/stat` after the command: state, ppid, pgrp, session, …
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The pid of the `sim-host` process serving `socket` (not the `--spawn` starter).
fn host_pid(socket: &Path) -> Option<u32> {
    let want = socket.to_str()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let has = |a: &str| args.contains(&a.as_bytes());
        (has("sim-host") && has(want) && !has("--spawn") && proc_stat(pid)?.first()? != "Z").then_some(pid)
    })
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn window(k: u64) -> Range<u64> {
    (1 << 36) * (k + 1)..(1 << 36) * (k + 2)
}

fn client(socket: &Path, k: u64, ncs: Range<usize>) -> (u64, Arc<VfioUserPlatform>, hal::Device) {
    let (id, stream) = host::connect(socket, &ConnOptions { iova_window: window(k), ncs: ncs.clone() }).unwrap();
    let opts = UserOptions {
        iova_window: window(k),
        irq_vectors: ncs.clone().map(|n| n as u32).collect(),
        modeled_writes: true,
        location: format!("sim:shared:cayman:{k}"),
        posted_writes: true,
        fast_path: false,
    };
    let p = Arc::new(VfioUserPlatform::from_stream(stream, opts).unwrap());
    let dopts = hal::DeviceOptions {
        poll: hal::PollTiming::fast(),
        hbm_limit: Some(HBM),
        owned_ncs: Some(ncs),
        ..Default::default()
    };
    let d = hal::Device::open(p.clone(), dopts).unwrap();
    d.init().unwrap();
    (id, p, d)
}

#[test]
fn the_detached_host_outlives_its_spawner_and_exits_after_the_last_connection() {
    let dir = std::env::temp_dir().join(format!("nv-sim-host-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("host.sock");

    // Spawn from a child process that exits once the host answers.
    let me = std::env::current_exe().unwrap();
    let status = Command::new(me)
        .args(["spawner", "--exact", "--test-threads=1", "--quiet"])
        .env(SPAWN_ENV, &socket)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "spawner: {status}");
    let pid = host_pid(&socket).expect("the sim-host process");
    let stat = proc_stat(pid).unwrap();
    let own = proc_stat(std::process::id()).unwrap();
    assert_eq!(stat[3], pid.to_string(), "the host leads a session of its own");
    assert_ne!(stat[3], own[3]);

    // Serves: two clients, one device.
    let (ida, pa, da) = client(&socket, 0, 0..1);
    let (_idb, pb, db) = client(&socket, 1, 2..3);
    let buf = da.alloc_device(0, 4096, 4096).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    da.write_device(0, buf.addr(), &data).unwrap();
    let mut out = vec![0u8; 4096];
    db.read_device(2, buf.addr(), &mut out).unwrap();
    assert_eq!(out, data, "B reads what A wrote");
    let before = host::stats(&socket).unwrap().iommu_mappings;
    assert!(before >= 2, "{before}");
    let r = host::control(&socket, "stats").unwrap();
    assert!(r.starts_with("SimStats {"), "{r}");
    assert!(host::control(&socket, "bogus@nc0").unwrap().starts_with("error: "));

    // End A: its mappings are gone, B works on.
    host::end(&socket, ida).unwrap();
    let after = host::stats(&socket).unwrap().iommu_mappings;
    assert!(after < before, "{after} < {before}");
    db.write_device(2, buf.addr(), &data[..64]).unwrap();
    db.read_device(2, buf.addr(), &mut out[..64]).unwrap();
    drop((buf, da, pa));

    // The last connection ends: the host exits (linger 300 ms) and removes its socket.
    drop((db, pb));
    wait_until("the host exits", || host_pid(&socket).is_none());
    wait_until("its socket is removed", || !socket.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
