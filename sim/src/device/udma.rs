//! UDMA engines: queue registers, doorbells, descriptor processing, aborts.
//!
//! A memory-to-memory copy is an M2S packet (FIRST..LAST source descriptors) written into
//! the S2M descriptors of the same queue index (the kmod's `udma_main.c`). S2M descriptors
//! are buffers, not packets: the hardware defines no FIRST/LAST on them (`udma.h` names only
//! INT_EN and the ring id for S2M) and the kmod writes none (`udma_m2m_build_rx_descriptor`),
//! so the engine takes S2M descriptors from the head until their lengths hold the M2S
//! packet, whatever flags they carry; each packet starts in a fresh descriptor. The engine fetches
//! descriptors from the ring (host memory through the IOMMU, or device memory), checks
//! each descriptor's ring id against the pass it expects, reads the source buffers and
//! writes the destination buffers (which may be CSRs: a 4-byte write to a semaphore
//! window is how a ring signals completion).

use std::sync::atomic::Ordering;

use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::{UdmaDesc, DESC_BYTES};

use csr_maps::blocks::{
    iofic_m2s_err, iofic_s2m_err, iofic_summary, udma, udma_m2s, udma_m2s_q as mq, udma_s2m, udma_s2m_q as sq,
};

use super::intc::Line;
use super::mpu::{self, Access, Source};
use super::space::Seg;
use super::{Dev, State};
use crate::decode::Hit;
use crate::iommu::DmaFault;

/// One half-queue's hardware pointers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queue {
    pub head: u32,
    pub tail: u32,
    /// Descriptors made available and not yet consumed.
    pub pending: u32,
    pub head_rid: u8,
    pub tail_rid: u8,
    pub aborted: bool,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            head: 0,
            tail: 0,
            pending: 0,
            head_rid: udc::INITIAL_RING_ID,
            tail_rid: udc::INITIAL_RING_ID,
            aborted: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Engine {
    pub m2s: [Queue; 16],
    pub s2m: [Queue; 16],
    pub m2s_abort: bool,
    pub s2m_abort: bool,
    /// Fault injection: queue index whose next packet aborts.
    pub arm_abort: Option<u32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    M2s,
    S2m,
}

/// What a UDMA register is to the engine model.
enum Role {
    /// A register of queue `q` of a half.
    Queue(Half, usize, QReg),
    /// The half's `state` (read: every unit's state).
    State(Half),
    /// The half's `change_state` (abort / back to normal).
    ChangeState(Half),
    /// Another register of a half (stored).
    HalfOther,
    /// Outside the halves (`gen`, `gen_ex`): stored, or an IOFIC group.
    Other,
}

/// Queue registers with behaviour; both halves share the layout.
#[derive(Clone, Copy, PartialEq, Eq)]
enum QReg {
    /// `head` or `current`: the hardware head pointer.
    Head,
    Tail,
    Status,
    TailInc,
    SwCtrl,
    Other,
}

fn role(r: udma::RegId) -> Role {
    use udma::RegId as U;
    let m2s_q = |r: mq::RegId| match r {
        mq::RegId::Head | mq::RegId::Current => QReg::Head,
        mq::RegId::Tail => QReg::Tail,
        mq::RegId::Status => QReg::Status,
        mq::RegId::TailInc => QReg::TailInc,
        mq::RegId::SwCtrl => QReg::SwCtrl,
        _ => QReg::Other,
    };
    let s2m_q = |r: sq::RegId| match r {
        sq::RegId::Head | sq::RegId::Current => QReg::Head,
        sq::RegId::Tail => QReg::Tail,
        sq::RegId::Status => QReg::Status,
        sq::RegId::TailInc => QReg::TailInc,
        sq::RegId::SwCtrl => QReg::SwCtrl,
        _ => QReg::Other,
    };
    match r {
        U::M2s(udma_m2s::RegId::Q(q, r)) => Role::Queue(Half::M2s, q as usize, m2s_q(r)),
        U::S2m(udma_s2m::RegId::Q(q, r)) => Role::Queue(Half::S2m, q as usize, s2m_q(r)),
        U::M2s(udma_m2s::RegId::State) => Role::State(Half::M2s),
        U::S2m(udma_s2m::RegId::State) => Role::State(Half::S2m),
        U::M2s(udma_m2s::RegId::ChangeState) => Role::ChangeState(Half::M2s),
        U::S2m(udma_s2m::RegId::ChangeState) => Role::ChangeState(Half::S2m),
        U::M2s(_) | U::S2m(_) => Role::HalfOther,
        U::Gen(_) | U::GenEx(_) => Role::Other,
    }
}

