//! Each hardware sequence is written once and every path uses it: the BAR0 writes of a
//! ring's programming, recovery, quiesce and parking are exactly `udma::program_queue` /
//! `udma::pause_queue`'s; a notification ring's programming and halt are exactly
//! `nq::program_slot` / `nq::halt_slot`'s — in the kmod's order, on every arch.

mod support;

use std::sync::Arc;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::fwio::PollTiming;
use hal::{nq, udma, Device, DeviceOptions, NqOwner};
use sim::{SimConfig, SimDevice, Timing};
use support::{queue_regs, Recording, WriteLog};

fn open(arch: &'static Arch) -> (SimDevice, Device, WriteLog) {
    let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let log: WriteLog = Default::default();
    let opts = DeviceOptions { hbm_limit: Some(1 << 26), poll: PollTiming::fast(), ..Default::default() };
    let dev = Device::open(Arc::new(Recording(sim.clone(), log.clone())), opts).unwrap();
    dev.init().unwrap();
    platform::sync::lock(&log).clear();
    (sim, dev, log)
}

fn take(log: &WriteLog) -> Vec<(u64, u32)> {
    std::mem::take(&mut *platform::sync::lock(log))
}

/// The writes `f` makes on a scratch device of the same arch (a reference run of one
/// sequence).
fn writes_of(arch: &'static Arch, f: impl FnOnce(&Device)) -> Vec<(u64, u32)> {
    let (_sim, dev, log) = open(arch);
    f(&dev);
    take(&log)
}

#[test]
fn queue_program_is_udma_q_init_in_order() {
    let (e, q) = (1, 3);
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (_sim, dev, log) = open(arch);
        let (mb, sb) = (0x0012_3456_7000, 0x00AB_CDEF_8000);
        udma::program_queue(&dev.regs(), e, q, mb, sb, 256).unwrap();
        let got: Vec<u64> = take(&log).iter().map(|w| w.0).collect();
        let u = dev.regs().udma(e).unwrap();
        let (m, s) = (u.m2s().q(q).unwrap(), u.s2m().q(q).unwrap());
        let expect = [
            m.rlimit_mask().offset(),
            m.cfg().offset(),
            m.sw_ctrl().offset(),
            m.ring_base_lo().offset(),
            m.ring_base_hi().offset(),
            m.ring_len().offset(),
            m.comp_cfg().offset(),
            m.cfg().offset(),
            s.cfg().offset(),
            s.sw_ctrl().offset(),
            s.ring_base_lo().offset(),
            s.ring_base_hi().offset(),
            s.ring_len().offset(),
            s.comp_cfg().offset(),
            s.cfg().offset(),
        ];
        assert_eq!(got, expect, "{}", arch.name);
        assert_eq!(queue_regs(&dev, e, q), [(mb, 256, true), (sb, 256, true)], "{}", arch.name);
        // Pause: the M2S enables, then the S2M ones; the rings stay programmed.
        udma::pause_queue(&dev.regs(), e, q).unwrap();
        let got: Vec<u64> = take(&log).iter().map(|w| w.0).collect();
        assert_eq!(got, [m.cfg().offset(), s.cfg().offset()], "{}", arch.name);
        assert_eq!(queue_regs(&dev, e, q), [(mb, 256, false), (sb, 256, false)], "{}", arch.name);
    }
}

#[test]
fn ring_program_recover_quiesce_and_park_are_the_udma_sequences() {
    let (e, q) = (0, 2);
    for arch in [&SUNDA, &CAYMAN] {
        let (sim, dev, log) = open(arch);
        let mut ring = dev.new_ring(e, q, 512).unwrap();
        let [(mb, n, _), (sb, _, _)] = queue_regs(&dev, e, q);
        assert_eq!(n, 512);
        let new = take(&log);
        let reference = writes_of(arch, |d| udma::program_queue(&d.regs(), e, q, mb, sb, 512).unwrap());
        assert_eq!(new, reference, "{}: Ring::new", arch.name);

        // Recovery of a queue whose engine is not aborted: the causes cleared, the queue
        // programmed again onto the same rings, the engine left in NORMAL.
        ring.recover(&dev.regs()).unwrap();
        let rec = take(&log);
        let g = dev.regs().udma(e).unwrap().gen();
        let clear = [(g.sec_a().cause().offset(), 0), (g.sec_b().cause().offset(), 0), (g.pri_d().cause().offset(), 0)];
        assert_eq!(rec[..3], clear, "{}: Ring::recover clears the causes first", arch.name);
        assert_eq!(rec[3..], reference, "{}: Ring::recover reprograms with program_queue", arch.name);

        ring.quiesce(&dev.regs()).unwrap();
        let quiesce = take(&log);
        assert_eq!(quiesce, writes_of(arch, |d| udma::pause_queue(&d.regs(), e, q).unwrap()), "{}", arch.name);

        // Dropping the owner parks the queue on the dummy ring with program_queue.
        drop(ring);
        let park = take(&log);
        let dummy = dev.parking().dummy_dev_addr().unwrap();
        let descs = csr_maps::consts::udma::DUMMY_RING_DESCS;
        let reference = writes_of(arch, |d| udma::program_queue(&d.regs(), e, q, dummy, dummy, descs).unwrap());
        assert_eq!(park, reference, "{}: parking", arch.name);

        // Closing the device pauses the parked queue before the dummy ring goes.
        drop(dev);
        let close = take(&log);
        assert_eq!(close, writes_of(arch, |d| udma::pause_queue(&d.regs(), e, q).unwrap()), "{}: close", arch.name);
        let s = sim.stats();
        assert_eq!((s.dangling_unmaps, s.iommu_mappings, s.dma_faults), (0, 0, 0), "{}: {s:?}", arch.name);
    }
}

