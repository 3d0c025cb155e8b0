//! 8 threads × 1,000 executes on 8 NCs of a cayman simulator: no lost or duplicated
//! completion (every execution's output is the input it was given).

use std::sync::Arc;

use csr_maps::CAYMAN;
use neff::builder;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

#[test]
fn eight_threads_thousand_executes_each() {
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Arc::new(Runtime::new());
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    let mut d = builder::single_nc_allreduce();
    d.target = "cayman".into();
    let bytes = d.build().unwrap();
    let models: Vec<_> = (0..8).map(|nc| rt.load(&bytes, Some(nc), None).unwrap()).collect();
    let iters = 1000u32;
    let handles: Vec<_> = models
        .iter()
        .cloned()
        .enumerate()
        .map(|(k, m)| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let ti = rt.alloc_tensor("input", 128, true, m.ncs[0]).unwrap();
                let to = rt.alloc_tensor("output", 128, true, m.ncs[0]).unwrap();
                let mut ins = TensorSet::new();
                ins.add("input", ti.clone());
                let mut outs = TensorSet::new();
                outs.add("output", to.clone());
                let mut ok = 0u32;
                for i in 0..iters {
                    // A distinct, checkable value per (thread, iteration).
                    let v = (k as u32) << 20 | i;
                    let data: Vec<u8> = (0..32u32).flat_map(|j| (v.wrapping_add(j) as f32).to_le_bytes()).collect();
                    ti.write(0, &data).unwrap();
                    let (s, _) = rt.execute(&m, &ins, &outs).unwrap();
                    assert_eq!(s, NrtStatus::Success, "thread {k} iteration {i}");
                    assert_eq!(to.to_vec().unwrap(), data, "thread {k} iteration {i}: wrong or stale output");
                    ok += 1;
                }
                ok
            })
        })
        .collect();
    let total: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 8 * iters);
    let st = sim.stats();
    assert_eq!(st.collectives, 8 * iters as u64, "exactly one collective per execution");
    for m in &models {
        rt.unload(m).unwrap();
    }
    rt.close().unwrap();
}
