//! nrt_async.h over the runtime's execution units ([`runtime::xu`]).
//!
//! - Tensor reads, writes and copies run on this library's XUs, one per (Logical NeuronCore,
//!   kind, queue): [`Xu`] workers over `TensorExec`. Requests are validated when queued;
//!   a request's status is its copy's.
//! - Executions (`nrta_execute_schedule`) run on the runtime's COMPUTE XU of the model's
//!   first core ([`runtime::Runtime::execute_async`]).
//! - One completion thread per XU waits for its requests in order and then: advances the
//!   XU's last completed sequence number, records failures in the request's error tracker,
//!   signals completion handles (eventfds) and calls the `nrt_register_async_exec_callback`
//!   callback for executions.
//!
//! Sequence ids are the runtime's: XU id in bits 63:48 (`{kind:4, queue:4, lnc:8}`) and a
//! per-XU counter from 1 in bits 47:0. The XU id layout is this library's (libnrt's is not
//! public): COMPUTE uses the runtime's kind 1, the tensor XUs kinds 8 + `nrta_xu_t`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::completion::Step;
use runtime::xu::{seq_cursor, Executor, Ticket, Xu, XuId, SEQ_CURSOR_MASK};
use runtime::{RtError, Tensor};

use crate::ffi::{
    entry, entry_value, err, guard, lock, model_of, need, nrt_model_t, nrt_tensor_set_t, nrt_tensor_t, put, rt,
    runtime_set, set_of, tensor_of, NRT_STATUS,
};
use crate::handles::Registry;

/// `nrta_xu_t` values.
pub const NRTA_XU_TENSOR_READ: c_int = 0;
pub const NRTA_XU_TENSOR_WRITE: c_int = 1;
pub const NRTA_XU_TENSOR_OP: c_int = 2;
pub const NRTA_XU_COMPUTE: c_int = 3;
pub const NRTA_XU_COLLECTIVES: c_int = 4;
pub const NRTA_XU_TYPE_NUM: c_int = 5;

/// Queue capacity of this library's XUs.
const CAPACITY: usize = 64;
/// Kind offset of this library's XUs (see the module docs).
const KIND_BASE: u8 = 8;

/// `nrta_seq_t`.
pub type nrta_seq_t = u64;

/// `nrta_error_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct nrta_error_t {
    pub seq_id: nrta_seq_t,
    pub error_code: u64,
}

/// `nrta_error_tracker_t`: failures of the requests it was passed to.
pub struct nrta_error_tracker_t {
    _opaque: [u8; 0],
}

#[derive(Default)]
pub(crate) struct Tracker {
    lnc: u32,
    errors: Mutex<Vec<nrta_error_t>>,
    /// What the last `nrta_error_tracker_get_list` returned (kept alive for the caller).
    listed: Mutex<Vec<nrta_error_t>>,
}

static TRACKERS: Registry<Arc<Tracker>> = Registry::new();

// ------------------------------------------------------------------ tensor executor

/// A tensor request.
pub(crate) enum Op {
    Write {
        t: Arc<Tensor>,
        buf: usize,
        off: u64,
        size: u64,
    },
    Read {
        t: Arc<Tensor>,
        buf: usize,
        off: u64,
        size: u64,
    },
    Copy {
        src: Arc<Tensor>,
        so: u64,
        dst: Arc<Tensor>,
        d_o: u64,
        size: u64,
    },
    /// A one-rank collective: every input copied to its output.
    Cc(Vec<(Arc<Tensor>, Arc<Tensor>)>),
}

/// Runs [`Op`]s; a request's status is its copy's.
pub(crate) struct TensorExec;

impl Executor for TensorExec {
    type Request = Op;
    type Token = (Op, Option<NrtStatus>);

    fn submit(&mut self, req: Op, _seq_id: u64) -> Result<Self::Token, NrtStatus> {
        Ok((req, None))
    }

