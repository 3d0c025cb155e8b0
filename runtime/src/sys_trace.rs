//! libnrt's system trace: the event records `nrt_sys_trace_fetch_events` returns and
//! `NEURON_RT_INSPECT_ENABLE` writes (docs/profiling.md lists each field with its public
//! source and marks this project's choices).
//!
//! The profiling events ([`crate::profile::Event`]) become records:
//!
//! - an execution ([`ExecRecord`]) gives, per NC that reported START and END records, a
//!   `timestamp_sync_point` (the model's device ↔ CPU sync pair) and an `nc_exec_running`
//!   start/stop pair sharing one tracking id, whose `data.nc_timestamp_ns` are the NC's device
//!   span ([`crate::profile::NcDeviceSpan`]: the span the runtime's own device timing takes)
//!   and whose `timestamp_ns` are those device times moved into the CPU domain through the
//!   sync point (`sync_cpu + (device − sync_device)`);
//! - a runtime call ([`ApiEvent`]) whose name is a software event type gives a start/stop
//!   pair with the call's CPU times.
//!
//! Every record carries `event_type`, `category` (`hardware`/`software`), `phase`
//! (`start`/`stop`, `instant` for sync points), `tracking_id`, `nc_idx` (the caller's
//! logical NC, or absent), `timestamp_ns` (CPU, ns since the Unix epoch), `process_id`,
//! `thread_id`, the model (`model_id`, `model_name`) where there is one, and `data`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use crate::profile::{unix_ns, ApiEvent, Event, ExecRecord};

/// Events executed on the NeuronCore (the `hardware` category of
/// `NEURON_RT_INSPECT_EVENT_FILTER_TYPE`).
pub const HARDWARE: [&str; 7] = [
    NC_EXEC_RUNNING,
    "cc_running",
    "cc_exec_barrier",
    NUMERICAL_ERR,
    "nc_model_switch",
    TIMESTAMP_SYNC_POINT,
    "hw_notify",
];

/// Runtime calls recorded as software events (the `software` category: every other type).
pub const SOFTWARE: [&str; 14] = [
    "nrt_init",
    "nrt_close",
    "nrt_load",
    "nrt_load_collectives",
    "nrt_unload",
    "nrt_execute",
    "nrt_execute_repeat",
    "nrta_execute_schedule",
    "nrt_tensor_allocate",
    "nrt_tensor_free",
    "nrt_tensor_read",
    "nrt_tensor_write",
    "nrt_tensor_copy",
    "nrt_tensor_memset",
];

/// One execution of a model on one NC.
pub const NC_EXEC_RUNNING: &str = "nc_exec_running";
/// A device ↔ CPU timestamp pair.
pub const TIMESTAMP_SYNC_POINT: &str = "timestamp_sync_point";
/// An execution that completed with numerical errors.
pub const NUMERICAL_ERR: &str = "numerical_err";

/// Every event type, hardware first.
pub fn event_types() -> impl Iterator<Item = &'static str> {
    HARDWARE.into_iter().chain(SOFTWARE)
}

/// The static name of event type `name`, if it is one.
pub fn event_type(name: &str) -> Option<&'static str> {
    event_types().find(|t| *t == name)
}

/// An event's category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Hardware,
    Software,
}

impl Category {
    /// Its name in records and filters.
    pub fn name(self) -> &'static str {
        match self {
            Category::Hardware => "hardware",
            Category::Software => "software",
        }
    }
    /// The category of event type `t`.
    pub fn of(t: &str) -> Self {
        if HARDWARE.contains(&t) {
            Category::Hardware
        } else {
            Category::Software
        }
    }
}

/// A record's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Start,
    Stop,
    /// A point in time (sync points).
    Instant,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Stop => "stop",
            Phase::Instant => "instant",
        }
    }
}

/// A value of a record's `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    U64(u64),
    Str(String),
}

