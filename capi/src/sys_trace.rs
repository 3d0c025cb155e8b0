//! nrt_sys_trace.h: system trace capture into per-NeuronCore ring buffers and fetch as JSON
//! (docs/profiling.md).
//!
//! Event types: `nrt_api` (a runtime call; kept in a host ring, fetched with every NC),
//! `model_exec` (an execution's host span, in the ring of the model's first NC) and
//! `device_exec` (its per-engine START..END spans, carried with the execution).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{c_char, CStr};
use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::profile::{self, Event, Sink};
use runtime::RtError;

use crate::base::{entry, entry_value, err, guard, lock, need, put, NRT_STATUS};
use crate::base::{free_string_array, string_array};

pub(crate) const API: &str = "nrt_api";
pub(crate) const EXEC: &str = "model_exec";
pub(crate) const DEVICE: &str = "device_exec";
/// Every event type.
pub const EVENT_TYPES: [&str; 3] = [API, EXEC, DEVICE];
/// Default ring capacity per NC.
pub const DEFAULT_MAX_EVENTS_PER_NC: u64 = 100_000;

/// An event type argument, as the static name.
pub(crate) fn event_type_arg(p: *const c_char) -> Result<&'static str, RtError> {
    need(p, "event_type")?;
    // SAFETY: non-null; NUL-terminated per the headers.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    EVENT_TYPES
        .iter()
        .find(|t| **t == s)
        .copied()
        .ok_or_else(|| err(NrtStatus::Invalid, format!("unknown event type `{s}` (expected one of {EVENT_TYPES:?})")))
}

/// `nrt_sys_trace_config_t`.
#[derive(Clone)]
pub struct nrt_sys_trace_config_t {
    max_events_per_nc: u64,
    disabled_ncs: BTreeSet<u32>,
    disabled_types: BTreeSet<&'static str>,
}

impl Default for nrt_sys_trace_config_t {
    fn default() -> Self {
        Self {
            max_events_per_nc: DEFAULT_MAX_EVENTS_PER_NC,
            disabled_ncs: BTreeSet::new(),
            disabled_types: BTreeSet::new(),
        }
    }
}

/// `nrt_sys_trace_fetch_options_t`.
#[derive(Clone, Default)]
pub struct nrt_sys_trace_fetch_options_t {
    max_events_per_nc: Option<u64>,
    nc_idx: Option<u64>,
}

/// Rings: `None` is the host ring (API events).
struct Rings {
    cfg: nrt_sys_trace_config_t,
    rings: Mutex<BTreeMap<Option<usize>, VecDeque<Event>>>,
}

impl Sink for Rings {
    fn record(&self, e: &Event) {
        let c = &self.cfg;
        let mut e = e.clone();
        let key = match &mut e {
            Event::Api(_) => {
                if c.disabled_types.contains(API) {
                    return;
                }
                None
            }
            Event::Exec(r) => {
                let g = r.ncs.first().copied().unwrap_or(0);
                // The caller names cores logically (nrt_sys_trace_config_set_capture_enabled_for_nc).
                let nc = crate::base::rt().logical_nc(g).unwrap_or(g);
                if c.disabled_ncs.contains(&(nc as u32)) {
                    return;
                }
                if c.disabled_types.contains(DEVICE) {
                    r.engines.clear();
                }
                if c.disabled_types.contains(EXEC) && r.engines.is_empty() {
                    return;
                }
                Some(nc)
            }
        };
        if c.max_events_per_nc == 0 {
            return;
        }
        let mut g = lock(&self.rings);
        let ring = g.entry(key).or_default();
        if ring.len() as u64 >= c.max_events_per_nc {
            ring.pop_front();
        }
        ring.push_back(e);
    }
}

static CAPTURE: Mutex<Option<(u64, Arc<Rings>)>> = Mutex::new(None);

macro_rules! with_opts {
    ($options:ident, $ty:ty, |$c:ident| $body:expr) => {
        entry_value((), || {
            if $options.is_null() {
                return;
            }
            // SAFETY: non-null; live per the caller's contract (allocated by this library
            // and not freed).
            let $c: &mut $ty = unsafe { &mut *$options };
            $body;
        })
    };
}

/// `nrt_sys_trace_config_allocate`.
///
/// # Safety
/// `options` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_allocate(options: *mut *mut nrt_sys_trace_config_t) -> NRT_STATUS {
    entry("nrt_sys_trace_config_allocate", || {
        need(options, "options")?;
        // SAFETY: checked non-null.
        unsafe { put(options, Box::into_raw(Box::<nrt_sys_trace_config_t>::default())) };
        Ok(())
    })
}

