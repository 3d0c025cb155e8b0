//! nrt_profile.h and nrt_experimental.h's `nrt_trace_*`: execution timelines written as
//! Chrome / Perfetto JSON traces (docs/profiling.md). libnrt writes NTFF, whose format is
//! not public; the events recorded are the same kind — per execution, per NC and TPB engine,
//! the span between the engine's START and END notification records, plus the runtime's own
//! API calls.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use neff::NrtStatus;
use runtime::profile::{self, chrome_trace, Event, Sink};
use runtime::RtError;

use crate::base::{
    entry, entry_value, err, free_string_array, guard, lock, model_of, need, nrt_model_t, opt_cstr, put, string_array,
    NRT_STATUS,
};

fn write_trace(path: &Path, events: &[Event]) -> Result<(), RtError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| err(NrtStatus::Failure, format!("create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, chrome_trace(events))
        .map_err(|e| err(NrtStatus::Failure, format!("write {}: {e}", path.display())))
}

fn path_arg(p: *const c_char, what: &str) -> Result<PathBuf, RtError> {
    need(p, what)?;
    // SAFETY: non-null; nrt_profile.h: a NUL-terminated path.
    let s = unsafe { opt_cstr(p) }.unwrap_or_default();
    if s.is_empty() {
        return Err(err(NrtStatus::Invalid, format!("{what} is empty")));
    }
    Ok(PathBuf::from(s))
}

// ------------------------------------------------------------------ nrt_profile_start/stop

/// The models being profiled and what they recorded.
#[derive(Default)]
struct ModelSink {
    models: Mutex<BTreeSet<u64>>,
    events: Mutex<Vec<Event>>,
}

impl Sink for ModelSink {
    fn record(&self, e: &Event) {
        let keep = match e {
            Event::Exec(r) => lock(&self.models).contains(&r.model_id),
            Event::Api(_) => true,
        };
        if keep {
            lock(&self.events).push(e.clone());
        }
    }
}

static MODEL_PROFILE: Mutex<Option<(u64, Arc<ModelSink>)>> = Mutex::new(None);

/// `nrt_profile_start`: record every execution of `model` (and the API calls made meanwhile)
/// until `nrt_profile_stop`. Several models may be profiled at once.
///
/// # Safety
/// `filename` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_start(model: *mut nrt_model_t, filename: *const c_char) -> NRT_STATUS {
    entry("nrt_profile_start", || {
        guard()?;
        let m = model_of(model)?;
        path_arg(filename, "filename")?;
        let mut g = lock(&MODEL_PROFILE);
        let sink = match &*g {
            Some((_, s)) => s.clone(),
            None => {
                let s = Arc::new(ModelSink::default());
                let id = profile::subscribe(s.clone());
                *g = Some((id, s.clone()));
                s
            }
        };
        lock(&sink.models).insert(m.id);
        Ok(())
    })
}

/// `nrt_profile_stop`: stop profiling and write the trace to `filename`.
///
/// # Safety
/// `filename` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_stop(filename: *const c_char) -> NRT_STATUS {
    entry("nrt_profile_stop", || {
        let path = path_arg(filename, "filename")?;
        let (id, sink) =
            lock(&MODEL_PROFILE).take().ok_or_else(|| err(NrtStatus::Invalid, "profiling was not started"))?;
        profile::unsubscribe(id);
        let events = std::mem::take(&mut *lock(&sink.events));
        write_trace(&path, &events)
    })
}

// ------------------------------------------------------------------ nrt_trace_start/stop

static TRACE: Mutex<Option<(u64, Arc<profile::Collector>)>> = Mutex::new(None);

/// `nrt_trace_start`: record every execution and API call until `nrt_trace_stop`.
/// `trace_mem` (allocation events) is accepted; allocations appear as their API calls.
#[no_mangle]
pub extern "C" fn nrt_trace_start(trace_mem: bool) -> NRT_STATUS {
    entry("nrt_trace_start", || {
        guard()?;
        let _ = trace_mem;
        let mut g = lock(&TRACE);
        if g.is_some() {
            return Err(err(NrtStatus::Invalid, "tracing is already started"));
        }
        let c = Arc::new(profile::Collector::new(None));
        *g = Some((profile::subscribe(c.clone()), c));
        Ok(())
    })
}