/// One system-trace record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysEvent {
    pub event_type: &'static str,
    pub phase: Phase,
    /// Shared by a start and its stop.
    pub tracking_id: u64,
    /// The caller's (logical) NC, when the event concerns one.
    pub nc_idx: Option<usize>,
    /// CPU time, ns since the Unix epoch (hardware events: moved from the device clock
    /// through the sync point).
    pub timestamp_ns: u64,
    pub thread_id: u64,
    /// `(model_id, model_name)`.
    pub model: Option<(u64, String)>,
    pub data: Vec<(&'static str, Value)>,
}

impl SysEvent {
    pub fn category(&self) -> Category {
        Category::of(self.event_type)
    }
}

static TRACKING: AtomicU64 = AtomicU64::new(1);

fn next_tracking_id() -> u64 {
    TRACKING.fetch_add(1, Ordering::Relaxed)
}

/// The records of `e`, in order. `logical` maps a global NC to the caller's logical NC.
pub fn records(e: &Event, logical: &dyn Fn(usize) -> usize) -> Vec<SysEvent> {
    match e {
        Event::Exec(r) => exec_records(r, logical),
        Event::Api(a) => api_records(a),
    }
}

fn exec_records(r: &ExecRecord, logical: &dyn Fn(usize) -> usize) -> Vec<SysEvent> {
    let mut out = Vec::with_capacity(r.device.len() * 3);
    let model = Some((r.model_id, r.model_name.clone()));
    for d in &r.device {
        let nc_idx = Some(logical(d.nc));
        let base = |event_type, phase, tracking_id, timestamp_ns, data| SysEvent {
            event_type,
            phase,
            tracking_id,
            nc_idx,
            timestamp_ns,
            thread_id: r.tid,
            model: model.clone(),
            data,
        };
        let sync_cpu = unix_ns(d.sync_cpu_ns);
        out.push(base(
            TIMESTAMP_SYNC_POINT,
            Phase::Instant,
            next_tracking_id(),
            sync_cpu,
            vec![
                ("exec_id", Value::U64(r.seq)),
                ("cpu_timestamp_ns", Value::U64(sync_cpu)),
                ("nc_timestamp_ns", Value::U64(d.sync_device_ns)),
                ("device_core_idx", Value::U64(d.nc as u64)),
            ],
        ));
        let id = next_tracking_id();
        let data = |nc_ts: u64, stop: bool| {
            let mut v = vec![
                ("exec_id", Value::U64(r.seq)),
                ("nc_timestamp_ns", Value::U64(nc_ts)),
                ("device_core_idx", Value::U64(d.nc as u64)),
            ];
            if stop {
                v.push(("status", Value::U64(u64::from(r.status.code()))));
                v.push(("status_name", Value::Str(r.status.name().to_string())));
            }
            v
        };
        out.push(base(
            NC_EXEC_RUNNING,
            Phase::Start,
            id,
            unix_ns(d.to_cpu_ns(d.start_device_ns)),
            data(d.start_device_ns, false),
        ));
        out.push(base(
            NC_EXEC_RUNNING,
            Phase::Stop,
            id,
            unix_ns(d.to_cpu_ns(d.end_device_ns)),
            data(d.end_device_ns, true),
        ));
        // NRT_EXEC_COMPLETED_WITH_NUM_ERR: the device reported numerical errors. The error
        // records' own times are not kept; the event stands at the NC's END.
        if r.status == crate::status::NrtStatus::ExecCompletedWithNumErr {
            out.push(base(
                NUMERICAL_ERR,
                Phase::Instant,
                next_tracking_id(),
                unix_ns(d.to_cpu_ns(d.end_device_ns)),
                data(d.end_device_ns, true),
            ));
        }
    }
    out
}

