//! The completion engine driven by a scripted NotificationSource and an injectable clock.

use csr_maps::formats::error::TpbErrorRecord;
use csr_maps::formats::notify::InferStatus;
use csr_maps::Engine;
use runtime::completion::*;
use runtime::state::{ExecFatalStatus, ExecState};
use runtime::NrtStatus;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Fake {
    infer: [VecDeque<InferStatus>; Engine::COUNT],
    errors: VecDeque<TpbErrorRecord>,
    overflow: bool,
    causes: FatalCauses,
    barrier_pending: u32,
    barrier_fail: bool,
    network_fail: bool,
    polls: [u32; Engine::COUNT],
    max_args: Vec<usize>,
    drains: [u32; Engine::COUNT],
    overflow_probes: u32,
    barrier_polls: u32,
    cause_reads: u32,
    /// Fail the next INFER_STATUS poll of this engine (a device read error).
    fail_infer: Option<usize>,
    /// Fail error-ring polls.
    fail_errors: bool,
}

fn mmio_failure() -> hal::HalError {
    hal::HalError::Mmio(platform::MmioError::OutOfRange { offset: 0x40, width: 4, size: 0x10 })
}

impl NotificationSource for Fake {
    fn poll_infer(&mut self, engine: usize, out: &mut Vec<InferStatus>, max: usize) -> Result<(), SourceError> {
        self.polls[engine] += 1;
        self.max_args.push(max);
        if self.fail_infer == Some(engine) {
            return Err(SourceError::InferRing { engine, source: mmio_failure() });
        }
        for _ in 0..max {
            match self.infer[engine].pop_front() {
                Some(r) => out.push(r),
                None => break,
            }
        }
        Ok(())
    }
    fn drain_infer(&mut self, engine: usize) -> Result<(), SourceError> {
        self.drains[engine] += 1;
        Ok(())
    }
    fn poll_errors(&mut self, out: &mut Vec<TpbErrorRecord>, max: usize) -> Result<(), SourceError> {
        if self.fail_errors {
            return Err(SourceError::ErrorRing { source: mmio_failure() });
        }
        for _ in 0..max {
            match self.errors.pop_front() {
                Some(r) => out.push(r),
                None => break,
            }
        }
        Ok(())
    }
    fn nq_overflow(&mut self) -> bool {
        self.overflow_probes += 1;
        self.overflow
    }
    fn fatal_causes(&mut self) -> FatalCauses {
        self.cause_reads += 1;
        self.causes
    }
    fn barrier_proxy(&mut self) -> ProxyPoll {
        self.barrier_polls += 1;
        if self.barrier_fail {
            ProxyPoll::Failed
        } else if self.barrier_pending > 0 {
            self.barrier_pending -= 1;
            ProxyPoll::Pending
        } else {
            ProxyPoll::Done
        }
    }
    fn network_proxy(&mut self) -> ProxyPoll {
        if self.network_fail {
            ProxyPoll::Failed
        } else {
            ProxyPoll::Done
        }
    }
}

fn rec(subtype: u16, ts: u64) -> InferStatus {
    InferStatus { subtype, timestamp: ts, ..Default::default() }
}
fn start(ts: u64) -> InferStatus {
    rec(2, ts)
}
fn end(ts: u64) -> InferStatus {
    rec(3, ts)
}
fn custom(sub_id: u16, line: u32) -> InferStatus {
    InferStatus {
        subtype: 6,
        sub_id,
        line: (line & 0xFFFF) as u16,
        line_hi: ((line >> 16) & 0xF) as u8,
        timestamp: 7,
        ..Default::default()
    }
}

/// A source where every engine e reports START at base+e and END at base+100+e.
fn clean(base: u64) -> Fake {
    let mut f = Fake::default();
    for e in 0..Engine::COUNT {
        f.infer[e].push_back(start(base + e as u64));
        f.infer[e].push_back(end(base + 100 + e as u64));
    }
    f
}

const TIMEOUT: Duration = Duration::from_secs(2);

fn tracker(ncs: usize) -> ExecTracker {
    ExecTracker::new(ncs, TrackerConfig::new(&csr_maps::SUNDA, TIMEOUT)).unwrap()
}

/// Step INIT and WAIT_BARRIER_PROXY (clear) at t0; returns t0.
fn to_wait_core(t: &mut ExecTracker, s: &mut [Fake]) -> Instant {
    let t0 = Instant::now();
    assert_eq!(t.step(s, t0), Step::InFlight);
    assert_eq!(t.state(), ExecState::WaitBarrierProxy);
    assert_eq!(t.step(s, t0), Step::InFlight);
    assert_eq!(t.state(), ExecState::WaitCore);
    t0
}

