//! Information: `nrt_get_version`, the NC counts (total / visible, also before `nrt_init`),
//! and a model's tensor info arrays (`nrt_get_model_tensor_info` /
//! `nrt_free_model_tensor_info`).

use std::collections::BTreeSet;

use super::*;

/// Live tensor info arrays (addresses made by `nrt_get_model_tensor_info`).
static INFOS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// `nrt_get_version`: fill up to `size` bytes of `ver`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_version(ver: *mut nrt_version_t, size: usize) -> NRT_STATUS {
    entry("nrt_get_version", || {
        need(ver, "ver")?;
        let mut v = nrt_version_t {
            rt_major: RT_VERSION.0,
            rt_minor: RT_VERSION.1,
            rt_patch: RT_VERSION.2,
            rt_maintenance: RT_VERSION.3,
            rt_detail: [0; RT_VERSION_DETAIL_LEN],
            git_hash: [0; GIT_HASH_LEN],
        };
        let detail = format!("neuron-vfio capi {} (libnrt {}.{} semantics)", env!("CARGO_PKG_VERSION"), 2, 31);
        copy_cstr(&mut v.rt_detail, &detail);
        copy_cstr(&mut v.git_hash, "unknown");
        let n = size.min(std::mem::size_of::<nrt_version_t>());
        // SAFETY: `ver` is non-null and, per nrt.h, points to at least `size` writable bytes;
        // we copy `n ≤ size` bytes from a local of at least `n` bytes; the regions are distinct.
        unsafe { std::ptr::copy_nonoverlapping((&v as *const nrt_version_t).cast::<u8>(), ver.cast::<u8>(), n) };
        Ok(())
    })
}

/// Logical NCs of the devices `nrt_init` opens (or has opened), and the logical NCs a
/// process would see (NEURON_RT_VISIBLE_CORES, else the first NEURON_RT_NUM_CORES).
fn vnc_counts() -> Result<(usize, usize), RtError> {
    if guard().is_ok() {
        return Ok((rt().logical_count(), rt().visible_logical().len()));
    }
    let cfg = RuntimeConfig::from_env()?;
    let (arch, physical) = crate::device::arch_and_count(&crate::device::from_env()?)?;
    let lnc = runtime::cores::resolve_lnc(arch, cfg.lnc)?;
    let total = physical / lnc;
    let visible = match (&cfg.visible_cores, cfg.num_cores) {
        (Some(v), _) => v.iter().filter(|&&c| c < total).count(),
        (None, Some(n)) => n.min(total),
        (None, None) => total,
    };
    Ok((total, visible))
}

/// # Safety
/// `out` is NULL or a writable `uint32_t`.
unsafe fn nc_count_out(func: &str, out: *mut u32, visible: bool) -> NRT_STATUS {
    entry(func, || {
        need(out, "vnc_count")?;
        let (total, shown) = vnc_counts()?;
        let n = if visible { shown } else { total };
        let n = u32::try_from(n).map_err(|_| err(NrtStatus::Failure, "NC count overflows uint32_t"))?;
        // SAFETY: checked non-null; nrt.h: points to a writable uint32_t.
        unsafe { put(out, n) };
        Ok(())
    })
}

/// `nrt_get_total_nc_count` (may be called before `nrt_init`).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_nc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { nc_count_out("nrt_get_total_nc_count", vnc_count, false) }
}

/// `nrt_get_total_vnc_count` (may be called before `nrt_init`).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_vnc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { nc_count_out("nrt_get_total_vnc_count", vnc_count, false) }
}

/// `nrt_get_visible_nc_count`: NCs after `NEURON_RT_VISIBLE_CORES`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_nc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { nc_count_out("nrt_get_visible_nc_count", vnc_count, true) }
}

/// `nrt_get_visible_vnc_count`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_vnc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded from this function's own contract.
    unsafe { nc_count_out("nrt_get_visible_vnc_count", vnc_count, true) }
}