/// `nrt_sys_trace_config_set_defaults`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_defaults(options: *mut nrt_sys_trace_config_t) {
    with_opts!(options, nrt_sys_trace_config_t, |c| *c = Default::default())
}

/// `nrt_sys_trace_config_free`.
///
/// # Safety
/// `options` is NULL or from `nrt_sys_trace_config_allocate`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_free(options: *mut nrt_sys_trace_config_t) {
    if !options.is_null() {
        // SAFETY: ours and live by this function's contract.
        drop(unsafe { Box::from_raw(options) });
    }
}

/// `nrt_sys_trace_config_set_max_events_per_nc`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_max_events_per_nc(
    options: *mut nrt_sys_trace_config_t,
    max_events_per_nc: u64,
) {
    with_opts!(options, nrt_sys_trace_config_t, |c| c.max_events_per_nc = max_events_per_nc)
}

/// `nrt_sys_trace_config_set_capture_enabled_for_nc`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_capture_enabled_for_nc(
    options: *mut nrt_sys_trace_config_t,
    nc_idx: u32,
    enabled: bool,
) {
    with_opts!(options, nrt_sys_trace_config_t, |c| if enabled {
        c.disabled_ncs.remove(&nc_idx);
    } else {
        c.disabled_ncs.insert(nc_idx);
    })
}

/// `nrt_sys_trace_config_set_capture_enabled_for_event_type`.
///
/// # Safety
/// `options` is NULL or live; `event_type` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_capture_enabled_for_event_type(
    options: *mut nrt_sys_trace_config_t,
    event_type: *const c_char,
    enabled: bool,
) -> NRT_STATUS {
    entry("nrt_sys_trace_config_set_capture_enabled_for_event_type", || {
        need(options, "options")?;
        let t = event_type_arg(event_type)?;
        // SAFETY: non-null and live per the caller's contract.
        let c = unsafe { &mut *options };
        if enabled {
            c.disabled_types.remove(t);
        } else {
            c.disabled_types.insert(t);
        }
        Ok(())
    })
}

/// `nrt_sys_trace_get_event_types`.
///
/// # Safety
/// Out-pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_get_event_types(
    event_types: *mut *mut *const c_char,
    count: *mut usize,
) -> NRT_STATUS {
    entry("nrt_sys_trace_get_event_types", || string_array(&EVENT_TYPES, event_types, count))
}

/// `nrt_sys_trace_free_event_types`.
///
/// # Safety
/// `event_types` is NULL or a malloc'd array of `count` malloc'd strings.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_free_event_types(event_types: *mut *const c_char, count: usize) {
    // SAFETY: forwarded from this function's contract.
    entry_value((), || unsafe { free_string_array(event_types, count) })
}

/// `nrt_sys_trace_config_get_enabled_event_types`.
///
/// # Safety
/// `options` is NULL or live; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_get_enabled_event_types(
    options: *mut nrt_sys_trace_config_t,
    event_types: *mut *mut *const c_char,
    count: *mut usize,
) -> NRT_STATUS {
    entry("nrt_sys_trace_config_get_enabled_event_types", || {
        need(options, "options")?;
        // SAFETY: non-null and live per the caller's contract.
        let c = unsafe { &*options };
        let on: Vec<&str> = EVENT_TYPES.iter().copied().filter(|t| !c.disabled_types.contains(t)).collect();
        string_array(&on, event_types, count)
    })
}

/// `nrt_sys_trace_start` (NULL: defaults). NRT_INVALID if capture is already running.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_start(options: *mut nrt_sys_trace_config_t) -> NRT_STATUS {
    entry("nrt_sys_trace_start", || {
        guard()?;
        // SAFETY: NULL or live per this function's contract.
        let cfg = if options.is_null() { Default::default() } else { unsafe { (*options).clone() } };
        let mut g = lock(&CAPTURE);
        if g.is_some() {
            return Err(err(NrtStatus::Invalid, "system trace capture is already running"));
        }
        let r = Arc::new(Rings { cfg, rings: Mutex::new(BTreeMap::new()) });
        *g = Some((profile::subscribe(r.clone()), r));
        Ok(())
    })
}

