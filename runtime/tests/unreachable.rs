//! A device that becomes unreachable while an execution waits on it (a shared device whose
//! broker died: its notification queues are never written again) fails that execution
//! promptly, not at the execution timeout; the model is poisoned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::SUNDA;
use neff::builder;
use platform::{DeviceIdentity, DmaDir, DmaMapping, HostMem, Mmio, Platform, PlatformError};
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

/// The simulator, with a reachability a test sets.
struct Flaky {
    sim: SimDevice,
    up: Arc<AtomicBool>,
}

impl Platform for Flaky {
    fn identity(&self) -> DeviceIdentity {
        self.sim.identity()
    }
    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        self.sim.bar(index)
    }
    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        self.sim.dma_map(mem, dir)
    }
    fn irq_eventfd(&self, vector: u32) -> Result<Option<std::os::fd::OwnedFd>, PlatformError> {
        self.sim.irq_eventfd(vector)
    }
    fn reset(&self) -> Result<(), PlatformError> {
        self.sim.reset()
    }
    fn modeled_writes_allowed(&self) -> bool {
        true
    }
    fn reachable(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}

/// A runtime on the simulator behind a [`Flaky`] platform (its reachability flag returned),
/// a one-NC model loaded with the timeout far away (only the probe can end a wait), and its
/// tensors.
fn setup() -> (Runtime, SimDevice, Arc<AtomicBool>, runtime::ModelHandle, TensorSet, TensorSet) {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let up = Arc::new(AtomicBool::new(true));
    let rt = Runtime::new();
    let cfg = RuntimeConfig { exec_timeout: Duration::from_secs(600), ..RuntimeConfig::physical() };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    let p = Arc::new(Flaky { sim: sim.clone(), up: up.clone() }) as Arc<dyn Platform>;
    rt.init(vec![p], cfg, opts).unwrap();
    let mut d = builder::allreduce_model(1);
    d.target = SUNDA.name.to_string();
    let m = rt.load(&d.build().unwrap(), Some(0), None).unwrap();
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to);
    (rt, sim, up, m, i, o)
}

#[test]
fn an_execution_on_a_device_gone_unreachable_fails_promptly() {
    let (rt, sim, up, m, i, o) = setup();
    assert_eq!(rt.execute(&m, &i, &o).unwrap().0, NrtStatus::Success);
    // The next execution never completes (PE hangs); the device goes away while it waits.
    sim.inject("hang@nc0:pe".parse::<FaultSpec>().unwrap());
    let flip = {
        let up = up.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            up.store(false, Ordering::Relaxed);
        })
    };
    let t0 = Instant::now();
    let e = rt.execute(&m, &i, &o).unwrap_err();
    let waited = t0.elapsed();
    flip.join().unwrap();
    assert_eq!(e.status, NrtStatus::Failure, "{e}");
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(waited < Duration::from_secs(300), "waited {waited:?}: the timeout, not the probe, ended it");
    assert_eq!(m.poisoned(), Some(NrtStatus::Failure));
    eprintln!("the execution failed {waited:?} after it began (the device went away at 200 ms)");
}

/// The same through the execution unit (`execute_async`): the ticket yields NRT_FAILURE soon
/// after the device is gone.
#[test]
fn an_async_execution_on_a_device_gone_unreachable_fails_promptly() {
    let (rt, sim, up, m, i, o) = setup();
    assert_eq!(rt.execute_async(&m, &i, &o).unwrap().wait(), NrtStatus::Success);
    sim.inject("hang@nc0:pe".parse::<FaultSpec>().unwrap());
    let t0 = Instant::now();
    let ticket = rt.execute_async(&m, &i, &o).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    up.store(false, Ordering::Relaxed);
    let status = ticket.wait();
    let waited = t0.elapsed();
    assert_eq!(status, NrtStatus::Failure);
    assert!(waited < Duration::from_secs(300), "waited {waited:?}: the timeout, not the probe, ended it");
    assert_eq!(m.poisoned(), Some(NrtStatus::Failure));
    eprintln!("the async execution failed {waited:?} after it began (the device went away at 200 ms)");
}
