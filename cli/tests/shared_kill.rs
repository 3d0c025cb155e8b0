//! Issue 29's cleanup acceptance on the simulator: 7 runtimes (threads of this process, each
//! its own broker client with one NC of a shared cayman) execute without pause while a
//! `neuron-vfio run` process on NC 7 is SIGKILLed mid-execution, 20 times. The neighbours see
//! no failure and exact outputs; NC 7 is leasable again after each kill (the time from
//! SIGKILL to a granted lease is printed); the broker's accounting (device memory granted,
//! IOVA windows, IOMMU mappings, processes) is back to its baseline at the end.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::client::{Connect, Session};
use broker::protocol::{DeviceSpec, Role, Want};
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};

const BIN: &str = env!("CARGO_BIN_EXE_neuron-vfio");
const KILLS: usize = 20;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// A runtime on core `nc` of the shared cayman, as `nrt_init` opens one.
fn open(nc: usize) -> (Runtime, select::Opened) {
    let spec = select::Spec::SimShared { arch: &csr_maps::CAYMAN, n: 1 };
    let opened =
        select::open_reserving(&spec, select::SimTiming::Inline, &select::Reserve::Cores(vec![nc]), Some(1)).unwrap();
    let own = opened.ownership(0).unwrap();
    let opts = hal::DeviceOptions {
        owned_ncs: Some(own.ncs),
        hbm_ranges: Some(own.hbm.into_iter().map(|(chan, addr, len)| hal::HbmRange { chan, addr, len }).collect()),
        ..Default::default()
    };
    let cfg = RuntimeConfig {
        visible_cores: opened.leased_cores(),
        lnc: Some(runtime::env::LncRequest::physical()),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new();
    rt.init_devices(vec![(opened.platforms[0].clone(), opts)], cfg).unwrap();
    (rt, opened)
}

/// The broker's accounting of the device: memory granted, IOVA windows, IOMMU mappings and the
/// processes with their cores and memory (not the count of collectives executed).
fn accounting(q: &[broker::protocol::DeviceInfo]) -> (u64, u32, u64, Vec<broker::protocol::ClientInfo>) {
    let d = &q[0];
    (d.hbm_granted, d.iova_windows, d.iommu_mappings, d.clients.clone())
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn sigkill_mid_execution_twenty_times_neighbours_unaffected() {
    let dir = std::env::temp_dir().join(format!("nv-shared-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    // This test binary's only test: the process environment names its broker.
    std::env::set_var("NEURON_VFIO_BROKER_SOCKET", &socket);
    let mut cfg = broker::BrokerConfig::new(&socket);
    cfg.idle_exit = None;
    // The device in its host process, as `neuron-vfio broker` runs it.
    cfg.sim_host = Some(env!("CARGO_BIN_EXE_neuron-vfio").into());
    let b = broker::Broker::bind(cfg).unwrap();
    let stop_broker = b.stopper();
    let broker_thread = std::thread::spawn(move || b.run().unwrap());

    // The probe: attached first, so its first view is the device with nobody else on it.
    let probe = Session::connect(&Connect { socket: socket.clone(), ..Connect::new(Role::Runtime) }).unwrap();
    let dev = probe.attach(DeviceSpec::Sim { arch: "cayman".into(), index: 0 }).unwrap().device;
    let pristine = probe.query().unwrap();

    let bytes = std::fs::read(root().join("examples/allreduce_1nc.neff")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let loaded = Arc::new(std::sync::Barrier::new(8));
    let neighbours: Vec<_> = (0..7)
        .map(|nc| {
            let (bytes, stop, loaded) = (bytes.clone(), stop.clone(), loaded.clone());
            std::thread::spawn(move || {
                let (rt, opened) = open(nc);
                let m = rt.load(&bytes, None, None).unwrap();
                let ti = rt.alloc_tensor("input", 128, nc % 2 == 0, 0).unwrap();
                let to = rt.alloc_tensor("output", 128, nc % 2 == 0, 0).unwrap();
                let mut ins = TensorSet::new();
                ins.add("input", ti.clone());
                let mut outs = TensorSet::new();
                outs.add("output", to.clone());
                loaded.wait();
                let mut failures = 0u64;
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let input: Vec<f32> =
                        (0..32).map(|i| (nc as u64 * 1000 + round % 1000) as f32 + i as f32).collect();
                    ti.write(0, &f32s(&input)).unwrap();
                    let (s, _) = rt.execute(&m, &ins, &outs).unwrap();
                    if s != NrtStatus::Success || to.to_vec().unwrap() != f32s(&input) {
                        failures += 1;
                    }
                    round += 1;
                }
                rt.unload(&m).unwrap();
                rt.close().unwrap();
                drop(opened);
                (failures, round)
            })
        })
        .collect();
    loaded.wait();
    let baseline = probe.query().unwrap();
    assert_eq!(baseline[0].clients.len(), 8);

    let mut leasable_ms = Vec::new();
    for k in 0..KILLS {
        let mut victim = Command::new(BIN)
            .current_dir(root())
            .env("NEURON_VFIO_BROKER_SOCKET", &socket)
            .env("NEURON_RT_VISIBLE_CORES", "7")
            // The LNC=1 example (cayman's default is 2), as the neighbours run it.
            .env("NEURON_LOGICAL_NC_CONFIG", "1")
            .args(["--device", "sim:shared:cayman", "run", "examples/allreduce_1nc.neff"])
            .args(["--input", "input=examples/input_32xf32.bin", "--repeat", "100000000", "--pause-before-exec"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(victim.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("loaded") {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "victim {k} ended before loading");
        }
        victim.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        // Mid-execution: it executes in a loop from here.
        std::thread::sleep(Duration::from_millis(5 + (k as u64 * 7) % 40));
        victim.kill().unwrap();
        let t0 = Instant::now();
        let _ = victim.wait();
        loop {
            match probe.lease(dev, Want::Range { first: 7, count: 1 }) {
                Ok(_) => break,
                Err(e) => {
                    assert!(t0.elapsed() < Duration::from_secs(60), "NC 7 never freed after kill {k}: {e}");
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        leasable_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        probe.release(dev).unwrap();
        // Nothing of the victim is left: memory, windows, mappings as with the neighbours only.
        assert_eq!(accounting(&probe.query().unwrap()), accounting(&baseline), "after kill {k}");
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for (nc, t) in neighbours.into_iter().enumerate() {
        let (failures, rounds) = t.join().unwrap();
        assert_eq!(failures, 0, "neighbour nc{nc}: {failures} failed executions of {rounds}");
        assert!(rounds > 0);
        total += rounds;
    }
    leasable_ms.sort_by(|a, b| a.total_cmp(b));
    println!(
        "SIGKILL -> NC leasable again: median {:.1} ms, max {:.1} ms over {KILLS} kills; neighbours: {total} executions, 0 failures",
        leasable_ms[KILLS / 2],
        leasable_ms[KILLS - 1]
    );
    // Victims and neighbours gone: the device as the probe first saw it.
    let end = loop {
        let q = probe.query().unwrap();
        if q[0].clients.len() == 1 {
            break q;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(accounting(&end), accounting(&pristine));
    drop(probe);
    stop_broker.stop();
    broker_thread.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
