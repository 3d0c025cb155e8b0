//! `neuron-vfio bench exec`: host overhead per synchronous execute, completion latency
//! (spin vs libnrt's usleep(1)), heap allocations and syscalls per execute — all measured in
//! one run on the simulator.
//!
//! - Host overhead: an Inline simulator runs device work inside the kickoff MMIO write; the
//!   simulator counts that time, and it is subtracted from each execute's wall time, so the
//!   figure is host work only (bind, ring staging, kickoff, harvest, finalize).
//! - Completion latency: a Threaded simulator (a device thread per NC that parks when idle);
//!   the lag from the last END record's device timestamp (rescaled to host time through the
//!   sync point taken at load) to the host seeing completion, with the spin policy and with
//!   `usleep(1)` between steps.
//! - Allocations: a counting global allocator; syscalls: read/write syscalls from
//!   /proc/self/io and voluntary context switches (getrusage) around the measured loop.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Args;
use platform::Platform;
use runtime::{NrtStatus, PollPolicy, Runtime, RuntimeConfig, TensorSet};
use serde_json::json;
use sim::{SimConfig, SimDevice, Timing};

use crate::report::CliError;

/// Heap allocations made by this process (counted by [`Counting`]).
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Heap allocations made by the current thread.
    static THREAD_ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// Allocations made by the calling thread so far.
pub fn thread_allocs() -> u64 {
    THREAD_ALLOCS.try_with(|c| c.get()).unwrap_or(0)
}

/// A global allocator that counts allocations and delegates to the system allocator.
pub struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counter is a relaxed atomic with no effect on memory safety.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

/// Arguments of `bench exec`.
#[derive(Args, Debug)]
pub struct ExecBenchArgs {
    /// Measured executions per scenario.
    #[arg(long, default_value_t = 20000)]
    pub iters: u32,
    /// Simulated arch.
    #[arg(long, default_value = "sunda")]
    pub arch: String,
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn proc_io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let get =
        |k: &str| s.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
    (get("syscr:"), get("syscw:"))
}

fn voluntary_switches() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

struct Setup {
    rt: Runtime,
    sim: SimDevice,
    m: runtime::ModelHandle,
    ins: TensorSet,
    outs: TensorSet,
}

fn setup(arch: &'static csr_maps::Arch, timing: Timing, poll: PollPolicy) -> Result<Setup, CliError> {
    let sim = SimDevice::new(SimConfig::new(arch).timing(timing).hbm_bytes(1 << 28)).map_err(CliError::failure)?;
    let rt = Runtime::new();
    let cfg = RuntimeConfig { poll, ..RuntimeConfig::default() };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    let e = |e: runtime::RtError| CliError::new(e.status, e.message());
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).map_err(e)?;
    let mut d = neff::builder::single_nc_allreduce();
    d.target = "*".into();
    let bytes = d.build().map_err(CliError::failure)?;
    let m = rt.load(&bytes, None, None).map_err(e)?;
    let ti = rt.alloc_tensor("input", 128, true, m.ncs[0]).map_err(e)?;
    let to = rt.alloc_tensor("output", 128, true, m.ncs[0]).map_err(e)?;
    ti.write(0, &[0x3Fu8; 128]).map_err(e)?;
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to);
    Ok(Setup { rt, sim, m, ins, outs })
}

fn exec(s: &Setup) -> Result<runtime::ExecTimings, CliError> {
    let (st, t) = s.rt.execute(&s.m, &s.ins, &s.outs).map_err(|e| CliError::new(e.status, e.message()))?;
    if st != NrtStatus::Success {
        return Err(CliError::new(st, "execution failed during the benchmark"));
    }
    Ok(t)
}

/// Per-thread voluntary context switches of the calling thread.
fn thread_switches() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

struct LagRun {
    p50: u64,
    p99: u64,
    /// Executes measured.
    iters: u32,
    /// Host-thread allocations over the measured executes.
    allocs: u64,
    /// Host-thread voluntary context switches (blocking syscalls) over the measured executes.
    switches: u64,
}

fn lag_run(arch: &'static csr_maps::Arch, poll: PollPolicy, iters: u32) -> Result<LagRun, CliError> {
    let s = setup(arch, Timing::Threaded, poll)?;
    for _ in 0..iters.min(200) {
        exec(&s)?;
    }
    let mut lags = Vec::with_capacity(iters as usize);
    // Instrumentation reads (/proc, a String) stay outside the counted window.
    let c0 = thread_switches();
    let a0 = thread_allocs();
    for _ in 0..iters {
        lags.push(exec(&s)?.completion_lag_ns);
    }
    let allocs = thread_allocs() - a0;
    let switches = thread_switches().saturating_sub(c0);
    s.rt.unload(&s.m).map_err(|e| CliError::new(e.status, e.message()))?;
    let _ = s.rt.close();
    Ok(LagRun { p50: pct(&mut lags, 0.5), p99: pct(&mut lags, 0.99), iters, allocs, switches })
}

