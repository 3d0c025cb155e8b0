//! Asynchronous execution through the execution unit (XU) of the model's first NC: the
//! [`Executor`] glue ([`AsyncReq`], [`AsyncTok`], [`XuExec`]), tickets, and the workers'
//! lifetime.

use std::sync::Arc;
use std::time::Instant;

use neff::NrtStatus;

use super::execute::{bind_inputs, invalidate_outputs, kick, read_outputs};
use super::{Held, Model, ModelHandle, NcXu, RtError, RtErrorKind, Runtime, TensorSet};
use crate::completion::Step;
use crate::xu::{Executor, Ticket, Xu, XuId};

impl Runtime {
    /// Asynchronous execute through the execution unit of the model's first NC. The
    /// ticket yields the status; outputs are written when it completes.
    ///
    /// A request that does not fit the model (a missing input, a tensor of the wrong size,
    /// one without a device address) is refused at its bind, before anything is kicked off:
    /// its ticket yields NRT_EXEC_BAD_INPUT, it fails alone and the XU stays healthy.
    pub fn execute_async(&self, m: &ModelHandle, inputs: &TensorSet, outputs: &TensorSet) -> Result<Ticket, RtError> {
        self.guard()?;
        m.lifecycle.read(|lc| lc.check_executable())?;
        let nc = m.ncs.first().copied().ok_or_else(|| RtError::from(RtErrorKind::ModelWithoutNc))?;
        let xu = {
            let mut xus = self.xus.lock();
            if let Some(x) = xus.get(&nc) {
                x.clone()
            } else {
                // The XU is named by the caller's (logical) core, as nrta_get_sequence names it.
                let session = self.session();
                let lnc = session.as_ref().and_then(|s| s.logical_nc(nc)).unwrap_or(nc);
                let lnc = u8::try_from(lnc).map_err(|_| RtError::from(RtErrorKind::NoXuId { nc: lnc }))?;
                let id = XuId::compute(0, lnc).map_err(|e| RtError::from(RtErrorKind::Xu(e)))?;
                let cap = session.map_or(super::DEFAULT_ASYNC_CAPACITY, |s| s.cfg.async_capacity);
                let xu = Xu::spawn(id, cap, XuExec).map_err(|e| RtError::from(RtErrorKind::Xu(e)))?;
                let x = Arc::new(NcXu { xu });
                xus.insert(nc, x.clone());
                x
            }
        };
        xu.xu
            .submit(AsyncReq { model: m.clone(), inputs: inputs.clone(), outputs: outputs.clone() })
            .map_err(|status| RtError::from(RtErrorKind::XuRefused { status }))
    }

    /// Status of an async execution: its result, or NRT_QUEUE_EMPTY while it is not done.
    pub fn poll(&self, t: &Ticket) -> NrtStatus {
        t.poll().unwrap_or(NrtStatus::QueueEmpty)
    }

    /// Execution-unit worker threads alive.
    pub fn workers(&self) -> usize {
        self.xus.lock().len()
    }

    /// Stop the execution units that no loaded model uses (their workers exit).
    pub(super) fn retire_workers(&self) {
        let used: Vec<usize> = self.models.lock().values().filter_map(|m| m.ncs.first().copied()).collect();
        let idle: Vec<Arc<NcXu>> = {
            let mut xus = self.xus.lock();
            let keys: Vec<usize> = xus.keys().copied().filter(|k| !used.contains(k)).collect();
            keys.into_iter().filter_map(|k| xus.remove(&k)).collect()
        };
        for x in idle {
            if let Ok(x) = Arc::try_unwrap(x) {
                let _ = x.xu.shutdown();
            }
        }
    }
}

// ------------------------------------------------------------------ async executor

/// An async request.
pub struct AsyncReq {
    model: Arc<Model>,
    inputs: TensorSet,
    outputs: TensorSet,
}

/// An in-flight async execution.
pub struct AsyncTok {
    req: AsyncReq,
    /// Bound and kicked off (once the NCs' lanes serve it, so executions never overlap).
    started: bool,
    /// Tickets on the model's lanes (taken at submission: FIFO with sync executions).
    held: Option<Held>,
    /// A bind/kick failure to report.
    error: Option<NrtStatus>,
    /// When it was kicked off (profiling).
    t0: Instant,
    /// The host span of the model switch before it (profiling).
    switch: Option<(u64, u64)>,
    /// When its wait last asked whether the device is reachable
    /// ([`super::execute::REACH_PROBE_PERIOD`]).
    probed: Instant,
}

/// The XU's executor. The XU submits every scheduled request before stepping the oldest;
/// since a model's rings and completion state serve one execution at a time, the bind and
/// the kickoff happen at a request's first step (when it is the oldest in flight).
pub struct XuExec;

