//! Published registers (`SimDevice::publish_registers`): a reader in another process maps
//! them read-only and reads, without the device's lock, what a read through BAR0 returns.

mod common;
use common::*;
use csr_maps::formats::notify::custom;
use csr_maps::{CAYMAN, MARIANA, SUNDA};
use isa::device_ops::NotifyOp;
use isa::slot::Events;
use platform::{Platform, Subscriber};

fn subscribe(t: &T) -> (Subscriber, Vec<u64>) {
    let m = t.dev.publish_registers().expect("publish");
    let fd = m.fd().try_clone_to_owned().expect("dup");
    (Subscriber::open(fd, m.offsets().len()).expect("map"), m.offsets().to_vec())
}

/// Every published register reads the same through the mirror as through BAR0.
fn agree(t: &T, sub: &Subscriber, offsets: &[u64], when: &str) {
    for (i, &off) in offsets.iter().enumerate() {
        let bar = t.bar.read32(off).expect("bar read");
        assert_eq!(sub.read(i, 1), Some(bar), "{}: register at {off:#x} {when}", t.arch.name);
    }
}

#[test]
fn the_mirror_follows_every_nc_interrupt_controller_through_writes_faults_and_reset() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let t = T::new(arch);
        let (sub, offsets) = subscribe(&t);
        // Every register of every NC's interrupt controller, and nothing else.
        let ncs = arch.counts.ncs as usize;
        assert_eq!(offsets.len(), ncs * 14, "{arch}: g0 and g1, seven registers each");
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        for nc in 0..ncs as u64 {
            let b = t.regs().nc_intc(nc).unwrap();
            assert!(offsets.contains(&b.g0().cause().offset()) && offsets.contains(&b.g1().status().offset()));
        }
        agree(&t, &sub, &offsets, "at first");
        // The driver's writes: cause_set, mask_clear (status = cause & !mask), write-0-to-clear.
        for nc in 0..ncs as u64 {
            let g0 = t.regs().nc_intc(nc).unwrap().g0();
            t.bar.write32(g0.cause_set().offset(), 0x0000_00f0 | nc as u32).unwrap();
            t.bar.write32(g0.mask_clear().offset(), !0x30).unwrap();
        }
        agree(&t, &sub, &offsets, "after cause_set and mask_clear");
        let g0 = t.regs().nc_intc(ncs as u64 - 1).unwrap().g0();
        t.bar.write32(g0.cause().offset(), !0x10).unwrap();
        agree(&t, &sub, &offsets, "after a write-0-to-clear");
        // The device latching a line in its own work: a notification ring overflows.
        let ring = t.infer_ring(0, 2, 4);
        let prog: Vec<_> = (0..8).map(|i| NotifyOp::new(Events::NONE, custom::DEBUG, i).encode()).collect();
        t.load_program(0, 2, nc_area(&t, 0, 0), &prog, false);
        t.start(0, 2, false);
        assert_eq!(t.regs().nc_intc(0).unwrap().g1().cause().read().unwrap().sw_nq_overflow(), 1);
        agree(&t, &sub, &offsets, "after the device latched an overflow");
        drop(ring);
        // A second handle is the same memory.
        let (again, same) = subscribe(&t);
        assert_eq!(same, offsets);
        agree(&t, &again, &offsets, "through a second handle");
        // Reset: every register back to its reset value.
        t.dev.reset().unwrap();
        agree(&t, &sub, &offsets, "after a reset");
    }
}

/// A reader racing the device's writes never sees a value the register never had, nor goes
/// back: one thread sets the bits of a cause one at a time while others read it published.
#[test]
fn readers_racing_the_device_see_each_value_whole_and_in_order() {
    let t = std::sync::Arc::new(T::new(&CAYMAN));
    let (sub, offsets) = subscribe(&t);
    let cause = t.regs().nc_intc(3).unwrap().g0().cause().offset();
    let word = offsets.iter().position(|&o| o == cause).expect("published");
    let sub = std::sync::Arc::new(sub);
    // Each reader reads until it sees the last value (all bits), which it must reach.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let sub = sub.clone();
            std::thread::spawn(move || {
                let mut last = 0u32;
                while last != u32::MAX {
                    if let Some(v) = sub.read(word, 64) {
                        // Bits are set from bit 0 up: every value is a run of low bits.
                        assert_eq!(v & v.wrapping_add(1), 0, "{v:#x} is not a value the register had");
                        assert!(v >= last, "{v:#x} read after {last:#x}");
                        last = v;
                    }
                    std::thread::yield_now();
                }
            })
        })
        .collect();
    let set = t.regs().nc_intc(3).unwrap().g0().cause_set().offset();
    for bit in 0..32 {
        for _ in 0..200 {
            // Other registers change too (the device's lock taken and released often).
            t.bar.write32(t.regs().nc_intc(0).unwrap().g0().mask().offset(), bit).unwrap();
        }
        t.bar.write32(set, 1 << bit).unwrap();
    }
    for r in readers {
        r.join().expect("reader");
    }
    assert_eq!(sub.read(word, 1), Some(u32::MAX));
}
