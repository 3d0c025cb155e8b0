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
//! - Trust costs: zero-on-allocate of tensors (device memory by DMA from a zeroed host
//!   buffer, recycled host memory by memset) in µs per MiB, the bytes zeroed while executing
//!   (0: nothing is zeroed on the execute path), and programming an NC's ownership region
//!   table at a model switch (µs per switch for a given number of entries, and the extra
//!   time per execute when two models alternate on one NC).
//! - Allocations: a counting global allocator, installed only in the `neuron-vfio-bench`
//!   binary (`neuron-vfio bench` runs it when it is installed alongside; otherwise
//!   allocations are reported as not counted); syscalls: read/write syscalls from
//!   /proc/self/io and voluntary context switches (getrusage) around the measured loop.

use clap::Args;
#[cfg(feature = "sim")]
use {
    platform::Platform,
    runtime::{NrtStatus, PollPolicy, Runtime, RuntimeConfig, TensorSet},
    serde_json::json,
    sim::{SimConfig, SimDevice, Timing},
    std::sync::Arc,
};

#[cfg(feature = "sim")]
use crate::alloc_count;
use crate::report::CliError;

/// Arguments of `bench exec`.
#[derive(Args, Debug)]
pub struct ExecBenchArgs {
    /// Measured executions per scenario.
    #[arg(long, default_value_t = 20000)]
    pub iters: u32,
    /// Simulated arch.
    #[arg(long, default_value = "sunda")]
    pub arch: String,
    /// Run one scenario only: `spin-inline` runs just the inline-simulator spin path (for
    /// `strace -c -f` over two iteration counts: the difference is the per-execute syscalls).
    #[arg(long, value_parser = ["spin-inline"])]
    pub only: Option<String>,
}

#[cfg(feature = "sim")]
fn pct<T: Ord + Copy + Default>(v: &mut [T], p: f64) -> T {
    if v.is_empty() {
        return T::default();
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[cfg(feature = "sim")]
fn proc_io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let get =
        |k: &str| s.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
    (get("syscr:"), get("syscw:"))
}

#[cfg(feature = "sim")]
fn voluntary_switches() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[cfg(feature = "sim")]
struct Setup {
    rt: Runtime,
    sim: SimDevice,
    m: runtime::ModelHandle,
    ins: TensorSet,
    outs: TensorSet,
}

#[cfg(feature = "sim")]
fn setup(arch: &'static csr_maps::Arch, timing: Timing, poll: PollPolicy) -> Result<Setup, CliError> {
    setup_with(arch, timing, RuntimeConfig { poll, ..RuntimeConfig::physical() })
}

#[cfg(feature = "sim")]
fn setup_with(arch: &'static csr_maps::Arch, timing: Timing, cfg: RuntimeConfig) -> Result<Setup, CliError> {
    let sim = SimDevice::new(SimConfig::new(arch).timing(timing).hbm_bytes(1 << 28)).map_err(CliError::failure)?;
    let rt = Runtime::with_observers(runtime::monitoring());
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    let e = |e: runtime::RtError| CliError::new(e.status, e.message());
    // `--mmio-trace FILE` traces the benchmark's own simulator too.
    let platforms = select::wrap_traced(vec![Arc::new(sim.clone()) as Arc<dyn Platform>]).map_err(CliError::failure)?;
    rt.init(platforms, cfg, opts).map_err(e)?;
    let mut d = neff::builder::single_nc_allreduce();
    d.target = "*".into();
    let bytes = d.build().map_err(CliError::failure)?;
    let m = rt.load(&bytes, None, None).map_err(e)?;
    let ti = rt.alloc_tensor("input", 128, true, m.vncs[0]).map_err(e)?;
    let to = rt.alloc_tensor("output", 128, true, m.vncs[0]).map_err(e)?;
    ti.write(0, &[0x3Fu8; 128]).map_err(e)?;
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to);
    Ok(Setup { rt, sim, m, ins, outs })
}

