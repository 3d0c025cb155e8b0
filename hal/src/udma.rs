//! UDMA, the hardware block: engine bring-up per arch, and every register sequence on an
//! engine or one of its queues — queue program and pause, engine abort state, cause
//! clearing and the return to NORMAL (docs/facts/hardware.md §3). Each sequence is written
//! once, here; the host-driven queue pair (`ring::Ring`) and queue parking
//! (`park::Parking`) call them. This module names neither.

use std::time::Duration;

use csr_maps::blocks::{
    iofic_axi_parity, iofic_group, iofic_m2s_err, iofic_s2m_err, iofic_summary, udma_gen as gen, udma_m2s as m2s,
    udma_m2s_q as mq, udma_s2m as s2m, udma_s2m_q as sq,
};
use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::MAX_DESC_LEN;
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};

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
    // The kmod's order (`udma_set_defaults`): the M2S half's VMPR selects, its AXI data-read config
    // and the S2M completion-ack config, then the S2M half's selects
    // (hal/tests/kmod_oracle.rs compares this with the kmod's trace).
    let gx = u.gen_ex();
    for q in 0..udc::QUEUES {
        gx.tx_sel(q)?.write(csr_maps::blocks::udma_gen_ex::TxSel(udc::VMPR_SEL))?;
    }
    m.axi_data_rd_cfg().write(m2s::AxiDataRdCfg(udc::AXI_RD_CFG))?;
    s.comp_app_ack_cfg().write(s2m::CompAppAckCfg(0))?;
    for q in 0..udc::QUEUES {
        gx.rx_sel0(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel0(udc::VMPR_SEL))?;
        gx.rx_sel1(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel1(udc::VMPR_SEL))?;
        gx.rx_sel2(q)?.write(csr_maps::blocks::udma_gen_ex::RxSel2(udc::VMPR_SEL))?;
    }
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
    // SDMA wrapper, in the kmod's order (`sdma_init_engine`): reorder and write-out buffers,
    // then event acceleration, then TXDF.
    let w = regs.sdma(e)?;
    w.rob_cfg().write_with(|v| v.with_en(1))?;
    w.wob_cfg().write_with(|v| v.with_en(1))?;
    w.event_accel().write_with(|v| v.with_en(1))?;
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

/// Set the M2S half of queue `queue` of engine `e` paused (`on` false) or running: its
/// prefetch and scheduling enables over the kmod's queue value [`udc::Q_CFG_RESET`] (written
/// whole, as `udma_q_enable` does, never read back).
fn enable_m2s(regs: &Regs<'_>, e: u64, queue: u64, on: bool) -> Result<()> {
    let v = mq::Cfg(udc::Q_CFG_RESET).with_en_pref(on as u32).with_en_scheduling(on as u32);
    regs.udma(e)?.m2s().q(queue)?.cfg().write(v)?;
    Ok(())
}

/// Set the S2M half of queue `queue` of engine `e` paused or running: its prefetch and stream
/// enables over [`udc::Q_CFG_RESET`].
fn enable_s2m(regs: &Regs<'_>, e: u64, queue: u64, on: bool) -> Result<()> {
    let v = sq::Cfg(udc::Q_CFG_RESET).with_en_pref(on as u32).with_en_stream(on as u32);
    regs.udma(e)?.s2m().q(queue)?.cfg().write(v)?;
    Ok(())
}

fn pause_m2s(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    enable_m2s(regs, e, queue, false)
}

fn pause_s2m(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    enable_s2m(regs, e, queue, false)
}

/// Pause both halves of queue `queue` of engine `e` (M2S first): clear the enable bits. The
/// queue keeps its ring registers; work already fetched settles within
/// [`QUIESCE_WAIT`] (§3.7).
pub fn pause_queue(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    pause_m2s(regs, e, queue)?;
    pause_s2m(regs, e, queue)
}

/// Pause the M2S half of queue `queue` of engine `e` and assert its reset (`sw_ctrl.rst_q`):
/// the kmod's `udma_q_reset` on a transmit queue.
fn reset_m2s(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    pause_m2s(regs, e, queue)?;
    regs.udma(e)?.m2s().q(queue)?.sw_ctrl().write_with(|v| v.with_rst_q(1))?;
    Ok(())
}

/// Pause the S2M half of queue `queue` of engine `e` and assert its reset: the kmod's
/// `udma_q_reset` on a receive queue.
fn reset_s2m(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    pause_s2m(regs, e, queue)?;
    regs.udma(e)?.s2m().q(queue)?.sw_ctrl().write_with(|v| v.with_rst_q(1))?;
    Ok(())
}