fn run(t: &mut ExecTracker, s: &mut [Fake], now: Instant) -> Step {
    for _ in 0..1000 {
        let v = t.step(s, now);
        if v.is_done() {
            return v;
        }
    }
    panic!("tracker did not finish");
}

#[test]
fn success_single_nc_with_timings() {
    let mut t = tracker(1);
    let mut s = [clean(1000)];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.core_start(), Some(t0));
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(Step::Done.code(), 0);
    assert_eq!(t.status(), NrtStatus::Success);
    assert_eq!(t.state(), ExecState::Done);
    let tm = t.timing(0).unwrap();
    assert_eq!(tm.engines[3], EngineTiming { start: Some(1003), end: Some(1103) });
    assert_eq!(tm.engines[3].duration(), Some(100));
    assert_eq!((tm.start(), tm.end(), tm.duration()), (Some(1000), Some(1104), Some(104)));
    assert_eq!(s[0].drains, [1; Engine::COUNT]);
    assert_eq!(s[0].overflow_probes, 0, "overflow probe is lazy");
    assert_eq!(s[0].cause_reads, 1, "causes read once at FINALIZE");
    assert!(!t.fatal_flags(0).unwrap().any());
}

#[test]
fn success_two_ncs_and_records_spread_over_sweeps() {
    let mut t = tracker(2);
    let mut a = clean(500);
    // NC1: STARTs arrive first sweep, ENDs only later.
    let mut b = Fake::default();
    for e in 0..Engine::COUNT {
        b.infer[e].push_back(start(50 + e as u64));
    }
    let mut s = [std::mem::take(&mut a), b];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::InFlight);
    assert_eq!(t.engine_state(0, 0), Some(EngineState::Complete));
    assert_eq!(t.engine_state(1, 0), Some(EngineState::EndPending));
    for e in 0..Engine::COUNT {
        s[1].infer[e].push_back(end(900 - e as u64));
    }
    assert_eq!(t.step(&mut s, t0 + Duration::from_millis(5)), Step::Done);
    assert_eq!(t.status(), NrtStatus::Success);
    let timings = t.timings();
    assert_eq!(timings.len(), 2);
    assert_eq!((timings[0].start(), timings[0].end()), (Some(500), Some(604)));
    assert_eq!((timings[1].start(), timings[1].end()), (Some(50), Some(900)));
    assert_eq!(timings[1].duration(), Some(850));
    // The span the execute path reads agrees with the full timings (NC 1: engine 0 ENDs
    // latest, at 900).
    for (nc, tm) in timings.iter().enumerate() {
        let last = tm.engines.iter().enumerate().filter_map(|(e, x)| x.end.map(|v| (e, v))).max_by_key(|x| x.1);
        assert_eq!(t.device_span(nc), (tm.duration(), last));
    }
    assert_eq!(t.device_span(1).1, Some((0, 900)));
    assert_eq!(t.device_span(2), (None, None));
}

/// Ties between ENDs go to the last engine, as `max_by_key`; no START → no duration.
#[test]
fn device_span_ties_and_gaps() {
    let mut t = tracker(1);
    let mut f = Fake::default();
    for e in 0..Engine::COUNT {
        f.infer[e].push_back(start(10 + e as u64));
        f.infer[e].push_back(end(if e == 1 || e == 3 { 70 } else { 60 }));
    }
    let mut s = [f];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(t.device_span(0), (Some(60), Some((3, 70))));
    let fresh = tracker(1);
    assert_eq!(fresh.device_span(0), (None, None));
}

fn stuck() -> Fake {
    let mut f = clean(10);
    f.infer[4].pop_back(); // SP never ENDs
    f
}

#[test]
fn timeout_is_measured_from_core_start_and_yields_5() {
    let mut t = tracker(1);
    let mut s = [stuck()];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT - Duration::from_millis(1)), Step::InFlight);
    // In flight, the device's error signals are probed at most once per probe interval.
    let probes = s[0].overflow_probes;
    assert!(probes <= 2, "{probes} probes");
    assert_eq!(t.step(&mut s, t0 + TIMEOUT - Duration::from_micros(999)), Step::InFlight);
    assert_eq!(s[0].overflow_probes, probes, "no second probe within the interval");
    assert_eq!(t.step(&mut s, t0 + TIMEOUT), Step::DoneWithError);
    assert_eq!(Step::DoneWithError.code(), 2);
    assert_eq!(t.status(), NrtStatus::Timeout);
    assert_eq!(s[0].overflow_probes, probes + 1);
    let f = t.fatal_flags(0).unwrap();
    assert!(f.get(ExecFatalStatus::Timeout) && !f.get(ExecFatalStatus::SwNqOverflow));
}

