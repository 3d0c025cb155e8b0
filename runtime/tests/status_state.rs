//! Priority mapper on every status; state guards and transitions.

use runtime::state::*;
use runtime::status::{priority, worse, worst};
use runtime::{NrtStatus, Priority};

#[test]
fn priority_of_every_status() {
    use NrtStatus::*;
    use Priority::*;
    let table = [
        (Success, None),
        (Failure, Medium),
        (Invalid, Medium),
        (InvalidHandle, Medium),
        (Resource, Medium),
        (Timeout, High),
        (HwError, High),
        (QueueFull, Medium),
        (LoadNotEnoughNc, Medium),
        (UnsupportedNeffVersion, Medium),
        (FailHostMemAlloc, Medium),
        (Uninitialized, Medium),
        (Closed, Medium),
        (QueueEmpty, Medium),
        (ExecUnitUnrecoverable, Medium),
        (ExecBadInput, Medium),
        (ExecCompletedWithNumErr, Medium),
        (ExecCompletedWithErr, Critical),
        (ExecNcBusy, Critical),
        (ExecOob, Critical),
        (CollPending, Critical),
        (ExecHwErrCollectives, High),
        (ExecHwErrHbmUe, Critical),
        (ExecHwErrNcUe, Critical),
        (ExecHwErrDmaAbort, Critical),
        (ExecSwNqOverflow, High),
        (ExecHwErrRepairableHbmUe, Critical),
        (NetworkProxyFailure, High),
    ];
    assert_eq!(table.len(), NrtStatus::ALL.len());
    for (s, p) in table {
        assert_eq!(priority(s), p, "{s}");
    }
}

#[test]
fn worst_examples_and_ties() {
    use NrtStatus::*;
    assert_eq!(worst([Success, ExecCompletedWithNumErr]), ExecCompletedWithNumErr);
    assert_eq!(worst([ExecCompletedWithNumErr, Success]), ExecCompletedWithNumErr);
    assert_eq!(worst([ExecSwNqOverflow, ExecHwErrDmaAbort]), ExecHwErrDmaAbort);
    assert_eq!(worst([ExecHwErrDmaAbort, ExecSwNqOverflow]), ExecHwErrDmaAbort);
    assert_eq!(worst([Timeout, ExecCompletedWithNumErr]), Timeout);
    assert_eq!(worst([]), Success);
    assert_eq!(worst([Success, Success]), Success);
    // Ties: the earlier (lower NC index) wins.
    assert_eq!(worst([ExecHwErrHbmUe, ExecHwErrDmaAbort]), ExecHwErrHbmUe);
    assert_eq!(worst([ExecHwErrDmaAbort, ExecHwErrHbmUe]), ExecHwErrDmaAbort);
    assert_eq!(worst([Timeout, ExecSwNqOverflow]), Timeout);
    assert_eq!(worst([ExecSwNqOverflow, Timeout]), ExecSwNqOverflow);
    assert_eq!(worse(Failure, ExecCompletedWithNumErr), Failure);
    assert_eq!(worse(ExecCompletedWithNumErr, ExecCompletedWithErr), ExecCompletedWithErr);
}

#[test]
fn init_state_guard() {
    let mut rt = RuntimeState::new();
    assert_eq!(rt.state(), NrtInitState::Start);
    assert_eq!(rt.guard(100).unwrap_err().status(), NrtStatus::Uninitialized);
    rt.init(100).unwrap();
    assert_eq!(rt.state(), NrtInitState::Init);
    assert_eq!(rt.init(100).unwrap_err(), StateError::AlreadyInitialized);
    assert_eq!(StateError::AlreadyInitialized.status(), NrtStatus::Failure);
    rt.guard(100).unwrap();
    rt.close(100).unwrap();
    assert_eq!(rt.state(), NrtInitState::Closed);
    assert_eq!(rt.guard(100).unwrap_err().status(), NrtStatus::Closed);
    assert_eq!(rt.close(100).unwrap_err(), StateError::Closed);
    rt.init(100).unwrap();
    rt.guard(100).unwrap();
}

#[test]
fn forked_child_is_fenced() {
    let mut rt = RuntimeState::new();
    rt.init(100).unwrap();
    let e = rt.guard(101).unwrap_err();
    assert_eq!(e, StateError::ForkedChild { owner: 100, caller: 101 });
    assert_eq!(e.status(), NrtStatus::Uninitialized);
    assert_eq!(rt.state(), NrtInitState::Child);
    // CHILD is latched: even the original pid's view in this copy is fenced.
    assert_eq!(rt.guard(100).unwrap_err().status(), NrtStatus::Uninitialized);
    assert!(rt.init(101).is_err());
    // nrt_init from a forked child of an initialised parent is NRT_UNINITIALIZED too.
    let mut parent = RuntimeState::new();
    parent.init(100).unwrap();
    assert_eq!(parent.check_init(101).unwrap_err(), StateError::ForkedChild { owner: 100, caller: 101 });
    assert_eq!(parent.init(101).unwrap_err().status(), NrtStatus::Uninitialized);
    let mut again = RuntimeState::new();
    again.init(100).unwrap();
    assert_eq!(again.check_init(100).unwrap_err(), StateError::AlreadyInitialized);
    assert_eq!(again.state(), NrtInitState::Init, "check_init by the owner changes nothing");
    let mut here = RuntimeState::new();
    here.init(std::process::id()).unwrap();
    here.guard_current().unwrap();
}

