//! The concurrency stress suite (bounded: a few seconds per scenario, both simulator
//! timings): load/execute/unload churn on 8 threads, device-tensor I/O while another thread
//! loads and unloads, async requests with bad inputs among good ones, and unload while another
//! thread executes on the same NC. Every operation must succeed with the right data; a hang
//! fails the test through its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::CAYMAN;
use neff::builder;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, Tensor, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

const TIMINGS: [Timing; 2] = [Timing::Inline, Timing::Threaded];
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);

fn runtime(timing: Timing) -> Arc<Runtime> {
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(timing).hbm_bytes(1 << 28)).unwrap();
    let rt = Arc::new(Runtime::new());
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    // A short timeout: a lost completion shows up as a failure, not as a stuck test.
    let cfg = RuntimeConfig { exec_timeout: EXEC_TIMEOUT, ..RuntimeConfig::physical() };
    rt.init(vec![Arc::new(sim) as Arc<dyn Platform>], cfg, opts).unwrap();
    rt
}

fn neff() -> Vec<u8> {
    let mut d = builder::single_nc_allreduce();
    d.target = "cayman".into();
    d.build().unwrap()
}

fn data(v: u32) -> Vec<u8> {
    (0..32u32).flat_map(|j| (v.wrapping_add(j) as f32).to_le_bytes()).collect()
}

struct Io {
    ti: Arc<Tensor>,
    to: Arc<Tensor>,
    ins: TensorSet,
    outs: TensorSet,
}

fn make_io(rt: &Runtime, m: &ModelHandle, dev: bool) -> Io {
    let ti = rt.alloc_tensor("input", 128, dev, m.vncs[0]).unwrap();
    let to = rt.alloc_tensor("output", 128, dev, m.vncs[0]).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti.clone());
    let mut outs = TensorSet::new();
    outs.add("output", to.clone());
    Io { ti, to, ins, outs }
}

fn checked(rt: &Runtime, m: &ModelHandle, io: &Io, v: u32) {
    let d = data(v);
    io.ti.write(0, &d).unwrap();
    let (s, _) = rt.execute(m, &io.ins, &io.outs).unwrap();
    assert_eq!(s, NrtStatus::Success, "value {v:#x}");
    assert_eq!(io.to.to_vec().unwrap(), d, "value {v:#x}: wrong data");
}

/// Run `f` on a thread and fail if it does not finish within `limit` (a hang: far beyond the
/// execution timeout, so CPU noise on a loaded machine does not trip it).
fn bounded(name: &str, limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{name}: still running after {limit:?} (hang)"),
    }
}