/// Run the benchmark and print figures.
pub fn exec_bench(a: ExecBenchArgs, json_out: bool) -> Result<(), CliError> {
    let arch = csr_maps::Arch::by_name(&a.arch)?;
    let iters = a.iters.max(100);
    // 1. Host overhead, allocations and syscalls (Inline simulator).
    let s = setup(arch, Timing::Inline, PollPolicy::Spin)?;
    for _ in 0..1000 {
        exec(&s)?;
    }
    let mut host = Vec::with_capacity(iters as usize);
    let mut total = Vec::with_capacity(iters as usize);
    // Instrumentation stays outside the counted window, and the read syscalls of one
    // /proc/self/io sample (made inside the window by the closing sample) are measured and
    // subtracted.
    let v0 = voluntary_switches();
    let (c0, _) = proc_io();
    let (c1, _) = proc_io();
    let probe_reads = c1.saturating_sub(c0);
    let (r0, w0) = proc_io();
    let a0 = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..iters {
        let d0 = s.sim.device_ns();
        let t = exec(&s)?;
        let dev = s.sim.device_ns() - d0;
        host.push(t.total_ns.saturating_sub(dev));
        total.push(t.total_ns);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
    let (r1, w1) = proc_io();
    let vcs = voluntary_switches() - v0;
    s.rt.unload(&s.m).map_err(|e| CliError::new(e.status, e.message()))?;
    let _ = s.rt.close();
    let io_calls = (r1 - r0).saturating_sub(probe_reads) + (w1 - w0);
    let (p50, p99) = (pct(&mut host, 0.5), pct(&mut host, 0.99));
    let (t50, t99) = (pct(&mut total, 0.5), pct(&mut total, 0.99));
    // 2. Completion latency: spin vs usleep(1) (Threaded simulator).
    let lag_iters = iters.min(5000);
    let spin = lag_run(arch, PollPolicy::Spin, lag_iters)?;
    let us = lag_run(arch, PollPolicy::Usleep1, lag_iters.min(2000))?;
    let (spin50, spin99, us50, us99) = (spin.p50, spin.p99, us.p50, us.p99);
    let per = |x: u64| x as f64 / iters as f64;
    if json_out {
        println!(
            "{}",
            json!({
                "arch": arch.name, "iters": iters,
                "host_overhead_ns": {"p50": p50, "p99": p99},
                "total_inline_ns": {"p50": t50, "p99": t99},
                "completion_lag_ns": {"spin": {"p50": spin50, "p99": spin99}, "usleep1": {"p50": us50, "p99": us99}},
                "allocs_per_exec_inline_incl_device": per(allocs),
                "host_thread_allocs_per_exec": spin.allocs as f64 / f64::from(spin.iters),
                "host_thread_blocking_switches_per_exec": spin.switches as f64 / f64::from(spin.iters),
                "host_thread_counts": {"executes": spin.iters, "allocs": spin.allocs, "blocking_switches": spin.switches},
                "process_counts": {"executes": iters, "allocs_incl_device": allocs, "read_write_syscalls": io_calls, "voluntary_switches": vcs},
                "read_write_syscalls_per_exec": per(io_calls),
                "voluntary_ctx_switches_per_exec": per(vcs),
            })
        );
    } else {
        println!("bench exec ({}, {iters} sync executes of the 1-NC all-reduce model)", arch.name);
        println!("  host overhead per execute (inline sim, device time subtracted): p50 {p50} ns, p99 {p99} ns");
        println!("  total per execute incl. inline device work:                   p50 {t50} ns, p99 {t99} ns");
        println!("  completion lag after the END record (threaded sim):  spin p50 {spin50} ns p99 {spin99} ns");
        println!("                                                    usleep(1) p50 {us50} ns p99 {us99} ns");
        println!(
            "  host thread (threaded sim, spin), {} executes: {} heap allocations, {} blocking context switches",
            spin.iters, spin.allocs, spin.switches
        );
        println!(
            "  whole process (inline sim), {iters} executes: {io_calls} read/write syscalls, {vcs} voluntary context switches, {} allocations ({:.1} per execute, all in the simulator's device work)",
            allocs,
            per(allocs)
        );
    }
    Ok(())
}
