//! The exported `nrt_*` functions and their C types.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use neff::NrtStatus;
use runtime::{ModelHandle, RtError, Runtime, RuntimeConfig, Tensor, TensorSet};

use crate::handles::Registry;

// ------------------------------------------------------------------ C types

/// `NRT_STATUS` (a C enum: `int`-sized).
pub type NRT_STATUS = c_int;

pub const NRT_SUCCESS: NRT_STATUS = 0;
pub const NRT_FAILURE: NRT_STATUS = 1;
pub const NRT_INVALID: NRT_STATUS = 2;
pub const NRT_INVALID_HANDLE: NRT_STATUS = 3;
pub const NRT_UNINITIALIZED: NRT_STATUS = 13;
pub const NRT_CLOSED: NRT_STATUS = 14;

/// `nrt_tensor_placement_t`.
pub type nrt_tensor_placement_t = c_int;
pub const NRT_TENSOR_PLACEMENT_DEVICE: nrt_tensor_placement_t = 0;
pub const NRT_TENSOR_PLACEMENT_HOST: nrt_tensor_placement_t = 1;
pub const NRT_TENSOR_PLACEMENT_VIRTUAL: nrt_tensor_placement_t = 2;

/// `nrt_framework_type_t` (accepted and ignored, as the framework only tags telemetry).
pub type nrt_framework_type_t = c_int;

/// `nrt_tensor_usage_t`.
pub type nrt_tensor_usage_t = c_int;
pub const NRT_TENSOR_USAGE_INPUT: nrt_tensor_usage_t = 0;
pub const NRT_TENSOR_USAGE_OUTPUT: nrt_tensor_usage_t = 1;

/// `nrt_dtype_t`.
pub type nrt_dtype_t = c_int;

/// `NRT_TENSOR_NAME_MAX`.
pub const NRT_TENSOR_NAME_MAX: usize = 256;

/// `nrt_model_t` (opaque).
#[repr(C)]
pub struct nrt_model_t {
    _opaque: [u8; 0],
}

/// `nrt_tensor_t` (opaque).
#[repr(C)]
pub struct nrt_tensor_t {
    _opaque: [u8; 0],
}

/// `nrt_tensor_set_t` (`void` in nrt.h).
pub type nrt_tensor_set_t = c_void;

/// `nrt_tensor_info_t`.
#[repr(C)]
pub struct nrt_tensor_info_t {
    pub name: [c_char; NRT_TENSOR_NAME_MAX],
    pub usage: nrt_tensor_usage_t,
    pub size: usize,
    pub dtype: nrt_dtype_t,
    pub shape: *mut u32,
    pub ndim: u32,
}

/// `nrt_tensor_info_array_t`: a count followed by a flexible array of infos.
#[repr(C)]
pub struct nrt_tensor_info_array_t {
    pub tensor_count: u64,
    pub tensor_array: [nrt_tensor_info_t; 0],
}

/// `RT_VERSION_DETAIL_LEN`, `GIT_HASH_LEN`.
pub const RT_VERSION_DETAIL_LEN: usize = 128;
pub const GIT_HASH_LEN: usize = 64;

/// `nrt_version_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_version_t {
    pub rt_major: u64,
    pub rt_minor: u64,
    pub rt_patch: u64,
    pub rt_maintenance: u64,
    pub rt_detail: [c_char; RT_VERSION_DETAIL_LEN],
    pub git_hash: [c_char; GIT_HASH_LEN],
}

/// The libnrt release whose host semantics the runtime implements (runtime/src/lib.rs).
pub const RT_VERSION: (u64, u64, u64, u64) = (2, 31, 0, 0);

// ------------------------------------------------------------------ global state

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Start,
    Init { pid: u32 },
    Closed,
}

static LIFE: Mutex<Life> = Mutex::new(Life::Start);

/// A tensor handle's value.
pub struct CTensor {
    pub tensor: Arc<Tensor>,
    pub placement: nrt_tensor_placement_t,
    /// The storage was replaced by `nrt_tensor_attach_buffer`.
    pub attached: bool,
}

/// A tensor set: names → tensor handles (and the tensors they held when added).
#[derive(Default)]
pub struct CSet {
    pub(crate) entries: Vec<(String, usize, Arc<CTensor>)>,
}

pub(crate) static MODELS: Registry<ModelHandle> = Registry::new();
pub(crate) static TENSORS: Registry<Arc<CTensor>> = Registry::new();
pub(crate) static SETS: Registry<Arc<Mutex<CSet>>> = Registry::new();
static INFOS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(Runtime::new)
}