fn api_records(a: &ApiEvent) -> Vec<SysEvent> {
    let Some(t) = SOFTWARE.iter().copied().find(|t| *t == a.name) else { return Vec::new() };
    let id = next_tracking_id();
    let ev = |phase, ts, data| SysEvent {
        event_type: t,
        phase,
        tracking_id: id,
        nc_idx: a.nc,
        timestamp_ns: unix_ns(ts),
        thread_id: a.tid,
        model: None,
        data,
    };
    vec![
        ev(Phase::Start, a.start_ns, Vec::new()),
        ev(Phase::Stop, a.end_ns.max(a.start_ns), vec![("status", Value::U64(u64::from(a.status)))]),
    ]
}

fn json_str(o: &mut String, s: &str) {
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
}

/// One record as a JSON object.
pub fn record_json(e: &SysEvent, pid: u32, o: &mut String) {
    o.push_str("{\"event_type\":");
    json_str(o, e.event_type);
    let _ = write!(
        o,
        ",\"category\":\"{}\",\"phase\":\"{}\",\"tracking_id\":{}",
        e.category().name(),
        e.phase.name(),
        e.tracking_id
    );
    if let Some(nc) = e.nc_idx {
        let _ = write!(o, ",\"nc_idx\":{nc}");
    }
    let _ = write!(o, ",\"timestamp_ns\":{},\"process_id\":{pid},\"thread_id\":{}", e.timestamp_ns, e.thread_id);
    if let Some((id, name)) = &e.model {
        let _ = write!(o, ",\"model_id\":{id},\"model_name\":");
        json_str(o, name);
    }
    o.push_str(",\"data\":{");
    for (k, (key, v)) in e.data.iter().enumerate() {
        if k > 0 {
            o.push(',');
        }
        json_str(o, key);
        o.push(':');
        match v {
            Value::U64(n) => {
                let _ = write!(o, "{n}");
            }
            Value::Str(s) => json_str(o, s),
        }
    }
    o.push_str("}}");
}

/// The fetch document: `{"events":[…]}`, one record per line, in the given order.
pub fn to_json(events: &[SysEvent]) -> String {
    let pid = std::process::id();
    let mut o = String::with_capacity(64 + events.len() * 256);
    o.push_str("{\"events\":[");
    for (k, e) in events.iter().enumerate() {
        o.push_str(if k == 0 { "\n" } else { ",\n" });
        record_json(e, pid, &mut o);
    }
    o.push_str("\n]}\n");
    o
}

/// `NEURON_RT_INSPECT_EVENT_FILTER_TYPE` errors.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FilterError {
    #[error("NEURON_RT_INSPECT_EVENT_FILTER_TYPE: empty item in {0:?}")]
    EmptyItem(String),
}

