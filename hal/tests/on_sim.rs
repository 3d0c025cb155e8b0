//! hal on the simulator, all three arches.

use std::sync::Arc;

use csr_maps::consts::{q7 as q7c, seq as seqc};
use csr_maps::formats::dge::DgeMailbox;
use csr_maps::formats::notify::{custom, InferStatus, Subtype};
use csr_maps::formats::ucpl::UcplHeader;
use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::q7::{CoreKind, LoadableLib, UcodeContext, UcodeCore};
use hal::{Device, DeviceOptions, HalError, NqOwner, Xfer};
use isa::device_ops::{events_only, NotifyOp};
use isa::slot::{Events, Opcode, UpdateMode};
use platform::Platform;
use sim::{SimConfig, SimDevice, Timing};

const ARCHES: [&Arch; 3] = [&SUNDA, &CAYMAN, &MARIANA];

fn open(arch: &'static Arch, timing: Timing) -> (SimDevice, Device) {
    let sim = SimDevice::new(SimConfig::new(arch).timing(timing).hbm_bytes(1 << 30)).unwrap();
    let opts = DeviceOptions { hbm_limit: Some(1 << 30), ..Default::default() };
    let dev = Device::open(Arc::new(sim.clone()), opts).unwrap();
    dev.init().unwrap();
    (sim, dev)
}

