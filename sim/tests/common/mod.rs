//! A minimal test driver: just enough register programming to exercise the simulator
//! through its BARs and DMA mappings (the real driver is the `hal` crate).
#![allow(dead_code)]

use std::sync::Arc;

use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::UdmaDesc;
use csr_maps::{Arch, Regs};
use platform::{DmaDir, DmaMapping, HostMem, Mmio, Platform};
use sim::{SimConfig, SimDevice, Timing};

pub struct T {
    pub dev: SimDevice,
    pub bar: Arc<dyn Mmio>,
    pub arch: &'static Arch,
}

impl T {
    pub fn new(arch: &'static Arch) -> Self {
        Self::with(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 30))
    }
    pub fn with(cfg: SimConfig) -> Self {
        let arch = cfg.arch;
        let dev = SimDevice::new(cfg).unwrap();
        Self::from(dev, arch)
    }
    pub fn from(dev: SimDevice, arch: &'static Arch) -> Self {
        let bar = dev.bar(arch.bars.apb).unwrap();
        Self { dev, bar, arch }
    }
    pub fn regs(&self) -> Regs<'_> {
        Regs::new(self.arch, self.bar.as_ref())
    }
    pub fn map(&self, len: usize) -> DmaMapping {
        self.dev.dma_map(HostMem::alloc(len).unwrap(), DmaDir::Bidirectional).unwrap()
    }
    pub fn host(&self, m: &DmaMapping, off: u64) -> u64 {
        self.arch.host_dev_addr(m.iova() + off)
    }
    pub fn hbm(&self, off: u64) -> u64 {
        self.arch.hbm_dev_addr(0, off).unwrap()
    }
    pub fn sem_inc_addr(&self, nc: u64, i: u64) -> u64 {
        let off = self.regs().tpb_sem(nc).unwrap().sem_inc(i).unwrap().offset();
        self.arch.bar0_to_dev(off).unwrap()
    }
    pub fn sem(&self, nc: u64, i: u64) -> i32 {
        self.regs().tpb_sem(nc).unwrap().sem_read(i).unwrap().read().unwrap().0 as i32
    }
    /// Program both halves of queue `q` of engine `e` onto the given rings.
    pub fn setup_queue(&self, e: u64, q: u64, m2s_ring: u64, s2m_ring: u64, ndesc: u32) {
        let u = self.regs().udma(e).unwrap();
        let m = u.m2s().q(q).unwrap();
        m.sw_ctrl().write_with(|v| v.with_rst_q(1)).unwrap();
        m.ring_base_lo().write(csr_maps::blocks::udma_m2s_q::RingBaseLo(m2s_ring as u32)).unwrap();
        m.ring_base_hi().write(csr_maps::blocks::udma_m2s_q::RingBaseHi((m2s_ring >> 32) as u32)).unwrap();
        m.ring_len().write_with(|v| v.with_count(ndesc)).unwrap();
        m.cfg().modify(|v| v.with_en_pref(1).with_en_scheduling(1)).unwrap();
        let s = u.s2m().q(q).unwrap();
        s.sw_ctrl().write_with(|v| v.with_rst_q(1)).unwrap();
        s.ring_base_lo().write(csr_maps::blocks::udma_s2m_q::RingBaseLo(s2m_ring as u32)).unwrap();
        s.ring_base_hi().write(csr_maps::blocks::udma_s2m_q::RingBaseHi((s2m_ring >> 32) as u32)).unwrap();
        s.ring_len().write_with(|v| v.with_count(ndesc)).unwrap();
        s.cfg().modify(|v| v.with_en_pref(1).with_en_stream(1)).unwrap();
        u.m2s().desc_pref_cfg2().write(csr_maps::blocks::udma_m2s::DescPrefCfg2(udc::M2S_PREF_CFG2)).unwrap();
    }
    pub fn doorbell(&self, e: u64, q: u64, m2s: u32, s2m: u32) {
        let u = self.regs().udma(e).unwrap();
        u.s2m().q(q).unwrap().tail_inc().write_with(|v| v.with_count(s2m)).unwrap();
        u.m2s().q(q).unwrap().tail_inc().write_with(|v| v.with_count(m2s)).unwrap();
    }
    pub fn head(&self, e: u64, q: u64) -> (u32, u32) {
        let h = self.regs().udma(e).unwrap().m2s().q(q).unwrap().head().read().unwrap();
        (h.idx(), h.ring_id())
    }
}

/// Split a transfer into ≤ 64 KiB descriptor pairs (FIRST on the first, LAST on the last, CONCAT between).
pub fn pairs(src: u64, dst: u64, len: u64, ring_id: u8) -> (Vec<UdmaDesc>, Vec<UdmaDesc>) {
    let (mut m, mut s) = (vec![], vec![]);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(65536);
        let first = off == 0;
        let last = off + n == len;
        let mut a = UdmaDesc::tx(src + off, n as u32, ring_id, first, last);
        a.ctrl.concat = !last;
        let mut b = UdmaDesc::rx(dst + off, n as u32, ring_id, first, last);
        b.ctrl.concat = !last;
        m.push(a);
        s.push(b);
        off += n;
    }
    (m, s)
}

