//! Offsets and bit positions pinned to their public sources (docs/facts/hardware.md sections).

use csr_maps::{meta::Access, Arch, Regs, CAYMAN, MARIANA, SUNDA};
use platform::{MemMmio, Mmio};

fn off(arch: &Arch, path: &str) -> u64 {
    arch.resolve(path).unwrap_or_else(|e| panic!("{arch}: {path}: {e}")).offset
}

#[test]
fn pci_ids_and_names() {
    // §0.2
    assert_eq!(Arch::by_pci_id(0x1d0f, 0x7164).map(|a| a.name), Some("sunda"));
    assert_eq!(Arch::by_pci_id(0x1d0f, 0x7264).map(|a| a.name), Some("sunda"));
    assert_eq!(Arch::by_pci_id(0x1d0f, 0x7364).map(|a| a.name), Some("cayman"));
    assert_eq!(Arch::by_pci_id(0x1d0f, 0x7564).map(|a| a.name), Some("mariana"));
    assert_eq!(Arch::by_pci_id(0x1d0f, 0x7565).map(|a| a.name), Some("mariana"));
    assert!(Arch::by_pci_id(0x1234, 0x7164).is_none());
    assert_eq!(Arch::by_name("V3").unwrap().name, "cayman");
    assert_eq!(Arch::by_name("trn1").unwrap().name, "sunda");
    assert!(Arch::by_name("inf1").is_err());
    assert_eq!((SUNDA.bars.apb, SUNDA.bars.dram), (0, 4));
}

#[test]
fn counts() {
    // §2.1
    for (a, ncs, dma, hbm, nqt) in [(&SUNDA, 2, 34, 2, 6), (&CAYMAN, 8, 132, 4, 5), (&MARIANA, 8, 132, 4, 6)] {
        assert_eq!(a.counts.ncs, ncs);
        assert_eq!(a.counts.dma_engines, dma);
        assert_eq!(a.counts.hbm_stacks, hbm);
        assert_eq!(a.counts.nq_types, nqt);
        assert_eq!(a.counts.semaphores, 256);
        assert_eq!(a.counts.events, 256);
        assert_eq!(a.counts.tpb_engines, 5);
        assert_eq!(a.counts.queues_per_engine, 16);
        assert_eq!(a.instance("udma").unwrap().count(), dma);
    }
    assert_eq!(SUNDA.consts.hbm_active_size, 16 << 30);
    assert_eq!(CAYMAN.consts.hbm_active_size, 24 << 30);
    assert_eq!(MARIANA.consts.hbm_active_size, 36 << 30);
    assert_eq!(SUNDA.consts.host_base, 0x1000_0000_0000);
    assert_eq!(CAYMAN.consts.host_base, 0x4000_0000_0000);
    assert_eq!(SUNDA.consts.fw_carveout, 16 << 20);
}

#[test]
fn semaphore_windows() {
    // §5: events +0x2700000, read/set/incr/decr at +0x1000/+0x1400/+0x1800/+0x1C00 of the TPB window.
    for (a, tpb0) in [(&SUNDA, 0u64), (&CAYMAN, 0xD000_0000), (&MARIANA, 0xD000_0000)] {
        for nc in 0..a.counts.ncs {
            let w = tpb0 + nc * 0x400_0000;
            assert_eq!(off(a, &format!("tpb_sem[{nc}].event[0]")), w + 0x270_0000);
            assert_eq!(off(a, &format!("tpb_sem[{nc}].sem_read[0]")), w + 0x270_1000);
            assert_eq!(off(a, &format!("tpb_sem[{nc}].sem_set[1]")), w + 0x270_1404);
            assert_eq!(off(a, &format!("tpb_sem[{nc}].sem_inc[255]")), w + 0x270_1800 + 255 * 4);
            assert_eq!(off(a, &format!("tpb_sem[{nc}].sem_dec[0]")), w + 0x270_1C00);
            assert_eq!(a.region("tpb").unwrap().base(nc), Some(w));
        }
    }
    assert!(SUNDA.resolve("tpb_sem[0].sem_inc[256]").is_err());
    assert!(SUNDA.resolve("tpb_sem[2].sem_inc[0]").is_err());
}

