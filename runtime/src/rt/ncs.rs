//! Sharing an NC between models: the armed model's hardware state is parked and the next
//! model's re-armed when an NC's lane serves a request for another model.
//!
//! Each staged graph keeps everything it owns in memory while parked — vars, instruction
//! streams, descriptor rings and notification rings — so switching is register programming
//! only: park = reset the five sequencer engines, halt the notification slots and release
//! the Q7/DGE core claims; re-arm = (reset the NC first if a fault left it dirty) clear the
//! latched causes, zero the model's and the runtime's semaphores, re-program the
//! notification slots onto the model's (emptied) rings, re-initialise its DMA queues onto its
//! rings, re-program and enable its streams, and claim the DGE / Q7 cores again (the Q7
//! libraries are re-attached).

use std::sync::Arc;

use hal::q7::{CoreKind, UcodeContext, UcodeCore};

use super::{Armed, ExecState, Model, NcLanes, RtError};
use crate::stage::{sems, ucode, StageError, StagedNc};

/// Park `s`: its NC is handed to another model. Nothing it owns is freed.
pub(super) fn park(s: &mut StagedNc) {
    let regs = s.dev.regs();
    for st in &s.streams {
        let _ = st.halt(&regs);
    }
    for r in s.infer_rings.iter().chain(std::iter::once(&s.err_ring)) {
        let _ = r.halt(&regs);
    }
    // Dropping the cores releases their claims.
    s.dge_core = None;
    s.q7_core = None;
}

/// The one park path (load and [`switch_in`]): park whichever model is armed on global NC
/// `g` and leave nothing armed there. The caller holds `g`'s lane, so that model is idle.
pub(super) fn park_armed(lanes: &NcLanes, g: usize) {
    let Some(prev) = lanes.set_active(g, None).and_then(|a| a.model.upgrade()) else { return };
    let Some(j) = prev.ncs.iter().position(|&x| x == g) else { return };
    let mut exec = prev.exec.lock();
    if let Some(s) = exec.as_mut().and_then(|ex| ex.ncs.get_mut(j)) {
        park(s);
    }
}

/// Re-arm `s` on its NC (after [`park`], or after the NC was reset under it).
pub(super) fn arm(s: &mut StagedNc, reset_first: bool) -> Result<(), RtError> {
    let dev = s.dev.clone();
    let nc = s.nc;
    s.dge_core = None;
    s.q7_core = None;
    if reset_first {
        dev.reset_nc(nc)?;
    }
    dev.clear_causes(nc)?;
    // The table holds another model's regions (or nothing after a reset): program this one's
    // before its engines run again.
    s.regions_bound = None;
    s.program_regions()?;
    for &i in s.model_sems.iter().chain(sems::START.iter()).chain([sems::DONE, sems::KICK].iter()) {
        dev.sem_set(nc, i as u64, 0)?;
    }
    let regs = dev.regs();
    let arch = dev.arch();
    for r in s.infer_rings.iter_mut().chain(std::iter::once(&mut s.err_ring)) {
        r.rearm(arch, &regs)?;
    }
    for q in s.queues.iter_mut() {
        q.ring.recover(&regs)?;
    }
    for st in &s.streams {
        st.rearm(&regs, dev.infer_slot(st.engine), true)?;
    }
    s.dge_core = Some(ucode::dge_mailboxes(&dev, nc).map_err(stage_err)?);
    if !s.ucode.is_empty() {
        let e = |e: hal::q7::UcodeError| RtError::from(hal::HalError::from(e));
        let ctx = UcodeContext::new(csr_maps::consts::q7::API_LEVEL).map_err(e)?;
        let mut core = UcodeCore::new(&ctx, &dev, nc, CoreKind::Q7Pool { core: 0 }).map_err(e)?;
        core.on_ucode_booted().map_err(e)?;
        for ll in &s.ucode {
            core.attach(ll).map_err(e)?;
        }
        s.q7_core = Some(core);
    }
    Ok(())
}

fn stage_err(e: StageError) -> RtError {
    RtError::from(super::RtErrorKind::Bindings(Box::new(e)))
}

/// With `m`'s lanes served: make `m` the model armed on each of its NCs, parking whichever
/// model was armed there; whether any NC was switched. A failure leaves the NC with nothing
/// armed (the next user re-arms).
pub(super) fn switch_in(m: &Arc<Model>) -> Result<bool, RtError> {
    let mut switched = false;
    for (k, &g) in m.ncs.iter().enumerate() {
        if m.lanes.active(g).is_some_and(|a| a.id == m.id) {
            continue;
        }
        // Park the previous model (its lanes include this NC, which we hold: it is idle).
        park_armed(&m.lanes, g);
        let dirty = m.lanes.set_dirty(g, false);
        let mut gex = m.exec.lock();
        let ex: &mut ExecState = match gex.as_mut() {
            Some(ex) => ex,
            None => return Ok(switched),
        };
        if let Some(s) = ex.ncs.get_mut(k) {
            if let Err(e) = arm(s, dirty) {
                park(s);
                m.lanes.set_dirty(g, true);
                return Err(e);
            }
        }
        m.lanes.set_active(g, Some(Armed { id: m.id, model: Arc::downgrade(m) }));
        switched = true;
    }
    Ok(switched)
}
