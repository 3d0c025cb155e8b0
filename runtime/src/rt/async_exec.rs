//! Asynchronous execution through the execution unit (XU) of the model's first NC: the
//! [`Executor`] glue ([`AsyncReq`], [`AsyncTok`], [`XuExec`]), tickets, and the workers'
//! lifetime.

use std::sync::Arc;
use std::time::Instant;

use neff::NrtStatus;

use super::execute::{bind_inputs, kick, read_outputs};
use super::{lock, Model, ModelHandle, NcXu, RtError, RtErrorKind, Runtime, TensorSet};
use crate::completion::Step;
use crate::xu::{Executor, Ticket, Xu, XuId};

impl Runtime {
    /// Asynchronous execute through the execution unit of the model's first NC. The
    /// ticket yields the status; outputs are written when it completes.
    pub fn execute_async(&self, m: &ModelHandle, inputs: &TensorSet, outputs: &TensorSet) -> Result<Ticket, RtError> {
        self.guard()?;
        lock(&m.lifecycle).check_executable()?;
        let nc =
            m.ncs.first().copied().ok_or_else(|| {
                RtError::with(NrtStatus::InvalidHandle, RtErrorKind::Handle("model has no NC".into()))
            })?;
        let xu = {
            let mut xus = lock(&self.xus);
            if let Some(x) = xus.get(&nc) {
                x.clone()
            } else {
                let id = XuId::compute(0, (nc % 256) as u8).map_err(|e| RtError::internal(e.to_string()))?;
                let cap = lock(&self.cfg).async_capacity;
                let xu = Xu::spawn(id, cap, XuExec).map_err(|e| RtError::internal(e.to_string()))?;
                let x = Arc::new(NcXu { xu });
                xus.insert(nc, x.clone());
                x
            }
        };
        xu.xu
            .submit(AsyncReq { model: m.clone(), inputs: inputs.clone(), outputs: outputs.clone() })
            .map_err(|s| RtError::with(s, RtErrorKind::Resource("execution unit refused the request".into())))
    }

    /// Status of an async execution: its result, or NRT_QUEUE_EMPTY while it is not done.
    pub fn poll(&self, t: &Ticket) -> NrtStatus {
        t.poll().unwrap_or(NrtStatus::QueueEmpty)
    }

    /// Execution-unit worker threads alive.
    pub fn workers(&self) -> usize {
        lock(&self.xus).len()
    }

    /// Stop the execution units that no loaded model uses (their workers exit).
    pub(super) fn retire_workers(&self) {
        let used: Vec<usize> = lock(&self.models).values().filter_map(|m| m.ncs.first().copied()).collect();
        let idle: Vec<Arc<NcXu>> = {
            let mut xus = lock(&self.xus);
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
    /// Bound and kicked off (the first step does it, so executions of a model never overlap).
    started: bool,
    /// A bind/kick failure to report.
    error: Option<NrtStatus>,
    /// When it was kicked off (profiling).
    t0: Instant,
}

/// The XU's executor. The XU submits every scheduled request before stepping the oldest;
/// since a model's rings and completion state serve one execution at a time, the bind and
/// the kickoff happen at a request's first step (when it is the oldest in flight).
pub struct XuExec;

impl Executor for XuExec {
    type Request = AsyncReq;
    type Token = AsyncTok;

    fn submit(&mut self, req: AsyncReq, _seq_id: u64) -> Result<AsyncTok, NrtStatus> {
        if lock(&req.model.lifecycle).poisoned().is_some() {
            return Err(NrtStatus::ExecUnitUnrecoverable);
        }
        Ok(AsyncTok { req, started: false, error: None, t0: Instant::now() })
    }

    fn step(&mut self, tok: &mut AsyncTok) -> Step {
        if tok.error.is_some() {
            return Step::DoneWithError;
        }
        let m = tok.req.model.clone();
        let mut g = lock(&m.exec);
        let Some(ex) = g.as_mut() else {
            tok.error = Some(NrtStatus::InvalidHandle);
            return Step::DoneWithError;
        };
        if !tok.started {
            if ex.busy {
                return Step::InFlight;
            }
            let r = bind_inputs(&m, ex, &tok.req.inputs, &tok.req.outputs).and_then(|_| {
                if let Some(irq) = &ex.irq {
                    irq.drain();
                }
                kick(ex)
            });
            if let Err(e) = r {
                tok.error = Some(e.status);
                return Step::DoneWithError;
            }
            ex.busy = true;
            tok.started = true;
            tok.t0 = Instant::now();
            return Step::InFlight;
        }
        ex.tracker.step(&mut ex.ncs, Instant::now())
    }

    fn complete(&mut self, tok: AsyncTok) -> NrtStatus {
        let m = &tok.req.model;
        let mut g = lock(&m.exec);
        let Some(ex) = g.as_mut() else { return NrtStatus::InvalidHandle };
        if tok.started {
            ex.busy = false;
        }
        if let Some(s) = tok.error {
            return s;
        }
        let status = ex.tracker.status();
        if crate::profile::active() {
            let t = ex.tracker.timings();
            crate::profile::record_exec(m.id, &m.name, &m.ncs, ex.seq, tok.t0, m.epoch, status, &t, &ex.sync);
        }
        let busy_ns = ex.tracker.timing(0).and_then(|t| t.duration()).unwrap_or(0) / 1000;
        m.count_execution(status, tok.t0.elapsed().as_nanos() as u64, busy_ns);
        if ex.tracker.verdict() == Some(Step::DoneWithError) {
            drop(g);
            lock(&m.lifecycle).poison(status);
            return status;
        }
        match read_outputs(m, ex, &tok.req.outputs) {
            Ok(()) => status,
            Err(e) => e.status,
        }
    }

    fn abandon(&mut self, tok: AsyncTok) {
        if tok.started {
            if let Some(ex) = lock(&tok.req.model.exec).as_mut() {
                ex.busy = false;
            }
        }
    }
}
