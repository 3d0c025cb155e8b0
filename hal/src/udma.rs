//! UDMA: engine bring-up per arch, queue programming, the descriptor-ring writer,
//! doorbells, completion detection, quiesce and recovery from abort
//! (docs/facts/hardware.md §3).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::blocks::{
    iofic_axi_parity, iofic_group, iofic_m2s_err, iofic_s2m_err, iofic_summary, udma_gen as gen, udma_m2s as m2s,
    udma_m2s_q as mq, udma_s2m as s2m, udma_s2m_q as sq,
};
use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::{meta, DescCtrl, UdmaDesc, DESC_BYTES, MAX_DESC_LEN};
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};
use crate::mem::{HostBuf, HostPool};
use crate::park::{program_queue, Parking};

/// Descriptors per packet the driver builds: as many full descriptors as fit both the
/// programmed packet-size limit ([`udc::MAX_PACKET_BYTES`], 0xFFFFF: a longer packet aborts
/// the engine with "packet too long") and the arch's descriptors-per-packet setting less the
/// metadata descriptor (`max_desc_per_pkt_tx` − 1).
pub fn descs_per_packet(arch: &Arch) -> usize {
    let by_size = (udc::MAX_PACKET_BYTES / MAX_DESC_LEN as u64) as usize;
    let by_count = arch.counts.max_desc_per_pkt_tx.saturating_sub(1) as usize;
    by_size.min(by_count).max(1)
}

/// Bring up engine `e` as the kmod does (§3.6), with the arch's values from csr-maps, in the
/// kmod's order: (V2, SENG engines) SDMA broadcast, queue enables and defaults
/// (`udma_set_defaults`), the error interrupts (`udma_iofic_m2s_error_ints_unmask`,
/// `udma_iofic_s2m_error_ints_unmask`), completion and prefetch config, the SDMA wrapper,
/// then (V2) the AXI error abort setup (`udma_m2m_set_axi_error_abort`) or (V3/V4, SENG
/// engines) the ring-id error masks (`udma_m2m_mask_ring_id_error`).
pub fn init_engine(arch: &'static Arch, regs: &Regs<'_>, e: u64) -> Result<()> {
    let c = &arch.consts;
    let u = regs.udma(e)?;
    let (m, s) = (u.m2s(), u.s2m());
    let per_nc = arch.counts.dma_engines_per_nc;
    let seng = e < arch.counts.ncs * per_nc;
    if c.sdma_broadcast != 0 && seng {
        let k = e % per_nc.max(1);
        let w = regs.sdma(e)?;
        w.bcast_mask().write_with(|v| v.with_mask(udc::bcast_mask(k)))?;
        let last = if udc::BCAST_LAST_NODE_ENGINES.contains(&k) { udc::BCAST_LAST_NODE } else { 0 };
        w.bcast_last().write_with(|v| v.with_last(last))?;
    }
    for q in 0..udc::QUEUES {
        m.q(q)?.cfg().write(mq::Cfg(udc::Q_CFG_ENABLE))?;
        s.q(q)?.cfg().write(sq::Cfg(udc::Q_CFG_ENABLE))?;
    }
    m.data_rd_cfg().write(m2s::DataRdCfg(c.m2s_data_rd_cfg as u32))?;
    m.axi_ostand_cfg().write(m2s::AxiOstandCfg(c.m2s_ostand_cfg as u32))?;
    u.gen().axi_timeout().write(gen::AxiTimeout(udc::AXI_TIMEOUT_INIT))?;
    m.comp_app_ack_cfg().write(m2s::CompAppAckCfg(0))?;
    m.cfg_len().write(m2s::CfgLen(udc::M2S_CFG_LEN))?;
    m.stream_cfg().write(m2s::StreamCfg(udc::M2S_STREAM_CFG))?;
    let gx = u.gen_ex();
    for q in 0..udc::QUEUES {
        gx.tx_sel(q)?.write(csr_maps::blocks::udma_gen_ex::TxSel(udc::VMPR_SEL))?;
        gx.rx_sel0(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel0(udc::VMPR_SEL))?;
        gx.rx_sel1(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel1(udc::VMPR_SEL))?;
        gx.rx_sel2(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel2(udc::VMPR_SEL))?;
    }
    m.axi_data_rd_cfg().write(m2s::AxiDataRdCfg(udc::AXI_RD_CFG))?;
    s.comp_app_ack_cfg().write(s2m::CompAppAckCfg(0))?;
    s.axi_ostand_rd().write(s2m::AxiOstandRd(c.s2m_ostand_rd as u32))?;
    s.axi_ostand_wr().write(s2m::AxiOstandWr(c.s2m_ostand_wr as u32))?;
    if c.s2m_max_data_wr != 0 {
        s.axi_ostand_wr2().modify(|v| v.with_max_data_wr(c.s2m_max_data_wr as u32))?;
    }
    u.gen().spare_zeroes0().modify(|v| v.with_dis_comp_head_report(0))?;
    unmask_errors(regs, e)?;
    s.comp_cfg().write(s2m::CompCfg(udc::S2M_COMP_CFG))?;
    m.desc_pref_cfg2().write(m2s::DescPrefCfg2(udc::M2S_PREF_CFG2))?;
    m.desc_pref_cfg3().write(m2s::DescPrefCfg3(udc::PREF_CFG3))?;
    s.desc_pref_cfg3().write(s2m::DescPrefCfg3(udc::PREF_CFG3))?;
    m.axi_desc_rd_cfg3().write(m2s::AxiDescRdCfg3(udc::AXI_RD_CFG))?;
    s.axi_desc_rd_cfg3().write(s2m::AxiDescRdCfg3(udc::AXI_RD_CFG))?;
    // SDMA wrapper.
    let w = regs.sdma(e)?;
    w.event_accel().write_with(|v| v.with_en(1))?;
    w.rob_cfg().write_with(|v| v.with_en(1))?;
    w.wob_cfg().write_with(|v| v.with_en(1))?;
    if c.sdma_txdf != 0 {
        w.txdf().write_with(|v| v.with_overhead_beats(c.sdma_txdf as u32))?;
    }
    if c.axi_error_abort != 0 {
        axi_error_abort(arch, regs, e)?;
    }
    // V3/V4: prefetch ring-id errors are masked on SENG engines (§7.2).
    if c.ring_id_errors_masked != 0 && seng {
        mask_ring_id_errors(regs, e)?;
    }
    Ok(())
}