/// Reset both halves of queue `queue` of engine `e` (M2S first): pause, then assert the
/// queue reset (`sw_ctrl.rst_q`, the kmod's `udma_q_reset`, which it uses to "clear all queue
/// ptrs"; §3.7). The queue stays paused until [`program_queue`], which starts with this
/// reset, gives it a ring.
pub fn reset_queue(regs: &Regs<'_>, e: u64, queue: u64) -> Result<()> {
    reset_m2s(regs, e, queue)?;
    reset_s2m(regs, e, queue)
}

/// How long in-flight work of a paused queue takes to settle (§3.7).
pub const QUIESCE_WAIT: Duration = Duration::from_micros(udc::QUIESCE_WAIT_US);

/// Program queue `queue` of engine `e` onto descriptor rings of `ndesc` descriptors at
/// device addresses `m2s_base` and `s2m_base`, as the kmod's `udma_q_init` (both halves,
/// M2S first): rate-limit mask (M2S), pause, reset, ring base and length, no completion
/// ring, enable (§3.7).
pub fn program_queue(regs: &Regs<'_>, e: u64, queue: u64, m2s_base: u64, s2m_base: u64, ndesc: u32) -> Result<()> {
    let u = regs.udma(e)?;
    let (m, s) = (u.m2s().q(queue)?, u.s2m().q(queue)?);
    m.rlimit_mask().write(mq::RlimitMask(udc::RLIMIT_MASK_INIT))?;
    reset_m2s(regs, e, queue)?;
    m.ring_base_lo().write(mq::RingBaseLo(m2s_base as u32))?;
    m.ring_base_hi().write(mq::RingBaseHi((m2s_base >> 32) as u32))?;
    m.ring_len().write_with(|v| v.with_count(ndesc))?;
    m.comp_cfg().write(mq::CompCfg(0))?;
    enable_m2s(regs, e, queue, true)?;
    reset_s2m(regs, e, queue)?;
    s.ring_base_lo().write(sq::RingBaseLo(s2m_base as u32))?;
    s.ring_base_hi().write(sq::RingBaseHi((s2m_base >> 32) as u32))?;
    s.ring_len().write_with(|v| v.with_count(ndesc))?;
    s.comp_cfg().write(sq::CompCfg(0))?;
    enable_s2m(regs, e, queue, true)?;
    Ok(())
}

/// Ring the doorbells of queue `queue` of engine `e` for `n` new descriptor pairs: the S2M
/// tail increment before the M2S one (the receive side is ready before data moves, §3.4).
pub fn ring_doorbells(regs: &Regs<'_>, e: u64, queue: u64, n: u32) -> Result<()> {
    let u = regs.udma(e)?;
    u.s2m().q(queue)?.tail_inc().write_with(|v| v.with_count(n))?;
    u.m2s().q(queue)?.tail_inc().write_with(|v| v.with_count(n))?;
    Ok(())
}

/// Device addresses of the (S2M, M2S) tail-increment registers of queue `queue` of engine
/// `e`: what a sequencer WRITE rings the doorbells through.
pub fn doorbell_dev_addrs(arch: &Arch, regs: &Regs<'_>, e: u64, queue: u64) -> Result<(u64, u64)> {
    let u = regs.udma(e)?;
    let s = u.s2m().q(queue)?.tail_inc().offset();
    let m = u.m2s().q(queue)?.tail_inc().offset();
    let s = arch.bar0_to_dev(s).ok_or(HalError::DeviceRange { addr: s, len: 4 })?;
    let m = arch.bar0_to_dev(m).ok_or(HalError::DeviceRange { addr: m, len: 4 })?;
    Ok((s, m))
}

/// The causes latched for engine `e`'s M2S and S2M errors (secondary groups A and B): what
/// an abort reports.
pub fn error_causes(regs: &Regs<'_>, e: u64) -> Result<(u32, u32)> {
    let g = regs.udma(e)?.gen();
    Ok((g.sec_a().cause().read()?.0, g.sec_b().cause().read()?.0))
}

/// Clear engine `e`'s latched error causes (M2S, S2M, the primary summary): the IOFIC
/// causes are write-0-to-clear.
pub fn clear_error_causes(regs: &Regs<'_>, e: u64) -> Result<()> {
    let g = regs.udma(e)?.gen();
    g.sec_a().cause().clear_all()?;
    g.sec_b().cause().clear_all()?;
    g.pri_d().cause().clear_all()?;
    Ok(())
}

/// Return engine `e` from ABORT to NORMAL (both halves' `change_state`).
pub fn set_normal(regs: &Regs<'_>, e: u64) -> Result<()> {
    let u = regs.udma(e)?;
    u.m2s().change_state().write_with(|v| v.with_normal(1))?;
    u.s2m().change_state().write_with(|v| v.with_normal(1))?;
    Ok(())
}
