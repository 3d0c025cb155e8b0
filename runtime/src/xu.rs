//! The execution unit (XU): per-vNC work queue and worker (docs/facts/libnrt-runtime-model.md §B.6, docs/facts/libnrt.md §4.1, §4.6, §8).
//!
//! [`XuQueue`] is the pure queue: three cursors `exec_head ≤ scheduled_head ≤ scheduled_tail`,
//! all starting at 1. `schedule` writes the slot at `scheduled_tail` then advances it;
//! `trigger` (stage + doorbell) advances `scheduled_head`; `complete` (the worker's pop)
//! advances `exec_head`. Admission reproduces `tpb_xu_schedule_request`, in order:
//! FATAL_SHUTDOWN → `NRT_EXEC_UNIT_UNRECOVERABLE` (101); `scheduled_tail − exec_head ≥ capacity`
//! → `NRT_QUEUE_FULL` (7); SHUTDOWN → `NRT_CLOSED` (14). Nothing to trigger / nothing to
//! complete → `NRT_QUEUE_EMPTY` (15). Sequence ids are `(cursor & 0xFFFF_FFFF_FFFF) | xu_id << 48`
//! with `xu_id = {type:4 (COMPUTE = 1), queue:4, vnc:8}` LSB-first (the vNC is bits 63:56); a
//! cursor never wraps (cursors ≥ 0xFFFF_FFFF_FFFE are refused with `NRT_RESOURCE`).
//!
//! [`Xu`] runs one worker thread per vNC over an [`Executor`] (the device side: stage +
//! doorbell, then the non-blocking one-step function). The worker triggers every scheduled
//! request in order, steps the oldest in-flight one until done, publishes its status and wakes
//! its waiter ([`Ticket`]). A step verdict of [`Step::DoneWithError`], a failed submit, or
//! [`Xu::fatal_shutdown`] degrades the XU to FATAL_SHUTDOWN: from then on every request not yet
//! completed — in flight or queued — completes with 101 (a failed submit keeps its own status),
//! and new submits are refused with 101. [`Xu::shutdown`] refuses new submits (14), lets the
//! worker finish what was accepted, and joins it. No lock is held while the executor runs.

use crate::completion::Step;
use crate::status::NrtStatus;
use platform::sync::{lock, wait};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use thiserror::Error;

/// XU type COMPUTE.
pub const XU_TYPE_COMPUTE: u8 = 1;
/// Cursor bits of a sequence id.
pub const SEQ_CURSOR_MASK: u64 = 0xFFFF_FFFF_FFFF;
/// Cursors must stay below this (never wrap).
pub const SEQ_CURSOR_LIMIT: u64 = 0xFFFF_FFFF_FFFE;

/// XU errors outside the NRT_STATUS channel.
#[derive(Debug, Error)]
pub enum XuError {
    #[error("xu id field out of range: type {kind}, queue {queue} (4 bits each)")]
    BadId { kind: u8, queue: u8 },
    #[error("xu queue capacity must be at least 1")]
    ZeroCapacity,
    #[error("failed to spawn the XU worker: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("the XU worker panicked")]
    WorkerPanicked,
}

/// `xu_id` = {type:4, queue:4, vnc:8}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XuId {
    kind: u8,
    queue: u8,
    vnc: u8,
}

impl XuId {
    /// Build from fields (type and queue are 4 bits).
    pub fn new(kind: u8, queue: u8, vnc: u8) -> Result<Self, XuError> {
        if kind > 0xF || queue > 0xF {
            return Err(XuError::BadId { kind, queue });
        }
        Ok(Self { kind, queue, vnc })
    }
    /// A COMPUTE XU.
    pub fn compute(queue: u8, vnc: u8) -> Result<Self, XuError> {
        Self::new(XU_TYPE_COMPUTE, queue, vnc)
    }
    /// From the raw 16-bit id.
    pub fn from_raw(raw: u16) -> Self {
        Self { kind: (raw & 0xF) as u8, queue: ((raw >> 4) & 0xF) as u8, vnc: (raw >> 8) as u8 }
    }
    /// The raw 16-bit id.
    pub fn raw(self) -> u16 {
        u16::from(self.kind) | (u16::from(self.queue) << 4) | (u16::from(self.vnc) << 8)
    }
    pub fn kind(self) -> u8 {
        self.kind
    }
    pub fn queue(self) -> u8 {
        self.queue
    }
    pub fn vnc(self) -> u8 {
        self.vnc
    }
    /// Sequence id of `cursor` on this XU.
    pub fn seq_id(self, cursor: u64) -> u64 {
        (cursor & SEQ_CURSOR_MASK) | (u64::from(self.raw()) << 48)
    }
}

