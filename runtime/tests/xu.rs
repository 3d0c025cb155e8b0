//! The XU queue (pure) and the worker over a scripted executor.

use runtime::completion::Step;
use runtime::xu::*;
use runtime::NrtStatus;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

fn id() -> XuId {
    XuId::compute(3, 0x2A).unwrap()
}

#[test]
fn xu_id_and_seq_id_packing() {
    let x = id();
    assert_eq!(x.raw(), 0x2A31);
    assert_eq!(XuId::from_raw(0x2A31), x);
    assert_eq!((x.kind(), x.queue(), x.vnc()), (XU_TYPE_COMPUTE, 3, 0x2A));
    let seq = x.seq_id(5);
    assert_eq!(seq, 0x2A31_0000_0000_0005);
    assert_eq!(seq >> 56, 0x2A, "vNC id is bits 63:56");
    assert_eq!(seq_cursor(seq), 5);
    assert_eq!(seq_xu(seq), x);
    assert_eq!(x.seq_id(0x1_FFFF_FFFF_FFFF), 0x2A31_FFFF_FFFF_FFFF, "cursor masked to 48 bits");
    assert!(matches!(XuId::new(16, 0, 0), Err(XuError::BadId { .. })));
    assert!(matches!(XuId::new(1, 16, 0), Err(XuError::BadId { .. })));
}

#[test]
fn queue_cursors_full_and_empty() {
    assert!(matches!(XuQueue::<u32>::new(id(), 0), Err(XuError::ZeroCapacity)));
    let mut q = XuQueue::new(id(), 3).unwrap();
    assert_eq!(q.cursors(), (1, 1, 1));
    assert_eq!(q.trigger().unwrap_err(), NrtStatus::QueueEmpty);
    assert_eq!(q.current().unwrap_err(), NrtStatus::QueueEmpty);
    assert_eq!(q.complete().unwrap_err(), NrtStatus::QueueEmpty);
    assert_eq!(q.last_completed(), None);
    assert_eq!(q.schedule(10).unwrap(), id().seq_id(1));
    assert_eq!(q.schedule(11).unwrap(), id().seq_id(2));
    assert_eq!(q.schedule(12).unwrap(), id().seq_id(3));
    // Untriggered slots count toward capacity.
    assert_eq!(q.schedule(13).unwrap_err(), NrtStatus::QueueFull);
    assert_eq!((q.len(), q.untriggered(), q.in_flight()), (3, 3, 0));
    let (seq, v) = q.trigger().unwrap();
    assert_eq!((seq, *v), (id().seq_id(1), 10));
    assert_eq!(q.cursors(), (1, 2, 4));
    assert_eq!(q.schedule(13).unwrap_err(), NrtStatus::QueueFull, "triggered but not completed still counts");
    assert_eq!(*q.current().unwrap().1, 10);
    assert_eq!(q.complete().unwrap(), (id().seq_id(1), 10));
    assert_eq!(q.last_completed(), Some(id().seq_id(1)));
    assert_eq!(q.complete().unwrap_err(), NrtStatus::QueueEmpty, "nothing triggered");
    assert_eq!(q.schedule(13).unwrap(), id().seq_id(4), "slot reused after wrap");
    for want in [11, 12, 13] {
        q.trigger().unwrap();
        assert_eq!(q.complete().unwrap().1, want);
    }
    assert!(q.is_empty());
    assert_eq!(q.cursors(), (5, 5, 5));
}

#[test]
fn queue_admission_order() {
    let mut q = XuQueue::new(id(), 1).unwrap();
    q.schedule(1).unwrap();
    q.shutdown();
    assert_eq!(q.health(), XuHealth::Shutdown);
    assert_eq!(q.schedule(2).unwrap_err(), NrtStatus::QueueFull, "full is checked before SHUTDOWN");
    q.trigger().unwrap();
    q.complete().unwrap();
    assert_eq!(q.schedule(2).unwrap_err(), NrtStatus::Closed);
    q.fatal_shutdown();
    assert_eq!(q.schedule(2).unwrap_err(), NrtStatus::ExecUnitUnrecoverable);
    q.shutdown();
    assert_eq!(q.health(), XuHealth::FatalShutdown, "shutdown does not clear a fatal state");
}

