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

/// A simulated device and its owner's handle (the broker's part: the device brought up once).
fn owned_device(arch: &'static csr_maps::Arch) -> (SimDevice, hal::Device) {
    let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
    let owner = hal::Device::open(
        Arc::new(sim.clone()) as Arc<dyn Platform>,
        hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() },
    )
    .unwrap();
    owner.init().unwrap();
    (sim, owner)
}

#[test]
fn eight_runtimes_one_nc_each_on_one_device() {
    let arch = &CAYMAN;
    // The broker's part: device bring-up once.
    let (sim, owner) = owned_device(arch);
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
                let cfg = RuntimeConfig { visible_cores: Some(vec![nc]), ..RuntimeConfig::physical() };
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

/// A firmware gate that records what it is asked and answers as the broker would after
/// doing it (the firmware part of a reset; a FW-IO response).
#[derive(Default)]
struct RecordingGate {
    resets: std::sync::Mutex<Vec<u32>>,
    requests: std::sync::Mutex<Vec<(u8, Vec<u8>)>>,
}

impl hal::FirmwareGate for RecordingGate {
    fn reset_ncs(&self, mask: u32) -> hal::Result<()> {
        platform::sync::lock(&self.resets).push(mask);
        Ok(())
    }
    fn request(&self, cmd: u8, payload: &[u8]) -> hal::Result<Vec<u8>> {
        platform::sync::lock(&self.requests).push((cmd, payload.to_vec()));
        Err(hal::HalError::Owner { status: NrtStatus::Timeout, message: "mailbox busy".into() })
    }
}

/// On a shared device the one firmware mailbox is its owner's: an NC reset and a FW-IO
/// request of a process owning NCs go to the gate (the broker), never to the mailbox's
/// registers, and the gate's failure comes back with its status.
#[test]
fn a_shared_devices_mailbox_is_reached_through_its_owner() {
    let arch = &CAYMAN;
    let (sim, owner) = owned_device(arch);
    let gate = Arc::new(RecordingGate::default());
    let one = hal::Device::open(
        Arc::new(sim.clone()) as Arc<dyn Platform>,
        hal::DeviceOptions {
            owned_ncs: Some(2..4),
            hbm_ranges: Some(Vec::new()),
            firmware_gate: Some(gate.clone() as Arc<dyn hal::FirmwareGate>),
            ..Default::default()
        },
    )
    .unwrap();
    one.init().unwrap();
    let before = sim.stats().resets;
    one.reset_nc(3).unwrap();
    assert_eq!(*platform::sync::lock(&gate.resets), vec![1 << 3]);
    assert_eq!(sim.stats().resets, before, "the process rang the mailbox itself");
    // Not its NC: refused before anything is asked.
    assert!(matches!(one.reset_nc(1), Err(hal::HalError::NotOwned { .. })));
    assert_eq!(platform::sync::lock(&gate.resets).len(), 1);
    let e = one.fwio(csr_maps::consts::fwio::CMD_GET_DATA, &[2]).unwrap_err();
    assert_eq!(e.status(), NrtStatus::Timeout, "{e}");
    assert_eq!(*platform::sync::lock(&gate.requests), vec![(csr_maps::consts::fwio::CMD_GET_DATA, vec![2])]);
    // The owner's own handle still uses the mailbox (serialized by its lock).
    owner.reset_nc(0).unwrap();
    assert_eq!(sim.stats().resets, before + 1);
}