/// `nrt_sys_trace_stop`: stop capturing and drop what was not fetched.
#[no_mangle]
pub extern "C" fn nrt_sys_trace_stop() -> NRT_STATUS {
    entry("nrt_sys_trace_stop", || {
        let (id, _) =
            lock(&CAPTURE).take().ok_or_else(|| err(NrtStatus::Invalid, "system trace capture is not running"))?;
        profile::unsubscribe(id);
        Ok(())
    })
}

/// `nrt_sys_trace_fetch_options_allocate`.
///
/// # Safety
/// `options` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_allocate(
    options: *mut *mut nrt_sys_trace_fetch_options_t,
) -> NRT_STATUS {
    entry("nrt_sys_trace_fetch_options_allocate", || {
        need(options, "options")?;
        // SAFETY: checked non-null.
        unsafe { put(options, Box::into_raw(Box::<nrt_sys_trace_fetch_options_t>::default())) };
        Ok(())
    })
}

/// `nrt_sys_trace_fetch_options_set_defaults`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_defaults(options: *mut nrt_sys_trace_fetch_options_t) {
    with_opts!(options, nrt_sys_trace_fetch_options_t, |c| *c = Default::default())
}

/// `nrt_sys_trace_fetch_options_free`.
///
/// # Safety
/// `options` is NULL or from `nrt_sys_trace_fetch_options_allocate`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_free(options: *mut nrt_sys_trace_fetch_options_t) {
    if !options.is_null() {
        // SAFETY: ours and live by this function's contract.
        drop(unsafe { Box::from_raw(options) });
    }
}

/// `nrt_sys_trace_fetch_options_set_max_events_per_nc`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_max_events_per_nc(
    options: *mut nrt_sys_trace_fetch_options_t,
    max_events_per_nc: u64,
) {
    with_opts!(options, nrt_sys_trace_fetch_options_t, |c| c.max_events_per_nc = Some(max_events_per_nc))
}

/// `nrt_sys_trace_fetch_options_set_nc_idx`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_nc_idx(
    options: *mut nrt_sys_trace_fetch_options_t,
    nc_idx: u64,
) {
    with_opts!(options, nrt_sys_trace_fetch_options_t, |c| c.nc_idx = Some(nc_idx))
}

/// `nrt_sys_trace_fetch_events`: take (oldest first, up to the per-NC maximum) the events of
/// one NC or of all, as a Chrome / Perfetto JSON trace document in a malloc'd buffer.
///
/// # Safety
/// `buffer` and `written_size` are NULL or writable; `options` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_events(
    buffer: *mut *mut c_char,
    written_size: *mut usize,
    options: *const nrt_sys_trace_fetch_options_t,
) -> NRT_STATUS {
    entry("nrt_sys_trace_fetch_events", || {
        need(buffer, "buffer")?;
        need(written_size, "written_size")?;
        // SAFETY: NULL or live per this function's contract.
        let o = if options.is_null() { Default::default() } else { unsafe { (*options).clone() } };
        let rings = lock(&CAPTURE)
            .as_ref()
            .map(|(_, r)| r.clone())
            .ok_or_else(|| err(NrtStatus::Invalid, "system trace capture is not running"))?;
        let max = o.max_events_per_nc.unwrap_or(u64::MAX);
        let mut events = Vec::new();
        {
            let mut g = lock(&rings.rings);
            for (k, ring) in g.iter_mut() {
                let take = match (k, o.nc_idx) {
                    (Some(nc), Some(want)) => *nc as u64 == want,
                    _ => true,
                };
                if !take {
                    continue;
                }
                let n = (ring.len() as u64).min(max) as usize;
                events.extend(ring.drain(..n));
            }
        }
        events.sort_by_key(|e| e.start_ns());
        let doc = profile::chrome_trace(&events);
        // SAFETY: plain allocation, checked.
        let p = unsafe { libc::malloc(doc.len() + 1) }.cast::<u8>();
        if p.is_null() {
            return Err(err(NrtStatus::Resource, "out of host memory"));
        }
        // SAFETY: `p` has doc.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(doc.as_ptr(), p, doc.len());
            p.add(doc.len()).write(0);
            put(buffer, p.cast::<c_char>());
            put(written_size, doc.len());
        }
        Ok(())
    })
}

/// `nrt_sys_trace_buffer_free`.
///
/// # Safety
/// `buffer` is NULL or from `nrt_sys_trace_fetch_events`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_buffer_free(buffer: *mut c_char) {
    // SAFETY: malloc'd by nrt_sys_trace_fetch_events (or NULL).
    unsafe { libc::free(buffer.cast()) }
}
