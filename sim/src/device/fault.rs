//! Fault injection: `KIND@ncN[:TARGET]` specs, armed through the API or the CLI's
//! `--sim-fault`. Each fault produces the records and register state the hardware would,
//! so that the driver's decode path is what finds it.
//!
//! | spec | effect |
//! |---|---|
//! | `nq-overflow@nc0[:eng]` | the engine (default PE) floods its INFER_STATUS ring with debug notifications until the ring is really full (the host's head write-back lags by up to a quarter ring): records dropped, the next record's overflow bit, NC INTC line 61 (g1 bit 29) |
//! | `dma-abort@nc1:q3` | the next packet on queue 3 of an engine of NC 1 aborts (M2S data AXI response error latched, NC INTC dma_abort) |
//! | `hbm-ue@nc0` | uncorrectable HBM error on the next DMA that reads the NC's HBM stack: the data it delivers is damaged (bits flipped), misc RAM `hbm_ecc[k].uncorrectable`, NC INTC hbm_ue |
//! | `hbm-ue-repairable@nc0` | the same read, repairable: `hbm_ecc[k].repairable`, `hbm_repair_state` pending, NC INTC hbm_ue_repairable |
//! | `nc-ue@nc0[:eng]` | uncorrectable NC (SRAM) error while the engine (default PE) executes its next slot: `sram_ecc.uncorrected`, NC INTC nc_ue |
//! | `fp-nan@nc0:act` | FP_NAN error record from the engine's next slot |
//! | `transient@nc0[:eng]` | SEQUENCER_NONFATAL error record |
//! | `seq-fatal@nc0:pool` | SEQUENCER_FATAL error record; the engine stops |
//! | `hang@nc0:pe` | the engine stops fetching (no records) |
//! | `out-of-order@nc0:dve` | the engine posts an INST_END before its INST_START (the host's matcher probes the overflow bit) |
//! | `semaphore-error@nc0[:eng]` | SEMAPHORE_ERROR error record |
//! | `oob@nc0[:eng]` | custom INFER_STATUS record with an out-of-bounds sub-id (2) |
//! | `cc-error@nc0` | the NC's next collective fails mid-transfer: NC INTC cc_error, the collective never completes |
//! | `net-proxy@nc0` | the network proxy stops answering during the NC's next collective: NC INTC net_proxy_fail, the collective never completes |
//! | `barrier@nc0` | the NC's next collectives barrier task fails: `nc_barrier.status` failed for every rank of that barrier (docs/faults.md) |

use std::sync::atomic::Ordering;

use csr_maps::Engine;

use super::intc::Line;
use super::{Dev, State};

/// A fault kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    NqOverflow,
    DmaAbort,
    HbmUe,
    HbmUeRepairable,
    NcUe,
    FpNan,
    Transient,
    SeqFatal,
    Hang,
    OutOfOrder,
    SemaphoreError,
    Oob,
    CcError,
    NetProxy,
    Barrier,
}

impl FaultKind {
    const ALL: [(&'static str, FaultKind); 15] = [
        ("nq-overflow", FaultKind::NqOverflow),
        ("dma-abort", FaultKind::DmaAbort),
        ("hbm-ue", FaultKind::HbmUe),
        ("hbm-ue-repairable", FaultKind::HbmUeRepairable),
        ("nc-ue", FaultKind::NcUe),
        ("fp-nan", FaultKind::FpNan),
        ("transient", FaultKind::Transient),
        ("seq-fatal", FaultKind::SeqFatal),
        ("hang", FaultKind::Hang),
        ("out-of-order", FaultKind::OutOfOrder),
        ("semaphore-error", FaultKind::SemaphoreError),
        ("oob", FaultKind::Oob),
        ("cc-error", FaultKind::CcError),
        ("net-proxy", FaultKind::NetProxy),
        ("barrier", FaultKind::Barrier),
    ];

    /// Spec name.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(_, k)| *k == self).map(|(n, _)| *n).unwrap_or("?")
    }

    /// Faults that fire on an engine's next slot.
    pub(crate) fn per_engine(self) -> bool {
        matches!(
            self,
            FaultKind::NqOverflow
                | FaultKind::NcUe
                | FaultKind::FpNan
                | FaultKind::Transient
                | FaultKind::SeqFatal
                | FaultKind::Hang
                | FaultKind::OutOfOrder
                | FaultKind::SemaphoreError
                | FaultKind::Oob
        )
    }

    fn needs_engine(self) -> bool {
        matches!(self, FaultKind::FpNan | FaultKind::SeqFatal | FaultKind::Hang | FaultKind::OutOfOrder)
    }
}

