//! The handle registries of the core C objects (models, tensors, tensor sets) and their
//! lookups: null → NRT_INVALID, a stale or foreign pointer → NRT_INVALID_HANDLE.

use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::{ModelHandle, RtError, Tensor, TensorSet};

use super::args::need;
use super::entry::{err, lock};
use super::handles::Registry;
use super::types::{nrt_model_t, nrt_tensor_placement_t, nrt_tensor_set_t, nrt_tensor_t};

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

/// The runtime's tensor set for a C set: each entry's current tensor (the one its handle
/// holds now, when the handle is still that tensor or was re-attached), else the tensor it
/// held when added.
pub(crate) fn runtime_set(s: &Mutex<CSet>) -> TensorSet {
    let mut ts = TensorSet::new();
    for (name, h, t) in &lock(s).entries {
        let cur = TENSORS.get(*h as *const nrt_tensor_t).filter(|c| Arc::ptr_eq(&c.tensor, &t.tensor) || c.attached);
        ts.add(name, cur.map_or_else(|| t.tensor.clone(), |c| c.tensor.clone()));
    }
    ts
}

/// Every handle dies with the runtime (`nrt_close`): tensors and sets still alive are
/// released here (their device memory with them), so the handles are NRT_INVALID_HANDLE from
/// now on, also after a new `nrt_init`.
pub(crate) fn clear_all() {
    MODELS.clear();
    SETS.clear();
    TENSORS.clear();
}
