//! Load / execute / unload on the simulator, end to end.

use std::sync::Arc;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

fn rt(arch: &'static Arch, timing: Timing) -> (Runtime, SimDevice) {
    let sim = SimDevice::new(SimConfig::new(arch).timing(timing).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    (rt, sim)
}

fn model(mut d: builder::ModelDesc, arch: &Arch) -> Vec<u8> {
    d.target = arch.name.to_string();
    d.build().unwrap()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run_allreduce(
    rt: &Runtime,
    m: &runtime::ModelHandle,
    on_device: bool,
    seed: f32,
) -> (NrtStatus, Vec<f32>, Vec<f32>) {
    let input: Vec<f32> = (0..32).map(|i| seed + i as f32 * 0.5).collect();
    let nc = m.ncs[0];
    let ti = rt.alloc_tensor("input", 128, on_device, nc).unwrap();
    let to = rt.alloc_tensor("output", 128, on_device, nc).unwrap();
    ti.write(0, &f32s(&input)).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to.clone());
    let (s, _) = rt.execute(m, &ins, &outs).unwrap();
    let out: Vec<f32> = to.to_vec().unwrap().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (s, input, out)
}

#[test]
fn single_nc_allreduce_identity_all_arches() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let bytes = model(builder::single_nc_allreduce(), arch);
        for timing in [Timing::Inline, Timing::Threaded] {
            let (rt, sim) = rt(arch, timing);
            let m = rt.load(&bytes, None, None).unwrap();
            for round in 0..3 {
                let (s, input, out) = run_allreduce(&rt, &m, round % 2 == 0, round as f32);
                assert_eq!(s, NrtStatus::Success, "{arch} {timing:?} round {round}");
                assert_eq!(out, input);
            }
            rt.unload(&m).unwrap();
            rt.close().unwrap();
            let st = sim.stats();
            assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "{arch}: {st:?}");
        }
    }
}

#[test]
fn two_nc_allreduce_sums() {
    for arch in [&SUNDA, &CAYMAN] {
        let bytes = model(builder::two_nc_allreduce(), arch);
        let (rt, _sim) = rt(arch, Timing::Threaded);
        let m = rt.load(&bytes, None, None).unwrap();
        assert_eq!(m.ncs.len(), 2);
        let (s, input, out) = run_allreduce(&rt, &m, false, 1.0);
        assert_eq!(s, NrtStatus::Success);
        assert_eq!(out, input.iter().map(|x| x * 2.0).collect::<Vec<_>>());
        rt.unload(&m).unwrap();
        rt.close().unwrap();
    }
}

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn committed_examples_are_current_and_run_on_every_arch() {
    let one = std::fs::read(examples().join("allreduce_1nc.neff")).unwrap();
    let two = std::fs::read(examples().join("allreduce_2nc.neff")).unwrap();
    let mut d1 = builder::allreduce_model(1);
    d1.target = "*".into();
    let mut d2 = builder::allreduce_model(2);
    d2.target = "*".into();
    assert!(one == d1.build().unwrap(), "examples/allreduce_1nc.neff is stale: run the make_examples example");
    assert!(two == d2.build().unwrap(), "examples/allreduce_2nc.neff is stale");
    let lnc2 = std::fs::read(examples().join("allreduce_lnc2.neff")).unwrap();
    assert!(lnc2 == builder::allreduce_model_lnc(1, 2, "*").build().unwrap(), "examples/allreduce_lnc2.neff is stale");
    let input = std::fs::read(examples().join("input_32xf32.bin")).unwrap();
    let want: Vec<f32> = input.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (rt, sim) = rt(arch, Timing::Threaded);
        for (bytes, factor) in [(&one, 1.0f32), (&two, 2.0)] {
            let m = rt.load(bytes, None, None).unwrap();
            let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
            ti.write(0, &input).unwrap();
            let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
            let mut ins = TensorSet::new();
            ins.add("input", ti);
            let mut outs = TensorSet::new();
            outs.add("output", to.clone());
            let (s, _) = rt.execute(&m, &ins, &outs).unwrap();
            assert_eq!(s, NrtStatus::Success);
            let out: Vec<f32> =
                to.to_vec().unwrap().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            assert_eq!(out, want.iter().map(|x| x * factor).collect::<Vec<_>>(), "{arch} x{factor}");
            rt.unload(&m).unwrap();
        }
        rt.close().unwrap();
        let st = sim.stats();
        assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0));
    }
    // The LNC=2 example at the Trn2/Trn3 default: one logical core, twice the input.
    for arch in [&CAYMAN, &MARIANA] {
        let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
        let rt = Runtime::new();
        let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::default(), opts).unwrap();
        let m = rt.load(&lnc2, None, None).unwrap();
        assert_eq!((m.vncs.len(), m.ncs.len()), (1, 2), "{arch}");
        let ti = rt.alloc_tensor("input", 128, false, m.vncs[0]).unwrap();
        ti.write(0, &input).unwrap();
        let to = rt.alloc_tensor("output", 128, false, m.vncs[0]).unwrap();
        let mut ins = TensorSet::new();
        ins.add("input", ti);
        let mut outs = TensorSet::new();
        outs.add("output", to.clone());
        assert_eq!(rt.execute(&m, &ins, &outs).unwrap().0, NrtStatus::Success);
        let out: Vec<f32> =
            to.to_vec().unwrap().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(out, want.iter().map(|x| x * 2.0).collect::<Vec<_>>(), "{arch} LNC=2");
        rt.unload(&m).unwrap();
        rt.close().unwrap();
    }
}