    fn step(&mut self, tok: &mut Self::Token) -> Step {
        let r: Result<(), RtError> = match &tok.0 {
            Op::Write { t, buf, off, size } => {
                // SAFETY: nrt_async.h: the caller keeps `size` readable bytes at `buf` until
                // the request completes; the range was checked when queued.
                let data = unsafe { std::slice::from_raw_parts(*buf as *const u8, *size as usize) };
                t.write(*off, data)
            }
            Op::Read { t, buf, off, size } => {
                // SAFETY: as above, `size` writable bytes, not accessed by the caller meanwhile.
                let out = unsafe { std::slice::from_raw_parts_mut(*buf as *mut u8, *size as usize) };
                t.read(*off, out)
            }
            Op::Copy { src, so, dst, d_o, size } => runtime::tensor_ops::copy(src, *so, dst, *d_o, *size),
            Op::Cc(pairs) => pairs.iter().try_for_each(|(i, o)| runtime::tensor_ops::copy(i, 0, o, 0, i.size)),
        };
        tok.1 = Some(r.map_or_else(|e| e.status, |_| NrtStatus::Success));
        Step::Done
    }

    fn complete(&mut self, tok: Self::Token) -> NrtStatus {
        tok.1.unwrap_or(NrtStatus::Failure)
    }

    fn abandon(&mut self, _tok: Self::Token) {}
}

// ------------------------------------------------------------------ per-XU tracking

/// A request's completion work.
struct Job {
    ticket: Ticket,
    tracker: Option<Arc<Tracker>>,
    /// (model id, vnc) of an execution: the async-exec callback is called.
    exec: Option<(u32, u32)>,
}

#[derive(Default)]
struct Track {
    /// Highest cursor issued.
    issued: u64,
    /// Highest cursor completed (and processed).
    completed: u64,
    pending: BTreeMap<u64, Ticket>,
    /// (cursor, our end of an eventfd) to signal.
    waiters: Vec<(u64, c_int)>,
}

struct XuState {
    id: XuId,
    track: Mutex<Track>,
    jobs: Mutex<Option<Sender<Job>>>,
    /// This library's worker (None for the runtime's COMPUTE XU).
    xu: Mutex<Option<Xu<TensorExec>>>,
}

static XUS: Mutex<Option<HashMap<u16, Arc<XuState>>>> = Mutex::new(None);

/// Callback registered with `nrt_register_async_exec_callback`.
pub type NRT_ASYNC_EXEC_STATUS_CALLBACK = Option<unsafe extern "C" fn(*mut c_void, u32, u32, u64, NRT_STATUS)>;
static CALLBACK: Mutex<(NRT_ASYNC_EXEC_STATUS_CALLBACK, usize)> = Mutex::new((None, 0));

fn signal(fd: c_int) {
    let one: u64 = 1;
    // SAFETY: `fd` is our own eventfd; writing 8 bytes from a local u64.
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
        libc::close(fd);
    }
}

fn xu_state(id: XuId, spawn: bool) -> Result<Arc<XuState>, RtError> {
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
    Ok(st)
}

