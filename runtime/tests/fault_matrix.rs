//! The fault matrix: every fault kind the simulator injects × every engine or queue it applies
//! to × SUNDA / CAYMAN / MARIANA × a 1-NC and a 2-NC model (the fault on the model's last NC).
//! Per case: the status, whether the model is poisoned, the time to report, and a clean run
//! after unload + reload. The device runs inline (deterministic, no wake-up latency) and the
//! execution timeout is short, so the whole matrix stays within seconds.
//!
//! The per-kind summary is printed (`--nocapture`) and must equal the table in
//! docs/faults.md, so a behaviour change shows up as a doc diff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use neff::builder;
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{FaultSpec, SimConfig, SimDevice, Timing};

const TIMEOUT: Duration = Duration::from_millis(250);
/// A fault is "prompt" when reported within this (well under the timeout).
const PROMPT: Duration = Duration::from_millis(100);

struct Kind {
    name: &'static str,
    /// Targets (`:pe`, `:q0`, or "" for an NC-wide fault).
    targets: &'static [&'static str],
    want: NrtStatus,
    poisons: bool,
}

const E: &[&str] = &[":pe", ":act", ":pool", ":dve", ":sp"];

fn kinds() -> Vec<Kind> {
    use NrtStatus::*;
    let k = |name, targets, want, poisons| Kind { name, targets, want, poisons };
    vec![
        k("fp-nan", E, ExecCompletedWithNumErr, false),
        k("transient", E, ExecCompletedWithErr, false),
        k("semaphore-error", E, ExecCompletedWithErr, false),
        k("seq-fatal", E, ExecCompletedWithErr, true),
        k("oob", E, ExecOob, true),
        k("out-of-order", E, Failure, true),
        k("nq-overflow", E, ExecSwNqOverflow, true),
        k("nc-ue", E, ExecHwErrNcUe, true),
        k("hang", E, Timeout, true),
        // Every NEFF DMA queue is queue 0 of one of the NC's DMA engines.
        k("dma-abort", &[":q0"], ExecHwErrDmaAbort, true),
        k("hbm-ue", &[""], ExecHwErrHbmUe, true),
        k("hbm-ue-repairable", &[""], ExecHwErrRepairableHbmUe, true),
        k("cc-error", &[""], ExecHwErrCollectives, true),
        k("net-proxy", &[""], NetworkProxyFailure, true),
    ]
}

fn model_bytes(arch: &Arch, ncs: usize) -> Vec<u8> {
    let mut d = builder::allreduce_model(ncs);
    d.target = arch.name.to_string();
    d.build().unwrap()
}

fn exec(rt: &Runtime, m: &ModelHandle) -> (NrtStatus, Vec<u8>) {
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to.clone());
    let s = rt.execute(m, &i, &o).unwrap().0;
    (s, to.to_vec().unwrap())
}

struct Outcome {
    status: NrtStatus,
    poisoned: bool,
    took: Duration,
}

/// One simulated device and runtime per (arch, model): every case loads, runs clean, injects,
/// runs, checks, unloads, and reloads for a clean run.
struct Bench {
    arch: &'static Arch,
    ncs: usize,
    sim: SimDevice,
    rt: Runtime,
    bytes: Vec<u8>,
}

