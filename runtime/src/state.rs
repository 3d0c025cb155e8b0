//! The host state machines (docs/facts/libnrt-runtime-model.md §A.1, §A.3, §A.4.4).
//!
//! * [`NrtInitState`] + [`RuntimeState`]: the global lifecycle and the guard at the top of
//!   every public API entry (docs/facts/libnrt-runtime-model.md §A.1.1). The guard reproduces `nrt_execute`'s two
//!   immediates: `state == CLOSED` → `NRT_CLOSED` (14); any other `state != INIT` →
//!   `NRT_UNINITIALIZED` (13). A forked child (`NRT_STATE_CHILD`, detected by a pid different
//!   from the one that ran `init`) is therefore refused with **13** as well: docs/facts/libnrt-runtime-model.md §A.1.1 pins
//!   exactly those two immediates and CHILD is "not INIT". (docs/facts/libnrt.md §4.1 mentions a generic
//!   1 for "other bad state"; libnrt's `nrt_execute` guard (docs/facts/libnrt-runtime-model.md §A.1.1) has no such branch, so 13 it is.)
//! * [`DlrModelState`] + [`ModelLifecycle`]: the per-model lifecycle with the ref-counted
//!   unload of docs/facts/libnrt-runtime-model.md §A.3.2 (device teardown only when the count reaches zero) and the
//!   fail-stop "RUNNING but poisoned" posture of §5.5.
//! * [`ExecState`], [`ErpStep`]: the per-inference machine and the poller verdict (§1.3, §1.4).
//! * [`ExecFatalStatus`], [`FatalFlags`]: `exec_fatal_status` and the per-NC `bool[7]` flag row (§4.4).

use crate::status::NrtStatus;
use thiserror::Error;

/// Errors of the state machines; [`StateError::status`] gives the `NRT_STATUS` libnrt returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum StateError {
    /// API called before `nrt_init` (state START).
    #[error("runtime not initialized")]
    Uninitialized,
    /// API called after `nrt_close`.
    #[error("runtime closed")]
    Closed,
    /// API called from a forked child of the process that initialized the runtime.
    #[error("runtime inherited across fork (owner pid {owner}, caller pid {caller}); devices cannot be driven")]
    ForkedChild { owner: u32, caller: u32 },
    /// `nrt_init` while already initialized.
    #[error("runtime already initialized")]
    AlreadyInitialized,
    /// A model transition that the lifecycle does not allow.
    #[error("illegal model state transition {from:?} -> {to:?}")]
    IllegalModelTransition { from: DlrModelState, to: DlrModelState },
    /// Execute/acquire on a model that is not RUNNING.
    #[error("model is not running (state {0:?})")]
    ModelNotRunning(DlrModelState),
}

impl StateError {
    /// The status returned to the API caller.
    pub fn status(self) -> NrtStatus {
        match self {
            StateError::Uninitialized | StateError::ForkedChild { .. } => NrtStatus::Uninitialized,
            StateError::Closed => NrtStatus::Closed,
            StateError::AlreadyInitialized | StateError::IllegalModelTransition { .. } => NrtStatus::Failure,
            StateError::ModelNotRunning(_) => NrtStatus::InvalidHandle,
        }
    }
}

impl nrt_status::Status for StateError {
    fn status(&self) -> NrtStatus {
        StateError::status(*self)
    }
}

/// `NRT_INIT_STATE` (docs/facts/libnrt-runtime-model.md §A.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NrtInitState {
    /// `NRT_STATE_START`: before `nrt_init`.
    Start = 0,
    /// `NRT_STATE_INIT`: initialized, devices up.
    Init = 1,
    /// `NRT_STATE_CHILD`: the view of a forked child.
    Child = 2,
    /// `NRT_STATE_CLOSED`: after `nrt_close`.
    Closed = 3,
}

/// `NRT_STATE_NUM`.
pub const NRT_STATE_NUM: u32 = 4;

impl NrtInitState {
    /// Numeric value.
    pub fn value(self) -> u32 {
        self as u32
    }
    /// From the numeric value.
    pub fn from_value(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Start),
            1 => Some(Self::Init),
            2 => Some(Self::Child),
            3 => Some(Self::Closed),
            _ => None,
        }
    }
}

/// The global runtime lifecycle and API guard. Pids are passed in so the fork check is
/// testable; [`RuntimeState::guard_current`] uses the real pid.
#[derive(Debug, Clone)]
pub struct RuntimeState {
    state: NrtInitState,
    owner_pid: u32,
}

impl Default for RuntimeState {
    fn default() -> Self {
        Self::new()
    }
}