/// Cursor part of a sequence id.
pub fn seq_cursor(seq_id: u64) -> u64 {
    seq_id & SEQ_CURSOR_MASK
}

/// XU part of a sequence id.
pub fn seq_xu(seq_id: u64) -> XuId {
    XuId::from_raw((seq_id >> 48) as u16)
}

/// XU health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XuHealth {
    /// `XU_STATUS_HEALTHY`.
    Healthy,
    /// Orderly shutdown: submits → `NRT_CLOSED`.
    Shutdown,
    /// Poisoned: submits → `NRT_EXEC_UNIT_UNRECOVERABLE`, queued work drained with it.
    FatalShutdown,
}

/// The pure XU queue (not synchronized; [`Xu`] keeps it under a mutex).
#[derive(Debug)]
pub struct XuQueue<T> {
    id: XuId,
    capacity: u64,
    exec_head: u64,
    scheduled_head: u64,
    scheduled_tail: u64,
    slots: Vec<Option<(u64, T)>>,
    health: XuHealth,
}

impl<T> XuQueue<T> {
    /// Empty queue, cursors at 1, HEALTHY.
    pub fn new(id: XuId, capacity: usize) -> Result<Self, XuError> {
        if capacity == 0 {
            return Err(XuError::ZeroCapacity);
        }
        let mut slots = Vec::with_capacity(capacity);
        slots.resize_with(capacity, || None);
        Ok(Self {
            id,
            capacity: capacity as u64,
            exec_head: 1,
            scheduled_head: 1,
            scheduled_tail: 1,
            slots,
            health: XuHealth::Healthy,
        })
    }
    fn idx(&self, cursor: u64) -> usize {
        (cursor % self.capacity) as usize
    }
    pub fn id(&self) -> XuId {
        self.id
    }
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }
    /// `(exec_head, scheduled_head, scheduled_tail)`.
    pub fn cursors(&self) -> (u64, u64, u64) {
        (self.exec_head, self.scheduled_head, self.scheduled_tail)
    }
    pub fn health(&self) -> XuHealth {
        self.health
    }
    /// HEALTHY → SHUTDOWN (FATAL_SHUTDOWN stays).
    pub fn shutdown(&mut self) {
        if self.health == XuHealth::Healthy {
            self.health = XuHealth::Shutdown;
        }
    }
    /// → FATAL_SHUTDOWN.
    pub fn fatal_shutdown(&mut self) {
        self.health = XuHealth::FatalShutdown;
    }
    /// Requests accepted and not yet completed.
    pub fn len(&self) -> usize {
        (self.scheduled_tail - self.exec_head) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.scheduled_tail == self.exec_head
    }
    /// Scheduled but not yet triggered.
    pub fn untriggered(&self) -> usize {
        (self.scheduled_tail - self.scheduled_head) as usize
    }
    /// Triggered but not yet completed.
    pub fn in_flight(&self) -> usize {
        (self.scheduled_head - self.exec_head) as usize
    }
    /// Sequence id of the last completed request (`exec_head − 1`), if any.
    pub fn last_completed(&self) -> Option<u64> {
        (self.exec_head > 1).then(|| self.id.seq_id(self.exec_head - 1))
    }
    /// Accept a request; returns its sequence id.
    pub fn schedule(&mut self, item: T) -> Result<u64, NrtStatus> {
        if self.health == XuHealth::FatalShutdown {
            return Err(NrtStatus::ExecUnitUnrecoverable);
        }
        if self.scheduled_tail - self.exec_head >= self.capacity {
            return Err(NrtStatus::QueueFull);
        }
        if self.health == XuHealth::Shutdown {
            return Err(NrtStatus::Closed);
        }
        if self.scheduled_tail >= SEQ_CURSOR_LIMIT {
            return Err(NrtStatus::Resource);
        }
        let seq = self.id.seq_id(self.scheduled_tail);
        let i = self.idx(self.scheduled_tail);
        self.slots[i] = Some((seq, item));
        self.scheduled_tail += 1;
        Ok(seq)
    }
    /// Trigger the oldest untriggered request (`scheduled_head++`).
    pub fn trigger(&mut self) -> Result<(u64, &mut T), NrtStatus> {
        if self.scheduled_head == self.scheduled_tail {
            return Err(NrtStatus::QueueEmpty);
        }
        let i = self.idx(self.scheduled_head);
        self.scheduled_head += 1;
        match self.slots[i].as_mut() {
            Some((seq, item)) => Ok((*seq, item)),
            None => Err(NrtStatus::QueueEmpty),
        }
    }
    /// The oldest triggered, uncompleted request.
    pub fn current(&mut self) -> Result<(u64, &mut T), NrtStatus> {
        if self.exec_head == self.scheduled_head {
            return Err(NrtStatus::QueueEmpty);
        }
        let i = self.idx(self.exec_head);
        match self.slots[i].as_mut() {
            Some((seq, item)) => Ok((*seq, item)),
            None => Err(NrtStatus::QueueEmpty),
        }
    }
    /// Pop the oldest triggered request (`exec_head++`).
    pub fn complete(&mut self) -> Result<(u64, T), NrtStatus> {
        if self.exec_head == self.scheduled_head {
            return Err(NrtStatus::QueueEmpty);
        }
        let i = self.idx(self.exec_head);
        self.exec_head += 1;
        self.slots[i].take().ok_or(NrtStatus::QueueEmpty)
    }
}

