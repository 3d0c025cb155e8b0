//! Synchronous execution: bind inputs (DMA, or descriptors pointed at the tensors), stage
//! the DMA rings, kick off each NC (one MMIO write through [`hal::Device::kick`]), step the
//! completion engine until done, copy outputs back.

use std::time::{Duration, Instant};

use hal::Xfer;
use neff::NrtStatus;

use super::{ExecState, ExecTimings, Held, Model, ModelHandle, PollPolicy, RtError, RtErrorKind, Runtime, TensorSet};
use crate::completion::Step;
use crate::error::IoRole;

impl Runtime {
    /// `nrt_execute` (synchronous): returns the execution's status (NRT_SUCCESS or the
    /// error) and timings; API misuse is an `Err`.
    pub fn execute(
        &self,
        m: &ModelHandle,
        inputs: &TensorSet,
        outputs: &TensorSet,
    ) -> Result<(NrtStatus, ExecTimings), RtError> {
        self.guard()?;
        if !m.lifecycle.runnable() {
            if let Some(r) = not_runnable(m) {
                return r;
            }
        }
        let t0 = Instant::now();
        // Executions on an NC are serialized in arrival order (its lane); the model armed on
        // the NC is switched if needed.
        let mut held = Held::none(&m.lanes);
        let armed = held.take(&m.ncs, m.id);
        // The switch's host span, for the system trace (only while profiling).
        let mut switch = None;
        if !armed {
            let s0 = crate::profile::active().then(crate::profile::now_ns);
            if super::ncs::switch_in(m)? {
                switch = s0.map(|s0| (s0, crate::profile::now_ns()));
            }
        }
        let mut g = m.exec.lock();
        let Some(ex) = g.as_mut() else { return Err(unloaded()) };
        bind_inputs(m, ex, inputs, outputs)?;
        if let Some(irq) = &ex.irq {
            irq.drain();
        }
        // The bind phase's clock only when asked for (RuntimeConfig::phase_timings).
        let t_bound = m.phase_timings.then(Instant::now);
        if let Err(e) = kick(ex) {
            drop(g);
            kick_failed(m, e.status);
            return Err(e);
        }
        let t_kicked = m.phase_timings.then(Instant::now);
        // The completion engine's clock starts after the kick (with an inline device, after
        // the device work the kick ran). It keeps deadlines (the core timeout, the barrier
        // warning, probe intervals), so it runs on the coarse clock (a timer tick's resolution,
        // a fifth of the cost: platform::clock). It is read again only after the host waited:
        // a step that moved the engine on (INIT → barrier wait → core wait) is followed at once
        // by the next, at the same instant.
        let mut now = platform::clock::coarse_now();
        let mut steps = 0u64;
        // When a long wait last asked whether the device is reachable (set once the wait is
        // long: nothing on the fast path).
        let mut last_probe: Option<Instant> = None;
        let step = loop {
            steps += 1;
            let before = ex.tracker.state();
            match ex.tracker.step(&mut ex.ncs, now) {
                Step::InFlight if ex.tracker.state() != before => {}
                Step::InFlight => {
                    // A long wait asks now and then whether the device is still there: a device
                    // behind a connection that is gone (a shared device whose broker died)
                    // never writes the notification queues waited on.
                    if steps >= LONG_WAIT_STEPS
                        && steps.is_multiple_of(64)
                        && last_probe.get_or_insert_with(Instant::now).elapsed() >= REACH_PROBE_PERIOD
                        && {
                            last_probe = Some(Instant::now());
                            !ex.ncs.iter().all(|s| s.dev.reachable())
                        }
                    {
                        drop(g);
                        kick_failed(m, NrtStatus::Failure);
                        return Err(RtError::new(
                            NrtStatus::Failure,
                            "the device became unreachable (its connection is gone) during the execution",
                        ));
                    }
                    match (&ex.irq, m.poll) {
                        // Bounded sleep: a device that never raises still reaches the timeout.
                        (Some(irq), PollPolicy::Interrupt) => {
                            irq.wait(Duration::from_millis(1));
                        }
                        (_, PollPolicy::Spin) if steps >= LONG_WAIT_STEPS => long_wait(ex, steps),
                        _ => wait(m.poll, steps),
                    }
                    now = platform::clock::coarse_now();
                }
                s => break s,
            }
        };
        let t_done = Instant::now();
        let observed = t_done.duration_since(m.epoch).as_nanos() as u64;
        let status = ex.tracker.status();
        if crate::profile::active() {
            let t = ex.tracker.timings();
            crate::profile::record_exec(m.id, &m.name, &m.ncs, ex.seq, t0, m.epoch, status, &t, &ex.sync, switch);
        }
        if step == Step::DoneWithError {
            return Ok(failed(m, g, held, outputs, status, t0, steps));
        }
        let ex_warnings = ex.tracker.barrier_warnings();
        let (duration, last_end) = ex.tracker.device_span(0);
        let device_ns = duration.unwrap_or(0) / 1000;
        let completion_lag_ns =
            last_end.and_then(|(e, ts)| ex.sync.to_cpu_ns(e, ts).ok()).map(|end| observed as i64 - end as i64);
        // The clock is read again only if copying outputs took time (or for the phase
        // breakdown): outputs bound by address, the common case, are in place when the
        // harvest ends.
        let copied = read_outputs(m, ex, outputs)?;
        let t_end = if copied || m.phase_timings { Instant::now() } else { t_done };
        let total_ns = t_end.duration_since(t0).as_nanos() as u64;
        m.count_execution(status, total_ns, device_ns, ex_warnings, t_end);
        let mut timings = ExecTimings {
            total_ns,
            device_ns,
            steps,
            barrier_warnings: ex_warnings,
            completion_lag_ns,
            ..Default::default()
        };
        if let (Some(b), Some(k)) = (t_bound, t_kicked) {
            let ns = |a: Instant, b: Instant| b.duration_since(a).as_nanos() as u64;
            timings.bind_ns = ns(t0, b);
            timings.kick_ns = ns(b, k);
            timings.harvest_ns = ns(k, t_done);
            timings.completion_ns = ns(t_done, t_end);
        }
        Ok((status, timings))
    }