pub(crate) fn reg_read(dev: &Dev, st: &mut State, hit: &Hit, e: u32, r: udma::RegId) -> u32 {
    let Some(eng) = st.udma.get(e as usize) else { return dev.generic_read(st, hit) };
    match role(r) {
        Role::Queue(half, q, qr) => {
            let qs = if half == Half::M2s { &eng.m2s[q] } else { &eng.s2m[q] };
            let ptr = |idx: u32, rid: u8| mq::Head(0).with_idx(idx).with_ring_id(rid as u32).0;
            match qr {
                QReg::Head => ptr(qs.head, qs.head_rid),
                QReg::Tail => ptr(qs.tail, qs.tail_rid),
                QReg::Status => qs.aborted as u32,
                QReg::TailInc | QReg::SwCtrl | QReg::Other => dev.generic_read(st, hit),
            }
        }
        Role::State(half) => {
            let abort = if half == Half::M2s { eng.m2s_abort } else { eng.s2m_abort };
            let f = if abort { udc::FIELD_ABORT } else { udc::FIELD_NORMAL };
            // All four 2-bit fields (completion, stream, data, prefetch) report the same state.
            hit.def.fields.iter().fold(0, |acc, fd| acc | (f << fd.lsb))
        }
        Role::ChangeState(_) | Role::HalfOther | Role::Other => dev.generic_read(st, hit),
    }
}

pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, e: u32, r: udma::RegId, val: u32) {
    let e = e as usize;
    let role = role(r);
    if matches!(role, Role::Other) {
        return dev.generic_write(st, hit, val);
    }
    if e >= st.udma.len() {
        return;
    }
    let nc = dev.nc_of_engine(e);
    match role {
        Role::Queue(half, q, QReg::TailInc) => {
            let n = mq::TailInc(val).count();
            let len = ring_len(dev, st, e, half, q);
            let enabled = queue_enabled(dev, st, e, half, q);
            let reset_bits = cfg_reset_bits(dev, st, e, half, q);
            let eng = &mut st.udma[e];
            let qs = if half == Half::M2s { &mut eng.m2s[q] } else { &mut eng.s2m[q] };
            if n == 0 || len == 0 || n > len || qs.pending + n > len {
                // The doorbell value must be 1..ring size (`udma_m2m_copy_start` in the kmod's
                // `udma_main.c`): ignored.
                dev.n.unclaimed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    reg = hit.def.name,
                    id = ?hit.id,
                    count = n,
                    ring_len = len,
                    pending = qs.pending,
                    "sim: UDMA doorbell ignored (count 0, ring unprogrammed, or more than the ring holds)"
                );
                return;
            }
            if enabled && !reset_bits {
                // The old, wrong queue-config sequence (a read-modify-write over engine init's
                // 0x00030000): counted as the driver bug it is; the queue never runs.
                dev.n.queue_cfg_misuse.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    reg = hit.def.name,
                    id = ?hit.id,
                    "sim: UDMA doorbell on a queue enabled with cfg bits 24-25 cleared: the queue does not run"
                );
            }
            if !enabled || qs.aborted {
                tracing::debug!(
                    reg = hit.def.name,
                    id = ?hit.id,
                    count = n,
                    aborted = qs.aborted,
                    "sim: UDMA doorbell on a disabled or aborted queue: descriptors wait until it runs"
                );
            }
            qs.pending += n;
            let t = qs.tail + n;
            if t >= len {
                qs.tail = t - len;
                qs.tail_rid = (qs.tail_rid + 1) & 3;
            } else {
                qs.tail = t;
            }
            st.pending[nc] = true;
        }
        Role::Queue(half, q, QReg::SwCtrl) => {
            if mq::SwCtrl(val).rst_q() != 0 {
                let eng = &mut st.udma[e];
                let qs = if half == Half::M2s { &mut eng.m2s[q] } else { &mut eng.s2m[q] };
                *qs = Queue::default();
            }
        }
        Role::ChangeState(half) => {
            let eng = &mut st.udma[e];
            let (abort, queues) =
                if half == Half::M2s { (&mut eng.m2s_abort, &mut eng.m2s) } else { (&mut eng.s2m_abort, &mut eng.s2m) };
            if val & udc::STATE_ABORT != 0 {
                *abort = true;
            } else if val & udc::STATE_NORMAL != 0 {
                *abort = false;
                for q in queues.iter_mut() {
                    q.aborted = false;
                }
                st.pending[nc] = true;
            }
        }
        Role::Queue(..) | Role::State(_) | Role::HalfOther | Role::Other => dev.generic_write(st, hit, val),
    }
}