/// Queue bookkeeping for a submitted request: its sequence id.
fn track(
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

fn tensor_xu(kind: c_int, queue: c_int, lnc: usize) -> Result<XuId, RtError> {
    let q = u8::try_from(queue)
        .ok()
        .filter(|&q| q < 16)
        .ok_or_else(|| err(NrtStatus::Invalid, format!("bad queue {queue}")))?;
    let l = u8::try_from(lnc).map_err(|_| err(NrtStatus::Invalid, format!("bad lnc {lnc}")))?;
    let k = KIND_BASE + u8::try_from(kind).map_err(|_| err(NrtStatus::Invalid, format!("bad xu {kind}")))?;
    XuId::new(k, q, l).map_err(|e| err(NrtStatus::Invalid, e.to_string()))
}

fn tracker_of(p: *mut nrta_error_tracker_t) -> Result<Option<Arc<Tracker>>, RtError> {
    if p.is_null() {
        return Ok(None);
    }
    TRACKERS.get(p).map(Some).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{p:p} is not an error tracker")))
}

/// A tracker serves the Logical NeuronCore it was created for.
fn tracker_for(p: *mut nrta_error_tracker_t, lnc: usize) -> Result<Option<Arc<Tracker>>, RtError> {
    let tr = tracker_of(p)?;
    if let Some(t) = &tr {
        if t.lnc as usize != lnc {
            return Err(err(NrtStatus::Invalid, format!("error tracker of lnc {} used for lnc {lnc}", t.lnc)));
        }
    }
    Ok(tr)
}

/// Queue `op` on the tensor XU `kind` of `lnc`.
fn submit_op(
    kind: c_int,
    queue: c_int,
    lnc: usize,
    op: Op,
    tracker: *mut nrta_error_tracker_t,
    out: *mut u64,
) -> Result<(), RtError> {
    need(out, "req_sequence")?;
    let tr = tracker_for(tracker, lnc)?;
    let st = xu_state(tensor_xu(kind, queue, lnc)?, true)?;
    let ticket = {
        let g = lock(&st.xu);
        let xu = g.as_ref().ok_or_else(|| err(NrtStatus::Closed, "the execution unit is closed"))?;
        xu.submit(op).map_err(|s| err(s, "the execution unit refused the request"))?
    };
    let seq = track(&st, ticket, tr, None)?;
    // SAFETY: checked non-null; nrt_async.h: a writable nrta_seq_t.
    unsafe { put(out, seq) };
    Ok(())
}

fn check_range(t: &Tensor, off: u64, size: u64) -> Result<(), RtError> {
    if size > isize::MAX as u64 || off.checked_add(size).is_none_or(|e| e > t.size) {
        return Err(err(
            NrtStatus::Invalid,
            format!("{size} bytes at {off} outside tensor {} ({} bytes)", t.name, t.size),
        ));
    }
    Ok(())
}

/// The logical NC of a tensor (the caller's numbering: its global NC — the device's NCs
/// come after earlier devices' — renumbered by the visible cores).
fn tensor_lnc(t: &Tensor) -> usize {
    let mut nc = 0;
    while let Some((d, local)) = rt().device_of(nc) {
        if local == t.nc() && t.on_device(&d) {
            return rt().logical_nc(nc).unwrap_or(nc);
        }
        nc += 1;
    }
    t.nc()
}

/// `nrta_tensor_write`.
///
/// # Safety
/// `buf` has `size` readable bytes until the request completes; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_tensor_write(
    tensor: *mut nrt_tensor_t,
    buf: *const c_void,
    offset: u64,
    size: u64,
    queue: c_int,
    err_: *mut nrta_error_tracker_t,
    req_sequence: *mut nrta_seq_t,
) -> NRT_STATUS {
    entry("nrta_tensor_write", || {
        guard()?;
        let t = tensor_of(tensor)?;
        check_range(&t.tensor, offset, size)?;
        if size > 0 {
            need(buf, "buf")?;
        }
        let lnc = tensor_lnc(&t.tensor);
        let op = Op::Write { t: t.tensor.clone(), buf: buf as usize, off: offset, size };
        submit_op(NRTA_XU_TENSOR_WRITE, queue, lnc, op, err_, req_sequence)
    })
}

/// `nrta_tensor_read`.
///
/// # Safety
/// `buf` has `size` writable bytes until the request completes; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_tensor_read(
    buf: *mut c_void,
    tensor: *mut nrt_tensor_t,
    offset: u64,
    size: u64,
    queue: c_int,
    err_: *mut nrta_error_tracker_t,
    req_sequence: *mut nrta_seq_t,
) -> NRT_STATUS {
    entry("nrta_tensor_read", || {
        guard()?;
        let t = tensor_of(tensor)?;
        check_range(&t.tensor, offset, size)?;
        if size > 0 {
            need(buf, "buf")?;
        }
        let lnc = tensor_lnc(&t.tensor);
        let op = Op::Read { t: t.tensor.clone(), buf: buf as usize, off: offset, size };
        submit_op(NRTA_XU_TENSOR_READ, queue, lnc, op, err_, req_sequence)
    })
}

