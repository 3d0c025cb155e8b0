//! Error trackers (`nrta_error_tracker_*`): the failures of the requests a tracker was
//! passed to, per Logical NeuronCore.

use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::RtError;

use super::nrta_error_t;
use crate::base::{entry, entry_value, err, guard, lock, need, put, rt, Registry, NRT_STATUS};

/// `nrta_error_tracker_t`: failures of the requests it was passed to.
pub struct nrta_error_tracker_t {
    _opaque: [u8; 0],
}

#[derive(Default)]
pub(super) struct Tracker {
    pub(super) lnc: u32,
    pub(super) errors: Mutex<Vec<nrta_error_t>>,
    /// What the last `nrta_error_tracker_get_list` returned (kept alive for the caller).
    pub(super) listed: Mutex<Vec<nrta_error_t>>,
}

pub(super) static TRACKERS: Registry<Arc<Tracker>> = Registry::new();

pub(super) fn tracker_of(p: *mut nrta_error_tracker_t) -> Result<Option<Arc<Tracker>>, RtError> {
    if p.is_null() {
        return Ok(None);
    }
    TRACKERS.get(p).map(Some).ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{p:p} is not an error tracker")))
}

/// A tracker serves the Logical NeuronCore it was created for.
pub(super) fn tracker_for(p: *mut nrta_error_tracker_t, lnc: usize) -> Result<Option<Arc<Tracker>>, RtError> {
    let tr = tracker_of(p)?;
    if let Some(t) = &tr {
        if t.lnc as usize != lnc {
            return Err(err(NrtStatus::Invalid, format!("error tracker of lnc {} used for lnc {lnc}", t.lnc)));
        }
    }
    Ok(tr)
}

/// `nrta_error_tracker_create`.
///
/// # Safety
/// `error_tracker` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_error_tracker_create(
    lnc_idx: u32,
    error_tracker: *mut *mut nrta_error_tracker_t,
) -> NRT_STATUS {
    entry("nrta_error_tracker_create", || {
        guard()?;
        need(error_tracker, "error_tracker")?;
        if rt().device_of_vnc(lnc_idx as usize).is_err() {
            return Err(err(NrtStatus::Invalid, format!("no lnc {lnc_idx}")));
        }
        let h = TRACKERS.insert(Arc::new(Tracker { lnc: lnc_idx, ..Default::default() }));
        // SAFETY: checked non-null.
        unsafe { put(error_tracker, h) };
        Ok(())
    })
}

/// `nrta_error_tracker_destroy`.
#[no_mangle]
pub extern "C" fn nrta_error_tracker_destroy(error_tracker: *mut nrta_error_tracker_t) {
    entry_value((), || {
        TRACKERS.remove(error_tracker);
    })
}

/// `nrta_error_tracker_get_list`: every failure recorded so far, oldest first; the array
/// stays valid until the next call on this tracker or its destroy.
///
/// # Safety
/// Out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrta_error_tracker_get_list(
    error_tracker: *mut nrta_error_tracker_t,
    list: *mut *const nrta_error_t,
    error_count: *mut usize,
) -> NRT_STATUS {
    entry("nrta_error_tracker_get_list", || {
        need(list, "list")?;
        need(error_count, "error_count")?;
        let tr = tracker_of(error_tracker)?.ok_or_else(|| err(NrtStatus::Invalid, "error_tracker is NULL"))?;
        let mut l = lock(&tr.listed);
        *l = lock(&tr.errors).clone();
        // SAFETY: both checked non-null; the array lives in the tracker until the next call
        // or destroy (the registry and this Arc keep it alive).
        unsafe {
            put(list, if l.is_empty() { std::ptr::null() } else { l.as_ptr() });
            put(error_count, l.len());
        }
        Ok(())
    })
}
