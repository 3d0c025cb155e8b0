//! A sequencer stream resets its engine when dropped, like `Ring` and `NqRing` park their
//! queues: the engine never fetches from freed device memory (the simulator counts an engine
//! left enabled over freed memory as a dangling fetch). Ownership goes by stream id: dropping
//! a stream whose engine was since programmed onto another stream leaves the engine alone.

use std::sync::Arc;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::{Device, DeviceOptions};
use isa::device_ops::events_only;
use isa::slot::{Events, Opcode, WaitMode};
use sim::{SimConfig, SimDevice, Timing};

fn open(arch: &'static Arch) -> (SimDevice, Device) {
    let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let dev =
        Device::open(Arc::new(sim.clone()), DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() }).unwrap();
    dev.init().unwrap();
    (sim, dev)
}

/// A looping program that waits on semaphore 7 (never raised): the engine stays enabled.
fn waiting_program() -> Vec<u8> {
    let wait = Events { wait_mode: WaitMode::GeImm, wait_idx: 7, semaphore_value: 1, ..Events::NONE };
    [events_only(Opcode::EventSemaphore, 1, wait), events_only(Opcode::Nop, 2, Events::NONE)]
        .iter()
        .flatten()
        .copied()
        .collect()
}

#[test]
fn dropping_an_enabled_stream_resets_its_engine() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (sim, dev) = open(arch);
        let s = dev.load_stream(0, 2, &waiting_program(), true).unwrap();
        s.enable(&dev.regs(), true).unwrap();
        assert_eq!(sim.stats().enabled_engines, 1, "{}", arch.name);
        drop(s);
        let st = sim.stats();
        assert_eq!((st.enabled_engines, st.dangling_fetches), (0, 0), "{}", arch.name);
    }
}

#[test]
fn sim_counts_an_engine_left_enabled_over_freed_memory() {
    let (sim, dev) = open(&SUNDA);
    let mem = dev.alloc_device(0, 4096, 4096).unwrap();
    dev.write_device(0, mem.addr(), &waiting_program()).unwrap();
    // Program the engine by hand (no Stream owns it), enable it, free the memory.
    let r = dev.regs().seq(0).unwrap().eng(1).unwrap();
    r.ifq_base_lo().write(csr_maps::blocks::seq_engine::IfqBaseLo(mem.addr() as u32)).unwrap();
    r.ifq_base_hi().write(csr_maps::blocks::seq_engine::IfqBaseHi((mem.addr() >> 32) as u32)).unwrap();
    r.ifq_len().write_with(|v| v.with_slots(2)).unwrap();
    r.ctrl().write_with(|v| v.with_enable(1).with_loop_en(1)).unwrap();
    assert_eq!(sim.stats().enabled_engines, 1);
    drop(mem);
    assert_eq!(sim.stats().dangling_fetches, 1);
}

#[test]
fn a_stream_whose_engine_was_reprogrammed_leaves_it_alone() {
    let (sim, dev) = open(&CAYMAN);
    let regs = dev.regs();
    let old = dev.load_stream(1, 0, &waiting_program(), true).unwrap();
    old.enable(&regs, true).unwrap();
    old.halt(&regs).unwrap();
    let new = dev.load_stream(1, 0, &waiting_program(), true).unwrap();
    new.enable(&regs, true).unwrap();
    drop(old);
    assert_eq!(sim.stats().enabled_engines, 1, "the newer stream's engine keeps running");
    // The older stream comes back (re-armed) and owns the engine again.
    drop(new);
    assert_eq!(sim.stats().enabled_engines, 0);
    assert_eq!(sim.stats().dangling_fetches, 0);
}

#[test]
fn unload_resets_once_and_rearm_reclaims() {
    let (sim, dev) = open(&MARIANA);
    let regs = dev.regs();
    let a = dev.load_stream(0, 4, &waiting_program(), true).unwrap();
    a.enable(&regs, true).unwrap();
    let b = dev.load_stream(0, 4, &waiting_program(), true).unwrap();
    b.enable(&regs, true).unwrap();
    // `a` re-armed: it owns the engine again, so dropping `b` leaves it running.
    a.rearm(&regs, dev.infer_slot(4), true).unwrap();
    drop(b);
    assert_eq!(sim.stats().enabled_engines, 1);
    a.unload().unwrap();
    let st = sim.stats();
    assert_eq!((st.enabled_engines, st.dangling_fetches), (0, 0));
}
