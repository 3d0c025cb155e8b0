//! `libnrt.so`: libnrt's C ABI (the `nrt.h` functions programs call) over the neuron-vfio
//! runtime, so existing C/C++ programs run unchanged on a VFIO-bound device or the simulator.
//!
//! - One process-global [`runtime::Runtime`], like libnrt's global state. Before `nrt_init`
//!   every guarded call returns NRT_UNINITIALIZED (13), after `nrt_close` NRT_CLOSED (14); a
//!   forked child of an initialised parent gets NRT_UNINITIALIZED.
//! - `nrt_init` opens the device named by `NEURON_VFIO_DEVICE` ([`device`]) and reads the
//!   `NEURON_RT_*` knobs ([`runtime::RuntimeConfig::from_env`]).
//! - Models, tensors and tensor sets are opaque handles: boxed values whose addresses are
//!   validated against a registry ([`handles`], in the core [`base`]) before use, so null → NRT_INVALID and a
//!   stale/foreign pointer → NRT_INVALID_HANDLE instead of a crash.
//! - Every entry point runs under `catch_unwind`: a panic returns NRT_FAILURE and never
//!   unwinds into C.
//!
//! The headers are `capi/include/nrt/*.h`, laid out like libnrt's public ones
//! (`capi/include/nrt.h` is a compatibility include); docs/capi.md lists every call.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod base;
pub mod device;
pub mod ffi;

pub use base::handles;
pub use base::types::*;
pub use base::{CSet, CTensor};
pub use ffi::*;
pub mod async_api;
pub mod experimental;
#[cfg(feature = "fabric")]
pub mod global;
pub mod info_ext;
pub mod profile;
pub mod sendrecv;
pub mod sys_trace;
pub mod tensor_ops;