/// A coarse clock as the kernel keeps it, with updates that come late — 4 ms ticks, each
/// update up to half a tick late, stretches of up to five ticks without one — as on a VM whose
/// `clock_getres` says 4 ms while readings lag by 8 ms: each update advances the clock by the
/// whole ticks since its value (the remainder waits for the next), and a reading at precise
/// time `t` is the value of the last update at or before `t`.
struct LaggingClock {
    base: Instant,
    /// (update instant, published value), ns after `base`.
    updates: Vec<(u64, u64)>,
}

impl LaggingClock {
    fn new(span: Duration, seed: u64) -> Self {
        const TICK: u64 = 4_000_000;
        let (mut t, mut x, mut updates) = (0u64, seed | 1, vec![(0u64, 0u64)]);
        while t < span.as_nanos() as u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let missed = if x.is_multiple_of(4) { 1 + (x >> 8) % 5 } else { 0 };
            t = (t / TICK + 1 + missed) * TICK + x % (TICK / 2);
            let v = updates[updates.len() - 1].1;
            updates.push((t, v + (t - v) / TICK * TICK));
        }
        Self { base: Instant::now(), updates }
    }
    /// The coarse reading at precise time `ns` after the base.
    fn read(&self, ns: u64) -> Instant {
        let i = self.updates.partition_point(|&(u, _)| u <= ns);
        self.base + Duration::from_nanos(self.updates[i.saturating_sub(1)].1)
    }
}

/// On a coarse clock (TrackerConfig::clock = Coarse) neither the core timeout nor the barrier
/// warning comes before its time by the precise clock, however far the clock lags (the fault
/// matrix saw a hang reported before its timeout on such a kernel), and neither is later than
/// the lag allows. The same tracker stepped with plain differences of those readings — what a
/// precise-clock tracker does — is early on this clock, so the test can fail.
#[test]
fn a_lagging_coarse_clock_never_brings_a_deadline_early() {
    const STEP: u64 = 250_000; // a sweep every 250 µs of precise time
    let timeout = Duration::from_millis(100);
    let warn = Duration::from_millis(60);
    let clock = LaggingClock::new(Duration::from_secs(40), 0x9e37_79b9_7f4a_7c15);
    let (mut naive_early, mut cases) = (0, 0);
    for kind in [ClockKindUnderTest::Coarse, ClockKindUnderTest::Naive] {
        // Start the execution at many points of the clock's update pattern.
        for start in (0..30_000_000_000u64).step_by(97_000_003) {
            let mut cfg = TrackerConfig::new(&csr_maps::SUNDA, timeout);
            cfg.barrier_warn = warn;
            if kind == ClockKindUnderTest::Coarse {
                cfg.clock = platform::clock::ClockKind::Coarse;
            }
            // The core timeout, from the step that saw the barrier clear.
            let mut t = ExecTracker::new(1, cfg.clone()).unwrap();
            let mut s = [stuck()];
            assert_eq!(t.step(&mut s, clock.read(start)), Step::InFlight);
            assert_eq!(t.step(&mut s, clock.read(start)), Step::InFlight);
            assert_eq!(t.state(), ExecState::WaitCore);
            let mut at = start;
            while !t.step(&mut s, clock.read(at)).is_done() {
                at += STEP;
            }
            assert_eq!(t.status(), NrtStatus::Timeout);
            let took = Duration::from_nanos(at - start);
            // The barrier warning, from the first step.
            let mut b = ExecTracker::new(1, cfg).unwrap();
            let mut bs = [stuck()];
            bs[0].barrier_pending = u32::MAX;
            let mut bat = start;
            while b.barrier_warnings() == 0 {
                assert_eq!(b.step(&mut bs, clock.read(bat)), Step::InFlight);
                bat += STEP;
            }
            let warned = Duration::from_nanos(bat - STEP - start);
            cases += 1;
            match kind {
                ClockKindUnderTest::Coarse => {
                    assert!(took >= timeout, "start {start}: timeout after {took:?} < {timeout:?}");
                    assert!(warned >= warn, "start {start}: warning after {warned:?} < {warn:?}");
                    // Late by at most three update gaps (≤ 6.5 ticks each) and a sweep.
                    let slack = Duration::from_millis(3 * 26) + Duration::from_nanos(STEP);
                    assert!(took <= timeout + slack, "start {start}: timeout after {took:?}");
                    assert!(warned <= warn + slack, "start {start}: warning after {warned:?}");
                }
                ClockKindUnderTest::Naive => naive_early += usize::from(took < timeout || warned < warn),
            }
        }
    }
    assert!(naive_early > 0, "the lagging clock never misleads a plain difference ({cases} cases)");
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ClockKindUnderTest {
    Coarse,
    Naive,
}

#[test]
fn failing_infer_poll_ends_the_execution_with_nrt_failure_not_a_timeout() {
    // NC 1's ACT ring cannot be read: the first sweep ends the execution, long before the
    // timeout, with NRT_FAILURE; the error rings are still swept and the causes read.
    let mut t = tracker(2);
    let mut s = [clean(1), clean(2)];
    s[1].fail_infer = Some(1);
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::Failure);
    assert_eq!(t.nc_status(1), Some(NrtStatus::Failure));
    assert_eq!(t.nc_status(0), Some(NrtStatus::Success));
    assert_eq!((s[0].cause_reads, s[1].cause_reads), (1, 1));
    assert_eq!(s[1].polls[2], 0, "the sweep stops at the failed engine");
    // A failure outranked by a fatal cause reports the cause.
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].fail_infer = Some(0);
    s[0].causes = FatalCauses::HBM_UE;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::ExecHwErrHbmUe);
}

