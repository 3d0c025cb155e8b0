//! Hostile but parseable models: random access patterns, sizes, semaphores and slot bytes
//! must make load fail cleanly or run to some status — never panic, never leak.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::SUNDA;
use neff::builder;
use platform::Platform;
use proptest::prelude::*;
use runtime::{Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

#[derive(Debug, Clone)]
struct Mutation {
    from: Option<Vec<(u64, i64)>>,
    to: Option<Vec<(u64, i64)>>,
    sem: Option<Option<u32>>,
    coll: Option<(u64, u32)>,
    slot_bytes: Vec<(usize, u8)>,
    var_size: Option<u64>,
}

fn pattern() -> impl Strategy<Value = Vec<(u64, i64)>> {
    proptest::collection::vec((0u64..260, -260i64..260), 0..4)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (
        proptest::option::weighted(0.3, pattern()),
        proptest::option::weighted(0.3, pattern()),
        proptest::option::weighted(0.3, proptest::option::of(0u32..300)),
        proptest::option::weighted(0.3, (0u64..100, 0u32..6)),
        proptest::collection::vec((0usize..192, any::<u8>()), 0..3),
        proptest::option::weighted(0.3, 0u64..512),
    )
        .prop_map(|(from, to, sem, coll, slot_bytes, var_size)| Mutation {
            from,
            to,
            sem,
            coll,
            slot_bytes,
            var_size,
        })
}

fn build(m: &Mutation) -> Option<Vec<u8>> {
    let mut d = builder::single_nc_allreduce();
    let g = d.graphs.first_mut()?;
    if let (Some(v), Some(s)) = (g.vars.get_mut(2), m.var_size) {
        v.size = s;
    }
    if let (Some(q), Some(s)) = (g.queues.first_mut(), m.sem) {
        q.semaphore = s;
    }
    for e in &mut g.engines {
        for b in &mut e.dma_blocks {
            for desc in &mut b.descs {
                if let Some(p) = &m.from {
                    desc.from_sizes = p.iter().map(|x| x.0).collect();
                    desc.from_steps = p.iter().map(|x| x.1).collect();
                }
                if let Some(p) = &m.to {
                    desc.to_sizes = p.iter().map(|x| x.0).collect();
                    desc.to_steps = p.iter().map(|x| x.1).collect();
                }
            }
        }
        // The PE collective's element count and input var; then arbitrary program bytes
        // (never the word-length byte, which the reader gates).
        if let (neff::Engine::Pe, Some((n, var)), true) = (e.kind, m.coll, e.code.len() >= 64) {
            e.code[0x18..0x20].copy_from_slice(&n.to_le_bytes());
            e.code[0x10..0x14].copy_from_slice(&var.to_le_bytes());
        }
        for &(at, b) in &m.slot_bytes {
            if at < e.code.len() && at % 64 != 1 {
                e.code[at] = b;
            }
        }
    }
    d.build().ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn hostile_models_never_panic_or_leak(muts in proptest::collection::vec(mutation(), 1..4)) {
        let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 26)).unwrap();
        let rt = Runtime::new();
        let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(20), ..RuntimeConfig::physical() };
        let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
        for m in &muts {
            let Some(bytes) = build(m) else { continue };
            if let Ok(model) = rt.load(&bytes, None, None) {
                let ti = rt.alloc_tensor("input", 128, false, 0).unwrap();
                let to = rt.alloc_tensor("output", 128, false, 0).unwrap();
                let mut i = TensorSet::new();
                i.add("input", ti);
                let mut o = TensorSet::new();
                o.add("output", to);
                let _ = rt.execute(&model, &i, &o);
                rt.unload(&model).unwrap();
            }
        }
        rt.close().unwrap();
        let st = sim.stats();
        prop_assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0));
    }
}
