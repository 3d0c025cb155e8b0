//! One-rank collectives (`nrta_cc_prepare` / `nrta_cc_schedule`) on the COLLECTIVES XU.

use std::ffi::c_int;
use std::sync::Arc;

use neff::NrtStatus;
use runtime::{RtError, Tensor};

use super::exec::Op;
use super::submit::submit_op;
use super::tracker::nrta_error_tracker_t;
use super::{nrta_seq_t, NRTA_XU_COLLECTIVES};
use crate::base::{entry, err, guard, need, nrt_tensor_t, put, tensor_of, Registry, NRT_STATUS};

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

pub(super) struct CcCtx {
    vnc: u32,
    pairs: Vec<(Arc<Tensor>, Arc<Tensor>)>,
}

pub(super) static CC: Registry<Arc<CcCtx>> = Registry::new();

/// # Safety
/// `l` is non-null with `num_tensors` readable handles.
pub(super) unsafe fn tensor_list(l: *const nrt_tensor_list_t) -> Result<Vec<Arc<Tensor>>, RtError> {
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
