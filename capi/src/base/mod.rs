//! The core of the C API: what every entry point shares, and nothing that names an API area.
//!
//! | module | holds |
//! |---|---|
//! | [`types`] | nrt.h's C types: `NRT_STATUS` codes, placements, opaque handles, tensor info, version |
//! | `entry` | the runtime handle `rt()`, the NRT_INIT_STATE `guard`, `entry`/`entry_value` (`catch_unwind`, error logging, the profile's API-call event), `lock` (`platform::sync::lock`) |
//! | `args` | argument and out-parameter helpers: `need`, `opt_cstr`, `put`, `copy_cstr`, malloc'd string arrays |
//! | [`handles`] | [`handles::Registry`]: opaque handles validated, never dereferenced |
//! | `registry` | the model, tensor and tensor-set registries and their lookups |
//! | `shutdown` | hooks areas register for `nrt_close` |
//!
//! API areas (`ffi`, `async_api`, `profile`, …) depend on this module; it depends on none of
//! them (the import-cycle check over `capi/src`'s top-level modules).

pub(crate) mod args;
pub(crate) mod entry;
pub mod handles;
pub(crate) mod registry;
pub(crate) mod shutdown;
pub mod types;

pub(crate) use args::*;
pub(crate) use entry::*;
pub use handles::Registry;
pub(crate) use registry::{model_of, runtime_set, set_of, tensor_of, MODELS, SETS, TENSORS};
pub use registry::{CSet, CTensor};
pub use types::*;

#[cfg(test)]
mod tests {
    use super::*;
    use neff::NrtStatus;
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
    fn copy_cstr_truncates_and_terminates() {
        let mut d = [1 as std::ffi::c_char; 4];
        copy_cstr(&mut d, "abcdef");
        assert_eq!(d, [b'a' as _, b'b' as _, b'c' as _, 0]);
        copy_cstr(&mut d, "");
        assert_eq!(d[0], 0);
        copy_cstr(&mut [], "x");
    }

    static RAN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());

    #[test]
    fn shutdown_hooks_run_once_each_in_order_and_contain_panics() {
        // Names unique to this test: other tests (the lifecycle test) may register theirs.
        shutdown::on_close("test-a", || lock(&RAN).push("a"));
        shutdown::on_close("test-panics", || panic!("hook"));
        shutdown::on_close("test-b", || lock(&RAN).push("b"));
        shutdown::on_close("test-a", || lock(&RAN).push("a-again"));
        let names: Vec<_> = shutdown::registered().into_iter().filter(|n| n.starts_with("test-")).collect();
        assert_eq!(names, ["test-a", "test-panics", "test-b"], "a name registers once");
        shutdown::run_prefixed("test-");
        let ran: Vec<_> = lock(&RAN).clone();
        assert!(ran.ends_with(&["a", "b"]) && !ran.contains(&"a-again"), "{ran:?}");
    }
}