/// The device side of an XU.
pub trait Executor: Send + 'static {
    /// What a submitter hands in.
    type Request: Send + 'static;
    /// An in-flight execution.
    type Token: Send + 'static;
    /// Stage and doorbell `req` (sequence id `seq_id`). An error poisons the XU.
    fn submit(&mut self, req: Self::Request, seq_id: u64) -> Result<Self::Token, NrtStatus>;
    /// Non-blocking progress (the one-step function).
    fn step(&mut self, token: &mut Self::Token) -> Step;
    /// Finished (`step` returned Done or DoneWithError): release resources, return the status.
    fn complete(&mut self, token: Self::Token) -> NrtStatus;
    /// The XU is poisoned: release an in-flight execution without waiting for it.
    fn abandon(&mut self, token: Self::Token);
}

#[derive(Debug, Default)]
struct CompletionCell {
    status: Mutex<Option<NrtStatus>>,
    cv: Condvar,
}

impl CompletionCell {
    fn signal(&self, s: NrtStatus) {
        *lock(&self.status) = Some(s);
        self.cv.notify_all();
    }
}

/// A submitted request's completion handle.
#[derive(Debug, Clone)]
pub struct Ticket {
    seq_id: u64,
    cell: Arc<CompletionCell>,
}

impl Ticket {
    /// The request's sequence id.
    pub fn seq_id(&self) -> u64 {
        self.seq_id
    }
    /// The status if complete (`None` ⇔ `NRT_QUEUE_EMPTY` for a poller).
    pub fn poll(&self) -> Option<NrtStatus> {
        *lock(&self.cell.status)
    }
    /// Block until complete.
    pub fn wait(&self) -> NrtStatus {
        let mut g = lock(&self.cell.status);
        loop {
            if let Some(s) = *g {
                return s;
            }
            g = wait(&self.cell.cv, g);
        }
    }
}

struct Slot<R> {
    req: Option<R>,
    cell: Arc<CompletionCell>,
}

struct Inner<R> {
    queue: XuQueue<Slot<R>>,
    stop: bool,
}

struct Shared<R> {
    inner: Mutex<Inner<R>>,
    work: Condvar,
}

enum Flight<T> {
    Running(T),
    Failed(NrtStatus),
}

/// An execution unit with its worker thread.
pub struct Xu<E: Executor> {
    shared: Arc<Shared<E::Request>>,
    worker: Option<JoinHandle<E>>,
    id: XuId,
}

impl<E: Executor> Xu<E> {
    /// Create the queue and start the worker (thread name `xu-<vnc>`).
    pub fn spawn(id: XuId, capacity: usize, executor: E) -> Result<Self, XuError> {
        let queue = XuQueue::new(id, capacity)?;
        let shared = Arc::new(Shared { inner: Mutex::new(Inner { queue, stop: false }), work: Condvar::new() });
        let worker_shared = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name(format!("xu-{}", id.vnc()))
            .spawn(move || worker_loop(worker_shared, executor, capacity))?;
        Ok(Self { shared, worker: Some(worker), id })
    }
    /// This XU's id.
    pub fn id(&self) -> XuId {
        self.id
    }
    /// Submit a request. Errors: 101 (FATAL_SHUTDOWN), 7 (full), 14 (SHUTDOWN).
    pub fn submit(&self, req: E::Request) -> Result<Ticket, NrtStatus> {
        let cell = Arc::new(CompletionCell::default());
        let seq_id = {
            let mut g = lock(&self.shared.inner);
            if g.stop {
                g.queue.shutdown();
            }
            g.queue.schedule(Slot { req: Some(req), cell: Arc::clone(&cell) })?
        };
        self.shared.work.notify_one();
        Ok(Ticket { seq_id, cell })
    }
    /// Current health.
    pub fn health(&self) -> XuHealth {
        lock(&self.shared.inner).queue.health()
    }
    /// Sequence id of the last completed request.
    pub fn last_completed(&self) -> Option<u64> {
        lock(&self.shared.inner).queue.last_completed()
    }
    /// Accepted and not yet completed.
    pub fn pending(&self) -> usize {
        lock(&self.shared.inner).queue.len()
    }
    /// Poison the XU (e.g. a failed model stop).
    pub fn fatal_shutdown(&self) {
        lock(&self.shared.inner).queue.fatal_shutdown();
        self.shared.work.notify_one();
    }
    fn stop_and_join(&mut self) -> Result<E, XuError> {
        {
            let mut g = lock(&self.shared.inner);
            g.queue.shutdown();
            g.stop = true;
        }
        self.shared.work.notify_one();
        match self.worker.take() {
            Some(h) => h.join().map_err(|_| XuError::WorkerPanicked),
            None => Err(XuError::WorkerPanicked),
        }
    }
    /// Refuse new work, finish accepted work, join the worker; returns the executor.
    pub fn shutdown(mut self) -> Result<E, XuError> {
        self.stop_and_join()
    }
}

