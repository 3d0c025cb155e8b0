//! Every status docs/facts/libnrt-runtime-model.md §A.4.1 names, reached through real misuse or the simulator's fault paths.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::{Arch, CAYMAN, SUNDA};
use neff::builder;
use neff::header::NeffHeader;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, PollPolicy, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

fn model(n: usize, arch: &Arch) -> Vec<u8> {
    let mut d = builder::allreduce_model(n);
    d.target = arch.name.to_string();
    d.build().unwrap()
}

fn cfg() -> RuntimeConfig {
    RuntimeConfig { exec_timeout: Duration::from_millis(1000), ..RuntimeConfig::physical() }
}

fn rt_with(sim: SimConfig, cfg: RuntimeConfig) -> (Runtime, SimDevice) {
    let sim = SimDevice::new(sim.hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    (rt, sim)
}

fn rt(arch: &'static Arch) -> (Runtime, SimDevice) {
    rt_with(SimConfig::new(arch).timing(Timing::Threaded), cfg())
}

fn io(rt: &Runtime, m: &ModelHandle) -> (TensorSet, TensorSet) {
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to);
    (i, o)
}

fn exec(rt: &Runtime, m: &ModelHandle) -> NrtStatus {
    let (i, o) = io(rt, m);
    rt.execute(m, &i, &o).unwrap().0
}

/// Inject `spec`, execute, expect `want`; then fail-stop: later executes return 101, unload
/// works and a fresh load on the same NCs runs.
fn fault(arch: &'static Arch, ncs: usize, specs: &[&str], want: NrtStatus) {
    let soft = matches!(want, NrtStatus::ExecCompletedWithNumErr | NrtStatus::ExecCompletedWithErr);
    fault_p(arch, ncs, specs, want, want != NrtStatus::Success && !soft)
}

/// [`fault`] with the poisoning stated: a band-B status poisons when the execution did not
/// complete (a SEQUENCER_FATAL engine never posts its END: the step ends "done with error",
/// docs/facts/libnrt-runtime-model.md §A.7), not when it completed with a flagged result.
fn fault_p(arch: &'static Arch, ncs: usize, specs: &[&str], want: NrtStatus, poisons: bool) {
    fault_t(arch, Timing::Threaded, ncs, specs, want, poisons)
}

/// [`fault_p`] on a chosen simulator timing.
fn fault_t(arch: &'static Arch, timing: Timing, ncs: usize, specs: &[&str], want: NrtStatus, poisons: bool) {
    let (rt, sim) = rt_with(SimConfig::new(arch).timing(timing), cfg());
    let bytes = model(ncs, arch);
    let m = rt.load(&bytes, Some(0), None).unwrap();
    assert_eq!(exec(&rt, &m), NrtStatus::Success, "clean run first");
    for s in specs {
        sim.inject(s.parse::<FaultSpec>().unwrap());
    }
    let got = exec(&rt, &m);
    assert_eq!(got, want, "{arch} {specs:?}");
    if poisons {
        assert_eq!(m.poisoned(), Some(want));
        assert_eq!(exec(&rt, &m), NrtStatus::ExecUnitUnrecoverable, "poisoned model");
    } else {
        // A completed execution with a band-B status is soft (docs/facts/libnrt-runtime-model.md
        // §A.5.5): the result is flagged, the model is not poisoned and runs again.
        assert_eq!(m.poisoned(), None, "{specs:?}: not poisoned");
        assert_eq!(exec(&rt, &m), NrtStatus::Success, "{specs:?}: the next execution runs clean");
    }
    rt.unload(&m).unwrap();
    let m2 = rt.load(&bytes, Some(0), None).unwrap();
    assert_eq!(exec(&rt, &m2), NrtStatus::Success, "fresh load after {specs:?}");
    rt.unload(&m2).unwrap();
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "{st:?}");
}