/// Request: (steps before done, verdict, status, gated). A gated request stays in flight until
/// the gate opens.
#[derive(Clone, Copy)]
struct Req {
    steps: u32,
    verdict: Step,
    status: NrtStatus,
    gated: bool,
    fail_submit: Option<NrtStatus>,
}

fn ok(steps: u32) -> Req {
    Req { steps, verdict: Step::Done, status: NrtStatus::Success, gated: false, fail_submit: None }
}

struct Tok {
    req: Req,
    seq: u64,
    steps: u32,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU32,
    completed: AtomicU32,
    abandoned: AtomicU32,
}

struct Fake {
    gate: Arc<AtomicBool>,
    counters: Arc<Counters>,
    seqs: Vec<u64>,
}

impl Executor for Fake {
    type Request = Req;
    type Token = Tok;
    fn submit(&mut self, req: Req, seq_id: u64) -> Result<Tok, NrtStatus> {
        self.counters.submitted.fetch_add(1, Ordering::SeqCst);
        if let Some(s) = req.fail_submit {
            return Err(s);
        }
        self.seqs.push(seq_id);
        Ok(Tok { req, seq: seq_id, steps: 0 })
    }
    fn step(&mut self, t: &mut Tok) -> Step {
        if t.req.gated && !self.gate.load(Ordering::SeqCst) {
            return Step::InFlight;
        }
        t.steps += 1;
        if t.steps >= t.req.steps {
            t.req.verdict
        } else {
            Step::InFlight
        }
    }
    fn complete(&mut self, t: Tok) -> NrtStatus {
        assert!(t.seq != 0);
        self.counters.completed.fetch_add(1, Ordering::SeqCst);
        t.req.status
    }
    fn abandon(&mut self, _t: Tok) {
        self.counters.abandoned.fetch_add(1, Ordering::SeqCst);
    }
}

fn spawn(capacity: usize) -> (Xu<Fake>, Arc<AtomicBool>, Arc<Counters>) {
    let gate = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let fake = Fake { gate: Arc::clone(&gate), counters: Arc::clone(&counters), seqs: Vec::new() };
    (Xu::spawn(id(), capacity, fake).unwrap(), gate, counters)
}

