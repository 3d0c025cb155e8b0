//! UDMA through registers and DMA mappings only.

mod common;
use common::*;
use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::UdmaDesc;
use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use platform::Mmio;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// H2D, then D2D, then D2H of `len` bytes on the arch's host-facing engine, each followed by a
/// semaphore-increment pair and a completion-marker pair.
fn roundtrip(arch: &'static Arch, len: usize) {
    let t = T::new(arch);
    let e = arch.consts.h2t_engine_base;
    let ndesc = 256u32;
    let m2s_ring = t.map(ndesc as usize * 16);
    let s2m_ring = t.map(ndesc as usize * 16);
    t.setup_queue(e, 0, t.host(&m2s_ring, 0), t.host(&s2m_ring, 0), ndesc);
    let src = t.map(len.max(1));
    let dst = t.map(len.max(1));
    let words = t.map(4096);
    words.mem().write_u32(0, 1).unwrap(); // semaphore increment value
    words.mem().write_u32(8, udc::COMPLETION_MARKER).unwrap();
    let data = pattern(len, 7);
    src.mem().write(0, &data).unwrap();
    let (h0, h1) = (0x10_0000u64, 0x2000_0000u64);
    let mut idx = 0usize;
    let rid = udc::INITIAL_RING_ID;
    let mut step = |from: u64, to: u64, expect_sem: i32| {
        let (mut m, mut s) = pairs(from, to, len as u64, rid);
        m.push(UdmaDesc::tx(t.host(&words, 0), 4, rid, true, true));
        s.push(UdmaDesc::rx(t.sem_inc_addr(0, 5), 4, rid, true, true));
        words.mem().write_u32(16, 0).unwrap();
        m.push(UdmaDesc::tx(t.host(&words, 8), 4, rid, true, true));
        s.push(UdmaDesc::rx(t.host(&words, 16), 4, rid, true, true));
        assert!(idx + m.len() < ndesc as usize);
        write_descs(&m2s_ring, idx, &m);
        write_descs(&s2m_ring, idx, &s);
        t.doorbell(e, 0, m.len() as u32, s.len() as u32);
        idx += m.len();
        assert_eq!(t.head(e, 0), (idx as u32, rid as u32), "head pointer and ring id");
        assert_eq!(t.sem(0, 5), expect_sem, "semaphore incremented by the completion pair");
        assert_eq!(words.mem().read_u32(16).unwrap(), udc::COMPLETION_MARKER, "completion marker");
    };
    step(t.host(&src, 0), t.hbm(h0), 1);
    step(t.hbm(h0), t.hbm(h1), 2);
    step(t.hbm(h1), t.host(&dst, 0), 3);
    let mut out = vec![0u8; len];
    dst.mem().read(0, &mut out).unwrap();
    assert_eq!(out, data, "{arch} {len}");
    // The bytes also sit in HBM, readable through BAR4.
    if len >= 4 {
        let b4 = t.dev_bar4();
        let w = b4.read32(h1).unwrap().to_le_bytes();
        assert_eq!(&w[..], &data[..4]);
    }
    let st = t.dev.stats();
    assert_eq!(st.dma_faults, 0);
    assert_eq!(st.dma_bytes, 3 * (len as u64 + 8));
}

trait Bar4 {
    fn dev_bar4(&self) -> std::sync::Arc<dyn Mmio>;
}
impl Bar4 for T {
    fn dev_bar4(&self) -> std::sync::Arc<dyn Mmio> {
        use platform::Platform;
        self.dev.bar(self.arch.bars.dram).unwrap()
    }
}

#[test]
fn copies_all_sizes_all_arches() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        for len in [1usize, 4096, 65536, 65537] {
            roundtrip(arch, len);
        }
    }
}