#[test]
fn failing_error_ring_poll_is_a_failure_even_after_a_clean_harvest() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].fail_errors = true;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::Failure);
    // The source error's status: NRT_FAILURE, or the DMA-abort status for an aborted engine.
    let e = SourceError::ErrorRing { source: mmio_failure() };
    assert_eq!(e.status(), NrtStatus::Failure);
    let abort = hal::HalError::DmaAbort { engine: 1, queue: 0, m2s_cause: 1, s2m_cause: 0 };
    assert_eq!(SourceError::InferRing { engine: 0, source: abort }.status(), NrtStatus::ExecHwErrDmaAbort);
}

#[test]
fn timeout_with_overflow_bit_yields_1204() {
    let mut t = tracker(1);
    let mut s = [stuck()];
    s[0].overflow = true;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT * 3), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::ExecSwNqOverflow);
    assert!(t.fatal_flags(0).unwrap().get(ExecFatalStatus::SwNqOverflow));
}

#[test]
fn barrier_wait_never_fatal_and_warning_threshold_doubles() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].barrier_pending = u32::MAX;
    let t0 = Instant::now();
    assert_eq!(t.step(&mut s, t0), Step::InFlight);
    let sec = Duration::from_secs;
    assert_eq!(t.step(&mut s, t0 + sec(119)), Step::InFlight);
    assert_eq!(t.barrier_warnings(), 0);
    assert_eq!(t.step(&mut s, t0 + sec(120)), Step::InFlight);
    assert_eq!((t.barrier_warnings(), t.barrier_threshold()), (1, sec(240)));
    assert_eq!(t.step(&mut s, t0 + sec(239)), Step::InFlight);
    assert_eq!(t.barrier_warnings(), 1);
    assert_eq!(t.step(&mut s, t0 + sec(240)), Step::InFlight);
    assert_eq!((t.barrier_warnings(), t.barrier_threshold()), (2, sec(480)));
    // Hours of barrier wait, far beyond the 2 s core timeout: still in flight.
    assert_eq!(t.step(&mut s, t0 + sec(36_000)), Step::InFlight);
    assert_eq!(t.state(), ExecState::WaitBarrierProxy);
    // Clear: the core timeout starts now, not at t0.
    s[0].barrier_pending = 0;
    let clear = t0 + sec(40_000);
    assert_eq!(t.step(&mut s, clear), Step::InFlight);
    assert_eq!(t.core_start(), Some(clear));
    s[0].infer[4].pop_back();
    assert_eq!(t.step(&mut s, clear + sec(1)), Step::InFlight);
    assert_eq!(t.step(&mut s, clear + TIMEOUT), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::Timeout);
}

#[test]
fn barrier_failure_is_collectives_error() {
    let mut t = tracker(2);
    let mut s = [clean(1), clean(1)];
    s[1].barrier_fail = true;
    let t0 = Instant::now();
    t.step(&mut s, t0);
    assert_eq!(t.step(&mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::ExecHwErrCollectives);
    assert!(t.fatal_flags(1).unwrap().get(ExecFatalStatus::Barrier));
    assert_eq!(t.nc_status(0), Some(NrtStatus::Success));
}

#[test]
fn network_proxy_failure_is_1206() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].network_fail = true;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::NetworkProxyFailure);
    assert!(t.fatal_flags(0).unwrap().get(ExecFatalStatus::NetworkProxy));
}

fn out_of_order(overflow: bool, records: &[InferStatus]) -> (Step, NrtStatus, ExecTracker) {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[2].clear();
    s[0].infer[2].extend(records.iter().copied());
    s[0].overflow = overflow;
    let t0 = to_wait_core(&mut t, &mut s);
    let v = run(&mut t, &mut s, t0);
    assert_eq!(s[0].overflow_probes, 1);
    (v, t.status(), t)
}

