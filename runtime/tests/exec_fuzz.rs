//! The execute path fuzzed as a whole: a structure-aware mutator of NEFFs — manifests (graphs,
//! vars, queues, replica groups), programs (collective fields, events, slots removed,
//! duplicated, swapped or with a field changed), DMA blocks, and the tar structure (members
//! dropped, duplicated, reordered, cut or edited; the archive cut at any offset) — driving
//! parse → load → execute → unload on the simulator next to a victim model, with a watchdog.
//!
//! Each case must end in a refusal at load or in an execution that returns within its
//! timeout; nothing may panic; nothing may escape: the device's ownership region table must
//! refuse no access of a model the loader accepted, the victim's tensor and its next run must
//! be intact, and device memory and IOMMU mappings must come back to the baseline after the
//! unload. A case over its time limit, a panic or an escape is saved as a regression fixture
//! (`EXEC_FUZZ_SAVE`, default `target/exec-fuzz/`; move it to `runtime/tests/fixtures/exec/`,
//! which [`fixtures_stay_fixed`] replays) and fails the test.
//!
//! CI runs a bounded sample (`EXEC_FUZZ_CASES`, default 1500; `EXEC_FUZZ_THREADS` workers,
//! default 2, each on a device of its own). The long run (docs/trust.md,
//! "Mutation testing"):
//!
//! ```text
//! EXEC_FUZZ_CASES=1000000 EXEC_FUZZ_SEED=1 cargo test --release -p runtime --test exec_fuzz -- --nocapture
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csr_maps::CAYMAN;
use isa::slot::{Events, Instruction, UpdateMode, WaitMode, SLOT_BYTES};
use neff::builder::{self, Body, ModelDesc, VarDesc, WriteOptions};
use neff::{Engine, VarKind};
use platform::Platform;
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

/// The core timeout of every case's execution.
const EXEC_TIMEOUT: Duration = Duration::from_millis(20);
/// A case running longer than this is a hang (load + execute + unload of a small model take
/// milliseconds and the timeout above bounds the execute; the margin is for a run starved of
/// CPU — replay a flagged case alone before calling it a hang).
const CASE_LIMIT: Duration = Duration::from_secs(60);

/// xorshift64*: deterministic, seeded per case.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
    /// A value biased to the edges: 0, 1, small, powers of two ± 1, the type's maximum.
    fn edgy(&mut self, max: u64) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => 1,
            2 => self.next() % 64,
            3 => (1u64 << self.below(64)).min(max),
            4 => (1u64 << self.below(64)).wrapping_sub(1).min(max),
            _ => max,
        }
    }
}

/// A base model: the all-reduce shapes on 1, 2 or 4 NCs, or one with a weight.
fn base(rng: &mut Rng) -> ModelDesc {
    let mut d = match rng.below(4) {
        0 => builder::allreduce_model(1),
        1 => builder::allreduce_model(2),
        2 => builder::allreduce_model(4),
        _ => builder::weights_model(vec![7u8; 4096], neff::WeightFormat::Raw),
    };
    d.target = CAYMAN.name.to_string();
    d
}

fn slots(code: &[u8]) -> usize {
    code.len() / SLOT_BYTES
}

fn slot(code: &[u8], k: usize) -> Instruction {
    let mut b = [0u8; SLOT_BYTES];
    b.copy_from_slice(&code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES]);
    Instruction::decode(&b)
}

fn set_slot(code: &mut [u8], k: usize, i: &Instruction) {
    code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES].copy_from_slice(&i.encode());
}

fn events(rng: &mut Rng, e: &mut Events) {
    match rng.below(4) {
        0 => e.wait_idx = rng.below(32) as u8,
        1 => e.semaphore_value = rng.edgy(u32::MAX as u64) as u32,
        2 => e.wait_mode = if rng.chance(2) { WaitMode::None } else { e.wait_mode },
        _ => {
            e.update_idx = rng.below(32) as u8;
            if rng.chance(3) {
                e.update_mode = UpdateMode::None;
            }
        }
    }
}

