//! Hardware safety on real devices (the kmod's limits and sequences), proven on the
//! simulator: the `modeled` guard, the packet-size limit, the FW API gate, NC reset groups
//! and 0xDEADBEEF while the firmware resets.

mod support;

use std::sync::Arc;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::fwio::PollTiming;
use hal::{Device, DeviceOptions, HalError};
use platform::{MmioError, Platform};
use sim::{SimConfig, SimDevice, Timing};
use support::{queue_regs, Recording, WriteLog};

fn opts() -> DeviceOptions {
    DeviceOptions { hbm_limit: Some(1 << 26), poll: PollTiming::fast(), ..Default::default() }
}

fn open_cfg(cfg: SimConfig) -> (SimDevice, Device) {
    let sim = SimDevice::new(cfg.hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let dev = Device::open(Arc::new(sim.clone()), opts()).unwrap();
    dev.init().unwrap();
    (sim, dev)
}

/// A platform like VFIO without the operator's opt-in: the simulator behind it, but
/// `modeled_writes_allowed` keeps the trait's default (false).
struct RealLike(SimDevice);

impl Platform for RealLike {
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
}

#[test]
fn modeled_writes_refused_without_opt_in() {
    for arch in [&SUNDA, &CAYMAN] {
        let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
        let dev = Device::open(Arc::new(RealLike(sim.clone())), opts()).unwrap();
        // Documented blocks work: engine bring-up, DMA, semaphores, FW-IO, CSR reads.
        dev.init().unwrap();
        let a = dev.alloc_device(0, 8192, 4096).unwrap();
        dev.write_device(0, a.addr(), &[7u8; 8192]).unwrap();
        let mut back = [0u8; 8192];
        dev.read_device(0, a.addr(), &mut back).unwrap();
        assert_eq!(back, [7u8; 8192]);
        dev.sem_inc(0, 3, 2).unwrap();
        assert_eq!(dev.sem_read(0, 3).unwrap(), 2);
        dev.fwio(csr_maps::consts::fwio::CMD_GET_DATA, &[2]).unwrap();
        assert!(dev.fatal_causes(0).is_ok(), "reads of modeled registers pass");
        // Modeled blocks: the NC error-trigger block and the sequencer are refused.
        let e = dev.clear_causes(0).unwrap_err();
        assert!(matches!(e, HalError::Csr(csr_maps::CsrError::Mmio(MmioError::Refused { .. }))), "{arch}: {e}");
        assert!(e.to_string().contains("NEURON_VFIO_ALLOW_MODELED=1"), "{e}");
        let slots = vec![0u8; isa::slot::SLOT_BYTES];
        assert!(dev.load_stream(0, 0, &slots, false).is_err());
        // Nothing modeled reached the device.
        let seq = arch.resolve("seq[0].eng[0].ctrl").ok().map(|r| r.offset);
        if let Some(off) = seq {
            assert_eq!(sim.bar(0).unwrap().read32(off).unwrap(), 0);
        }
    }
    // The simulator implements the model: the same calls succeed on it.
    let (_sim, dev) = open_cfg(SimConfig::new(&SUNDA));
    dev.clear_causes(0).unwrap();
}

#[test]
fn modeled_spans_cover_modeled_rows_only() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let regs = arch.registers();
        for r in regs.iter().filter(|r| r.bar == 0) {
            let width = r.def.bytes();
            assert_eq!(arch.is_modeled(r.offset, width), r.modeled, "{arch}: {} {:#x}", r.name, r.offset);
        }
        // Q7 / NX rows and the TOP_SP semaphore layout are placed by the model.
        for name in ["q7[0].claim", "nx[0].claim"] {
            assert!(arch.resolve(name).unwrap().modeled, "{arch}: {name}");
        }
        assert!(!arch.resolve("udma[0].m2s.cfg_len").unwrap().modeled);
    }
    assert!(SUNDA.resolve("topsp_sem[0].sem_inc[0]").unwrap().modeled);
}

