//! Notification queues, fault injection, Q7/DGE, FW-IO and reset — registers and DMA only.

mod common;
use common::*;
use csr_maps::consts::{fwio as fwc, q7 as q7c};
use csr_maps::formats::dge::DgeMailbox;
use csr_maps::formats::error::{ErrorId, TpbErrorRecord};
use csr_maps::formats::fwio::FwHeader;
use csr_maps::formats::notify::{custom, Subtype};
use csr_maps::formats::ucpl::UcplHeader;
use csr_maps::formats::udma::UdmaDesc;
use csr_maps::{CAYMAN, MARIANA, SUNDA};
use isa::device_ops::NotifyOp;
use isa::slot::{Dma2d, Dma2dLeg, Events, Opcode, SlotHeader, SLOT_BYTES};
use sim::FaultSpec;

fn notify(sub: u16, v: u32) -> [u8; SLOT_BYTES] {
    NotifyOp::new(Events::NONE, sub, v).encode()
}

fn raw(ring: &platform::DmaMapping, i: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    ring.mem().read(i * 16, &mut b).unwrap();
    b
}

#[test]
fn nq_wraps_with_phase_toggle_then_overflows() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let t = T::new(arch);
        let ring = t.infer_ring(0, 2, 4); // 4 records
        let prog: Vec<_> = (0..3).map(|i| notify(custom::DEBUG, i)).collect();
        t.load_program(0, 2, nc_area(&t, 0, 0), &prog, false);
        t.start(0, 2, false);
        let r = records(&ring, 4);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|x| x.kind() == Subtype::Custom && x.sub_id == custom::DEBUG));
        let slot = t.regs().notific(0).unwrap().nq(arch.consts.nq_slot_infer_status + 2).unwrap();
        assert_eq!(slot.tail().read().unwrap().0, 48);
        // Consumer frees everything; the next pass wraps: phase toggles for records 0 and 1.
        slot.head().write(csr_maps::blocks::notific_slot::Head(48)).unwrap();
        t.start(0, 2, false);
        let phases: Vec<bool> = (0..4).map(|i| raw(&ring, i)[3] & 0x80 != 0).collect();
        assert_eq!(phases, vec![false, false, true, true], "{arch}");
        assert_eq!(u16::from_le_bytes([raw(&ring, 3)[0], raw(&ring, 3)[1]]), 0, "first record of pass 2 at slot 3");
        assert_eq!(slot.tail().read().unwrap().0, 32);
        // Head not advanced: one free slot short of full → the third record overflows.
        let intc = t.regs().nc_intc(0).unwrap();
        assert_eq!(intc.g1().cause().read().unwrap().sw_nq_overflow(), 0);
        t.start(0, 2, false);
        assert_eq!(intc.g1().cause().read().unwrap().sw_nq_overflow(), 1, "INTC line 61 / bit 29");
        let st = slot.status().read().unwrap();
        assert_eq!((st.overflow(), st.dropped()), (1, 3));
        assert_eq!(t.dev.stats().dropped_records, 3);
        // The consumer catches up; the next record carries the software-overflow bit.
        slot.head().write(csr_maps::blocks::notific_slot::Head(32)).unwrap();
        t.start(0, 2, false);
        let b = raw(&ring, 2);
        assert_ne!(b[3] & 0x20, 0, "sw_queue_overflow bit on the first record after the drop");
        // Writing 1 leaves the cause alone; writing 0 clears it (write-0-to-clear): clearing
        // no bit writes all ones, clearing bit 29 writes its complement.
        intc.g1().cause().clear(csr_maps::blocks::nc_intc_g1::Cause(0)).unwrap();
        assert_ne!(intc.g1().cause().read().unwrap().0 & (1 << 29), 0, "write 1 has no effect");
        intc.g1().cause().clear(csr_maps::blocks::nc_intc_g1::Cause(0).with_sw_nq_overflow(1)).unwrap();
        assert_eq!(intc.g1().cause().read().unwrap().sw_nq_overflow(), 0);
    }
}

