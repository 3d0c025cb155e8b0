//! nrt_async.h over the runtime's execution units ([`runtime::xu`]).
//!
//! - Tensor reads, writes and copies run on this library's XUs, one per (Logical NeuronCore,
//!   kind, queue): [`runtime::xu::Xu`] workers over `TensorExec`. Requests are validated when queued;
//!   a request's status is its copy's.
//! - Executions (`nrta_execute_schedule`) run on the runtime's COMPUTE XU of the model's
//!   first core ([`runtime::Runtime::execute_async`]).
//! - One completion thread per XU waits for its requests in order and then: advances the
//!   XU's last completed sequence number, records failures in the request's error tracker,
//!   signals completion handles (eventfds) and calls the `nrt_register_async_exec_callback`
//!   callback for executions.
//!
//! Sequence ids are the runtime's: XU id in bits 63:48 (`{kind:4, queue:4, lnc:8}`) and a
//! per-XU counter from 1 in bits 47:0. The XU id layout is this library's (libnrt's is not
//! public): COMPUTE uses the runtime's kind 1, the tensor XUs kinds 8 + `nrta_xu_t`.
//!
//! | module | holds |
//! |---|---|
//! | `exec` | the tensor executor this library's XUs run |
//! | `units` | per-XU bookkeeping: completion threads, sequence numbers, the `nrt_close` hook |
//! | `submit` | `nrta_tensor_{write,read,copy}`, `nrta_execute_schedule` |
//! | `cc` | `nrta_cc_prepare`, `nrta_cc_schedule` (one-rank collectives) |
//! | `completion` | `nrta_is_completed`, `nrta_get_sequence`, `nrta_get_completion_handle`, `nrt_register_async_exec_callback`, `nrt_async_drain_queued_execs` |
//! | `tracker` | `nrta_error_tracker_{create,destroy,get_list}` |

mod cc;
mod completion;
mod exec;
mod submit;
mod tracker;
mod units;

pub use cc::*;
pub use completion::*;
pub use submit::*;
pub use tracker::*;
pub use units::NRT_ASYNC_EXEC_STATUS_CALLBACK;

use std::ffi::c_int;

/// `nrta_xu_t` values.
pub const NRTA_XU_TENSOR_READ: c_int = 0;
pub const NRTA_XU_TENSOR_WRITE: c_int = 1;
pub const NRTA_XU_TENSOR_OP: c_int = 2;
pub const NRTA_XU_COMPUTE: c_int = 3;
pub const NRTA_XU_COLLECTIVES: c_int = 4;
pub const NRTA_XU_TYPE_NUM: c_int = 5;

/// Queue capacity of this library's XUs.
pub(super) const CAPACITY: usize = 64;
/// Kind offset of this library's XUs (see the module docs).
pub(super) const KIND_BASE: u8 = 8;

/// `nrta_seq_t`.
pub type nrta_seq_t = u64;

/// `nrta_error_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct nrta_error_t {
    pub seq_id: nrta_seq_t,
    pub error_code: u64,
}