#[test]
fn packets_stay_under_the_programmed_limit() {
    for arch in [&SUNDA, &CAYMAN] {
        let (sim, dev) = open_cfg(SimConfig::new(arch));
        assert!(hal::udma::descs_per_packet(arch) as u64 * 65536 <= csr_maps::consts::udma::MAX_PACKET_BYTES);
        // 4 MiB through one copy: with 64-descriptor (4 MiB) packets the simulator aborts.
        let len = 4 << 20;
        let a = dev.alloc_device(0, len as u64, 4096).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        dev.write_device(0, a.addr(), &data).unwrap();
        let mut back = vec![0u8; len];
        dev.read_device(0, a.addr(), &mut back).unwrap();
        assert!(back == data);
        assert_eq!(sim.stats().dma_aborts, 0);
    }
}

#[test]
fn packet_over_the_limit_aborts() {
    let (sim, dev) = open_cfg(SimConfig::new(&CAYMAN));
    // Lower the engine's packet limit below one descriptor's worth: the next packet is too long.
    let (e, _) = hal::udma::h2t(&CAYMAN, 0);
    // Allocate first: a new allocation is zeroed through the same engine.
    let a = dev.alloc_device(0, 65536, 4096).unwrap();
    let cfg_len = dev.regs().udma(e).unwrap().m2s().cfg_len();
    cfg_len.write(csr_maps::blocks::udma_m2s::CfgLen(0x0100_1000)).unwrap();
    let err = dev.write_device(0, a.addr(), &[1u8; 65536]).unwrap_err();
    let HalError::DmaAbort { m2s_cause, .. } = err else { panic!("expected an abort, got {err}") };
    assert_ne!(m2s_cause & (1 << 13), 0, "packet too long: {m2s_cause:#x}");
    assert_eq!(sim.stats().dma_aborts, 1);
    // Recovered: with the limit restored the engine copies again.
    cfg_len.write(csr_maps::blocks::udma_m2s::CfgLen(csr_maps::consts::udma::M2S_CFG_LEN)).unwrap();
    dev.write_device(0, a.addr(), &[2u8; 65536]).unwrap();
}

#[test]
fn fw_api_6_is_refused_before_the_mailbox() {
    let (sim, dev) = open_cfg(SimConfig::new(&SUNDA).fw_api(6));
    let e = dev.fwio(csr_maps::consts::fwio::CMD_GET_DATA, &[1]).unwrap_err();
    assert!(matches!(e, HalError::FwApiTooOld { version: 6, needed: 7 }), "{e}");
    assert_eq!(sim.stats().fwio_legacy_misuse, 0);
    assert_eq!(sim.stats().fwio_requests, 0, "the mailbox was not rung");
}

#[test]
fn nc_reset_sets_the_arch_groups() {
    // V2: TPB bit n, TOP_SP bits 8 + 3n .. 8 + 3n + 2.
    let (sim, dev) = open_cfg(SimConfig::new(&SUNDA));
    dev.reset_nc(1).unwrap();
    assert_eq!(sim.stats().last_reset_map, (1 << 1) | (0b111 << 11));
    // V3/V4: TPB bit n, SDMA group 8 + n, TOP_SP group 16 + n.
    for arch in [&CAYMAN, &MARIANA] {
        let (sim, dev) = open_cfg(SimConfig::new(arch));
        dev.reset_nc(3).unwrap();
        assert_eq!(sim.stats().last_reset_map, (1 << 3) | (1 << 11) | (1 << 19), "{arch}");
        assert_eq!(hal::fwio::tpb_reset_map(arch, 0b11), 0x0003_0303);
    }
}

#[test]
fn reset_waits_through_deadbeef() {
    let arch: &'static Arch = &CAYMAN;
    let (sim, dev) = open_cfg(SimConfig::new(arch).reset_busy_ms(300));
    let a = dev.alloc_device(dev.hbm_for_nc(2), 4096, 4096).unwrap();
    dev.reset_nc(2).unwrap();
    // The firmware was busy (misc RAM read 0xDEADBEEF) for 300 ms; the reset completed and
    // the NC's DMA works again.
    dev.write_device(2, a.addr(), &[5u8; 4096]).unwrap();
    assert_eq!(sim.stats().resets, 1);
}

