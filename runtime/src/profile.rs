//! Execution timelines for profiling (libnrt's `nrt_profile_*`, `nrt_inspect_*`,
//! `nrt_trace_*` and `nrt_sys_trace_*` sit on top of this).
//!
//! Two kinds of [`Event`]:
//! - [`ExecRecord`]: one execution of a model — host span (kickoff to completion seen) and,
//!   per NC and TPB engine, the span between the engine's START and END notification records
//!   as harvested by the completion engine ([`crate::completion::NcTiming`]), mapped to host
//!   time with the model's device → CPU timestamp sync ([`crate::timestamp`]).
//! - [`ApiEvent`]: a runtime call (`nrt_load`, `nrt_tensor_write`, ...) with its host span.
//!
//! Consumers register a [`Sink`]; with no sink registered, recording costs one atomic load per
//! execution. All times are ns since the first use of this module ([`now_ns`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::completion::NcTiming;
use crate::locks::{Rank, Ranked, RankedRw};
use crate::status::NrtStatus;
use crate::timestamp::TimestampSync;
use csr_maps::Engine;

/// One engine's span in one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSpan {
    /// Global NC index.
    pub nc: usize,
    /// Engine index ([`csr_maps::Engine::index`]).
    pub engine: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One NC's device span of one execution: from the earliest START to the latest END
/// notification of its engines (the span the runtime's own device timing measures,
/// [`crate::completion::ExecTracker::device_span`]), in device ns (each engine's timestamps
/// rescaled by its clock, [`crate::timestamp`]), with the sync point that maps device ns to
/// CPU ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcDeviceSpan {
    /// Global NC index.
    pub nc: usize,
    /// Device ns of the earliest START record.
    pub start_device_ns: u64,
    /// Device ns of the latest END record.
    pub end_device_ns: u64,
    /// The sync point: the same instant in device ns …
    pub sync_device_ns: u64,
    /// … and in CPU ns since the profiling epoch ([`now_ns`]).
    pub sync_cpu_ns: u64,
}

impl NcDeviceSpan {
    /// Device ns → CPU ns since the profiling epoch through the sync point
    /// (`sync_cpu + (device − sync_device)`).
    pub fn to_cpu_ns(&self, device_ns: u64) -> u64 {
        crate::timestamp::SyncPoint { device_ns: self.sync_device_ns, cpu_ns: self.sync_cpu_ns }.to_cpu_ns(device_ns)
    }
    /// The device span in ns.
    pub fn device_ns(&self) -> u64 {
        self.end_device_ns.saturating_sub(self.start_device_ns)
    }
}

/// One execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRecord {
    pub model_id: u64,
    pub model_name: String,
    /// Global NCs of the model.
    pub ncs: Vec<usize>,
    /// The model's execution counter.
    pub seq: u64,
    pub host_start_ns: u64,
    pub host_end_ns: u64,
    pub status: NrtStatus,
    /// Engines that reported both START and END.
    pub engines: Vec<EngineSpan>,
    /// Per NC that reported a START and an END: its device span.
    pub device: Vec<NcDeviceSpan>,
    /// OS thread id of the thread that ran the execution.
    pub tid: u64,
    /// When the execution first switched its NCs to this model (parking the model armed
    /// there): the host span, ns since the profiling epoch.
    pub switch_ns: Option<(u64, u64)>,
}

/// One runtime call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiEvent {
    pub name: String,
    /// NC the call concerned, when it concerned one.
    pub nc: Option<usize>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// NRT_STATUS code the call returned.
    pub status: u32,
    /// OS thread id of the caller.
    pub tid: u64,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Exec(ExecRecord),
    Api(ApiEvent),
}

impl Event {
    /// Start time.
    pub fn start_ns(&self) -> u64 {
        match self {
            Event::Exec(r) => r.host_start_ns,
            Event::Api(a) => a.start_ns,
        }
    }
    /// NCs the event concerns (empty: none in particular).
    pub fn ncs(&self) -> Vec<usize> {
        match self {
            Event::Exec(r) => r.ncs.clone(),
            Event::Api(a) => a.nc.into_iter().collect(),
        }
    }
}

/// A consumer of events.
pub trait Sink: Send + Sync {
    fn record(&self, e: &Event);
}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(1);
static SINKS: RankedRw<Vec<(u64, Arc<dyn Sink>)>> = RankedRw::new(Rank::Leaf, Vec::new());

/// The profiling epoch, and the wall clock (ns since the Unix epoch) at that instant.
fn epoch_pair() -> (Instant, u64) {
    static EPOCH: OnceLock<(Instant, u64)> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (Instant::now(), wall)
    })
}

fn epoch() -> Instant {
    epoch_pair().0
}

/// ns since the profiling epoch → ns since the Unix epoch (the wall clock read once, at the
/// profiling epoch; later times advance on the monotonic clock).
pub fn unix_ns(profile_ns: u64) -> u64 {
    epoch_pair().1.saturating_add(profile_ns)
}