/// `nrta_tensor_copy` (TENSOR_OP XU of the source's core).
///
/// # Safety
/// Out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_tensor_copy(
    src: *mut nrt_tensor_t,
    src_offset: u64,
    dst: *mut nrt_tensor_t,
    dst_offset: u64,
    size: u64,
    queue: c_int,
    err_: *mut nrta_error_tracker_t,
    req_sequence: *mut nrta_seq_t,
) -> NRT_STATUS {
    entry("nrta_tensor_copy", || {
        guard()?;
        let (s, d) = (tensor_of(src)?, tensor_of(dst)?);
        check_range(&s.tensor, src_offset, size)?;
        check_range(&d.tensor, dst_offset, size)?;
        if s.tensor.device_allocation().is_some()
            && d.tensor.device_allocation().is_some()
            && (!s.tensor.same_device(&d.tensor) || s.tensor.nc() != d.tensor.nc())
        {
            return Err(err(NrtStatus::Invalid, "device tensors on different NeuronCores"));
        }
        let lnc = tensor_lnc(&s.tensor);
        let op = Op::Copy { src: s.tensor.clone(), so: src_offset, dst: d.tensor.clone(), d_o: dst_offset, size };
        submit_op(NRTA_XU_TENSOR_OP, queue, lnc, op, err_, req_sequence)
    })
}

/// `nrta_execute_schedule`: queue 0 only (NRT_INVALID otherwise).
///
/// # Safety
/// Out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_execute_schedule(
    model: *mut nrt_model_t,
    input: *const nrt_tensor_set_t,
    output: *mut nrt_tensor_set_t,
    queue: c_int,
    err_: *mut nrta_error_tracker_t,
    req_sequence: *mut nrta_seq_t,
) -> NRT_STATUS {
    entry("nrta_execute_schedule", || {
        guard()?;
        let m = model_of(model)?;
        let (ins, outs) = (set_of(input)?, set_of(output)?);
        need(req_sequence, "req_sequence")?;
        if queue != 0 {
            return Err(err(NrtStatus::Invalid, format!("queue {queue}: executions use queue 0")));
        }
        let first = m.ncs.first().copied().ok_or_else(|| err(NrtStatus::InvalidHandle, "model has no core"))?;
        let vnc = rt().logical_nc(first).unwrap_or(first);
        let tr = tracker_for(err_, vnc)?;
        let ticket = rt().execute_async(&m, &runtime_set(&ins), &runtime_set(&outs))?;
        let st = xu_state(runtime::xu::seq_xu(ticket.seq_id()), false)?;
        let seq = track(&st, ticket, tr, Some((m.id as u32, vnc as u32)))?;
        // SAFETY: checked non-null.
        unsafe { put(req_sequence, seq) };
        Ok(())
    })
}

/// `nrt_cc_context_t`: a prepared one-rank collective.
pub struct nrt_cc_context_t {
    _opaque: [u8; 0],
}

/// `nrt_cc_comm_t`.
#[repr(C)]
pub struct nrt_cc_comm_t {
    pub replica_group: *mut u32,
    pub rank: u32,
    pub rank_n: u32,
    pub ctx_device_id: u32,
    pub ctx_device_count: u32,
    pub vnc: u32,
}

/// `nrt_tensor_list_t`.
#[repr(C)]
pub struct nrt_tensor_list_t {
    pub tensors: *mut *mut nrt_tensor_t,
    pub num_tensors: usize,
}

struct CcCtx {
    vnc: u32,
    pairs: Vec<(Arc<Tensor>, Arc<Tensor>)>,
}

static CC: Registry<Arc<CcCtx>> = Registry::new();

