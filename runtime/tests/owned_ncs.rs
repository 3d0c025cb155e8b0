//! Several runtimes on one device, each owning some of its NCs and a slice of its device
//! memory (`hal::DeviceOptions::owned_ncs`, `hbm_ranges`: a process's view of a shared device,
//! docs/sharing.md): opened and executing at the same time, none disturbs another — each only
//! initialises its own NCs' engines and queues and allocates only in its own memory.

use std::sync::Arc;

use csr_maps::CAYMAN;
use neff::builder;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn eight_runtimes_one_nc_each_on_one_device() {
    let arch = &CAYMAN;
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
    // The broker's part: device bring-up once.
    let owner = hal::Device::open(
        Arc::new(sim.clone()) as Arc<dyn Platform>,
        hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() },
    )
    .unwrap();
    owner.init().unwrap();
    let mut d = builder::single_nc_allreduce();
    d.target = arch.name.to_string();
    let bytes = d.build().unwrap();
    let ncs = arch.counts.ncs as usize;
    // Each NC gets an eighth of its channel's first 64 MiB.
    let grants: Vec<hal::DevBuf> =
        (0..ncs).map(|nc| owner.alloc_device(owner.hbm_for_nc(nc), 8 << 20, 8 << 20).unwrap()).collect();
    let barrier = Arc::new(std::sync::Barrier::new(ncs));
    let threads: Vec<_> = (0..ncs)
        .map(|nc| {
            let sim = sim.clone();
            let bytes = bytes.clone();
            let barrier = barrier.clone();
            let g = (grants[nc].chan(), grants[nc].addr(), grants[nc].len());
            std::thread::spawn(move || {
                let rt = Runtime::new();
                let opts = hal::DeviceOptions {
                    owned_ncs: Some(nc..nc + 1),
                    hbm_ranges: Some(vec![hal::HbmRange { chan: g.0, addr: g.1, len: g.2 }]),
                    ..Default::default()
                };
                let cfg = RuntimeConfig { visible_cores: Some(vec![nc]), ..RuntimeConfig::default() };
                // All open together: one runtime's init must not disturb another's NCs.
                barrier.wait();
                rt.init_devices(vec![(Arc::new(sim) as Arc<dyn Platform>, opts)], cfg).unwrap();
                let m = rt.load(&bytes, None, None).unwrap();
                assert_eq!(m.ncs, vec![nc]);
                for round in 0..20 {
                    let input: Vec<f32> = (0..32).map(|i| (nc * 100 + round) as f32 + i as f32 * 0.5).collect();
                    let ti = rt.alloc_tensor("input", 128, round % 2 == 0, 0).unwrap();
                    let to = rt.alloc_tensor("output", 128, round % 2 == 0, 0).unwrap();
                    ti.write(0, &f32s(&input)).unwrap();
                    let mut ins = TensorSet::new();
                    ins.add("input", ti);
                    let mut outs = TensorSet::new();
                    outs.add("output", to.clone());
                    let (s, _) = rt.execute(&m, &ins, &outs).unwrap();
                    assert_eq!(s, NrtStatus::Success, "nc{nc} round {round}");
                    let out = to.to_vec().unwrap();
                    assert_eq!(out, f32s(&input), "nc{nc} round {round}");
                }
                rt.unload(&m).unwrap();
                rt.close().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Another process's NC and the whole device are refused to an owner of one NC.
    let one = hal::Device::open(
        Arc::new(sim.clone()) as Arc<dyn Platform>,
        hal::DeviceOptions { owned_ncs: Some(2..3), hbm_ranges: Some(Vec::new()), ..Default::default() },
    )
    .unwrap();
    assert!(matches!(one.reset_nc(3), Err(hal::HalError::NotOwned { .. })));
    assert!(matches!(one.reset_device(), Err(hal::HalError::NotOwned { .. })));
    assert!(one.alloc_device(0, 4096, 64).is_err(), "no memory was granted");
    drop(grants);
}