/// Small host chunks: rings of ≥ 512 descriptors get their own mapping, which is unmapped
/// the moment the ring is dropped (so the simulator sees the memory go).
fn open_small_chunks(arch: &'static Arch) -> (SimDevice, Device) {
    let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let dev = Device::open(Arc::new(sim.clone()), DeviceOptions { host_chunk: 8192, ..opts() }).unwrap();
    dev.init().unwrap();
    (sim, dev)
}

fn host_copy(dev: &Device, ring: &mut hal::Ring, fill: u8) {
    let src = dev.alloc_host(4096, 64).unwrap();
    let dst = dev.alloc_host(4096, 64).unwrap();
    src.fill(0, 4096, fill).unwrap();
    let x = hal::Xfer { src: dev.host_addr(&src), dst: dev.host_addr(&dst), len: 4096 };
    ring.copy(&dev.regs(), &[x]).unwrap();
    let mut out = vec![0u8; 4096];
    dst.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == fill));
}

#[test]
fn dropped_ring_is_parked_on_the_dummy_ring() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let (sim, dev) = open_small_chunks(arch);
        let (e, q) = (0, 2);
        let mut ring = dev.new_ring(e, q, 512).unwrap();
        host_copy(&dev, &mut ring, 0x5A);
        let live = queue_regs(&dev, e, q);
        assert!(live.iter().all(|&(_, n, en)| n == 512 && en), "{}: {live:?}", arch.name);
        let mappings = sim.stats().iommu_mappings;
        drop(ring);
        let s = sim.stats();
        // The ring's own mappings went away with it, with the queue already parked.
        assert!(s.iommu_mappings < mappings, "{}: the ring memory was not unmapped: {s:?}", arch.name);
        assert_eq!((s.dangling_unmaps, s.dma_faults, s.dma_aborts), (0, 0, 0), "{}: {s:?}", arch.name);
        let dummy = dev.parking().dummy_dev_addr().unwrap();
        let descs = csr_maps::consts::udma::DUMMY_RING_DESCS;
        assert_eq!(queue_regs(&dev, e, q), [(dummy, descs, true); 2], "{}: queue not parked", arch.name);
        // The queue is usable again by a new owner.
        let mut again = dev.new_ring(e, q, 512).unwrap();
        host_copy(&dev, &mut again, 0xA5);
        drop(again);
        drop(dev);
        let s = sim.stats();
        // The dummy ring goes with the device: the queues parked on it are paused first.
        assert_eq!((s.dangling_unmaps, s.iommu_mappings, s.dma_faults), (0, 0, 0), "{}: {s:?}", arch.name);
    }
}

/// The simulator's check the Drop above satisfies: freeing (unmapping) host memory that an
/// enabled queue's ring still points at is counted.
#[test]
fn sim_counts_a_queue_left_on_freed_memory() {
    let (sim, dev) = open_small_chunks(&CAYMAN);
    let buf = dev.alloc_host(8192, 4096).unwrap();
    let a = dev.host_addr(&buf);
    let u = dev.regs().udma(0).unwrap();
    let m = u.m2s().q(3).unwrap();
    m.ring_base_lo().write(csr_maps::blocks::udma_m2s_q::RingBaseLo(a as u32)).unwrap();
    m.ring_base_hi().write(csr_maps::blocks::udma_m2s_q::RingBaseHi((a >> 32) as u32)).unwrap();
    m.ring_len().write_with(|v| v.with_count(512)).unwrap();
    drop(buf);
    assert_eq!(sim.stats().dangling_unmaps, 1);
}

