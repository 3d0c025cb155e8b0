//! nrt_sys_trace.h: system trace capture into per-NeuronCore ring buffers, fetched as libnrt's
//! event records (`{"events":[…]}`: `runtime::sys_trace`, docs/profiling.md).
//!
//! Event types are libnrt's (`nrt_sys_trace_get_event_types`): the hardware events
//! (`nc_exec_running` start/stop per NC and execution, `timestamp_sync_point`, …) and the
//! software events (the runtime calls `nrt_load`, `nrt_execute`, `nrt_tensor_read`, …).
//! Events of an NC go to its ring; events of no NC (runtime calls) to a host ring, fetched
//! with every NC. `NEURON_RT_INSPECT_ENABLE` captures the whole run the same way and writes it
//! at `nrt_close` ([`inspect_run_begin`], [`inspect_run_end`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::profile::{self, Event, Sink};
use runtime::sys_trace::{self as st, SysEvent};
use runtime::RtError;

use crate::base::{entry, entry_value, err, guard, lock, need, put, NRT_STATUS};
use crate::base::{free_string_array, string_array};

/// Default ring capacity per NC.
pub const DEFAULT_MAX_EVENTS_PER_NC: u64 = 100_000;

/// Every event type name.
fn event_types() -> Vec<&'static str> {
    st::event_types().collect()
}

/// An event type argument, as the static name.
pub(crate) fn event_type_arg(p: *const c_char) -> Result<&'static str, RtError> {
    need(p, "event_type")?;
    // SAFETY: non-null; NUL-terminated per the headers.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    st::event_type(&s).ok_or_else(|| {
        err(NrtStatus::Invalid, format!("unknown event type `{s}` (expected one of {:?})", event_types()))
    })
}

/// `nrt_sys_trace_config_t`.
#[derive(Clone)]
pub struct nrt_sys_trace_config_t {
    max_events_per_nc: u64,
    disabled_ncs: BTreeSet<u32>,
    /// Only these NCs (`NEURON_RT_INSPECT_EVENT_FILTER_NC`); `None`: all but the disabled.
    only_ncs: Option<BTreeSet<u32>>,
    disabled_types: BTreeSet<&'static str>,
}

impl Default for nrt_sys_trace_config_t {
    fn default() -> Self {
        Self {
            max_events_per_nc: DEFAULT_MAX_EVENTS_PER_NC,
            disabled_ncs: BTreeSet::new(),
            only_ncs: None,
            disabled_types: BTreeSet::new(),
        }
    }
}

impl nrt_sys_trace_config_t {
    fn nc_enabled(&self, nc: usize) -> bool {
        let nc = u32::try_from(nc).unwrap_or(u32::MAX);
        !self.disabled_ncs.contains(&nc) && self.only_ncs.as_ref().is_none_or(|o| o.contains(&nc))
    }
}

/// `nrt_sys_trace_fetch_options_t`.
#[derive(Clone, Default)]
pub struct nrt_sys_trace_fetch_options_t {
    max_events_per_nc: Option<u64>,
    nc_idx: Option<u64>,
}

/// A running capture: its configuration and rings (`None`: the host ring).
struct Rings {
    cfg: nrt_sys_trace_config_t,
    rings: Mutex<BTreeMap<Option<usize>, VecDeque<SysEvent>>>,
}

impl Sink for Rings {
    fn record(&self, e: &Event) {
        let c = &self.cfg;
        if c.max_events_per_nc == 0 {
            return;
        }
        // The caller names cores logically (nrt_sys_trace_config_set_capture_enabled_for_nc).
        let logical = |g: usize| crate::base::rt().logical_nc(g).unwrap_or(g);
        let records = st::records(e, &logical);
        let mut g = lock(&self.rings);
        for r in records {
            if c.disabled_types.contains(r.event_type) || r.nc_idx.is_some_and(|nc| !c.nc_enabled(nc)) {
                continue;
            }
            let ring = g.entry(r.nc_idx).or_default();
            if ring.len() as u64 >= c.max_events_per_nc {
                ring.pop_front();
            }
            ring.push_back(r);
        }
    }
}