impl Bench {
    fn new(arch: &'static Arch, ncs: usize) -> Self {
        let sim = SimDevice::new(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
        let rt = Runtime::new();
        let cfg = RuntimeConfig { exec_timeout: TIMEOUT, ..RuntimeConfig::physical() };
        let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
        Self { arch, ncs, sim, rt, bytes: model_bytes(arch, ncs) }
    }

    fn case(&self, spec: &str) -> Outcome {
        let (arch, ncs, rt) = (self.arch, self.ncs, &self.rt);
        let m = rt.load(&self.bytes, Some(0), None).unwrap();
        let (s, clean) = exec(rt, &m);
        assert_eq!(s, NrtStatus::Success, "{arch} {ncs}-NC {spec}: clean run first");
        self.sim.inject(spec.parse::<FaultSpec>().unwrap());
        let t = Instant::now();
        let (status, out) = exec(rt, &m);
        let took = t.elapsed();
        let poisoned = m.poisoned().is_some();
        if poisoned {
            assert_eq!(m.poisoned(), Some(status), "{arch} {ncs}-NC {spec}");
            assert_eq!(exec(rt, &m).0, NrtStatus::ExecUnitUnrecoverable, "{arch} {ncs}-NC {spec}: fail-stop");
        } else {
            assert_eq!(out, clean, "{arch} {ncs}-NC {spec}: a soft status keeps the result");
            assert_eq!(exec(rt, &m), (NrtStatus::Success, clean.clone()), "{arch} {ncs}-NC {spec}: runs again");
        }
        if matches!(status, NrtStatus::ExecHwErrHbmUe | NrtStatus::ExecHwErrRepairableHbmUe) {
            assert_eq!(out, vec![0u8; 128], "{arch} {ncs}-NC {spec}: damaged output not returned");
        }
        rt.unload(&m).unwrap();
        let m2 = rt.load(&self.bytes, Some(0), None).unwrap();
        assert_eq!(exec(rt, &m2), (NrtStatus::Success, clean), "{arch} {ncs}-NC {spec}: clean after reload");
        rt.unload(&m2).unwrap();
        Outcome { status, poisoned, took }
    }

    fn close(self) {
        self.rt.close().unwrap();
        let st = self.sim.stats();
        assert_eq!((st.iommu_mappings, st.device_bytes), (0, 0), "{} {}-NC: {st:?}", self.arch, self.ncs);
    }
}

/// The doc's table rows for the observed outcomes.
fn row(k: &Kind, worst: Duration) -> String {
    let targets = if k.targets == [""] {
        "NC".to_string()
    } else {
        k.targets.iter().map(|t| t.trim_start_matches(':')).collect::<Vec<_>>().join(", ")
    };
    let report = if worst < PROMPT { "prompt" } else { "at the execution timeout" };
    format!(
        "| `{}` | {} | {} {} | {} | {} | yes |",
        k.name,
        targets,
        k.want.code(),
        k.want.name(),
        if k.poisons { "yes" } else { "no" },
        report
    )
}

/// Every case of one (arch, model): the worst time to report per kind, and the case count.
fn bench(arch: &'static Arch, ncs: usize, kinds: &[Kind]) -> (Vec<Duration>, usize) {
    let b = Bench::new(arch, ncs);
    let mut worst = vec![Duration::ZERO; kinds.len()];
    let mut cases = 0;
    for (k, w) in kinds.iter().zip(worst.iter_mut()) {
        for target in k.targets {
            let spec = format!("{}@nc{}{}", k.name, ncs - 1, target);
            let o = b.case(&spec);
            assert_eq!(o.status, k.want, "{arch} {ncs}-NC {spec}");
            assert_eq!(o.poisoned, k.poisons, "{arch} {ncs}-NC {spec}: poisoning");
            if k.want == NrtStatus::Timeout {
                assert!(
                    o.took >= TIMEOUT,
                    "{arch} {ncs}-NC {spec}: a hang is reported at the timeout, not after {:?}",
                    o.took
                );
            } else {
                assert!(o.took < PROMPT, "{arch} {ncs}-NC {spec}: took {:?}", o.took);
            }
            *w = (*w).max(o.took);
            cases += 1;
        }
    }
    b.close();
    (worst, cases)
}

#[test]
fn fault_matrix() {
    let t0 = Instant::now();
    let kinds = kinds();
    // One thread per (arch, model): independent devices and runtimes.
    let results: Vec<(Vec<Duration>, usize)> = std::thread::scope(|sc| {
        let kinds = &kinds;
        let handles: Vec<_> = [&SUNDA, &CAYMAN, &MARIANA]
            .into_iter()
            .flat_map(|arch| [1usize, 2].map(|ncs| (arch, ncs)))
            .map(|(arch, ncs)| sc.spawn(move || bench(arch, ncs, kinds)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut worst = vec![Duration::ZERO; kinds.len()];
    let mut cases = 0;
    for (w, n) in results {
        for (a, b) in worst.iter_mut().zip(w) {
            *a = (*a).max(b);
        }
        cases += n;
    }
    let mut rows = Vec::new();
    for (k, w) in kinds.iter().zip(&worst) {
        println!("{:<20} worst time to report {:>8.1} ms", k.name, w.as_secs_f64() * 1e3);
        rows.push(row(k, *w));
    }
    let table = rows.join("\n");
    println!("{cases} cases in {:.1} s\n{table}", t0.elapsed().as_secs_f64());
    let doc = include_str!("../../docs/faults.md");
    assert!(doc.contains(&table), "docs/faults.md's matrix differs from the run; the run gives:\n{table}");
}