/// One mutation of a program: a slot removed, duplicated, swapped, or a field of it changed.
fn mutate_program(rng: &mut Rng, code: &mut Vec<u8>) {
    let n = slots(code);
    if n == 0 {
        return;
    }
    let k = rng.below(n);
    match rng.below(6) {
        0 => {
            code.drain(k * SLOT_BYTES..(k + 1) * SLOT_BYTES);
        }
        1 => {
            let s: Vec<u8> = code[k * SLOT_BYTES..(k + 1) * SLOT_BYTES].to_vec();
            let at = rng.below(n + 1) * SLOT_BYTES;
            code.splice(at..at, s);
        }
        2 => {
            let j = rng.below(n);
            let (a, b) = (slot(code, k), slot(code, j));
            set_slot(code, k, &b);
            set_slot(code, j, &a);
        }
        3 => {
            // A raw byte past the header: any field of any slot kind.
            let at = k * SLOT_BYTES + 4 + rng.below(SLOT_BYTES - 4);
            code[at] = rng.next() as u8;
        }
        _ => {
            let mut i = slot(code, k);
            match &mut i {
                Instruction::TriggerCollective(c) => match rng.below(8) {
                    0 => c.group_id = rng.below(4) as u16,
                    1 => c.num_elements = rng.edgy(u64::MAX),
                    2 => c.dtype = [0x06, 0x07, 0x08, 0x0A, rng.next() as u8][rng.below(5)],
                    3 => c.op = [0x04, 0x08, rng.next() as u8][rng.below(3)],
                    4 => c.ctype = [0x01, 0x02, 0x03, rng.next() as u8][rng.below(4)],
                    5 => c.input_tensor_id = rng.below(8) as u32,
                    6 => c.src_offset_elems = rng.edgy(u64::MAX),
                    _ => events(rng, &mut c.events),
                },
                Instruction::DmaTrigger(t) => events(rng, &mut t.events),
                Instruction::EventSemaphore(e) => events(rng, &mut e.events),
                _ => {}
            }
            set_slot(code, k, &i);
        }
    }
}

/// One mutation of the model description.
fn mutate_model(rng: &mut Rng, d: &mut ModelDesc) {
    let gn = d.graphs.len();
    let gi = rng.below(gn);
    match rng.below(10) {
        0 => {
            // Replica groups: random members (some outside, some twice), or none.
            let groups: Vec<Vec<u32>> =
                (0..1 + rng.below(2)).map(|_| (0..rng.below(5)).map(|_| rng.below(6) as u32).collect()).collect();
            if rng.chance(2) {
                d.graphs.iter_mut().for_each(|g| g.replica_groups = groups.clone());
            } else {
                d.graphs[gi].replica_groups = groups;
            }
        }
        1 => {
            let g = &mut d.graphs[gi];
            let k = rng.below(g.vars.len());
            if let Some(v) = g.vars.get_mut(k) {
                v.size = rng.edgy(1 << 40);
            }
        }
        2 => {
            let g = &mut d.graphs[gi];
            let kinds = [VarKind::Input, VarKind::Output, VarKind::TmpBuf, VarKind::StateBuffer, VarKind::Virtual];
            if rng.chance(2) {
                let k = rng.below(g.vars.len());
                if let Some(v) = g.vars.get_mut(k) {
                    v.kind = kinds[rng.below(kinds.len())];
                }
            } else {
                let n = g.vars.len();
                g.vars.push(VarDesc::new(&format!("f{n}"), kinds[rng.below(kinds.len())], rng.edgy(1 << 24)));
            }
        }
        3 => {
            let g = &mut d.graphs[gi];
            if !g.vars.is_empty() {
                g.vars.remove(rng.below(g.vars.len()));
            }
        }
        4 => {
            // DMA blocks: a descriptor's size or endpoints, or a block dropped.
            let g = &mut d.graphs[gi];
            let names: Vec<String> = g.vars.iter().map(|v| v.name.clone()).collect();
            if let Some(e) = g.engines.iter_mut().find(|e| !e.dma_blocks.is_empty()) {
                let b = rng.below(e.dma_blocks.len());
                if rng.chance(4) {
                    e.dma_blocks.remove(b);
                } else if let Some(desc) = e.dma_blocks[b].descs.first_mut() {
                    match rng.below(3) {
                        0 => desc.from_sizes = vec![rng.edgy(1 << 33)],
                        1 => desc.to = names.get(rng.below(names.len())).cloned().unwrap_or_default(),
                        _ => desc.from_steps = vec![rng.edgy(1 << 20) as i64 - (1 << 19)],
                    }
                }
            }
        }
        5 => {
            let g = &mut d.graphs[gi];
            let k = rng.below(g.queues.len());
            if let Some(q) = g.queues.get_mut(k) {
                if rng.chance(2) {
                    q.semaphore = Some(rng.below(40) as u32);
                } else {
                    q.owner = Engine::ALL[rng.below(5)];
                }
            }
        }
        6 if gn > 1 => {
            d.graphs.remove(gi);
        }
        7 if gn < 4 => {
            let mut g = d.graphs[gi].clone();
            g.name = format!("sg{gn:02}");
            d.graphs.push(g);
        }
        8 => {
            let g = &mut d.graphs[gi];
            if !g.engines.is_empty() {
                let e = rng.below(g.engines.len());
                if rng.chance(3) {
                    g.engines[e].code.clear();
                } else {
                    g.engines.remove(e);
                }
            }
        }
        _ => {
            let g = &mut d.graphs[gi];
            if !g.engines.is_empty() {
                let e = rng.below(g.engines.len());
                mutate_program(rng, &mut g.engines[e].code);
            }
        }
    }
}