#[test]
fn dropped_nq_ring_is_halted_before_its_memory_goes() {
    for arch in [&SUNDA, &CAYMAN] {
        let (sim, dev) = open_small_chunks(arch);
        let slot = dev.error_slot();
        let nq = dev.nq_ring(hal::NqOwner::Nc(0), slot, 1024).unwrap();
        let s = dev.regs().notific(0).unwrap().nq(slot).unwrap();
        assert_eq!(s.size().read().unwrap().0, 1024 * 16);
        let t = std::time::Instant::now();
        drop(nq);
        // Drained before the memory went (`nnq_destroy_nc` waits 1 ms).
        assert!(t.elapsed() >= std::time::Duration::from_millis(csr_maps::consts::nq::DRAIN_MS));
        assert_eq!(
            (s.base_hi().read().unwrap().0, s.base_lo().read().unwrap().0, s.size().read().unwrap().0),
            (0, 0, 0)
        );
        assert_eq!(sim.stats().dangling_unmaps, 0, "{}", arch.name);
        // A later ring on the slot works.
        let nq = dev.nq_ring(hal::NqOwner::Nc(0), slot, 1024).unwrap();
        assert_eq!(s.size().read().unwrap().0, 1024 * 16);
        drop(nq);
        drop(dev);
        assert_eq!(sim.stats().dangling_unmaps, 0, "{}", arch.name);
    }
}

#[test]
fn iofic_setup_in_the_kmod_order() {
    use csr_maps::consts::udma as udc;
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
        let log: WriteLog = Default::default();
        let dev = Device::open(Arc::new(Recording(sim.clone(), log.clone())), opts()).unwrap();
        dev.init().unwrap();
        let g = dev.regs().udma(0).unwrap().gen();
        let (a, b, c, d) = (g.sec_a(), g.sec_b(), g.sec_c(), g.pri_d());
        // udma_iofic_m2s_error_ints_unmask, then udma_iofic_s2m_error_ints_unmask.
        let expect = [
            (a.control().offset(), 0x28),
            (d.control().offset(), 0x28),
            (a.abort_mask().offset(), !udc::SEC_A_ERRORS),
            (c.abort_mask().offset(), !0x3F),
            (a.mask_clear().offset(), !udc::SEC_A_ERRORS),
            (c.mask_clear().offset(), !0x3F),
            (d.mask_clear().offset(), !0x500),
            (b.control().offset(), 0x28),
            (d.control().offset(), 0x28),
            (b.abort_mask().offset(), !udc::SEC_B_ERRORS),
            (c.abort_mask().offset(), !0xFC0),
            (b.mask_clear().offset(), !udc::SEC_B_ERRORS),
            (c.mask_clear().offset(), !0xFC0),
            (d.mask_clear().offset(), !0x600),
        ];
        let iofic: Vec<u64> = expect.iter().map(|e| e.0).collect();
        let first = platform::sync::lock(&log).iter().position(|w| *w == expect[0]).unwrap();
        let got: Vec<(u64, u32)> =
            platform::sync::lock(&log)[first..].iter().filter(|w| iofic.contains(&w.0)).take(14).copied().collect();
        assert_eq!(got, expect, "{}", arch.name);
        // The resulting state: both secondary groups and D in edge / no-MSI-X mode; group C
        // unmasked for all 12 parity causes, abort-enabled for the S2M ones.
        assert_eq!((a.control().read().unwrap().0, b.control().read().unwrap().0), (0x28, 0x28));
        assert_eq!(c.mask().read().unwrap().0 & 0xFFF, 0, "{}", arch.name);
        assert_eq!(c.abort_mask().read().unwrap().0, !0xFC0, "{}", arch.name);
        assert_eq!(d.mask().read().unwrap().0 & 0x700, 0, "{}", arch.name);
    }
}

