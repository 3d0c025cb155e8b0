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
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::default(), opts).unwrap();
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
}
