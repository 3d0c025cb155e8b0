//! The collectives barrier phase end to end (docs/faults.md): two NCs of one simulated device
//! in one replica group, loaded as two global ranks of a one-graph all-reduce NEFF, so that
//! each rank's execution is kicked on its own. The runtime reads each NC's barrier task from
//! the modeled `nc_barrier` registers; the simulator's collective engine keeps it outstanding
//! until both ranks arrived.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::{Regs, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::state::ExecFatalStatus;
use runtime::{ExecTimings, GlobalPlacement, ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

const ELEMS: usize = 32;

/// The two ranks' model: one graph, replica group `[0, 1]`.
fn neff() -> Vec<u8> {
    let mut m = builder::allreduce_model(1);
    m.target = SUNDA.name.to_string();
    m.graphs[0].replica_groups = vec![vec![0, 1]];
    m.build().unwrap()
}

/// A runtime over one SUNDA device (2 NCs) with the barrier warning threshold and the core
/// timeout shortened; rank r is loaded on NC r.
fn setup(warn: Duration, timeout: Duration) -> (Runtime, SimDevice, [ModelHandle; 2]) {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::with_observers(runtime::monitoring());
    let cfg = RuntimeConfig { exec_timeout: timeout, barrier_warn: warn, ..RuntimeConfig::physical() };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    let bytes = neff();
    let m = [0usize, 1].map(|r| {
        rt.load_global(&bytes, Some(r), Some(1), GlobalPlacement { rank_base: r, comm_id: 0x5a, ranks: 2 }).unwrap()
    });
    (rt, sim, m)
}

fn f32s(v: f32) -> Vec<u8> {
    (0..ELEMS).flat_map(|_| v.to_le_bytes()).collect()
}

/// Execute rank `m` with every input element `x`; returns the status, timings and output.
fn exec(rt: &Runtime, m: &ModelHandle, x: f32) -> (NrtStatus, ExecTimings, Vec<u8>) {
    let ti = rt.alloc_tensor("input", (ELEMS * 4) as u64, false, m.ncs[0]).unwrap();
    ti.write(0, &f32s(x)).unwrap();
    let to = rt.alloc_tensor("output", (ELEMS * 4) as u64, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to.clone());
    let (s, t) = rt.execute(m, &i, &o).unwrap();
    (s, t, to.to_vec().unwrap())
}

/// `nc_barrier.status` of `nc` as (state, generation), read through BAR0.
fn barrier_status(sim: &SimDevice, nc: u64) -> (u32, u32) {
    let bar = sim.bar(0).unwrap();
    let s = Regs::new(&SUNDA, bar.as_ref()).nc_barrier(nc).unwrap().status().read().unwrap();
    (s.state(), s.generation())
}

/// Warnings libnrt's doubling gives for a wait of `d` with first threshold `warn`.
fn warnings_for(d: Duration, warn: Duration) -> u32 {
    let mut n = 0;
    let mut t = warn;
    while t <= d {
        n += 1;
        t *= 2;
    }
    n
}

#[test]
fn a_late_rank_keeps_the_barrier_pending_with_doubling_warnings_and_no_core_timeout() {
    use csr_maps::consts::barrier as bc;
    let warn = Duration::from_millis(50);
    // The core timeout is shorter than the barrier wait: it must not run while waiting.
    let (rt, sim, [m0, m1]) = setup(warn, Duration::from_millis(100));
    let total0 = runtime::completion::barrier_warnings_total();
    let t0 = Instant::now();
    let (r0, late) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = exec(&rt, &m0, 1.5);
            (r, t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(150));
        // Rank 0 waits on its barrier task; its engines are held back (gated), rank 1's NC
        // has not arrived.
        let (st0, g0) = barrier_status(&sim, 0);
        assert_eq!((st0, g0), (bc::OUTSTANDING, 1), "rank 0's barrier outstanding");
        assert_eq!(barrier_status(&sim, 1).0, bc::IDLE, "rank 1 not arrived");
        std::thread::sleep(Duration::from_millis(150));
        let late = t0.elapsed();
        let r1 = exec(&rt, &m1, 2.25);
        let (r0, took0) = h.join().unwrap();
        assert_eq!(r1.0, NrtStatus::Success, "rank 1");
        assert_eq!(r1.2, f32s(3.75), "rank 1's all-reduce");
        assert_eq!(r1.1.barrier_warnings, 0, "rank 1 arrived last: no wait");
        ((r0, took0), late)
    });
    let ((s0, t0, out0), took0) = r0;
    assert_eq!(s0, NrtStatus::Success, "rank 0 completes after the late rank arrived, never fails");
    assert_eq!(out0, f32s(3.75), "rank 0's all-reduce");
    assert!(took0 >= Duration::from_millis(300), "rank 0 waited for rank 1 ({took0:?})");
    // Thresholds 50, 100, 200 ms (then 400) from the start of the wait: the count follows
    // from how long rank 0 waited, bounded by when rank 1 was kicked and when rank 0 returned.
    let (lo, hi) = (warnings_for(late.saturating_sub(Duration::from_millis(20)), warn), warnings_for(took0, warn));
    assert!(lo >= 3, "the wait spans at least the 50, 100 and 200 ms thresholds ({late:?})");
    assert!(
        (lo..=hi).contains(&t0.barrier_warnings),
        "{} warnings for a wait between {late:?} and {took0:?}",
        t0.barrier_warnings
    );
    assert!(runtime::completion::barrier_warnings_total() >= total0 + u64::from(t0.barrier_warnings));
    // Monitors see them on rank 0's NC (and none on rank 1's).
    if let Some(path) = rt.counters_path() {
        let snap = runtime::counters::Reader::open(&path).unwrap().snapshot();
        assert_eq!(snap.ncs[0].barrier_warnings, u64::from(t0.barrier_warnings), "NC 0's monitor counter");
        assert_eq!(snap.ncs[1].barrier_warnings, 0, "NC 1's monitor counter");
    } else {
        assert!(!runtime::counters::enabled(), "an initialized runtime publishes its counters");
    }
    assert_eq!(barrier_status(&sim, 0), (bc::DONE, 1));
    assert_eq!(barrier_status(&sim, 1), (bc::DONE, 1));
    // Both arrive together next time: no wait, no warning; generation 2.
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| exec(&rt, &m0, 1.0));
        let b = exec(&rt, &m1, 1.0);
        (h.join().unwrap(), b)
    });
    assert_eq!((a.0, b.0), (NrtStatus::Success, NrtStatus::Success));
    assert_eq!((a.2.clone(), b.2), (f32s(2.0), f32s(2.0)));
    assert_eq!(barrier_status(&sim, 0), (bc::DONE, 2));
    for m in [m0, m1] {
        rt.unload(&m).unwrap();
    }
    rt.close().unwrap();
}