impl Executor for XuExec {
    type Request = AsyncReq;
    type Token = AsyncTok;

    fn submit(&mut self, req: AsyncReq, _seq_id: u64) -> Result<AsyncTok, NrtStatus> {
        if req.model.lifecycle.read(|lc| lc.poisoned().is_some()) {
            return Err(NrtStatus::ExecUnitUnrecoverable);
        }
        let held = Some(Held::enqueue(&req.model.lanes, &req.model.ncs));
        let now = Instant::now();
        Ok(AsyncTok { req, started: false, held, error: None, t0: now, switch: None, probed: now })
    }

    fn step(&mut self, tok: &mut AsyncTok) -> Step {
        if tok.error.is_some() {
            // Refused before the kickoff (nothing ran): the request fails alone.
            return Step::Done;
        }
        let m = tok.req.model.clone();
        if !tok.started {
            if !tok.held.as_ref().is_some_and(|h| h.ready()) {
                return Step::InFlight;
            }
            let s0 = crate::profile::active().then(crate::profile::now_ns);
            match super::ncs::switch_in(&m) {
                Ok(true) => tok.switch = s0.map(|s0| (s0, crate::profile::now_ns())),
                Ok(false) => {}
                Err(e) => {
                    tok.error = Some(e.status);
                    return Step::Done;
                }
            }
        }
        let mut g = m.exec.lock();
        let Some(ex) = g.as_mut() else {
            tok.error = Some(NrtStatus::InvalidHandle);
            return Step::Done;
        };
        if !tok.started {
            if let Err(e) = bind_inputs(&m, ex, &tok.req.inputs, &tok.req.outputs) {
                tok.error = Some(e.status);
                return Step::Done;
            }
            if let Some(irq) = &ex.irq {
                irq.drain();
            }
            if let Err(e) = kick(ex) {
                drop(g);
                super::execute::kick_failed(&m, e.status);
                tok.error = Some(e.status);
                return Step::Done;
            }
            tok.started = true;
            tok.t0 = Instant::now();
            return Step::InFlight;
        }
        // A device gone unreachable (a shared device whose broker died) writes no notification
        // any more: fail the execution now rather than at its timeout, as the synchronous path.
        let now = platform::clock::coarse_now();
        if now.saturating_duration_since(tok.probed) >= super::execute::REACH_PROBE_PERIOD {
            tok.probed = now;
            if !ex.ncs.iter().all(|s| s.dev.reachable()) {
                drop(g);
                super::execute::kick_failed(&m, NrtStatus::Failure);
                tracing::error!(model = %m.name, "the device became unreachable during an execution");
                tok.error = Some(NrtStatus::Failure);
                return Step::Done;
            }
        }
        // The engine's deadlines run on the coarse clock, as the synchronous path's.
        ex.tracker.step(&mut ex.ncs, now)
    }

    fn complete(&mut self, mut tok: AsyncTok) -> NrtStatus {
        if let Some(s) = tok.error {
            return s;
        }
        let m = &tok.req.model;
        let mut g = m.exec.lock();
        let Some(ex) = g.as_mut() else { return NrtStatus::InvalidHandle };
        let status = ex.tracker.status();
        if crate::profile::active() {
            let t = ex.tracker.timings();
            let (seq, sync) = (ex.seq, &ex.sync);
            crate::profile::record_exec(m.id, &m.name, &m.ncs, seq, tok.t0, m.epoch, status, &t, sync, tok.switch);
        }
        let busy_ns = ex.tracker.device_span(0).0.unwrap_or(0) / 1000;
        let end = Instant::now();
        let warnings = ex.tracker.barrier_warnings();
        m.count_execution(status, end.saturating_duration_since(tok.t0).as_nanos() as u64, busy_ns, warnings, end);
        if ex.tracker.verdict() == Some(Step::DoneWithError) {
            drop(g);
            for &nc in &m.ncs {
                m.lanes.set_dirty(nc, true);
            }
            tok.held = None;
            invalidate_outputs(m, &tok.req.outputs, status);
            m.lifecycle.update(|lc| lc.poison(status));
            crate::hw_err::report(status, &m.vncs, &m.ncs, &m.devices);
            return status;
        }
        let r = read_outputs(m, ex, &tok.req.outputs);
        drop(g);
        tok.held = None;
        match r {
            Ok(_) => status,
            Err(e) => e.status,
        }
    }

    fn abandon(&mut self, tok: AsyncTok) {
        // Dropping the token gives its lane tickets back (cancelled if never served). An
        // execution already kicked off is left to finish on the device; the NC is re-armed
        // (reset first) before its next use.
        if tok.started {
            for &nc in &tok.req.model.ncs {
                tok.req.model.lanes.set_dirty(nc, true);
            }
        }
    }
}