/// The NEFF of a mutated description, then perhaps a mutation of its tar structure.
fn case_bytes(seed: u64) -> Option<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut d = base(&mut rng);
    for _ in 0..1 + rng.below(4) {
        mutate_model(&mut rng, &mut d);
    }
    // Fast compression: the cases are small and many.
    let opts = WriteOptions { level: 1, ..WriteOptions::default() };
    if !rng.chance(4) {
        return d.to_bytes(&opts).ok();
    }
    let mut members: Vec<(String, Body<'_>)> = d.members();
    let n = members.len();
    match rng.below(6) {
        0 if n > 1 => {
            members.remove(rng.below(n));
        }
        1 => {
            let k = rng.below(n);
            let (name, body) = &members[k];
            let dup = (name.clone(), Body::Owned(body_bytes(body)));
            members.insert(rng.below(n + 1), dup);
        }
        2 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            members.swap(a, b);
        }
        3 => {
            // A member's body cut or one byte of it changed (JSON, programs, weights).
            let k = rng.below(n);
            let mut b = body_bytes(&members[k].1);
            if !b.is_empty() {
                if rng.chance(2) {
                    b.truncate(rng.below(b.len()));
                } else {
                    let at = rng.below(b.len());
                    b[at] = rng.next() as u8;
                }
            }
            members[k].1 = Body::Owned(b);
        }
        _ => {
            // The archive itself cut: at a block boundary (a member's end) or anywhere.
            let mut tar = builder::tar_bytes(&members, &opts).ok()?;
            let cut = if rng.chance(2) { rng.below(tar.len() / 512 + 1) * 512 } else { rng.below(tar.len() + 1) };
            tar.truncate(cut);
            return builder::wrap_archive(&tar, d.header(), &opts).ok();
        }
    }
    builder::pack(&members, d.header(), &opts).ok()
}

fn body_bytes(b: &Body<'_>) -> Vec<u8> {
    match b {
        Body::Owned(v) => v.clone(),
        Body::Borrowed(s) => s.to_vec(),
        Body::Prefixed(h, s) => [h.as_slice(), s].concat(),
    }
}

/// The runtime a worker runs its cases on: one CAYMAN device (8 NCs), a victim model on NC 0
/// with a patterned tensor beside it.
struct Bench {
    sim: SimDevice,
    rt: Runtime,
    victim: ModelHandle,
    victim_out: Vec<u8>,
    pattern: Vec<u8>,
    tensor: Arc<runtime::Tensor>,
    baseline: (u64, i64),
}