#[test]
fn axi_fifo_parity_aborts_only_when_configured() {
    let par = |f: fn(csr_maps::blocks::iofic_axi_parity::Cause) -> csr_maps::blocks::iofic_axi_parity::Cause| {
        f(csr_maps::blocks::iofic_axi_parity::Cause(0)).0
    };
    let s2m_bit = par(|c| c.with_s2m_data_req_parity(1));
    let m2s_bit = par(|c| c.with_m2s_data_cmd_parity(1));
    for arch in [&SUNDA, &CAYMAN] {
        // Before engine init the abort mask keeps its reset value: nothing aborts.
        let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
        let dev = Device::open(Arc::new(sim.clone()), opts()).unwrap();
        assert!(!sim.inject_axi_parity(0, s2m_bit));
        assert!(!hal::udma::engine_aborted(&dev.regs(), 0).unwrap());
        drop(dev);
        let (sim, dev) = open_small_chunks(arch);
        let mut ring = dev.new_ring(0, 2, 64).unwrap();
        host_copy(&dev, &mut ring, 1);
        // M2S AXI-FIFO parity: unmasked (latched, summarised in D bit 10) but, as the kmod
        // leaves group C's abort mask after the S2M write, not aborting.
        assert!(!sim.inject_axi_parity(0, m2s_bit), "{}", arch.name);
        let g = dev.regs().udma(0).unwrap().gen();
        assert_eq!(g.sec_c().status().read().unwrap().0, m2s_bit);
        assert_eq!(g.pri_d().cause().read().unwrap().sec_c(), 1);
        host_copy(&dev, &mut ring, 2);
        // S2M AXI-FIFO parity aborts the engine: the next copy fails with the abort.
        assert!(sim.inject_axi_parity(0, s2m_bit), "{}", arch.name);
        assert!(hal::udma::engine_aborted(&dev.regs(), 0).unwrap());
        let src = dev.alloc_host(64, 64).unwrap();
        let x = hal::Xfer { src: dev.host_addr(&src), dst: dev.host_addr(&src) + 32, len: 16 };
        assert!(matches!(ring.copy(&dev.regs(), &[x]), Err(HalError::DmaAbort { .. })), "{}", arch.name);
        ring.recover(&dev.regs()).unwrap();
        host_copy(&dev, &mut ring, 3);
    }
}

#[test]
fn v2_axi_error_abort_and_sdma_broadcast() {
    use csr_maps::consts::udma as udc;
    let (_sim, dev) = open_cfg(SimConfig::new(&SUNDA));
    let regs = dev.regs();
    let per = SUNDA.counts.dma_engines_per_nc;
    for e in [0, 1, 3, per - 1, per] {
        let g = regs.udma(e).unwrap().gen();
        for t in 0..6 {
            for j in 0..16 {
                let want = if [1, 2, 3, 9, 10, 11].contains(&j) { 0xF } else { 0 };
                assert_eq!(g.axi_err_table(t * 16 + j).unwrap().read().unwrap().0, want, "engine {e} table {t}[{j}]");
            }
        }
        for i in 0..6 {
            // Last of the 16 per-queue writes: queue 15.
            assert_eq!(g.axi_err_ctrl_addr(i).unwrap().read().unwrap().0, (15 << 3) | 7);
            assert_eq!(g.axi_err_ctrl_data(i).unwrap().read().unwrap().0, 0x10);
        }
        for p in [g.m2s_desc_rd(), g.m2s_data_rd(), g.m2s_comp_wr(), g.s2m_desc_rd(), g.s2m_data_wr(), g.s2m_comp_wr()]
        {
            assert_eq!(
                (p.control().read().unwrap().0, p.mask().read().unwrap().0, p.abort_mask().read().unwrap().0),
                (0x28, 0, 0)
            );
        }
        assert_eq!(g.axi_timeout().read().unwrap().0, 0xFFFF_FFFF);
        let w = regs.sdma(e).unwrap();
        let k = e % per;
        assert_eq!(w.bcast_mask().read().unwrap().mask(), 0xFFFF >> k, "engine {e}");
        assert_eq!(w.bcast_last().read().unwrap().last(), if [0, 3, 6, 9, 15].contains(&k) { 0xFFFF } else { 0 });
        assert_eq!(udc::bcast_mask(k), 0xFFFF >> k);
    }
    // Host-facing engines get no broadcast setup (`ndma_init_v2`: SENG engines only).
    let h2t = SUNDA.consts.h2t_engine_base;
    assert_eq!(regs.sdma(h2t).unwrap().bcast_mask().read().unwrap().0, 0);
    // V3/V4 do neither: tables untouched, the AXI timeout stays at 100,000,000.
    for arch in [&CAYMAN, &MARIANA] {
        let (_sim, dev) = open_cfg(SimConfig::new(arch));
        let g = dev.regs().udma(0).unwrap().gen();
        assert_eq!(g.axi_err_table(1).unwrap().read().unwrap().0, 0);
        assert_eq!(g.m2s_data_rd().abort_mask().read().unwrap().0, 0xFFFF_FFFF);
        assert_eq!(g.axi_timeout().read().unwrap().0, 100_000_000);
    }
}

