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
//! What every entry point shares (C types, handle registries, the state guard, error
//! logging, panic containment) is the core, [`crate::base`].

pub(crate) use std::ffi::{c_char, c_int, c_void};
pub(crate) use std::sync::{Arc, Mutex};

pub(crate) use neff::NrtStatus;
pub(crate) use runtime::{RtError, RuntimeConfig};

pub(crate) use crate::base::*;
// The C types and handle values keep their public paths (`nrt::ffi::nrt_tensor_t`, …).
pub use crate::base::types::*;
pub use crate::base::{CSet, CTensor};

pub mod info;
pub mod lifecycle;
pub mod model;
pub mod tensor;
pub mod tensor_set;

pub use info::*;
pub use lifecycle::*;
pub use model::*;
pub use tensor::*;
pub use tensor_set::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::mem::size_of;

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
            // libnrt processes are seen by `neuron-vfio monitor`/`top`: the library installs the
            // monitoring observers.
            if runtime::env::counters_enabled() {
                assert!(rt().counters_path().is_some_and(|p| p.exists()), "the counters segment is published");
            }
            if runtime::env::debug_endpoint_enabled() {
                let sock = rt().observer_path(runtime::observe::DEBUG_ENDPOINT);
                assert!(sock.is_some_and(|p| p.exists()), "the debug endpoint serves");
            }
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
            assert_eq!(rt().counters_path(), None, "the session's observers end at nrt_close");
            assert_eq!(nrt_unload(m), NRT_CLOSED);
            assert_eq!(nrt_tensor_read(t, back.as_mut_ptr().cast(), 0, 16), NRT_CLOSED);
            // nrt_close released the tensor: its handle is invalid, freeing it is a no-op.
            assert!(TENSORS.is_empty(), "nrt_close frees tensor handles");
            nrt_tensor_free(&mut t);
            assert_eq!(load(&mut m), NRT_CLOSED);
        }
    }
}