#[test]
fn numerical_1003() {
    fault(&SUNDA, 1, &["fp-nan@nc0:act"], NrtStatus::ExecCompletedWithNumErr);
}
#[test]
fn numerical_1003_from_every_engine() {
    for e in csr_maps::Engine::ALL {
        fault(&SUNDA, 1, &[&format!("fp-nan@nc0:{e}")], NrtStatus::ExecCompletedWithNumErr);
    }
}
#[test]
fn transient_1004() {
    fault(&CAYMAN, 1, &["transient@nc0:pe"], NrtStatus::ExecCompletedWithErr);
}
#[test]
fn semaphore_error_1004() {
    fault(&SUNDA, 1, &["semaphore-error@nc0:dve"], NrtStatus::ExecCompletedWithErr);
}
#[test]
fn sequencer_fatal_1004() {
    fault_p(&SUNDA, 1, &["seq-fatal@nc0:pool"], NrtStatus::ExecCompletedWithErr, true);
}
#[test]
fn oob_1006() {
    fault(&SUNDA, 1, &["oob@nc0:pe"], NrtStatus::ExecOob);
}
#[test]
fn collectives_1200() {
    fault(&CAYMAN, 1, &["cc-error@nc0"], NrtStatus::ExecHwErrCollectives);
}
#[test]
fn hbm_ue_1201() {
    fault(&SUNDA, 1, &["hbm-ue@nc0"], NrtStatus::ExecHwErrHbmUe);
}
#[test]
fn nc_ue_1202() {
    fault(&CAYMAN, 1, &["nc-ue@nc0"], NrtStatus::ExecHwErrNcUe);
}
#[test]
fn dma_abort_1203() {
    fault(&SUNDA, 1, &["dma-abort@nc0:q0"], NrtStatus::ExecHwErrDmaAbort);
}
#[test]
fn nq_overflow_1204() {
    fault(&SUNDA, 1, &["nq-overflow@nc0"], NrtStatus::ExecSwNqOverflow);
}
#[test]
fn repairable_hbm_ue_1205() {
    fault(&CAYMAN, 1, &["hbm-ue-repairable@nc0"], NrtStatus::ExecHwErrRepairableHbmUe);
}
#[test]
fn network_proxy_1206() {
    fault(&SUNDA, 1, &["net-proxy@nc0"], NrtStatus::NetworkProxyFailure);
}
#[test]
fn hang_timeout_5() {
    fault(&SUNDA, 1, &["hang@nc0:pe"], NrtStatus::Timeout);
}
#[test]
fn multi_nc_priority_success_plus_1003() {
    fault(&SUNDA, 2, &["fp-nan@nc1:act"], NrtStatus::ExecCompletedWithNumErr);
}
/// Both faults must be latched when the execution is finalized for the priority to decide;
/// with threaded device timing the overflow on NC 0 may end the execution before NC 1's DMA
/// ran, so this runs the device inline (both NCs have run when the harvest starts).
#[test]
fn multi_nc_priority_1204_plus_1203() {
    fault_t(&SUNDA, Timing::Inline, 2, &["nq-overflow@nc0", "dma-abort@nc1:q0"], NrtStatus::ExecHwErrDmaAbort, true);
}

#[test]
fn lifecycle_misuse_13_14_9_2_10() {
    let bytes = model(1, &SUNDA);
    let rt = Runtime::new();
    let e = rt.load(&bytes, None, None).unwrap_err();
    assert_eq!(e.status, NrtStatus::Uninitialized);
    let sim = SimDevice::new(SimConfig::new(&SUNDA).hbm_bytes(1 << 28)).unwrap();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg(), opts.clone()).unwrap();
    // 9: three NCs on a two-NC device; and NEURON_RT_VISIBLE_CORES-style restriction.
    let e = rt.load(&model(3, &SUNDA), None, None).unwrap_err();
    assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
    assert_eq!(e.message(), "Insufficient number of pncs, required: 3, available: 2");
    let m = rt.load(&bytes, Some(1), None).unwrap();
    // NCs are shared between models: only cores that do not exist are missing.
    let e = rt.load(&model(2, &SUNDA), Some(1), None).unwrap_err();
    assert_eq!(e.message(), "Insufficient number of pncs, required: 2, available: 1");
    let m2 = rt.load(&model(2, &SUNDA), None, None).unwrap();
    rt.unload(&m2).unwrap();
    rt.unload(&m).unwrap();
    // 2: corrupted bytes; 10: major version 3.
    let mut bad = bytes.clone();
    let n = bad.len();
    bad[n - 10] ^= 0xFF;
    assert_eq!(rt.load(&bad, None, None).unwrap_err().status, NrtStatus::Invalid);
    let mut h = NeffHeader::decode(&bytes).unwrap();
    h.neff_version_major = 3;
    let mut v3 = bytes.clone();
    v3[..1024].copy_from_slice(&h.encode());
    assert_eq!(rt.load(&v3, None, None).unwrap_err().status, NrtStatus::UnsupportedNeffVersion);
    assert_eq!(rt.load(&model(1, &CAYMAN), None, None).unwrap_err().status, NrtStatus::Invalid, "arch gate");
    rt.close().unwrap();
    assert_eq!(rt.load(&bytes, None, None).unwrap_err().status, NrtStatus::Closed);
    let vis = Runtime::new();
    let c = RuntimeConfig { visible_cores: Some(vec![1]), ..cfg() };
    vis.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], c, opts).unwrap();
    let e = vis.load(&model(2, &SUNDA), None, None).unwrap_err();
    assert_eq!(e.message(), "Insufficient number of pncs, required: 2, available: 1");
    let m = vis.load(&bytes, None, None).unwrap();
    assert_eq!(m.ncs, vec![1]);
    vis.unload(&m).unwrap();
    vis.close().unwrap();
}