struct QRegs {
    base_lo: u64,
    base_hi: u64,
    len: u64,
    cfg: u64,
}

fn qregs(dev: &Dev, e: usize, half: Half, q: usize) -> Option<QRegs> {
    let u = dev.udma(e)?;
    Some(if half == Half::M2s {
        let b = u.m2s().q(q as u64).ok()?;
        QRegs {
            base_lo: b.ring_base_lo().offset(),
            base_hi: b.ring_base_hi().offset(),
            len: b.ring_len().offset(),
            cfg: b.cfg().offset(),
        }
    } else {
        let b = u.s2m().q(q as u64).ok()?;
        QRegs {
            base_lo: b.ring_base_lo().offset(),
            base_hi: b.ring_base_hi().offset(),
            len: b.ring_len().offset(),
            cfg: b.cfg().offset(),
        }
    })
}

fn ring_len(dev: &Dev, st: &State, e: usize, half: Half, q: usize) -> u32 {
    qregs(dev, e, half, q).map(|r| mq::RingLen(dev.stored(st, r.len, 0)).count()).unwrap_or(0)
}

/// Host memory `[iova, iova + len)` is being unmapped: count every enabled UDMA queue half
/// whose descriptor ring lies (partly) in it. Hardware left pointing at freed host memory
/// would fetch whatever the memory holds next; the kmod parks a queue on a dummy ring before
/// its owner's memory goes (`ndmar_handle_process_exit`, `neuron_ring.c`).
pub(crate) fn dangling_rings(dev: &Dev, st: &State, iova: u64, len: u64) -> u64 {
    let mut n = 0;
    for e in 0..st.udma.len() {
        for q in 0..udc::QUEUES as usize {
            for half in [Half::M2s, Half::S2m] {
                let Some(r) = qregs(dev, e, half, q) else { continue };
                let count = mq::RingLen(dev.stored(st, r.len, 0)).count() as u64;
                if count == 0 || !queue_enabled(dev, st, e, half, q) {
                    continue;
                }
                let lo = mq::RingBaseLo(dev.stored(st, r.base_lo, 0));
                let base =
                    mq::RingBaseLo(0).with_addr(lo.addr()).0 as u64 | ((dev.stored(st, r.base_hi, 0) as u64) << 32);
                let Some(ring) = dev.arch.dev_to_host_iova(base) else { continue };
                let bytes = count * DESC_BYTES as u64;
                if ring < iova.saturating_add(len) && iova < ring.saturating_add(bytes) {
                    tracing::warn!(
                        engine = e,
                        queue = q,
                        m2s = (half == Half::M2s),
                        ring = format_args!("{ring:#x}"),
                        "sim: host memory unmapped while an enabled DMA queue's ring points into it"
                    );
                    n += 1;
                }
            }
        }
    }
    n
}

