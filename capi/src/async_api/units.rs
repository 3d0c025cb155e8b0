//! Per-XU bookkeeping: one completion thread per execution unit waits for its requests in
//! order, advances the last completed sequence number, records failures in error trackers,
//! signals completion handles and calls the async-exec callback; sequence numbers; the
//! `nrt_close` hook that stops it all.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::xu::{seq_cursor, Ticket, Xu, XuId, SEQ_CURSOR_MASK};
use runtime::RtError;

use super::exec::TensorExec;
use super::tracker::Tracker;
use super::{nrta_error_t, CAPACITY, KIND_BASE};
use crate::base::{err, lock, NRT_STATUS};

/// A request's completion work.
pub(super) struct Job {
    pub(super) ticket: Ticket,
    pub(super) tracker: Option<Arc<Tracker>>,
    /// (model id, vnc) of an execution: the async-exec callback is called.
    pub(super) exec: Option<(u32, u32)>,
}

#[derive(Default)]
pub(super) struct Track {
    /// Highest cursor issued.
    pub(super) issued: u64,
    /// Highest cursor completed (and processed).
    pub(super) completed: u64,
    pub(super) pending: BTreeMap<u64, Ticket>,
    /// (cursor, our end of an eventfd) to signal.
    pub(super) waiters: Vec<(u64, c_int)>,
}

pub(super) struct XuState {
    pub(super) id: XuId,
    pub(super) track: Mutex<Track>,
    pub(super) jobs: Mutex<Option<Sender<Job>>>,
    /// This library's worker (None for the runtime's COMPUTE XU).
    pub(super) xu: Mutex<Option<Xu<TensorExec>>>,
}

pub(super) static XUS: Mutex<Option<HashMap<u16, Arc<XuState>>>> = Mutex::new(None);

/// Callback registered with `nrt_register_async_exec_callback`.
pub type NRT_ASYNC_EXEC_STATUS_CALLBACK = Option<unsafe extern "C" fn(*mut c_void, u32, u32, u64, NRT_STATUS)>;
pub(super) static CALLBACK: Mutex<(NRT_ASYNC_EXEC_STATUS_CALLBACK, usize)> = Mutex::new((None, 0));

pub(super) fn signal(fd: c_int) {
    let one: u64 = 1;
    // SAFETY: `fd` is our own eventfd; writing 8 bytes from a local u64.
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
        libc::close(fd);
    }
}

pub(super) fn xu_state(id: XuId, spawn: bool) -> Result<Arc<XuState>, RtError> {
    let mut g = lock(&XUS);
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(s) = map.get(&id.raw()) {
        return Ok(s.clone());
    }
    let xu = if spawn {
        Some(Xu::spawn(id, CAPACITY, TensorExec).map_err(|e| err(NrtStatus::Failure, e.to_string()))?)
    } else {
        None
    };
    let (tx, rx) = channel::<Job>();
    let st =
        Arc::new(XuState { id, track: Mutex::new(Track::default()), jobs: Mutex::new(Some(tx)), xu: Mutex::new(xu) });
    let s2 = st.clone();
    std::thread::Builder::new()
        .name(format!("nrta-xu-{:04x}", id.raw()))
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                let status = job.ticket.wait();
                let cur = seq_cursor(job.ticket.seq_id());
                let fds: Vec<c_int> = {
                    let mut t = lock(&s2.track);
                    t.completed = t.completed.max(cur);
                    t.pending.remove(&cur);
                    let (ready, rest): (Vec<_>, Vec<_>) = t.waiters.drain(..).partition(|(c, _)| *c <= cur);
                    t.waiters = rest;
                    ready.into_iter().map(|(_, fd)| fd).collect()
                };
                if status != NrtStatus::Success {
                    if let Some(tr) = &job.tracker {
                        lock(&tr.errors)
                            .push(nrta_error_t { seq_id: job.ticket.seq_id(), error_code: status.code() as u64 });
                    }
                }
                if let Some((model, vnc)) = job.exec {
                    let (cb, params) = *lock(&CALLBACK);
                    if let Some(cb) = cb {
                        // SAFETY: a callback the program registered, called with the params
                        // it registered, as nrt_experimental.h describes.
                        unsafe {
                            cb(params as *mut c_void, model, vnc, job.ticket.seq_id(), status.code() as NRT_STATUS)
                        };
                    }
                }
                for fd in fds {
                    signal(fd);
                }
            }
        })
        .map_err(|e| err(NrtStatus::Failure, format!("spawn the completion thread: {e}")))?;
    map.insert(id.raw(), st.clone());
    // The workers and completion threads run until nrt_close stops them.
    crate::base::shutdown::on_close("nrt_async", close);
    Ok(st)
}