#[cfg(feature = "sim")]
fn exec(s: &Setup) -> Result<runtime::ExecTimings, CliError> {
    checked(s.rt.execute(&s.m, &s.ins, &s.outs))
}

/// An execute's result: its timings, or the failure as a CLI error.
#[cfg(feature = "sim")]
fn checked(r: Result<(NrtStatus, runtime::ExecTimings), runtime::RtError>) -> Result<runtime::ExecTimings, CliError> {
    let (st, t) = r.map_err(|e| CliError::new(e.status, e.message()))?;
    if st != NrtStatus::Success {
        return Err(CliError::new(st, "execution failed during the benchmark"));
    }
    Ok(t)
}

/// What timing an empty window costs: p50 of `Instant::now()` followed by `elapsed()` with
/// nothing between (what of the benchmark's own clock pair lands inside a timed call).
#[cfg(feature = "sim")]
fn timer_overhead_ns() -> u64 {
    let mut v: Vec<u64> = (0..10_000)
        .map(|_| {
            let c0 = std::time::Instant::now();
            c0.elapsed().as_nanos() as u64
        })
        .collect();
    pct(&mut v, 0.5)
}

/// Per-thread voluntary context switches of the calling thread.
#[cfg(feature = "sim")]
fn thread_switches() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[cfg(feature = "sim")]
struct LagRun {
    /// Signed lag percentiles over the executions that reported one.
    p50: i64,
    p99: i64,
    min: i64,
    /// Executions with a negative lag (the sync point's offset error exceeds the lag).
    negative: usize,
    /// Executes measured.
    iters: u32,
    /// Host-thread allocations over the measured executes.
    allocs: u64,
    /// Host-thread voluntary context switches (blocking syscalls) over the measured executes.
    switches: u64,
}

#[cfg(feature = "sim")]
fn lag_run(arch: &'static csr_maps::Arch, poll: PollPolicy, iters: u32) -> Result<LagRun, CliError> {
    let s = setup(arch, Timing::Threaded, poll)?;
    for _ in 0..iters.min(200) {
        exec(&s)?;
    }
    let mut lags = Vec::with_capacity(iters as usize);
    // Instrumentation reads (/proc, a String) stay outside the counted window.
    let c0 = thread_switches();
    let a0 = alloc_count::thread_allocs();
    for _ in 0..iters {
        // `exec` fails the benchmark on a failed execution: none is counted as a lag.
        if let Some(l) = exec(&s)?.completion_lag_ns {
            lags.push(l);
        }
    }
    let allocs = alloc_count::thread_allocs() - a0;
    let switches = thread_switches().saturating_sub(c0);
    s.rt.unload(&s.m).map_err(|e| CliError::new(e.status, e.message()))?;
    let _ = s.rt.close();
    let negative = lags.iter().filter(|&&l| l < 0).count();
    let min = lags.iter().copied().min().unwrap_or(0);
    Ok(LagRun { p50: pct(&mut lags, 0.5), p99: pct(&mut lags, 0.99), min, negative, iters, allocs, switches })
}

/// What the trust rules cost (see the module documentation).
#[cfg(feature = "sim")]
struct TrustCosts {
    dev_zero_us_per_mib: f64,
    host_zero_us_per_mib: f64,
    /// (entries, µs per programming of the region table with all entries changed).
    table_us: Vec<(usize, f64)>,
    /// µs per execute: one model alone, two models alternating on one NC (a switch each).
    exec_alone_us: f64,
    exec_alternating_us: f64,
}