#[test]
fn misc_ram() {
    // §2.2, §2.3, §6.1
    assert_eq!(off(&SUNDA, "misc_ram.fw_api_version"), 0x30FA_0000);
    assert_eq!(off(&CAYMAN, "misc_ram.fw_api_version"), 0x06C8_4000);
    assert_eq!(off(&MARIANA, "misc_ram.fw_api_version"), 0x06C8_4000);
    assert_eq!(off(&SUNDA, "misc_ram.device_id"), 0x30FA_0024);
    assert_eq!(off(&SUNDA, "misc_ram.reset_map"), 0x30FA_01D8);
    assert_eq!(off(&SUNDA, "misc_ram.reset_request"), 0x30FA_01EC);
    assert_eq!(off(&CAYMAN, "misc_ram.trigger"), 0x06C8_4800);
    assert_eq!(off(&CAYMAN, "misc_ram.fw_status"), 0x06C8_4808);
    assert_eq!(off(&CAYMAN, "misc_ram.data[0]"), 0x06C8_4100);
    assert_eq!(off(&CAYMAN, "misc_ram.hbm_ecc[3]"), 0x06C8_4050);
    // Blocked from user writes (m:v2/neuron_dhal_v2.c): 0x1F0..0x1FC and 0x800.
    for r in ["req_hdr0", "req_hdr1", "resp_hi", "resp_lo", "trigger"] {
        assert!(SUNDA.resolve(&format!("misc_ram.{r}")).unwrap().def.blocked, "{r}");
    }
}