/// Build a `nrt_tensor_info_array_t` (malloc'd, released by `nrt_free_model_tensor_info`).
fn tensor_info_array(
    infos: &[(&neff::TensorInfo, nrt_tensor_usage_t)],
) -> Result<*mut nrt_tensor_info_array_t, RtError> {
    let oom = || err(NrtStatus::Resource, "out of host memory for tensor info");
    let head = std::mem::offset_of!(nrt_tensor_info_array_t, tensor_array);
    let bytes = std::mem::size_of::<nrt_tensor_info_t>()
        .checked_mul(infos.len())
        .and_then(|b| b.checked_add(head))
        .ok_or_else(oom)?;
    // SAFETY: plain allocation; the result is checked for NULL. calloc returns memory aligned
    // for any fundamental type, which covers nrt_tensor_info_array_t (align 8).
    let arr = unsafe { libc::calloc(1, bytes) }.cast::<nrt_tensor_info_array_t>();
    if arr.is_null() {
        return Err(oom());
    }
    // SAFETY: `arr` is a fresh zeroed allocation of `head + n * size_of(info)` bytes: the
    // header and `infos.len()` entries are in bounds and aligned; all-zero bytes are a valid
    // nrt_tensor_info_t (null shape), so a partially filled array can be freed by
    // `free_info_array`.
    unsafe {
        (*arr).tensor_count = infos.len() as u64;
        let first = std::ptr::addr_of_mut!((*arr).tensor_array).cast::<nrt_tensor_info_t>();
        for (i, (t, usage)) in infos.iter().enumerate() {
            let e = &mut *first.add(i);
            copy_cstr(&mut e.name, &t.name);
            e.usage = *usage;
            e.size = t.size as usize;
            e.dtype = t.nrt_dtype as nrt_dtype_t;
            e.ndim = t.shape.len() as u32;
            if !t.shape.is_empty() {
                let shape = libc::calloc(t.shape.len(), std::mem::size_of::<u32>()).cast::<u32>();
                if shape.is_null() {
                    free_info_array(arr);
                    return Err(oom());
                }
                for (k, d) in t.shape.iter().enumerate() {
                    *shape.add(k) = u32::try_from(*d).unwrap_or(u32::MAX);
                }
                e.shape = shape;
            }
        }
    }
    Ok(arr)
}

/// Free an array made by [`tensor_info_array`].
///
/// # Safety
/// `arr` came from `tensor_info_array` and has not been freed.
unsafe fn free_info_array(arr: *mut nrt_tensor_info_array_t) {
    // SAFETY: by this function's contract the header and `tensor_count` entries are ours;
    // each non-null shape is a calloc'd block owned by its entry.
    unsafe {
        let first = std::ptr::addr_of_mut!((*arr).tensor_array).cast::<nrt_tensor_info_t>();
        for i in 0..(*arr).tensor_count as usize {
            let e = &mut *first.add(i);
            if !e.shape.is_null() {
                libc::free(e.shape.cast());
                e.shape = std::ptr::null_mut();
            }
        }
        libc::free(arr.cast());
    }
}

/// `nrt_get_model_tensor_info`: inputs (usage INPUT) then outputs (usage OUTPUT).
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_tensor_info(
    model: *mut nrt_model_t,
    tensor_info: *mut *mut nrt_tensor_info_array_t,
) -> NRT_STATUS {
    entry("nrt_get_model_tensor_info", || {
        guard()?;
        let m = model_of(model)?;
        need(tensor_info, "tensor_info")?;
        let infos: Vec<_> = m
            .inputs
            .iter()
            .map(|t| (t, NRT_TENSOR_USAGE_INPUT))
            .chain(m.outputs.iter().map(|t| (t, NRT_TENSOR_USAGE_OUTPUT)))
            .collect();
        let arr = tensor_info_array(&infos)?;
        lock(&INFOS).insert(arr as usize);
        // SAFETY: checked non-null; nrt.h: points to a writable nrt_tensor_info_array_t*.
        unsafe { put(tensor_info, arr) };
        Ok(())
    })
}

/// `nrt_free_model_tensor_info`.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_free_model_tensor_info(tensor_info: *mut nrt_tensor_info_array_t) -> NRT_STATUS {
    entry("nrt_free_model_tensor_info", || {
        need(tensor_info, "tensor_info")?;
        if !lock(&INFOS).remove(&(tensor_info as usize)) {
            return Err(err(NrtStatus::InvalidHandle, format!("{tensor_info:p} is not a tensor info array")));
        }
        // SAFETY: the address was registered by nrt_get_model_tensor_info and is removed from
        // the registry here, so it is a live array freed exactly once.
        unsafe { free_info_array(tensor_info) };
        Ok(())
    })
}