/// The engine's error interrupts as `udma_iofic_m2s_error_ints_unmask` then
/// `udma_iofic_s2m_error_ints_unmask` (`udma_iofic.c`): per half, the secondary group and
/// primary group D get control 0x28, the secondary group and group C (AXI-FIFO parity) get
/// their abort masks (the S2M write replaces the M2S one in group C), then both are
/// unmasked, then primary D's summaries.
fn unmask_errors(regs: &Regs<'_>, e: u64) -> Result<()> {
    let g = regs.udma(e)?.gen();
    let control = iofic_summary::Control(udc::IOFIC_CONTROL);
    // M2S.
    g.sec_a().control().write(iofic_m2s_err::Control(control.0))?;
    g.pri_d().control().write(control)?;
    g.sec_a().abort_mask().write(iofic_m2s_err::AbortMask(!udc::SEC_A_ERRORS))?;
    g.sec_c().abort_mask().write(iofic_axi_parity::AbortMask(!udc::SEC_C_M2S_ERRORS))?;
    g.sec_a().mask_clear().write(iofic_m2s_err::MaskClear(!udc::SEC_A_ERRORS))?;
    g.sec_c().mask_clear().write(iofic_axi_parity::MaskClear(!udc::SEC_C_M2S_ERRORS))?;
    g.pri_d().mask_clear().write(iofic_summary::MaskClear(!udc::PRI_D_M2S))?;
    // S2M.
    g.sec_b().control().write(iofic_s2m_err::Control(control.0))?;
    g.pri_d().control().write(control)?;
    g.sec_b().abort_mask().write(iofic_s2m_err::AbortMask(!udc::SEC_B_ERRORS))?;
    g.sec_c().abort_mask().write(iofic_axi_parity::AbortMask(!udc::SEC_C_S2M_ERRORS))?;
    g.sec_b().mask_clear().write(iofic_s2m_err::MaskClear(!udc::SEC_B_ERRORS))?;
    g.sec_c().mask_clear().write(iofic_axi_parity::MaskClear(!udc::SEC_C_S2M_ERRORS))?;
    g.pri_d().mask_clear().write(iofic_summary::MaskClear(!udc::PRI_D_S2M))?;
    Ok(())
}