#[test]
fn shared_model_is_torn_down_at_zero() {
    let (rt, sim) = rt(&SUNDA);
    let m = rt.load(&model(1, &SUNDA), None, None).unwrap();
    let m2 = rt.share(&m).unwrap();
    rt.unload(&m).unwrap();
    assert_eq!(exec(&rt, &m2), NrtStatus::Success, "still referenced");
    rt.unload(&m2).unwrap();
    assert_eq!(rt.execute(&m2, &TensorSet::new(), &TensorSet::new()).unwrap_err().status, NrtStatus::InvalidHandle);
    assert_eq!(rt.loaded_models(), 0);
    let st = sim.stats();
    // The host-transfer rings stay mapped until close (tensor I/O may still use them).
    assert_eq!(st.device_bytes, 0, "after unload: {st:?}");
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "after close: {st:?}");
}

#[test]
fn async_queue_full_7_empty_15_and_unrecoverable_101() {
    let slow = SimConfig { op_latency_ns: 2_000_000, ..SimConfig::new(&SUNDA).timing(Timing::Threaded) };
    let (rt, sim) = rt_with(
        slow,
        RuntimeConfig { async_capacity: 2, exec_timeout: Duration::from_secs(5), poll: PollPolicy::Usleep1, ..cfg() },
    );
    let m = rt.load(&model(1, &SUNDA), None, None).unwrap();
    let (i, o) = io(&rt, &m);
    let t1 = rt.execute_async(&m, &i, &o).unwrap();
    assert_eq!(rt.poll(&t1), NrtStatus::QueueEmpty, "not done yet");
    let t2 = rt.execute_async(&m, &i, &o).unwrap();
    let e = rt.execute_async(&m, &i, &o).unwrap_err();
    assert_eq!(e.status, NrtStatus::QueueFull, "capacity 2: one running, one queued");
    assert_eq!(t1.wait(), NrtStatus::Success);
    assert_eq!(rt.poll(&t1), NrtStatus::Success);
    assert_eq!(t2.wait(), NrtStatus::Success);
    assert_eq!(o.get("output").unwrap().to_vec().unwrap(), vec![1u8; 128]);
    // A fatal execution poisons the execution unit: it returns its status, later submits 101.
    sim.inject("hang@nc0:pe".parse().unwrap());
    let t3 = rt.execute_async(&m, &i, &o).unwrap();
    assert_eq!(t3.wait(), NrtStatus::Timeout);
    let s = match rt.execute_async(&m, &i, &o) {
        Ok(t) => t.wait(),
        Err(e) => e.status,
    };
    assert_eq!(s, NrtStatus::ExecUnitUnrecoverable);
    assert_eq!(
        rt.execute(&m, &i, &o).unwrap().0,
        NrtStatus::ExecUnitUnrecoverable,
        "sync execute on the poisoned model"
    );
    rt.unload(&m).unwrap();
    assert_eq!(rt.workers(), 0, "no worker threads after unload");
    rt.close().unwrap();
}