#[cfg(feature = "sim")]
fn trust_costs(arch: &'static csr_maps::Arch) -> Result<TrustCosts, CliError> {
    use std::time::Instant;
    let e = |e: runtime::RtError| CliError::new(e.status, e.message());
    let s = setup(arch, Timing::Inline, PollPolicy::Spin)?;
    let vnc = s.m.vncs[0];
    // Zero-on-allocate: device tensors (DMA from a zeroed host buffer), host tensors from the
    // pool (a recycled range is zeroed by memset).
    const MIB: u64 = 1 << 20;
    let t = Instant::now();
    for k in 0..8 {
        drop(s.rt.alloc_tensor(&format!("z{k}"), 4 * MIB, true, vnc).map_err(e)?);
    }
    let dev_zero_us_per_mib = t.elapsed().as_secs_f64() * 1e6 / 32.0;
    drop(s.rt.alloc_tensor("warm", MIB, false, vnc).map_err(e)?);
    let t = Instant::now();
    for k in 0..64 {
        drop(s.rt.alloc_tensor(&format!("h{k}"), MIB, false, vnc).map_err(e)?);
    }
    let host_zero_us_per_mib = t.elapsed().as_secs_f64() * 1e6 / 64.0;
    // The table alone: two disjoint lists programmed alternately (every entry changes), on
    // an NC without a model.
    let mut table_us = Vec::new();
    if let Some((dev, local)) = s.rt.device_of(s.m.ncs[0]) {
        let nc = (local + 1) % dev.nc_count();
        for n in [16usize, 64, hal::regions::TABLE_ENTRIES] {
            let list = |k: u64| -> Vec<hal::Region> {
                (0..n as u64).map(|i| hal::Region::new((k * 4096 + i) * 0x2_0000, 0x1000, hal::Perm::READ)).collect()
            };
            let (a, b) = (list(0), list(1));
            let rounds = 400u32;
            let t = Instant::now();
            for r in 0..rounds {
                dev.set_regions(nc, if r % 2 == 0 { &a } else { &b }).map_err(|x| CliError::failure(x.to_string()))?;
            }
            table_us.push((n, t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)));
            dev.clear_regions(nc).map_err(|x| CliError::failure(x.to_string()))?;
        }
    }
    // A model switch per execute: a second model on the same NC, executes alternating.
    let mut d = neff::builder::single_nc_allreduce();
    d.target = "*".into();
    let other = s.rt.load(&d.build().map_err(CliError::failure)?, Some(vnc), None).map_err(e)?;
    let run = |m: &runtime::ModelHandle| -> Result<(), CliError> {
        let (st, _) = s.rt.execute(m, &s.ins, &s.outs).map_err(e)?;
        if st != NrtStatus::Success {
            return Err(CliError::new(st, "execution failed during the benchmark"));
        }
        Ok(())
    };
    let rounds = 500u32;
    run(&s.m)?;
    let t = Instant::now();
    for _ in 0..rounds {
        run(&s.m)?;
    }
    let exec_alone_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    let t = Instant::now();
    for r in 0..rounds {
        run(if r % 2 == 0 { &other } else { &s.m })?;
    }
    let exec_alternating_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    s.rt.unload(&other).map_err(e)?;
    s.rt.unload(&s.m).map_err(e)?;
    let _ = s.rt.close();
    Ok(TrustCosts { dev_zero_us_per_mib, host_zero_us_per_mib, table_us, exec_alone_us, exec_alternating_us })
}

/// How the breakdown was taken (printed with it in `--json`).
#[cfg(feature = "sim")]
const BREAKDOWN_MEASURED: &str = "bind, kick, harvest, completion: p50s of a second pass with the phase clocks on (three more clock reads per execute); outside_window: whole call p50 minus execute window p50 of the headline pass";

/// p50 of each phase (bind, kick with the device work and one `timer` subtracted, harvest,
/// completion) over `iters` executes on a runtime with the phase clocks on.
#[cfg(feature = "sim")]
fn phase_breakdown(arch: &'static csr_maps::Arch, iters: u32, timer: u64) -> Result<[u64; 4], CliError> {
    let cfg = RuntimeConfig { poll: PollPolicy::Spin, phase_timings: true, ..RuntimeConfig::physical() };
    let s = setup_with(arch, Timing::Inline, cfg)?;
    for _ in 0..1000 {
        exec(&s)?;
    }
    let mut parts: [Vec<u64>; 4] = std::array::from_fn(|_| Vec::with_capacity(iters as usize));
    // The simulator's clock pair around its device work (`timer`, the headline pass's figure)
    // lands in the kick.
    for _ in 0..iters {
        let d0 = s.sim.device_ns();
        let t = exec(&s)?;
        let dev = s.sim.device_ns() - d0;
        for (v, x) in parts.iter_mut().zip([
            t.bind_ns,
            t.kick_ns.saturating_sub(dev).saturating_sub(timer),
            t.harvest_ns,
            t.completion_ns,
        ]) {
            v.push(x);
        }
    }
    s.rt.unload(&s.m).map_err(|e| CliError::new(e.status, e.message()))?;
    let _ = s.rt.close();
    Ok(parts.each_mut().map(|v| pct(v, 0.5)))
}