#[test]
fn nq_slot_program_and_halt_in_order() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (_sim, dev, log) = open(arch);
        let slot = dev.error_slot();
        let owner = NqOwner::Nc(1);
        let addr = 0x0001_2345_6000u64;
        nq::program_slot(&dev.regs(), owner, slot, addr, 4096).unwrap();
        let r = dev.regs().notific(1).unwrap().nq(slot).unwrap();
        let expect = [
            (r.base_hi().offset(), (addr >> 32) as u32),
            (r.base_lo().offset(), addr as u32),
            (r.size().offset(), 4096),
            (r.head().offset(), 0),
        ];
        assert_eq!(take(&log), expect, "{}", arch.name);
        assert_eq!(nq::head_offset(&dev.regs(), owner, slot).unwrap(), r.head().offset());
        nq::halt_slot(&dev.regs(), owner, slot).unwrap();
        let expect = [(r.base_hi().offset(), 0), (r.base_lo().offset(), 0), (r.size().offset(), 0)];
        assert_eq!(take(&log), expect, "{}", arch.name);
        // Every slot of the NC, each with the same sequence.
        let slots = arch.counts.nq_slots;
        nq::halt_all(&dev.regs(), 1, slots).unwrap();
        let mut reference = Vec::new();
        for s in 0..slots {
            reference.extend(writes_of(arch, |d| nq::halt_slot(&d.regs(), owner, s).unwrap()));
        }
        assert_eq!(take(&log), reference, "{}: halt_all", arch.name);
    }
}

#[test]
fn nq_ring_program_rearm_halt_and_drop_are_the_slot_sequences() {
    for arch in [&SUNDA, &CAYMAN] {
        let (sim, dev, log) = open(arch);
        let slot = dev.error_slot();
        let owner = NqOwner::Nc(0);
        let mut ring = dev.nq_ring(owner, slot, 256).unwrap();
        let r = dev.regs().notific(0).unwrap().nq(slot).unwrap();
        let addr = (r.base_hi().read().unwrap().0 as u64) << 32 | r.base_lo().read().unwrap().0 as u64;
        let program = writes_of(arch, |d| nq::program_slot(&d.regs(), owner, slot, addr, 256 * 16).unwrap());
        let halt = writes_of(arch, |d| nq::halt_slot(&d.regs(), owner, slot).unwrap());
        assert_eq!(take(&log), program, "{}: NqRing::new", arch.name);
        ring.rearm(arch, &dev.regs()).unwrap();
        assert_eq!(take(&log), program, "{}: NqRing::rearm", arch.name);
        // Dropped while it owns the slot: halted once, then drained.
        let t = std::time::Instant::now();
        drop(ring);
        assert!(t.elapsed() >= nq::DRAIN);
        assert_eq!(take(&log), halt, "{}: drop", arch.name);

        // Halted by its owner earlier: dropping it writes nothing more and still drains.
        let ring = dev.nq_ring(owner, slot, 256).unwrap();
        take(&log);
        ring.halt(&dev.regs()).unwrap();
        assert_eq!(take(&log), halt, "{}: NqRing::halt", arch.name);
        let t = std::time::Instant::now();
        drop(ring);
        assert!(t.elapsed() >= nq::DRAIN);
        assert_eq!(take(&log), Vec::<(u64, u32)>::new(), "{}: drop after halt", arch.name);
        drop(dev);
        assert_eq!(sim.stats().dangling_unmaps, 0, "{}", arch.name);
    }
}

#[test]
fn slot_state_reads_what_program_slot_wrote_and_writes_nothing() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (_sim, dev, log) = open(arch);
        let owner = NqOwner::Nc(1);
        let slots = arch.counts.nq_slots;
        let before = nq::programmed_slots(&dev.regs(), owner, slots).unwrap();
        let slot = (0..slots).find(|s| before.iter().all(|b| b.slot != *s)).expect("a free slot");
        let addr = 0x0001_2345_6000u64;
        nq::program_slot(&dev.regs(), owner, slot, addr, 4096).unwrap();
        take(&log);
        let s = nq::slot_state(&dev.regs(), owner, slot).unwrap();
        assert_eq!((s.slot, s.base, s.size, s.head), (slot, addr, 4096, 0), "{}", arch.name);
        assert!(s.programmed() && !s.overflow && s.dropped == 0, "{}: {s:?}", arch.name);
        let listed = nq::programmed_slots(&dev.regs(), owner, slots).unwrap();
        assert_eq!(listed.len(), before.len() + 1, "{}", arch.name);
        assert!(listed.contains(&s), "{}", arch.name);
        assert!(take(&log).is_empty(), "{}: reading a slot wrote a register", arch.name);
        nq::halt_slot(&dev.regs(), owner, slot).unwrap();
        assert!(!nq::slot_state(&dev.regs(), owner, slot).unwrap().programmed(), "{}", arch.name);
        assert_eq!(nq::programmed_slots(&dev.regs(), owner, slots).unwrap(), before, "{}", arch.name);
    }
}
