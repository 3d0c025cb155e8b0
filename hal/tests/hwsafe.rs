//! Hardware safety on real devices (the kmod's limits and sequences), proven on the
//! simulator: the `modeled` guard, the packet-size limit, the FW API gate, NC reset groups
//! and 0xDEADBEEF while the firmware resets.

use std::sync::Arc;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::fwio::PollTiming;
use hal::{Device, DeviceOptions, HalError};
use platform::{MmioError, Platform};
use sim::{SimConfig, SimDevice, Timing};

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