/// What `host_overhead_ns` covers (printed with the figure in `--json`).
#[cfg(feature = "sim")]
const HOST_OVERHEAD_MEASURES: &str = "the whole Runtime::execute call as its caller sees it, with the inline simulator's device time subtracted, and two clock pairs that exist only to measure: the benchmark's own around the call and the simulator's around its device work (its device-time counter, what makes the device time subtractable); each pair is timer_overhead_ns, the p50 of an empty timed window measured in the same run";

/// Run the benchmark and print figures.
#[cfg(feature = "sim")]
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
    // The whole `execute` call as its caller sees it (API guard, lifecycle check, lane release,
    // monitor counters: what runs outside the execute's own t0..t_end window), device time
    // subtracted. Two clock pairs that only measure are subtracted too (`timer` each, below):
    // the benchmark's around the call, and the simulator's around its device work (what of
    // it lands outside the device time it reports); the execute window holds only the latter.
    let mut call = Vec::with_capacity(iters as usize);
    let timer = timer_overhead_ns();
    // Instrumentation stays outside the counted window, and the read syscalls of one
    // /proc/self/io sample (made inside the window by the closing sample) are measured and
    // subtracted.
    let v0 = voluntary_switches();
    let (c0, _) = proc_io();
    let (c1, _) = proc_io();
    let probe_reads = c1.saturating_sub(c0);
    let zeroing = s.rt.device_of(s.m.ncs[0]).map(|(d, _)| d);
    let z0 = zeroing.as_ref().map(|d| d.zeroed_bytes()).unwrap_or_default();
    let (r0, w0) = proc_io();
    let a0 = alloc_count::process_allocs();
    for _ in 0..iters {
        let d0 = s.sim.device_ns();
        let c0 = std::time::Instant::now();
        let r = s.rt.execute(&s.m, &s.ins, &s.outs);
        let c1 = c0.elapsed().as_nanos() as u64;
        // Checked after the clock read: the benchmark's own result handling is not timed.
        let t = checked(r)?;
        let dev = s.sim.device_ns() - d0;
        host.push(t.total_ns.saturating_sub(dev).saturating_sub(timer));
        call.push(c1.saturating_sub(dev).saturating_sub(2 * timer));
        total.push(t.total_ns);
    }
    let allocs = alloc_count::process_allocs() - a0;
    let (r1, w1) = proc_io();
    let z1 = zeroing.as_ref().map(|d| d.zeroed_bytes()).unwrap_or_default();
    let exec_zeroed = (z1.0 - z0.0, z1.1 - z0.1);
    drop(zeroing);
    let vcs = voluntary_switches() - v0;
    s.rt.unload(&s.m).map_err(|e| CliError::new(e.status, e.message()))?;
    let _ = s.rt.close();
    let io_calls = (r1 - r0).saturating_sub(probe_reads) + (w1 - w0);
    let (p50, p99) = (pct(&mut host, 0.5), pct(&mut host, 0.99));
    let (t50, t99) = (pct(&mut total, 0.5), pct(&mut total, 0.99));
    let (w50, w99) = (pct(&mut call, 0.5), pct(&mut call, 0.99));
    // Where the time goes: a second pass with the phase clocks on (RuntimeConfig::phase_timings,
    // three more clock reads per execute, so its parts sum to a little more than the first
    // pass's window); what the whole call adds around the window is the first pass's p50
    // difference.
    let [b50, k50, h50, c50] = phase_breakdown(arch, iters, timer)?;
    let breakdown = json!({"bind": b50, "kick_excl_device": k50, "harvest": h50, "completion": c50,
        "outside_window": w50.saturating_sub(p50), "measured": BREAKDOWN_MEASURED});
    let per = |x: u64| x as f64 / iters as f64;
    let counted = alloc_count::active();
    if a.only.is_some() {
        let when = |v: f64| counted.then_some(v);
        if json_out {
            println!(
                "{}",
                json!({
                    "arch": arch.name, "iters": iters, "only": "spin-inline", "allocations_counted": counted,
                    "host_overhead_ns": {"p50": w50, "p99": w99, "measures": HOST_OVERHEAD_MEASURES, "timer_overhead_ns": timer},
                    "host_overhead_execute_window_ns": {"p50": p50, "p99": p99},
                    "host_overhead_p50_breakdown_ns": breakdown,
                    "allocs_per_exec_inline_incl_device": when(per(allocs)),
                    "process_counts": {"executes": iters, "allocs_incl_device": counted.then_some(allocs), "read_write_syscalls": io_calls, "voluntary_switches": vcs},
                    "read_write_syscalls_per_exec": per(io_calls),
                    "voluntary_ctx_switches_per_exec": per(vcs),
                })
            );
        } else {
            println!("bench exec --only spin-inline ({}, {iters} executes): host overhead (whole call) p50 {w50} ns p99 {w99} ns (execute window p50 {p50} ns); {io_calls} read/write syscalls, {vcs} voluntary switches{}", arch.name,
                if counted { format!(", {allocs} allocations") } else { String::new() });
        }
        return Ok(());
    }
    // 2. Completion latency: spin vs usleep(1) (Threaded simulator).
    let lag_iters = iters.min(5000);
    let spin = lag_run(arch, PollPolicy::Spin, lag_iters)?;
    let us = lag_run(arch, PollPolicy::Usleep1, lag_iters.min(2000))?;
    let (spin50, spin99, us50, us99) = (spin.p50, spin.p99, us.p50, us.p99);
    let trust = trust_costs(arch)?;
    // Allocation figures exist only under the counting allocator (neuron-vfio-bench).
    let when = |v: f64| counted.then_some(v);
    if json_out {
        println!(
            "{}",
            json!({
                "arch": arch.name, "iters": iters,
                "allocations_counted": counted,
                "host_overhead_ns": {"p50": w50, "p99": w99, "measures": HOST_OVERHEAD_MEASURES, "timer_overhead_ns": timer},
                "host_overhead_execute_window_ns": {"p50": p50, "p99": p99},
                "host_overhead_p50_breakdown_ns": breakdown,
                "total_inline_ns": {"p50": t50, "p99": t99},
                "completion_lag_ns": {
                    "spin": {"p50": spin50, "p99": spin99, "min": spin.min, "negative": spin.negative, "measured": spin.iters},
                    "usleep1": {"p50": us50, "p99": us99, "min": us.min, "negative": us.negative, "measured": us.iters},
                    "clock": "device END rescaled to host time through a sync point taken at load (device clock read between two host clock reads, midpoint); not clamped",
                },
                "allocs_per_exec_inline_incl_device": when(per(allocs)),
                "host_thread_allocs_per_exec": when(spin.allocs as f64 / f64::from(spin.iters)),
                "host_thread_blocking_switches_per_exec": spin.switches as f64 / f64::from(spin.iters),
                "host_thread_counts": {"executes": spin.iters, "allocs": counted.then_some(spin.allocs), "blocking_switches": spin.switches},
                "process_counts": {"executes": iters, "allocs_incl_device": counted.then_some(allocs), "read_write_syscalls": io_calls, "voluntary_switches": vcs},
                "read_write_syscalls_per_exec": per(io_calls),
                "voluntary_ctx_switches_per_exec": per(vcs),
                "trust": {
                    "zero_on_allocate_us_per_mib": {"device": trust.dev_zero_us_per_mib, "host": trust.host_zero_us_per_mib},
                    "zeroed_bytes_while_executing": {"device": exec_zeroed.0, "host": exec_zeroed.1},
                    "region_table_program_us": trust.table_us.iter().map(|(n, us)| json!({"entries": n, "us": us})).collect::<Vec<_>>(),
                    "exec_us": {"one_model": trust.exec_alone_us, "two_models_alternating": trust.exec_alternating_us},
                },
            })
        );
    } else {
        println!("bench exec ({}, {iters} sync executes of the 1-NC all-reduce model)", arch.name);
        println!("  host overhead per execute (the whole call: API guard, lifecycle, lanes, bind, kick, harvest, completion, release, counters; inline sim, device time and two measuring clock pairs ({timer} ns each: the benchmark's, the simulator's) subtracted): p50 {w50} ns, p99 {w99} ns");
        println!("    of it, the execute window (t0..t_end inside execute): p50 {p50} ns, p99 {p99} ns");
        println!("    p50 breakdown (a second pass with the phase clocks on): bind {b50} ns, kick {k50} ns (device work subtracted), harvest {h50} ns, completion {c50} ns; outside the window {} ns", w50.saturating_sub(p50));
        println!("  total per execute incl. inline device work:                   p50 {t50} ns, p99 {t99} ns");
        println!(
            "  completion lag after the END record (threaded sim, signed, one clock):  spin p50 {spin50} ns p99 {spin99} ns \
             (min {} ns, {} negative)",
            spin.min, spin.negative
        );
        println!(
            "                                                    usleep(1) p50 {us50} ns p99 {us99} ns (min {} ns, {} negative)",
            us.min, us.negative
        );
        let (host_allocs, proc_allocs) = if counted {
            (
                format!("{} heap allocations", spin.allocs),
                format!(", {allocs} allocations ({:.1} per execute, all in the simulator's device work)", per(allocs)),
            )
        } else {
            ("heap allocations not counted (no neuron-vfio-bench)".to_string(), String::new())
        };
        println!(
            "  host thread (threaded sim, spin), {} executes: {host_allocs}, {} blocking context switches",
            spin.iters, spin.switches
        );
        println!(
            "  whole process (inline sim), {iters} executes: {io_calls} read/write syscalls, {vcs} voluntary context switches{proc_allocs}"
        );
        println!(
            "  zero-on-allocate (inline sim): device tensor {:.1} us/MiB (DMA from a zeroed host buffer), host tensor {:.1} us/MiB (memset of a recycled range)",
            trust.dev_zero_us_per_mib, trust.host_zero_us_per_mib
        );
        println!(
            "  bytes zeroed during the {iters} executes: device {}, host {} (outputs are zeroed at allocation, not per execute)",
            exec_zeroed.0, exec_zeroed.1
        );
        let table: Vec<String> = trust.table_us.iter().map(|(n, us)| format!("{n} entries {us:.1} us")).collect();
        println!("  region table programming per model switch (all entries changed): {}", table.join(", "));
        println!(
            "  execute with a model switch each time (park, re-arm, region table): {:.1} us vs {:.1} us for one model alone",
            trust.exec_alternating_us, trust.exec_alone_us
        );
    }
    Ok(())
}

