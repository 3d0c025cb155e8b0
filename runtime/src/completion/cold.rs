//! The engine's logging, out of line: the sweep runs right after the device did (with an
//! inline device, its code has just pushed the host's out of the instruction cache), so the
//! hot path is kept to the lines it needs and the log sites (large macro expansions) live
//! here. The texts are libnrt's where it has one.

use std::time::Duration;

use neff::NrtStatus;

#[cold]
#[inline(never)]
pub(super) fn too_few_sources(sources: usize, ncs: usize) {
    tracing::error!(sources, ncs, "fewer notification sources than NCs");
}
#[cold]
#[inline(never)]
pub(super) fn barrier_failed(nc: usize, rc: NrtStatus) {
    tracing::error!(nc, status = rc.code(), "(FATAL-RT-UNDEFINED-STATE) collectives barrier proxy failed");
}
/// libnrt's text; the threshold in whole seconds (and in ms, for shortened ones).
#[cold]
#[inline(never)]
pub(super) fn barrier_warning(thresh: Duration) {
    tracing::warn!(
        threshold_ms = thresh.as_millis() as u64,
        "Timeout exceeded: Waiting on barrier proxy task: {} sec",
        thresh.as_secs()
    );
}
#[cold]
#[inline(never)]
pub(super) fn network_proxy_failed(nc: usize) {
    tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) collectives network proxy failed");
}
#[cold]
#[inline(never)]
pub(super) fn nq_overflow(nc: usize) {
    tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) notification queue overflow detected");
}
#[cold]
#[inline(never)]
pub(super) fn fatal_while_waiting(nc: usize) {
    tracing::error!(nc, "(FATAL-RT-UNDEFINED-STATE) fatal device error while waiting for execution completion");
}
#[cold]
#[inline(never)]
pub(super) fn timeout(nc: usize, timeout: Duration) {
    tracing::error!(
        nc,
        timeout_ms = timeout.as_millis() as u64,
        "(FATAL-RT-UNDEFINED-STATE) execution timeout, waiting for execution completion notification"
    );
}
#[cold]
#[inline(never)]
pub(super) fn unexpected_hint(nc: usize, engine: usize, hint: u8, subtype: u16) {
    tracing::error!(nc, engine, hint, subtype, "unexpected debug hint");
}
#[cold]
#[inline(never)]
pub(super) fn unexpected_notification(nc: usize, engine: usize, hint: u8, notification_type: u16) {
    tracing::error!(nc, engine, hint, notification_type, "Received unexpected notification");
}
#[cold]
#[inline(never)]
pub(super) fn many_errors(nc: usize, count: usize) {
    tracing::warn!(nc, count, "Received an unusually large number of error notifications");
}