/// A parsed fault spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub nc: usize,
    /// Engine (0 PE .. 4 SP) for per-engine faults.
    pub engine: Option<usize>,
    /// Queue for `dma-abort`.
    pub queue: Option<u32>,
}

/// A spec that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec `{spec}`: {reason} (expected KIND@ncN[:ENGINE|:qN], kinds: {kinds})")]
pub struct FaultSpecError {
    pub spec: String,
    pub reason: String,
    pub kinds: String,
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| FaultSpecError {
            spec: s.to_string(),
            reason: reason.to_string(),
            kinds: FaultKind::ALL.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        };
        let (k, rest) = s.split_once('@').ok_or_else(|| err("missing `@`"))?;
        let kind = FaultKind::ALL.iter().find(|(n, _)| *n == k).map(|(_, k)| *k).ok_or_else(|| err("unknown kind"))?;
        let mut parts = rest.split(':');
        let nc = parts
            .next()
            .and_then(|p| p.strip_prefix("nc"))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| err("expected ncN after `@`"))?;
        let mut engine = None;
        let mut queue = None;
        if let Some(t) = parts.next() {
            if let Some(q) = t.strip_prefix('q') {
                queue = Some(q.parse::<u32>().map_err(|_| err("bad queue number"))?);
            } else {
                engine = Some(
                    Engine::from_name(t)
                        .map(Engine::index)
                        .ok_or_else(|| err("unknown engine (pe, act, pool, dve, sp)"))?,
                );
            }
        }
        if parts.next().is_some() {
            return Err(err("trailing components"));
        }
        if kind.needs_engine() && engine.is_none() {
            return Err(err("this kind needs an engine"));
        }
        if kind == FaultKind::DmaAbort && queue.is_none() {
            return Err(err("dma-abort needs a queue (:qN)"));
        }
        if kind.per_engine() && engine.is_none() {
            engine = Some(0);
        }
        Ok(FaultSpec { kind, nc, engine, queue })
    }
}

impl std::fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@nc{}", self.kind.name(), self.nc)?;
        if let Some(q) = self.queue {
            write!(f, ":q{q}")?;
        } else if let Some(e) = self.engine {
            write!(f, ":{}", Engine::from_index(e).map_or("?", Engine::name))?;
        }
        Ok(())
    }
}

/// HBM stack of an NC (default NCs of HBM h: NC h on V2, NCs 2h, 2h+1 on V3/V4).
fn stack_of(dev: &Dev, nc: usize) -> u64 {
    (nc as u64 * dev.arch.counts.hbm_stacks / dev.arch.counts.ncs).min(dev.arch.counts.hbm_stacks.saturating_sub(1))
}