#[test]
fn enum_values() {
    assert_eq!(
        [NrtInitState::Start, NrtInitState::Init, NrtInitState::Child, NrtInitState::Closed].map(|s| s.value()),
        [0, 1, 2, 3]
    );
    assert_eq!(NrtInitState::from_value(2), Some(NrtInitState::Child));
    assert_eq!(NrtInitState::from_value(NRT_STATE_NUM), None);
    for v in 0..DMSTATE_LAST {
        assert_eq!(DlrModelState::from_value(v).unwrap().value(), v);
    }
    assert_eq!(DlrModelState::from_value(DMSTATE_LAST), None);
    assert_eq!(
        [ExecState::Init, ExecState::WaitBarrierProxy, ExecState::WaitCore, ExecState::Done].map(|s| s.value()),
        [0, 1, 2, 3]
    );
    assert_eq!([ErpStep::Done, ErpStep::Continue, ErpStep::Fatal].map(|s| s.value()), [0, 1, 2]);
    assert_eq!(ExecFatalStatus::ALL.map(|c| c.index()), [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(EXEC_FATAL_STATUS_COUNT, 7);
}

#[test]
fn fatal_flags_row() {
    let mut f = FatalFlags::default();
    assert!(!f.any());
    f.set(ExecFatalStatus::Timeout);
    f.set(ExecFatalStatus::SwNqOverflow);
    assert!(f.get(ExecFatalStatus::Timeout) && f.get(ExecFatalStatus::SwNqOverflow) && !f.get(ExecFatalStatus::Oob));
    assert_eq!(f.as_array(), [false, false, true, true, false, false, false]);
    f.clear();
    assert!(!f.any());
}

#[test]
fn model_lifecycle_and_refcounted_unload() {
    let mut m = ModelLifecycle::new();
    assert_eq!(m.state(), DlrModelState::Invalid);
    assert_eq!(m.check_executable().unwrap_err().status(), NrtStatus::InvalidHandle);
    assert!(m.load_succeeded().is_err(), "INVALID → RUNNING is illegal");
    m.begin_load().unwrap();
    assert_eq!(m.state(), DlrModelState::Starting);
    assert!(m.acquire().is_err());
    m.load_succeeded().unwrap();
    assert_eq!((m.state(), m.ref_count()), (DlrModelState::Running, 1));
    m.check_executable().unwrap();
    assert_eq!(m.acquire().unwrap(), 2);
    assert_eq!(m.acquire().unwrap(), 3);
    assert_eq!(m.unload().unwrap(), Unload::StillReferenced { remaining: 2 });
    assert_eq!(m.unload().unwrap(), Unload::StillReferenced { remaining: 1 });
    assert_eq!(m.state(), DlrModelState::Running, "shared model is not torn down");
    assert_eq!(m.unload().unwrap(), Unload::Teardown);
    assert_eq!((m.state(), m.ref_count()), (DlrModelState::Stopping, 0));
    assert!(m.check_executable().is_err());
    let e = m.unload().unwrap_err();
    assert_eq!(e.status(), NrtStatus::Failure);
    m.finish_teardown().unwrap();
    assert_eq!(m.state(), DlrModelState::Stopped);
    assert!(m.finish_teardown().is_err());
    assert!(m.begin_load().is_err());
}

#[test]
fn failed_load_and_poison() {
    let mut m = ModelLifecycle::new();
    m.begin_load().unwrap();
    m.load_failed().unwrap();
    assert_eq!((m.state(), m.ref_count()), (DlrModelState::Stopped, 0));

    let mut m = ModelLifecycle::new();
    m.begin_load().unwrap();
    m.load_succeeded().unwrap();
    assert_eq!(m.poisoned(), None);
    m.poison(NrtStatus::ExecHwErrHbmUe);
    m.poison(NrtStatus::Timeout);
    assert_eq!(m.poisoned(), Some(NrtStatus::ExecHwErrHbmUe), "first poisoning status kept");
    assert_eq!(m.state(), DlrModelState::Running, "fail-stop leaves the model RUNNING");
    m.check_executable().unwrap();
}