#[test]
fn load_execute_unload_churn_on_eight_threads() {
    for timing in TIMINGS {
        bounded("churn", Duration::from_secs(120), move || {
            let rt = runtime(timing);
            let b = Arc::new(neff());
            let hs: Vec<_> = (0..8u32)
                .map(|k| {
                    let (rt, b) = (rt.clone(), b.clone());
                    std::thread::spawn(move || {
                        for i in 0..12u32 {
                            let m = rt.load(&b, None, None).unwrap();
                            let io = make_io(&rt, &m, i % 2 == 0);
                            for j in 0..3 {
                                checked(&rt, &m, &io, k << 24 | i << 8 | j);
                            }
                            rt.unload(&m).unwrap();
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(rt.loaded_models(), 0);
            rt.close().unwrap();
        });
    }
}

#[test]
fn tensor_io_while_another_thread_loads_and_unloads() {
    for timing in TIMINGS {
        bounded("io during unload", Duration::from_secs(120), move || {
            let rt = runtime(timing);
            let b = neff();
            let stop = Arc::new(AtomicBool::new(false));
            let ios: Vec<_> = (4..8usize)
                .map(|nc| {
                    let (rt, stop) = (rt.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let t = rt.alloc_tensor("t", 4096, true, nc).unwrap();
                        let mut n = 0u32;
                        while !stop.load(Ordering::Relaxed) || n < 50 {
                            let d: Vec<u8> = (0..4096u32).map(|i| (i ^ n ^ nc as u32) as u8).collect();
                            t.write(0, &d).unwrap();
                            assert_eq!(t.to_vec().unwrap(), d, "NC {nc} round {n}");
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            for i in 0..30u32 {
                let m = rt.load(&b, Some(0), None).unwrap();
                let io = make_io(&rt, &m, true);
                checked(&rt, &m, &io, i);
                rt.unload(&m).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            for h in ios {
                assert!(h.join().unwrap() >= 50);
            }
            rt.close().unwrap();
        });
    }
}

#[test]
fn async_with_bad_requests() {
    for timing in TIMINGS {
        bounded("async", Duration::from_secs(120), move || {
            let rt = runtime(timing);
            let m = rt.load(&neff(), Some(3), None).unwrap();
            let hs: Vec<_> = (0..4u32)
                .map(|k| {
                    let (rt, m) = (rt.clone(), m.clone());
                    std::thread::spawn(move || {
                        let good = make_io(&rt, &m, k % 2 == 0);
                        let mut bad = TensorSet::new();
                        bad.add("input", rt.alloc_tensor("input", 32, true, m.vncs[0]).unwrap());
                        for i in 0..40u32 {
                            let t = rt.execute_async(&m, &bad, &good.outs).unwrap();
                            assert_eq!(t.wait(), NrtStatus::ExecBadInput);
                            // Sync and async executions of one model from several threads
                            // serialize on the NC; each checks its own data under a lock-free
                            // tensor pair of its own.
                            let d = data(k << 20 | i);
                            good.ti.write(0, &d).unwrap();
                            let st = if i % 2 == 0 {
                                rt.execute_async(&m, &good.ins, &good.outs).unwrap().wait()
                            } else {
                                rt.execute(&m, &good.ins, &good.outs).unwrap().0
                            };
                            assert_eq!(st, NrtStatus::Success);
                            assert_eq!(good.to.to_vec().unwrap(), d);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(m.poisoned(), None);
            rt.unload(&m).unwrap();
            rt.close().unwrap();
        });
    }
}

#[test]
fn unload_while_another_thread_executes_on_the_nc() {
    for timing in TIMINGS {
        bounded("unload during execute", Duration::from_secs(120), move || {
            let rt = runtime(timing);
            let b = Arc::new(neff());
            let keep = rt.load(&b, Some(2), None).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let exec = {
                let (rt, keep, stop) = (rt.clone(), keep.clone(), stop.clone());
                std::thread::spawn(move || {
                    let io = make_io(&rt, &keep, true);
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) || i < 50 {
                        checked(&rt, &keep, &io, i);
                        i += 1;
                    }
                })
            };
            // The longest unload of a model with an execution in flight: it waits for that
            // execution, never for the execution timeout (the bug this guards against).
            let mut longest_unload = Duration::ZERO;
            for i in 0..30u32 {
                // A model sharing the NC, unloaded while `keep` executes.
                let m = rt.load(&b, Some(2), None).unwrap();
                let io = make_io(&rt, &m, false);
                checked(&rt, &m, &io, 1 << 30 | i);
                rt.unload(&m).unwrap();
                // The executing model itself: unload waits for its running execution.
                let own = rt.load(&b, Some(5), None).unwrap();
                let runner = {
                    let (rt, own) = (rt.clone(), own.clone());
                    std::thread::spawn(move || {
                        let io = make_io(&rt, &own, true);
                        let d = data(i);
                        io.ti.write(0, &d).unwrap();
                        match rt.execute(&own, &io.ins, &io.outs) {
                            Ok((s, _)) => {
                                assert_eq!(s, NrtStatus::Success);
                                assert_eq!(io.to.to_vec().unwrap(), d);
                            }
                            // Unloaded before its turn: refused, never a device status.
                            Err(e) => assert!(matches!(e.status, NrtStatus::InvalidHandle | NrtStatus::Invalid), "{e}"),
                        }
                    })
                };
                let t = Instant::now();
                rt.unload(&own).unwrap();
                longest_unload = longest_unload.max(t.elapsed());
                runner.join().unwrap();
                // The NC is usable right after.
                let again = rt.load(&b, Some(5), None).unwrap();
                let io = make_io(&rt, &again, true);
                checked(&rt, &again, &io, 2 << 28 | i);
                rt.unload(&again).unwrap();
            }
            assert!(longest_unload < EXEC_TIMEOUT, "an unload waited {longest_unload:?}: the execution timed out");
            stop.store(true, Ordering::Relaxed);
            exec.join().unwrap();
            rt.unload(&keep).unwrap();
            rt.close().unwrap();
        });
    }
}