#[test]
fn v3_v4_user_errtrig_ring_id_masks() {
    for arch in [&CAYMAN, &MARIANA] {
        let (_sim, dev) = open_cfg(SimConfig::new(arch));
        let regs = dev.regs();
        let seng = arch.counts.ncs * arch.counts.dma_engines_per_nc;
        for e in [0, 17, seng - 1] {
            let t = regs.user_errtrig(e).unwrap();
            assert_eq!(t.grp(2).unwrap().mask().read().unwrap().0 & (1 << 11), 1 << 11, "{} engine {e}", arch.name);
            assert_eq!(t.grp(3).unwrap().mask().read().unwrap().0 & (1 << 2), 1 << 2, "{} engine {e}", arch.name);
            let g = regs.udma(e).unwrap().gen();
            // Ring-id errors neither interrupt nor abort on SENG engines.
            assert_eq!(g.sec_a().abort_mask().read().unwrap().pref_ring_id(), 1);
            assert_eq!(g.sec_b().abort_mask().read().unwrap().pref_ring_id(), 1);
        }
    }
    // V2 keeps them abort-enabled.
    let (_sim, dev) = open_cfg(SimConfig::new(&SUNDA));
    assert_eq!(dev.regs().udma(0).unwrap().gen().sec_a().abort_mask().read().unwrap().pref_ring_id(), 0);
}

/// Rings programmed onto the same queue in turn (the runtime arms one model at a time on a
/// shared NC): dropping a ring that no longer owns the queue leaves the owner's programming
/// alone; dropping the owner parks the queue.
#[test]
fn only_the_owning_ring_parks_a_shared_queue() {
    let (sim, dev) = open_small_chunks(&SUNDA);
    let (e, q) = (1, 0);
    let mut a = dev.new_ring(e, q, 512).unwrap();
    let mut b = dev.new_ring(e, q, 1024).unwrap();
    // `a` is re-armed (recover re-initialises the queue onto its ring), then `b` again.
    a.recover(&dev.regs()).unwrap();
    host_copy(&dev, &mut a, 7);
    b.recover(&dev.regs()).unwrap();
    drop(a);
    assert_eq!(queue_regs(&dev, e, q).map(|(_, n, en)| (n, en)), [(1024, true); 2], "b's queue was touched");
    host_copy(&dev, &mut b, 8);
    drop(b);
    let dummy = dev.parking().dummy_dev_addr().unwrap();
    assert_eq!(queue_regs(&dev, e, q), [(dummy, csr_maps::consts::udma::DUMMY_RING_DESCS, true); 2]);
    assert_eq!(sim.stats().dangling_unmaps, 0);
    // NQ slots likewise.
    let slot = dev.error_slot();
    let x = dev.nq_ring(hal::NqOwner::Nc(0), slot, 1024).unwrap();
    x.halt(&dev.regs()).unwrap();
    let mut y = dev.nq_ring(hal::NqOwner::Nc(0), slot, 2048).unwrap();
    y.rearm(&SUNDA, &dev.regs()).unwrap();
    drop(x);
    let s = dev.regs().notific(0).unwrap().nq(slot).unwrap();
    assert_eq!(s.size().read().unwrap().0, 2048 * 16, "y's slot was touched");
    drop(y);
    assert_eq!(s.size().read().unwrap().0, 0);
    drop(dev);
    assert_eq!(sim.stats().dangling_unmaps, 0);
}