    /// `nrt_execute_repeat`: `n` executions; stops at the first non-success status.
    pub fn execute_repeat(
        &self,
        m: &ModelHandle,
        inputs: &TensorSet,
        outputs: &TensorSet,
        n: u32,
    ) -> Result<(NrtStatus, Vec<ExecTimings>), RtError> {
        let mut t = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (s, tm) = self.execute(m, inputs, outputs)?;
            t.push(tm);
            if s != NrtStatus::Success {
                return Ok((s, t));
            }
        }
        Ok((NrtStatus::Success, t))
    }
}

/// A model that may not execute (not RUNNING: an error; poisoned: NRT_EXEC_UNIT_UNRECOVERABLE),
/// checked under the lifecycle lock; None if it may after all (it changed since the flag was
/// read). Out of line, off the hot path.
#[cold]
#[inline(never)]
fn not_runnable(m: &Model) -> Option<Result<(NrtStatus, ExecTimings), RtError>> {
    m.lifecycle.read(|lc| {
        if let Err(e) = lc.check_executable() {
            return Some(Err(e.into()));
        }
        lc.poisoned().map(|_| Ok((NrtStatus::ExecUnitUnrecoverable, ExecTimings::default())))
    })
}

/// "The model was unloaded" (its device state is gone): out of line, off the hot path.
#[cold]
#[inline(never)]
fn unloaded() -> RtError {
    RtError::from(RtErrorKind::ModelUnloaded)
}

