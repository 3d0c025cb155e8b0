//! The runtime handle and what runs around every entry point: the NRT_INIT_STATE guard,
//! error logging, the API-call profile event and panic containment.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use neff::NrtStatus;
use runtime::{RtError, Runtime};

use super::types::{NRT_STATUS, NRT_SUCCESS};

/// The one poison-tolerant lock (entry points contain panics, so the data is left as the
/// panicking call left it, which every area tolerates).
pub(crate) use platform::sync::lock;

/// The process-global runtime (libnrt's global state). It is built with the monitoring
/// observers installed (the shared-memory counters `neuron-vfio monitor`/`top` read and the
/// debug endpoint), so every `nrt_init` publishes them, as libnrt processes are seen by
/// neuron-monitor.
pub(crate) fn rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| Runtime::with_observers(runtime::monitoring()))
}

pub(crate) fn err(status: NrtStatus, msg: impl Into<String>) -> RtError {
    RtError::new(status, msg)
}

/// The NRT_INIT_STATE guard of libnrt's entry points: the runtime's own
/// ([`Runtime::guard`]): before `nrt_init` and in a forked child NRT_UNINITIALIZED (13),
/// after `nrt_close` NRT_CLOSED (14).
pub(crate) fn guard() -> Result<(), RtError> {
    rt().guard()
}

/// `Ok` for a successful status, else an error naming `what`.
pub(crate) fn status_of(s: NrtStatus, what: &str) -> Result<(), RtError> {
    if s == NrtStatus::Success {
        Ok(())
    } else {
        Err(err(s, format!("{what} completed with {}", s.name())))
    }
}

/// libnrt's logging knobs as this process set them (read once, at the first line: libnrt
/// reads them at load) and where lines go. A bad value falls back to the defaults here;
/// `nrt_init` refuses it with NRT_INVALID ([`runtime::RuntimeConfig::from_env`]).
fn logging() -> &'static (runtime::env::log::LogConfig, runtime::env::log::LogSink) {
    use runtime::env::log::{LogConfig, LogLocation, LogSink};
    static LOG: OnceLock<(LogConfig, LogSink)> = OnceLock::new();
    LOG.get_or_init(|| {
        let cfg = LogConfig::from_env(tracing::Level::ERROR).unwrap_or(LogConfig {
            level: Some(tracing::Level::ERROR),
            level_set: false,
            components: Vec::new(),
            location: LogLocation::Console,
        });
        let sink = LogSink::new(cfg.location, "nrt");
        (cfg, sink)
    })
}

/// Whether the library logs a line of `level` (NEURON_RT_LOG_LEVEL and its NRT component;
/// QUIET: never). `NEURON_VFIO_NRT_QUIET=1` (this project's, for tests) silences it too.
fn logs(level: tracing::Level) -> bool {
    if std::env::var("NEURON_VFIO_NRT_QUIET").is_ok_and(|v| v == "1") {
        return false;
    }
    logging().0.enabled("capi", level)
}

/// One error line of the library's log (console: stderr; or syslog).
pub(crate) fn log_line(line: &str) {
    if logs(tracing::Level::ERROR) {
        logging().1.write_line(tracing::Level::ERROR, &format!("nrt: {line}"));
    }
}

/// One warning line of the library's log (e.g. a variable set but not applied).
pub(crate) fn log_warning(line: &str) {
    if logs(tracing::Level::WARN) {
        logging().1.write_line(tracing::Level::WARN, &format!("nrt: {line}"));
    }
}

pub(crate) fn log_error(func: &str, e: &RtError) {
    if logs(tracing::Level::ERROR) {
        logging().1.write_line(tracing::Level::ERROR, &format!("nrt: {func}: {}: {}", e.status.name(), e.kind));
    }
}

/// The profile's API-call event of entry point `func` (while a profile is active).
fn api_event(func: &str, start_ns: u64, status: u32) {
    use runtime::profile::{self, ApiEvent, Event};
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    profile::emit(Event::Api(ApiEvent {
        name: func.to_string(),
        nc: None,
        start_ns,
        end_ns: profile::now_ns(),
        status,
        tid,
    }));
}

/// Run an entry point: its error is logged and returned as its status; a panic is
/// NRT_FAILURE.
pub(crate) fn entry(func: &str, f: impl FnOnce() -> Result<(), RtError>) -> NRT_STATUS {
    let t0 = runtime::profile::active().then(runtime::profile::now_ns);
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err(err(NrtStatus::Failure, "internal panic")));
    if let Some(t0) = t0 {
        api_event(func, t0, r.as_ref().err().map_or(0, |e| e.status.code()));
    }
    match r {
        Ok(()) => NRT_SUCCESS,
        Err(e) => {
            log_error(func, &e);
            e.status.code() as NRT_STATUS
        }
    }
}

/// Run an entry point without a status (void or value returns).
pub(crate) fn entry_value<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}
