//! Structure-aware mutation of the confinement classes: DMAMEMCPY/DIRECT2D legs (raw and
//! var-relative addresses, every step sign, element sizes), WRITE destinations (guarded and
//! allowed registers, raw addresses) and added vars of every kind and size, appended to a
//! hostile model on NC 1 next to a victim model on NC 0. Whatever the loader accepts runs;
//! nothing panics, the victim's tensors keep their bytes and its next run is correct, the
//! device's own check (the NC's ownership region table, enabled for every model) never refuses
//! an access of a model the loader accepted (either would be an escape: 0 allowed), and
//! nothing leaks. `HOSTILE_CASES` raises the case count for long local runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use csr_maps::SUNDA;
use neff::builder;
use platform::Platform;
use proptest::prelude::*;
use runtime::{Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

#[path = "support/hostile_gen.rs"]
mod hostile_gen;
use hostile_gen::{build, op};

static CASES: AtomicU64 = AtomicU64::new(0);
static LOADED: AtomicU64 = AtomicU64::new(0);
static RAN_OK: AtomicU64 = AtomicU64::new(0);

fn cases() -> u32 {
    std::env::var("HOSTILE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
}

/// One execution of the all-reduce model: input k as f32, returns the output bytes.
fn run(rt: &Runtime, m: &runtime::ModelHandle, nc: usize) -> Result<Vec<u8>, runtime::NrtStatus> {
    let ti = rt.alloc_tensor("input", 128, true, nc).map_err(|e| e.status)?;
    let to = rt.alloc_tensor("output", 128, true, nc).map_err(|e| e.status)?;
    let data: Vec<u8> = (0..32).flat_map(|k| (k as f32).to_le_bytes()).collect();
    ti.write(0, &data).map_err(|e| e.status)?;
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    i.add("input", ti);
    o.add("output", to.clone());
    let (st, _) = rt.execute(m, &i, &o).map_err(|e| e.status)?;
    if st != runtime::NrtStatus::Success {
        return Err(st);
    }
    let mut out = vec![0u8; 128];
    to.read(0, &mut out).map_err(|e| e.status)?;
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn hostile_classes_never_escape(ops in proptest::collection::vec(op(), 1..5)) {
        let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 26)).unwrap();
        let rt = Runtime::new();
        let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(50), ..RuntimeConfig::physical() };
        let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
        let victim = rt.load(&builder::single_nc_allreduce().build().unwrap(), Some(0), None).unwrap();
        let want = run(&rt, &victim, 0).unwrap();
        // A victim tensor with a pattern, on NC 0's memory.
        let vt = rt.alloc_tensor("victim", 4096, true, 0).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|k| (k * 7 + 3) as u8).collect();
        vt.write(0, &pattern).unwrap();
        if let Some(bytes) = build(&ops) {
            if let Ok(model) = rt.load(&bytes, Some(1), None) {
                LOADED.fetch_add(1, Ordering::Relaxed);
                let refused = sim.stats().oob_refused;
                let r = run(&rt, &model, 1);
                if r.is_ok() {
                    RAN_OK.fetch_add(1, Ordering::Relaxed);
                }
                // The loader accepted it: the device's region table must find nothing to refuse.
                prop_assert_eq!(sim.stats().oob_refused, refused, "the region table refused an access of an accepted model");
                prop_assert_ne!(r, Err(runtime::NrtStatus::ExecOob));
                rt.unload(&model).unwrap();
            }
        }
        let mut now = vec![0u8; 4096];
        vt.read(0, &mut now).unwrap();
        prop_assert!(now == pattern, "victim tensor changed");
        let again = run(&rt, &victim, 0);
        prop_assert_eq!(again, Ok(want), "victim's next run");
        rt.unload(&victim).unwrap();
        drop(vt);
        rt.close().unwrap();
        let st = sim.stats();
        prop_assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0));
        let n = CASES.fetch_add(1, Ordering::Relaxed) + 1;
        if std::env::var_os("HOSTILE_CASES").is_some() && n.is_multiple_of(2000) {
            eprintln!(
                "hostile_classes: {n} cases, {} loaded, {} ran to NRT_SUCCESS, 0 escapes (victim intact, no region-table refusal)",
                LOADED.load(Ordering::Relaxed),
                RAN_OK.load(Ordering::Relaxed)
            );
        }
    }
}