fn simple_program(t: &T, nc: u64) -> (Vec<platform::DmaMapping>, platform::DmaMapping) {
    let rings: Vec<_> = (0..5).map(|e| t.infer_ring(nc, e, 16)).collect();
    let err = t.err_ring(nc, 16);
    for e in 0..5 {
        let prog = [
            isa::device_ops::events_only(Opcode::Nop, 1, Events::NONE),
            isa::device_ops::events_only(Opcode::Nop, 2, Events::NONE),
        ];
        t.load_program(nc, e, nc_area(t, nc, 0x1000 * e), &prog, false);
    }
    (rings, err)
}

fn run_all(t: &T, nc: u64) {
    for e in 0..5 {
        t.start(nc, e, false);
    }
}

fn err_records(err: &platform::DmaMapping) -> Vec<TpbErrorRecord> {
    (0..16).map(|i| TpbErrorRecord::decode(&raw(err, i))).take_while(|r| r.header & 0x80 != 0).collect()
}

#[test]
fn every_fault_kind_produces_its_records_and_registers() {
    for arch in [&SUNDA, &CAYMAN] {
        let nc = 1;
        let check = |spec: &str, f: &dyn Fn(&T, &[platform::DmaMapping], &platform::DmaMapping)| {
            let t = T::new(arch);
            let (rings, err) = simple_program(&t, nc);
            t.dev.inject(spec.parse::<FaultSpec>().unwrap());
            run_all(&t, nc);
            f(&t, &rings, &err);
        };
        let g0 = |t: &T| t.regs().nc_intc(nc).unwrap().g0().cause().read().unwrap();
        check(&format!("nq-overflow@nc{nc}"), &|t, rings, _| {
            // PE filled its 16-entry ring (15 usable) with debug records; its START and END
            // were dropped. The other engines' rings are untouched.
            let pe = records(&rings[0], 16);
            assert_eq!(pe.len(), 15);
            assert!(pe.iter().all(|r| r.subtype == 6 && r.sub_id == 6), "{pe:?}");
            assert!(rings[1..].iter().all(|r| records(r, 16).len() == 2));
            assert_eq!(t.dev.stats().dropped_records, 3, "one debug record, START, END");
            assert_eq!(t.regs().nc_intc(nc).unwrap().g1().cause().read().unwrap().sw_nq_overflow(), 1);
        });
        // Armed only: no DMA read the NC's HBM (instruction fetch is not a DMA).
        check(&format!("hbm-ue@nc{nc}"), &|t, _, _| assert_eq!(g0(t).hbm_ue(), 0));
        check(&format!("hbm-ue-repairable@nc{nc}"), &|t, _, _| assert_eq!(g0(t).hbm_ue_repairable(), 0));
        check(&format!("nc-ue@nc{nc}"), &|t, _, _| {
            assert_eq!(g0(t).nc_ue(), 1);
            assert_eq!(t.regs().misc_ram(0).unwrap().sram_ecc().read().unwrap().uncorrected(), 1);
        });
        // Armed only: no collective ran.
        check(&format!("cc-error@nc{nc}"), &|t, _, _| assert_eq!(g0(t).cc_error(), 0));
        check(&format!("net-proxy@nc{nc}"), &|t, _, _| assert_eq!(g0(t).net_proxy_fail(), 0));
        for (spec, id) in [
            ("fp-nan@ncN:act", ErrorId::FpNan),
            ("transient@ncN", ErrorId::SequencerNonfatal),
            ("semaphore-error@ncN:dve", ErrorId::SemaphoreError),
            ("seq-fatal@ncN:pool", ErrorId::SequencerFatal),
        ] {
            check(&spec.replace("ncN", &format!("nc{nc}")), &|t, rings, err| {
                let e = err_records(err);
                assert_eq!(e.len(), 1, "{spec}");
                assert_eq!(e[0].id(), id);
                if id == ErrorId::SequencerFatal {
                    assert_eq!(g0(t).seq_fatal(), 1);
                    assert!(records(&rings[2], 16).is_empty(), "the faulted engine posts nothing");
                } else {
                    assert!(rings.iter().all(|r| records(r, 16).len() == 2));
                }
            });
        }
        check(&format!("hang@nc{nc}:pe"), &|t, rings, _| {
            assert!(records(&rings[0], 16).is_empty());
            assert_eq!(records(&rings[1], 16).len(), 2);
            assert_eq!(t.dev.stats().engine_states[nc as usize][0], csr_maps::consts::seq::STATE_RUNNING);
        });
        check(&format!("out-of-order@nc{nc}:dve"), &|_, rings, _| {
            let r = records(&rings[3], 16);
            assert_eq!(
                r.iter().map(|x| x.kind()).collect::<Vec<_>>(),
                vec![Subtype::End, Subtype::Start, Subtype::End]
            );
        });
        check(&format!("oob@nc{nc}"), &|_, rings, _| {
            let r = records(&rings[0], 16);
            assert_eq!(r[0].kind(), Subtype::Custom);
            assert_eq!(r[0].sub_id, custom::OOB_INDIRECT_SCATTER);
        });
        // dma-abort: the next packet on queue 3 of an engine of the NC aborts.
        let t = T::new(arch);
        t.dev.inject(format!("dma-abort@nc{nc}:q3").parse().unwrap());
        let e = nc * arch.counts.dma_engines_per_nc + 5;
        let mr = t.map(4096);
        let sr = t.map(4096);
        let buf = t.map(4096);
        t.setup_queue(e, 3, t.host(&mr, 0), t.host(&sr, 0), 64);
        write_descs(&mr, 0, &[csr_maps::formats::udma::UdmaDesc::tx(t.host(&buf, 0), 64, 1, true, true)]);
        write_descs(&sr, 0, &[csr_maps::formats::udma::UdmaDesc::rx(t.host(&buf, 64), 64, 1, true, true)]);
        t.doorbell(e, 3, 1, 1);
        assert_eq!(t.dev.stats().dma_aborts, 1);
        assert_eq!(g0(&t).dma_abort(), 1);
        assert_eq!(t.regs().udma(e).unwrap().m2s().q(3).unwrap().status().read().unwrap().aborted(), 1);
    }
}