#[test]
fn end_while_start_pending() {
    let (v, st, t) = out_of_order(false, &[end(5)]);
    assert_eq!((v, st), (Step::DoneWithError, NrtStatus::Failure));
    assert!(!t.fatal_flags(0).unwrap().any());
    assert_eq!(t.nc_status(0), Some(NrtStatus::Success), "generic fault does not set the NC result");
    let (v, st, t) = out_of_order(true, &[end(5)]);
    assert_eq!((v, st), (Step::DoneWithError, NrtStatus::ExecSwNqOverflow));
    assert!(t.fatal_flags(0).unwrap().get(ExecFatalStatus::SwNqOverflow));
}

#[test]
fn start_while_end_pending() {
    let (v, st, _) = out_of_order(false, &[start(1), start(2)]);
    assert_eq!((v, st), (Step::DoneWithError, NrtStatus::Failure));
    let (v, st, _) = out_of_order(true, &[start(1), start(2)]);
    assert_eq!((v, st), (Step::DoneWithError, NrtStatus::ExecSwNqOverflow));
}

#[test]
fn records_after_end_are_discarded_and_engine_drained() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[1].push_back(start(3)); // would be out of order, but the engine is COMPLETE
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(t.status(), NrtStatus::Success);
    assert_eq!(t.discarded(0), Some(1));
    assert_eq!(s[0].drains[1], 1);
    assert_eq!(s[0].overflow_probes, 0);
}

fn with_error(id: u8, mask: u16) -> (Step, NrtStatus) {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].errors.push_back(TpbErrorRecord { error_id: id, metadata_lo: mask, header: 0x1F, ..Default::default() });
    let t0 = to_wait_core(&mut t, &mut s);
    (t.step(&mut s, t0), t.status())
}

#[test]
fn each_error_ring_id_maps_to_its_status() {
    use NrtStatus::*;
    let expect = [
        (0, 0, Success),                      // FP_UNDERFLOW → NONE
        (1, 0x0001, ExecCompletedWithNumErr), // FP_NAN → NUMERICAL
        (1, 0x7E00, Success),                 // FP_NAN, only ignored bits → NONE
        (2, 0, Success),                      // FP_INF → NONE
        (3, 0, Success),                      // FP_OVERFLOW → NONE
        (4, 0, ExecCompletedWithErr),         // MEMORY_ERROR, mask clear → TRANSIENT
        (4, 0x0001, ExecCompletedWithErr),    // MEMORY_ERROR → MEMORY_ERROR
        (5, 0, ExecCompletedWithErr),         // FAKE
        (6, 0, ExecCompletedWithErr),         // SEMAPHORE
        (7, 0, ExecCompletedWithErr),         // EVENT
        (8, 0, ExecCompletedWithErr),         // PSUM
        (9, 0, ExecCompletedWithErr),         // SEQUENCER_NONFATAL → TRANSIENT
        (10, 0, ExecCompletedWithErr),        // SEQUENCER_FATAL → SW_SEQUENCER
        (11, 0, Success),
        (200, 0xFFFF, Success),
    ];
    for (id, mask, status) in expect {
        // The engines completed: Band-B flags do not make the step fatal.
        assert_eq!(with_error(id, mask), (Step::Done, status), "error_id {id} mask {mask:#x}");
    }
}

#[test]
fn error_ring_subtype_flags_recorded() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].errors.push_back(TpbErrorRecord { error_id: 9, ..Default::default() });
    s[0].errors.push_back(TpbErrorRecord { error_id: 10, ..Default::default() });
    let t0 = to_wait_core(&mut t, &mut s);
    t.step(&mut s, t0);
    let flags = t.infer_errors(0).unwrap();
    assert_eq!(flags, [false, false, true, false, false, false, false, false, true]);
}

#[test]
fn error_ring_swept_in_batches_and_bounded() {
    let mut cfg = TrackerConfig::new(&csr_maps::SUNDA, TIMEOUT);
    cfg.max_error_records = 40;
    let mut t = ExecTracker::new(1, cfg).unwrap();
    let mut s = [clean(1)];
    for _ in 0..100 {
        s[0].errors.push_back(TpbErrorRecord { error_id: 0, ..Default::default() });
    }
    s[0].errors.push_back(TpbErrorRecord { error_id: 5, ..Default::default() });
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(t.status(), NrtStatus::Success, "the bound stops the sweep before the FAKE record");
    assert_eq!(s[0].errors.len(), 101 - 48);
}