impl RuntimeState {
    /// State START.
    pub fn new() -> Self {
        Self { state: NrtInitState::Start, owner_pid: 0 }
    }
    /// Current state.
    pub fn state(&self) -> NrtInitState {
        self.state
    }
    /// Whether `nrt_init` by process `pid` may proceed (START or CLOSED), without changing
    /// state — except that INIT seen from another pid latches CHILD, as the guard does.
    /// INIT → [`StateError::AlreadyInitialized`]; CHILD → [`StateError::ForkedChild`].
    pub fn check_init(&mut self, pid: u32) -> Result<(), StateError> {
        if self.state == NrtInitState::Init && pid != self.owner_pid {
            self.state = NrtInitState::Child;
        }
        match self.state {
            NrtInitState::Start | NrtInitState::Closed => Ok(()),
            NrtInitState::Init => Err(StateError::AlreadyInitialized),
            NrtInitState::Child => Err(StateError::ForkedChild { owner: self.owner_pid, caller: pid }),
        }
    }
    /// `nrt_init` by process `pid`: START or CLOSED → INIT. Re-initializing after close is
    /// allowed (a new runtime instance); INIT (or INIT of another process, i.e. a forked
    /// child) or CHILD → error, as in [`RuntimeState::check_init`].
    pub fn init(&mut self, pid: u32) -> Result<(), StateError> {
        self.check_init(pid)?;
        self.state = NrtInitState::Init;
        self.owner_pid = pid;
        Ok(())
    }
    /// `nrt_close` by `pid`: passes the guard, then INIT → CLOSED.
    pub fn close(&mut self, pid: u32) -> Result<(), StateError> {
        self.guard(pid)?;
        self.state = NrtInitState::Closed;
        Ok(())
    }
    /// The API guard. INIT and the owner pid → Ok. INIT from another pid latches CHILD.
    pub fn guard(&mut self, pid: u32) -> Result<(), StateError> {
        if self.state == NrtInitState::Init && pid != self.owner_pid {
            self.state = NrtInitState::Child;
        }
        match self.state {
            NrtInitState::Init => Ok(()),
            NrtInitState::Closed => Err(StateError::Closed),
            NrtInitState::Start => Err(StateError::Uninitialized),
            NrtInitState::Child => Err(StateError::ForkedChild { owner: self.owner_pid, caller: pid }),
        }
    }
    /// [`RuntimeState::guard`] with `std::process::id()`.
    pub fn guard_current(&mut self) -> Result<(), StateError> {
        self.guard(std::process::id())
    }
}

/// `DLR_MODEL_STATE` (docs/facts/libnrt-runtime-model.md §A.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DlrModelState {
    /// Allocated, not installed.
    Invalid = 0,
    /// Staging in progress.
    Starting = 1,
    /// Installed and executable.
    Running = 2,
    /// Unload requested, draining.
    Stopping = 3,
    /// Fully unstaged.
    Stopped = 4,
}

/// `DMSTATE_LAST`.
pub const DMSTATE_LAST: u32 = 5;

impl DlrModelState {
    /// Numeric value.
    pub fn value(self) -> u32 {
        self as u32
    }
    /// From the numeric value.
    pub fn from_value(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Invalid),
            1 => Some(Self::Starting),
            2 => Some(Self::Running),
            3 => Some(Self::Stopping),
            4 => Some(Self::Stopped),
            _ => None,
        }
    }
}

/// What [`ModelLifecycle::unload`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unload {
    /// References remain; nothing is torn down.
    StillReferenced { remaining: u64 },
    /// The count hit zero: the model is now STOPPING; the caller drains the worker, unstages,
    /// detaches, then calls [`ModelLifecycle::finish_teardown`].
    Teardown,
}

/// Per-model lifecycle: state, reference count, fail-stop poison.
///
/// Legal transitions: INVALID → STARTING (`begin_load`); STARTING → RUNNING (`load_succeeded`,
/// count = 1); STARTING → STOPPED (`load_failed`: the half-built model is destroyed, it never
/// ran); RUNNING → STOPPING (last `unload`); STOPPING → STOPPED (`finish_teardown`).
/// Not internally synchronized: keep it under the model's lock.
#[derive(Debug, Clone)]
pub struct ModelLifecycle {
    state: DlrModelState,
    ref_count: u64,
    poison: Option<NrtStatus>,
}