impl Bench {
    fn new() -> Self {
        let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Inline).hbm_bytes(1 << 30)).unwrap();
        let rt = Runtime::new();
        let cfg = RuntimeConfig { exec_timeout: EXEC_TIMEOUT, ..RuntimeConfig::physical() };
        let opts =
            hal::DeviceOptions { hbm_limit: Some(1 << 30), poll: hal::fwio::PollTiming::fast(), ..Default::default() };
        rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
        let mut v = builder::allreduce_model(1);
        v.target = CAYMAN.name.to_string();
        let victim = rt.load(&v.build().unwrap(), Some(0), None).unwrap();
        let victim_out = run(&rt, &victim).expect("the victim runs");
        let tensor = rt.alloc_tensor("victim", 4096, true, 0).unwrap();
        let pattern: Vec<u8> = (0..4096u32).map(|k| (k * 7 + 3) as u8).collect();
        tensor.write(0, &pattern).unwrap();
        let st = sim.stats();
        Self { baseline: (st.iommu_mappings, st.device_bytes), sim, rt, victim, victim_out, pattern, tensor }
    }

    /// One case; Err names an escape.
    fn case(&self, bytes: &[u8], tally: &Tally) -> Result<(), String> {
        let t = Instant::now();
        let loaded = self.rt.load(bytes, Some(2), None);
        tally.ns_load.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let Ok(m) = loaded else {
            tally.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        tally.loaded.fetch_add(1, Ordering::Relaxed);
        let refused = self.sim.stats().oob_refused;
        let t = Instant::now();
        let r = run(&self.rt, &m);
        tally.ns_exec.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let t = Instant::now();
        let checked = self.after(m, r, refused, tally);
        tally.ns_check.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        checked
    }

    fn after(&self, m: ModelHandle, r: Result<Vec<u8>, NrtStatus>, refused: u64, tally: &Tally) -> Result<(), String> {
        if r.is_ok() {
            tally.ran_ok.fetch_add(1, Ordering::Relaxed);
        }
        if self.sim.stats().oob_refused != refused {
            return Err("the region table refused an access of an accepted model".into());
        }
        if r == Err(NrtStatus::ExecOob) {
            return Err("an accepted model's execution was out of bounds".into());
        }
        self.rt.unload(&m).map_err(|e| format!("unload: {e}"))?;
        let mut now = vec![0u8; self.pattern.len()];
        self.tensor.read(0, &mut now).map_err(|e| format!("victim tensor read: {e}"))?;
        if now != self.pattern {
            return Err("the victim's tensor changed".into());
        }
        if run(&self.rt, &self.victim).as_ref() != Ok(&self.victim_out) {
            return Err("the victim's next run differs".into());
        }
        let st = self.sim.stats();
        if (st.iommu_mappings, st.device_bytes) != self.baseline {
            return Err(format!("device state not back to baseline: {st:?} vs {:?}", self.baseline));
        }
        Ok(())
    }
}

/// Execute `m` once with every input zero-filled; the first output's bytes.
fn run(rt: &Runtime, m: &ModelHandle) -> Result<Vec<u8>, NrtStatus> {
    let nc = m.ncs.first().copied().unwrap_or(0);
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    for t in &m.inputs {
        let x = rt.alloc_tensor(&t.name, t.size.max(1), true, nc).map_err(|e| e.status)?;
        i.add(&t.name, x);
    }
    let mut first = None;
    for t in &m.outputs {
        let x = rt.alloc_tensor(&t.name, t.size.max(1), true, nc).map_err(|e| e.status)?;
        first.get_or_insert_with(|| x.clone());
        o.add(&t.name, x);
    }
    let (st, _) = rt.execute(m, &i, &o).map_err(|e| e.status)?;
    if st != NrtStatus::Success {
        return Err(st);
    }
    let mut out = Vec::new();
    if let Some(t) = first {
        out = vec![0u8; (t.size as usize).min(1 << 20)];
        t.read(0, &mut out).map_err(|e| e.status)?;
    }
    Ok(out)
}

#[derive(Default)]
struct Tally {
    /// Nanoseconds spent making cases, loading, executing, and in the unload and checks.
    ns_make: AtomicU64,
    ns_load: AtomicU64,
    ns_exec: AtomicU64,
    ns_check: AtomicU64,
    cases: AtomicU64,
    refused: AtomicU64,
    loaded: AtomicU64,
    ran_ok: AtomicU64,
}

fn save_dir() -> PathBuf {
    std::env::var_os("EXEC_FUZZ_SAVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/exec-fuzz"))
}

fn save(bytes: &[u8], seed: u64, why: &str) -> PathBuf {
    let dir = save_dir();
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("case-{seed:016x}.neff"));
    let _ = std::fs::write(&p, bytes);
    let _ = std::fs::write(p.with_extension("txt"), why);
    p
}

/// What the watchdog watches: the case in flight and when it began.
struct InFlight {
    seed: u64,
    bytes: Vec<u8>,
    since: Instant,
}

