//! Several models per NeuronCore, logical core numbering, async refusals that fail alone,
//! and fatal device errors reported when they happen (not at the timeout).

use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::{Arch, CAYMAN, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, Tensor, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

fn bytes(arch: &Arch) -> Vec<u8> {
    let mut d = builder::single_nc_allreduce();
    d.target = arch.name.to_string();
    d.build().unwrap()
}

fn runtime(arch: &'static Arch, timing: Timing, cfg: RuntimeConfig) -> (Arc<Runtime>, SimDevice) {
    let sim = SimDevice::new(SimConfig::new(arch).timing(timing).hbm_bytes(1 << 28)).unwrap();
    let rt = Arc::new(Runtime::new());
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    (rt, sim)
}

struct Io {
    ti: Arc<Tensor>,
    to: Arc<Tensor>,
    ins: TensorSet,
    outs: TensorSet,
}

fn make_io(rt: &Runtime, m: &ModelHandle, on_device: bool) -> Io {
    let ti = rt.alloc_tensor("input", 128, on_device, m.vncs[0]).unwrap();
    let to = rt.alloc_tensor("output", 128, on_device, m.vncs[0]).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti.clone());
    let mut outs = TensorSet::new();
    outs.add("output", to.clone());
    Io { ti, to, ins, outs }
}

fn data(v: u32) -> Vec<u8> {
    (0..32u32).flat_map(|j| (v.wrapping_add(j) as f32).to_le_bytes()).collect()
}

/// One checked execution: the output must be this execution's input.
fn run(rt: &Runtime, m: &ModelHandle, io: &Io, v: u32) {
    let d = data(v);
    io.ti.write(0, &d).unwrap();
    let (s, _) = rt.execute(m, &io.ins, &io.outs).unwrap();
    assert_eq!(s, NrtStatus::Success, "value {v}");
    assert_eq!(io.to.to_vec().unwrap(), d, "value {v}: wrong or stale output");
}

#[test]
fn nine_one_nc_models_on_eight_ncs() {
    let (rt, _sim) = runtime(&CAYMAN, Timing::Inline, RuntimeConfig::physical());
    let ncs = rt.nc_count();
    let b = bytes(&CAYMAN);
    let models: Vec<ModelHandle> = (0..ncs + 1).map(|_| rt.load(&b, None, None).unwrap()).collect();
    // Least-loaded placement: one model per NC first, then a second one on NC 0.
    let mut per = rt.models_per_nc();
    assert_eq!(per.iter().sum::<usize>(), ncs + 1);
    per.sort_unstable();
    assert_eq!(per.last(), Some(&2));
    assert_eq!(models[ncs].ncs, vec![0]);
    for (k, m) in models.iter().enumerate() {
        let io = make_io(&rt, m, true);
        run(&rt, m, &io, k as u32 * 1000);
    }
    // Each model still runs after the others ran on its NC (its state was re-armed).
    for (k, m) in models.iter().enumerate().rev() {
        let io = make_io(&rt, m, false);
        run(&rt, m, &io, k as u32 * 1000 + 7);
    }
    // A start past the visible cores is the only NOT_ENOUGH_NC.
    let e = rt.load(&b, Some(ncs), None).unwrap_err();
    assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
    for m in &models {
        rt.unload(m).unwrap();
    }
    assert_eq!(rt.models_per_nc().iter().sum::<usize>(), 0);
    rt.close().unwrap();
}