#[test]
fn ring_wraps_and_ring_id_advances() {
    let t = T::new(&SUNDA);
    let e = 0;
    let n = 32u32;
    let mr = t.map(n as usize * 16);
    let sr = t.map(n as usize * 16);
    t.setup_queue(e, 2, t.host(&mr, 0), t.host(&sr, 0), n);
    let buf = t.map(4096);
    let mut idx = 0u32;
    let mut rid = udc::INITIAL_RING_ID;
    for i in 0..40u32 {
        buf.mem().write_u32(0, i).unwrap();
        let m = UdmaDesc::tx(t.host(&buf, 0), 4, rid, true, true);
        let s = UdmaDesc::rx(t.host(&buf, 64), 4, rid, true, true);
        write_descs(&mr, idx as usize, &[m]);
        write_descs(&sr, idx as usize, &[s]);
        t.doorbell(e, 2, 1, 1);
        assert_eq!(buf.mem().read_u32(64).unwrap(), i);
        idx += 1;
        if idx == n {
            idx = 0;
            rid = (rid + 1) & 3;
        }
        assert_eq!(t.head(e, 2), (idx, rid as u32));
    }
    // A descriptor carrying a stale ring id is not consumed: the ring-id error is latched.
    write_descs(&mr, idx as usize, &[UdmaDesc::tx(t.host(&buf, 0), 4, rid ^ 1, true, true)]);
    write_descs(&sr, idx as usize, &[UdmaDesc::rx(t.host(&buf, 64), 4, rid, true, true)]);
    t.doorbell(e, 2, 1, 1);
    assert_eq!(t.head(e, 2), (idx, rid as u32));
    let cause = t.regs().udma(e).unwrap().gen().sec_a().cause().read().unwrap();
    assert_eq!(cause.pref_ring_id(), 1);
}

#[test]
fn unmapped_iova_faults_and_aborts_without_touching_guards() {
    for arch in [&SUNDA, &CAYMAN] {
        let t = T::new(arch);
        let e = arch.consts.h2t_engine_base;
        let mr = t.map(4096);
        let sr = t.map(4096);
        t.setup_queue(e, 1, t.host(&mr, 0), t.host(&sr, 0), 64);
        // guard | buffer | guard: three mappings; the descriptor overruns the middle one
        // into an IOVA that was unmapped.
        let g1 = t.map(4096);
        let mid = t.map(4096);
        let g2 = t.map(4096);
        g1.mem().fill(0, 4096, 0xAA).unwrap();
        g2.mem().fill(0, 4096, 0xBB).unwrap();
        let hole = g2.iova() + (64 << 20); // beyond every mapping made here
        let src = t.map(8192);
        let m = UdmaDesc::tx(t.host(&src, 0), 8192, 1, true, true);
        let s = UdmaDesc::rx(arch.host_dev_addr(hole), 8192, 1, true, true);
        write_descs(&mr, 0, &[m]);
        write_descs(&sr, 0, &[s]);
        t.doorbell(e, 1, 1, 1);
        let st = t.dev.stats();
        assert_eq!(st.dma_faults, 1);
        assert_eq!(st.dma_aborts, 1);
        let u = t.regs().udma(e).unwrap();
        assert_eq!(u.s2m().q(1).unwrap().status().read().unwrap().aborted(), 1);
        assert_eq!(u.m2s().state().read().unwrap().data_rd_ctrl(), udc::FIELD_ABORT);
        assert_eq!(u.gen().sec_b().cause().read().unwrap().data_axi_resp(), 1);
        assert_eq!(t.head(e, 1), (0, 1), "nothing consumed");
        let nc = 0;
        let intc = t.regs().nc_intc(nc).unwrap().g0().cause().read().unwrap();
        assert_eq!((intc.dma_abort(), intc.dma_fault()), (1, 1));
        // Writes spanning a mapping edge into unmapped space are refused as a whole.
        let m = UdmaDesc::tx(t.host(&src, 0), 8192, 1, true, true);
        let s = UdmaDesc::rx(t.host(&g2, 0), 8192, 1, true, true);
        u.m2s().change_state().write_with(|v| v.with_normal(1)).unwrap();
        u.s2m().change_state().write_with(|v| v.with_normal(1)).unwrap();
        write_descs(&mr, 0, &[m]);
        write_descs(&sr, 0, &[s]);
        t.setup_queue(e, 1, t.host(&mr, 0), t.host(&sr, 0), 64);
        t.doorbell(e, 1, 1, 1);
        let mut b = vec![0u8; 4096];
        g1.mem().read(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xAA));
        g2.mem().read(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xBB), "guard page untouched");
        assert_eq!(t.dev.stats().dma_faults, 2);
        drop((g1, mid, g2));
    }
}