#[test]
fn q7_claim_ucpl_cap_and_dge_gate() {
    for arch in [&SUNDA, &CAYMAN] {
        let t = T::new(arch);
        let q = t.regs().q7(0).unwrap();
        assert_eq!(q.claim().read().unwrap().0, q7c::READY);
        // First claimant: READY → CLAIMED. A second one reads CLAIMED and must refuse.
        q.claim().write(csr_maps::blocks::q7::Claim(q7c::CLAIMED)).unwrap();
        assert_eq!(q.claim().read().unwrap().0, q7c::CLAIMED);
        // UCPL staging: 64 KiB accepted, 64 KiB + 1 refused with 7.
        let img = t.hbm(0x100_0000);
        let set_ll = |h: UcplHeader, size: u32| {
            t.write_dev(img, &h.encode());
            q.ll_addr().write(csr_maps::blocks::q7::LlAddr(img)).unwrap();
            q.ll_size().write(csr_maps::blocks::q7::LlSize(size)).unwrap();
            q.ll_status().read().unwrap().code()
        };
        let ok = UcplHeader::for_segments(0x8000, 0x7000, 0x100_0000, 0, 0x100_0000);
        assert_eq!(set_ll(ok, ok.image_size() as u32), 1);
        let big = UcplHeader::for_segments(0x8000, 0x10001 - 0x8020, 0x100_0000, 0, 0x100_0000);
        assert!(big.image_size() > 0x10000);
        assert_eq!(set_ll(big, big.image_size() as u32), q7c::ERR_TOO_LARGE);
        assert_eq!(set_ll(ok, 0x10001), q7c::ERR_TOO_LARGE);
        // Released core refuses staging.
        q.claim().write(csr_maps::blocks::q7::Claim(q7c::READY)).unwrap();
        assert_eq!(set_ll(ok, ok.image_size() as u32), q7c::ERR_INVALID);
        // DGE gate: mailbox 0 (priority 1) restricts ops of priority class > 1 to channels 2..3.
        let mb = DgeMailbox { reserved: 0, priority: 1, bitmask: 0b1100 };
        let nx_pool = t.regs().nx(2).unwrap(); // NC0's NX_POOL core
        nx_pool.dge_mailbox(0).unwrap().write(csr_maps::blocks::q7::DgeMailbox(mb.encode())).unwrap();
        let err = t.err_ring(0, 16);
        let leg = |a: u64| Dma2dLeg { start_addr: a, step_elem: [8, 1], num_elem: [4, 8], elem_size: 4 };
        let mk = |prio: u8| Dma2d {
            header: SlotHeader::new(Opcode::DmaMemcpy),
            events: Events::NONE,
            dma_configs: prio,
            semaphore: 20,
            sem_increment: 1,
            op: 0,
            src: leg(t.hbm(0x200_0000)),
            src_bound_reg: 0,
            dst_bound_reg: 0,
            dst: leg(t.hbm(0x300_0000)),
            in_dtype: 0,
            out_dtype: 0,
        };
        let data: Vec<u8> = (0..128u8).collect();
        t.write_dev(t.hbm(0x200_0000), &data);
        t.load_program(0, 2, nc_area(&t, 0, 0), &[mk(1).encode(), mk(3).encode()], false);
        t.start(0, 2, false);
        assert_eq!(t.read_dev(t.hbm(0x300_0000), 128), data);
        let s = t.dev.stats();
        assert_eq!(s.dge_channel_bytes[0], 128, "class 1 not gated (1 > 1 is false): channel 0");
        assert_eq!(s.dge_channel_bytes[2], 128, "class 3 gated to channels 2..3");
        assert_eq!(t.sem(0, 20), 2);
        // A mailbox that enables nothing blocks the op: DGE error record, engine continues.
        nx_pool
            .dge_mailbox(1)
            .unwrap()
            .write(csr_maps::blocks::q7::DgeMailbox(DgeMailbox { reserved: 0, priority: 2, bitmask: 0 }.encode()))
            .unwrap();
        t.load_program(
            0,
            2,
            nc_area(&t, 0, 0),
            &[mk(3).encode(), isa::device_ops::events_only(Opcode::Nop, 0, Events::NONE)],
            false,
        );
        t.start(0, 2, false);
        let e = err_records(&err);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].id(), ErrorId::SequencerNonfatal);
        assert_eq!(t.sem(0, 20), 2, "the gated op did not run");
        assert_eq!(t.dev.stats().engine_states[0][2], csr_maps::consts::seq::STATE_HALTED);
    }
}