#[test]
fn udma_engines_and_queues() {
    // §2.2: V2 NC0 engines at 0x30000000 + e·0x40000, NC1 at 0x30700000, D2H 32, H2D 33.
    assert_eq!(SUNDA.instance_base("udma", 0).unwrap(), 0x3000_0000);
    assert_eq!(SUNDA.instance_base("udma", 15).unwrap(), 0x3000_0000 + 15 * 0x4_0000);
    assert_eq!(SUNDA.instance_base("udma", 16).unwrap(), 0x3070_0000);
    assert_eq!(SUNDA.instance_base("udma", 32).unwrap(), 0x3060_0000);
    assert_eq!(SUNDA.instance_base("udma", 33).unwrap(), 0x30D0_0000);
    assert!(SUNDA.instance_base("udma", 34).is_err());
    assert_eq!(SUNDA.instance_base("sdma", 1).unwrap(), 0x3040_7000);
    // §2.3: V3 SENG engine e: seng s = e/32, w = e%32; top-level 128..131.
    for a in [&CAYMAN, &MARIANA] {
        assert_eq!(a.instance_base("udma", 0).unwrap(), 0x8200_0000);
        assert_eq!(a.instance_base("udma", 33).unwrap(), 0x9400_0000 + 0x10_0000);
        assert_eq!(a.instance_base("udma", 64).unwrap(), 0xA200_0000);
        assert_eq!(a.instance_base("udma", 127).unwrap(), 0xB400_0000 + 31 * 0x10_0000);
        assert_eq!(a.instance_base("udma", 128).unwrap(), 0x0680_0000);
        assert_eq!(a.instance_base("udma", 129).unwrap(), 0x0690_0000);
        assert_eq!(a.instance_base("udma", 130).unwrap(), 0x4680_0000);
        assert_eq!(a.instance_base("udma", 131).unwrap(), 0x4690_0000);
        assert_eq!(a.instance_base("sdma", 0).unwrap(), 0x8204_0000);
        assert_eq!(a.instance_base("user_errtrig", 1).unwrap(), 0x8C02_0000);
        assert_eq!(a.instance_base("user_errtrig", 32).unwrap(), 0x9C40_0000);
    }
    // §3.1/3.3: M2S queue q at +0x1000 + q·0x1000, S2M at +0x21000; per-queue register offsets.
    let e = 0x30D0_0000;
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].tail_inc"), e + 0x1038);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[1].tail_inc"), e + 0x2038);
    assert_eq!(off(&SUNDA, "udma[33].s2m.q[0].tail_inc"), e + 0x21038);
    assert_eq!(off(&SUNDA, "udma[33].s2m.q[15].ring_base_lo"), e + 0x21000 + 15 * 0x1000 + 0x28);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].ring_base_hi"), e + 0x102C);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].ring_len"), e + 0x1030);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].head"), e + 0x1034);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].cfg"), e + 0x1020);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].sw_ctrl"), e + 0x10B0);
    assert_eq!(off(&SUNDA, "udma[33].s2m.q[0].sw_ctrl"), e + 0x21064);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].comp_cfg"), e + 0x10A0);
    assert_eq!(off(&SUNDA, "udma[33].s2m.q[0].comp_cfg"), e + 0x21054);
    assert_eq!(off(&SUNDA, "udma[33].m2s.q[0].rlimit_mask"), e + 0x1074);
    // §3.2 engine-level
    assert_eq!(off(&SUNDA, "udma[0].m2s.state"), 0x3000_0200);
    assert_eq!(off(&SUNDA, "udma[0].s2m.change_state"), 0x3002_0204);
    assert_eq!(off(&SUNDA, "udma[0].m2s.cfg_len"), 0x3000_0254);
    assert_eq!(off(&SUNDA, "udma[0].s2m.comp_cfg"), 0x3002_0380);
    assert_eq!(off(&SUNDA, "udma[0].gen.axi_timeout"), 0x3003_A300);
    assert_eq!(off(&SUNDA, "udma[0].gen.spare_zeroes0"), 0x3003_B460);
    assert_eq!(off(&SUNDA, "udma[0].gen.sec_a.mask"), 0x3003_A010);
    assert_eq!(off(&SUNDA, "udma[0].gen.sec_a.abort_mask"), 0x3003_A030);
    assert_eq!(off(&SUNDA, "udma[0].gen.sec_b.mask"), 0x3003_A050);
    assert_eq!(off(&SUNDA, "udma[0].gen_ex.tx_sel[1]"), 0x3003_C440);
    // Blocked registers (m:neuron_dma.c): 0x28, 0x2C, 0x44, 0x48, 0x38 of both halves.
    assert!(SUNDA.write_blocked(0, e + 0x1038));
    assert!(SUNDA.write_blocked(0, e + 0x21028));
    assert!(!SUNDA.write_blocked(0, e + 0x1030));
}

#[test]
fn field_bits() {
    let r = CAYMAN.resolve("udma[0].m2s.q[3].head").unwrap();
    let f: Vec<_> = r.fields().iter().map(|f| (f.name, f.lsb, f.width)).collect();
    assert_eq!(f, vec![("idx", 0, 24), ("ring_id", 30, 2)]);
    let c = CAYMAN.resolve("udma[0].m2s.q[3].cfg").unwrap();
    assert_eq!(c.def.reset, 0x0300_0000);
    assert_eq!(c.decode(0x0003_0000)[..2], [("en_pref", 1), ("en_scheduling", 1)]);
    let sa = SUNDA.resolve("udma[0].gen.sec_a.cause").unwrap();
    assert_eq!(sa.fields().iter().find(|f| f.name == "pref_ring_id").map(|f| f.lsb), Some(17));
    let sb = SUNDA.resolve("udma[0].gen.sec_b.cause").unwrap();
    assert_eq!(sb.fields().iter().find(|f| f.name == "pref_ring_id").map(|f| f.lsb), Some(11));
    let intc = SUNDA.resolve("nc_intc[0].g1.cause").unwrap();
    assert_eq!(intc.fields().iter().find(|f| f.name == "sw_nq_overflow").map(|f| f.lsb), Some(29));
    assert!(intc.def.modeled);
    assert_eq!(intc.access(), Access::WriteZeroToClear);
    // IOFIC causes are write-0-to-clear (Annapurna Labs HAL `al_iofic_clear_cause`).
    assert_eq!(sa.access(), Access::WriteZeroToClear);
    assert_eq!(sb.access(), Access::WriteZeroToClear);
}