#[test]
fn read_only_mapping_refuses_device_writes() {
    use platform::{DmaDir, HostMem, Platform};
    let t = T::new(&SUNDA);
    let mr = t.map(4096);
    let sr = t.map(4096);
    t.setup_queue(32, 0, t.host(&mr, 0), t.host(&sr, 0), 64);
    let ro = t.dev.dma_map(HostMem::alloc(4096).unwrap(), DmaDir::ToDevice).unwrap();
    ro.mem().fill(0, 4096, 0x5A).unwrap();
    let src = t.map(4096);
    write_descs(&mr, 0, &[UdmaDesc::tx(t.host(&src, 0), 64, 1, true, true)]);
    write_descs(&sr, 0, &[UdmaDesc::rx(t.host(&ro, 0), 64, 1, true, true)]);
    t.doorbell(32, 0, 1, 1);
    assert_eq!(t.dev.stats().dma_faults, 1);
    let mut b = [0u8; 64];
    ro.mem().read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0x5A));
}

#[test]
fn mappings_are_accounted_and_released() {
    let t = T::new(&CAYMAN);
    let a = t.map(8192);
    let b = t.map(1 << 21);
    let s = t.dev.stats();
    assert_eq!((s.iommu_mappings, s.iommu_bytes), (2, 8192 + (1 << 21)));
    drop(a);
    drop(b);
    let s = t.dev.stats();
    assert_eq!((s.iommu_mappings, s.iommu_bytes), (0, 0));
}

/// Simulated HBM costs host memory only for what is written: zeros DMA'd into HBM that holds
/// only zeros write nothing, data costs the 64 KiB granules it touches, and zeros DMA'd over
/// written HBM make it zero again (giving its pages back for runs of at least 512 KiB) — all
/// read back through DMA and BAR4.
#[test]
fn hbm_costs_host_memory_only_for_what_is_written() {
    let t = T::new(&SUNDA);
    let e = SUNDA.consts.h2t_engine_base;
    let ndesc = 4096u32;
    let mr = t.map(ndesc as usize * 16);
    let sr = t.map(ndesc as usize * 16);
    t.setup_queue(e, 0, t.host(&mr, 0), t.host(&sr, 0), ndesc);
    const MIB: u64 = 1 << 20;
    const G: u64 = 64 << 10;
    let zeros = t.map(4 << 20);
    let src = t.map(4 << 20);
    let data = pattern(4 << 20, 11);
    src.mem().write(0, &data).unwrap();
    let back = t.map(8 << 20);
    let mut idx = 0usize;
    // One packet per 15 descriptors of 64 KiB (as the driver's copies are cut), in order.
    let mut dma = |from: u64, to: u64, len: u64| {
        let mut off = 0;
        while off < len {
            let n = (len - off).min(15 * G);
            let (m, s) = pairs(from + off, to + off, n, udc::INITIAL_RING_ID);
            assert!(idx + m.len() < ndesc as usize);
            write_descs(&mr, idx, &m);
            write_descs(&sr, idx, &s);
            t.doorbell(e, 0, m.len() as u32, s.len() as u32);
            idx += m.len();
            assert_eq!(t.head(e, 0).0 as usize, idx, "the packet completed");
            off += n;
        }
    };
    let base = 64 * MIB;
    // 16 MiB of zeros into never-written HBM, and a device-to-device copy of never-written
    // HBM: nothing is written.
    for k in 0..4 {
        dma(t.host(&zeros, 0), t.hbm(base + k * 4 * MIB), 4 * MIB);
    }
    dma(t.hbm(512 * MIB), t.hbm(base + 16 * MIB), 4 * MIB);
    let st = t.dev.stats();
    assert_eq!(st.hbm_written_bytes, 0, "zeros into zeros cost nothing");
    assert_eq!(st.hbm_zero_skipped_bytes, 20 * MIB);
    assert_eq!(st.dma_faults, 0);
    // 4 MiB of data 100 bytes into a granule: 65 granules.
    dma(t.host(&src, 0), t.hbm(base + 100), 4 * MIB);
    assert_eq!(t.dev.stats().hbm_written_bytes, 65 * G);
    dma(t.hbm(base), t.host(&back, 0), 8 * MIB);
    let mut out = vec![0u8; 8 << 20];
    back.mem().read(0, &mut out).unwrap();
    assert!(out[..100].iter().all(|&b| b == 0));
    assert_eq!(&out[100..100 + data.len()], &data[..]);
    assert!(out[100 + data.len()..].iter().all(|&b| b == 0));
    let b4 = t.dev_bar4();
    let hbm0 = SUNDA.region("hbm").unwrap().base(0).unwrap();
    assert_eq!(b4.read32(hbm0 + base + 100).unwrap().to_le_bytes(), data[..4]);
    // Zeros over the data (8 MiB: two 4 MiB copies): every granule is clean again, the whole
    // runs' pages given back; the data reads as zeros through DMA and BAR4.
    dma(t.host(&zeros, 0), t.hbm(base), 4 * MIB);
    dma(t.host(&zeros, 0), t.hbm(base + 4 * MIB), 4 * MIB);
    let st = t.dev.stats();
    assert_eq!(st.hbm_written_bytes, 0, "zeroed HBM is clean");
    assert!(st.hbm_dropped_bytes >= 3 * MIB, "pages given back: {}", st.hbm_dropped_bytes);
    dma(t.hbm(base), t.host(&back, 0), 8 * MIB);
    back.mem().read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0), "zeroed HBM reads zeros");
    assert_eq!(b4.read32(hbm0 + base + 100).unwrap(), 0);
    // A BAR4 write is tracked like DMA: a word costs its granule, and zeros over it clean it.
    b4.write32(hbm0 + base + 3 * G + 8, 0xDEAD_BEEF).unwrap();
    assert_eq!(t.dev.stats().hbm_written_bytes, G);
    dma(t.host(&zeros, 0), t.hbm(base + 3 * G), G);
    assert_eq!(t.dev.stats().hbm_written_bytes, 0);
    assert_eq!(b4.read32(hbm0 + base + 3 * G + 8).unwrap(), 0);
    assert_eq!(t.dev.stats().dma_faults, 0);
}

