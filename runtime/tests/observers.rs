//! The observer interface (runtime::observe): the runtime core publishes nothing by itself;
//! what a front end installs sees every session's loads, executions, tensors, unloads and
//! close, in order; the monitoring observers (counters segment, debug endpoint) appear only
//! when installed and the endpoint stops at close.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use csr_maps::SUNDA;
use hal::Device;
use neff::builder;
use platform::Platform;
use runtime::observe::{Attach, ExecutionEnd, Observer, COUNTERS, DEBUG_ENDPOINT};
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice};

#[derive(Default)]
struct Rec {
    events: Mutex<Vec<String>>,
}

impl Rec {
    fn push(&self, e: String) {
        platform::sync::lock(&self.events).push(e);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *platform::sync::lock(&self.events))
    }
}

/// An observer of one session: writes to the shared log.
struct Session(Arc<Rec>);

impl Observer for Session {
    fn kind(&self) -> &'static str {
        "test"
    }
    fn path(&self) -> Option<PathBuf> {
        Some(PathBuf::from("/test"))
    }
    fn execution(&self, ncs: &[usize], e: &ExecutionEnd) {
        self.0.push(format!("exec {ncs:?} {}", e.status.name()));
    }
    fn model_loaded(&self, ncs: &[usize], bytes: &[u64]) {
        assert!(bytes.iter().all(|&b| b > 0), "staging took device memory: {bytes:?}");
        self.0.push(format!("load {ncs:?}"));
    }
    fn model_unloaded(&self, ncs: &[usize], _bytes: &[u64]) {
        self.0.push(format!("unload {ncs:?}"));
    }
    fn tensor(&self, nc: usize, bytes: u64, on_device: bool, freed: bool) {
        self.0.push(format!("tensor {nc} {bytes} {on_device} {}", if freed { "freed" } else { "made" }));
    }
    fn close(&self) {
        self.0.push("close".into());
    }
}

fn sim() -> Vec<Arc<dyn Platform>> {
    let s = SimDevice::new(SimConfig::new(&SUNDA).hbm_bytes(1 << 28)).unwrap();
    vec![Arc::new(s) as Arc<dyn Platform>]
}

fn opts() -> hal::DeviceOptions {
    hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() }
}

#[test]
fn an_installed_observer_sees_every_session_event_in_order() {
    let rec = Arc::new(Rec::default());
    let r = rec.clone();
    let attach = move |devs: &[Device]| -> Option<Arc<dyn Observer>> {
        r.push(format!("attach {} ncs", devs.iter().map(|d| d.nc_count()).sum::<usize>()));
        Some(Arc::new(Session(r.clone())))
    };
    let rt = Runtime::with_observers(vec![Arc::new(attach) as Arc<dyn Attach>]);
    assert_eq!(rt.observer_path("test"), None, "no session before init");
    rt.init(sim(), RuntimeConfig::physical(), opts()).unwrap();
    assert_eq!(rt.observer_path("test"), Some(PathBuf::from("/test")));
    assert_eq!(rt.counters_path(), None, "only what was installed observes");
    let ncs = rt.nc_count();
    assert_eq!(rec.take(), [format!("attach {ncs} ncs")]);

    let m = rt.load(&builder::single_nc_allreduce().build().unwrap(), Some(0), Some(1)).unwrap();
    let g = m.ncs.clone();
    let ti = rt.alloc_tensor("input", 128, true, 0).unwrap();
    let to = rt.alloc_tensor("output", 128, false, 0).unwrap();
    let (mut ins, mut outs) = (TensorSet::new(), TensorSet::new());
    ins.add("input", ti.clone());
    outs.add("output", to.clone());
    let (s, _) = rt.execute(&m, &ins, &outs).unwrap();
    assert_eq!(s, NrtStatus::Success);
    drop((ins, outs, ti, to));
    rt.unload(&m).unwrap();
    assert_eq!(
        rec.take(),
        [
            format!("load {g:?}"),
            format!("tensor {} 128 true made", g[0]),
            format!("tensor {} 128 false made", g[0]),
            format!("exec {g:?} {}", NrtStatus::Success.name()),
            format!("tensor {} 128 true freed", g[0]),
            format!("tensor {} 128 false freed", g[0]),
            format!("unload {g:?}"),
        ]
    );
    rt.close().unwrap();
    assert_eq!(rec.take(), ["close"]);
    assert_eq!(rt.observer_path("test"), None, "the session ended");

    // A new session gets a new observer.
    rt.init(sim(), RuntimeConfig::physical(), opts()).unwrap();
    assert_eq!(rec.take(), [format!("attach {ncs} ncs")]);
    rt.close().unwrap();
    assert_eq!(rec.take(), ["close"]);
}

#[test]
fn monitoring_publishes_only_when_installed() {
    // The only test of this binary that sets the variable (both observers read it at init).
    let dir = std::env::temp_dir().join(format!("nvfio-observers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var(runtime::env::SHM_DIR_VAR, &dir);
    let mine = |d: &std::path::Path| {
        let pid = format!("neuron-vfio.{}.", std::process::id());
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&pid))
            .collect();
        v.sort();
        v
    };

    let bare = Runtime::new();
    bare.init(sim(), RuntimeConfig::physical(), opts()).unwrap();
    assert_eq!(bare.counters_path(), None);
    assert_eq!(bare.observer_path(DEBUG_ENDPOINT), None);
    assert!(mine(&dir).is_empty(), "the core publishes nothing: {:?}", mine(&dir));
    bare.close().unwrap();

    let rt = Runtime::with_observers(runtime::monitoring());
    rt.init(sim(), RuntimeConfig::physical(), opts()).unwrap();
    let counters = rt.counters_path().expect("the counters observer publishes");
    let sock = rt.observer_path(DEBUG_ENDPOINT).expect("the debug endpoint serves");
    assert_eq!(rt.observer_path(COUNTERS), Some(counters.clone()));
    assert!(counters.starts_with(&dir) && counters.exists(), "{}", counters.display());
    assert!(sock.starts_with(&dir) && sock.exists(), "{}", sock.display());
    let snap = runtime::counters::Reader::open(&counters).unwrap().snapshot();
    assert_eq!(snap.ncs.len(), rt.nc_count());
    assert_eq!(runtime::debug_endpoint::discover(&dir).len(), 1);
    rt.close().unwrap();
    assert!(!sock.exists(), "the endpoint stops at close");
    assert!(mine(&dir).is_empty(), "nothing left after close: {:?}", mine(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}