#[test]
fn notification_blocks() {
    // §4.3: slot registers from +0x100, stride 0x28.
    assert_eq!(off(&SUNDA, "notific[0].nq[0].base_lo"), 0x3053_5100);
    assert_eq!(off(&SUNDA, "notific[1].nq[0].base_lo"), 0x30C3_5100);
    assert_eq!(off(&SUNDA, "notific[0].nq[1].base_lo"), 0x3053_5128);
    assert_eq!(off(&SUNDA, "notific[0].nq[95].head"), 0x3053_5100 + 95 * 0x28 + 0xC);
    assert_eq!(off(&SUNDA, "notific[0].nq[2].size"), 0x3053_5100 + 2 * 0x28 + 8);
    assert_eq!(off(&SUNDA, "notific[0].nq[2].tail"), 0x3053_5100 + 2 * 0x28 + 0x10);
    assert_eq!(off(&SUNDA, "sdma[0].trace_nq.nq[0].base_lo"), 0x3040_1100);
    assert_eq!(off(&SUNDA, "notific_topsp[1].nq[0].base_hi"), 0x30E4_4104);
    // §2.3 V3 NC notific blocks
    let v3 =
        [0x0600_1000u64, 0x0618_1000, 0x0640_1000, 0x0658_1000, 0x4600_1000, 0x4618_1000, 0x4640_1000, 0x4658_1000];
    for (n, b) in v3.iter().enumerate() {
        assert_eq!(off(&CAYMAN, &format!("notific[{n}].nq[0].base_lo")), b + 0x100);
    }
    assert_eq!(off(&CAYMAN, "notific_topsp[8].nq[0].base_lo"), 0x46A0_0100);
}

#[test]
fn tpb_and_topsp_windows() {
    // V4 TPB windows at 0xD0000000 + n·0x4000000 (§2.3, inherited by V4).
    for n in 0..8 {
        assert_eq!(MARIANA.region("tpb").unwrap().base(n), Some(0xD000_0000 + n * 0x400_0000));
    }
    assert_eq!(MARIANA.region("tpb").unwrap().dev_base(4), Some(0x8020_0000_0000));
    assert_eq!(SUNDA.region("top_sp").unwrap().base(5), Some(0x1000_0000 + 5 * 0x40_0000));
    assert_eq!(CAYMAN.region("top_sp").unwrap().base(8), Some(0xF280_0000));
    assert_eq!(CAYMAN.region("hbm").unwrap().dev_base(2), Some(0x8000_0000_0000));
    assert_eq!(CAYMAN.region("hbm").unwrap().base(1), Some(64 << 30));
    assert_eq!(SUNDA.region("hbm").unwrap().base(1), Some(16 << 30));
}

#[test]
fn reverse_lookup_matches_every_register() {
    for a in [&SUNDA, &CAYMAN, &MARIANA] {
        let regs = a.registers();
        assert!(regs.len() > 1000);
        // Every 97th register resolves by name and by offset to itself.
        for r in regs.iter().step_by(97) {
            assert_eq!(&a.resolve(&r.name).unwrap(), r, "{}", r.name);
            assert_eq!(a.lookup(r.bar, r.offset).unwrap().name, r.name);
        }
    }
}