/// `bench exec` measures the runtime on the simulator: without it there is nothing to run.
#[cfg(not(feature = "sim"))]
pub fn exec_bench(_: ExecBenchArgs, _json_out: bool) -> Result<(), CliError> {
    Err(CliError::invalid("bench exec runs on the simulator: built without it (cargo feature `sim`)"))
}

/// Arguments of `bench scale`.
#[derive(Args, Debug)]
pub struct ScaleBenchArgs {
    /// Simulated devices (each a full device of `--arch`).
    #[arg(long, default_value_t = 16)]
    pub devices: usize,
    /// Simulated arch.
    #[arg(long, default_value = "cayman")]
    pub arch: String,
    /// Seconds of executes per thread count.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Thread counts to drive executes from (default 1, 2 and every core beyond).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Give the threads the models round-robin (NC 0 to thread 0, NC 1 to thread 1, …), so
    /// threads share every simulated device, instead of contiguous blocks of NCs (whole
    /// devices when the thread count divides the device count).
    #[arg(long)]
    pub interleave: bool,
}

/// `bench scale`: `--devices` simulated devices (inline device work), one model per NC, and
/// synchronous executes driven from 1, 2, … threads, each thread owning an equal share of the
/// models (a contiguous block of NCs, or round-robin with `--interleave`). Reports init time, executes/s per thread count, the 2-thread scaling
/// and the runtime's lock contentions during each run.
#[cfg(feature = "sim")]
pub fn scale_bench(a: ScaleBenchArgs, json_out: bool) -> Result<(), CliError> {
    use std::time::{Duration, Instant};
    let arch = csr_maps::Arch::by_name(&a.arch)?;
    if a.devices == 0 || a.devices > 16 {
        return Err(CliError::invalid("--devices must be 1..=16"));
    }
    let e = |e: runtime::RtError| CliError::new(e.status, e.message());
    let t_init = Instant::now();
    let mut plats: Vec<Arc<dyn Platform>> = Vec::new();
    for i in 0..a.devices {
        let mut c = SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 26);
        c.device_index = i as u32;
        plats.push(Arc::new(SimDevice::new(c).map_err(CliError::failure)?));
    }
    let rt = Runtime::with_observers(runtime::monitoring());
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
    let plats = select::wrap_traced(plats).map_err(CliError::failure)?;
    rt.init(plats, RuntimeConfig { poll: PollPolicy::Spin, ..RuntimeConfig::physical() }, opts).map_err(e)?;
    let init_s = t_init.elapsed().as_secs_f64();
    let ncs = rt.nc_count();
    let mut d = neff::builder::single_nc_allreduce();
    d.target = "*".into();
    let bytes = d.build().map_err(CliError::failure)?;
    let t_load = Instant::now();
    let mut work = Vec::with_capacity(ncs);
    for nc in 0..ncs {
        let m = rt.load(&bytes, Some(nc), Some(1)).map_err(e)?;
        let ti = rt.alloc_tensor("input", 128, true, m.vncs[0]).map_err(e)?;
        let to = rt.alloc_tensor("output", 128, true, m.vncs[0]).map_err(e)?;
        ti.write(0, &[0x3Fu8; 128]).map_err(e)?;
        let mut ins = TensorSet::new();
        ins.add("input", ti);
        let mut outs = TensorSet::new();
        outs.add("output", to);
        work.push((m, ins, outs));
    }
    let load_s = t_load.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let counts = if a.threads.is_empty() { (1..=cores.max(2)).collect::<Vec<_>>() } else { a.threads.clone() };
    let dur = Duration::from_secs_f64(a.seconds.max(0.1));
    let mut rows = Vec::new();
    let mut rate_of = std::collections::BTreeMap::new();
    let mut per_cpu_of = std::collections::BTreeMap::new();
    for &n in &counts {
        let n = n.clamp(1, ncs);
        // Warm up every model once.
        for (m, i, o) in &work {
            rt.execute(m, i, o).map_err(e)?;
        }
        let c0 = runtime::rt::lock_contentions();
        let failed = std::sync::atomic::AtomicU64::new(0);
        let start = Instant::now();
        let (done, cpu_ns): (u64, u64) = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|t| {
                    let (rt, work, failed, interleave) = (&rt, &work, &failed, a.interleave);
                    s.spawn(move || {
                        let mine: Vec<_> = if interleave {
                            work.iter().skip(t).step_by(n).collect()
                        } else {
                            work[work.len() * t / n..work.len() * (t + 1) / n].iter().collect()
                        };
                        let mut k = 0u64;
                        let cpu0 = thread_cpu_ns();
                        while start.elapsed() < dur {
                            for (m, i, o) in &mine {
                                match rt.execute(m, i, o) {
                                    Ok((NrtStatus::Success, _)) => k += 1,
                                    _ => {
                                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    }
                                }
                            }
                        }
                        (k, thread_cpu_ns().zip(cpu0).map(|(b, a)| b.saturating_sub(a)).unwrap_or(0))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or((0, 0))).fold((0, 0), |(k, c), (a, b)| (k + a, c + b))
        });
        let secs = start.elapsed().as_secs_f64();
        let contended = runtime::rt::lock_contentions() - c0;
        let rate = done as f64 / secs;
        rate_of.insert(n, rate);
        // Executes per CPU-second the driving threads got: what the rate would be with a core
        // per thread, whatever else the machine runs.
        let per_cpu_s = (cpu_ns > 0).then(|| done as f64 * 1e9 / cpu_ns as f64);
        if let Some(r) = per_cpu_s {
            per_cpu_of.insert(n, r);
        }
        rows.push(json!({"threads": n, "executes": done, "seconds": secs, "executes_per_s": rate,
            "thread_cpu_s": cpu_ns as f64 / 1e9, "executes_per_cpu_s": per_cpu_s,
            "failed": failed.load(std::sync::atomic::Ordering::Relaxed), "lock_contentions": contended,
            "lock_contentions_per_1k_exec": contended as f64 * 1000.0 / done.max(1) as f64}));
    }
    for (m, _, _) in &work {
        rt.unload(m).map_err(e)?;
    }
    let _ = rt.close();
    let scaling = match (rate_of.get(&1), rate_of.get(&2)) {
        (Some(r1), Some(r2)) if *r1 > 0.0 => Some(r2 / r1),
        _ => None,
    };
    // The same ratio had each thread a core of its own: 2 × (executes per CPU-second with 2
    // threads / with 1). Shared locks or cache lines lower it; other load on the machine does
    // not (it lowers `scaling`).
    let scaling_per_cpu = match (per_cpu_of.get(&1), per_cpu_of.get(&2)) {
        (Some(r1), Some(r2)) if *r1 > 0.0 => Some(2.0 * r2 / r1),
        _ => None,
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loadavg: Vec<f64> = load.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    if json_out {
        println!(
            "{}",
            json!({"bench": "scale", "arch": arch.name, "devices": a.devices, "ncs": ncs, "models": work.len(),
                "init_s": init_s, "load_all_s": load_s, "cores": cores, "runs": rows, "scaling": scaling,
                "scaling_per_cpu": scaling_per_cpu,
                "assignment": if a.interleave { "interleaved" } else { "blocks" },
                "loadavg": loadavg})
        );
    } else {
        println!(
            "bench scale: {} × {} ({ncs} NCs, one model per NC, {} per thread), init {init_s:.3} s, {} loads in {load_s:.3} s, {cores} cores, load average {loadavg:?}",
            a.devices, arch.name, if a.interleave { "NCs interleaved" } else { "a block of NCs" }, work.len()
        );
        for r in &rows {
            println!(
                "  {} thread(s): {:.0} executes/s ({} executes, {:.0} per CPU-second), {} lock contentions",
                r["threads"],
                r["executes_per_s"].as_f64().unwrap_or(0.0),
                r["executes"],
                r["executes_per_cpu_s"].as_f64().unwrap_or(0.0),
                r["lock_contentions"]
            );
        }
        if let Some(s) = scaling {
            println!("  scaling (2 threads / 1 thread): {s:.2}");
        }
        if let Some(s) = scaling_per_cpu {
            println!("  scaling per CPU-second (2 × executes per CPU-s with 2 threads / with 1): {s:.2}");
        }
    }
    Ok(())
}

/// CPU time of the calling thread so far, ns (`/proc/thread-self/schedstat`: time on CPU).
#[cfg(feature = "sim")]
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// `bench scale` runs on the simulator: without it there is nothing to run.
#[cfg(not(feature = "sim"))]
pub fn scale_bench(_: ScaleBenchArgs, _json_out: bool) -> Result<(), CliError> {
    Err(CliError::invalid("bench scale runs on the simulator: built without it (cargo feature `sim`)"))
}