fn fw_request(t: &T, seq: u8, cmd: u8, payload: &[u8], crc_ok: bool) -> (FwHeader, Vec<u8>) {
    let m = t.regs().misc_ram(0).unwrap();
    let h = FwHeader { seq, code: cmd, size: fwc::NEW_HEADER_BYTES + payload.len() as u16 };
    for (i, c) in payload.chunks(4).enumerate() {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        m.data(i as u64).unwrap().write(csr_maps::blocks::misc_ram::Data(u32::from_le_bytes(w))).unwrap();
    }
    let crc = h.request_crc(payload) ^ if crc_ok { 0 } else { 1 };
    m.req_hdr0().write(csr_maps::blocks::misc_ram::ReqHdr0(h.encode())).unwrap();
    m.req_hdr1().write(csr_maps::blocks::misc_ram::ReqHdr1(crc)).unwrap();
    m.resp_hi().write(csr_maps::blocks::misc_ram::RespHi(0)).unwrap();
    m.resp_lo().write(csr_maps::blocks::misc_ram::RespLo(0)).unwrap();
    m.ack().write(csr_maps::blocks::misc_ram::Ack(1)).unwrap();
    m.trigger().write(csr_maps::blocks::misc_ram::Trigger(1)).unwrap();
    assert_eq!(m.trigger().read().unwrap().0, 0, "firmware clears the doorbell");
    let r = FwHeader::decode(m.req_hdr0().read().unwrap().0);
    let data: Vec<u8> = (0..8).flat_map(|i| m.data(i).unwrap().read().unwrap().0.to_le_bytes()).collect();
    (r, data)
}