/// UDMA queue halves enabled, over every engine.
pub(crate) fn enabled_queues(dev: &Dev, st: &State) -> u64 {
    let mut n = 0;
    for e in 0..st.udma.len() {
        for q in 0..udc::QUEUES as usize {
            n += [Half::M2s, Half::S2m].into_iter().filter(|&h| queue_enabled(dev, st, e, h, q)).count() as u64;
        }
    }
    n
}

/// Whether the queue's `cfg` keeps bits 24-25 of its hardware reset value
/// ([`udc::Q_CFG_RESET`]), as the kmod's queue programming always does.
fn cfg_reset_bits(dev: &Dev, st: &State, e: usize, half: Half, q: usize) -> bool {
    qregs(dev, e, half, q)
        .map(|r| dev.stored(st, r.cfg, mq::Cfg::reset_value().0 as u64) & udc::Q_CFG_RESET == udc::Q_CFG_RESET)
        .unwrap_or(false)
}

/// Whether the queue's `cfg` enables it.
fn queue_enabled(dev: &Dev, st: &State, e: usize, half: Half, q: usize) -> bool {
    qregs(dev, e, half, q)
        .map(|r| dev.stored(st, r.cfg, mq::Cfg::reset_value().0 as u64) & udc::Q_CFG_ENABLE == udc::Q_CFG_ENABLE)
        .unwrap_or(false)
}

enum Abort {
    M2sDesc,
    M2sData,
    S2mDesc,
    S2mData,
    RingIdM2s,
    RingIdS2m,
    TooManyDesc,
    PktTooLong,
    Injected,
}

/// Latch the cause; abort the queue pair if the abort mask lets the cause abort.
fn abort(dev: &Dev, st: &mut State, e: usize, q: usize, why: Abort, fault: Option<DmaFault>) -> bool {
    let Some(u) = dev.udma(e) else { return false };
    let g = u.gen();
    let (m2s_err, s2m_err) = (iofic_m2s_err::Cause(0), iofic_s2m_err::Cause(0));
    let (sec_a, sec_b) = (iofic_summary::Cause(0).with_sec_a(1).0, iofic_summary::Cause(0).with_sec_b(1).0);
    let (cause_off, abort_off, bit, summary) = match why {
        Abort::M2sDesc => {
            (g.sec_a().cause().offset(), g.sec_a().abort_mask().offset(), m2s_err.with_pref_axi_resp(1).0, sec_a)
        }
        Abort::M2sData | Abort::Injected => {
            (g.sec_a().cause().offset(), g.sec_a().abort_mask().offset(), m2s_err.with_data_axi_resp(1).0, sec_a)
        }
        Abort::TooManyDesc => {
            (g.sec_a().cause().offset(), g.sec_a().abort_mask().offset(), m2s_err.with_too_many_desc(1).0, sec_a)
        }
        Abort::PktTooLong => {
            (g.sec_a().cause().offset(), g.sec_a().abort_mask().offset(), m2s_err.with_pkt_too_long(1).0, sec_a)
        }
        Abort::RingIdM2s => {
            (g.sec_a().cause().offset(), g.sec_a().abort_mask().offset(), m2s_err.with_pref_ring_id(1).0, sec_a)
        }
        Abort::S2mDesc => {
            (g.sec_b().cause().offset(), g.sec_b().abort_mask().offset(), s2m_err.with_pref_axi_resp(1).0, sec_b)
        }
        Abort::S2mData => {
            (g.sec_b().cause().offset(), g.sec_b().abort_mask().offset(), s2m_err.with_data_axi_resp(1).0, sec_b)
        }
        Abort::RingIdS2m => {
            (g.sec_b().cause().offset(), g.sec_b().abort_mask().offset(), s2m_err.with_pref_ring_id(1).0, sec_b)
        }
    };
    dev.latch(st, cause_off, bit);
    dev.latch(st, g.pri_d().cause().offset(), summary);
    let nc = dev.nc_of_engine(e);
    if fault.is_some() {
        dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
        dev.intc(st, nc, Line::DmaFault);
    }
    // abort_mask: 0 = this cause aborts (the driver clears the bits it wants to abort on).
    let aborts =
        matches!(why, Abort::Injected) || dev.stored(st, abort_off, u32::MAX as u64) & bit == 0 || fault.is_some();
    if aborts {
        let eng = &mut st.udma[e];
        eng.m2s[q].aborted = true;
        eng.s2m[q].aborted = true;
        eng.m2s_abort = true;
        eng.s2m_abort = true;
        dev.n.dma_aborts.fetch_add(1, Ordering::Relaxed);
        dev.intc(st, nc, Line::DmaAbort);
    }
    aborts
}