#[test]
fn load_execute_unload_never_hangs_panics_or_escapes() {
    let cases: u64 = std::env::var("EXEC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let seed0: u64 = std::env::var("EXEC_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    // Workers, each with a device of its own, take every `threads`-th case (sleeps in the
    // device paths overlap).
    let threads: u64 = std::env::var("EXEC_FUZZ_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2).max(1);
    let tally = Arc::new(Tally::default());
    let flights: Arc<Vec<Mutex<Option<InFlight>>>> = Arc::new((0..threads).map(|_| Mutex::new(None)).collect());
    let running = Arc::new(AtomicU64::new(threads));
    let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|w| {
            let (tally, flights, running, failure) = (tally.clone(), flights.clone(), running.clone(), failure.clone());
            std::thread::spawn(move || {
                let mut bench = Bench::new();
                let mut mine = 0u64;
                for k in (w..cases).step_by(threads as usize) {
                    if failure.lock().unwrap().is_some() {
                        break;
                    }
                    let seed = seed0.wrapping_mul(1_000_003).wrapping_add(k);
                    let t = Instant::now();
                    let made = case_bytes(seed);
                    tally.ns_make.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    let Some(bytes) = made else { continue };
                    *flights[w as usize].lock().unwrap() =
                        Some(InFlight { seed, bytes: bytes.clone(), since: Instant::now() });
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bench.case(&bytes, &tally)));
                    let why = match r {
                        Ok(Ok(())) => None,
                        Ok(Err(escape)) => Some(format!("escape: {escape}")),
                        Err(p) => Some(format!(
                            "panic: {}",
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        )),
                    };
                    if let Some(why) = why {
                        let p = save(&bytes, seed, &why);
                        *failure.lock().unwrap() = Some(format!("case {seed:#x} ({}): {why}", p.display()));
                        break;
                    }
                    let n = tally.cases.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_multiple_of(100_000) {
                        eprintln!("exec_fuzz: {n} cases in {:.0} s", started.elapsed().as_secs_f64());
                    }
                    // A fresh device now and then: a long run also covers fresh-device paths.
                    mine += 1;
                    if mine.is_multiple_of(5_000) {
                        bench.rt.close().unwrap();
                        bench = Bench::new();
                    }
                }
                *flights[w as usize].lock().unwrap() = None;
                running.fetch_sub(1, Ordering::AcqRel);
            })
        })
        .collect();
    // The watchdog.
    while running.load(Ordering::Acquire) > 0 && failure.lock().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(50));
        for f in flights.iter() {
            let over = f
                .lock()
                .unwrap()
                .as_ref()
                .filter(|f| f.since.elapsed() > CASE_LIMIT)
                .map(|f| (f.seed, f.bytes.clone()));
            if let Some((seed, bytes)) = over {
                let p = save(&bytes, seed, &format!("hang: over {CASE_LIMIT:?}"));
                panic!("case {seed:#x} ran over {CASE_LIMIT:?}: saved as {}", p.display());
            }
        }
    }
    if let Some(f) = failure.lock().unwrap().take() {
        panic!("{f}");
    }
    for w in workers {
        w.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let n = tally.cases.load(Ordering::Relaxed);
    eprintln!(
        "exec_fuzz: {n} cases in {secs:.1} s ({:.0} cases/s): {} refused at load, {} loaded, {} ran to NRT_SUCCESS; 0 panics, 0 hangs, 0 escapes",
        n as f64 / secs,
        tally.refused.load(Ordering::Relaxed),
        tally.loaded.load(Ordering::Relaxed),
        tally.ran_ok.load(Ordering::Relaxed)
    );
    let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6 / n.max(1) as f64;
    eprintln!(
        "exec_fuzz: per case {:.2} ms making, {:.2} ms loading, {:.2} ms executing, {:.2} ms unload and checks",
        ms(&tally.ns_make),
        ms(&tally.ns_load),
        ms(&tally.ns_exec),
        ms(&tally.ns_check)
    );
    // The mutator reaches both sides: refusals and models that load and run.
    assert!(tally.refused.load(Ordering::Relaxed) > 0 && tally.ran_ok.load(Ordering::Relaxed) > 0);
}

/// Every saved fixture (`runtime/tests/fixtures/exec/*.neff`) is refused at load or returns
/// within its timeout, without an escape.
#[test]
fn fixtures_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exec");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "neff")).collect()
        })
        .unwrap_or_default();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    let bench = Bench::new();
    let tally = Tally::default();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let t = Instant::now();
        bench.case(&bytes, &tally).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(t.elapsed() < CASE_LIMIT, "{}: {:?}", f.display(), t.elapsed());
    }
}