/// Arm `f` on the device. Faults take effect where the hardware would fail: per-engine kinds
/// on the engine's next slot, `hbm-ue*` on the next DMA that reads the NC's HBM stack
/// ([`hbm_ue_on_read`]), `cc-error` / `net-proxy` on the NC's next collective
/// ([`collective_fault`]), `dma-abort` on the next packet of the queue.
pub(crate) fn arm(dev: &Dev, st: &mut State, f: FaultSpec) {
    if f.nc >= dev.ncs() {
        dev.n.unclaimed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let nc = f.nc;
    match f.kind {
        FaultKind::DmaAbort => {
            // The NC's own engines (not the host-facing ones it shares).
            let per = dev.arch.counts.dma_engines_per_nc as usize;
            for e in nc * per..((nc + 1) * per).min(st.udma.len()) {
                st.udma[e].arm_abort = f.queue;
            }
        }
        _ => st.faults.push(f),
    }
}

/// An uncorrectable SRAM error in NC `nc` while engine `e` executes the slot at `pc`: misc
/// RAM `sram_ecc.uncorrected` counts it, the NC's error ring gets the uncorrectable ECC record
/// (libnrt derives NRT_EXEC_HW_ERR_NC_UE from it; encoding modeled) and NC INTC `nc_ue` is
/// raised (placement modeled) so the host stops waiting for the engines.
pub(crate) fn nc_ue(dev: &Dev, st: &mut State, nc: usize, e: usize, pc: u32) {
    let m = dev.misc_ram();
    let v = csr_maps::blocks::misc_ram::SramEcc(dev.reg_value(st, m.sram_ecc().offset()));
    st.regs.insert(m.sram_ecc().offset(), v.with_uncorrected(v.uncorrected().saturating_add(1)).0);
    super::records::post_ecc_uncorrectable(dev, st, nc, e, pc);
    dev.intc(st, nc, Line::NcUe);
}

/// A DMA is about to read the source ranges `srcs` (device address, length). If an armed
/// `hbm-ue` / `hbm-ue-repairable` covers the HBM stack one of them lies in, it fires now: the
/// ECC error counter of that stack in the misc RAM (`hbm_ecc[k]`, the kmod's
/// `neuron_dhal_v*.c` ECC registers; placement modeled) counts it, a repairable error also
/// sets `hbm_repair_state` pending, and the armed NC's INTC line is raised. Returns whether
/// one fired: the caller then delivers damaged data (every byte read inverted).
pub(crate) fn hbm_ue_on_read(dev: &Dev, st: &mut State, srcs: impl Iterator<Item = (u64, u64)>) -> bool {
    if !st.faults.iter().any(|f| matches!(f.kind, FaultKind::HbmUe | FaultKind::HbmUeRepairable)) {
        return false;
    }
    let stacks: Vec<u64> =
        srcs.filter(|r| r.1 > 0).filter_map(|(a, _)| dev.arch.dev_to_hbm(a).map(|(k, _)| k)).collect();
    let Some(i) = st.faults.iter().position(|f| {
        matches!(f.kind, FaultKind::HbmUe | FaultKind::HbmUeRepairable) && stacks.contains(&stack_of(dev, f.nc))
    }) else {
        return false;
    };
    let f = st.faults.remove(i);
    let m = dev.misc_ram();
    let Ok(e) = m.hbm_ecc(stack_of(dev, f.nc)) else { return true };
    let v = csr_maps::blocks::misc_ram::HbmEcc(dev.reg_value(st, e.offset()));
    if f.kind == FaultKind::HbmUe {
        st.regs.insert(e.offset(), v.with_uncorrectable(v.uncorrectable().saturating_add(1).min(0xF)).0);
        dev.intc(st, f.nc, Line::HbmUe);
    } else {
        st.regs.insert(e.offset(), v.with_repairable(v.repairable().saturating_add(1).min(0xFFF)).0);
        st.regs.insert(m.hbm_repair_state().offset(), 1);
        dev.intc(st, f.nc, Line::HbmUeRepairable);
    }
    true
}

/// Bytes an uncorrectable read delivers: the data, every bit flipped.
pub(crate) fn damage(buf: &mut [u8]) {
    for b in buf {
        *b = !*b;
    }
}

/// What an armed collective fault does to NC `nc`'s collective now starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollFault {
    /// `cc-error`: the collectives hardware fails the transfer (NC INTC `cc_error`).
    Error,
    /// `net-proxy`: the network proxy stops answering (NC INTC `net_proxy_fail`).
    ProxyDown,
}

/// Consume an armed `cc-error` / `net-proxy` of `nc` as its collective starts, raising the
/// NC INTC line. The collective never completes: the engine stays waiting on it.
pub(crate) fn collective_fault(dev: &Dev, st: &mut State, nc: usize) -> Option<CollFault> {
    let i = st.faults.iter().position(|f| f.nc == nc && matches!(f.kind, FaultKind::CcError | FaultKind::NetProxy))?;
    let f = st.faults.remove(i);
    Some(if f.kind == FaultKind::CcError {
        dev.intc(st, nc, Line::CcError);
        CollFault::Error
    } else {
        dev.intc(st, nc, Line::NetProxyFail);
        CollFault::ProxyDown
    })
}

/// Consume an armed `barrier` fault of `nc` as the NC arrives at a barrier: that barrier fails.
pub(crate) fn barrier_fault(st: &mut State, nc: usize) -> bool {
    let Some(i) = st.faults.iter().position(|f| f.nc == nc && f.kind == FaultKind::Barrier) else { return false };
    st.faults.remove(i);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        let f: FaultSpec = "dma-abort@nc1:q3".parse().unwrap();
        assert_eq!((f.kind, f.nc, f.queue), (FaultKind::DmaAbort, 1, Some(3)));
        let f: FaultSpec = "fp-nan@nc0:act".parse().unwrap();
        assert_eq!((f.kind, f.engine), (FaultKind::FpNan, Some(1)));
        assert_eq!(f.to_string(), "fp-nan@nc0:act");
        assert_eq!("transient@nc2".parse::<FaultSpec>().unwrap().engine, Some(0));
        for bad in ["nope@nc0", "hang@nc0", "hang@x0:pe", "dma-abort@nc0", "hang@nc0:gpu", "hbm-ue", "fp-nan@nc0:act:x"]
        {
            assert!(bad.parse::<FaultSpec>().is_err(), "{bad}");
        }
        for (n, k) in FaultKind::ALL {
            assert_eq!(k.name(), n);
        }
    }
}