/// An AXI-FIFO parity error on engine `e`: latch secondary group C cause `bits` and the
/// primary group D summary; the engine aborts only if group C's abort mask lets one of the
/// causes abort (0 = abort; the reset value 0xFFFFFFFF aborts on nothing). Returns whether
/// it aborted.
pub(crate) fn axi_parity(dev: &Dev, st: &mut State, e: usize, bits: u32) -> bool {
    let Some(u) = dev.udma(e) else { return false };
    if e >= st.udma.len() {
        return false;
    }
    let g = u.gen();
    dev.latch(st, g.sec_c().cause().offset(), bits);
    dev.latch(st, g.pri_d().cause().offset(), iofic_summary::Cause(0).with_sec_c(1).0);
    let abort_mask = dev.stored(st, g.sec_c().abort_mask().offset(), u32::MAX as u64);
    if bits & !abort_mask == 0 {
        return false;
    }
    let eng = &mut st.udma[e];
    eng.m2s_abort = true;
    eng.s2m_abort = true;
    dev.n.dma_aborts.fetch_add(1, Ordering::Relaxed);
    dev.intc(st, dev.nc_of_engine(e), Line::DmaAbort);
    true
}

impl crate::SimDevice {
    /// Test hook: engine `engine`'s AXI FIFOs report parity errors on secondary group C
    /// cause bits `bits` (`iofic_axi_parity` fields). Returns whether the engine aborted
    /// (only for causes the driver abort-enabled).
    pub fn inject_axi_parity(&self, engine: usize, bits: u32) -> bool {
        let mut st = self.dev.lock();
        axi_parity(&self.dev, &mut st, engine, bits)
    }
}

/// Run every queue with work on the engines serving `nc`, until `deadline` at most (checked
/// between packets). Returns progress (true as well when it stopped at the deadline with a
/// packet left: the caller comes back).
pub(crate) fn run(dev: &Dev, st: &mut State, nc: usize, deadline: Option<std::time::Instant>) -> bool {
    let mut progress = false;
    for e in 0..st.udma.len() {
        if dev.nc_of_engine(e) != nc {
            continue;
        }
        for q in 0..16 {
            let eng = &st.udma[e];
            if eng.m2s[q].pending == 0 || eng.m2s[q].aborted || eng.s2m[q].aborted || eng.m2s_abort || eng.s2m_abort {
                continue;
            }
            while process_packet(dev, st, e, q) {
                progress = true;
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return true;
                }
            }
        }
    }
    progress
}

/// How far [`collect`] reads a half's ring from its head.
#[derive(Clone, Copy)]
enum Until {
    /// M2S: one packet, up to and including the descriptor with LAST.
    Last,
    /// S2M: descriptors until their lengths hold this many bytes (the M2S packet's total);
    /// FIRST/LAST on S2M descriptors mean nothing to the engine.
    Holds(u64),
}