fn with_causes(causes: FatalCauses, stuck_engine: bool) -> (Step, NrtStatus) {
    let mut t = tracker(1);
    let mut s = [if stuck_engine { stuck() } else { clean(1) }];
    s[0].causes = causes;
    let t0 = to_wait_core(&mut t, &mut s);
    (run(&mut t, &mut s, t0 + TIMEOUT), t.status())
}

#[test]
fn each_fatal_cause_maps_to_its_status() {
    let c = FatalCauses::default();
    let cases = [
        (c | FatalCauses::HBM_UE, NrtStatus::ExecHwErrHbmUe),
        (c | FatalCauses::HBM_UE_REPAIRABLE, NrtStatus::ExecHwErrRepairableHbmUe),
        (c | FatalCauses::NC_UE, NrtStatus::ExecHwErrNcUe),
        (c | FatalCauses::DMA_ABORT, NrtStatus::ExecHwErrDmaAbort),
        (c | FatalCauses::CC_ERROR, NrtStatus::ExecHwErrCollectives),
        (c | FatalCauses::NET_PROXY, NrtStatus::NetworkProxyFailure),
    ];
    for (causes, status) in cases {
        assert_eq!(with_causes(causes, false), (Step::DoneWithError, status), "{causes:?}");
    }
    // Several at once: priority decides (CRITICAL beats HIGH; first CRITICAL wins a tie).
    let all = c | FatalCauses::CC_ERROR | FatalCauses::DMA_ABORT | FatalCauses::HBM_UE;
    assert_eq!(with_causes(all, false).1, NrtStatus::ExecHwErrHbmUe);
    assert_eq!(with_causes(c | FatalCauses::CC_ERROR | FatalCauses::DMA_ABORT, false).1, NrtStatus::ExecHwErrDmaAbort);
}

#[test]
fn timeout_branch_classification() {
    let c = FatalCauses::default();
    assert_eq!(with_causes(c | FatalCauses::HBM_UE, true).1, NrtStatus::ExecHwErrHbmUe);
    assert_eq!(with_causes(c | FatalCauses::DMA_ABORT, true).1, NrtStatus::ExecHwErrDmaAbort);
    // A collectives cause replaces the timeout on this branch (hang in collectives).
    assert_eq!(with_causes(c | FatalCauses::CC_ERROR, true).1, NrtStatus::ExecHwErrCollectives);
    // libnrt 2.31 tests only for 1201 here: a repairable HBM UE is not propagated.
    assert_eq!(with_causes(c | FatalCauses::HBM_UE_REPAIRABLE, true).1, NrtStatus::Timeout);
    assert_eq!(
        with_causes(c | FatalCauses::HBM_UE_REPAIRABLE | FatalCauses::DMA_ABORT, true).1,
        NrtStatus::ExecHwErrDmaAbort
    );
    assert_eq!(with_causes(c | FatalCauses::NC_UE, true).1, NrtStatus::ExecHwErrNcUe);
    assert_eq!(with_causes(c, true), (Step::DoneWithError, NrtStatus::Timeout));
    // The error ring is swept first; 1004 (CRITICAL) outranks the timeout (HIGH) and the
    // collectives classification (HIGH), but the verdict stays fatal.
    let mut t = tracker(1);
    let mut s = [stuck()];
    s[0].errors.push_back(TpbErrorRecord { error_id: 9, ..Default::default() });
    s[0].causes |= FatalCauses::CC_ERROR;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::ExecCompletedWithErr);
}

#[test]
fn oob_custom_notifications_are_1006() {
    for sub in [0u16, 1, 2, 3, 4, 5, 9, 10] {
        let mut t = tracker(1);
        let mut s = [clean(1)];
        s[0].infer[2].insert(1, custom(sub, 0x1_2345));
        let t0 = to_wait_core(&mut t, &mut s);
        assert_eq!(run(&mut t, &mut s, t0), Step::DoneWithError, "sub-id {sub}");
        assert_eq!(t.status(), NrtStatus::ExecOob);
        assert!(t.fatal_flags(0).unwrap().get(ExecFatalStatus::Oob));
    }
}

#[test]
fn unknown_custom_is_hw_error_and_debug_is_benign() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[0].insert(1, custom(11, 0));
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::HwError);

    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[0].insert(1, custom(6, 99));
    s[0].infer[0].insert(1, custom(8, 4));
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::Done);
    assert_eq!(t.status(), NrtStatus::Success);
    assert_eq!(t.debug_notifications(0), Some(1));
    assert_eq!(t.debug_tensor_reads().len(), 1);
    assert_eq!(t.debug_tensor_reads()[0].var_id, 4);
}