pub(crate) fn err(status: NrtStatus, msg: impl Into<String>) -> RtError {
    RtError::new(status, msg)
}

/// The NRT_INIT_STATE guard of libnrt's entry points.
pub(crate) fn guard() -> Result<(), RtError> {
    match *lock(&LIFE) {
        Life::Init { pid } if pid == std::process::id() => Ok(()),
        Life::Init { .. } => Err(err(NrtStatus::Uninitialized, "the runtime was initialised by the parent process")),
        Life::Start => Err(err(NrtStatus::Uninitialized, "nrt_init has not been called")),
        Life::Closed => Err(err(NrtStatus::Closed, "nrt_close has been called")),
    }
}

pub(crate) fn log_error(func: &str, e: &RtError) {
    // NEURON_RT_LOG_LEVEL has no "off" (the runtime rejects unknown levels), so silencing
    // the library's error lines is a knob of its own.
    if std::env::var("NEURON_VFIO_NRT_QUIET").is_ok_and(|v| v == "1") {
        return;
    }
    let _ = writeln!(std::io::stderr(), "nrt: {func}: {}: {}", e.status.name(), e.message);
}

/// Run an entry point: its error is logged and returned as its status; a panic is
/// NRT_FAILURE.
pub(crate) fn entry(func: &str, f: impl FnOnce() -> Result<(), RtError>) -> NRT_STATUS {
    let t0 = runtime::profile::active().then(runtime::profile::now_ns);
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(err(NrtStatus::Failure, "internal panic")));
    if let Some(t0) = t0 {
        crate::profile::api_event(func, t0, r.as_ref().err().map_or(0, |e| e.status.code()));
    }
    match r {
        Ok(()) => NRT_SUCCESS,
        Err(e) => {
            log_error(func, &e);
            e.status.code() as NRT_STATUS
        }
    }
}

/// Run an entry point without a status (void or value returns).
pub(crate) fn entry_value<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

pub(crate) fn status_of(s: NrtStatus, what: &str) -> Result<(), RtError> {
    if s == NrtStatus::Success {
        Ok(())
    } else {
        Err(err(s, format!("{what} completed with {}", s.name())))
    }
}

