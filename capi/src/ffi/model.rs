//! Models: `nrt_load`, `nrt_load_collectives`, `nrt_unload`, the model's NC count, and
//! `nrt_execute` / `nrt_execute_repeat`.

use super::*;

/// The shared body of the load calls: checks the arguments, then `how(bytes, start NC, NC
/// count)` loads the NEFF and the handle is stored in `*model`.
///
/// # Safety
/// `neff_bytes` is NULL or `size` readable bytes; `model` is NULL or a writable pointer.
unsafe fn load(
    func: &str,
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    model: *mut *mut nrt_model_t,
    how: impl FnOnce(&[u8], Option<usize>, Option<usize>) -> Result<runtime::ModelHandle, RtError>,
) -> NRT_STATUS {
    entry(func, || {
        guard()?;
        need(model, "model")?;
        need(neff_bytes, "neff_bytes")?;
        if size == 0 || size > isize::MAX as usize {
            return Err(err(NrtStatus::Invalid, format!("bad NEFF size {size}")));
        }
        let start = match vnc {
            -1 => None,
            v if v >= 0 => Some(v as usize),
            v => return Err(err(NrtStatus::Invalid, format!("bad vnc {v}"))),
        };
        let count = if vnc_count > 0 { Some(vnc_count as usize) } else { None };
        // SAFETY: non-null; nrt.h: `neff_bytes` points to `size` readable bytes, which stay
        // valid for the call; size ≤ isize::MAX was checked.
        let bytes = unsafe { std::slice::from_raw_parts(neff_bytes.cast::<u8>(), size) };
        let m = how(bytes, start, count)?;
        let h = MODELS.insert(m);
        // SAFETY: checked non-null; nrt.h: `model` points to a writable nrt_model_t*.
        unsafe { put(model, h) };
        Ok(())
    })
}

/// This process's load: streamed from the caller's buffer (the inflated payload is never held
/// whole; the weights go to device memory in bounded pieces as they are inflated).
fn load_local(bytes: &[u8], start: Option<usize>, count: Option<usize>) -> Result<runtime::ModelHandle, RtError> {
    rt().load_reader(bytes, bytes.len() as u64, start, count)
}

/// `nrt_load`: load a NEFF on `vnc` (-1: the first free NCs); `vnc_count` is deprecated
/// (-1), a positive value is passed on as the NC count.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_load(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    model: *mut *mut nrt_model_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { load("nrt_load", neff_bytes, size, vnc, vnc_count, model, load_local) }
}

/// `nrt_load_collectives`: as `nrt_load`, in the global communicator `ctx_device_id` of
/// `ctx_device_count`. One worker (0 of 1): the NEFF's collectives run between the NCs it is
/// loaded on, inside this process. More workers (the `fabric` feature; docs/fabric.md): the
/// communicator is joined or checked, graph `i` is global rank `ctx_device_id × graphs + i`,
/// and replica groups spanning processes run over libfabric; without the feature NRT_INVALID.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_load_collectives(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    ctx_device_id: u32,
    ctx_device_count: u32,
    model: *mut *mut nrt_model_t,
) -> NRT_STATUS {
    if ctx_device_count == 1 && ctx_device_id == 0 {
        // SAFETY: forwarded from this function's own contract.
        return unsafe { load("nrt_load_collectives", neff_bytes, size, vnc, vnc_count, model, load_local) };
    }
    #[cfg(feature = "fabric")]
    {
        // SAFETY: forwarded from this function's own contract.
        unsafe { load_global(neff_bytes, size, vnc, vnc_count, ctx_device_id, ctx_device_count, model) }
    }
    #[cfg(not(feature = "fabric"))]
    entry("nrt_load_collectives", || {
        guard()?;
        Err(err(
            NrtStatus::Invalid,
            format!(
                "ctx_device_id {ctx_device_id} of {ctx_device_count}: this libnrt is built without \
                 the fabric feature; only a single-device context (0 of 1) is supported"
            ),
        ))
    })
}

/// # Safety
/// As [`nrt_load_collectives`].
#[cfg(feature = "fabric")]
unsafe fn load_global(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    id: u32,
    count: u32,
    model: *mut *mut nrt_model_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe {
        load("nrt_load_collectives", neff_bytes, size, vnc, vnc_count, model, |bytes, start, nc_count| {
            crate::global::global().load(bytes, start, nc_count, id, count)
        })
    }
}

/// `nrt_unload`: unload a model and free its handle.
#[no_mangle]
pub extern "C" fn nrt_unload(model: *mut nrt_model_t) -> NRT_STATUS {
    entry("nrt_unload", || {
        guard()?;
        let m = model_of(model)?;
        rt().unload(&m)?;
        MODELS.remove(model);
        Ok(())
    })
}

/// # Safety
/// `out` is NULL or a writable `uint32_t`.
unsafe fn model_ncs(func: &str, model: *const nrt_model_t, out: *mut u32) -> NRT_STATUS {
    entry(func, || {
        guard()?;
        let m = model_of(model)?;
        need(out, "vnc_count")?;
        // Logical NeuronCores (one vNC per LNC physical cores).
        let n = u32::try_from(m.vncs.len()).map_err(|_| err(NrtStatus::Failure, "NC count overflows uint32_t"))?;
        // SAFETY: checked non-null; nrt.h: points to a writable uint32_t.
        unsafe { put(out, n) };
        Ok(())
    })
}

/// `nrt_get_model_nc_count`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_nc_count(model: *const nrt_model_t, vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { model_ncs("nrt_get_model_nc_count", model, vnc_count) }
}

/// `nrt_get_model_vnc_count`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_vnc_count(model: *const nrt_model_t, vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { model_ncs("nrt_get_model_vnc_count", model, vnc_count) }
}

fn execute(func: &str, model: *mut nrt_model_t, ins: *const c_void, outs: *mut c_void, n: c_int) -> NRT_STATUS {
    entry(func, || {
        guard()?;
        let m = model_of(model)?;
        let (ins, outs) = (set_of(ins)?, set_of(outs)?);
        let (ins, outs) = (runtime_set(&ins), runtime_set(&outs));
        if n < 1 {
            return Err(err(NrtStatus::Invalid, format!("bad repeat_count {n}")));
        }
        let (s, _) = if n == 1 {
            rt().execute(&m, &ins, &outs).map(|(s, t)| (s, vec![t]))?
        } else {
            rt().execute_repeat(&m, &ins, &outs, n as u32)?
        };
        status_of(s, "execution")
    })
}

/// `nrt_execute`: run the model once (synchronously).
#[no_mangle]
pub extern "C" fn nrt_execute(
    model: *mut nrt_model_t,
    input_set: *const nrt_tensor_set_t,
    output_set: *mut nrt_tensor_set_t,
) -> NRT_STATUS {
    execute("nrt_execute", model, input_set, output_set, 1)
}

/// `nrt_execute_repeat`: `repeat_count` executions, stopping at the first failure.
#[no_mangle]
pub extern "C" fn nrt_execute_repeat(
    model: *mut nrt_model_t,
    input_set: *const nrt_tensor_set_t,
    output_set: *mut nrt_tensor_set_t,
    repeat_count: c_int,
) -> NRT_STATUS {
    execute("nrt_execute_repeat", model, input_set, output_set, repeat_count)
}