/// `nrt_trace_stop`: write the trace to `filename` and stop tracing.
///
/// # Safety
/// `filename` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_trace_stop(filename: *const c_char) -> NRT_STATUS {
    entry("nrt_trace_stop", || {
        let path = path_arg(filename, "filename")?;
        let (id, c) = lock(&TRACE).take().ok_or_else(|| err(NrtStatus::Invalid, "tracing was not started"))?;
        profile::unsubscribe(id);
        write_trace(&path, &c.take())
    })
}

// ------------------------------------------------------------------ continuous profiling

/// `nrt_profile_continuous_options_t`.
pub struct nrt_profile_continuous_options_t {
    output_dir: PathBuf,
}

/// Keeps, per NC, the latest execution (and the API calls since the one before it).
#[derive(Default)]
struct Latest {
    by_nc: Mutex<BTreeMap<usize, Event>>,
}

impl Sink for Latest {
    fn record(&self, e: &Event) {
        if let Event::Exec(r) = e {
            if let Some(&g) = r.ncs.first() {
                // Keyed by the caller's (logical) core, as nrt_profile_continuous_save names it.
                let nc = crate::base::rt().logical_nc(g).unwrap_or(g);
                lock(&self.by_nc).insert(nc, e.clone());
            }
        }
    }
}

static CONTINUOUS: Mutex<Option<(u64, Arc<Latest>, u64)>> = Mutex::new(None);

/// `nrt_profile_continuous_options_allocate`: output directory "./output".
///
/// # Safety
/// `options` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_continuous_options_allocate(
    options: *mut *mut nrt_profile_continuous_options_t,
) -> NRT_STATUS {
    entry("nrt_profile_continuous_options_allocate", || {
        need(options, "options")?;
        let b = Box::into_raw(Box::new(nrt_profile_continuous_options_t { output_dir: PathBuf::from("./output") }));
        // SAFETY: checked non-null.
        unsafe { put(options, b) };
        Ok(())
    })
}

/// `nrt_profile_continuous_options_free`.
///
/// # Safety
/// `options` is NULL or from `nrt_profile_continuous_options_allocate`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_continuous_options_free(
    options: *mut nrt_profile_continuous_options_t,
) -> NRT_STATUS {
    entry("nrt_profile_continuous_options_free", || {
        need(options, "options")?;
        // SAFETY: by this function's contract the box is ours and live.
        drop(unsafe { Box::from_raw(options) });
        Ok(())
    })
}

/// `nrt_profile_continuous_options_set_output_dir`.
///
/// # Safety
/// `options` is NULL or live; `output_dir` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_continuous_options_set_output_dir(
    options: *mut nrt_profile_continuous_options_t,
    output_dir: *const c_char,
) -> NRT_STATUS {
    entry("nrt_profile_continuous_options_set_output_dir", || {
        need(options, "options")?;
        let d = path_arg(output_dir, "output_dir")?;
        // SAFETY: non-null and live by this function's contract.
        unsafe { (*options).output_dir = d };
        Ok(())
    })
}

/// `nrt_profile_continuous_start`: NRT_INVALID if profiling through `nrt_inspect_*` is on.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_continuous_start(options: *mut nrt_profile_continuous_options_t) -> NRT_STATUS {
    entry("nrt_profile_continuous_start", || {
        guard()?;
        need(options, "options")?;
        if lock(&INSPECT).is_some() {
            return Err(err(NrtStatus::Invalid, "inspect profiling is enabled"));
        }
        let mut g = lock(&CONTINUOUS);
        if g.is_some() {
            return Err(err(NrtStatus::Invalid, "continuous profiling is already started"));
        }
        let s = Arc::new(Latest::default());
        *g = Some((profile::subscribe(s.clone()), s, 0));
        Ok(())
    })
}

/// `nrt_profile_continuous_save`: write the latest execution on `vnc` to
/// `<output_dir>/continuous_vnc<vnc>_<n>.json` (NRT_INVALID if `vnc` ran nothing yet).
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_profile_continuous_save(
    vnc: u32,
    options: *mut nrt_profile_continuous_options_t,
) -> NRT_STATUS {
    entry("nrt_profile_continuous_save", || {
        need(options, "options")?;
        // SAFETY: non-null and live by this function's contract.
        let dir = unsafe { (*options).output_dir.clone() };
        let mut g = lock(&CONTINUOUS);
        let (_, s, n) = g.as_mut().ok_or_else(|| err(NrtStatus::Invalid, "continuous profiling is not started"))?;
        let e = lock(&s.by_nc)
            .get(&(vnc as usize))
            .cloned()
            .ok_or_else(|| err(NrtStatus::Invalid, format!("no execution on vnc {vnc} yet")))?;
        *n += 1;
        write_trace(&dir.join(format!("continuous_vnc{vnc}_{n}.json")), &[e])
    })
}

