//! libnrt's system-trace records from real executions on the simulator
//! (`runtime::sys_trace`, docs/profiling.md): each execution's `nc_exec_running` span is the
//! runtime's own device timing (`ExecTimings::device_ns`), an execution that completes with
//! numerical errors adds `numerical_err`, and one that first switches its NC from another model
//! adds `nc_model_switch`. One test: the profile sinks are process-wide.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::SUNDA;
use neff::builder;
use platform::Platform;
use runtime::profile::{self, Collector, Event};
use runtime::sys_trace::{self, Phase, Value, NC_EXEC_RUNNING, NC_MODEL_SWITCH, NUMERICAL_ERR};
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

fn u64_of(data: &[(&str, Value)], key: &str) -> u64 {
    match data.iter().find(|(k, _)| *k == key) {
        Some((_, Value::U64(v))) => *v,
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn records_of_real_executions_time_the_device_as_the_runtime_does() {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    let cfg = RuntimeConfig { exec_timeout: Duration::from_millis(2000), ..RuntimeConfig::physical() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    let mut d = builder::allreduce_model(1);
    d.target = SUNDA.name.to_string();
    let bytes = d.build().unwrap();
    let m = rt.load(&bytes, Some(0), None).unwrap();
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    i.add("input", ti);
    o.add("output", to);

    let c = Arc::new(Collector::new(Some(m.id)));
    let id = profile::subscribe(c.clone());
    let mut device_ns = Vec::new();
    for _ in 0..4 {
        let (s, t) = rt.execute(&m, &i, &o).unwrap();
        assert_eq!(s, NrtStatus::Success);
        device_ns.push(t.device_ns);
    }
    sim.inject("fp-nan@nc0:act".parse::<FaultSpec>().unwrap());
    assert_eq!(rt.execute(&m, &i, &o).unwrap().0, NrtStatus::ExecCompletedWithNumErr);
    // Another model on the same NC runs; the next execution of `m` switches the NC back.
    let other = rt.load(&bytes, Some(0), None).unwrap();
    assert_eq!(rt.execute(&other, &i, &o).unwrap().0, NrtStatus::Success);
    assert_eq!(rt.execute(&m, &i, &o).unwrap().0, NrtStatus::Success);
    profile::unsubscribe(id);

    let records: Vec<_> =
        c.take().iter().filter(|e| matches!(e, Event::Exec(_))).flat_map(|e| sys_trace::records(e, &|g| g)).collect();
    let running: Vec<_> = records.iter().filter(|r| r.event_type == NC_EXEC_RUNNING).collect();
    assert_eq!(running.len(), 12, "a start/stop pair per execution");
    for (k, pair) in running.chunks(2).take(4).enumerate() {
        let (s, e) = (&pair[0], &pair[1]);
        assert_eq!((s.phase, e.phase, s.tracking_id), (Phase::Start, Phase::Stop, e.tracking_id));
        let span = u64_of(&e.data, "nc_timestamp_ns") - u64_of(&s.data, "nc_timestamp_ns");
        let own = device_ns[k];
        println!("exec {}: nc_exec_running {span} ns, ExecTimings::device_ns {own} ns", k + 1);
        assert!(span.abs_diff(own) as f64 <= own as f64 * 0.01, "exec {}: {span} vs {own}", k + 1);
        assert_eq!(e.timestamp_ns - s.timestamp_ns, span, "the CPU-domain span is the device span");
    }
    let num: Vec<_> = records.iter().filter(|r| r.event_type == NUMERICAL_ERR).collect();
    assert_eq!(num.len(), 1, "{records:?}");
    assert_eq!(u64_of(&num[0].data, "exec_id"), 5);
    let sw: Vec<_> = records.iter().filter(|r| r.event_type == NC_MODEL_SWITCH).collect();
    assert_eq!(sw.len(), 2, "one switch, a start/stop pair: {sw:?}");
    assert_eq!(u64_of(&sw[0].data, "exec_id"), 6);
    assert!(sw[1].timestamp_ns >= sw[0].timestamp_ns);
    rt.unload(&other).unwrap();
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}