/// Collect the descriptors of `half` from its head that one packet uses ([`Until`]).
/// `Ok(None)` = not enough descriptors made available yet.
fn collect(
    dev: &Dev,
    st: &mut State,
    e: usize,
    q: usize,
    half: Half,
    until: Until,
    out: &mut Vec<UdmaDesc>,
) -> Result<Option<(u32, u8, u32)>, Abort> {
    out.clear();
    let Some(r) = qregs(dev, e, half, q) else { return Ok(None) };
    let lo = mq::RingBaseLo(dev.stored(st, r.base_lo, 0));
    // Only the address field counts ([5:0] must be zero).
    let base = mq::RingBaseLo(0).with_addr(lo.addr()).0 as u64 | ((dev.stored(st, r.base_hi, 0) as u64) << 32);
    let len = mq::RingLen(dev.stored(st, r.len, 0)).count();
    let cfg = dev.stored(st, r.cfg, mq::Cfg::reset_value().0 as u64);
    if len == 0 || cfg & udc::Q_CFG_ENABLE != udc::Q_CFG_ENABLE {
        return Ok(None); // paused or unconfigured
    }
    if cfg & udc::Q_CFG_RESET != udc::Q_CFG_RESET {
        return Ok(None); // enabled with bits 24-25 cleared: refused (`queue_cfg_misuse`)
    }
    let qs = if half == Half::M2s { st.udma[e].m2s[q] } else { st.udma[e].s2m[q] };
    if let Some(nc) = checked_nc(dev, e) {
        let bytes = len as u64 * DESC_BYTES as u64;
        if !mpu::allowed(dev, st, nc, Access::Desc, base, bytes) {
            mpu::refuse(dev, st, nc, Source::Dma(e % dev.arch.counts.dma_engines_per_nc as usize), Access::Desc, base);
            return Err(if half == Half::M2s { Abort::M2sDesc } else { Abort::S2mDesc });
        }
    }
    let (mut idx, mut rid) = (qs.head, qs.head_rid);
    let mut held = 0u64;
    for n in 0..qs.pending {
        let mut b = [0u8; DESC_BYTES];
        if dev.dev_read(st, base + idx as u64 * DESC_BYTES as u64, &mut b).is_err() {
            return Err(if half == Half::M2s { Abort::M2sDesc } else { Abort::S2mDesc });
        }
        let d = UdmaDesc::decode(&b);
        if d.ctrl.ring_id != rid {
            return Err(if half == Half::M2s { Abort::RingIdM2s } else { Abort::RingIdS2m });
        }
        out.push(d);
        idx += 1;
        if idx >= len {
            idx = 0;
            rid = (rid + 1) & 3;
        }
        held += d.ctrl.len as u64;
        let done = match until {
            Until::Last => d.ctrl.last,
            Until::Holds(total) => held >= total,
        };
        if done {
            return Ok(Some((idx, rid, n + 1)));
        }
    }
    Ok(None)
}

fn process_packet(dev: &Dev, st: &mut State, e: usize, q: usize) -> bool {
    let mut md = st.desc_pool.take();
    let mut sd = st.desc_pool.take();
    let r = process_packet_with(dev, st, e, q, &mut md, &mut sd);
    st.desc_pool.give(md);
    st.desc_pool.give(sd);
    r
}