#[test]
fn tensor_completions_recorded() {
    let mut t = tracker(2);
    let mut s = [clean(1), clean(1)];
    s[0].infer[3].insert(1, custom(7, 0x3_0005));
    s[1].infer[0].insert(1, custom(7, 2));
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::Done);
    let tc = t.tensor_completions();
    assert_eq!(tc.len(), 2);
    assert_eq!((tc[0].nc, tc[0].engine, tc[0].var_id, tc[0].timestamp), (0, 3, 0x3_0005, 7));
    assert_eq!((tc[1].nc, tc[1].engine, tc[1].var_id), (1, 0, 2));
}

#[test]
fn non_sunda_engine2_custom_tag_fixup() {
    for (arch, engine, want) in
        [(&csr_maps::CAYMAN, 2, 0x0E), (&csr_maps::SUNDA, 2, 0x05), (&csr_maps::CAYMAN, 3, 0x05)]
    {
        let mut t = ExecTracker::new(1, TrackerConfig::new(arch, TIMEOUT)).unwrap();
        let mut s = [clean(1)];
        let mut r = custom(7, 1);
        r.tag = 0x05;
        s[0].infer[engine].insert(1, r);
        let t0 = to_wait_core(&mut t, &mut s);
        run(&mut t, &mut s, t0);
        assert_eq!(t.tensor_completions()[0].tag, want, "{arch} engine {engine}");
    }
}

#[test]
fn unexpected_subtypes_and_hints() {
    for sub in [0u16, 1, 4, 5, 9, 0xFFFF] {
        let mut t = tracker(1);
        let mut s = [clean(1)];
        s[0].infer[0].insert(1, rec(sub, 1));
        let t0 = to_wait_core(&mut t, &mut s);
        assert_eq!(run(&mut t, &mut s, t0), Step::DoneWithError, "subtype {sub}");
        assert_eq!(t.status(), NrtStatus::Failure);
    }
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[0][0].hint = 1;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::Done);
    assert_eq!(t.drain_hints(0), Some(1));
    let mut t = tracker(1);
    let mut s = [clean(1)];
    s[0].infer[0][0].hint = 2;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!((run(&mut t, &mut s, t0), t.status()), (Step::DoneWithError, NrtStatus::Failure));
}

#[test]
fn cc_timestamps_earliest_start_latest_end() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    for r in [rec(7, 50), rec(7, 40), rec(7, 45), rec(8, 70), rec(8, 90), rec(8, 80)] {
        s[0].infer[4].insert(1, r);
    }
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(run(&mut t, &mut s, t0), Step::Done);
    let tm = t.timing(0).unwrap();
    assert_eq!((tm.cc_start, tm.cc_end, tm.cc_duration()), (Some(40), Some(90), Some(50)));
}

#[test]
fn multi_nc_reconciliation() {
    // success + 1003 → 1003 (still Done: a numerical flag is not fatal)
    let mut t = tracker(2);
    let mut s = [clean(1), clean(1)];
    s[1].errors.push_back(TpbErrorRecord { error_id: 1, metadata_lo: 1, ..Default::default() });
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(t.status(), NrtStatus::ExecCompletedWithNumErr);
    assert_eq!(t.nc_status(0), Some(NrtStatus::Success));

    // 1204 (NC0: overflow at timeout) + 1203 (NC1: timeout with DMA abort) → 1203
    let mut t = tracker(2);
    let mut s = [stuck(), stuck()];
    s[0].overflow = true;
    s[1].causes |= FatalCauses::DMA_ABORT;
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT), Step::DoneWithError);
    assert_eq!(t.nc_status(0), Some(NrtStatus::ExecSwNqOverflow));
    assert_eq!(t.nc_status(1), Some(NrtStatus::ExecHwErrDmaAbort));
    assert_eq!(t.status(), NrtStatus::ExecHwErrDmaAbort);

    // Only NC1 hangs; NC0 finished cleanly.
    let mut t = tracker(2);
    let mut s = [clean(1), stuck()];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT), Step::DoneWithError);
    assert_eq!((t.nc_status(0), t.nc_status(1)), (Some(NrtStatus::Success), Some(NrtStatus::Timeout)));
    assert_eq!(s[0].overflow_probes, 0);
}

