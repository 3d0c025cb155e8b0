//! Fuzz target for the whole load path: bytes → `Runtime::load` on a simulated CAYMAN device
//! (8 NCs), and, when the loader accepts them, one execute with every input zero-filled, then
//! the unload. The runtime must refuse or run every input without panicking, return from the
//! execute within its core timeout (libFuzzer's `-timeout` catches a hang), and leave the
//! device as it was: device memory and IOMMU mappings back to the baseline, and the device's
//! own ownership check (the NC region table) never refusing an access of an accepted model.
//!
//! The first byte picks a mode: even — the rest is a whole NEFF; odd — the rest is a tar
//! payload wrapped in a correct pkg-2 header (gzip + MD5) so the fuzzer reaches the manifests,
//! programs and staging without forging digests. One runtime serves every input.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

struct Bench {
    sim: SimDevice,
    rt: Runtime,
    baseline: (u64, i64),
}

fn bench() -> &'static Bench {
    static B: OnceLock<Bench> = OnceLock::new();
    B.get_or_init(|| {
        let sim = SimDevice::new(SimConfig::new(&csr_maps::CAYMAN).timing(Timing::Inline).hbm_bytes(1 << 30))
            .expect("simulator");
        let rt = Runtime::new();
        let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(20), ..RuntimeConfig::default() };
        let opts = hal::DeviceOptions {
            hbm_limit: Some(1 << 30),
            poll: hal::fwio::PollTiming::fast(),
            ..Default::default()
        };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).expect("runtime");
        let st = sim.stats();
        Bench { baseline: (st.iommu_mappings, st.device_bytes), sim, rt }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let wrapped;
    let bytes = if mode & 1 == 0 {
        rest
    } else {
        let d = neff::builder::ModelDesc::new("fuzz");
        match neff::builder::wrap_archive(rest, d.header(), &neff::builder::WriteOptions::default()) {
            Ok(b) => {
                wrapped = b;
                &wrapped
            }
            Err(_) => return,
        }
    };
    let b = bench();
    let Ok(m) = b.rt.load(bytes, None, None) else { return };
    let refused = b.sim.stats().oob_refused;
    let nc = m.ncs.first().copied().unwrap_or(0);
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    let mut bound = true;
    for (set, infos) in [(&mut i, &m.inputs), (&mut o, &m.outputs)] {
        for t in infos.iter() {
            match b.rt.alloc_tensor(&t.name, t.size.max(1), true, nc) {
                Ok(x) => set.add(&t.name, x),
                Err(_) => bound = false,
            }
        }
    }
    if bound {
        if let Ok((st, _)) = b.rt.execute(&m, &i, &o) {
            assert_ne!(st, NrtStatus::ExecOob, "an accepted model's execution was out of bounds");
        }
    }
    assert_eq!(b.sim.stats().oob_refused, refused, "the region table refused an access of an accepted model");
    drop((i, o));
    b.rt.unload(&m).expect("unload");
    let st = b.sim.stats();
    assert_eq!((st.iommu_mappings, st.device_bytes), b.baseline, "device state not back to the baseline");
});