/// V2 `udma_m2m_set_axi_error_abort` (`udma_m2m.c`): AXI error-detection tables 0..5,
/// entries 1, 2, 3, 9, 10, 11 := abort; for AXI error controls 0..5 and every queue the
/// table address (q << 3) | 7 then data 0x10; every per-path group in edge/no-MSI-X mode
/// with all causes abort-enabled and unmasked; then the final AXI timeout.
fn axi_error_abort(arch: &Arch, regs: &Regs<'_>, e: u64) -> Result<()> {
    let g = regs.udma(e)?.gen();
    for t in 0..udc::AXI_ERR_TABLES {
        for j in udc::AXI_ERR_TABLE_ENTRIES {
            g.axi_err_table(t * 16 + j)?.write(gen::AxiErrTable(udc::AXI_ERR_TABLE_ABORT))?;
        }
    }
    for i in 0..udc::AXI_ERR_TABLES {
        for q in 0..udc::QUEUES {
            g.axi_err_ctrl_addr(i)?.write(gen::AxiErrCtrlAddr(udc::axi_err_ctrl_addr(q)))?;
            g.axi_err_ctrl_data(i)?.write(gen::AxiErrCtrlData(udc::AXI_ERR_CTRL_DATA))?;
        }
    }
    for p in [g.m2s_desc_rd(), g.m2s_data_rd(), g.m2s_comp_wr(), g.s2m_desc_rd(), g.s2m_data_wr(), g.s2m_comp_wr()] {
        p.control().write(iofic_group::Control(udc::IOFIC_CONTROL))?;
        p.abort_mask().write(iofic_group::AbortMask(!udc::PATH_GROUP_ERRORS))?;
        p.mask_clear().write(iofic_group::MaskClear(!udc::PATH_GROUP_ERRORS))?;
    }
    g.axi_timeout().write(gen::AxiTimeout(arch.consts.axi_timeout as u32))?;
    Ok(())
}

/// V3/V4 `udma_m2m_mask_ring_id_error` (`udma_m2m.c`) on a SENG engine: the prefetch
/// ring-id bit ORed into secondary group A's mask and the result written to its mask and
/// abort mask (likewise group B), the USER_ERRTRIG group 2 / 3 masks, then the M2S / S2M
/// error-log masks.
fn mask_ring_id_errors(regs: &Regs<'_>, e: u64) -> Result<()> {
    let u = regs.udma(e)?;
    let g = u.gen();
    let a = g.sec_a().mask().read()?.with_pref_ring_id(1).0;
    g.sec_a().mask().write(iofic_m2s_err::Mask(a))?;
    g.sec_a().abort_mask().write(iofic_m2s_err::AbortMask(a))?;
    let b = g.sec_b().mask().read()?.with_pref_ring_id(1).0;
    g.sec_b().mask().write(iofic_s2m_err::Mask(b))?;
    g.sec_b().abort_mask().write(iofic_s2m_err::AbortMask(b))?;
    let t = regs.user_errtrig(e)?;
    let g2 = t.grp(udc::ERRTRIG_M2S_RING_ID_GROUP)?;
    let v = g2.mask().read()?.0 | udc::ERRTRIG_M2S_RING_ID;
    g2.mask().write(iofic_group::Mask(v))?;
    let g3 = t.grp(udc::ERRTRIG_S2M_RING_ID_GROUP)?;
    let v = g3.mask().read()?.0 | udc::ERRTRIG_S2M_RING_ID;
    g3.mask().write(iofic_group::Mask(v))?;
    u.m2s().err_log_mask().modify(|v| v.with_pref_ring_id(1))?;
    u.s2m().err_log_mask().modify(|v| v.with_pref_ring_id(1))?;
    Ok(())
}

/// Whether engine `e` is in ABORT: any 2-bit unit field of the M2S or S2M `state` register
/// reads 2 (`udma_main.c`).
pub fn engine_aborted(regs: &Regs<'_>, e: u64) -> Result<bool> {
    let u = regs.udma(e)?;
    let m = u.m2s().state().read()?;
    let s = u.s2m().state().read()?;
    Ok([m.comp_ctrl(), m.stream_if(), m.data_rd_ctrl(), m.desc_pref()]
        .into_iter()
        .chain([s.comp_ctrl(), s.stream_if(), s.data_wr_ctrl(), s.desc_pref()])
        .any(|f| f == udc::FIELD_ABORT))
}

/// Which engine and queue serve host↔device copies for NC `nc` (the kmod's H2T).
pub fn h2t(arch: &Arch, nc: usize) -> (u64, u64) {
    let per = arch.consts.h2t_ncs_per_engine.max(1);
    (arch.consts.h2t_engine_base + nc as u64 / per, nc as u64 % per)
}