/// # Safety
/// `l` is non-null with `num_tensors` readable handles.
unsafe fn tensor_list(l: *const nrt_tensor_list_t) -> Result<Vec<Arc<Tensor>>, RtError> {
    // SAFETY: by this function's contract.
    let l = unsafe { &*l };
    if l.num_tensors == 0 {
        return Ok(Vec::new());
    }
    need(l.tensors, "tensors")?;
    // SAFETY: non-null; nrt.h: `num_tensors` handles.
    let hs = unsafe { std::slice::from_raw_parts(l.tensors, l.num_tensors) };
    hs.iter().map(|&h| tensor_of(h).map(|t| t.tensor.clone())).collect()
}

/// `nrta_cc_prepare`: a collective of a one-rank communicator (rank_n 1) — ALLGATHER,
/// ALLREDUCE and REDUCESCATTER all reduce to copying each input to its output. Communicators
/// of several ranks need the multi-device collectives this runtime does not provide
/// (NRT_INVALID).
///
/// # Safety
/// Pointers NULL or valid as nrt_async.h describes.
#[no_mangle]
pub unsafe extern "C" fn nrta_cc_prepare(
    comm: *mut nrt_cc_comm_t,
    input: *mut nrt_tensor_list_t,
    output: *mut nrt_tensor_list_t,
    dtype: c_int,
    op: c_int,
    cc_op: c_int,
    cc_ctx: *mut *mut nrt_cc_context_t,
) -> NRT_STATUS {
    entry("nrta_cc_prepare", || {
        guard()?;
        need(comm, "comm")?;
        need(input, "input")?;
        need(output, "output")?;
        need(cc_ctx, "cc_ctx")?;
        // SAFETY: non-null; nrt.h layout.
        let c = unsafe { &*comm };
        if c.rank_n != 1 || c.rank != 0 {
            return Err(err(
                NrtStatus::Invalid,
                format!("rank {} of {}: only one-rank communicators are supported", c.rank, c.rank_n),
            ));
        }
        if !(0..=2).contains(&cc_op) || !(0..=3).contains(&op) || !(0..=0xF).contains(&dtype) {
            return Err(err(NrtStatus::Invalid, format!("bad collective (cc_op {cc_op}, op {op}, dtype {dtype})")));
        }
        // SAFETY: non-null lists per nrt_async.h.
        let (ins, outs) = unsafe { (tensor_list(input)?, tensor_list(output)?) };
        if ins.len() != outs.len() {
            return Err(err(NrtStatus::Invalid, format!("{} inputs, {} outputs", ins.len(), outs.len())));
        }
        for (i, o) in ins.iter().zip(&outs) {
            if i.size != o.size {
                return Err(err(
                    NrtStatus::Invalid,
                    format!("input {} ({} bytes) vs output {} ({} bytes)", i.name, i.size, o.name, o.size),
                ));
            }
        }
        let h = CC.insert(Arc::new(CcCtx { vnc: c.vnc, pairs: ins.into_iter().zip(outs).collect() }));
        // SAFETY: checked non-null.
        unsafe { put(cc_ctx, h) };
        Ok(())
    })
}

/// `nrta_cc_schedule`: queue a prepared collective on the COLLECTIVES XU; the context is
/// consumed (*cc_ctx set to NULL).
///
/// # Safety
/// Pointers NULL or valid as nrt_async.h describes.
#[no_mangle]
pub unsafe extern "C" fn nrta_cc_schedule(
    cc_ctx: *mut *mut nrt_cc_context_t,
    queue: c_int,
    err_: *mut nrta_error_tracker_t,
    req_sequence: *mut nrta_seq_t,
) -> NRT_STATUS {
    entry("nrta_cc_schedule", || {
        guard()?;
        need(cc_ctx, "cc_ctx")?;
        need(req_sequence, "req_sequence")?;
        // SAFETY: non-null, readable per nrt_async.h.
        let h = unsafe { cc_ctx.read() };
        let ctx =
            CC.get(h).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{h:p} is not a collective context")))?;
        submit_op(NRTA_XU_COLLECTIVES, queue, ctx.vnc as usize, Op::Cc(ctx.pairs.clone()), err_, req_sequence)?;
        CC.remove(h);
        // SAFETY: as above, writable.
        unsafe { put(cc_ctx, std::ptr::null_mut()) };
        Ok(())
    })
}