impl Rings {
    /// Take (oldest first) up to `max` events of each ring of NC `nc` (None: every NC) and of
    /// the host ring, ordered by CPU time.
    fn take(&self, nc: Option<u64>, max: u64) -> Vec<SysEvent> {
        let mut events = Vec::new();
        let mut g = lock(&self.rings);
        for (k, ring) in g.iter_mut() {
            if let (Some(have), Some(want)) = (k, nc) {
                if *have as u64 != want {
                    continue;
                }
            }
            let n = (ring.len() as u64).min(max) as usize;
            events.extend(ring.drain(..n));
        }
        // Stable: a start and its stop at the same instant keep their order.
        events.sort_by_key(|e| e.timestamp_ns);
        events
    }
}

/// The capture of `nrt_sys_trace_start`.
static CAPTURE: Mutex<Option<(u64, Arc<Rings>)>> = Mutex::new(None);
/// The whole-run capture of `NEURON_RT_INSPECT_ENABLE`, and where it is written.
static RUN_CAPTURE: Mutex<Option<(u64, Arc<Rings>, PathBuf)>> = Mutex::new(None);

/// At `nrt_init`: with `NEURON_RT_INSPECT_ENABLE`, capture the system trace of the run,
/// filtered by `NEURON_RT_INSPECT_EVENT_FILTER_TYPE` and `_FILTER_NC`, in rings of
/// `NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC` events.
pub(crate) fn inspect_run_begin() -> Result<(), RtError> {
    let env = runtime::env::InspectEnv::from_env().map_err(|e| err(NrtStatus::Invalid, e.to_string()))?;
    if !env.enable {
        return Ok(());
    }
    let mut cfg = nrt_sys_trace_config_t { max_events_per_nc: env.max_events_per_nc, ..Default::default() };
    if let Some(f) = &env.filter_type {
        let (on, unknown) = st::parse_type_filter(f).map_err(|e| err(NrtStatus::Invalid, e.to_string()))?;
        if !unknown.is_empty() {
            tracing::warn!(?unknown, "NEURON_RT_INSPECT_EVENT_FILTER_TYPE names no event type of this runtime");
        }
        cfg.disabled_types = st::event_types().filter(|t| !on.contains(t)).collect();
    }
    cfg.only_ncs = env.filter_nc.map(|v| v.into_iter().collect());
    let r = Arc::new(Rings { cfg, rings: Mutex::new(BTreeMap::new()) });
    let mut g = lock(&RUN_CAPTURE);
    if let Some((id, _, _)) = g.take() {
        profile::unsubscribe(id);
    }
    *g = Some((profile::subscribe(r.clone()), r, env.output_dir));
    Ok(())
}

/// The file a run's trace is written to, in `dir`.
pub fn run_trace_path(dir: &std::path::Path) -> PathBuf {
    dir.join(format!("sys_trace_pid{}.json", std::process::id()))
}

/// At `nrt_close`: write the run's capture (if any) to the output directory.
pub(crate) fn inspect_run_end() -> Result<(), RtError> {
    let Some((id, r, dir)) = lock(&RUN_CAPTURE).take() else { return Ok(()) };
    profile::unsubscribe(id);
    let doc = st::to_json(&r.take(None, u64::MAX));
    std::fs::create_dir_all(&dir).map_err(|e| err(NrtStatus::Failure, format!("create {}: {e}", dir.display())))?;
    let path = run_trace_path(&dir);
    std::fs::write(&path, doc).map_err(|e| err(NrtStatus::Failure, format!("write {}: {e}", path.display())))
}

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
    entry("nrt_sys_trace_get_event_types", || string_array(&self::event_types(), event_types, count))
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
        let on: Vec<&str> = st::event_types().filter(|t| !c.disabled_types.contains(t)).collect();
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
/// one NC or of all (and the runtime calls' events), as libnrt's JSON document
/// (`{"events":[…]}`, ordered by CPU time) in a malloc'd buffer.
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
        let events = rings.take(o.nc_idx, o.max_events_per_nc.unwrap_or(u64::MAX));
        let doc = st::to_json(&events);
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