#[test]
fn two_models_on_one_nc_interleaved_from_two_threads() {
    for timing in [Timing::Inline, Timing::Threaded] {
        let (rt, _sim) = runtime(&SUNDA, timing, RuntimeConfig::physical());
        let b = bytes(&SUNDA);
        let a = rt.load(&b, Some(1), None).unwrap();
        let c = rt.load(&b, Some(1), None).unwrap();
        assert_eq!((a.ncs.clone(), c.ncs.clone()), (vec![1], vec![1]));
        let hs: Vec<_> = [a.clone(), c.clone()]
            .into_iter()
            .enumerate()
            .map(|(k, m)| {
                let rt = rt.clone();
                std::thread::spawn(move || {
                    let io = make_io(&rt, &m, k == 0);
                    for i in 0..200 {
                        run(&rt, &m, &io, (k as u32) << 20 | i);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        rt.unload(&a).unwrap();
        // The NC is usable right away by the remaining model.
        let io = make_io(&rt, &c, true);
        run(&rt, &c, &io, 99);
        rt.unload(&c).unwrap();
        rt.close().unwrap();
    }
}

#[test]
fn visible_cores_are_numbered_from_zero() {
    let cfg = RuntimeConfig { visible_cores: Some(vec![1]), ..RuntimeConfig::physical() };
    let (rt, _sim) = runtime(&SUNDA, Timing::Inline, cfg);
    let b = bytes(&SUNDA);
    let m = rt.load(&b, Some(0), None).unwrap();
    assert_eq!(m.ncs, vec![1], "logical 0 is physical core 1");
    assert_eq!(m.vncs, vec![0]);
    let t = rt.alloc_tensor("input", 128, true, 0).unwrap();
    t.write(0, &[5u8; 128]).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![5u8; 128]);
    assert!(rt.alloc_tensor("x", 64, true, 1).is_err(), "only one visible core");
    assert_eq!(rt.load(&b, Some(1), None).unwrap_err().status, NrtStatus::LoadNotEnoughNc);
    let io = make_io(&rt, &m, true);
    run(&rt, &m, &io, 3);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

#[test]
fn async_request_with_a_bad_input_fails_alone() {
    let (rt, _sim) = runtime(&CAYMAN, Timing::Threaded, RuntimeConfig::physical());
    let m = rt.load(&bytes(&CAYMAN), Some(0), None).unwrap();
    let good = make_io(&rt, &m, true);
    let mut bad = TensorSet::new();
    bad.add("input", rt.alloc_tensor("input", 64, true, 0).unwrap());
    for round in 0..3u32 {
        let t = rt.execute_async(&m, &bad, &good.outs).unwrap();
        assert_eq!(t.wait(), NrtStatus::ExecBadInput, "round {round}: refused at bind");
        let d = data(round);
        good.ti.write(0, &d).unwrap();
        let t = rt.execute_async(&m, &good.ins, &good.outs).unwrap();
        assert_eq!(t.wait(), NrtStatus::Success, "round {round}: the XU stays healthy");
        assert_eq!(good.to.to_vec().unwrap(), d);
    }
    assert_eq!(m.poisoned(), None);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

/// Faults the device signals (error line, latched cause) end the execution within 10 ms of
/// the fault, with the status the timeout path gives, though the timeout is 600 s.
#[test]
fn signalled_faults_are_reported_within_10ms() {
    let cases: [(&str, NrtStatus); 3] = [
        ("dma-abort@nc0:q0", NrtStatus::ExecHwErrDmaAbort),
        ("nq-overflow@nc0", NrtStatus::ExecSwNqOverflow),
        ("seq-fatal@nc0:pool", NrtStatus::ExecCompletedWithErr),
    ];
    for (spec, want) in cases {
        let cfg = RuntimeConfig { exec_timeout: Duration::from_secs(600), ..RuntimeConfig::physical() };
        let (rt, sim) = runtime(&SUNDA, Timing::Threaded, cfg);
        let b = bytes(&SUNDA);
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let m = rt.load(&b, Some(0), None).unwrap();
            let io = make_io(&rt, &m, false);
            // A clean execution's host time is the baseline the fault adds to.
            let t0 = Instant::now();
            run(&rt, &m, &io, 1);
            let clean = t0.elapsed();
            sim.inject(spec.parse::<FaultSpec>().unwrap());
            let t0 = Instant::now();
            let (s, _) = rt.execute(&m, &io.ins, &io.outs).unwrap();
            let lag = t0.elapsed().saturating_sub(clean);
            assert_eq!(s, want, "{spec}");
            best = best.min(lag);
            rt.unload(&m).unwrap();
        }
        eprintln!("{spec}: {} reported {best:?} after the fault (best of 3)", want.name());
        assert!(best <= Duration::from_millis(10), "{spec}: reported {best:?} after the fault");
        rt.close().unwrap();
    }
}