fn state_of_seq(seq: u64) -> Result<(Arc<XuState>, u64), RtError> {
    let id = runtime::xu::seq_xu(seq);
    let st = lock(&XUS).as_ref().and_then(|m| m.get(&id.raw()).cloned());
    let st = st.ok_or_else(|| err(NrtStatus::Invalid, format!("sequence {seq:#x}: no such execution unit")))?;
    let cur = seq & SEQ_CURSOR_MASK;
    if cur == 0 || cur > lock(&st.track).issued {
        return Err(err(NrtStatus::Invalid, format!("sequence {seq:#x} was not issued")));
    }
    Ok((st, cur))
}

fn completed(st: &XuState, cur: u64) -> bool {
    let t = lock(&st.track);
    cur <= t.completed || t.pending.get(&cur).is_none_or(|tk| tk.poll().is_some())
}

/// `nrta_is_completed`.
///
/// # Safety
/// `is_completed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_is_completed(seq: nrta_seq_t, is_completed: *mut bool) -> NRT_STATUS {
    entry("nrta_is_completed", || {
        need(is_completed, "is_completed")?;
        let (st, cur) = state_of_seq(seq)?;
        // SAFETY: checked non-null.
        unsafe { put(is_completed, completed(&st, cur)) };
        Ok(())
    })
}

/// `nrta_get_sequence`: last completed sequence id of an XU (cursor 0 if none yet).
///
/// # Safety
/// `seq` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_get_sequence(lnc: u32, xu: c_int, queue: c_int, seq: *mut nrta_seq_t) -> NRT_STATUS {
    entry("nrta_get_sequence", || {
        guard()?;
        need(seq, "seq")?;
        let lnc_u8 = u8::try_from(lnc).map_err(|_| err(NrtStatus::Invalid, format!("bad lnc {lnc}")))?;
        let id = match xu {
            NRTA_XU_COMPUTE => {
                let q = u8::try_from(queue).map_err(|_| err(NrtStatus::Invalid, format!("bad queue {queue}")))?;
                XuId::compute(q, lnc_u8).map_err(|e| err(NrtStatus::Invalid, e.to_string()))?
            }
            k if (0..NRTA_XU_TYPE_NUM).contains(&k) => tensor_xu(k, queue, lnc as usize)?,
            k => return Err(err(NrtStatus::Invalid, format!("bad xu {k}"))),
        };
        let st = lock(&XUS).as_ref().and_then(|m| m.get(&id.raw()).cloned());
        let done = st.map_or(0, |s| {
            let t = lock(&s.track);
            // Requests complete in order: the last one polled complete counts too.
            let polled = t.pending.iter().take_while(|(_, tk)| tk.poll().is_some()).map(|(c, _)| *c).last();
            polled.unwrap_or(0).max(t.completed)
        });
        // SAFETY: checked non-null.
        unsafe { put(seq, id.seq_id(done)) };
        Ok(())
    })
}

