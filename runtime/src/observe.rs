//! Observers: what the runtime tells monitoring, and how front ends plug monitoring in.
//!
//! The runtime core knows no monitoring. A front end builds its runtime with the
//! [`Attach`]ers it wants ([`crate::Runtime::with_observers`]; the CLI and libnrt.so install
//! the shared-memory counters and the debug endpoint, [`crate::monitoring`]). At every
//! `init` each attacher is handed the opened devices and may return an [`Observer`] for that
//! init…close session; the runtime then reports executions, loads, unloads and tensors to the
//! session's observers and calls [`Observer::close`] at `close`, before the devices go.
//!
//! This module names nothing else in the crate (a leaf): observers depend on it, never the
//! other way round.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hal::Device;
use neff::NrtStatus;

/// [`Observer::kind`] of the shared-memory counters (`crate::counters`).
pub const COUNTERS: &str = "counters";
/// [`Observer::kind`] of the debug endpoint (`crate::debug_endpoint`).
pub const DEBUG_ENDPOINT: &str = "debug endpoint";

/// A loaded model as listings name it (neuron-monitor's `loaded_models`).
#[derive(Debug, Clone, Copy)]
pub struct ModelDesc<'a> {
    /// The runtime's id of the model.
    pub id: u64,
    /// The NEFF's name.
    pub name: &'a str,
    /// The NEFF header's UUID.
    pub uuid: [u8; 16],
    /// Its global NCs.
    pub ncs: &'a [usize],
    /// Device memory its staging took on each.
    pub bytes_per_nc: &'a [u64],
}

/// How an execution ended, as [`Observer::execution`] is told.
#[derive(Debug, Clone, Copy)]
pub struct ExecutionEnd {
    pub status: NrtStatus,
    /// Host time, ns.
    pub latency_ns: u64,
    /// Device time, ns (0 when it failed before its START/END records).
    pub busy_ns: u64,
    /// Collectives-barrier warnings it emitted.
    pub barrier_warnings: u32,
    /// The host instant it ended.
    pub end: Instant,
}

/// What one init…close session of a runtime reports. Every method has a no-op default.
pub trait Observer: Send + Sync {
    /// What this observer is (for [`crate::Runtime::observer_path`]).
    fn kind(&self) -> &'static str;

    /// Where it publishes (a counters segment, a debug socket), if anywhere.
    fn path(&self) -> Option<PathBuf> {
        None
    }

    /// Whether [`Observer::execution`] does anything: observers that answer `false` are
    /// left out of the execute path's loop (no call per execute).
    fn observes_executions(&self) -> bool {
        true
    }

    /// An execution on global NCs `ncs` ended ([`ExecutionEnd`]).
    ///
    /// Called on the execute path with the lanes of `ncs` held (executions on an NC are
    /// reported one at a time): it must not block, allocate or make a syscall.
    fn execution(&self, _ncs: &[usize], _e: &ExecutionEnd) {}

    /// A model was loaded on global NCs `ncs`; its staging took `bytes_per_nc` of device
    /// memory on each.
    fn model_loaded(&self, _ncs: &[usize], _bytes_per_nc: &[u64]) {}

    /// A model was unloaded from `ncs`, giving back `bytes_per_nc`.
    fn model_unloaded(&self, _ncs: &[usize], _bytes_per_nc: &[u64]) {}