/// The old, wrong queue-config sequence (fixed in hal after the kmod comparison,
/// docs/hardware-safety.md "The kmod as an oracle"): engine init leaves every queue's `cfg` at
/// the enables alone (0x00030000, as the kmod's `udma_set_defaults` writes it), and the queue
/// is then enabled by a read-modify-write of that value, so it runs with bits 24-25 of the
/// register's reset value cleared. The simulator refuses the work and counts each doorbell;
/// the kmod's sequence (the enables over the reset value 0x03000000) copies and counts nothing.
#[test]
fn queue_enabled_with_cfg_bits_24_25_cleared_is_refused_and_counted() {
    use csr_maps::blocks::{udma_m2s_q as mq, udma_s2m_q as sq};
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        for old in [true, false] {
            let t = T::new(arch);
            let (e, q, n) = (arch.consts.h2t_engine_base, 1u64, 32u32);
            let u = t.regs().udma(e).unwrap();
            // Engine init's queue defaults.
            u.m2s().q(q).unwrap().cfg().write(mq::Cfg(udc::Q_CFG_ENABLE)).unwrap();
            u.s2m().q(q).unwrap().cfg().write(sq::Cfg(udc::Q_CFG_ENABLE)).unwrap();
            let (mr, sr) = (t.map(n as usize * 16), t.map(n as usize * 16));
            // `setup_queue` enables both halves by read-modify-write: over engine init's value,
            // that is the old sequence.
            t.setup_queue(e, q, t.host(&mr, 0), t.host(&sr, 0), n);
            if !old {
                // The kmod's: the enables written over the reset value.
                let on = udc::Q_CFG_RESET | udc::Q_CFG_ENABLE;
                u.m2s().q(q).unwrap().cfg().write(mq::Cfg(on)).unwrap();
                u.s2m().q(q).unwrap().cfg().write(sq::Cfg(on)).unwrap();
            }
            let buf = t.map(4096);
            buf.mem().write_u32(0, 0x5eed_f00d).unwrap();
            let rid = udc::INITIAL_RING_ID;
            write_descs(&mr, 0, &[UdmaDesc::tx(t.host(&buf, 0), 4, rid, true, true)]);
            write_descs(&sr, 0, &[UdmaDesc::rx(t.host(&buf, 64), 4, rid, true, true)]);
            t.doorbell(e, q, 1, 1);
            let st = t.dev.stats();
            let what = format!("{arch} {}", if old { "old sequence" } else { "kmod sequence" });
            if old {
                assert_eq!(st.queue_cfg_misuse, 2, "{what}: one per half's doorbell");
                assert_eq!((st.dma_packets, t.head(e, q)), (0, (0, rid as u32)), "{what}: the queue ran");
                assert_eq!(buf.mem().read_u32(64).unwrap(), 0, "{what}");
            } else {
                assert_eq!(st.queue_cfg_misuse, 0, "{what}");
                assert_eq!(t.head(e, q), (1, rid as u32), "{what}");
                assert_eq!(buf.mem().read_u32(64).unwrap(), 0x5eed_f00d, "{what}");
            }
        }
    }
}

