//! A large model on the simulator costs what its data costs (issue 33): a model with one 4 GiB
//! variable loads — the loader zeroes the variable first (memory reaches a new owner zeroed),
//! by DMA as on hardware — with the process's RSS under 256 MiB; the variable reads back as
//! zeros where nothing wrote it and data written into it round-trips; memory recycled to a new
//! owner is zeroed again and its host pages go back. One test in its own binary: VmRSS is the
//! whole process's. (The 8 GiB figures: `neuron-vfio bench large-var`, docs/performance.md.)

use std::sync::Arc;

use csr_maps::SUNDA;
use neff::builder::{self, VarDesc};
use neff::{Engine, VarKind};
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

const VAR: u64 = 4 << 30;
/// HBM per stack: the 4 GiB var takes the one 4 GiB buddy block beside the carve-out.
const HBM: u64 = 8 << 30;
const RSS_BUDGET_KIB: u64 = 256 << 10;

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value")
}

/// The 1-NC all-reduce model with `gradient_in` (the collective's source) grown to 4 GiB; the
/// collective reads its 32 elements at element `src_off` of it.
fn model(src_off: u64) -> Vec<u8> {
    let mut m = builder::single_nc_allreduce();
    let g = &mut m.graphs[0];
    g.vars[2] = VarDesc::f32("gradient_in", VarKind::TmpBuf, VAR / 4);
    let pe = g.engines.iter_mut().find(|e| e.kind == Engine::Pe).expect("PE program");
    // TRIGGER_COLLECTIVE's src_offset_elems (slot bytes 0x30..0x38).
    pe.code[0x30..0x38].copy_from_slice(&src_off.to_le_bytes());
    m.build().expect("build")
}

/// One execute with input k × 0.5; returns the output bytes.
fn run(rt: &Runtime, m: &runtime::ModelHandle) -> (Vec<u8>, Vec<u8>) {
    let input: Vec<u8> = (0..32).flat_map(|k| (k as f32 * 0.5 + 1.0).to_le_bytes()).collect();
    let ti = rt.alloc_tensor("input", 128, true, 0).unwrap();
    let to = rt.alloc_tensor("output", 128, true, 0).unwrap();
    ti.write(0, &input).unwrap();
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    i.add("input", ti);
    o.add("output", to.clone());
    let (st, _) = rt.execute(m, &i, &o).unwrap();
    assert_eq!(st, NrtStatus::Success);
    (input, to.to_vec().unwrap())
}

#[test]
fn a_4gib_variable_costs_the_host_what_is_written() {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(HBM)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(HBM), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();

    // In memory: the collective reads the far end of the var, which only the loader's zero
    // fill wrote. The fill reached the device (4 GiB of zeros DMA'd) and cost no host pages.
    let m = rt.load(&model(VAR / 4 - 32), None, None).unwrap();
    let st = sim.stats();
    assert!(st.device_bytes >= VAR as i64, "the var is allocated: {} bytes", st.device_bytes);
    assert!(st.hbm_zero_skipped_bytes >= VAR, "the var was zero-filled: {} bytes", st.hbm_zero_skipped_bytes);
    assert!(st.hbm_written_bytes < 64 << 20, "HBM written: {} bytes", st.hbm_written_bytes);
    let rss = vm_rss_kib();
    assert!(rss < RSS_BUDGET_KIB, "VmRSS {rss} KiB after loading a 4 GiB var (budget {RSS_BUDGET_KIB} KiB)");
    let (_, out) = run(&rt, &m);
    assert_eq!(out, vec![0u8; 128], "the var's far end reads as zeros");
    rt.unload(&m).unwrap();

    // Streamed (the CLI's path): data written into the var (the input DMA'd to its start)
    // round-trips through it to the output.
    let b = model(0);
    let m = rt.load_reader(&b[..], b.len() as u64, None, None).unwrap();
    let (input, out) = run(&rt, &m);
    assert_eq!(out, input, "data written into the 4 GiB var round-trips");
    let rss = vm_rss_kib();
    assert!(rss < RSS_BUDGET_KIB, "VmRSS {rss} KiB after the streamed load (budget {RSS_BUDGET_KIB} KiB)");
    rt.unload(&m).unwrap();

    // A new owner of the same memory: a 4 GiB device tensor (the same buddy block). Zeros
    // where nothing wrote; 32 MiB of data written at 1 GiB round-trips and costs about that.
    let t = rt.alloc_tensor("big", VAR, true, 0).unwrap();
    let at = t.dev_addr();
    let mut probe = vec![0xFFu8; 4096];
    for off in [0, 1 << 30, VAR - 4096] {
        t.read(off, &mut probe).unwrap();
        assert!(probe.iter().all(|&b| b == 0), "tensor byte range at {off} is not zero");
    }
    let before = vm_rss_kib();
    let data: Vec<u8> = (0..32u32 << 20).map(|i| (i % 253) as u8 + 1).collect();
    t.write(1 << 30, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    t.read(1 << 30, &mut back).unwrap();
    assert!(back == data, "32 MiB written at 1 GiB round-trip");
    drop((data, back));
    let written = vm_rss_kib();
    assert!(written >= before + (24 << 10), "VmRSS {before} → {written} KiB: the data costs host pages");
    assert!(written < RSS_BUDGET_KIB, "VmRSS {written} KiB with 32 MiB written (budget {RSS_BUDGET_KIB} KiB)");
    drop(t);

    // Recycled to the next owner: zeroed again (the data is gone) and its pages given back.
    let t = rt.alloc_tensor("big", VAR, true, 0).unwrap();
    assert_eq!(t.dev_addr(), at, "the new tensor reuses the freed block");
    for off in [1 << 30, (1 << 30) + (16 << 20), (1 << 30) + (32 << 20) - 4096] {
        t.read(off, &mut probe).unwrap();
        assert!(probe.iter().all(|&b| b == 0), "recycled bytes at {off} were not zeroed");
    }
    let st = sim.stats();
    assert!(st.hbm_dropped_bytes >= 30 << 20, "pages given back: {} bytes", st.hbm_dropped_bytes);
    let after = vm_rss_kib();
    assert!(after + (24 << 10) <= written, "VmRSS {written} → {after} KiB: zeroing gave the pages back");
    drop(t);
    rt.close().unwrap();
    let st = sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0));
}
