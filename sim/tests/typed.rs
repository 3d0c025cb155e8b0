//! Device creation resolves the arch names it models once (and refuses an arch description
//! that lacks one); registers are dispatched by identity, per instance; what hardware would
//! ignore is logged with the register's name.

mod common;
// Every test here calls thread_log::init() first (its rule).
#[path = "../../tests/support/thread_log.rs"]
mod thread_log;

use common::*;
use csr_maps::consts::q7 as q7c;
use csr_maps::formats::ucpl::UcplHeader;
use csr_maps::{Arch, InstanceId, CAYMAN, SUNDA};
use sim::{SimConfig, SimDevice, SimError};

fn leak(a: Arch) -> &'static Arch {
    Box::leak(Box::new(a))
}

#[test]
fn an_arch_without_a_modelled_region_or_block_is_refused() {
    thread_log::init();
    let regions: Vec<_> = SUNDA.regions.iter().filter(|r| r.name != "sbuf").copied().collect();
    let no_sbuf = leak(Arch { regions: Box::leak(regions.into_boxed_slice()), ..SUNDA });
    match SimDevice::new(SimConfig::new(no_sbuf)) {
        Err(SimError::MissingRegion { name: "sbuf", .. }) => {}
        other => panic!("expected MissingRegion(sbuf), got {:?}", other.err()),
    }
    let insts: Vec<_> = SUNDA.instances.iter().filter(|i| i.id != InstanceId::MiscRam).copied().collect();
    let no_misc = leak(Arch { instances: Box::leak(insts.into_boxed_slice()), ..SUNDA });
    match SimDevice::new(SimConfig::new(no_misc)) {
        Err(e @ SimError::MissingInstance { instance: InstanceId::MiscRam, .. }) => {
            assert!(e.to_string().contains("MiscRam"), "{e}");
        }
        other => panic!("expected MissingInstance(MiscRam), got {:?}", other.err()),
    }
}

#[test]
fn nx_staging_check_uses_the_nx_block_itself() {
    thread_log::init();
    for arch in [&SUNDA, &CAYMAN] {
        let t = T::new(arch);
        let (nx, q7) = (t.regs().nx(2).unwrap(), t.regs().q7(2).unwrap());
        nx.claim().write(csr_maps::blocks::q7::Claim(q7c::CLAIMED)).unwrap();
        let img = t.hbm(0x100_0000);
        let h = UcplHeader::for_segments(0x8000, 0x7000, 0x100_0000, 0, 0x100_0000);
        t.write_dev(img, &h.encode());
        nx.ll_addr().write(csr_maps::blocks::q7::LlAddr(img)).unwrap();
        nx.ll_size().write(csr_maps::blocks::q7::LlSize(h.image_size() as u32)).unwrap();
        assert_eq!(nx.ll_status().read().unwrap().code(), 1, "{arch}");
        assert_eq!(q7.ll_status().read().unwrap().0, 0, "{arch}: the Q7 block with the same index is untouched");
    }
}

#[test]
fn ignored_accesses_are_logged_with_the_register_name() {
    thread_log::init();
    let t = T::new(&SUNDA);
    let ((), log) = thread_log::capture(|| {
        let m = t.regs().misc_ram(0).unwrap();
        // A write to a read-only register (raw: the typed register has no `write`).
        platform::Mmio::write32(t.bar.as_ref(), m.device_id().offset(), 7).unwrap();
        // A doorbell on a queue whose ring was never programmed.
        let q = t.regs().udma(0).unwrap().m2s().q(1).unwrap();
        q.tail_inc().write(csr_maps::blocks::udma_m2s_q::TailInc(1)).unwrap();
        // An offset inside an instance where no register starts.
        platform::Mmio::write32(t.bar.as_ref(), m.base() + csr_maps::blocks::misc_ram::SIZE - 4, 1).unwrap();
    });
    assert!(log.contains("read-only") && log.contains("device_id"), "{log}");
    assert!(log.contains("doorbell ignored") && log.contains("tail_inc"), "{log}");
    assert!(log.contains("unknown BAR0 offset"), "{log}");
    assert_eq!(t.regs().misc_ram(0).unwrap().device_id().read().unwrap().0, 0, "the write had no effect");
}