/// `process_packet` with the descriptor lists to gather into (empty, from the state's pool).
fn process_packet_with(
    dev: &Dev,
    st: &mut State,
    e: usize,
    q: usize,
    md: &mut Vec<UdmaDesc>,
    sd: &mut Vec<UdmaDesc>,
) -> bool {
    let m = match collect(dev, st, e, q, Half::M2s, Until::Last, md) {
        Ok(Some(x)) => x,
        Ok(None) => return false,
        Err(a) => {
            let fault = matches!(a, Abort::M2sDesc).then_some(DmaFault::Decode { addr: 0 });
            abort(dev, st, e, q, a, fault);
            return false;
        }
    };
    let total: u64 = md.iter().map(|d| d.ctrl.len as u64).sum();
    let s = match collect(dev, st, e, q, Half::S2m, Until::Holds(total), sd) {
        Ok(Some(x)) => x,
        Ok(None) => return false,
        Err(a) => {
            let fault = matches!(a, Abort::S2mDesc).then_some(DmaFault::Decode { addr: 0 });
            abort(dev, st, e, q, a, fault);
            return false;
        }
    };
    let max = max_desc_per_pkt(dev, st, e);
    if md.len() as u32 > max || sd.len() as u32 > max {
        abort(dev, st, e, q, Abort::TooManyDesc, None);
        return false;
    }
    if st.udma[e].arm_abort == Some(q as u32) {
        // One packet aborts: disarm every engine of the NC.
        let per = dev.arch.counts.dma_engines_per_nc as usize;
        let nc = e / per;
        for x in nc * per..((nc + 1) * per).min(st.udma.len()) {
            st.udma[x].arm_abort = None;
        }
        abort(dev, st, e, q, Abort::Injected, None);
        return false;
    }
    if total > max_packet_bytes(dev, st, e) {
        // M2S secondary group A bit 13 "packet too long" (`udma_iofic.c`).
        abort(dev, st, e, q, Abort::PktTooLong, None);
        return false;
    }
    if let Some((a, at)) = refused(dev, st, e, md, sd, total) {
        // Not performed: the packet is consumed without moving data and the queue goes on
        // (the execution reports 1006).
        let nc = dev.nc_of_engine(e);
        mpu::refuse(dev, st, nc, Source::Dma(e % dev.arch.counts.dma_engines_per_nc as usize), a, at);
    } else if let Err((a, f)) = copy(dev, st, md, sd, total) {
        abort(dev, st, e, q, a, Some(f));
        return false;
    } else {
        dev.n.dma_bytes.fetch_add(total, Ordering::Relaxed);
    }
    let eng = &mut st.udma[e];
    eng.m2s[q].head = m.0;
    eng.m2s[q].head_rid = m.1;
    eng.m2s[q].pending -= m.2;
    eng.s2m[q].head = s.0;
    eng.s2m[q].head_rid = s.1;
    eng.s2m[q].pending -= s.2;
    dev.n.dma_packets.fetch_add(1, Ordering::Relaxed);
    if dev.cfg.op_latency_ns > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(dev.cfg.op_latency_ns));
    }
    true
}

/// The NC whose region table checks engine `e`'s accesses: the NC's own DMA engines only
/// (the host-facing engines are the driver's).
fn checked_nc(dev: &Dev, e: usize) -> Option<usize> {
    let per = dev.arch.counts.dma_engines_per_nc as usize;
    (e < per * dev.ncs()).then(|| e / per)
}

/// The first buffer of a packet the NC's region table refuses (a source read or a
/// destination write, CSR destinations included), if any.
fn refused(dev: &Dev, st: &mut State, e: usize, md: &[UdmaDesc], sd: &[UdmaDesc], total: u64) -> Option<(Access, u64)> {
    let nc = checked_nc(dev, e)?;
    if !mpu::enabled(dev, st, nc) {
        return None;
    }
    for d in md {
        if !mpu::allowed(dev, st, nc, Access::Read, d.addr, d.ctrl.len as u64) {
            return Some((Access::Read, d.addr));
        }
    }
    let mut left = total;
    for d in sd {
        if left == 0 {
            break;
        }
        let n = left.min(d.ctrl.len as u64);
        if !mpu::allowed(dev, st, nc, Access::Write, d.addr, n) {
            return Some((Access::Write, d.addr));
        }
        left -= n;
    }
    None
}

fn max_desc_per_pkt(dev: &Dev, st: &State, e: usize) -> u32 {
    let Some(u) = dev.udma(e) else { return u32::MAX };
    let v = csr_maps::blocks::udma_m2s::DescPrefCfg2(dev.stored(st, u.m2s().desc_pref_cfg2().offset(), 0))
        .max_desc_per_pkt();
    // Unprogrammed (0): no limit enforced beyond the ring.
    if v == 0 {
        u32::MAX
    } else {
        v
    }
}

/// The M2S packet-size limit programmed in `cfg_len` (unprogrammed: no limit).
fn max_packet_bytes(dev: &Dev, st: &State, e: usize) -> u64 {
    let Some(u) = dev.udma(e) else { return u64::MAX };
    let v = udma_m2s::CfgLen(dev.stored(st, u.m2s().cfg_len().offset(), 0)).max_pkt_size();
    if v == 0 {
        u64::MAX
    } else {
        v as u64
    }
}