fn assert_clean(sim: &SimDevice) {
    let s = sim.stats();
    assert_eq!((s.iommu_mappings, s.iommu_bytes, s.device_bytes), (0, 0, 0), "leak: {s:?}");
    assert_eq!(s.queue_cfg_misuse, 0, "a doorbell on a queue enabled with cfg bits 24-25 cleared");
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn copies_h2d_d2h_d2d_all_sizes() {
    for arch in ARCHES {
        let (sim, dev) = open(arch, Timing::Inline);
        for (i, len) in [1usize, 4096, 65537, 256 << 20].into_iter().enumerate() {
            let nc = i % dev.nc_count();
            let chan = dev.hbm_for_nc(nc);
            let a = dev.alloc_device(chan, len as u64, 4096).unwrap();
            let b = dev.alloc_device(chan, len as u64, 4096).unwrap();
            let src = dev.alloc_host(len, 4096).unwrap();
            let dst = dev.alloc_host(len, 4096).unwrap();
            let data = pattern(len, i as u32 + 1);
            src.write(0, &data).unwrap();
            dev.copy(nc, &[Xfer { src: dev.host_addr(&src), dst: a.addr(), len: len as u64 }]).unwrap();
            dev.copy(nc, &[Xfer { src: a.addr(), dst: b.addr(), len: len as u64 }]).unwrap();
            dev.copy(nc, &[Xfer { src: b.addr(), dst: dev.host_addr(&dst), len: len as u64 }]).unwrap();
            let mut out = vec![0u8; len];
            dst.read(0, &mut out).unwrap();
            assert!(out == data, "{arch} {len}");
            // Through bounce buffers too.
            let mut back = vec![0u8; len.min(1 << 20)];
            dev.read_device(nc, b.addr(), &mut back).unwrap();
            assert!(back[..] == data[..back.len()]);
        }
        assert!(sim.stats().dma_bytes >= 3 * (256 << 20));
        dev.close();
        drop(dev);
        assert_clean(&sim);
    }
}

#[test]
fn dma_fault_is_reported_recovered_and_leaves_nothing() {
    for arch in ARCHES {
        let (sim, dev) = open(arch, Timing::Inline);
        let buf = dev.alloc_host(4096, 64).unwrap();
        let bad = arch.host_dev_addr(0x7_0000_0000);
        let e = dev.copy(0, &[Xfer { src: dev.host_addr(&buf), dst: bad, len: 64 }]).unwrap_err();
        assert!(matches!(e, HalError::DmaAbort { .. }), "{e}");
        assert_eq!(sim.stats().dma_faults, 1);
        // The queue was recovered: the next copy works.
        let d = dev.alloc_device(0, 4096, 64).unwrap();
        buf.write(0, b"after the fault").unwrap();
        dev.copy(0, &[Xfer { src: dev.host_addr(&buf), dst: d.addr(), len: 15 }]).unwrap();
        let mut o = [0u8; 15];
        dev.read_device(0, d.addr(), &mut o).unwrap();
        assert_eq!(&o, b"after the fault");
        // Out-of-memory error path allocates nothing.
        assert!(matches!(dev.alloc_device(0, 2 << 30, 4096), Err(HalError::OutOfDeviceMemory { .. })));
        drop((buf, d));
        dev.close();
        drop(dev);
        assert_clean(&sim);
    }
}

#[test]
fn semaphores_and_events() {
    for arch in ARCHES {
        let (_sim, dev) = open(arch, Timing::Inline);
        let nc = dev.nc_count() - 1;
        dev.sem_set(nc, 7, 10).unwrap();
        dev.sem_inc(nc, 7, 5).unwrap();
        dev.sem_dec(nc, 7, 3).unwrap();
        assert_eq!(dev.sem_read(nc, 7).unwrap(), 12);
        dev.sem_dec(nc, 8, 1).unwrap();
        assert_eq!(dev.sem_read(nc, 8).unwrap(), -1);
        assert_eq!(dev.sem_read(0, 7).unwrap(), 0, "other NC untouched");
        dev.set_event(nc, 200, true).unwrap();
        assert!(dev.event(nc, 200).unwrap());
        assert!(dev.sem_read(nc, 256).is_err());
        assert!(matches!(dev.sem_read(99, 0), Err(HalError::Csr(_))));
        // A kick slot resolved once increments its semaphore by one per kick.
        let k = dev.kick_slot(nc, 9).unwrap();
        assert_eq!((k.nc(), k.sem()), (nc, 9));
        dev.kick(&k).unwrap();
        dev.kick(&k).unwrap();
        assert_eq!(dev.sem_read(nc, 9).unwrap(), 2);
        assert!(matches!(dev.kick_slot(99, 0), Err(HalError::NoSuchNc { .. })));
        assert!(dev.kick_slot(nc, 256).is_err());
    }
}

fn decode(recs: &[[u8; 16]]) -> Vec<InferStatus> {
    recs.iter().map(InferStatus::decode).collect()
}

#[test]
fn sequencer_stream_kickoff_and_harvest() {
    for arch in ARCHES {
        for timing in [Timing::Inline, Timing::Threaded] {
            let (sim, dev) = open(arch, timing);
            let nc = 1;
            let mut rings: Vec<_> =
                (0..5).map(|e| dev.nq_ring(NqOwner::Nc(nc), dev.infer_slot(e), 64).unwrap()).collect();
            // The kickoff scheme the runtime uses: SP consumes one token of the kick
            // semaphore $S[1] (wait >= 1, decrement) and hands one start token to each other
            // engine ($S[2 + e]); engines 0..3 wait on their own token. One MMIO write
            // (sem_inc $S[1] += 1) starts an execution; tokens cannot be stolen.
            let take = |s: u8| Events {
                wait_mode: isa::slot::WaitMode::GeImm,
                wait_idx: s,
                update_mode: UpdateMode::Other(isa::device_ops::UPDATE_DEC_COMPLETE),
                update_idx: s,
                semaphore_value: 1,
            };
            let give = |s: u8| Events { update_mode: UpdateMode::IncComplete, update_idx: s, ..Events::NONE };
            let mut streams = vec![];
            for e in 0..5usize {
                let prog: Vec<[u8; 64]> = if e == 4 {
                    let mut p = vec![events_only(Opcode::EventSemaphore, 1, take(1))];
                    p.extend((0..4u8).map(|k| events_only(Opcode::Nop, 0, give(2 + k))));
                    p.push(events_only(Opcode::Nop, 2, Events::NONE));
                    p
                } else {
                    vec![
                        events_only(Opcode::EventSemaphore, 1, take(2 + e as u8)),
                        events_only(Opcode::Nop, 2, Events::NONE),
                    ]
                };
                let bytes: Vec<u8> = prog.iter().flatten().copied().collect();
                let s = dev.load_stream(nc, e, &bytes, true).unwrap();
                s.enable(&dev.regs(), true).unwrap();
                streams.push(s);
            }
            let regs = dev.regs();
            let mut out = Vec::with_capacity(64);
            for round in 1..=3u32 {
                dev.sem_inc(nc, 1, 1).unwrap(); // one MMIO write starts the execution
                for (e, r) in rings.iter_mut().enumerate() {
                    out.clear();
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while out.len() < 2 && std::time::Instant::now() < deadline {
                        r.poll(&regs, &mut out, 16).unwrap();
                    }
                    let d = decode(&out);
                    assert_eq!(
                        d.iter().map(|x| x.kind()).collect::<Vec<_>>(),
                        vec![Subtype::Start, Subtype::End],
                        "{arch} e{e} round {round}"
                    );
                }
                let st = dev.engine_status(nc, 0).unwrap();
                assert_eq!(st.passes, round);
            }
            for s in streams {
                s.unload().unwrap();
            }
            for r in &rings {
                r.halt(&regs).unwrap();
            }
            drop(rings);
            dev.close();
            drop(dev);
            assert_clean(&sim);
        }
    }
}

#[test]
fn nq_harvest_across_wrap_and_overflow() {
    for arch in ARCHES {
        let (_sim, dev) = open(arch, Timing::Inline);
        let nc = 0;
        let mut ring = dev.nq_ring(NqOwner::Nc(nc), dev.infer_slot(3), 8).unwrap();
        let prog: Vec<u8> = (0..5).flat_map(|i| NotifyOp::new(Events::NONE, custom::DEBUG, i).encode()).collect();
        let s = dev.load_stream(nc, 3, &prog, false).unwrap();
        let regs = dev.regs();
        let mut out = Vec::new();
        let mut seen = vec![];
        for _ in 0..4 {
            s.enable(&regs, false).unwrap();
            out.clear();
            ring.poll(&regs, &mut out, 16).unwrap();
            seen.extend(decode(&out).into_iter().map(|r| r.line));
        }
        assert_eq!(seen, (0..4).flat_map(|_| 0..5u16).collect::<Vec<_>>(), "20 records through an 8-entry ring");
        assert!(!dev.nq_overflow(nc).unwrap());
        // Not harvesting: the third pass overflows (ring holds 7 unread).
        s.enable(&regs, false).unwrap();
        assert!(!dev.nq_overflow(nc).unwrap());
        s.enable(&regs, false).unwrap();
        assert!(dev.nq_overflow(nc).unwrap());
        out.clear();
        ring.poll(&regs, &mut out, 16).unwrap();
        assert_eq!(out.len(), 7);
        dev.clear_causes(nc).unwrap();
        assert!(!dev.nq_overflow(nc).unwrap());
        // The first record after the drop carries the overflow bit.
        s.enable(&regs, false).unwrap();
        out.clear();
        ring.poll(&regs, &mut out, 16).unwrap();
        assert!(InferStatus::decode(&out[0]).sw_overflow);
        assert!(dev.nq_ring(NqOwner::Nc(nc), 5, 3).is_err(), "not a power of two");
    }
}

#[test]
fn q7_claim_ucpl_and_dge_gate() {
    for arch in ARCHES {
        let (sim, dev) = open(arch, Timing::Inline);
        assert_eq!(UcodeContext::new(2).unwrap_err().code, q7c::ERR_BAD_API);
        let ctx = UcodeContext::new(3).unwrap();
        {
            let mut a = UcodeCore::new(&ctx, &dev, 0, CoreKind::Q7Pool { core: 3 }).unwrap();
            a.on_ucode_booted().unwrap();
            let mut b = UcodeCore::new(&ctx, &dev, 0, CoreKind::Q7Pool { core: 3 }).unwrap();
            assert_eq!(b.on_ucode_booted().unwrap_err().code, q7c::ERR_INVALID, "second claim refused");
            // UCPL staging: good image accepted by the core; 64 KiB + 1 refused with 7.
            let h = UcplHeader::for_segments(0x4000, 0x1000, 0x100_0000, 0, 0x100_0000);
            let mut img = h.encode().to_vec();
            img.resize(h.image_size() as usize, 0x90);
            let ll = LoadableLib::create(&ctx, &dev, 0, "lib", &img).unwrap();
            a.attach(&ll).unwrap();
            let mut big = vec![0u8; 0x10001];
            big[..32].copy_from_slice(&h.encode());
            match LoadableLib::create(&ctx, &dev, 0, "big", &big) {
                Err(HalError::Ucode(e)) => assert_eq!(e.code, q7c::ERR_TOO_LARGE),
                _ => panic!("64 KiB + 1 accepted"),
            }
            // DGE: Q7 pool cores are not NX_POOL → 8; the NX POOL core is admitted.
            assert_eq!(a.dge_set_priority_class_map(&[4096]).unwrap_err().code, q7c::ERR_INVALID);
            let mut nx = UcodeCore::new(&ctx, &dev, 0, CoreKind::Nx { engine: 2 }).unwrap();
            assert_eq!(nx.dge_set_mailbox(0, DgeMailbox::default()).unwrap_err().code, q7c::ERR_INVALID, "not booted");
            nx.on_ucode_booted().unwrap();
            nx.dge_set_priority_class_map(&[4096, 8192]).unwrap();
            assert_eq!(nx.dge_get_priority_class_map().unwrap()[..2], [4096, 8192]);
            assert_eq!(nx.dge_set_priority_class_map(&[1; 5]).unwrap_err().code, q7c::ERR_INVALID);
            let m = DgeMailbox { reserved: 0, priority: 2, bitmask: 0x00F0 };
            nx.dge_set_mailbox(1, m).unwrap();
            assert_eq!(nx.dge_get_mailbox(1).unwrap(), m);
            assert_eq!(nx.dge_set_mailbox(4, m).unwrap_err().code, q7c::ERR_INVALID);
            nx.dge_mailboxes(1).unwrap();
            assert_eq!(nx.dge_get_mailbox(1).unwrap(), DgeMailbox::default(), "entries >= n reset");
            assert!(nx.enable_pc_bounds(10, 5).is_err());
            nx.enable_pc_bounds(0x1000, 0x2000).unwrap();
            nx.disable_pc_bounds().unwrap();
        }
        // Destroyed cores were released.
        let mut again = UcodeCore::new(&ctx, &dev, 0, CoreKind::Q7Pool { core: 3 }).unwrap();
        again.on_ucode_booted().unwrap();
        drop(again);
        dev.close();
        drop(dev);
        assert_clean(&sim);
    }
}

#[test]
fn nc_reset_leaves_a_usable_nc() {
    for arch in ARCHES {
        let (sim, dev) = open(arch, Timing::Inline);
        let nc = dev.nc_count() - 1;
        dev.sem_set(nc, 3, 9).unwrap();
        let d = dev.alloc_device(dev.hbm_for_nc(nc), 4096, 4096).unwrap();
        dev.write_device(nc, d.addr(), b"before").unwrap();
        dev.reset_nc(nc).unwrap();
        assert_eq!(dev.sem_read(nc, 3).unwrap(), 0);
        assert_eq!(sim.stats().resets, 1);
        // DMA and sequencers work after the reset.
        dev.write_device(nc, d.addr(), b"after!").unwrap();
        let mut o = [0u8; 6];
        dev.read_device(nc, d.addr(), &mut o).unwrap();
        assert_eq!(&o, b"after!");
        let mut ring = dev.nq_ring(NqOwner::Nc(nc), dev.infer_slot(0), 16).unwrap();
        let s = dev.load_stream(nc, 0, &events_only(Opcode::Nop, 3, Events::NONE), false).unwrap();
        s.enable(&dev.regs(), false).unwrap();
        let mut out = vec![];
        ring.poll(&dev.regs(), &mut out, 16).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(dev.engine_status(nc, 0).unwrap().state, seqc::STATE_HALTED);
        // FW-IO works.
        let r = dev.fwio(csr_maps::consts::fwio::CMD_GET_DATA, &[2]).unwrap();
        assert_eq!(r.len(), 33);
        assert!(matches!(dev.fwio(0x55, &[]), Err(HalError::Fwio { code: 2, .. })));
        dev.reset_device().unwrap();
        dev.write_device(0, d.addr(), b"device").unwrap();
        drop((d, s, ring));
        dev.close();
        drop(dev);
        assert_clean(&sim);
    }
}

#[test]
fn unknown_pci_id_is_refused() {
    struct Fake(SimDevice);
    impl Platform for Fake {
        fn identity(&self) -> platform::DeviceIdentity {
            platform::DeviceIdentity { vendor: 0x1234, device: 0x11e8, revision: 0, location: "x".into() }
        }
        fn bar(&self, i: u8) -> Result<Arc<dyn platform::Mmio>, platform::PlatformError> {
            self.0.bar(i)
        }
        fn dma_map(
            &self,
            m: platform::HostMem,
            d: platform::DmaDir,
        ) -> Result<platform::DmaMapping, platform::PlatformError> {
            self.0.dma_map(m, d)
        }
        fn irq_eventfd(&self, v: u32) -> Result<Option<std::os::fd::OwnedFd>, platform::PlatformError> {
            self.0.irq_eventfd(v)
        }
        fn reset(&self) -> Result<(), platform::PlatformError> {
            Ok(())
        }
    }
    let sim = SimDevice::new(SimConfig::new(&SUNDA).hbm_bytes(1 << 24)).unwrap();
    let e = Device::open(Arc::new(Fake(sim)), DeviceOptions::default()).err().unwrap();
    assert!(matches!(e, HalError::UnknownDevice { vendor: 0x1234, device: 0x11e8 }));
}

/// A platform whose DMA mappings are limited in size, like VFIO's no-IOMMU mode (one
/// hugepage): host chunks and bounce buffers must fit, so transfers larger than the limit
/// still work.
#[test]
fn platform_dma_mapping_limit_is_honoured() {
    const LIMIT: usize = 1 << 20;
    struct Limited(SimDevice);
    impl Platform for Limited {
        fn identity(&self) -> platform::DeviceIdentity {
            self.0.identity()
        }
        fn bar(&self, i: u8) -> Result<Arc<dyn platform::Mmio>, platform::PlatformError> {
            self.0.bar(i)
        }
        fn dma_map(
            &self,
            m: platform::HostMem,
            d: platform::DmaDir,
        ) -> Result<platform::DmaMapping, platform::PlatformError> {
            if m.len() > LIMIT {
                return Err(platform::PlatformError::DmaMap(format!(
                    "{} bytes exceed the {LIMIT}-byte limit",
                    m.len()
                )));
            }
            self.0.dma_map(m, d)
        }
        fn irq_eventfd(&self, v: u32) -> Result<Option<std::os::fd::OwnedFd>, platform::PlatformError> {
            self.0.irq_eventfd(v)
        }
        fn reset(&self) -> Result<(), platform::PlatformError> {
            self.0.reset()
        }
        fn account_device_memory(&self, delta: i64) {
            self.0.account_device_memory(delta)
        }
        fn max_dma_mapping(&self) -> Option<usize> {
            Some(LIMIT)
        }
    }
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).hbm_bytes(1 << 26)).unwrap();
    let opts = DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
    assert!(opts.host_chunk > LIMIT, "the default chunk must exceed the limit for this test to mean anything");
    let dev = Device::open(Arc::new(Limited(sim.clone())), opts).unwrap();
    dev.init().unwrap();
    let len = 3 * LIMIT + 1;
    let a = dev.alloc_device(dev.hbm_for_nc(0), len as u64, 4096).unwrap();
    let data = pattern(len, 7);
    dev.write_device(0, a.addr(), &data).unwrap();
    let mut back = vec![0u8; len];
    dev.read_device(0, a.addr(), &mut back).unwrap();
    assert!(back == data);
    // Small host buffers share chunks that fit the limit; one larger than it is refused.
    let small: Vec<_> = (0..8).map(|_| dev.alloc_host(4096, 64).unwrap()).collect();
    assert!(matches!(dev.alloc_host(LIMIT + 1, 64), Err(HalError::Platform(_))));
    drop(small);
    drop(a);
    dev.close();
    drop(dev);
    assert_clean(&sim);
}

