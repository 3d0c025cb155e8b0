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
