//! Fault paths end to end on the simulator, observed only through registers and records:
//! the out-of-order matcher's overflow probe, a ring that really fills.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::{Arch, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

#[path = "../../tests/support/thread_log.rs"]
mod thread_log;

/// Run `f` with the runtime's log captured (this thread: the synchronous execute harvests on
/// the caller's thread).
fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    thread_log::capture(f)
}

/// Every test starts here (thread_log's rule: its global subscriber before anything logs).
fn setup(arch: &'static Arch, ncs: usize) -> (Runtime, SimDevice, ModelHandle, Vec<u8>) {
    thread_log::init();
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(1000), ..RuntimeConfig::physical() };
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
    for e in csr_maps::Engine::ALL {
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

fn g0(sim: &SimDevice, nc: u64) -> csr_maps::blocks::nc_intc_g0::Cause {
    let arch = sim.arch();
    let bar = sim.bar(arch.bars.apb).unwrap();
    csr_maps::Regs::new(arch, bar.as_ref()).nc_intc(nc).unwrap().g0().cause().read().unwrap()
}

fn hbm_ecc(sim: &SimDevice, stack: u64) -> csr_maps::blocks::misc_ram::HbmEcc {
    let arch = sim.arch();
    let bar = sim.bar(arch.bars.apb).unwrap();
    csr_maps::Regs::new(arch, bar.as_ref()).misc_ram(0).unwrap().hbm_ecc(stack).unwrap().read().unwrap()
}

/// Execute with an output pre-filled with 0xAA; return the status and the output bytes.
fn exec_out(rt: &Runtime, m: &ModelHandle) -> (NrtStatus, Vec<u8>) {
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    to.write(0, &[0xAA; 128]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to.clone());
    let s = rt.execute(m, &i, &o).unwrap().0;
    (s, to.to_vec().unwrap())
}

/// An uncorrectable HBM error under a DMA's source: nothing is latched when it is armed; the
/// DMA that reads the NC's HBM latches the ECC counter and the INTC line and delivers damaged
/// data; the runtime returns 1201 (1205 repairable), zeroes the output and poisons the model;
/// unload + reload runs clean.
#[test]
fn hbm_ue_during_a_dma() {
    for (spec, want) in
        [("hbm-ue@nc0", NrtStatus::ExecHwErrHbmUe), ("hbm-ue-repairable@nc0", NrtStatus::ExecHwErrRepairableHbmUe)]
    {
        let (rt, sim, m, bytes) = setup(&SUNDA, 1);
        assert_eq!(exec_out(&rt, &m), (NrtStatus::Success, vec![1u8; 128]), "clean first");
        let dma_before = sim.stats().dma_packets;
        sim.inject(spec.parse::<FaultSpec>().unwrap());
        let c = g0(&sim, 0);
        assert_eq!((c.hbm_ue(), c.hbm_ue_repairable()), (0, 0), "{spec}: nothing latched before a DMA reads the HBM");
        let ecc0 = hbm_ecc(&sim, 0);
        let (s, out) = exec_out(&rt, &m);
        assert_eq!(s, want, "{spec}");
        assert!(sim.stats().dma_packets > dma_before);
        assert_eq!(out, vec![0u8; 128], "{spec}: the damaged output is not returned as valid");
        let c = g0(&sim, 0);
        let ecc = hbm_ecc(&sim, 0);
        if want == NrtStatus::ExecHwErrHbmUe {
            assert_eq!(c.hbm_ue(), 1);
            assert_eq!(ecc.uncorrectable(), ecc0.uncorrectable() + 1);
        } else {
            assert_eq!(c.hbm_ue_repairable(), 1);
            assert_eq!(ecc.repairable(), ecc0.repairable() + 1);
        }
        assert_eq!(m.poisoned(), Some(want));
        rt.unload(&m).unwrap();
        let m2 = rt.load(&bytes, Some(0), None).unwrap();
        assert_eq!(exec_out(&rt, &m2), (NrtStatus::Success, vec![1u8; 128]), "{spec}: clean after reload");
        rt.unload(&m2).unwrap();
        rt.close().unwrap();
    }
}

/// NC UE, collectives error and network proxy: armed, nothing latched until the execution
/// runs into them; then 1202 / 1200 / 1206 and a poisoned model.
#[test]
fn mid_execution_faults() {
    for (spec, want) in [
        ("nc-ue@nc0", NrtStatus::ExecHwErrNcUe),
        ("cc-error@nc0", NrtStatus::ExecHwErrCollectives),
        ("net-proxy@nc0", NrtStatus::NetworkProxyFailure),
    ] {
        let (rt, sim, m, bytes) = setup(&SUNDA, 1);
        assert_eq!(exec(&rt, &m), NrtStatus::Success);
        sim.inject(spec.parse::<FaultSpec>().unwrap());
        assert_eq!(g0(&sim, 0).0, 0, "{spec}: nothing latched before the execution");
        let t = std::time::Instant::now();
        assert_eq!(exec(&rt, &m), want, "{spec}");
        assert!(t.elapsed() < Duration::from_millis(500), "{spec}: reported before the 1 s timeout");
        assert_ne!(g0(&sim, 0).0, 0, "{spec}: latched by the execution");
        assert_eq!(m.poisoned(), Some(want));
        rt.unload(&m).unwrap();
        let m2 = rt.load(&bytes, Some(0), None).unwrap();
        assert_eq!(exec(&rt, &m2), NrtStatus::Success, "{spec}: clean after reload");
        rt.unload(&m2).unwrap();
        rt.close().unwrap();
    }
}