#[test]
fn worker_completes_in_order_and_signals_waiters() {
    let (xu, _gate, counters) = spawn(4);
    let mut tickets = Vec::new();
    for i in 0..12u32 {
        loop {
            match xu.submit(Req { status: NrtStatus::Success, ..ok(1 + i % 3) }) {
                Ok(t) => break tickets.push(t),
                Err(NrtStatus::QueueFull) => {
                    if let Some(t) = tickets.last() {
                        t.wait();
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    for (i, t) in tickets.iter().enumerate() {
        assert_eq!(t.wait(), NrtStatus::Success);
        assert_eq!(t.poll(), Some(NrtStatus::Success));
        assert_eq!(seq_cursor(t.seq_id()), i as u64 + 1);
    }
    assert_eq!(xu.last_completed(), Some(id().seq_id(12)));
    assert_eq!(xu.health(), XuHealth::Healthy);
    let fake = xu.shutdown().unwrap();
    assert_eq!(fake.seqs, (1..=12).map(|c| id().seq_id(c)).collect::<Vec<_>>());
    assert_eq!(counters.completed.load(Ordering::SeqCst), 12);
}

#[test]
fn band_b_status_keeps_xu_healthy() {
    let (xu, _gate, _) = spawn(2);
    let t = xu.submit(Req { status: NrtStatus::ExecCompletedWithNumErr, ..ok(2) }).unwrap();
    assert_eq!(t.wait(), NrtStatus::ExecCompletedWithNumErr);
    assert_eq!(xu.health(), XuHealth::Healthy);
    assert_eq!(xu.submit(ok(1)).unwrap().wait(), NrtStatus::Success);
}

#[test]
fn full_queue_returns_7_while_head_is_in_flight() {
    let (xu, gate, _) = spawn(3);
    let first = xu.submit(Req { gated: true, ..ok(1) }).unwrap();
    let a = xu.submit(ok(1)).unwrap();
    let b = xu.submit(ok(1)).unwrap();
    assert_eq!(xu.submit(ok(1)).unwrap_err(), NrtStatus::QueueFull);
    assert_eq!(first.poll(), None, "not complete ↔ NRT_QUEUE_EMPTY for a poller");
    assert_eq!(xu.pending(), 3);
    gate.store(true, Ordering::SeqCst);
    for t in [&first, &a, &b] {
        assert_eq!(t.wait(), NrtStatus::Success);
    }
    assert_eq!(xu.pending(), 0);
}

#[test]
fn fatal_step_poisons_and_drains_queue_with_101() {
    let (xu, gate, counters) = spawn(8);
    let bad =
        xu.submit(Req { verdict: Step::DoneWithError, status: NrtStatus::Timeout, gated: true, ..ok(1) }).unwrap();
    let queued: Vec<Ticket> = (0..4).map(|_| xu.submit(ok(1)).unwrap()).collect();
    gate.store(true, Ordering::SeqCst);
    assert_eq!(bad.wait(), NrtStatus::Timeout);
    for t in &queued {
        assert_eq!(t.wait(), NrtStatus::ExecUnitUnrecoverable);
    }
    assert_eq!(xu.health(), XuHealth::FatalShutdown);
    assert_eq!(xu.submit(ok(1)).unwrap_err(), NrtStatus::ExecUnitUnrecoverable);
    assert_eq!(xu.pending(), 0);
    let _ = xu.shutdown().unwrap();
    // Queued requests the worker had already submitted were abandoned, the rest never reached
    // the executor; none of them completed on the device.
    assert_eq!(counters.completed.load(Ordering::SeqCst), 1);
    let abandoned = counters.abandoned.load(Ordering::SeqCst);
    assert!(abandoned <= 4);
    assert_eq!(counters.submitted.load(Ordering::SeqCst), 1 + abandoned);
}

#[test]
fn explicit_fatal_shutdown_drains_in_flight_with_101() {
    let (xu, _gate, counters) = spawn(4);
    let a = xu.submit(Req { gated: true, ..ok(1) }).unwrap();
    let b = xu.submit(Req { gated: true, ..ok(1) }).unwrap();
    xu.fatal_shutdown();
    assert_eq!(a.wait(), NrtStatus::ExecUnitUnrecoverable);
    assert_eq!(b.wait(), NrtStatus::ExecUnitUnrecoverable);
    assert_eq!(xu.submit(ok(1)).unwrap_err(), NrtStatus::ExecUnitUnrecoverable);
    drop(xu); // Drop joins the worker.
    assert_eq!(counters.completed.load(Ordering::SeqCst), 0);
}

#[test]
fn failed_submit_keeps_its_status_and_poisons() {
    let (xu, gate, _) = spawn(4);
    let head = xu.submit(Req { gated: true, ..ok(1) }).unwrap();
    let failing = xu.submit(Req { fail_submit: Some(NrtStatus::Resource), ..ok(1) }).unwrap();
    assert_eq!(failing.wait(), NrtStatus::Resource);
    assert_eq!(head.wait(), NrtStatus::ExecUnitUnrecoverable);
    gate.store(true, Ordering::SeqCst);
    assert_eq!(xu.health(), XuHealth::FatalShutdown);
}

#[test]
fn shutdown_finishes_accepted_work_and_joins() {
    let (xu, gate, counters) = spawn(4);
    let tickets: Vec<Ticket> = (0..3).map(|i| xu.submit(Req { gated: i == 0, ..ok(2) }).unwrap()).collect();
    gate.store(true, Ordering::SeqCst);
    let fake = xu.shutdown().unwrap();
    for t in &tickets {
        assert_eq!(t.poll(), Some(NrtStatus::Success));
    }
    assert_eq!(fake.seqs.len(), 3);
    assert_eq!(counters.completed.load(Ordering::SeqCst), 3);
}

#[test]
fn submit_after_shutdown_is_closed() {
    // Pure-queue view of the same rule on the threaded XU: health SHUTDOWN refuses with 14.
    let mut q = XuQueue::new(id(), 2).unwrap();
    q.shutdown();
    assert_eq!(q.schedule(()).unwrap_err(), NrtStatus::Closed);
}