#[test]
fn no_overlapping_instances() {
    for a in [&SUNDA, &CAYMAN, &MARIANA] {
        let mut spans = vec![];
        for i in a.instances {
            let size = csr_maps::meta::block(i.block).unwrap().size;
            for k in i.indices() {
                spans.push((i.bar, i.base(k).unwrap(), size, format!("{}[{k}]", i.name)));
            }
        }
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 != w[1].0 || w[0].1 + w[0].2 <= w[1].1, "{a}: {} overlaps {}", w[0].3, w[1].3);
        }
    }
}

#[test]
fn typed_access_writes_the_right_offsets() {
    let m = MemMmio::new(0x4000_0000);
    let regs = Regs::new(&SUNDA, &m);
    let q = regs.udma(2).unwrap().s2m().q(3).unwrap();
    q.ring_len().write_with(|v| v.with_count(4096)).unwrap();
    assert_eq!(m.read32(0x3008_0000 + 0x21000 + 3 * 0x1000 + 0x30).unwrap(), 4096);
    regs.tpb_sem(1).unwrap().sem_inc(7).unwrap().write(csr_maps::blocks::tpb_sem::SemInc(5)).unwrap();
    assert_eq!(m.read32(0x400_0000 + 0x270_1800 + 28).unwrap(), 5);
    let cfg = q.cfg();
    cfg.write(csr_maps::blocks::udma_s2m_q::Cfg::reset_value()).unwrap();
    cfg.modify(|c| c.with_en_pref(1).with_en_stream(1)).unwrap();
    assert_eq!(cfg.read().unwrap().0, 0x0303_0000);
    assert!(regs.udma(34).is_err());
    assert!(regs.tpb_sem(0).unwrap().sem_inc(256).is_err());
    assert!(regs.user_errtrig(0).is_err(), "no USER_ERRTRIG on sunda");
}

#[test]
fn every_register_has_a_source() {
    for a in [&SUNDA, &CAYMAN, &MARIANA] {
        for r in a.registers() {
            assert!(!r.def.source.is_empty(), "{}", r.name);
        }
        for c in a.const_meta {
            assert!(!c.source.is_empty(), "{}", c.name);
        }
    }
}

#[test]
fn device_address_routing() {
    // §2.2: V2 BAR0 is a linear window from dev 0xFFFC0000000; TPB window n, APB at BAR0 0x30000000.
    assert_eq!(SUNDA.bar0_to_dev(0x270_1800), Some(0xFFF_C270_1800));
    assert_eq!(SUNDA.dev_to_bar0(0xFFF_C670_1800), Some(0x670_1800));
    assert_eq!(SUNDA.dev_to_bar0(0xFFF_F0FA_0000), Some(0x30FA_0000));
    assert_eq!(SUNDA.dev_to_hbm(0x10_0000_1000), Some((1, 0x1000)));
    assert_eq!(SUNDA.dev_to_host_iova(0x1000_0000_2000), Some(0x2000));
    assert_eq!(SUNDA.dev_to_host_iova(0x1100_0000_2000), None);
    // §2.3: V3 TPB n device bases, SE windows, die-1 HBM.
    assert_eq!(CAYMAN.bar0_to_dev(0xD000_0000 + 5 * 0x400_0000 + 0x270_1800), Some(0x8030_0270_1800));
    assert_eq!(CAYMAN.dev_to_bar0(0x10_0200_0000), Some(0x8200_0000));
    assert_eq!(CAYMAN.bar0_to_dev(0x0680_0000), Some(0x80_0680_0000));
    assert_eq!(CAYMAN.dev_to_hbm(0x8040_0000_0040), Some((3, 0x40)));
    assert_eq!(CAYMAN.dev_to_hbm(0x6_0000_0000), None, "beyond the 24 GiB active size");
    assert_eq!(MARIANA.dev_to_hbm(0x6_0000_0000), Some((0, 0x6_0000_0000)));
    assert_eq!(CAYMAN.host_dev_addr(0x1000), 0x4000_0000_1000);
    for a in [&SUNDA, &CAYMAN, &MARIANA] {
        for r in a.registers().iter().step_by(501) {
            if let Some(d) = a.bar0_to_dev(r.offset) {
                assert_eq!(a.dev_to_bar0(d), Some(r.offset), "{}", r.name);
            }
        }
    }
}