/// The descriptors the kmod writes for one `MEM_BUF_COPY64` / `MEM_COPY` (`ndma_memcpy_chunks`,
/// `udma_m2m_build_descriptor`, `ndma_memcpy_add_completion_desc`): one packet per ≤ 64 KiB
/// chunk — M2S FIRST|LAST with the default metadata, the last chunk with the write barrier;
/// S2M a bare buffer (length and ring id, no FIRST/LAST) — then the completion-marker pair.
fn kmod_copy(src: u64, dst: u64, len: u64, marker: (u64, u64), rid: u8) -> (Vec<UdmaDesc>, Vec<UdmaDesc>) {
    use csr_maps::formats::udma::meta;
    let (mut m, mut s) = (vec![], vec![]);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(65536);
        let mut a = UdmaDesc::tx(src + off, n as u32, rid, true, true);
        if off + n == len {
            a.word1 |= meta::WRITE_BARRIER;
        }
        m.push(a);
        s.push(UdmaDesc::rx(dst + off, n as u32, rid, false, false));
        off += n;
    }
    m.push(UdmaDesc::tx(marker.0, 4, rid, true, true));
    s.push(UdmaDesc::rx(marker.1, 4, rid, false, false));
    (m, s)
}

#[test]
fn copies_the_kmod_builds_complete_without_s2m_packet_flags() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        for len in [1usize, 4097, 65536, 65537, (3 << 20) + 7] {
            let t = T::new(arch);
            let e = arch.consts.h2t_engine_base;
            let ndesc = 256u32;
            let (mr, sr) = (t.map(ndesc as usize * 16), t.map(ndesc as usize * 16));
            t.setup_queue(e, 0, t.host(&mr, 0), t.host(&sr, 0), ndesc);
            let (src, dst, words) = (t.map(len + 1), t.map(len + 1), t.map(4096));
            let data = pattern(len, 3);
            src.mem().write(1, &data).unwrap();
            words.mem().write_u32(0, udc::COMPLETION_MARKER).unwrap();
            let marker = (t.host(&words, 0), t.host(&words, 4));
            let mut idx = 0usize;
            let rid = udc::INITIAL_RING_ID;
            // H2D from an odd host offset, then D2H to an odd one.
            for (from, to) in [(t.host(&src, 1), t.hbm(0x10_0001)), (t.hbm(0x10_0001), t.host(&dst, 1))] {
                words.mem().write_u32(4, 0).unwrap();
                let (m, s) = kmod_copy(from, to, len as u64, marker, rid);
                write_descs(&mr, idx, &m);
                write_descs(&sr, idx, &s);
                t.doorbell(e, 0, m.len() as u32, s.len() as u32);
                idx += m.len();
                assert_eq!(words.mem().read_u32(4).unwrap(), udc::COMPLETION_MARKER, "{arch} {len}: marker written");
                assert_eq!(t.head(e, 0), (idx as u32, rid as u32), "{arch} {len}: every descriptor consumed");
            }
            let mut out = vec![0u8; len];
            dst.mem().read(1, &mut out).unwrap();
            assert!(out == data, "{arch} {len}: bytes");
            let st = t.dev.stats();
            assert_eq!((st.dma_faults, st.dma_aborts), (0, 0), "{arch} {len}");
            assert_eq!(st.dma_packets, 2 * (len.div_ceil(65536) as u64 + 1), "{arch} {len}: one packet per pair");
        }
    }
}