/// A required non-null argument.
pub(crate) fn need<T>(p: *const T, what: &str) -> Result<(), RtError> {
    if p.is_null() {
        Err(err(NrtStatus::Invalid, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// An optional C string (NULL → None).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn opt_cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and, by this function's contract, NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Store `v` through an out-pointer the caller checked non-null.
///
/// # Safety
/// `out` is non-null, aligned and writable.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) {
    // SAFETY: by this function's contract.
    unsafe { out.write(v) }
}

pub(crate) fn model_of(m: *const nrt_model_t) -> Result<ModelHandle, RtError> {
    need(m, "model")?;
    MODELS.get(m).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{m:p} is not a loaded model")))
}

pub(crate) fn tensor_of(t: *const nrt_tensor_t) -> Result<Arc<CTensor>, RtError> {
    need(t, "tensor")?;
    TENSORS.get(t).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{t:p} is not a tensor")))
}

pub(crate) fn set_of(s: *const nrt_tensor_set_t) -> Result<Arc<Mutex<CSet>>, RtError> {
    need(s, "tensor set")?;
    SETS.get(s).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{s:p} is not a tensor set")))
}

pub(crate) fn runtime_set(s: &Mutex<CSet>) -> TensorSet {
    let mut ts = TensorSet::new();
    for (name, h, t) in &lock(s).entries {
        let cur = TENSORS.get(*h as *const nrt_tensor_t).filter(|c| Arc::ptr_eq(&c.tensor, &t.tensor) || c.attached);
        ts.add(name, cur.map_or_else(|| t.tensor.clone(), |c| c.tensor.clone()));
    }
    ts
}

/// NCs of the device `nrt_init` opens (or has opened).
fn total_ncs() -> Result<usize, RtError> {
    if guard().is_ok() {
        return Ok(rt().nc_count());
    }
    crate::device::nc_count(&crate::device::from_env()?)
}

// ------------------------------------------------------------------ lifecycle

/// `nrt_init`: open the device named by `NEURON_VFIO_DEVICE` and initialise the runtime.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_init(
    framework: nrt_framework_type_t,
    fw_version: *const c_char,
    fal_version: *const c_char,
) -> NRT_STATUS {
    entry("nrt_init", || {
        // SAFETY: nrt.h: the version strings are NULL or NUL-terminated.
        let (fw, fal) = unsafe { (opt_cstr(fw_version), opt_cstr(fal_version)) };
        tracing::debug!(framework, ?fw, ?fal, "nrt_init");
        let mut life = lock(&LIFE);
        match *life {
            Life::Init { pid } if pid == std::process::id() => {
                return Err(err(NrtStatus::Failure, "the runtime is already initialised"));
            }
            Life::Init { .. } => {
                return Err(err(NrtStatus::Uninitialized, "the runtime was initialised by the parent process"));
            }
            Life::Start | Life::Closed => {}
        }
        let cfg = RuntimeConfig::from_env()?;
        let platforms = crate::device::platforms(&crate::device::from_env()?)?;
        rt().init(platforms, cfg, hal::DeviceOptions::default())?;
        *life = Life::Init { pid: std::process::id() };
        Ok(())
    })
}

/// `nrt_close`: unload every model and release the devices.
#[no_mangle]
pub extern "C" fn nrt_close() {
    entry_value((), || {
        let mut life = lock(&LIFE);
        if !matches!(*life, Life::Init { pid } if pid == std::process::id()) {
            return;
        }
        crate::async_api::close();
        if let Err(e) = rt().close() {
            log_error("nrt_close", &e);
        }
        MODELS.clear();
        *life = Life::Closed;
    })
}

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

pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// # Safety
/// `out` is NULL or a writable `uint32_t`.
unsafe fn nc_count_out(func: &str, out: *mut u32, visible: bool) -> NRT_STATUS {
    entry(func, || {
        need(out, "vnc_count")?;
        let total = total_ncs()?;
        let n = if visible {
            match RuntimeConfig::from_env()?.visible_cores {
                Some(v) => v.iter().filter(|&&c| c < total).count(),
                None => total,
            }
        } else {
            total
        };
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

// ------------------------------------------------------------------ models

/// # Safety
/// `neff_bytes` is NULL or `size` readable bytes; `model` is NULL or a writable pointer.
unsafe fn load(
    func: &str,
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    model: *mut *mut nrt_model_t,
    check: impl FnOnce() -> Result<(), RtError>,
) -> NRT_STATUS {
    entry(func, || {
        guard()?;
        need(model, "model")?;
        need(neff_bytes, "neff_bytes")?;
        check()?;
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
        let m = rt().load(bytes, start, count)?;
        let h = MODELS.insert(m);
        // SAFETY: checked non-null; nrt.h: `model` points to a writable nrt_model_t*.
        unsafe { put(model, h) };
        Ok(())
    })
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
    unsafe { load("nrt_load", neff_bytes, size, vnc, vnc_count, model, || Ok(())) }
}

/// `nrt_load_collectives`: as `nrt_load` for a single-device context. The NEFF's collectives
/// run between the NCs it is loaded on, inside this process; multi-process communicators
/// (`ctx_device_count` > 1) are not supported (NRT_INVALID).
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
    // SAFETY: forwarded from this function's own contract.
    unsafe {
        load("nrt_load_collectives", neff_bytes, size, vnc, vnc_count, model, || {
            if ctx_device_count != 1 || ctx_device_id != 0 {
                return Err(err(
                NrtStatus::Invalid,
                format!(
                    "ctx_device_id {ctx_device_id} of {ctx_device_count}: only a single-device context (0 of 1) is supported"
                ),
            ));
            }
            Ok(())
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
        let n = u32::try_from(m.ncs.len()).map_err(|_| err(NrtStatus::Failure, "NC count overflows uint32_t"))?;
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

// ------------------------------------------------------------------ execute

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

// ------------------------------------------------------------------ tensors

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

// ------------------------------------------------------------------ tensor sets

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn c_layouts_match_nrt_h_on_lp64() {
        // Sizes/offsets a C compiler gives nrt.h's structs on LP64 (checked again from C by
        // tests/c/allreduce.c).
        assert_eq!(size_of::<nrt_tensor_info_t>(), 296);
        assert_eq!(offset_of!(nrt_tensor_info_t, usage), 256);
        assert_eq!(offset_of!(nrt_tensor_info_t, size), 264);
        assert_eq!(offset_of!(nrt_tensor_info_t, dtype), 272);
        assert_eq!(offset_of!(nrt_tensor_info_t, shape), 280);
        assert_eq!(offset_of!(nrt_tensor_info_t, ndim), 288);
        assert_eq!(offset_of!(nrt_tensor_info_array_t, tensor_array), 8);
        assert_eq!(align_of::<nrt_tensor_info_array_t>(), 8);
        assert_eq!(size_of::<nrt_version_t>(), 4 * 8 + RT_VERSION_DETAIL_LEN + GIT_HASH_LEN);
    }

    #[test]
    fn status_codes_are_libnrt_codes() {
        for (c, s) in [
            (NRT_SUCCESS, NrtStatus::Success),
            (NRT_FAILURE, NrtStatus::Failure),
            (NRT_INVALID, NrtStatus::Invalid),
            (NRT_INVALID_HANDLE, NrtStatus::InvalidHandle),
            (NRT_UNINITIALIZED, NrtStatus::Uninitialized),
            (NRT_CLOSED, NrtStatus::Closed),
        ] {
            assert_eq!(c as u32, s.code(), "{}", s.name());
        }
    }

    #[test]
    fn entry_maps_errors_and_panics() {
        assert_eq!(entry("t", || Ok(())), NRT_SUCCESS);
        assert_eq!(entry("t", || Err(err(NrtStatus::InvalidHandle, "x"))), NRT_INVALID_HANDLE);
        assert_eq!(entry("t", || panic!("boom")), NRT_FAILURE);
        assert_eq!(entry_value(7usize, || panic!("boom")), 7);
    }

    #[test]
    fn null_and_foreign_handles_never_crash() {
        // SAFETY: every pointer passed is NULL, a live local of the right type, or a bogus
        // handle value that the library only looks up in its registry.
        unsafe {
            let bogus = 0x10 as *mut nrt_tensor_t;
            assert_eq!(nrt_tensor_get_size(std::ptr::null()), 0);
            assert_eq!(nrt_tensor_get_size(bogus), 0);
            nrt_tensor_free(std::ptr::null_mut());
            let mut t = bogus;
            nrt_tensor_free(&mut t);
            assert_eq!(t, bogus, "a foreign pointer is left alone");
            nrt_destroy_tensor_set(std::ptr::null_mut());
            assert_eq!(nrt_allocate_tensor_set(std::ptr::null_mut()), NRT_INVALID);
            assert_eq!(nrt_get_version(std::ptr::null_mut(), 0), NRT_INVALID);
            assert_eq!(nrt_free_model_tensor_info(std::ptr::null_mut()), NRT_INVALID);
            assert_eq!(
                nrt_free_model_tensor_info(std::ptr::dangling_mut::<nrt_tensor_info_array_t>()),
                NRT_INVALID_HANDLE
            );
            assert_eq!(nrt_get_total_nc_count(std::ptr::null_mut()), NRT_INVALID);
        }
    }

    #[test]
    fn tensor_sets_hold_handles() {
        // SAFETY: every pointer passed is NULL, a live local of the right type, or a bogus
        // handle value that the library only looks up in its registry.
        unsafe {
            let mut s: *mut nrt_tensor_set_t = std::ptr::null_mut();
            assert_eq!(nrt_allocate_tensor_set(&mut s), NRT_SUCCESS);
            assert!(!s.is_null());
            let name = c"input";
            let bogus = 0x20 as *mut nrt_tensor_t;
            assert_eq!(nrt_add_tensor_to_tensor_set(s, name.as_ptr(), bogus), NRT_INVALID_HANDLE);
            assert_eq!(nrt_add_tensor_to_tensor_set(s, name.as_ptr(), std::ptr::null_mut()), NRT_INVALID);
            assert_eq!(nrt_add_tensor_to_tensor_set(s, std::ptr::null(), bogus), NRT_INVALID);
            let mut out: *mut nrt_tensor_t = std::ptr::null_mut();
            assert_eq!(nrt_get_tensor_from_tensor_set(s, name.as_ptr(), &mut out), NRT_FAILURE);
            assert_eq!(nrt_get_tensor_from_tensor_set(bogus.cast(), name.as_ptr(), &mut out), NRT_INVALID_HANDLE);
            let mut s2 = s;
            nrt_destroy_tensor_set(&mut s2);
            assert!(s2.is_null());
            assert_eq!(nrt_get_tensor_from_tensor_set(s, name.as_ptr(), &mut out), NRT_INVALID_HANDLE, "stale set");
        }
    }

    #[test]
    fn version_respects_size() {
        // SAFETY: every pointer passed is NULL, a live local of the right type, or a bogus
        // handle value that the library only looks up in its registry.
        unsafe {
            let mut v = nrt_version_t {
                rt_major: 99,
                rt_minor: 99,
                rt_patch: 99,
                rt_maintenance: 99,
                rt_detail: [1; RT_VERSION_DETAIL_LEN],
                git_hash: [1; GIT_HASH_LEN],
            };
            assert_eq!(nrt_get_version(&mut v, 8), NRT_SUCCESS);
            assert_eq!((v.rt_major, v.rt_minor), (2, 99), "only 8 bytes written");
            assert_eq!(nrt_get_version(&mut v, size_of::<nrt_version_t>()), NRT_SUCCESS);
            assert_eq!((v.rt_major, v.rt_minor), (RT_VERSION.0, RT_VERSION.1));
            // copy_cstr NUL-terminated the field (the enclosing SAFETY covers this read).
            let d = CStr::from_ptr(v.rt_detail.as_ptr());
            assert!(d.to_string_lossy().starts_with("neuron-vfio capi"));
        }
    }

    /// The process-global lifecycle on the simulator (one test: the state is global).
    #[test]
    fn lifecycle_on_the_simulator() {
        // SAFETY: every pointer passed is NULL, a live local of the right type, or a bogus
        // handle value that the library only looks up in its registry.
        unsafe {
            // Only this test reads the device variable.
            std::env::set_var(crate::device::DEVICE_VAR, "sim");
            let neff = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/allreduce_1nc.neff")).unwrap();
            let mut m: *mut nrt_model_t = std::ptr::null_mut();
            let load = |m: &mut *mut nrt_model_t| nrt_load(neff.as_ptr().cast(), neff.len(), -1, -1, m);
            assert_eq!(load(&mut m), NRT_UNINITIALIZED);
            let mut n = 0u32;
            assert_eq!(nrt_get_total_nc_count(&mut n), NRT_SUCCESS, "callable before nrt_init");
            assert!(n >= 1);
            assert_eq!(nrt_init(1, std::ptr::null(), std::ptr::null()), NRT_SUCCESS);
            assert_eq!(nrt_init(1, std::ptr::null(), std::ptr::null()), NRT_FAILURE, "double init");
            assert_eq!(load(&mut m), NRT_SUCCESS);
            assert_eq!(MODELS.len(), 1);
            let mut k = 0u32;
            assert_eq!(nrt_get_model_nc_count(m, &mut k), NRT_SUCCESS);
            assert_eq!(k, 1);
            assert_eq!(nrt_unload(std::ptr::null_mut()), NRT_INVALID);
            assert_eq!(nrt_unload(0x40 as *mut nrt_model_t), NRT_INVALID_HANDLE);
            let mut t: *mut nrt_tensor_t = std::ptr::null_mut();
            assert_eq!(nrt_tensor_allocate(7, 0, 128, std::ptr::null(), &mut t), NRT_INVALID, "bad placement");
            assert_eq!(
                nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, -1, 128, std::ptr::null(), &mut t),
                NRT_INVALID
            );
            assert_eq!(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 128, std::ptr::null(), &mut t), NRT_SUCCESS);
            assert_eq!(nrt_tensor_get_size(t), 128);
            let buf = [7u8; 16];
            assert_eq!(nrt_tensor_write(t, buf.as_ptr().cast(), 120, 16), NRT_INVALID, "out of range");
            assert_eq!(nrt_tensor_write(t, std::ptr::null(), 0, 16), NRT_INVALID, "null buffer");
            assert_eq!(nrt_tensor_write(t, buf.as_ptr().cast(), 112, 16), NRT_SUCCESS);
            let mut back = [0u8; 16];
            assert_eq!(nrt_tensor_read(t, back.as_mut_ptr().cast(), 112, 16), NRT_SUCCESS);
            assert_eq!(back, buf);
            assert_eq!(nrt_unload(m), NRT_SUCCESS);
            assert_eq!(nrt_unload(m), NRT_INVALID_HANDLE, "stale model");
            assert_eq!(load(&mut m), NRT_SUCCESS);
            nrt_close();
            assert!(MODELS.is_empty(), "nrt_close frees model handles");
            assert_eq!(nrt_unload(m), NRT_CLOSED);
            assert_eq!(nrt_tensor_read(t, back.as_mut_ptr().cast(), 0, 16), NRT_CLOSED);
            nrt_tensor_free(&mut t);
            assert!(t.is_null());
            assert_eq!(load(&mut m), NRT_CLOSED);
        }
    }
}