/// `nrta_get_completion_handle`: an eventfd that becomes readable when `seq` completes.
///
/// # Safety
/// `fd` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_get_completion_handle(seq: nrta_seq_t, fd: *mut c_int) -> NRT_STATUS {
    entry("nrta_get_completion_handle", || {
        need(fd, "fd")?;
        let (st, cur) = state_of_seq(seq)?;
        // SAFETY: plain syscall; checked.
        let user = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if user < 0 {
            return Err(err(NrtStatus::Resource, format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        // Our own descriptor of the same eventfd: the caller may close theirs at any time.
        // SAFETY: `user` is a live fd we just created.
        let ours = unsafe { libc::fcntl(user, libc::F_DUPFD_CLOEXEC, 0) };
        if ours < 0 {
            let e = err(NrtStatus::Resource, format!("dup: {}", std::io::Error::last_os_error()));
            // SAFETY: closing our fresh fd once.
            unsafe { libc::close(user) };
            return Err(e);
        }
        {
            let mut t = lock(&st.track);
            if cur <= t.completed {
                drop(t);
                signal(ours);
            } else {
                t.waiters.push((cur, ours));
            }
        }
        // SAFETY: checked non-null.
        unsafe { put(fd, user) };
        Ok(())
    })
}

/// `nrta_error_tracker_create`.
///
/// # Safety
/// `error_tracker` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_error_tracker_create(
    lnc_idx: u32,
    error_tracker: *mut *mut nrta_error_tracker_t,
) -> NRT_STATUS {
    entry("nrta_error_tracker_create", || {
        guard()?;
        need(error_tracker, "error_tracker")?;
        if rt().device_of_vnc(lnc_idx as usize).is_err() {
            return Err(err(NrtStatus::Invalid, format!("no lnc {lnc_idx}")));
        }
        let h = TRACKERS.insert(Arc::new(Tracker { lnc: lnc_idx, ..Default::default() }));
        // SAFETY: checked non-null.
        unsafe { put(error_tracker, h) };
        Ok(())
    })
}

/// `nrta_error_tracker_destroy`.
#[no_mangle]
pub extern "C" fn nrta_error_tracker_destroy(error_tracker: *mut nrta_error_tracker_t) {
    entry_value((), || {
        TRACKERS.remove(error_tracker);
    })
}

/// `nrta_error_tracker_get_list`: every failure recorded so far, oldest first; the array
/// stays valid until the next call on this tracker or its destroy.
///
/// # Safety
/// Out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_error_tracker_get_list(
    error_tracker: *mut nrta_error_tracker_t,
    list: *mut *const nrta_error_t,
    error_count: *mut usize,
) -> NRT_STATUS {
    entry("nrta_error_tracker_get_list", || {
        need(list, "list")?;
        need(error_count, "error_count")?;
        let tr = tracker_of(error_tracker)?.ok_or_else(|| err(NrtStatus::Invalid, "error_tracker is NULL"))?;
        let mut l = lock(&tr.listed);
        *l = lock(&tr.errors).clone();
        // SAFETY: both checked non-null; the array lives in the tracker until the next call
        // or destroy (the registry and this Arc keep it alive).
        unsafe {
            put(list, if l.is_empty() { std::ptr::null() } else { l.as_ptr() });
            put(error_count, l.len());
        }
        Ok(())
    })
}

/// `nrt_register_async_exec_callback` (NULL removes the callback).
#[no_mangle]
pub extern "C" fn nrt_register_async_exec_callback(
    callback: NRT_ASYNC_EXEC_STATUS_CALLBACK,
    params: *mut c_void,
) -> NRT_STATUS {
    entry("nrt_register_async_exec_callback", || {
        *lock(&CALLBACK) = (callback, params as usize);
        Ok(())
    })
}

/// `nrt_async_drain_queued_execs`: wait until every request queued so far on `vnc`'s
/// execution units has completed and been processed.
#[no_mangle]
pub extern "C" fn nrt_async_drain_queued_execs(vnc: i32) -> NRT_STATUS {
    entry("nrt_async_drain_queued_execs", || {
        guard()?;
        let v = u8::try_from(vnc).map_err(|_| err(NrtStatus::Invalid, format!("bad vnc {vnc}")))?;
        let states: Vec<Arc<XuState>> =
            lock(&XUS).as_ref().map(|m| m.values().filter(|s| s.id.vnc() == v).cloned().collect()).unwrap_or_default();
        for s in states {
            let (tickets, last): (Vec<Ticket>, u64) = {
                let t = lock(&s.track);
                (t.pending.values().cloned().collect(), t.issued)
            };
            for tk in tickets {
                tk.wait();
            }
            // The completion thread processes in order: wait until it reached `last`.
            while lock(&s.track).completed < last {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Ok(())
    })
}

/// Stop this library's XUs and completion threads (nrt_close).
pub(crate) fn close() {
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
