//! Tensors: `nrt_tensor_allocate`, `nrt_tensor_free`, `nrt_tensor_read`, `nrt_tensor_write`,
//! `nrt_tensor_get_size`.

use super::*;

/// `nrt_tensor_allocate`: DEVICE → HBM of `vnc`'s device; HOST and VIRTUAL → host DMA
/// memory of `vnc`'s device (vnc -1: NC 0).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate(
    tensor_placement: nrt_tensor_placement_t,
    vnc: c_int,
    size: usize,
    name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_allocate", || {
        guard()?;
        need(tensor, "tensor")?;
        let on_device = match tensor_placement {
            NRT_TENSOR_PLACEMENT_DEVICE => true,
            NRT_TENSOR_PLACEMENT_HOST | NRT_TENSOR_PLACEMENT_VIRTUAL => false,
            p => return Err(err(NrtStatus::Invalid, format!("bad tensor placement {p}"))),
        };
        let nc = match vnc {
            -1 if !on_device => 0,
            v if v >= 0 => v as usize,
            v => return Err(err(NrtStatus::Invalid, format!("bad vnc {v} for a device tensor"))),
        };
        // SAFETY: nrt.h: `name` is NULL or a NUL-terminated string.
        let name = unsafe { opt_cstr(name) }.unwrap_or_default();
        let t = rt().alloc_tensor(&name, size as u64, on_device, nc)?;
        let h = TENSORS.insert(Arc::new(CTensor { tensor: t, placement: tensor_placement, attached: false }));
        // SAFETY: checked non-null; nrt.h: points to a writable nrt_tensor_t*.
        unsafe { put(tensor, h) };
        Ok(())
    })
}

/// `nrt_tensor_free`: free the tensor and NULL the caller's pointer (NULL is a no-op).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_free(tensor: *mut *mut nrt_tensor_t) {
    entry_value((), || {
        if tensor.is_null() {
            return;
        }
        // SAFETY: non-null; nrt.h: `tensor` points to a readable and writable nrt_tensor_t*.
        let t = unsafe { tensor.read() };
        if TENSORS.remove(t).is_some() {
            // SAFETY: as above.
            unsafe { put(tensor, std::ptr::null_mut()) };
        }
    })
}

fn io_range(t: &CTensor, offset: usize, size: usize) -> Result<(), RtError> {
    if size > isize::MAX as usize || offset.checked_add(size).is_none_or(|e| e as u64 > t.tensor.size) {
        return Err(err(
            NrtStatus::Invalid,
            format!("{size} bytes at {offset} outside tensor {} ({} bytes)", t.tensor.name, t.tensor.size),
        ));
    }
    Ok(())
}

/// `nrt_tensor_read`: `size` bytes at `offset` into `buf`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read(
    tensor: *const nrt_tensor_t,
    buf: *mut c_void,
    offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_read", || {
        guard()?;
        let t = tensor_of(tensor)?;
        io_range(&t, offset, size)?;
        if size == 0 {
            return Ok(());
        }
        need(buf, "buf")?;
        // SAFETY: non-null; nrt.h: `buf` has `size` writable bytes not aliased for the call;
        // size ≤ isize::MAX was checked.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
        t.tensor.read(offset as u64, out)
    })
}

/// `nrt_tensor_write`: `size` bytes from `buf` at `offset`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write(
    tensor: *mut nrt_tensor_t,
    buf: *const c_void,
    offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_write", || {
        guard()?;
        let t = tensor_of(tensor)?;
        io_range(&t, offset, size)?;
        if size == 0 {
            return Ok(());
        }
        need(buf, "buf")?;
        // SAFETY: non-null; nrt.h: `buf` has `size` readable bytes valid for the call;
        // size ≤ isize::MAX was checked.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
        t.tensor.write(offset as u64, data)
    })
}

/// `nrt_tensor_get_size` (0 for an invalid tensor).
#[no_mangle]
pub extern "C" fn nrt_tensor_get_size(tensor: *const nrt_tensor_t) -> usize {
    entry_value(0, || tensor_of(tensor).map(|t| t.tensor.size as usize).unwrap_or(0))
}