/// S2M descriptors are buffers: an M2S packet of three descriptors fills as many S2M
/// buffers as it needs from the S2M head, whatever their sizes, and waits (moving nothing)
/// while the S2M descriptors made available cannot hold it; the next packet starts in a
/// fresh S2M descriptor.
#[test]
fn an_m2s_packet_takes_s2m_buffers_until_they_hold_it() {
    let t = T::new(&CAYMAN);
    let e = 0;
    let (mr, sr) = (t.map(64 * 16), t.map(64 * 16));
    t.setup_queue(e, 1, t.host(&mr, 0), t.host(&sr, 0), 64);
    let (src, dst) = (t.map(16384), t.map(16384));
    let data = pattern(6000, 9);
    src.mem().write(0, &data).unwrap();
    let rid = udc::INITIAL_RING_ID;
    let s0 = t.host(&src, 0);
    let m = [
        UdmaDesc::tx(s0, 1000, rid, true, false),
        UdmaDesc::tx(s0 + 1000, 2000, rid, false, false),
        UdmaDesc::tx(s0 + 3000, 3000, rid, false, true),
        // A second one-descriptor packet.
        UdmaDesc::tx(s0, 100, rid, true, true),
    ];
    let s = [
        UdmaDesc::rx(t.host(&dst, 0), 4096, rid, false, false),
        UdmaDesc::rx(t.host(&dst, 4096), 4096, rid, false, false),
        UdmaDesc::rx(t.host(&dst, 12288), 4096, rid, false, false),
    ];
    write_descs(&mr, 0, &m);
    write_descs(&sr, 0, &s);
    // One S2M buffer of 4096 bytes cannot hold the 6000-byte packet: nothing moves.
    t.doorbell(e, 1, 4, 1);
    assert_eq!(t.head(e, 1), (0, rid as u32));
    assert_eq!(t.dev.stats().dma_packets, 0);
    // The second buffer: the first packet lands across both, the second in the third.
    t.doorbell(e, 1, 0, 2);
    assert_eq!(t.head(e, 1), (4, rid as u32));
    let mut out = vec![0u8; 6000];
    dst.mem().read(0, &mut out).unwrap();
    assert_eq!(out, data);
    let mut second = vec![0u8; 100];
    dst.mem().read(12288, &mut second).unwrap();
    assert_eq!(second, data[..100]);
    let s2m_head = t.regs().udma(e).unwrap().s2m().q(1).unwrap().head().read().unwrap();
    assert_eq!(s2m_head.idx(), 3, "S2M head past the three buffers");
    assert_eq!(t.dev.stats().dma_packets, 2);
}

/// A queue of many packets does not hold the register file: with device threads, the host's
/// register reads are answered between packets (as on hardware, where the engines move data
/// while the host reads registers), so the host sees the queue's head advance part-way. Before,
/// an NC thread processed the whole queue under the state lock and the first read after the
/// doorbell waited for all of it — 24 GiB of the kmod's HBM scrub kept a guest's BAR read past
/// QEMU's 5 s vfio-user reply timeout (docs/kmod-guest.md).
#[test]
fn register_reads_are_answered_while_a_long_queue_runs() {
    let arch = &SUNDA;
    let t = T::with(sim::SimConfig::new(arch).timing(sim::Timing::Threaded).hbm_bytes(1 << 30));
    let e = arch.consts.h2t_engine_base;
    let ndesc = 8192u32;
    let (mr, sr) = (t.map(ndesc as usize * 16), t.map(ndesc as usize * 16));
    t.setup_queue(e, 0, t.host(&mr, 0), t.host(&sr, 0), ndesc);
    let src = t.map(65536);
    src.mem().write(0, &pattern(65536, 9)).unwrap();
    let rid = udc::INITIAL_RING_ID;
    let packets = 8000usize;
    let m: Vec<UdmaDesc> = (0..packets).map(|_| UdmaDesc::tx(t.host(&src, 0), 65536, rid, true, true)).collect();
    let s: Vec<UdmaDesc> = (0..packets).map(|_| UdmaDesc::rx(t.hbm(0x10_0000), 65536, rid, true, true)).collect();
    write_descs(&mr, 0, &m);
    write_descs(&sr, 0, &s);
    let t0 = std::time::Instant::now();
    t.doorbell(e, 0, packets as u32, packets as u32);
    let (mut seen_between, mut slowest) = (0, std::time::Duration::ZERO);
    loop {
        let r0 = std::time::Instant::now();
        let (idx, _) = t.head(e, 0);
        slowest = slowest.max(r0.elapsed());
        if idx as usize == packets {
            break;
        }
        if idx > 0 {
            seen_between += 1;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the queue did not finish");
    }
    let total = t0.elapsed();
    assert_eq!(t.dev.stats().dma_packets, packets as u64);
    println!("{packets} packets of 64 KiB in {total:?}; {seen_between} reads saw the head part-way; slowest read {slowest:?}");
    assert!(seen_between > 0, "no register read was answered while the queue ran ({total:?})");
    assert!(
        slowest < total / 2 || slowest < std::time::Duration::from_millis(20),
        "a read waited {slowest:?} of {total:?}"
    );
}
