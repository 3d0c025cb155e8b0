//! libnrt 2.31 host semantics, device-independent core.
//!
//! | module | implements |
//! |---|---|
//! | [`status`] | `NRT_STATUS` re-export and the multi-NC status-priority mapper (docs/facts/libnrt-runtime-model.md §A.4.1–§A.4.2) |
//! | [`state`] | `NRT_INIT_STATE` API guard, `DLR_MODEL_STATE` with ref-counted unload, `exec_state`, `ERP_STEP`, `exec_fatal_status` (docs/facts/libnrt-runtime-model.md §A.1, §A.3, §A.4.4) |
//! | [`error_decode`] | TPB error-ring record → `INFER_ERROR_SUBTYPE` → status (docs/facts/libnrt-runtime-model.md §A.4.5, docs/facts/libnrt-runtime-model.md §B.4) |
//! | [`error`] | [`RtError`], [`stage::StageError`] and their one `hal::HalError` → status mapping |
//! | [`rt`] | the runtime object: lifecycle, tensors, vNC admission, load, execute (sync and async) |
//! | [`stage`] | staging a graph on a NeuronCore, in named steps |
//! | [`completion`] | the one-step completion harvest (docs/facts/libnrt-runtime-model.md §B.1–§B.5) |
//! | [`timestamp`] | device → CPU timestamp rescale (docs/facts/libnrt-runtime-model.md §B.3, "Per-engine timestamp decode") |
//! | [`lanes`] | per-NC FIFO execution lanes and the model armed on each NC |
//! | [`xu`] | the execution-unit queue and its per-vNC worker (docs/facts/libnrt-runtime-model.md §B.6, docs/facts/libnrt.md §4.6, §8) |
//! | [`observe`] | the observer interface monitoring plugs in through ([`Runtime::with_observers`], [`monitoring`]) |
//! | [`counters`] | per-process counters in shared memory for `monitor`/`top` (docs/monitoring.md): an observer |
//! | [`debug_endpoint`] | the read-only debug socket other processes follow the devices through: an observer |
//! | [`tensor_ops`] | tensor operations beyond read/write (`rt::tensor_ops`) |
//! | [`env`](mod@env) | every environment read: `NEURON_RT_EXEC_TIMEOUT`, `NEURON_RT_VISIBLE_CORES`, `NEURON_RT_LOG_LEVEL`, the monitoring switches |
//!
//! Everything here is pure Rust behind small traits ([`completion::NotificationSource`],
//! [`xu::Executor`]); the device layer implements them.

#![forbid(unsafe_code)]

pub mod collectives;
pub mod completion;
pub mod cores;
pub mod counters;
pub mod debug_endpoint;
pub mod env;
pub mod error;
pub mod error_decode;
pub mod hw_err;
pub mod lanes;
pub(crate) mod locks;
pub mod observe;
pub mod profile;
pub mod records;
pub mod rt;
pub mod stage;
pub mod state;
pub mod status;
mod sync;
pub mod sys_trace;
pub mod timestamp;
pub mod xu;

pub use error::{RtError, RtErrorKind, StageError, StageErrorKind};
pub use rt::tensor_ops;
pub use rt::{
    device_setup, Devices, ExecTimings, GlobalPlacement, Model, ModelHandle, Owned, PollPolicy, Runtime, RuntimeConfig,
    Tensor, TensorSet,
};
pub use status::{NrtStatus, Priority, Status};

/// The monitoring observers front ends install ([`Runtime::with_observers`]): the
/// shared-memory counters `neuron-vfio monitor`/`top` read ([`counters`]) and the debug
/// endpoint ([`debug_endpoint`]). Each can be switched off by its environment variable.
pub fn monitoring() -> Vec<std::sync::Arc<dyn observe::Attach>> {
    vec![std::sync::Arc::new(counters::attach), std::sync::Arc::new(debug_endpoint::attach)]
}