    /// A model was loaded (`loaded`) or unloaded: who it is, for listings. Called after
    /// [`Observer::model_loaded`] / [`Observer::model_unloaded`], off the execute path.
    fn model_listed(&self, _m: &ModelDesc<'_>, _loaded: bool) {}

    /// A tensor of `bytes` was allocated (`on_device`: on global NC `nc`'s device memory;
    /// else host DMA memory) or, with `freed`, released.
    fn tensor(&self, _nc: usize, _bytes: u64, _on_device: bool, _freed: bool) {}

    /// The session's logical NeuronCore size (physical NCs per logical one, `crate::cores`),
    /// once at init after the observer attached: listings group NCs by it.
    fn logical_nc_config(&self, _lnc: usize) {}

    /// The runtime is closing: stop using the devices (they are closed next). Models and
    /// tensors that outlive `close` may still report their release afterwards.
    fn close(&self) {}
}

/// Makes the observer of each `init` from the opened devices (global NC order); `None`
/// when it does not observe this time (switched off, or it could not start: it logs why —
/// monitoring is never worth failing `init`).
pub trait Attach: Send + Sync {
    fn attach(&self, devs: &[Device]) -> Option<Arc<dyn Observer>>;
}

impl<F> Attach for F
where
    F: Fn(&[Device]) -> Option<Arc<dyn Observer>> + Send + Sync,
{
    fn attach(&self, devs: &[Device]) -> Option<Arc<dyn Observer>> {
        self(devs)
    }
}

/// The observers of one session (cheap to clone: models and tensors keep theirs), and
/// among them those the execute path calls ([`Observer::observes_executions`]).
#[derive(Clone, Default)]
pub struct Observers {
    all: Arc<[Arc<dyn Observer>]>,
    exec: Arc<[Arc<dyn Observer>]>,
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.all.iter().map(|o| o.kind())).finish()
    }
}

impl Observers {
    /// These observers (in order).
    pub fn new(all: Vec<Arc<dyn Observer>>) -> Self {
        let exec: Vec<Arc<dyn Observer>> = all.iter().filter(|o| o.observes_executions()).cloned().collect();
        Self { all: all.into(), exec: exec.into() }
    }

    /// Ask every attacher for its observer of a session over `devs`.
    pub fn attach(attachers: &[Arc<dyn Attach>], devs: &[Device]) -> Self {
        Self::new(attachers.iter().filter_map(|a| a.attach(devs)).collect())
    }

    /// [`Observer::logical_nc_config`] to each.
    pub fn logical_nc_config(&self, lnc: usize) {
        for o in self.all.iter() {
            o.logical_nc_config(lnc);
        }
    }

    /// No observer.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Where the observer of `kind` publishes.
    pub fn path_of(&self, kind: &str) -> Option<PathBuf> {
        self.all.iter().find(|o| o.kind() == kind).and_then(|o| o.path())
    }

    /// [`Observer::execution`] to each (the execute path: a loop over a slice, no
    /// allocation).
    pub fn execution(&self, ncs: &[usize], e: &ExecutionEnd) {
        for o in self.exec.iter() {
            o.execution(ncs, e);
        }
    }

    /// [`Observer::model_loaded`] to each.
    pub fn model_loaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        for o in self.all.iter() {
            o.model_loaded(ncs, bytes_per_nc);
        }
    }

    /// [`Observer::model_unloaded`] to each.
    pub fn model_unloaded(&self, ncs: &[usize], bytes_per_nc: &[u64]) {
        for o in self.all.iter() {
            o.model_unloaded(ncs, bytes_per_nc);
        }
    }

    /// [`Observer::model_listed`] to each.
    pub fn model_listed(&self, m: &ModelDesc<'_>, loaded: bool) {
        for o in self.all.iter() {
            o.model_listed(m, loaded);
        }
    }

    /// [`Observer::close`] to each.
    pub fn close(&self) {
        for o in self.all.iter() {
            o.close();
        }
    }

    /// Report a tensor of `bytes` on global NC `nc` (`on_device`) or in host DMA memory; its
    /// release is reported when the returned value drops. `None` without observers.
    pub fn tensor(&self, nc: usize, bytes: u64, on_device: bool) -> Option<TensorAcct> {
        if self.is_empty() {
            return None;
        }
        for o in self.all.iter() {
            o.tensor(nc, bytes, on_device, false);
        }
        Some(TensorAcct { observers: self.clone(), nc, bytes, on_device })
    }
}

/// A tensor's report: made when the tensor is, its release reported when it drops.
#[derive(Debug)]
pub struct TensorAcct {
    observers: Observers,
    nc: usize,
    bytes: u64,
    on_device: bool,
}