/// Copy `total` bytes from the M2S descriptors' buffers into the S2M descriptors' buffers.
fn copy(dev: &Dev, st: &mut State, md: &[UdmaDesc], sd: &[UdmaDesc], total: u64) -> Result<(), (Abort, DmaFault)> {
    let ue = super::fault::hbm_ue_on_read(dev, st, md.iter().map(|d| (d.addr, d.ctrl.len as u64)));
    let mut src = st.seg_pool.take();
    let mut dst = st.seg_pool.take();
    let r = copy_with(dev, st, md, sd, total, &mut src, &mut dst);
    st.seg_pool.give(src);
    st.seg_pool.give(dst);
    if ue && r.is_ok() {
        // An uncorrectable HBM error under the source: the data delivered is damaged.
        let mut left = total;
        for d in sd {
            if left == 0 {
                break;
            }
            let n = left.min(d.ctrl.len as u64);
            let mut buf = vec![0u8; n as usize];
            if dev.dev_read(st, d.addr, &mut buf).is_ok() {
                super::fault::damage(&mut buf);
                let _ = dev.dev_write(st, d.addr, &buf);
            }
            left -= n;
        }
    }
    r
}

/// `copy` with the segment lists to resolve into (empty, from the state's pool).
fn copy_with(
    dev: &Dev,
    st: &mut State,
    md: &[UdmaDesc],
    sd: &[UdmaDesc],
    total: u64,
    src: &mut Vec<Seg>,
    dst: &mut Vec<Seg>,
) -> Result<(), (Abort, DmaFault)> {
    let maps = platform::sync::read(&dev.iommu.maps);
    for d in md {
        dev.resolve(&maps, d.addr, d.ctrl.len as u64, false, src).map_err(|f| (Abort::M2sData, f))?;
    }
    let mut left = total;
    for d in sd {
        if left == 0 {
            break;
        }
        let n = left.min(d.ctrl.len as u64);
        dev.resolve(&maps, d.addr, n, true, dst).map_err(|f| (Abort::S2mData, f))?;
        left -= n;
    }
    let all_mem = src.iter().chain(dst.iter()).all(|s| !matches!(s, Seg::Csr(..)));
    if all_mem {
        // Zero-staging merge copy.
        let (mut si, mut so, mut di, mut dof) = (0usize, 0usize, 0usize, 0usize);
        while si < src.len() && di < dst.len() {
            let (Some((sp, sl)), Some((_, dl))) = (dev.seg_mem(src[si]), dev.seg_mem(dst[di])) else { break };
            let n = (sl - so).min(dl - dof);
            // SAFETY: both ranges lie in live device-accessible memory (held IOMMU guard or
            // device-owned HostMem), `dof + n` within the destination piece; they may alias
            // only if the driver asked for an overlapping copy, which `put` moves like memmove.
            unsafe { dev.put(st, dst[di], dof, (sp + so) as *const u8, n) };
            so += n;
            dof += n;
            if so == sl {
                si += 1;
                so = 0;
            }
            if dof == dl {
                di += 1;
                dof = 0;
            }
        }
        std::sync::atomic::fence(Ordering::Release);
        return Ok(());
    }
    drop(maps);
    // Through a staging buffer (CSR sources or destinations).
    let mut buf = std::mem::take(&mut st.scratch);
    buf.clear();
    buf.resize(total as usize, 0);
    let mut o = 0usize;
    for d in md {
        let n = d.ctrl.len as usize;
        dev.dev_read(st, d.addr, &mut buf[o..o + n]).map_err(|f| (Abort::M2sData, f))?;
        o += n;
    }
    let mut o = 0usize;
    for d in sd {
        if o >= buf.len() {
            break;
        }
        let n = (buf.len() - o).min(d.ctrl.len as usize);
        // `buf` was taken out of the state: written from in place, no copy.
        let r = dev.dev_write(st, d.addr, &buf[o..o + n]);
        if let Err(f) = r {
            st.scratch = buf;
            return Err((Abort::S2mData, f));
        }
        o += n;
    }
    st.scratch = buf;
    Ok(())
}
