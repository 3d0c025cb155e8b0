//! Logical NeuronCores (docs/lifecycle.md, "Logical NeuronCores"): the runtime counts, places
//! and reports logical cores of LNC physical cores; a NEFF runs on logical cores of the size it
//! was compiled for, its graphs on the logical core's physical cores, and the two cores'
//! statuses resolve by libnrt's priority into one result.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::env::{LncRequest, LNC_VAR, VIRTUAL_CORE_SIZE_VAR};
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

fn start(arch: &'static Arch, cfg: RuntimeConfig) -> Result<(Runtime, SimDevice), runtime::RtError> {
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts)?;
    Ok((rt, sim))
}

fn lnc(size: u32) -> RuntimeConfig {
    RuntimeConfig {
        lnc: Some(LncRequest { size, var: LNC_VAR }),
        exec_timeout: Duration::from_millis(500),
        ..RuntimeConfig::default()
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn exec(rt: &Runtime, m: &ModelHandle) -> (NrtStatus, Vec<f32>, Vec<f32>) {
    let input: Vec<f32> = (0..32).map(|i| i as f32 * 0.5 - 3.0).collect();
    let ti = rt.alloc_tensor("input", 128, false, m.vncs[0]).unwrap();
    ti.write(0, &f32s(&input)).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.vncs[0]).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to.clone());
    let (s, _) = rt.execute(m, &ins, &outs).unwrap();
    let out = to.to_vec().unwrap().chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (s, input, out)
}

#[test]
fn counts_per_arch_and_size() {
    // No request: the arch's default (cayman, mariana 2; sunda 1).
    for (arch, physical, logical) in [(&SUNDA, 2, 2), (&CAYMAN, 8, 4), (&MARIANA, 8, 4)] {
        let (rt, _sim) = start(arch, RuntimeConfig::default()).unwrap();
        assert_eq!(rt.nc_count(), physical, "{arch}");
        assert_eq!(rt.lnc(), physical / logical, "{arch}");
        assert_eq!(rt.logical_count(), logical, "{arch}");
        assert_eq!(rt.visible_logical().len(), logical, "{arch}");
        rt.close().unwrap();
    }
    // LNC=1 on cayman: eight logical cores.
    let (rt, _sim) = start(&CAYMAN, lnc(1)).unwrap();
    assert_eq!(rt.logical_count(), 8);
    rt.close().unwrap();
    // NEURON_RT_NUM_CORES=2: two visible at either size.
    for size in [1, 2] {
        let (rt, _sim) = start(&CAYMAN, RuntimeConfig { num_cores: Some(2), ..lnc(size) }).unwrap();
        assert_eq!(rt.visible_logical().len(), 2, "LNC={size}");
        rt.close().unwrap();
    }
    // LNC=2 on sunda: refused naming the variable, the arch and the sizes it has.
    let e = start(&SUNDA, lnc(2)).err().expect("sunda has no LNC=2");
    assert_eq!(e.status, NrtStatus::Invalid);
    let msg = e.to_string();
    assert!(msg.contains("NEURON_LOGICAL_NC_CONFIG=2") && msg.contains("sunda"), "{msg}");
    let vcs = RuntimeConfig { lnc: Some(LncRequest { size: 2, var: VIRTUAL_CORE_SIZE_VAR }), ..Default::default() };
    let e = start(&SUNDA, vcs).err().expect("sunda has no LNC=2");
    assert!(e.to_string().contains("NEURON_RT_VIRTUAL_CORE_SIZE=2"), "{e}");
}