impl Drop for TensorAcct {
    fn drop(&mut self) {
        for o in self.observers.all.iter() {
            o.tensor(self.nc, self.bytes, self.on_device, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Observer for Log {
        fn kind(&self) -> &'static str {
            "log"
        }
        fn path(&self) -> Option<PathBuf> {
            Some(PathBuf::from("/log"))
        }
        fn execution(&self, ncs: &[usize], e: &ExecutionEnd) {
            let (status, lat, busy, warn) = (e.status.code(), e.latency_ns, e.busy_ns, e.barrier_warnings);
            platform::sync::lock(&self.0).push(format!("exec {ncs:?} {status} {lat} {busy} {warn}"));
        }
        fn model_loaded(&self, ncs: &[usize], b: &[u64]) {
            platform::sync::lock(&self.0).push(format!("load {ncs:?} {b:?}"));
        }
        fn model_unloaded(&self, ncs: &[usize], b: &[u64]) {
            platform::sync::lock(&self.0).push(format!("unload {ncs:?} {b:?}"));
        }
        fn tensor(&self, nc: usize, bytes: u64, dev: bool, freed: bool) {
            platform::sync::lock(&self.0).push(format!("tensor {nc} {bytes} {dev} {freed}"));
        }
        fn close(&self) {
            platform::sync::lock(&self.0).push("close".into());
        }
    }

    /// Observes everything but executions.
    #[derive(Default)]
    struct NoExec(Log);

    impl Observer for NoExec {
        fn kind(&self) -> &'static str {
            "no-exec"
        }
        fn observes_executions(&self) -> bool {
            false
        }
        fn execution(&self, ncs: &[usize], e: &ExecutionEnd) {
            self.0.execution(ncs, e);
        }
        fn model_loaded(&self, ncs: &[usize], b: &[u64]) {
            self.0.model_loaded(ncs, b);
        }
    }

    fn end(status: NrtStatus, latency_ns: u64, busy_ns: u64, barrier_warnings: u32) -> ExecutionEnd {
        ExecutionEnd { status, latency_ns, busy_ns, barrier_warnings, end: Instant::now() }
    }

    #[test]
    fn an_observer_of_no_executions_is_not_called_on_the_execute_path() {
        let (a, q) = (Arc::new(Log::default()), Arc::new(NoExec::default()));
        let obs = Observers::new(vec![a.clone() as Arc<dyn Observer>, q.clone() as Arc<dyn Observer>]);
        obs.model_loaded(&[0], &[1]);
        obs.execution(&[0], &end(NrtStatus::Success, 1, 1, 0));
        assert_eq!(platform::sync::lock(&a.0).len(), 2);
        assert_eq!(*platform::sync::lock(&q.0 .0), vec!["load [0] [1]".to_string()]);
    }

    #[test]
    fn every_event_reaches_every_observer_and_tensors_report_their_release() {
        let (a, b) = (Arc::new(Log::default()), Arc::new(Log::default()));
        let obs = Observers::new(vec![a.clone() as Arc<dyn Observer>, b.clone() as Arc<dyn Observer>]);
        obs.model_loaded(&[0, 1], &[10, 20]);
        obs.execution(&[0, 1], &end(NrtStatus::Timeout, 5, 3, 1));
        let t = obs.tensor(1, 64, true);
        assert!(t.is_some());
        drop(t);
        obs.model_unloaded(&[0, 1], &[10, 20]);
        obs.close();
        let want = [
            "load [0, 1] [10, 20]".to_string(),
            format!("exec [0, 1] {} 5 3 1", NrtStatus::Timeout.code()),
            "tensor 1 64 true false".into(),
            "tensor 1 64 true true".into(),
            "unload [0, 1] [10, 20]".into(),
            "close".into(),
        ];
        assert_eq!(*platform::sync::lock(&a.0), want);
        assert_eq!(*platform::sync::lock(&b.0), want);
        assert_eq!(obs.path_of("log"), Some(PathBuf::from("/log")));
        assert_eq!(obs.path_of(COUNTERS), None);
    }

    #[test]
    fn no_observer_no_tensor_report() {
        let obs = Observers::default();
        assert!(obs.is_empty());
        assert!(obs.tensor(0, 64, false).is_none());
        assert_eq!(format!("{obs:?}"), "[]");
    }
}
