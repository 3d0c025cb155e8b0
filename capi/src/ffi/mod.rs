//! The exported `nrt_*` functions and their C types.
//!
//! | module | functions |
//! |---|---|
//! | [`lifecycle`] | `nrt_init`, `nrt_close` |
//! | [`info`] | `nrt_get_version`, `nrt_get_{total,visible}_{nc,vnc}_count`, `nrt_get_model_tensor_info`, `nrt_free_model_tensor_info` |
//! | [`model`] | `nrt_load`, `nrt_load_collectives`, `nrt_unload`, `nrt_get_model_{nc,vnc}_count`, `nrt_execute`, `nrt_execute_repeat` |
//! | [`tensor`] | `nrt_tensor_allocate`, `nrt_tensor_free`, `nrt_tensor_read`, `nrt_tensor_write`, `nrt_tensor_get_size` |
//! | [`tensor_set`] | `nrt_allocate_tensor_set`, `nrt_destroy_tensor_set`, `nrt_add_tensor_to_tensor_set`, `nrt_get_tensor_from_tensor_set` |
//!
//! This module holds the C types and what every entry point shares: the handle registries,
//! the state guard (the runtime's), error logging and panic containment.

pub(crate) use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub(crate) use neff::NrtStatus;
pub(crate) use runtime::{ModelHandle, RtError, Runtime, RuntimeConfig, Tensor, TensorSet};

pub(crate) use crate::handles::Registry;

pub mod info;
pub mod lifecycle;
pub mod model;
pub mod tensor;
pub mod tensor_set;

pub(crate) use info::copy_cstr;
pub use info::*;
pub use lifecycle::*;
pub use model::*;
pub use tensor::*;
pub use tensor_set::*;

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

/// Serializes `nrt_init` and `nrt_close` (the state itself is the runtime's).
static LIFECYCLE: Mutex<()> = Mutex::new(());

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

/// The NRT_INIT_STATE guard of libnrt's entry points: the runtime's own
/// ([`Runtime::guard`]): before `nrt_init` and in a forked child NRT_UNINITIALIZED (13),
/// after `nrt_close` NRT_CLOSED (14).
pub(crate) fn guard() -> Result<(), RtError> {
    rt().guard()
}

pub(crate) fn log_error(func: &str, e: &RtError) {
    // NEURON_RT_LOG_LEVEL has no "off" (the runtime rejects unknown levels), so silencing
    // the library's error lines is a knob of its own.
    if std::env::var("NEURON_VFIO_NRT_QUIET").is_ok_and(|v| v == "1") {
        return;
    }
    let _ = writeln!(std::io::stderr(), "nrt: {func}: {}: {}", e.status.name(), e.kind);
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
pub(crate) fn total_ncs() -> Result<usize, RtError> {
    if guard().is_ok() {
        return Ok(rt().nc_count());
    }
    crate::device::nc_count(&crate::device::from_env()?)
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
            // nrt_close released the tensor: its handle is invalid, freeing it is a no-op.
            assert!(TENSORS.is_empty(), "nrt_close frees tensor handles");
            nrt_tensor_free(&mut t);
            assert_eq!(load(&mut m), NRT_CLOSED);
        }
    }
}