#[test]
fn visible_core_one_at_lnc2_is_physical_two_and_three() {
    let cfg = RuntimeConfig { visible_cores: Some(vec![1]), ..lnc(2) };
    let (rt, _sim) = start(&CAYMAN, cfg).unwrap();
    assert_eq!(rt.visible_logical(), vec![1]);
    let bytes = builder::allreduce_model_lnc(1, 2, "cayman").build().unwrap();
    let m = rt.load(&bytes, None, None).unwrap();
    assert_eq!(m.ncs, vec![2, 3], "logical core 1 is physical cores 2-3");
    assert_eq!(m.vncs, vec![0], "vNC 0 of the process is its first visible logical core");
    let (s, input, out) = exec(&rt, &m);
    assert_eq!(s, NrtStatus::Success);
    assert_eq!(out, input.iter().map(|x| x * 2.0).collect::<Vec<_>>());
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

#[test]
fn an_lnc2_neff_runs_exact_on_one_logical_core_of_each_trn2_and_trn3() {
    for arch in [&CAYMAN, &MARIANA] {
        let (rt, sim) = start(arch, RuntimeConfig::default()).unwrap();
        for vnc in 0..4 {
            let bytes = builder::allreduce_model_lnc(1, 2, arch.name).build().unwrap();
            let m = rt.load(&bytes, Some(vnc), None).unwrap();
            assert_eq!(m.ncs, vec![2 * vnc, 2 * vnc + 1], "{arch} vnc {vnc}");
            assert_eq!(m.vncs, vec![vnc]);
            for _ in 0..2 {
                let (s, input, out) = exec(&rt, &m);
                assert_eq!(s, NrtStatus::Success, "{arch}");
                assert_eq!(out, input.iter().map(|x| x * 2.0).collect::<Vec<_>>(), "{arch} vnc {vnc}");
            }
            rt.unload(&m).unwrap();
        }
        // Two logical cores of one model: four physical cores.
        let bytes = builder::allreduce_model_lnc(2, 2, arch.name).build().unwrap();
        let m = rt.load(&bytes, Some(1), None).unwrap();
        assert_eq!((m.ncs.clone(), m.vncs.clone()), (vec![2, 3, 4, 5], vec![1, 2]));
        let (s, input, out) = exec(&rt, &m);
        assert_eq!(s, NrtStatus::Success);
        assert_eq!(out, input.iter().map(|x| x * 4.0).collect::<Vec<_>>());
        rt.unload(&m).unwrap();
        // Past the last logical core: libnrt's "Insufficient pncs".
        let one = builder::allreduce_model_lnc(1, 2, arch.name).build().unwrap();
        let e = rt.load(&one, Some(4), None).unwrap_err();
        assert_ne!(e.status, NrtStatus::Success);
        rt.close().unwrap();
        let st = sim.stats();
        assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "{arch}: {st:?}");
    }
}

#[test]
fn a_neff_of_another_lnc_is_refused_naming_both_sizes() {
    // An LNC=1 NEFF at the cayman default (2), and an LNC=2 NEFF at LNC=1.
    for (runtime_lnc, neff_lnc) in [(2u32, 1u32), (1, 2)] {
        let (rt, _sim) = start(&CAYMAN, lnc(runtime_lnc)).unwrap();
        let bytes = builder::allreduce_model_lnc(1, neff_lnc, "cayman").build().unwrap();
        let e = rt.load(&bytes, None, None).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{neff_lnc} physical core")) && msg.contains(&format!("LNC={runtime_lnc}")),
            "both sizes named: {msg}"
        );
        rt.close().unwrap();
    }
}

/// A fault on either physical core of the logical core gives the status libnrt's priority
/// resolves (`nrt_get_status_priority` over the two cores' `exec_rets`).
#[test]
fn a_fault_on_either_physical_core_resolves_by_priority() {
    let bytes = builder::allreduce_model_lnc(1, 2, "cayman").build().unwrap();
    let cases = [
        ("fp-nan", ":pe", NrtStatus::ExecCompletedWithNumErr),
        ("oob", ":pool", NrtStatus::ExecOob),
        ("nc-ue", ":act", NrtStatus::ExecHwErrNcUe),
        ("dma-abort", ":q0", NrtStatus::ExecHwErrDmaAbort),
    ];
    for (kind, target, want) in cases {
        for core in 0..2 {
            let (rt, sim) = start(&CAYMAN, RuntimeConfig::default()).unwrap();
            let m = rt.load(&bytes, Some(1), None).unwrap();
            assert_eq!(m.ncs, vec![2, 3]);
            assert_eq!(exec(&rt, &m).0, NrtStatus::Success, "clean first");
            let phys = m.ncs[core];
            sim.inject(format!("{kind}@nc{phys}{target}").parse::<FaultSpec>().unwrap());
            let (s, _, _) = exec(&rt, &m);
            assert_eq!(s, want, "{kind} on physical core {phys} (logical 1, core {core} of 2)");
            rt.unload(&m).unwrap();
            rt.close().unwrap();
        }
    }
    // Both cores fault at once: the higher priority wins whichever core reports it.
    let (rt, sim) = start(&CAYMAN, RuntimeConfig::default()).unwrap();
    let m = rt.load(&bytes, Some(0), None).unwrap();
    sim.inject("fp-nan@nc0:pe".parse::<FaultSpec>().unwrap());
    sim.inject("nc-ue@nc1:act".parse::<FaultSpec>().unwrap());
    assert_eq!(exec(&rt, &m).0, NrtStatus::ExecHwErrNcUe);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}