/// The end of an execution that failed: the NCs are marked for a reset before their next
/// use, damaged outputs invalidated, the execution counted (while the lanes are still held:
/// the counters' single-writer rule), the lanes released and the model poisoned (fail-stop).
/// Out of line: the successful path stays small.
#[cold]
#[inline(never)]
fn failed(
    m: &Model,
    g: crate::locks::Guard<std::sync::MutexGuard<'_, Option<ExecState>>>,
    held: Held<&super::NcLanes>,
    outputs: &TensorSet,
    status: NrtStatus,
    t0: Instant,
    steps: u64,
) -> (NrtStatus, ExecTimings) {
    let mut fatal = crate::state::FatalFlags::default();
    let mut warnings = 0;
    if let Some(ex) = g.as_ref() {
        warnings = ex.tracker.barrier_warnings();
        for nc in 0..ex.tracker.nc_count() {
            for c in crate::state::ExecFatalStatus::ALL {
                if ex.tracker.fatal_flags(nc).is_some_and(|f| f.get(c)) {
                    fatal.set(c);
                }
            }
        }
    }
    drop(g);
    for &nc in &m.ncs {
        m.lanes.set_dirty(nc, true);
    }
    invalidate_outputs(m, outputs, status);
    let end = Instant::now();
    let timings = ExecTimings {
        total_ns: end.saturating_duration_since(t0).as_nanos() as u64,
        steps,
        barrier_warnings: warnings,
        fatal,
        ..Default::default()
    };
    m.count_execution(status, timings.total_ns, 0, warnings, end);
    drop(held);
    m.lifecycle.update(|lc| lc.poison(status));
    crate::hw_err::report(status, &m.vncs, &m.ncs, &m.devices);
    (status, timings)
}

/// Steps a synchronous execute spins before it sleeps on the interrupt instead (where the
/// spin policy used to start yielding).
const LONG_WAIT_STEPS: u64 = 1 << 16;

/// How often a long wait (past [`LONG_WAIT_STEPS`]) asks whether the device is reachable (for
/// a device behind a connection, one zero-timeout poll).
pub(super) const REACH_PROBE_PERIOD: Duration = Duration::from_millis(100);

/// Past a short spin, sleep on NC 0's interrupt eventfd (bounded, so a device that never
/// raises still reaches the timeout) rather than burn a core until the timeout. The eventfd
/// is taken on first need: taken at load, the device would signal it on every record of
/// every fast execution. It is drained once before the first sleep (re-checked by the next
/// step), so events left from earlier executions do not cut the sleep short.
fn long_wait(ex: &mut ExecState, steps: u64) {
    if steps == LONG_WAIT_STEPS {
        if ex.irq.is_none() {
            ex.irq = ex.ncs.first().and_then(|s| s.dev.irq(s.nc).ok().flatten());
        }
        if let Some(irq) = &ex.irq {
            irq.drain();
        }
        return;
    }
    match &ex.irq {
        Some(irq) => {
            irq.wait(Duration::from_millis(1));
        }
        None => wait(PollPolicy::Spin, steps),
    }
}