#[test]
fn region_table_confines_an_ncs_queues_and_leaves_host_transfers_alone() {
    use hal::{Perm, Region};
    for arch in ARCHES {
        let (sim, dev) = open(arch, Timing::Inline);
        let chan = dev.hbm_for_nc(0);
        let a = dev.alloc_device(chan, 4096, 4096).unwrap();
        let b = dev.alloc_device(chan, 4096, 4096).unwrap();
        let data = pattern(4096, 7);
        dev.write_device(0, a.addr(), &data).unwrap();
        let mut ring = dev.new_ring(0, 0, 32).unwrap();
        let regs = dev.regs();
        let xfer = [Xfer { src: a.addr(), dst: b.addr(), len: 4096 }];
        let read_b = |dev: &Device| {
            let mut out = vec![0u8; 4096];
            dev.read_device(0, b.addr(), &mut out).unwrap();
            out
        };
        // Disabled (never programmed): nothing is checked.
        ring.copy(&regs, &xfer).unwrap();
        assert_eq!(read_b(&dev), data);
        dev.write_device(0, b.addr(), &[0u8; 4096]).unwrap();
        // Enabled without the destination: the packet is not performed and reported.
        let mut own: Vec<Region> = ring.regions().to_vec();
        own.push(Region::new(a.addr(), 4096, Perm::READ));
        let used = dev.set_regions(0, &own).unwrap();
        assert!((2..=own.len()).contains(&used), "{used} entries");
        ring.copy(&regs, &xfer).unwrap();
        assert_eq!(sim.stats().oob_refused, 1);
        let f = dev.region_fault(0).unwrap().expect("a refused access is latched");
        assert_eq!((f.kind, f.addr, f.count), (csr_maps::consts::regions::KIND_WRITE, b.addr(), 1));
        // Host transfers (the host-facing engines) are not the NC's and keep working.
        assert!(read_b(&dev).iter().all(|&x| x == 0), "a refused copy wrote its destination");
        // Granted: the copy happens.
        own.push(Region::new(b.addr(), 4096, Perm::WRITE));
        dev.set_regions(0, &own).unwrap();
        ring.copy(&regs, &xfer).unwrap();
        assert_eq!(read_b(&dev), data);
        assert_eq!(sim.stats().oob_refused, 1);
        dev.clear_region_fault(0).unwrap();
        assert_eq!(dev.region_fault(0).unwrap(), None);
        // Read permission alone does not grant a write.
        let last = own.len() - 1;
        own[last].perm = Perm::READ;
        dev.set_regions(0, &own).unwrap();
        ring.copy(&regs, &xfer).unwrap();
        assert_eq!(sim.stats().oob_refused, 2);
        // Disabled again: unchecked.
        dev.clear_regions(0).unwrap();
        ring.copy(&regs, &xfer).unwrap();
        assert_eq!(sim.stats().oob_refused, 2);
        // A table cannot hold more than its entries (disjoint ranges do not coalesce).
        let many: Vec<Region> =
            (0..hal::regions::TABLE_ENTRIES as u64 + 1).map(|k| Region::new(k * 32, 16, Perm::READ)).collect();
        assert!(matches!(
            dev.set_regions(0, &many),
            Err(HalError::RegionTableFull { needed, entries }) if needed == entries + 1
        ));
        assert_eq!(dev.set_regions(0, &many[1..]).unwrap(), hal::regions::TABLE_ENTRIES);
        dev.clear_regions(0).unwrap();
        drop((ring, a, b));
        dev.close();
        drop(dev);
        assert_clean(&sim);
    }
}