/// One queue pair driven by the host: descriptor rings in host memory. Dropping it parks
/// the queue on the device's dummy ring before the host rings are freed ([`Parking`]).
pub struct Ring {
    arch: &'static Arch,
    park: Arc<Parking>,
    /// This ring's id for queue ownership ([`Parking`]).
    id: u64,
    pub engine: u64,
    pub queue: u64,
    m2s_ring: HostBuf,
    s2m_ring: HostBuf,
    /// Two words: marker source ([`csr_maps::consts::udma::COMPLETION_MARKER`]) and
    /// completion destination.
    marker: HostBuf,
    ndesc: u32,
    next: u32,
    ring_id: u8,
    /// Timeout per completion wait.
    pub timeout: Duration,
}

/// A copy leg: device address and length.
#[derive(Debug, Clone, Copy)]
pub struct Xfer {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

impl Ring {
    /// Program queue `queue` of engine `engine` onto fresh rings of `ndesc` descriptors (§3.7).
    /// `park` is the device's parking state (the dummy ring the queue goes to on drop).
    pub fn new(park: &Arc<Parking>, pool: &HostPool, engine: u64, queue: u64, ndesc: u32) -> Result<Self> {
        let arch = park.arch();
        if !ndesc.is_power_of_two() || (ndesc as u64) < udc::RING_MIN_DESCS || ndesc as u64 > udc::RING_MAX_DESCS {
            return Err(HalError::RingSize(ndesc as u64));
        }
        park.ensure_dummy(pool)?;
        let bytes = ndesc as usize * DESC_BYTES;
        let m2s_ring = pool.alloc(bytes, udc::RING_ALIGN as usize)?;
        let s2m_ring = pool.alloc(bytes, udc::RING_ALIGN as usize)?;
        let marker = pool.alloc(64, 64)?;
        m2s_ring.fill(0, bytes, 0)?;
        s2m_ring.fill(0, bytes, 0)?;
        marker.write_u32(0, udc::COMPLETION_MARKER)?;
        marker.write_u32(8, 0)?;
        let r = Self {
            arch,
            park: park.clone(),
            id: park.new_id(),
            engine,
            queue,
            m2s_ring,
            s2m_ring,
            marker,
            ndesc,
            next: 0,
            ring_id: udc::INITIAL_RING_ID,
            timeout: Duration::from_secs(10),
        };
        r.program(&park.regs())?;
        Ok(r)
    }

    /// (Re)program both halves: pause, reset, base, length, no completion ring, enable.
    fn program(&self, regs: &Regs<'_>) -> Result<()> {
        platform::failpoint::hit("hal.udma.program")?;
        let mb = self.arch.host_dev_addr(self.m2s_ring.iova());
        let sb = self.arch.host_dev_addr(self.s2m_ring.iova());
        program_queue(regs, self.engine, self.queue, mb, sb, self.ndesc)?;
        self.park.claim_udma(self.engine, self.queue, self.id);
        Ok(())
    }

    /// Descriptor pairs available before the ring must be drained (16 of slack, §3.5).
    fn capacity(&self) -> usize {
        self.ndesc as usize - udc::RING_SLACK as usize - 1
    }

    fn put(&mut self, m: &mut UdmaDesc, s: &mut UdmaDesc) -> Result<()> {
        m.ctrl.ring_id = self.ring_id;
        s.ctrl.ring_id = self.ring_id;
        let at = self.next as usize * DESC_BYTES;
        self.m2s_ring.write(at, &m.encode())?;
        self.s2m_ring.write(at, &s.encode())?;
        self.next += 1;
        if self.next == self.ndesc {
            self.next = 0;
            self.ring_id = (self.ring_id + 1) & 3;
        }
        Ok(())
    }

    /// [`Ring::put`] of a TX/RX pair that share their control word (a data transfer's pair:
    /// same length and packet flags), given as (word1, address) each: the control word is
    /// encoded once.
    fn put_same_ctrl(&mut self, mut ctrl: DescCtrl, m: (u32, u64), s: (u32, u64)) -> Result<()> {
        ctrl.ring_id = self.ring_id;
        let w0 = ctrl.encode();
        let at = self.next as usize * DESC_BYTES;
        self.m2s_ring.write(at, &UdmaDesc::encode_words(w0, m.0, m.1))?;
        self.s2m_ring.write(at, &UdmaDesc::encode_words(w0, s.0, s.1))?;
        self.next += 1;
        if self.next == self.ndesc {
            self.next = 0;
            self.ring_id = (self.ring_id + 1) & 3;
        }
        Ok(())
    }