fn wait(p: PollPolicy, steps: u64) {
    match p {
        PollPolicy::Spin => {
            // Spin (no syscalls) for the fast path; yield only once an execution has been
            // in flight for a long while (≈ 2^16 steps), so a long model does not burn a core
            // without ever letting others run.
            if steps > 1 << 16 && steps.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        PollPolicy::Usleep1 => std::thread::sleep(Duration::from_micros(1)),
        PollPolicy::Interrupt => std::hint::spin_loop(),
    }
}

/// A model input with no tensor of its name in the set (out of line, as every refusal here).
#[cold]
#[inline(never)]
fn unbound(name: &str) -> RtError {
    RtError::from(RtErrorKind::InputUnbound { name: name.to_string() })
}

/// A tensor of the wrong size for input or output `name`.
#[cold]
#[inline(never)]
fn wrong_size(role: IoRole, name: &str, got: u64, want: u64) -> RtError {
    RtError::from(RtErrorKind::WrongSize { role, name: name.to_string(), got, want })
}

pub(super) fn bind_inputs(
    m: &Model,
    ex: &mut ExecState,
    inputs: &TensorSet,
    outputs: &TensorSet,
) -> Result<(), RtError> {
    for (k, s) in ex.ncs.iter_mut().enumerate() {
        for b in s.bind.iter_mut() {
            *b = None;
        }
        // Consumed ring space is handed back to the device by the harvest itself once a
        // quarter of a ring is consumed (hal::NqRing::poll), so binding makes no MMIO access.
        for (j, info) in m.inputs.iter().enumerate() {
            let Some(t) = inputs.get(&info.name) else { return Err(unbound(&info.name)) };
            let Some(i) = s.io_var(j) else { continue };
            let v = &s.vars[i];
            super::tensor_ops::check_dma(t)?;
            if t.size != v.size {
                return Err(wrong_size(IoRole::Input, &info.name, t.size, v.size));
            }
            if s.dma_only[i] {
                // The model reads the input only through DMA: point the descriptors at the tensor.
                s.bind[i] = Some(t.dev_addr());
            } else {
                let (src, dst, len) = (t.dev_addr(), v.addr, v.size);
                m.devices[k].copy(s.nc, &[Xfer { src, dst, len }])?;
            }
        }
        if k == 0 {
            for (j, info) in m.outputs.iter().enumerate() {
                let Some(t) = outputs.get(&info.name) else { continue };
                let Some(i) = s.io_var(m.inputs.len() + j) else { continue };
                super::tensor_ops::check_dma(t)?;
                if t.size != s.vars[i].size {
                    return Err(wrong_size(IoRole::Output, &info.name, t.size, s.vars[i].size));
                }
                if s.dma_only[i] {
                    s.bind[i] = Some(t.dev_addr());
                }
            }
        }
        s.stage_rings()?;
    }
    ex.tracker.reset();
    ex.seq += 1;
    Ok(())
}

/// The kickoff: one MMIO write per NC (the kick slot was resolved at load), after arming the
/// collectives barrier of an NC whose collectives span several ranks (docs/faults.md).
pub(super) fn kick(ex: &ExecState) -> Result<(), RtError> {
    for s in &ex.ncs {
        if let Some(b) = s.barrier {
            s.dev.barrier_arm(s.nc, b.comm, b.rank, b.size)?;
        }
        s.dev.kick(&s.kick)?;
    }
    Ok(())
}

/// A kickoff failed, possibly after it started some of the model's NCs (a collective then
/// waits on the rest): fail-stop — the NCs are reset before their next use and the model is
/// poisoned, as after a failed execution.
#[cold]
pub(super) fn kick_failed(m: &Model, status: NrtStatus) {
    for &nc in &m.ncs {
        m.lanes.set_dirty(nc, true);
    }
    m.lifecycle.update(|lc| lc.poison(status));
}

/// Copy outputs that were not bound by address.
/// An execution that ended with an uncorrectable HBM error (1201, or the repairable 1205) may
/// have produced damaged outputs ("Execution results may be invalid", libnrt's HBM-UE log line,
/// docs/facts/libnrt-runtime-model.md §A.5.5). They are not handed out as valid: every output
/// tensor the caller passed is zeroed and its completion count is not advanced.
pub(super) fn invalidate_outputs(m: &Model, outputs: &TensorSet, status: NrtStatus) {
    if !matches!(status, NrtStatus::ExecHwErrHbmUe | NrtStatus::ExecHwErrRepairableHbmUe) {
        return;
    }
    for info in &m.outputs {
        if let Some(t) = outputs.get(&info.name) {
            if let Err(e) = t.fill(0, t.size, 0) {
                tracing::error!(tensor = %info.name, error = %e, "could not zero an output after an HBM error");
            }
        }
    }
}

/// Whether any output was copied.
pub(super) fn read_outputs(m: &Model, ex: &mut ExecState, outputs: &TensorSet) -> Result<bool, RtError> {
    let Some(s) = ex.ncs.first() else { return Ok(false) };
    let mut copied = false;
    for (j, info) in m.outputs.iter().enumerate() {
        let Some(t) = outputs.get(&info.name) else { continue };
        let Some(i) = s.io_var(m.inputs.len() + j) else { continue };
        if s.bind[i].is_none() {
            let v = &s.vars[i];
            m.devices[0].copy(s.nc, &[Xfer { src: v.addr, dst: t.dev_addr(), len: v.size }])?;
            copied = true;
        }
        t.completions.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    Ok(copied)
}
