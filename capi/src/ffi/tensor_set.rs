//! Tensor sets: `nrt_allocate_tensor_set`, `nrt_destroy_tensor_set`,
//! `nrt_add_tensor_to_tensor_set`, `nrt_get_tensor_from_tensor_set`.

use super::*;

/// `nrt_allocate_tensor_set`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_allocate_tensor_set(result: *mut *mut nrt_tensor_set_t) -> NRT_STATUS {
    entry("nrt_allocate_tensor_set", || {
        need(result, "result")?;
        let h = SETS.insert(Arc::new(Mutex::new(CSet::default())));
        // SAFETY: checked non-null; nrt.h: points to a writable nrt_tensor_set_t*.
        unsafe { put(result, h) };
        Ok(())
    })
}

/// `nrt_destroy_tensor_set`: free the set (not its tensors) and NULL the caller's pointer.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_destroy_tensor_set(tensor_set: *mut *mut nrt_tensor_set_t) {
    entry_value((), || {
        if tensor_set.is_null() {
            return;
        }
        // SAFETY: non-null; nrt.h: points to a readable and writable nrt_tensor_set_t*.
        let s = unsafe { tensor_set.read() };
        if SETS.remove(s).is_some() {
            // SAFETY: as above.
            unsafe { put(tensor_set, std::ptr::null_mut()) };
        }
    })
}

/// `nrt_add_tensor_to_tensor_set`: bind `tensor` under `tensor_name` (replacing).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_add_tensor_to_tensor_set(
    tensor_set: *mut nrt_tensor_set_t,
    tensor_name: *const c_char,
    tensor: *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_add_tensor_to_tensor_set", || {
        need(tensor_name, "tensor_name")?;
        let s = set_of(tensor_set)?;
        let t = tensor_of(tensor)?;
        // SAFETY: checked non-null; nrt.h: a NUL-terminated string.
        let name = unsafe { opt_cstr(tensor_name) }.unwrap_or_default();
        let mut g = lock(&s);
        g.entries.retain(|(n, _, _)| *n != name);
        g.entries.push((name, tensor as usize, t));
        Ok(())
    })
}

/// `nrt_get_tensor_from_tensor_set`: the tensor bound to `tensor_name` (NRT_INVALID if none).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_tensor_from_tensor_set(
    tensor_set: *mut nrt_tensor_set_t,
    tensor_name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_get_tensor_from_tensor_set", || {
        need(tensor_name, "tensor_name")?;
        need(tensor, "tensor")?;
        let s = set_of(tensor_set)?;
        // SAFETY: checked non-null; nrt.h: a NUL-terminated string.
        let name = unsafe { opt_cstr(tensor_name) }.unwrap_or_default();
        let h = lock(&s)
            .entries
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, h, _)| *h)
            .ok_or_else(|| err(NrtStatus::Failure, format!("no tensor `{name}` in the set")))?;
        // SAFETY: checked non-null; nrt.h: points to a writable nrt_tensor_t*.
        unsafe { put(tensor, h as *mut nrt_tensor_t) };
        Ok(())
    })
}