pub fn write_descs(ring: &DmaMapping, start: usize, d: &[UdmaDesc]) {
    for (i, x) in d.iter().enumerate() {
        ring.mem().write((start + i) * 16, &x.encode()).unwrap();
    }
}

use csr_maps::formats::notify::InferStatus;
use isa::slot::SLOT_BYTES;

/// Device address of HBM stack 0 offset `off` of NC `nc`'s private 64 MiB area.
pub fn nc_area(t: &T, nc: u64, off: u64) -> u64 {
    t.hbm((nc + 1) * (64 << 20) + off)
}

impl T {
    /// Write slots into device memory at `addr` through BAR4.
    pub fn write_dev(&self, addr: u64, bytes: &[u8]) {
        use platform::Platform;
        let (k, off) = self.arch.dev_to_hbm(addr).unwrap();
        let b4 = self.dev.bar(self.arch.bars.dram).unwrap();
        let base = self.arch.region("hbm").unwrap().base(k).unwrap() + off;
        for (i, c) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            b4.write32(base + 4 * i as u64, u32::from_le_bytes(w)).unwrap();
        }
    }
    pub fn read_dev(&self, addr: u64, len: usize) -> Vec<u8> {
        use platform::Platform;
        let (k, off) = self.arch.dev_to_hbm(addr).unwrap();
        let b4 = self.dev.bar(self.arch.bars.dram).unwrap();
        let base = self.arch.region("hbm").unwrap().base(k).unwrap() + off;
        let mut v = Vec::new();
        for i in 0..len.div_ceil(4) {
            v.extend_from_slice(&b4.read32(base + 4 * i as u64).unwrap().to_le_bytes());
        }
        v.truncate(len);
        v
    }
    /// Load a program for engine `e` of `nc` (slots at `addr`) and configure its INFER_STATUS slot.
    pub fn load_program(&self, nc: u64, e: u64, addr: u64, slots: &[[u8; SLOT_BYTES]], looped: bool) {
        let bytes: Vec<u8> = slots.iter().flatten().copied().collect();
        self.write_dev(addr, &bytes);
        let s = self.regs().seq(nc).unwrap().eng(e).unwrap();
        s.ifq_base_lo().write_with(|_| csr_maps::blocks::seq_engine::IfqBaseLo(addr as u32)).unwrap();
        s.ifq_base_hi().write_with(|_| csr_maps::blocks::seq_engine::IfqBaseHi((addr >> 32) as u32)).unwrap();
        s.ifq_len().write_with(|v| v.with_slots(slots.len() as u32)).unwrap();
        s.nq_infer_slot().write_with(|v| v.with_slot(self.arch.consts.nq_slot_infer_status as u32 + e as u32)).unwrap();
        s.ctrl().write_with(|v| v.with_loop_en(looped as u32)).unwrap();
    }
    pub fn start(&self, nc: u64, e: u64, looped: bool) {
        let s = self.regs().seq(nc).unwrap().eng(e).unwrap();
        s.ctrl().write_with(|v| v.with_enable(1).with_loop_en(looped as u32)).unwrap();
    }
    /// Program NOTIFIC slot `slot` of `nc` onto a host ring of `records` 16-byte entries.
    pub fn nq_ring(&self, nc: u64, slot: u64, records: usize) -> platform::DmaMapping {
        let ring = self.map(records * 16);
        let n = self.regs().notific(nc).unwrap().nq(slot).unwrap();
        let a = self.host(&ring, 0);
        n.base_hi().write(csr_maps::blocks::notific_slot::BaseHi((a >> 32) as u32)).unwrap();
        n.base_lo().write(csr_maps::blocks::notific_slot::BaseLo(a as u32)).unwrap();
        n.size().write(csr_maps::blocks::notific_slot::Size(records as u32 * 16)).unwrap();
        ring
    }
    pub fn infer_ring(&self, nc: u64, e: u64, records: usize) -> platform::DmaMapping {
        self.nq_ring(nc, self.arch.consts.nq_slot_infer_status + e, records)
    }
    pub fn err_ring(&self, nc: u64, records: usize) -> platform::DmaMapping {
        self.nq_ring(nc, self.arch.consts.nq_slot_error, records)
    }
}

/// Valid records (phase == `phase`) at the start of a host ring.
pub fn records(ring: &platform::DmaMapping, n: usize) -> Vec<InferStatus> {
    (0..n)
        .map(|i| {
            let mut b = [0u8; 16];
            ring.mem().read(i * 16, &mut b).unwrap();
            InferStatus::decode(&b)
        })
        .take_while(|r| r.phase)
        .collect()
}