/// `nrt_profile_continuous_stop` (does not save).
#[no_mangle]
pub extern "C" fn nrt_profile_continuous_stop() -> NRT_STATUS {
    entry("nrt_profile_continuous_stop", || {
        let (id, _, _) =
            lock(&CONTINUOUS).take().ok_or_else(|| err(NrtStatus::Invalid, "continuous profiling is not started"))?;
        profile::unsubscribe(id);
        Ok(())
    })
}

// ------------------------------------------------------------------ inspect

/// Activity types, in bit order.
pub const ACTIVITY_TYPES: [&str; 4] = ["system_profile", "device_profile", "host_memory", "cpu_util"];
const SYSTEM: u32 = 1;
const DEVICE: u32 = 2;

/// `nrt_inspect_config_t`.
#[derive(Clone)]
pub struct nrt_inspect_config_t {
    session_id: c_int,
    output_dir: PathBuf,
    activities: u32,
    max_events_per_nc: u64,
    disabled_ncs: BTreeSet<u32>,
    disabled_types: BTreeSet<String>,
    enable_inspect: bool,
    on_fail: bool,
}

impl Default for nrt_inspect_config_t {
    fn default() -> Self {
        Self {
            session_id: 1,
            output_dir: PathBuf::from("./output"),
            activities: (1 << ACTIVITY_TYPES.len()) - 1,
            max_events_per_nc: u64::MAX,
            disabled_ncs: BTreeSet::new(),
            disabled_types: BTreeSet::new(),
            enable_inspect: false,
            on_fail: false,
        }
    }
}

/// Events kept under an inspect configuration.
struct InspectSink {
    cfg: nrt_inspect_config_t,
    events: Mutex<Vec<Event>>,
    per_nc: Mutex<BTreeMap<usize, u64>>,
}

impl Sink for InspectSink {
    fn record(&self, e: &Event) {
        let c = &self.cfg;
        let mut e = e.clone();
        match &mut e {
            Event::Api(a) => {
                if c.activities & SYSTEM == 0 || c.disabled_types.contains(&a.name) {
                    return;
                }
            }
            Event::Exec(r) => {
                if r.ncs.iter().any(|n| c.disabled_ncs.contains(&(*n as u32))) {
                    return;
                }
                if c.activities & DEVICE == 0 || c.disabled_types.contains(runtime::sys_trace::NC_EXEC_RUNNING) {
                    r.engines.clear();
                }
                let no_exec = c.activities & SYSTEM == 0;
                if no_exec && r.engines.is_empty() {
                    return;
                }
                let failed = r.status != NrtStatus::Success;
                if !(c.enable_inspect || (c.on_fail && failed)) {
                    return;
                }
                let g = r.ncs.first().copied().unwrap_or(0);
                let nc = crate::base::rt().logical_nc(g).unwrap_or(g);
                let mut g = lock(&self.per_nc);
                let k = g.entry(nc).or_insert(0);
                if *k >= c.max_events_per_nc {
                    return;
                }
                *k += 1;
            }
        }
        lock(&self.events).push(e);
    }
}

static INSPECT: Mutex<Option<(u64, Arc<InspectSink>)>> = Mutex::new(None);

fn inspect_begin(cfg: nrt_inspect_config_t) -> Result<(), RtError> {
    guard()?;
    if lock(&CONTINUOUS).is_some() {
        return Err(err(NrtStatus::Invalid, "continuous profiling is enabled"));
    }
    let mut g = lock(&INSPECT);
    if g.is_some() {
        return Err(err(NrtStatus::Invalid, "inspect profiling is already started"));
    }
    let s = Arc::new(InspectSink { cfg, events: Mutex::new(Vec::new()), per_nc: Mutex::new(BTreeMap::new()) });
    *g = Some((profile::subscribe(s.clone()), s));
    Ok(())
}