#[test]
fn a_failed_barrier_is_1200_with_the_barrier_flag() {
    let (rt, sim, [m0, m1]) = setup(Duration::from_millis(50), Duration::from_millis(1000));
    sim.inject("barrier@nc0".parse::<FaultSpec>().unwrap());
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| exec(&rt, &m0, 1.0));
        let b = exec(&rt, &m1, 1.0);
        (h.join().unwrap(), b)
    });
    for (r, (s, t, _)) in [a, b].into_iter().enumerate() {
        assert_eq!(s, NrtStatus::ExecHwErrCollectives, "rank {r}");
        assert!(t.fatal.get(ExecFatalStatus::Barrier), "rank {r}: EXEC_FATAL_STATUS_BARRIER");
        assert!(!t.fatal.get(ExecFatalStatus::Timeout), "rank {r}: not a timeout");
    }
    assert_eq!(m0.poisoned(), Some(NrtStatus::ExecHwErrCollectives));
    for m in [m0, m1] {
        rt.unload(&m).unwrap();
    }
    // A fresh load runs clean.
    let bytes = neff();
    let m = [0usize, 1].map(|r| {
        rt.load_global(&bytes, Some(r), Some(1), GlobalPlacement { rank_base: r, comm_id: 0x5b, ranks: 2 }).unwrap()
    });
    let (a, b) = std::thread::scope(|s| {
        let h = s.spawn(|| exec(&rt, &m[0], 1.0));
        let b = exec(&rt, &m[1], 2.0);
        (h.join().unwrap(), b)
    });
    assert_eq!((a.0, b.0), (NrtStatus::Success, NrtStatus::Success));
    assert_eq!(a.2, f32s(3.0));
    rt.close().unwrap();
}

#[test]
fn a_missing_rank_keeps_the_survivor_pending_past_many_core_timeouts() {
    use csr_maps::consts::barrier as bc;
    // Rank 1 does not execute for a long while: rank 0 waits on its barrier past several
    // thresholds and many core timeouts without failing (in one process no transport declares
    // the peer dead; capi/tests/global_comm.rs kills a rank process for that).
    let warn = Duration::from_millis(20);
    let (rt, sim, [m0, m1]) = setup(warn, Duration::from_millis(50));
    let total0 = runtime::completion::barrier_warnings_total();
    let h = std::thread::scope(|s| {
        let h = s.spawn(|| exec(&rt, &m0, 1.0));
        std::thread::sleep(Duration::from_millis(400));
        // Still pending after 8 core timeouts and 4 thresholds (20, 40, 80, 160 ms... 320).
        assert!(!h.is_finished(), "the barrier wait is never fatal");
        assert_eq!(barrier_status(&sim, 0).0, bc::OUTSTANDING);
        assert!(runtime::completion::barrier_warnings_total() >= total0 + 4);
        // The peer finally arrives: both complete.
        let b = exec(&rt, &m1, 1.0);
        (h.join().unwrap(), b)
    });
    let (a, b) = h;
    assert_eq!((a.0, b.0), (NrtStatus::Success, NrtStatus::Success));
    assert!(a.1.barrier_warnings >= 4, "{}", a.1.barrier_warnings);
    for m in [m0, m1] {
        rt.unload(&m).unwrap();
    }
    rt.close().unwrap();
}