#[test]
fn guards_cover_dma_addresses_resets_sequencers_and_semaphores() {
    use csr_maps::meta::Guard;
    for arch in [&SUNDA, &csr_maps::CAYMAN, &csr_maps::MARIANA] {
        for r in arch.registers() {
            let leaf = r.name.rsplit('.').next().unwrap_or("");
            let leaf = leaf.split('[').next().unwrap_or("");
            let want = match leaf {
                "ring_base_lo" | "ring_base_hi" | "comp_base_lo" | "comp_base_hi" | "base_lo" | "base_hi"
                | "ifq_base_lo" | "ifq_base_hi" | "log_addr" | "ll_addr" => Some(Guard::DmaAddress),
                "reset_request" | "reset_map" | "reset_map_high" => Some(Guard::Reset),
                "ctrl" if r.name.contains(".eng[") => Some(Guard::SequencerControl),
                "sem_set" | "sem_inc" | "sem_dec" => Some(Guard::Semaphore),
                _ => continue,
            };
            assert_eq!(r.def.guard().map(|g| g.0), want, "{}: {}", arch.name, r.name);
        }
    }
    // A field guard is reported with the field's name when the register has none of its own.
    let ctrl = SUNDA.resolve("seq[0].eng[0].ctrl").unwrap();
    assert_eq!(ctrl.def.fields.iter().find(|f| f.name == "reset").and_then(|f| f.guard), Some(Guard::Reset));
    assert_eq!(SUNDA.resolve("misc_ram.device_id").unwrap().def.guard(), None);
}

#[test]
fn pe_perf_counters_and_m2s_axi_registers() {
    // §2.2 / §2.3: PE sequencer perf counters at the host-visible sequencer cluster + 0x100,
    // one group per xbus (V2 5 × 0x40, V3/V4 9 × 0x30); LSB words at +0x0, +0x8, +0x10.
    assert_eq!(SUNDA.instance_base("pe_perf", 0).unwrap(), 0x305B_1100);
    assert_eq!(SUNDA.instance_base("pe_perf", 4).unwrap(), 0x305B_1100 + 4 * 0x40);
    assert_eq!(SUNDA.instance_base("pe_perf", 5).unwrap(), 0x30CB_1100);
    assert!(SUNDA.instance_base("pe_perf", 10).is_err());
    for a in [&CAYMAN, &MARIANA] {
        assert_eq!(a.instance_base("pe_perf", 0).unwrap(), 0x0614_1100);
        assert_eq!(a.instance_base("pe_perf", 9 + 8).unwrap(), 0x062C_1100 + 8 * 0x30);
        assert_eq!(a.instance_base("pe_perf", 9 * 4).unwrap(), 0x4614_1100);
        assert_eq!(a.instance_base("pe_perf", 9 * 7).unwrap(), 0x466C_1100);
        assert!(a.instance_base("pe_perf", 72).is_err());
    }
    let mem = MemMmio::new(0);
    let m = Regs::new(&SUNDA, &mem);
    let p = m.pe_perf(1).unwrap();
    assert_eq!(
        (p.matmul_active_lsb().offset(), p.wl_active_lsb().offset(), p.idle_lsb().offset()),
        (0x305B_1140, 0x305B_1148, 0x305B_1150)
    );
    // §3.2: struct udma_axi_m2s at M2S + 0x100: desc_rd_cfg_1 at +0x10, data_rd_cfg at +0x18.
    assert_eq!(off(&SUNDA, "udma[0].m2s.axi_desc_rd_cfg1"), 0x3000_0110);
    assert_eq!(off(&SUNDA, "udma[0].m2s.axi_data_rd_cfg"), 0x3000_0118);
}