/// `nrt_inspect_begin`: configuration from NEURON_RT_INSPECT_ENABLE, _OUTPUT_DIR,
/// _SYSTEM_PROFILE, _DEVICE_PROFILE and _ON_FAIL (`runtime::env::InspectEnv`).
#[no_mangle]
pub extern "C" fn nrt_inspect_begin() -> NRT_STATUS {
    entry("nrt_inspect_begin", || {
        let env = runtime::env::InspectEnv::from_env().map_err(|e| err(NrtStatus::Invalid, e.to_string()))?;
        let mut cfg = nrt_inspect_config_t {
            enable_inspect: env.enable,
            output_dir: env.output_dir,
            on_fail: env.on_fail,
            ..Default::default()
        };
        if !env.system_profile {
            cfg.activities &= !SYSTEM;
        }
        if !env.device_profile {
            cfg.activities &= !DEVICE;
        }
        inspect_begin(cfg)
    })
}

/// `nrt_inspect_begin_with_options` (NULL: defaults; environment variables are ignored).
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_begin_with_options(options: *mut nrt_inspect_config_t) -> NRT_STATUS {
    entry("nrt_inspect_begin_with_options", || {
        // SAFETY: NULL or live by this function's contract.
        let cfg = if options.is_null() { Default::default() } else { unsafe { (*options).clone() } };
        inspect_begin(cfg)
    })
}

/// `nrt_inspect_stop`: write `<output_dir>/session_<id>/trace.json` (nothing if no event
/// qualified, e.g. inspect-on-fail without a failure) and stop.
#[no_mangle]
pub extern "C" fn nrt_inspect_stop() -> NRT_STATUS {
    entry("nrt_inspect_stop", || {
        let (id, s) =
            lock(&INSPECT).take().ok_or_else(|| err(NrtStatus::Invalid, "inspect profiling is not started"))?;
        profile::unsubscribe(id);
        let events = std::mem::take(&mut *lock(&s.events));
        if events.iter().all(|e| matches!(e, Event::Api(_))) && !s.cfg.enable_inspect {
            return Ok(());
        }
        let dir = s.cfg.output_dir.join(format!("session_{}", s.cfg.session_id));
        write_trace(&dir.join("trace.json"), &events)
    })
}

macro_rules! with_config {
    ($func:literal, $options:ident, |$c:ident| $body:block) => {
        entry($func, || {
            need($options, "options")?;
            // SAFETY: non-null; live per the caller's contract (allocated by
            // nrt_inspect_config_allocate and not freed).
            let $c = unsafe { &mut *$options };
            $body
        })
    };
}

/// `nrt_inspect_config_allocate`: defaults.
///
/// # Safety
/// `options` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_allocate(options: *mut *mut nrt_inspect_config_t) -> NRT_STATUS {
    entry("nrt_inspect_config_allocate", || {
        need(options, "options")?;
        // SAFETY: checked non-null.
        unsafe { put(options, Box::into_raw(Box::<nrt_inspect_config_t>::default())) };
        Ok(())
    })
}

/// `nrt_inspect_config_set_defaults`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_defaults(options: *mut nrt_inspect_config_t) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_defaults", options, |c| {
        *c = Default::default();
        Ok(())
    })
}

/// `nrt_inspect_config_free`.
///
/// # Safety
/// `options` is NULL or from `nrt_inspect_config_allocate`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_free(options: *mut nrt_inspect_config_t) -> NRT_STATUS {
    entry("nrt_inspect_config_free", || {
        need(options, "options")?;
        // SAFETY: ours and live by this function's contract.
        drop(unsafe { Box::from_raw(options) });
        Ok(())
    })
}

/// `nrt_inspect_config_set_session_id`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_session_id(
    options: *mut nrt_inspect_config_t,
    session_id: c_int,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_session_id", options, |c| {
        c.session_id = session_id;
        Ok(())
    })
}

/// `nrt_inspect_config_set_output_dir` (copied).
///
/// # Safety
/// `options` is NULL or live; `output_dir` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_output_dir(
    options: *mut nrt_inspect_config_t,
    output_dir: *const c_char,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_output_dir", options, |c| {
        c.output_dir = path_arg(output_dir, "output_dir")?;
        Ok(())
    })
}