impl Default for ModelLifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelLifecycle {
    /// INVALID, count 0.
    pub fn new() -> Self {
        Self { state: DlrModelState::Invalid, ref_count: 0, poison: None }
    }
    /// Current state.
    pub fn state(&self) -> DlrModelState {
        self.state
    }
    /// Current reference count.
    pub fn ref_count(&self) -> u64 {
        self.ref_count
    }
    fn transition(&mut self, from: DlrModelState, to: DlrModelState) -> Result<(), StateError> {
        if self.state != from {
            return Err(StateError::IllegalModelTransition { from: self.state, to });
        }
        self.state = to;
        Ok(())
    }
    /// INVALID → STARTING.
    pub fn begin_load(&mut self) -> Result<(), StateError> {
        self.transition(DlrModelState::Invalid, DlrModelState::Starting)
    }
    /// STARTING → RUNNING with one reference.
    pub fn load_succeeded(&mut self) -> Result<(), StateError> {
        self.transition(DlrModelState::Starting, DlrModelState::Running)?;
        self.ref_count = 1;
        Ok(())
    }
    /// STARTING → STOPPED (load failure unwound).
    pub fn load_failed(&mut self) -> Result<(), StateError> {
        self.transition(DlrModelState::Starting, DlrModelState::Stopped)?;
        self.ref_count = 0;
        Ok(())
    }
    /// Share a RUNNING model (another handle/replica); returns the new count.
    pub fn acquire(&mut self) -> Result<u64, StateError> {
        if self.state != DlrModelState::Running {
            return Err(StateError::ModelNotRunning(self.state));
        }
        self.ref_count = self.ref_count.saturating_add(1);
        Ok(self.ref_count)
    }
    /// Drop one reference of a RUNNING model; at zero the model goes STOPPING.
    pub fn unload(&mut self) -> Result<Unload, StateError> {
        if self.state != DlrModelState::Running || self.ref_count == 0 {
            return Err(StateError::IllegalModelTransition { from: self.state, to: DlrModelState::Stopping });
        }
        self.ref_count -= 1;
        if self.ref_count > 0 {
            return Ok(Unload::StillReferenced { remaining: self.ref_count });
        }
        self.state = DlrModelState::Stopping;
        Ok(Unload::Teardown)
    }
    /// STOPPING → STOPPED.
    pub fn finish_teardown(&mut self) -> Result<(), StateError> {
        self.transition(DlrModelState::Stopping, DlrModelState::Stopped)
    }
    /// Whether an execution may be started (RUNNING, poisoned or not: fail-stop leaves the model
    /// RUNNING; the execution unit, not the model, refuses further work).
    pub fn check_executable(&self) -> Result<(), StateError> {
        if self.state == DlrModelState::Running {
            Ok(())
        } else {
            Err(StateError::ModelNotRunning(self.state))
        }
    }
    /// Record a fatal execution result (fail-stop). The first poisoning status is kept.
    pub fn poison(&mut self, status: NrtStatus) {
        if self.poison.is_none() {
            self.poison = Some(status);
        }
    }
    /// The status that poisoned the model, if any.
    pub fn poisoned(&self) -> Option<NrtStatus> {
        self.poison
    }
}

/// `exec_state` (docs/facts/libnrt-runtime-model.md §A.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ExecState {
    /// `EXEC_STATE_INIT`.
    Init = 0,
    /// `EXEC_STATE_WAIT_BARRIER_PROXY`.
    WaitBarrierProxy = 1,
    /// `EXEC_STATE_WAIT_CORE`.
    WaitCore = 2,
    /// `EXEC_STATE_DONE`.
    Done = 3,
}

impl ExecState {
    /// Numeric value.
    pub fn value(self) -> u32 {
        self as u32
    }
}

/// `ERP_STEP` (docs/facts/libnrt-runtime-model.md §A.1.4): the one-step verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErpStep {
    /// `ERP_STEP_DONE`.
    Done = 0,
    /// `ERP_STEP_CONTINUE`.
    Continue = 1,
    /// `ERP_STEP_FATAL`.
    Fatal = 2,
}

impl ErpStep {
    /// Numeric value.
    pub fn value(self) -> u32 {
        self as u32
    }
}

/// `exec_fatal_status` (docs/facts/libnrt-runtime-model.md §A.4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExecFatalStatus {
    None = 0,
    Oob = 1,
    Timeout = 2,
    SwNqOverflow = 3,
    NetworkProxy = 4,
    Barrier = 5,
    Invalid = 6,
}

/// `EXEC_FATAL_STATUS_COUNT`.
pub const EXEC_FATAL_STATUS_COUNT: usize = 7;

impl ExecFatalStatus {
    /// All causes in index order.
    pub const ALL: [ExecFatalStatus; EXEC_FATAL_STATUS_COUNT] =
        [Self::None, Self::Oob, Self::Timeout, Self::SwNqOverflow, Self::NetworkProxy, Self::Barrier, Self::Invalid];
    /// Index into the flag row.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One NC's row of `exec_fatal_status` (`bool[7]`): several causes may be flagged at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FatalFlags([bool; EXEC_FATAL_STATUS_COUNT]);

impl FatalFlags {
    /// Flag a cause.
    pub fn set(&mut self, cause: ExecFatalStatus) {
        self.0[cause.index()] = true;
    }
    /// Is the cause flagged?
    pub fn get(&self, cause: ExecFatalStatus) -> bool {
        self.0[cause.index()]
    }
    /// Any cause flagged?
    pub fn any(&self) -> bool {
        self.0.iter().any(|&b| b)
    }
    /// The raw row.
    pub fn as_array(&self) -> [bool; EXEC_FATAL_STATUS_COUNT] {
        self.0
    }
    /// Clear all flags.
    pub fn clear(&mut self) {
        self.0 = [false; EXEC_FATAL_STATUS_COUNT];
    }
}