/// OS thread id of the caller.
pub fn thread_id() -> u64 {
    platform::fork::thread_id()
}

/// ns since the profiling epoch.
pub fn now_ns() -> u64 {
    instant_ns(Instant::now())
}

/// `t` as ns since the profiling epoch (0 for instants before it).
pub fn instant_ns(t: Instant) -> u64 {
    t.checked_duration_since(epoch()).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Whether any sink is registered.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Register `s`; the id unregisters it.
pub fn subscribe(s: Arc<dyn Sink>) -> u64 {
    let _ = epoch();
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut g = SINKS.write();
    g.push((id, s));
    ACTIVE.store(true, Ordering::Release);
    id
}

/// Unregister sink `id` (unknown ids are ignored).
pub fn unsubscribe(id: u64) {
    let mut g = SINKS.write();
    g.retain(|(i, _)| *i != id);
    ACTIVE.store(!g.is_empty(), Ordering::Release);
}

/// Hand `e` to every sink.
pub fn emit(e: Event) {
    if !active() {
        return;
    }
    let sinks: Vec<Arc<dyn Sink>> = SINKS.read().iter().map(|(_, s)| s.clone()).collect();
    for s in sinks {
        s.record(&e);
    }
}

/// Record an execution: `t0` when it was kicked off, `rt_epoch` the instant the model's
/// `sync` maps CPU ns from, `timings` the completion engine's per-NC START/END timestamps,
/// `switch_ns` the host span of a model switch before it.
#[allow(clippy::too_many_arguments)]
pub fn record_exec(
    model_id: u64,
    model_name: &str,
    ncs: &[usize],
    seq: u64,
    t0: Instant,
    rt_epoch: Instant,
    status: NrtStatus,
    timings: &[NcTiming],
    sync: &TimestampSync,
    switch_ns: Option<(u64, u64)>,
) {
    if !active() {
        return;
    }
    let at = |cpu_ns: u64| instant_ns(rt_epoch + std::time::Duration::from_nanos(cpu_ns));
    let mut engines = Vec::new();
    let mut device = Vec::new();
    for (k, t) in timings.iter().enumerate() {
        let nc = ncs.get(k).copied().unwrap_or(k);
        for (e, et) in t.engines.iter().enumerate() {
            let (Some(s), Some(x)) = (et.start, et.end) else { continue };
            let (Ok(s), Ok(x)) = (sync.to_cpu_ns(e, s), sync.to_cpu_ns(e, x)) else { continue };
            engines.push(EngineSpan { nc, engine: e, start_ns: at(s), end_ns: at(x.max(s)) });
        }
        // The NC's span as the runtime's device timing takes it: earliest START, latest END
        // over its engines, each in device ns by its engine's clock.
        let dev = |e: usize, ts: Option<u64>| {
            ts.and_then(|ts| sync.clocks.get(e).and_then(|c| crate::timestamp::rescale_ns(ts, c).ok()))
        };
        let start = t.engines.iter().enumerate().filter_map(|(e, et)| dev(e, et.start)).min();
        let end = t.engines.iter().enumerate().filter_map(|(e, et)| dev(e, et.end)).max();
        if let (Some(s), Some(x)) = (start, end) {
            device.push(NcDeviceSpan {
                nc,
                start_device_ns: s,
                end_device_ns: x.max(s),
                sync_device_ns: sync.sync.device_ns,
                sync_cpu_ns: at(sync.sync.cpu_ns),
            });
        }
    }
    emit(Event::Exec(ExecRecord {
        model_id,
        model_name: model_name.to_string(),
        ncs: ncs.to_vec(),
        seq,
        host_start_ns: instant_ns(t0),
        host_end_ns: now_ns(),
        status,
        engines,
        device,
        tid: thread_id(),
        switch_ns,
    }));
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// Process id of an NC's lane group in the trace (the host is pid 0).
fn nc_pid(nc: usize) -> usize {
    nc + 1
}

/// The events as JSON trace-event objects (Chrome / Perfetto "X" complete events), one per
/// element, in order.
pub fn trace_events(events: &[Event]) -> Vec<String> {
    let mut out = Vec::new();
    for e in events {
        match e {
            Event::Api(a) => out.push(format!(
                "{{\"name\":{},\"cat\":\"nrt_api\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":0,\"tid\":{},\"args\":{{\"status\":{}{}}}}}",
                json_str(&a.name),
                us(a.start_ns),
                us(a.end_ns.saturating_sub(a.start_ns)),
                a.tid,
                a.status,
                a.nc.map(|n| format!(",\"nc\":{n}")).unwrap_or_default()
            )),
            Event::Exec(r) => {
                let args = format!(
                    "{{\"model_id\":{},\"seq\":{},\"status\":{},\"status_name\":{},\"ncs\":{:?}}}",
                    r.model_id,
                    r.seq,
                    r.status.code(),
                    json_str(r.status.name()),
                    r.ncs
                );
                let first = r.ncs.first().copied().unwrap_or(0);
                out.push(format!(
                    "{{\"name\":{},\"cat\":\"model_exec\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{}}}",
                    json_str(&r.model_name),
                    us(r.host_start_ns),
                    us(r.host_end_ns.saturating_sub(r.host_start_ns)),
                    nc_pid(first),
                    Engine::COUNT,
                    args
                ));
                for s in &r.engines {
                    out.push(format!(
                        "{{\"name\":{},\"cat\":\"device_exec\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{},\"args\":{{\"model_id\":{},\"seq\":{},\"engine\":{}}}}}",
                        json_str(&format!("{} {}", r.model_name, engine_label(s.engine))),
                        us(s.start_ns),
                        us(s.end_ns.saturating_sub(s.start_ns)),
                        nc_pid(s.nc),
                        s.engine,
                        r.model_id,
                        r.seq,
                        json_str(engine_label(s.engine))
                    ));
                }
            }
        }
    }
    out
}

/// The profile label of engine index `e` (`PE`, `ACT`, … ; `?` for no engine).
fn engine_label(e: usize) -> &'static str {
    Engine::from_index(e).map_or("?", Engine::label)
}

/// Lane names for the NCs the events touch (metadata events).
fn metadata(events: &[Event]) -> Vec<String> {
    let mut ncs: Vec<usize> = events.iter().flat_map(|e| e.ncs()).collect();
    ncs.sort_unstable();
    ncs.dedup();
    let mut out =
        vec!["{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"host (nrt API)\"}}".to_string()];
    for nc in ncs {
        out.push(format!(
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"NeuronCore {nc}\"}}}}",
            nc_pid(nc)
        ));
        for e in Engine::ALL {
            out.push(format!(
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                nc_pid(nc),
                e.index(),
                e.label()
            ));
        }
        out.push(format!(
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"executions\"}}}}",
            nc_pid(nc),
            Engine::COUNT
        ));
    }
    out
}

/// A complete Chrome / Perfetto JSON trace document of `events`.
pub fn chrome_trace(events: &[Event]) -> String {
    let mut all = metadata(events);
    all.extend(trace_events(events));
    format!("{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n{}\n]}}\n", all.join(",\n"))
}

/// A sink that keeps every event (optionally only a model's executions).
pub struct Collector {
    model: Option<u64>,
    events: Ranked<Vec<Event>>,
}

impl Collector {
    /// Keep all events (`model` None) or one model's executions and every API event.
    pub fn new(model: Option<u64>) -> Self {
        Self { model, events: Ranked::new(Rank::Leaf, Vec::new()) }
    }
    /// Take what was collected.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock())
    }
}