/// `nrt_inspect_config_set_sys_trace_max_events_per_nc`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_sys_trace_max_events_per_nc(
    options: *mut nrt_inspect_config_t,
    sys_trace_max_events_per_nc: u64,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_sys_trace_max_events_per_nc", options, |c| {
        c.max_events_per_nc = sys_trace_max_events_per_nc;
        Ok(())
    })
}

/// `nrt_inspect_config_set_capture_enabled_for_nc`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_capture_enabled_for_nc(
    options: *mut nrt_inspect_config_t,
    nc_idx: u32,
    enabled: bool,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_capture_enabled_for_nc", options, |c| {
        if enabled {
            c.disabled_ncs.remove(&nc_idx);
        } else {
            c.disabled_ncs.insert(nc_idx);
        }
        Ok(())
    })
}

/// `nrt_inspect_config_set_capture_enabled_for_event_type_string` (names from
/// `nrt_sys_trace_get_event_types`; others → NRT_INVALID).
///
/// # Safety
/// `options` is NULL or live; `event_type` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_capture_enabled_for_event_type_string(
    options: *mut nrt_inspect_config_t,
    event_type: *const c_char,
    enabled: bool,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_capture_enabled_for_event_type_string", options, |c| {
        let t = crate::sys_trace::event_type_arg(event_type)?;
        if enabled {
            c.disabled_types.remove(t);
        } else {
            c.disabled_types.insert(t.to_string());
        }
        Ok(())
    })
}

/// `nrt_inspect_config_set_enable_inspect`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_enable_inspect(
    options: *mut nrt_inspect_config_t,
    enable_inspect: bool,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_enable_inspect", options, |c| {
        c.enable_inspect = enable_inspect;
        Ok(())
    })
}

/// `nrt_inspect_config_set_enable_inspect_on_fail`.
///
/// # Safety
/// `options` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_enable_inspect_on_fail(
    options: *mut nrt_inspect_config_t,
    enable_inspect_on_fail: bool,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_enable_inspect_on_fail", options, |c| {
        c.on_fail = enable_inspect_on_fail;
        Ok(())
    })
}

/// `nrt_inspect_config_get_all_activity_types`.
///
/// # Safety
/// Out-pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_get_all_activity_types(
    activity_types: *mut *mut *const c_char,
    count: *mut usize,
) -> NRT_STATUS {
    entry("nrt_inspect_config_get_all_activity_types", || string_array(&ACTIVITY_TYPES, activity_types, count))
}

/// `nrt_inspect_config_get_enabled_activity_types`.
///
/// # Safety
/// `options` is NULL or live; out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_get_enabled_activity_types(
    options: *mut nrt_inspect_config_t,
    activity_types: *mut *mut *const c_char,
    count: *mut usize,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_get_enabled_activity_types", options, |c| {
        let on: Vec<&str> =
            ACTIVITY_TYPES.iter().enumerate().filter(|(i, _)| c.activities & (1 << i) != 0).map(|(_, s)| *s).collect();
        string_array(&on, activity_types, count)
    })
}

/// `nrt_inspect_config_free_activity_types`.
///
/// # Safety
/// As `free_string_array`.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_free_activity_types(activity_types: *mut *const c_char, count: usize) {
    // SAFETY: forwarded from this function's contract.
    entry_value((), || unsafe { free_string_array(activity_types, count) })
}

/// `nrt_inspect_config_set_activity`: one of [`ACTIVITY_TYPES`] or "all".
///
/// # Safety
/// `options` is NULL or live; `activity_type` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nrt_inspect_config_set_activity(
    options: *mut nrt_inspect_config_t,
    activity_type: *const c_char,
    enabled: bool,
) -> NRT_STATUS {
    with_config!("nrt_inspect_config_set_activity", options, |c| {
        need(activity_type, "activity_type")?;
        // SAFETY: non-null, NUL-terminated per nrt_profile.h.
        let t = unsafe { opt_cstr(activity_type) }.unwrap_or_default();
        let bits = if t == "all" {
            (1 << ACTIVITY_TYPES.len()) - 1
        } else {
            1 << ACTIVITY_TYPES
                .iter()
                .position(|a| *a == t)
                .ok_or_else(|| err(NrtStatus::Invalid, format!("unknown activity type `{t}`")))?
        };
        if enabled {
            c.activities |= bits;
        } else {
            c.activities &= !bits;
        }
        Ok(())
    })
}