#[test]
fn per_sweep_cap_honoured() {
    // Engine 1 has 40 records: START, 38 debug notifications, END.
    let build = || {
        let mut f = clean(1);
        f.infer[1].clear();
        f.infer[1].push_back(start(1));
        for _ in 0..38 {
            f.infer[1].push_back(custom(6, 0));
        }
        f.infer[1].push_back(end(2));
        f
    };
    let mut t = tracker(1);
    let mut s = [build()];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::InFlight);
    assert_eq!(s[0].infer[1].len(), 24);
    assert_eq!(t.step(&mut s, t0), Step::InFlight);
    assert_eq!(s[0].infer[1].len(), 8);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(s[0].polls[1], 3);
    assert_eq!(s[0].polls[0], 1);
    assert!(s[0].max_args.iter().all(|&m| m == DEFAULT_READS_PER_SWEEP));
    assert_eq!(t.debug_notifications(0), Some(38));

    let mut cfg = TrackerConfig::new(&csr_maps::SUNDA, TIMEOUT);
    cfg.reads_per_sweep = 8;
    let mut t = ExecTracker::new(1, cfg).unwrap();
    let mut s = [build()];
    let t0 = to_wait_core(&mut t, &mut s);
    let mut sweeps = 0;
    while !t.step(&mut s, t0).is_done() {
        sweeps += 1;
    }
    assert_eq!(sweeps + 1, 5);
}

#[test]
fn expected_engine_mask() {
    let mut cfg = TrackerConfig::new(&csr_maps::SUNDA, TIMEOUT);
    cfg.engines = [true, false, false, false, true];
    let mut t = ExecTracker::new(1, cfg).unwrap();
    let mut s = [Fake::default()];
    for e in [0, 4] {
        s[0].infer[e].extend([start(1), end(2)]);
    }
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(s[0].polls, [1, 0, 0, 0, 1]);
}

#[test]
fn done_is_sticky_and_reset_rearms() {
    let mut t = tracker(1);
    let mut s = [clean(1)];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0), Step::Done);
    let polls = s[0].polls;
    assert_eq!(t.step(&mut s, t0), Step::Done);
    assert_eq!(s[0].polls, polls);
    assert_eq!(t.verdict(), Some(Step::Done));
    t.reset();
    assert_eq!((t.state(), t.verdict(), t.status()), (ExecState::Init, None, NrtStatus::Success));
    let mut s = [stuck()];
    let t0 = to_wait_core(&mut t, &mut s);
    assert_eq!(t.step(&mut s, t0 + TIMEOUT), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::Timeout);
}

#[test]
fn config_and_source_count_errors() {
    let cfg = TrackerConfig::new(&csr_maps::SUNDA, TIMEOUT);
    assert_eq!(ExecTracker::new(0, cfg.clone()).unwrap_err(), TrackerError::NoNc);
    let mut c = cfg.clone();
    c.engines = [false; Engine::COUNT];
    assert_eq!(ExecTracker::new(1, c).unwrap_err(), TrackerError::NoEngines);
    let mut c = cfg.clone();
    c.reads_per_sweep = 0;
    assert!(matches!(ExecTracker::new(1, c), Err(TrackerError::ZeroLimit(_))));
    let mut t = ExecTracker::new(2, cfg).unwrap();
    let mut s = [clean(1)];
    assert_eq!(t.step(&mut s, Instant::now()), Step::DoneWithError);
    assert_eq!(t.status(), NrtStatus::Invalid);
}

#[test]
fn step_codes_match_erp_step() {
    assert_eq!(Step::Done.code(), 0);
    assert_eq!(Step::InFlight.code(), 1);
    assert_eq!(Step::DoneWithError.code(), 2);
    assert!(!Step::InFlight.is_done());
}

/// A stuck execution whose device raised the NQ-overflow line or latched a cause the engines
/// cannot finish after ends at the next signal probe, with the status the timeout gives.
#[test]
fn signalled_stuck_execution_ends_before_the_timeout() {
    for (overflow, causes, want) in [
        (true, FatalCauses::empty(), NrtStatus::ExecSwNqOverflow),
        (false, FatalCauses::DMA_ABORT, NrtStatus::ExecHwErrDmaAbort),
        (false, FatalCauses::SEQ_FATAL, NrtStatus::Timeout),
    ] {
        let mut t = tracker(1);
        let mut s = [stuck()];
        let t0 = to_wait_core(&mut t, &mut s);
        assert_eq!(t.step(&mut s, t0 + Duration::from_millis(1)), Step::InFlight, "no signal yet");
        s[0].overflow = overflow;
        s[0].causes = causes;
        assert_eq!(t.step(&mut s, t0 + Duration::from_millis(3)), Step::DoneWithError, "{causes:?}");
        assert_eq!(t.status(), want, "{causes:?}");
    }
    // A latched cause the engines finish after (HBM UE) does not end the execution early.
    let mut t = tracker(1);
    let mut s = [stuck()];
    let t0 = to_wait_core(&mut t, &mut s);
    s[0].causes = FatalCauses::HBM_UE;
    assert_eq!(t.step(&mut s, t0 + Duration::from_millis(3)), Step::InFlight);
}