/// The event types a `NEURON_RT_INSPECT_EVENT_FILTER_TYPE` value enables: comma-separated
/// event types and categories (`hardware`, `software`) are enabled, items with a `^` prefix
/// (types or categories) are removed from them; with only exclusions, from every type.
/// Names that are no event type of this runtime select nothing (returned second, so the
/// caller can warn).
pub fn parse_type_filter(raw: &str) -> Result<(BTreeSet<&'static str>, Vec<String>), FilterError> {
    let mut on = BTreeSet::new();
    let mut off = BTreeSet::new();
    let mut any_include = false;
    let mut unknown = Vec::new();
    for item in raw.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(FilterError::EmptyItem(raw.to_string()));
        }
        let (exclude, name) = match item.strip_prefix('^') {
            Some(n) => (true, n.trim()),
            None => (false, item),
        };
        let set: Vec<&'static str> = match name {
            "hardware" => HARDWARE.to_vec(),
            "software" => SOFTWARE.to_vec(),
            n => match event_type(n) {
                Some(t) => vec![t],
                None => {
                    unknown.push(n.to_string());
                    Vec::new()
                }
            },
        };
        if exclude {
            off.extend(set);
        } else {
            any_include = true;
            on.extend(set);
        }
    }
    if !any_include {
        on = event_types().collect();
    }
    Ok((on.difference(&off).copied().collect(), unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::NcDeviceSpan;
    use crate::status::NrtStatus;

    #[test]
    fn type_filters_take_categories_names_and_exclusions() {
        let (on, unknown) = parse_type_filter("hardware,^timestamp_sync_point,nrt_execute,^cc_exec").unwrap();
        assert!(on.contains(NC_EXEC_RUNNING) && on.contains("nrt_execute") && on.contains("hw_notify"));
        assert!(!on.contains(TIMESTAMP_SYNC_POINT) && !on.contains("nrt_load"));
        assert_eq!(unknown, ["cc_exec"]);
        let (on, _) = parse_type_filter("^software").unwrap();
        assert_eq!(on, HARDWARE.into_iter().collect());
        let (on, _) = parse_type_filter("software").unwrap();
        assert_eq!(on, SOFTWARE.into_iter().collect());
        assert!(parse_type_filter("hardware,,software").is_err());
    }

    #[test]
    fn an_execution_gives_a_sync_point_and_a_running_pair_per_nc() {
        let d = NcDeviceSpan {
            nc: 3,
            start_device_ns: 10_000,
            end_device_ns: 13_500,
            sync_device_ns: 9_000,
            sync_cpu_ns: 500,
        };
        let r = ExecRecord {
            model_id: 4,
            model_name: "m\"x".into(),
            ncs: vec![3],
            seq: 7,
            host_start_ns: 0,
            host_end_ns: 0,
            status: NrtStatus::Success,
            engines: Vec::new(),
            device: vec![d],
            tid: 99,
        };
        let ev = records(&Event::Exec(r.clone()), &|g| g - 3);
        let types: Vec<_> = ev.iter().map(|e| (e.event_type, e.phase)).collect();
        assert_eq!(
            types,
            [(TIMESTAMP_SYNC_POINT, Phase::Instant), (NC_EXEC_RUNNING, Phase::Start), (NC_EXEC_RUNNING, Phase::Stop)]
        );
        assert_eq!(ev[1].tracking_id, ev[2].tracking_id);
        assert_ne!(ev[0].tracking_id, ev[1].tracking_id);
        assert!(ev.iter().all(|e| e.nc_idx == Some(0) && e.category() == Category::Hardware));
        // CPU domain: sync_cpu + (device − sync_device).
        assert_eq!(ev[1].timestamp_ns, unix_ns(500 + 1_000));
        assert_eq!(ev[2].timestamp_ns - ev[1].timestamp_ns, 3_500);
        assert_eq!(ev[2].data[1], ("nc_timestamp_ns", Value::U64(13_500)));
        assert_eq!(ev.len(), 3, "no numerical_err on success");
        let num = records(&Event::Exec(ExecRecord { status: NrtStatus::ExecCompletedWithNumErr, ..r }), &|g| g - 3);
        assert_eq!(num.len(), 4);
        assert_eq!((num[3].event_type, num[3].phase), (NUMERICAL_ERR, Phase::Instant));
        assert_eq!(num[3].timestamp_ns, num[2].timestamp_ns, "at the NC's END");
        let doc = to_json(&ev);
        assert!(doc.starts_with("{\"events\":[\n{\"event_type\":\"timestamp_sync_point\""), "{doc}");
        assert!(doc.contains("\"model_name\":\"m\\\"x\""), "{doc}");
        assert!(doc.contains("\"phase\":\"stop\""), "{doc}");
    }

    #[test]
    fn only_software_event_types_record_api_calls() {
        let a = ApiEvent { name: "nrt_execute".into(), nc: None, start_ns: 5, end_ns: 9, status: 0, tid: 1 };
        let ev = records(&Event::Api(a.clone()), &|g| g);
        assert_eq!(ev.len(), 2);
        assert_eq!((ev[0].phase, ev[1].phase), (Phase::Start, Phase::Stop));
        assert_eq!(ev[1].timestamp_ns - ev[0].timestamp_ns, 4);
        let other = ApiEvent { name: "nrt_sys_trace_fetch_events".into(), ..a };
        assert!(records(&Event::Api(other), &|g| g).is_empty());
    }
}