#[test]
fn fwio_mailbox_with_crc32c() {
    let t = T::new(&CAYMAN);
    let m = t.regs().misc_ram(0).unwrap();
    assert_eq!(m.fw_api_version().read().unwrap().0, 7);
    assert_eq!(m.device_id().read().unwrap().0, 0);
    let (r, data) = fw_request(&t, 5, fwc::CMD_GET_DATA, &[2], true);
    assert_eq!((r.seq, r.code), (5, fwc::ERR_SUCCESS));
    assert_eq!(r.size, 8 + 33);
    assert_eq!(data[0], 1, "one available profile");
    let (r, _) = fw_request(&t, 6, fwc::CMD_GET_DATA, &[1], false);
    assert_eq!((r.seq, r.code), (6, fwc::ERR_FAILED), "bad CRC");
    let (r, _) = fw_request(&t, 7, 0x77, &[], true);
    assert_eq!(r.code, fwc::ERR_UNKNOWN_CMD);
    let (r, _) = fw_request(&t, 8, fwc::CMD_SET_POWER_PROFILE, &[0; 8], true);
    assert_eq!(r.code, fwc::ERR_SUCCESS);
    assert_eq!(t.dev.stats().fwio_requests, 4);
}

/// A legacy FW-IO request as the 2.24 kmod sends it (`fw_io_execute_request`, `fw_io_init`,
/// `fw_io_trigger`): the request in host memory — {seq, cmd, size incl. the 8-byte header,
/// CRC-32C of the whole request computed with the CRC field zero}, then the payload — its
/// bus address in misc RAM 0x1F4 (low) / 0x1F0 (high), the response buffer's in 0x1FC /
/// 0x1F8, the response's sequence byte zeroed, then the doorbell; ACK is never written.
/// Returns the response buffer's (seq, error, size) and its data.
fn legacy_request(t: &T, seq: u8, cmd: u8, payload: &[u8], corrupt: bool) -> ((u8, u8, u16), Vec<u8>) {
    use csr_maps::blocks::misc_ram as mr;
    let (req, resp) = (t.map(0x10000), t.map(0x10000));
    let size = 8 + payload.len();
    let mut bytes = vec![seq, cmd];
    bytes.extend_from_slice(&(size as u16).to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(payload);
    let crc = csr_maps::formats::fwio::crc32c(&bytes) ^ corrupt as u32;
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    req.mem().write(0, &bytes).unwrap();
    resp.mem().write(0, &[0u8; 4]).unwrap();
    let (ra, pa) = (t.host(&req, 0), t.host(&resp, 0));
    let m = t.regs().misc_ram(0).unwrap();
    m.req_hdr1().write(mr::ReqHdr1(ra as u32)).unwrap();
    m.req_hdr0().write(mr::ReqHdr0((ra >> 32) as u32)).unwrap();
    m.resp_lo().write(mr::RespLo(pa as u32)).unwrap();
    m.resp_hi().write(mr::RespHi((pa >> 32) as u32)).unwrap();
    m.trigger().write(mr::Trigger(1)).unwrap();
    let mut h = [0u8; 4];
    resp.mem().read(0, &mut h).unwrap();
    let rsize = u16::from_le_bytes([h[2], h[3]]);
    let mut data = vec![0u8; (rsize as usize).saturating_sub(4)];
    resp.mem().read(4, &mut data).unwrap();
    ((h[0], h[1], rsize), data)
}

#[test]
fn legacy_fwio_reads_device_addresses_and_takes_metrics_through_host_buffers() {
    for (arch, api) in [(&SUNDA, 7), (&CAYMAN, 7), (&MARIANA, 7), (&SUNDA, 5)] {
        let t = T::with(sim::SimConfig::new(arch).timing(sim::Timing::Inline).hbm_bytes(1 << 30).fw_api(api));
        let m = t.regs().misc_ram(0).unwrap();
        // READ_HW_COUNTERS: device addresses of misc RAM's API version and a semaphore.
        t.regs().tpb_sem(0).unwrap().sem_set(4).unwrap().write(csr_maps::blocks::tpb_sem::SemSet(77)).unwrap();
        let addrs = [
            arch.bar0_to_dev(m.fw_api_version().offset()).unwrap(),
            arch.bar0_to_dev(t.regs().tpb_sem(0).unwrap().sem_read(4).unwrap().offset()).unwrap(),
        ];
        let payload: Vec<u8> = addrs.iter().flat_map(|a| a.to_le_bytes()).collect();
        let ((seq, err, size), data) = legacy_request(&t, 9, fwc::CMD_READ, &payload, false);
        assert_eq!((seq, err, size), (9, fwc::ERR_SUCCESS, 4 + 8), "{arch} api {api}");
        assert_eq!(data, [api.to_le_bytes(), 77u32.to_le_bytes()].concat(), "{arch}: the values read");
        // POST_METRIC: the blob the kmod also copies to misc RAM 0x100.
        let ((seq, err, size), _) = legacy_request(&t, 10, fwc::CMD_POST_TO_CW, b"nd0 metrics: 1 2 3", false);
        assert_eq!((seq, err, size), (10, fwc::ERR_SUCCESS, 4), "{arch}");
        assert_eq!(t.dev.stats().fwio_metrics_posted, 1);
        // A bad CRC fails; an unknown command says so (the kmod stops retrying on it); an
        // address the firmware cannot read fails the READ.
        assert_eq!(legacy_request(&t, 11, fwc::CMD_READ, &payload, true).0 .1, fwc::ERR_FAILED);
        assert_eq!(legacy_request(&t, 12, 0x42, &[], false).0 .1, fwc::ERR_UNKNOWN_CMD);
        assert_eq!(legacy_request(&t, 13, fwc::CMD_READ, &u64::MAX.to_le_bytes(), false).0 .1, fwc::ERR_FAILED);
        let st = t.dev.stats();
        assert_eq!((st.fwio_requests, st.fwio_legacy_misuse, st.dma_faults), (5, 0, 0), "{arch}");
    }
    // The new protocol still answers on API 7 (ACK written), beside the legacy one.
    let t = T::new(&CAYMAN);
    let (r, _) = fw_request(&t, 5, fwc::CMD_GET_DATA, &[1], true);
    assert_eq!((r.seq, r.code), (5, fwc::ERR_SUCCESS));
}

/// A legacy request whose buffer the IOMMU does not map gets no answer and is counted as a
/// DMA fault (the host times out, as the kmod's retry loop expects of a dead firmware).
#[test]
fn legacy_fwio_request_buffer_outside_the_iommu_is_a_dma_fault() {
    use csr_maps::blocks::misc_ram as mr;
    let t = T::new(&SUNDA);
    let m = t.regs().misc_ram(0).unwrap();
    let nowhere = t.arch.host_dev_addr(0x7_0000_0000);
    m.req_hdr1().write(mr::ReqHdr1(nowhere as u32)).unwrap();
    m.req_hdr0().write(mr::ReqHdr0((nowhere >> 32) as u32)).unwrap();
    m.trigger().write(mr::Trigger(1)).unwrap();
    assert_eq!(t.dev.stats().dma_faults, 1);
}

#[test]
fn tpb_reset_restores_one_nc_and_device_reset_everything() {
    let t = T::new(&SUNDA);
    let sem =
        |nc, v| t.regs().tpb_sem(nc).unwrap().sem_set(3).unwrap().write(csr_maps::blocks::tpb_sem::SemSet(v)).unwrap();
    sem(0, 5);
    sem(1, 6);
    let q7 = t.regs().q7(8).unwrap();
    q7.claim().write(csr_maps::blocks::q7::Claim(q7c::CLAIMED)).unwrap();
    let m = t.regs().misc_ram(0).unwrap();
    m.reset_map().write_with(|v| v.with_tpb(0b10)).unwrap();
    m.reset_request().write(csr_maps::blocks::misc_ram::ResetRequest(fwc::RESET_TPB)).unwrap();
    assert_eq!(m.reset_request().read().unwrap().0, 0, "request taken");
    assert_eq!(m.fw_status().read().unwrap().reset_in_progress(), 0);
    assert_eq!((t.sem(0, 3), t.sem(1, 3)), (5, 0));
    assert_eq!(q7.claim().read().unwrap().0, q7c::READY, "NC1's Q7 cores reboot to READY");
    m.reset_request().write(csr_maps::blocks::misc_ram::ResetRequest(fwc::RESET_DEVICE)).unwrap();
    assert_eq!(t.sem(0, 3), 0);
    assert_eq!(t.dev.stats().resets, 2);
}

/// `hbm-ue` / `hbm-ue-repairable` fire on the first DMA that reads the armed NC's HBM stack:
/// the ECC counter and the INTC line latch then, and the data delivered is damaged (every
/// bit flipped). A DMA from host memory does not fire it.
#[test]
fn hbm_ue_fires_on_the_dma_that_reads_hbm() {
    for arch in [&SUNDA, &CAYMAN] {
        for repairable in [false, true] {
            let t = T::new(arch);
            let nc = 0u64;
            let spec = if repairable { "hbm-ue-repairable@nc0" } else { "hbm-ue@nc0" };
            t.dev.inject(spec.parse().unwrap());
            let g0 = || t.regs().nc_intc(nc).unwrap().g0().cause().read().unwrap();
            let e = nc * arch.counts.dma_engines_per_nc + 1;
            let (mr, sr) = (t.map(4096), t.map(4096));
            let buf = t.map(4096);
            let data: Vec<u8> = (0..64u8).collect();
            buf.mem().write(0, &data).unwrap();
            t.setup_queue(e, 0, t.host(&mr, 0), t.host(&sr, 0), 64);
            // Host → HBM: no HBM read, nothing fires.
            let hbm = t.hbm(0x40_0000);
            write_descs(&mr, 0, &[UdmaDesc::tx(t.host(&buf, 0), 64, 1, true, true)]);
            write_descs(&sr, 0, &[UdmaDesc::rx(hbm, 64, 1, true, true)]);
            t.doorbell(e, 0, 1, 1);
            assert_eq!((g0().hbm_ue(), g0().hbm_ue_repairable()), (0, 0), "{arch} {spec}");
            // HBM → host: fires; the data arrives damaged.
            write_descs(&mr, 1, &[UdmaDesc::tx(hbm, 64, 1, true, true)]);
            write_descs(&sr, 1, &[UdmaDesc::rx(t.host(&buf, 1024), 64, 1, true, true)]);
            t.doorbell(e, 0, 1, 1);
            let mut got = vec![0u8; 64];
            buf.mem().read(1024, &mut got).unwrap();
            assert_eq!(got, data.iter().map(|b| !b).collect::<Vec<_>>(), "{arch} {spec}: damaged");
            let m = t.regs().misc_ram(0).unwrap();
            let ecc = m.hbm_ecc(0).unwrap().read().unwrap();
            if repairable {
                assert_eq!((g0().hbm_ue(), g0().hbm_ue_repairable()), (0, 1));
                assert_eq!(ecc.repairable(), 1);
                assert_eq!(m.hbm_repair_state().read().unwrap().state(), 1);
            } else {
                assert_eq!((g0().hbm_ue(), g0().hbm_ue_repairable()), (1, 0));
                assert_eq!(ecc.uncorrectable(), 1);
            }
            // Fired once: the next read is clean.
            write_descs(&mr, 2, &[UdmaDesc::tx(hbm, 64, 1, true, true)]);
            write_descs(&sr, 2, &[UdmaDesc::rx(t.host(&buf, 2048), 64, 1, true, true)]);
            t.doorbell(e, 0, 1, 1);
            buf.mem().read(2048, &mut got).unwrap();
            assert_eq!(got, data);
        }
    }
}