impl Sink for Collector {
    fn record(&self, e: &Event) {
        if let (Some(m), Event::Exec(r)) = (self.model, e) {
            if r.model_id != m {
                return;
            }
        }
        self.events.lock().push(e.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::EngineTiming;
    use crate::timestamp::{EngineClock, SyncPoint};

    #[test]
    fn exec_records_map_device_spans_and_serialize() {
        let c = Arc::new(Collector::new(Some(7)));
        let id = subscribe(c.clone());
        let rt_epoch = Instant::now();
        let sync = TimestampSync {
            clocks: [EngineClock::nominal(1_000); Engine::COUNT],
            sync: SyncPoint { device_ns: 0, cpu_ns: 500 },
        };
        let mut t = NcTiming::default();
        // Device timestamps in ps from init 1000: PE from 2 µs to 5 µs after init.
        t.engines[0] = EngineTiming { start: Some(1_000 + 2_000_000), end: Some(1_000 + 5_000_000) };
        t.engines[3] = EngineTiming { start: Some(1_000 + 1_000_000), end: None };
        record_exec(7, "m", &[2], 1, Instant::now(), rt_epoch, NrtStatus::Success, &[t], &sync, None);
        record_exec(8, "other", &[0], 1, Instant::now(), rt_epoch, NrtStatus::Success, &[t], &sync, None);
        unsubscribe(id);
        let ev = c.take();
        assert_eq!(ev.len(), 1, "the collector filters on the model");
        let Event::Exec(r) = &ev[0] else { panic!("not an exec record") };
        assert_eq!(r.engines.len(), 1, "only engines with START and END");
        let s = r.engines[0];
        assert_eq!((s.nc, s.engine), (2, 0));
        assert_eq!(s.end_ns - s.start_ns, 3_000);
        assert_eq!(s.start_ns, instant_ns(rt_epoch) + 500 + 2_000);
        let doc = chrome_trace(&ev);
        assert!(doc.contains("\"cat\":\"device_exec\""), "{doc}");
        assert!(doc.contains("\"name\":\"m PE\""), "{doc}");
        assert!(doc.contains("\"name\":\"NeuronCore 2\""), "{doc}");
        assert!(doc.contains("\"dur\":3.000"), "{doc}");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
