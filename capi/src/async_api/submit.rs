//! Queueing requests: tensor writes, reads and copies on this library's XUs, executions on
//! the runtime's COMPUTE XU (`nrta_execute_schedule`).

use std::ffi::{c_int, c_void};

use neff::NrtStatus;
use runtime::{RtError, Tensor};

use super::exec::Op;
use super::tracker::{nrta_error_tracker_t, tracker_for};
use super::units::{tensor_xu, track, xu_state};
use super::{nrta_seq_t, NRTA_XU_TENSOR_OP, NRTA_XU_TENSOR_READ, NRTA_XU_TENSOR_WRITE};
use crate::base::{
    entry, err, guard, lock, model_of, need, nrt_model_t, nrt_tensor_set_t, nrt_tensor_t, put, rt, runtime_set, set_of,
    tensor_of, NRT_STATUS,
};

/// Queue `op` on the tensor XU `kind` of `lnc`.
pub(super) fn submit_op(
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

pub(super) fn check_range(t: &Tensor, off: u64, size: u64) -> Result<(), RtError> {
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
pub(super) fn tensor_lnc(t: &Tensor) -> usize {
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