/// Queue bookkeeping for a submitted request: its sequence id.
pub(super) fn track(
    st: &XuState,
    ticket: Ticket,
    tracker: Option<Arc<Tracker>>,
    exec: Option<(u32, u32)>,
) -> Result<u64, RtError> {
    let seq = ticket.seq_id();
    let stale: Vec<c_int> = {
        let mut t = lock(&st.track);
        let c = seq_cursor(seq);
        // The runtime retires a COMPUTE XU when the last model on its core is unloaded and
        // starts a new one (cursors from 1 again) at the next load: forget the old numbering.
        // Everything the old XU accepted completed before it was retired.
        let old = if c <= t.issued { std::mem::take(&mut *t).waiters } else { Vec::new() };
        t.issued = c;
        t.pending.insert(c, ticket.clone());
        old.into_iter().map(|(_, fd)| fd).collect()
    };
    for fd in stale {
        signal(fd);
    }
    let tx = lock(&st.jobs).clone().ok_or_else(|| err(NrtStatus::Closed, "the execution unit is closed"))?;
    tx.send(Job { ticket, tracker, exec }).map_err(|_| err(NrtStatus::Closed, "the execution unit is closed"))?;
    Ok(seq)
}

pub(super) fn tensor_xu(kind: c_int, queue: c_int, lnc: usize) -> Result<XuId, RtError> {
    let q = u8::try_from(queue)
        .ok()
        .filter(|&q| q < 16)
        .ok_or_else(|| err(NrtStatus::Invalid, format!("bad queue {queue}")))?;
    let l = u8::try_from(lnc).map_err(|_| err(NrtStatus::Invalid, format!("bad lnc {lnc}")))?;
    let k = KIND_BASE + u8::try_from(kind).map_err(|_| err(NrtStatus::Invalid, format!("bad xu {kind}")))?;
    XuId::new(k, q, l).map_err(|e| err(NrtStatus::Invalid, e.to_string()))
}

pub(super) fn state_of_seq(seq: u64) -> Result<(Arc<XuState>, u64), RtError> {
    let id = runtime::xu::seq_xu(seq);
    let st = lock(&XUS).as_ref().and_then(|m| m.get(&id.raw()).cloned());
    let st = st.ok_or_else(|| err(NrtStatus::Invalid, format!("sequence {seq:#x}: no such execution unit")))?;
    let cur = seq & SEQ_CURSOR_MASK;
    if cur == 0 || cur > lock(&st.track).issued {
        return Err(err(NrtStatus::Invalid, format!("sequence {seq:#x} was not issued")));
    }
    Ok((st, cur))
}

pub(super) fn completed(st: &XuState, cur: u64) -> bool {
    let t = lock(&st.track);
    cur <= t.completed || t.pending.get(&cur).is_none_or(|tk| tk.poll().is_some())
}

/// Stop this library's XUs and completion threads (the `nrt_close` hook).
pub(super) fn close() {
    let states: Vec<Arc<XuState>> = lock(&XUS).take().map(|m| m.into_values().collect()).unwrap_or_default();
    for s in states {
        if let Some(xu) = lock(&s.xu).take() {
            let _ = xu.shutdown();
        }
        lock(&s.jobs).take();
        let mut t = lock(&s.track);
        for (_, fd) in t.waiters.drain(..) {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
        }
    }
}