    /// Write the descriptor pairs of one transfer (packets of ≤ 64 descriptors of ≤ 64 KiB,
    /// FIRST..CONCAT..LAST) at the producer index; returns how many pairs were written.
    fn push_xfer(&mut self, x: &Xfer) -> Result<usize> {
        let mut off = 0u64;
        let mut n = 0usize;
        while off < x.len {
            let left = x.len - off;
            let descs = (left.div_ceil(MAX_DESC_LEN as u64) as usize).min(descs_per_packet(self.arch));
            for i in 0..descs {
                let len = (left - i as u64 * MAX_DESC_LEN as u64).min(MAX_DESC_LEN as u64) as u32;
                let first = i == 0;
                let last = i + 1 == descs;
                let ctrl = DescCtrl { len, first, last, concat: !last, ..Default::default() };
                self.put_same_ctrl(ctrl, (meta::DEFAULT, x.src + off), (0, x.dst + off))?;
                off += len as u64;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Pairs one transfer needs.
    pub fn pairs_for(len: u64) -> usize {
        len.div_ceil(MAX_DESC_LEN as u64) as usize
    }

    /// Copy every transfer (device addresses), then the completion-marker pair; ring the
    /// doorbells (RX before TX) and wait for the marker. Large batches are split so the
    /// ring never overflows.
    pub fn copy(&mut self, regs: &Regs<'_>, xfers: &[Xfer]) -> Result<()> {
        let mut pending = 0usize;
        for x in xfers {
            let mut off = 0u64;
            while off < x.len {
                let chunk = (x.len - off).min((descs_per_packet(self.arch) as u64) * MAX_DESC_LEN as u64);
                let need = Self::pairs_for(chunk);
                if pending + need + 1 > self.capacity() {
                    self.finish(regs, pending)?;
                    pending = 0;
                }
                pending += self.push_xfer(&Xfer { src: x.src + off, dst: x.dst + off, len: chunk })?;
                off += chunk;
            }
        }
        self.finish(regs, pending)
    }

    /// Stage descriptor pairs for transfers without ringing the doorbell (a sequencer's
    /// WRITE to the tail-increment registers will). Returns the pairs written; the caller
    /// must keep the ring from overflowing ([`Ring::free`]).
    pub fn stage(&mut self, xfers: &[Xfer]) -> Result<u32> {
        let mut n = 0usize;
        for x in xfers {
            n += self.push_xfer(x)?;
        }
        Ok(n as u32)
    }

    /// Descriptor pairs that can be staged before the hardware consumes some.
    pub fn free(&self) -> usize {
        self.capacity()
    }

    /// What an NC's ownership region table must grant this queue: descriptor fetch from its
    /// two rings, and its completion-marker words (read and written by [`Ring::copy`]).
    pub fn regions(&self) -> [crate::Region; 3] {
        use crate::{Perm, Region};
        let host = |b: &HostBuf| self.arch.host_dev_addr(b.iova());
        [
            Region::new(host(&self.m2s_ring), self.m2s_ring.len() as u64, Perm::DESC),
            Region::new(host(&self.s2m_ring), self.s2m_ring.len() as u64, Perm::DESC),
            Region::new(host(&self.marker), self.marker.len() as u64, Perm::READ | Perm::WRITE),
        ]
    }

    /// Device addresses of the (S2M, M2S) tail-increment registers: WRITE targets of a
    /// lowered PSEUDO_DMA_TRIGGER.
    pub fn doorbell_dev_addrs(&self, regs: &Regs<'_>) -> Result<(u64, u64)> {
        let u = regs.udma(self.engine)?;
        let s = u.s2m().q(self.queue)?.tail_inc().offset();
        let m = u.m2s().q(self.queue)?.tail_inc().offset();
        let s = self.arch.bar0_to_dev(s).ok_or(HalError::DeviceRange { addr: s, len: 4 })?;
        let m = self.arch.bar0_to_dev(m).ok_or(HalError::DeviceRange { addr: m, len: 4 })?;
        Ok((s, m))
    }

    fn finish(&mut self, regs: &Regs<'_>, pending: usize) -> Result<()> {
        if pending == 0 {
            return Ok(());
        }
        // Completion marker pair: host word → host word, with the write barrier (§3.4, §3.8).
        self.marker.atomic_u32(8)?.store(0, Ordering::Release);
        let src = self.arch.host_dev_addr(self.marker.iova());
        let dst = self.arch.host_dev_addr(self.marker.iova() + 8);
        let mut m = UdmaDesc::tx(src, 4, 0, true, true);
        m.word1 |= meta::WRITE_BARRIER;
        let mut s = UdmaDesc::rx(dst, 4, 0, true, true);
        self.put(&mut m, &mut s)?;
        let n = pending as u32 + 1;
        std::sync::atomic::fence(Ordering::SeqCst);
        let u = regs.udma(self.engine)?;
        u.s2m().q(self.queue)?.tail_inc().write_with(|v| v.with_count(n))?;
        u.m2s().q(self.queue)?.tail_inc().write_with(|v| v.with_count(n))?;
        self.wait(regs)
    }

    fn wait(&mut self, regs: &Regs<'_>) -> Result<()> {
        let word = self.marker.atomic_u32(8)?;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if word.load(Ordering::Acquire) == udc::COMPLETION_MARKER {
                return Ok(());
            }
            spins += 1;
            if spins.is_multiple_of(256) {
                if let Some(e) = self.aborted(regs)? {
                    return Err(e);
                }
                if start.elapsed() > self.timeout {
                    return Err(HalError::DmaTimeout {
                        engine: self.engine,
                        queue: self.queue,
                        waited_ms: start.elapsed().as_millis() as u64,
                    });
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The abort error if the queue pair's engine is aborted: any unit of the M2S or S2M
    /// `state` register reads ABORT (the kmod's engine-state rule, `udma_main.c`; the
    /// per-queue `status` register is undocumented).
    pub fn aborted(&self, regs: &Regs<'_>) -> Result<Option<HalError>> {
        if !engine_aborted(regs, self.engine)? {
            return Ok(None);
        }
        let u = regs.udma(self.engine)?;
        Ok(Some(HalError::DmaAbort {
            engine: self.engine,
            queue: self.queue,
            m2s_cause: u.gen().sec_a().cause().read()?.0,
            s2m_cause: u.gen().sec_b().cause().read()?.0,
        }))
    }

    /// Recover from an abort: clear the latched causes (write 0 to clear), re-initialise the
    /// queue onto its (cleared) rings and, only if the engine is in ABORT, return it to
    /// NORMAL. An engine that is not aborted (a timeout, or a queue shared with another NC
    /// on V3/V4 whose owner already recovered it) is left running.
    pub fn recover(&mut self, regs: &Regs<'_>) -> Result<()> {
        let u = regs.udma(self.engine)?;
        let g = u.gen();
        let was_aborted = engine_aborted(regs, self.engine)?;
        g.sec_a().cause().write(csr_maps::blocks::iofic_m2s_err::Cause(0))?;
        g.sec_b().cause().write(csr_maps::blocks::iofic_s2m_err::Cause(0))?;
        g.pri_d().cause().write(csr_maps::blocks::iofic_summary::Cause(0))?;
        // Reset the queue pair first (drops the descriptors of the failed batch), then
        // return the engine to NORMAL.
        let bytes = self.ndesc as usize * DESC_BYTES;
        self.m2s_ring.fill(0, bytes, 0)?;
        self.s2m_ring.fill(0, bytes, 0)?;
        self.next = 0;
        self.ring_id = udc::INITIAL_RING_ID;
        self.program(regs)?;
        if was_aborted {
            u.m2s().change_state().write_with(|v| v.with_normal(1))?;
            u.s2m().change_state().write_with(|v| v.with_normal(1))?;
        }
        Ok(())
    }

    /// Pause both halves (clear the enable bits) and let in-flight work settle (§3.7).
    pub fn quiesce(&self, regs: &Regs<'_>) -> Result<()> {
        let u = regs.udma(self.engine)?;
        u.m2s().q(self.queue)?.cfg().modify(|v| v.with_en_pref(0).with_en_scheduling(0))?;
        u.s2m().q(self.queue)?.cfg().modify(|v| v.with_en_pref(0).with_en_stream(0))?;
        std::thread::sleep(Duration::from_micros(udc::QUIESCE_WAIT_US));
        Ok(())
    }
}

impl Drop for Ring {
    /// Park the queue on the dummy ring before the host rings are freed (the kmod's
    /// `ndmar_handle_process_exit`), if this ring still owns it: a queue since programmed
    /// onto another ring is left alone.
    fn drop(&mut self) {
        if let Err(err) = self.park.release_udma(self.engine, self.queue, self.id) {
            tracing::warn!(engine = self.engine, queue = self.queue, %err, "could not park a DMA queue on the dummy ring");
        }
    }
}