#[test]
fn interrupt_poll_policy() {
    use runtime::PollPolicy;
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let cfg = RuntimeConfig {
        poll: PollPolicy::Interrupt,
        exec_timeout: std::time::Duration::from_millis(1000),
        ..RuntimeConfig::physical()
    };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    let m = rt.load(&model(builder::single_nc_allreduce(), &CAYMAN), None, None).unwrap();
    for round in 0..5 {
        let (s, input, out) = run_allreduce(&rt, &m, false, round as f32);
        assert_eq!(s, NrtStatus::Success);
        assert_eq!(out, input);
    }
    // A device that never finishes still times out (the wait is bounded).
    sim.inject("hang@nc0:dve".parse().unwrap());
    let (s, _, _) = run_allreduce(&rt, &m, false, 9.0);
    assert_eq!(s, NrtStatus::Timeout);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

#[test]
fn ucode_libraries_are_staged_on_a_claimed_q7_core() {
    use csr_maps::consts::q7 as q7c;
    use csr_maps::formats::ucpl::UcplHeader;
    let (rt, sim) = rt(&SUNDA, Timing::Inline);
    let lib = |size: usize| {
        let h = UcplHeader::for_segments(0x1000, (size as u32).saturating_sub(0x1020), 0x100_0000, 0, 0x100_0000);
        let mut img = h.encode().to_vec();
        img.resize(h.image_size() as usize, 0x90);
        img
    };
    let with_lib = |content: Vec<u8>| {
        let mut d = builder::single_nc_allreduce();
        d.target = "sunda".into();
        d.graphs[0].ucode_libs.push(builder::UcodeLibDesc {
            name: "ext".into(),
            library: "sg00/ext.ucpl".into(),
            version: "1.0.0.0".into(),
            opcode: 0x40,
            cpu_id: 0,
            total_cpus: 8,
            functions: vec![("custom_add".into(), 0xF0, Some(1))],
            content,
        });
        d.build().unwrap()
    };
    let claim = || {
        let bar = sim.bar(0).unwrap();
        csr_maps::Regs::new(&SUNDA, bar.as_ref()).q7(0).unwrap().claim().read().unwrap().0
    };
    let m = rt.load(&with_lib(lib(0x8000)), None, None).unwrap();
    assert_eq!(claim(), q7c::CLAIMED, "Q7 pool core 0 claimed while the model is loaded");
    let (s, input, out) = run_allreduce(&rt, &m, false, 1.0);
    assert_eq!((s, out), (NrtStatus::Success, input));
    rt.unload(&m).unwrap();
    assert_eq!(claim(), q7c::READY, "released at unload");
    // 64 KiB + 1: refused, and the failed load leaves nothing behind.
    let e = rt.load(&with_lib(lib(0x10001)), None, None).unwrap_err();
    assert_eq!(e.status, NrtStatus::Resource, "{e}");
    assert_eq!(claim(), q7c::READY);
    let st = sim.stats();
    // The host-transfer rings stay mapped until close.
    assert_eq!(st.device_bytes, 0, "failed load leaked: {st:?}");
    // Not a prelinked image.
    let e = rt.load(&with_lib(b"\x7fELF not prelinked".to_vec()), None, None).unwrap_err();
    assert_eq!(e.status, NrtStatus::Invalid);
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "after close: {st:?}");
}

#[test]
fn failed_load_unwinds_everything() {
    let (rt, sim) = rt(&CAYMAN, Timing::Threaded);
    let mut d = builder::single_nc_allreduce();
    d.target = "cayman".into();
    d.graphs[0].vars.push(builder::VarDesc::new("huge", neff::VarKind::TmpBuf, 1 << 30));
    let e = rt.load(&d.build().unwrap(), None, None).unwrap_err();
    assert_eq!(e.status, NrtStatus::Resource, "{e}");
    // Nothing of the model is left; the device's own transfer rings stay mapped until close.
    let st = sim.stats();
    assert_eq!(st.device_bytes, 0, "{st:?}");
    assert_eq!(rt.workers(), 0);
    // The NC is free again.
    let m = rt.load(&model(builder::single_nc_allreduce(), &CAYMAN), Some(0), None).unwrap();
    let (s, input, out) = run_allreduce(&rt, &m, true, 3.0);
    assert_eq!((s, out), (NrtStatus::Success, input));
    rt.unload(&m).unwrap();
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "after close: {st:?}");
}

/// Several async requests queued at once: each runs with its own tensors, in order, and
/// a sync execute in between waits for the model to be free.
#[test]
fn queued_async_requests_each_get_their_own_result() {
    let (rt, _sim) = rt(&CAYMAN, Timing::Threaded);
    let m = rt.load(&model(builder::single_nc_allreduce(), &CAYMAN), None, None).unwrap();
    let mut pending = Vec::new();
    for k in 0..6u8 {
        let ti = rt.alloc_tensor("input", 128, k % 2 == 0, m.ncs[0]).unwrap();
        ti.write(0, &[k + 1; 128]).unwrap();
        let to = rt.alloc_tensor("output", 128, k % 2 == 1, m.ncs[0]).unwrap();
        let mut ins = TensorSet::new();
        ins.add("input", ti);
        let mut outs = TensorSet::new();
        outs.add("output", to.clone());
        pending.push((k, rt.execute_async(&m, &ins, &outs).unwrap(), to));
    }
    let (s, input, out) = run_allreduce(&rt, &m, false, 5.0);
    assert_eq!((s, out), (NrtStatus::Success, input));
    for (k, t, to) in pending {
        assert_eq!(t.wait(), NrtStatus::Success, "request {k}");
        assert_eq!(to.to_vec().unwrap(), vec![k + 1; 128], "request {k} got another request's data");
    }
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}