impl<E: Executor> Drop for Xu<E> {
    fn drop(&mut self) {
        if self.worker.is_some() {
            let _ = self.stop_and_join();
        }
    }
}

fn worker_loop<E: Executor>(shared: Arc<Shared<E::Request>>, mut exec: E, capacity: usize) -> E {
    let mut flights: VecDeque<Flight<E::Token>> = VecDeque::with_capacity(capacity);
    let mut to_submit: Vec<(u64, Option<E::Request>)> = Vec::with_capacity(capacity);
    loop {
        // Phase 1 (locked): fatal drain, collect triggers, or sleep.
        let fatal = {
            let mut g = lock(&shared.inner);
            loop {
                if g.stop && g.queue.is_empty() && flights.is_empty() {
                    return exec;
                }
                if g.queue.health() == XuHealth::FatalShutdown {
                    if !g.queue.is_empty() || !flights.is_empty() {
                        break true;
                    }
                } else {
                    while let Ok((seq, slot)) = g.queue.trigger() {
                        to_submit.push((seq, slot.req.take()));
                    }
                    if !to_submit.is_empty() || !flights.is_empty() {
                        break false;
                    }
                }
                g = wait(&shared.work, g);
            }
        };
        if fatal {
            drain_fatal(&shared, &mut exec, &mut flights);
            continue;
        }
        // Phase 2 (unlocked): stage + doorbell.
        for (seq, req) in to_submit.drain(..) {
            let flight = match req {
                Some(r) => match exec.submit(r, seq) {
                    Ok(t) => Flight::Running(t),
                    Err(s) => {
                        tracing::error!(seq_id = seq, status = %s, "XU submit failed; execution unit poisoned");
                        lock(&shared.inner).queue.fatal_shutdown();
                        Flight::Failed(s)
                    }
                },
                None => Flight::Failed(NrtStatus::Failure),
            };
            flights.push_back(flight);
        }
        // Phase 3 (unlocked): one step of the oldest in-flight execution.
        let verdict = match flights.front_mut() {
            Some(Flight::Running(t)) => exec.step(t),
            Some(Flight::Failed(_)) => Step::DoneWithError,
            None => continue,
        };
        if verdict == Step::InFlight {
            std::thread::yield_now();
            continue;
        }
        let status = match flights.pop_front() {
            Some(Flight::Running(t)) => exec.complete(t),
            Some(Flight::Failed(s)) => s,
            None => continue,
        };
        let mut g = lock(&shared.inner);
        if verdict == Step::DoneWithError {
            g.queue.fatal_shutdown();
        }
        if let Ok((seq, slot)) = g.queue.complete() {
            tracing::debug!(seq_id = seq, status = %status, "XU request completed");
            slot.cell.signal(status);
        }
    }
}

fn drain_fatal<E: Executor>(shared: &Shared<E::Request>, exec: &mut E, flights: &mut VecDeque<Flight<E::Token>>) {
    while let Some(f) = flights.pop_front() {
        let status = match f {
            Flight::Running(t) => {
                exec.abandon(t);
                NrtStatus::ExecUnitUnrecoverable
            }
            Flight::Failed(s) => s,
        };
        if let Ok((_, slot)) = lock(&shared.inner).queue.complete() {
            slot.cell.signal(status);
        }
    }
    let mut g = lock(&shared.inner);
    while g.queue.trigger().is_ok() {}
    while let Ok((seq, slot)) = g.queue.complete() {
        tracing::debug!(seq_id = seq, "XU request drained with NRT_EXEC_UNIT_UNRECOVERABLE");
        slot.cell.signal(NrtStatus::ExecUnitUnrecoverable);
    }
}
