//! Fault paths end to end on the simulator, observed only through registers and records:
//! the out-of-order matcher's overflow probe, a ring that really fills.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csr_maps::{Arch, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Run `f` with the runtime's log captured (this thread: the synchronous execute harvests on
/// the caller's thread).
fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    let log = Log::default();
    let w = log.clone();
    let sub = tracing_subscriber::fmt().with_writer(move || w.clone()).with_ansi(false).finish();
    let r = tracing::subscriber::with_default(sub, f);
    (r, log.text())
}

fn setup(arch: &'static Arch, ncs: usize) -> (Runtime, SimDevice, ModelHandle, Vec<u8>) {
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(1000), ..RuntimeConfig::default() };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    let mut d = builder::allreduce_model(ncs);
    d.target = arch.name.to_string();
    let bytes = d.build().unwrap();
    let m = rt.load(&bytes, Some(0), None).unwrap();
    (rt, sim, m, bytes)
}

fn exec(rt: &Runtime, m: &ModelHandle) -> NrtStatus {
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to);
    rt.execute(m, &i, &o).unwrap().0
}

/// An END before its START: the matcher probes INTC cause bit 29 (docs/facts/libnrt-runtime-model.md
/// §B.5). Clear → the generic error (NRT_FAILURE, model poisoned); a ring that really
/// overflowed on the same NC → 1204.
#[test]
fn out_of_order_takes_the_overflow_probe() {
    let (rt, sim, m, _) = setup(&SUNDA, 1);
    assert_eq!(exec(&rt, &m), NrtStatus::Success);
    sim.inject("out-of-order@nc0:dve".parse::<FaultSpec>().unwrap());
    let (s, log) = logged(|| exec(&rt, &m));
    assert_eq!(s, NrtStatus::Failure, "{log}");
    assert!(log.contains("Expected state to be end pending"), "the matcher's probe: {log}");
    assert!(!log.contains("overflow detected"), "{log}");
    assert_eq!(m.poisoned(), Some(NrtStatus::Failure));
    rt.unload(&m).unwrap();
    rt.close().unwrap();

    // Both: the DVE record arrives out of order while PE's ring overflowed.
    let (rt, sim, m, _) = setup(&SUNDA, 1);
    sim.inject("nq-overflow@nc0:pe".parse::<FaultSpec>().unwrap());
    sim.inject("out-of-order@nc0:dve".parse::<FaultSpec>().unwrap());
    let (s, log) = logged(|| exec(&rt, &m));
    assert_eq!(s, NrtStatus::ExecSwNqOverflow, "{log}");
    assert_eq!(m.poisoned(), Some(NrtStatus::ExecSwNqOverflow));
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

/// `nq-overflow`: the engine fills its ring for real (the runtime writes its head back every
/// quarter ring); records are dropped, the ring's overflow status and INTC bit 29 are set and
/// the runtime returns 1204 — for every engine's ring.
#[test]
fn a_really_full_ring_gives_1204() {
    for e in csr_maps::consts::seq::ENGINES {
        let (rt, sim, m, bytes) = setup(&SUNDA, 1);
        assert_eq!(exec(&rt, &m), NrtStatus::Success);
        let before = sim.stats();
        sim.inject(format!("nq-overflow@nc0:{e}").parse::<FaultSpec>().unwrap());
        assert_eq!(exec(&rt, &m), NrtStatus::ExecSwNqOverflow, "{e}");
        let after = sim.stats();
        assert!(after.dropped_records > before.dropped_records, "{e}: records really dropped");
        // The ring held a full ring's worth of records before the drop.
        assert!(
            after.nq_records - before.nq_records >= runtime::stage::RING_RECORDS - 1,
            "{e}: {} records",
            after.nq_records - before.nq_records
        );
        assert_eq!(m.poisoned(), Some(NrtStatus::ExecSwNqOverflow));
        rt.unload(&m).unwrap();
        let m2 = rt.load(&bytes, Some(0), None).unwrap();
        assert_eq!(exec(&rt, &m2), NrtStatus::Success, "{e}: clean after reload");
        rt.unload(&m2).unwrap();
        rt.close().unwrap();
    }
}
