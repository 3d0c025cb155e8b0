//! The C types of nrt.h every area shares: status codes, placements, opaque handles, the
//! tensor-info and version structs.

use std::ffi::{c_char, c_int, c_void};

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
