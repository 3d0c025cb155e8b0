//! libnrt environment knobs (docs/architecture.md runtime/; AWS Neuron runtime configuration guide).
//!
//! * `NEURON_RT_EXEC_TIMEOUT`: execution timeout in whole seconds, `0..=i32::MAX`. docs/facts/libnrt-runtime-model.md (§A.5.4, §B.5)
//!   only says the value flows into the model's `param.timeout` (seconds, ×1000 → core timeout
//!   ms); the public Neuron runtime guide gives the default as 600 s on trn1/inf2 and later
//!   (30 s was inf1 only), so [`DEFAULT_EXEC_TIMEOUT_SECS`] = 600.
//! * `NEURON_RT_VISIBLE_CORES`: comma-separated core ids and inclusive ranges (`"0-3,5"`);
//!   whitespace around items is ignored; duplicates are merged; empty items, reversed ranges
//!   and non-numbers are errors.
//! * `NEURON_RT_LOG_LEVEL`: `ERROR` (default), `WARNING` (also `WARN`), `INFO`, `DEBUG`,
//!   `TRACE`, case-insensitive → `tracing::Level`.
//! * `NEURON_VFIO_BARRIER_WARN_MS` (this project's, not libnrt's): the first warning threshold
//!   of the collectives barrier wait in milliseconds, `1..`, default 120000 (libnrt's fixed
//!   120 s), so that tests can shorten it (docs/faults.md).
//! * `NEURON_VFIO_SHM_DIR`, `NEURON_VFIO_COUNTERS`, `NEURON_VFIO_DEBUG_ENDPOINT` (this
//!   project's): where the monitoring observers publish (default `/dev/shm`, else the temp
//!   dir), and `0` turns the counters segment / the debug endpoint off (docs/monitoring.md).
//! * `NEURON_VFIO_HW_ERR_LOG` (this project's): where the node problem detector's
//!   `NEURON_HW_ERR=` lines go ([`HwErrLog`], [`crate::hw_err`], docs/kubernetes.md).
//!
//! * `NEURON_RT_INSPECT_ENABLE` (`1`/`true` on), `NEURON_RT_INSPECT_OUTPUT_DIR` (default
//!   `./output`), `NEURON_RT_INSPECT_EVENT_FILTER_TYPE` (event types, `hardware`/`software`,
//!   `^` exclusions: parsed by [`crate::sys_trace::parse_type_filter`]) and
//!   `NEURON_RT_INSPECT_EVENT_FILTER_NC` (a core list: `0,2,4`, `0-3`; no contiguity required),
//!   `NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC` (ring capacity per NC, default 1000000 as
//!   libnrt documents it): libnrt's system-trace capture for the whole run ([`InspectEnv`],
//!   docs/profiling.md).
//!
//! * `NEURON_LOGICAL_NC_CONFIG` / `NEURON_RT_VIRTUAL_CORE_SIZE`: the logical NeuronCore size
//!   (`1` or `2`; [`parse_lnc`], [`crate::cores`]). Both set to different sizes is refused.
//! * `NEURON_RT_VALIDATE_HASH` (default off, as libnrt), `NEURON_RT_ALLOW_LEGACY_NEFF`
//!   (default off), `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS` (default 0: this runtime's
//!   64), `NEURON_RT_LOG_LOCATION`, the per-component `NEURON_RT_LOG_LEVEL_<comp>`
//!   ([`log::LogConfig`]).
//!
//! Every environment read of the runtime is here; [`documented`] lists every `NEURON_RT_*`
//! variable the SDK documents with what the runtime does with it.

pub mod documented;
pub mod log;

use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// `NEURON_RT_EXEC_TIMEOUT`.
pub const EXEC_TIMEOUT_VAR: &str = "NEURON_RT_EXEC_TIMEOUT";
/// `NEURON_RT_VISIBLE_CORES`.
pub const VISIBLE_CORES_VAR: &str = "NEURON_RT_VISIBLE_CORES";
/// `NEURON_RT_NUM_CORES`: how many cores the process reserves (any free ones) when
/// `NEURON_RT_VISIBLE_CORES` names none; 0 or unset means all (libnrt's configuration guide).
pub const NUM_CORES_VAR: &str = "NEURON_RT_NUM_CORES";
/// `NEURON_RT_LOG_LEVEL`.
pub const LOG_LEVEL_VAR: &str = "NEURON_RT_LOG_LEVEL";
/// `NEURON_VFIO_BARRIER_WARN_MS`.
pub const BARRIER_WARN_VAR: &str = "NEURON_VFIO_BARRIER_WARN_MS";
/// `NEURON_VFIO_SHM_DIR`.
pub const SHM_DIR_VAR: &str = "NEURON_VFIO_SHM_DIR";
/// `NEURON_VFIO_COUNTERS`.
pub const COUNTERS_VAR: &str = "NEURON_VFIO_COUNTERS";
/// `NEURON_VFIO_DEBUG_ENDPOINT`.
pub const DEBUG_ENDPOINT_VAR: &str = "NEURON_VFIO_DEBUG_ENDPOINT";
/// `NEURON_RT_INSPECT_ENABLE`.
pub const INSPECT_ENABLE_VAR: &str = "NEURON_RT_INSPECT_ENABLE";
/// `NEURON_RT_INSPECT_OUTPUT_DIR`.
pub const INSPECT_OUTPUT_DIR_VAR: &str = "NEURON_RT_INSPECT_OUTPUT_DIR";
/// `NEURON_RT_INSPECT_EVENT_FILTER_TYPE`.
pub const INSPECT_FILTER_TYPE_VAR: &str = "NEURON_RT_INSPECT_EVENT_FILTER_TYPE";
/// `NEURON_RT_INSPECT_EVENT_FILTER_NC`.
pub const INSPECT_FILTER_NC_VAR: &str = "NEURON_RT_INSPECT_EVENT_FILTER_NC";
/// `NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC`.
pub const INSPECT_MAX_EVENTS_VAR: &str = "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC";
/// Its default.
pub const DEFAULT_INSPECT_MAX_EVENTS_PER_NC: u64 = 1_000_000;
/// `NEURON_RT_INSPECT_SYSTEM_PROFILE`.
pub const INSPECT_SYSTEM_PROFILE_VAR: &str = "NEURON_RT_INSPECT_SYSTEM_PROFILE";
/// `NEURON_RT_INSPECT_DEVICE_PROFILE`.
pub const INSPECT_DEVICE_PROFILE_VAR: &str = "NEURON_RT_INSPECT_DEVICE_PROFILE";
/// `NEURON_RT_INSPECT_ON_FAIL`.
pub const INSPECT_ON_FAIL_VAR: &str = "NEURON_RT_INSPECT_ON_FAIL";
/// `NEURON_LOGICAL_NC_CONFIG`: physical NeuronCores per logical one (the LNC page's name).
pub const LNC_VAR: &str = "NEURON_LOGICAL_NC_CONFIG";
/// `NEURON_RT_VIRTUAL_CORE_SIZE`: the same, as the NxD tutorials set it.
pub const VIRTUAL_CORE_SIZE_VAR: &str = "NEURON_RT_VIRTUAL_CORE_SIZE";
/// `NEURON_RT_VALIDATE_HASH`.
pub const VALIDATE_HASH_VAR: &str = "NEURON_RT_VALIDATE_HASH";
/// `NEURON_RT_ALLOW_LEGACY_NEFF`.
pub const ALLOW_LEGACY_VAR: &str = "NEURON_RT_ALLOW_LEGACY_NEFF";
/// `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS`.
pub const ASYNC_INFLIGHT_VAR: &str = "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS";
/// `NEURON_RT_NUMERICAL_ERRORS_VERBOSITY`.
pub const NUMERICAL_ERRORS_VAR: &str = "NEURON_RT_NUMERICAL_ERRORS_VERBOSITY";

/// `NEURON_RT_NUMERICAL_ERRORS_VERBOSITY` (configuration guide: `none` (default), `critical`,
/// `debug`, `verbose`, any case; another value fails `nrt_init` with NRT_INVALID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NumericalErrors {
    #[default]
    None,
    Critical,
    Debug,
    Verbose,
}

/// Parse `NEURON_RT_NUMERICAL_ERRORS_VERBOSITY` (unset or empty: `none`).
pub fn parse_numerical_errors(raw: Option<&str>) -> Result<NumericalErrors, EnvError> {
    let Some(raw) = raw else { return Ok(NumericalErrors::None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "none" => Ok(NumericalErrors::None),
        "critical" => Ok(NumericalErrors::Critical),
        "debug" => Ok(NumericalErrors::Debug),
        "verbose" => Ok(NumericalErrors::Verbose),
        _ => Err(EnvError::BadChoice {
            var: NUMERICAL_ERRORS_VAR,
            value: raw.to_string(),
            allowed: "none, critical, debug or verbose",
        }),
    }
}

/// [`parse_numerical_errors`] of the process environment.
pub fn numerical_errors_from_env() -> Result<NumericalErrors, EnvError> {
    match std::env::var(NUMERICAL_ERRORS_VAR) {
        Ok(v) => parse_numerical_errors(Some(&v)),
        Err(std::env::VarError::NotPresent) => Ok(NumericalErrors::None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvError::NotUnicode { var: NUMERICAL_ERRORS_VAR }),
    }
}

/// `NEURON_VFIO_HW_ERR_LOG`.
pub const HW_ERR_LOG_VAR: &str = "NEURON_VFIO_HW_ERR_LOG";

/// Where the `NEURON_HW_ERR=` lines of executions that end with a hardware error go
/// (`NEURON_VFIO_HW_ERR_LOG`; [`crate::hw_err`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HwErrLog {
    /// `auto` (default): a real (VFIO) device's lines to the kernel log, else the journal; a
    /// simulated device's nowhere (its faults are injected: the host's log is not theirs).
    #[default]
    Auto,
    /// `kmsg`: `/dev/kmsg` only.
    Kmsg,
    /// `journal`: the system log socket `/dev/log` only.
    Journal,
    /// `stderr`: the process's standard error.
    Stderr,
    /// `off`: nowhere.
    Off,
    /// An absolute path: a file appended to.
    File(PathBuf),
}

/// Parse `NEURON_VFIO_HW_ERR_LOG` (unset or empty: `auto`; keywords in any case).
pub fn parse_hw_err_log(raw: Option<&str>) -> Result<HwErrLog, EnvError> {
    let Some(raw) = raw else { return Ok(HwErrLog::Auto) };
    let t = raw.trim();
    Ok(match t.to_ascii_lowercase().as_str() {
        "" | "auto" => HwErrLog::Auto,
        "kmsg" => HwErrLog::Kmsg,
        "journal" => HwErrLog::Journal,
        "stderr" => HwErrLog::Stderr,
        "off" => HwErrLog::Off,
        _ if t.starts_with('/') => HwErrLog::File(PathBuf::from(t)),
        _ => {
            return Err(EnvError::BadChoice {
                var: HW_ERR_LOG_VAR,
                value: raw.to_string(),
                allowed: "auto, kmsg, journal, stderr, off or an absolute file path",
            })
        }
    })
}

/// [`parse_hw_err_log`] of the process environment.
pub fn hw_err_log_from_env() -> Result<HwErrLog, EnvError> {
    match std::env::var(HW_ERR_LOG_VAR) {
        Ok(v) => parse_hw_err_log(Some(&v)),
        Err(std::env::VarError::NotPresent) => Ok(HwErrLog::Auto),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvError::NotUnicode { var: HW_ERR_LOG_VAR }),
    }
}

/// Default execution timeout, seconds.
pub const DEFAULT_EXEC_TIMEOUT_SECS: u32 = 600;
/// Default log level.
pub const DEFAULT_LOG_LEVEL: tracing::Level = tracing::Level::ERROR;

/// Parse errors; each names the variable and the offending text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvError {
    #[error("{var}: invalid timeout {value:?} (expected whole seconds 0..=2147483647)")]
    BadTimeout { var: &'static str, value: String },
    #[error("{var}: invalid core list {value:?}: {reason}")]
    BadCores { var: &'static str, value: String, reason: &'static str },
    #[error("{var}: invalid log level {value:?} (expected QUIET, ERROR, WARNING, INFO, DEBUG or TRACE)")]
    BadLogLevel { var: &'static str, value: String },
    #[error("{var}: invalid threshold {value:?} (expected whole milliseconds, at least 1)")]
    BadThreshold { var: &'static str, value: String },
    #[error("{var}: invalid count {value:?} (expected a whole number)")]
    BadCount { var: &'static str, value: String },
    #[error("{var}: value is not valid unicode")]
    NotUnicode { var: &'static str },
    #[error("{var}: invalid logical NeuronCore size {value:?} (expected 1 or 2)")]
    BadLnc { var: &'static str, value: String },
    #[error("{LNC_VAR}={lnc} and {VIRTUAL_CORE_SIZE_VAR}={vcs} disagree: set one, or both to the same size")]
    LncConflict { lnc: u32, vcs: u32 },
    #[error("{var}: invalid boolean {value:?} (expected TRUE, FALSE, 1 or 0)")]
    BadBool { var: &'static str, value: String },
    #[error("{var}: {message}")]
    BadLog { var: String, message: String },
    #[error("{var}: invalid value {value:?} (expected {allowed})")]
    BadChoice { var: &'static str, value: String, allowed: &'static str },
}

/// A requested logical NeuronCore size and the variable that named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LncRequest {
    pub size: u32,
    pub var: &'static str,
}

impl LncRequest {
    /// LNC=1 (each physical core its own logical one), as if `NEURON_LOGICAL_NC_CONFIG=1`.
    pub const fn physical() -> Self {
        Self { size: 1, var: LNC_VAR }
    }
}

/// Parse a logical NeuronCore size of `var`: `1` or `2` (the SDK's only sizes).
pub fn parse_lnc(var: &'static str, raw: &str) -> Result<u32, EnvError> {
    match raw.trim() {
        "1" => Ok(1),
        "2" => Ok(2),
        _ => Err(EnvError::BadLnc { var, value: raw.to_string() }),
    }
}

/// The logical NeuronCore size the environment asks for: `NEURON_LOGICAL_NC_CONFIG`, else
/// `NEURON_RT_VIRTUAL_CORE_SIZE`; both set must agree (None: the arch's default).
pub fn lnc_request<F: Fn(&str) -> Option<String>>(lookup: &F) -> Result<Option<LncRequest>, EnvError> {
    let get = |var: &'static str| -> Result<Option<u32>, EnvError> {
        match lookup(var) {
            Some(v) if !v.trim().is_empty() => parse_lnc(var, &v).map(Some),
            _ => Ok(None),
        }
    };
    match (get(LNC_VAR)?, get(VIRTUAL_CORE_SIZE_VAR)?) {
        (Some(lnc), Some(vcs)) if lnc != vcs => Err(EnvError::LncConflict { lnc, vcs }),
        (Some(size), _) => Ok(Some(LncRequest { size, var: LNC_VAR })),
        (None, Some(size)) => Ok(Some(LncRequest { size, var: VIRTUAL_CORE_SIZE_VAR })),
        (None, None) => Ok(None),
    }
}

/// A libnrt boolean (the reference page: `0`, `1`, `false`, `true`, any case; also `yes`/`no`/
/// `on`/`off`; empty or unset: the default). Anything else is refused naming the variable, never
/// read as the default.
pub fn parse_bool(var: &'static str, raw: Option<String>, default: bool) -> Result<bool, EnvError> {
    let Some(raw) = raw else { return Ok(default) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" => Ok(default),
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(EnvError::BadBool { var, value: raw }),
    }
}

/// Parse `NEURON_RT_EXEC_TIMEOUT` (seconds).
pub fn parse_exec_timeout(raw: &str) -> Result<u32, EnvError> {
    let bad = || EnvError::BadTimeout { var: EXEC_TIMEOUT_VAR, value: raw.to_string() };
    let t = raw.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: u32 = t.parse().map_err(|_| bad())?;
    if v > i32::MAX as u32 {
        return Err(bad());
    }
    Ok(v)
}

/// Parse `NEURON_VFIO_BARRIER_WARN_MS` (milliseconds, at least 1).
pub fn parse_barrier_warn(raw: &str) -> Result<Duration, EnvError> {
    let bad = || EnvError::BadThreshold { var: BARRIER_WARN_VAR, value: raw.to_string() };
    let t = raw.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match t.parse::<u64>() {
        Ok(v) if v >= 1 => Ok(Duration::from_millis(v)),
        _ => Err(bad()),
    }
}

/// The core-phase timeout of a model whose timeout is `secs` seconds: `1000 × secs` ms.
pub fn core_timeout(secs: u32) -> Duration {
    Duration::from_millis(1000 * u64::from(secs))
}

/// Parse `NEURON_RT_VISIBLE_CORES` into sorted, unique core ids.
pub fn parse_visible_cores(raw: &str) -> Result<Vec<u32>, EnvError> {
    let out = parse_core_list(VISIBLE_CORES_VAR, raw)?;
    // libnrt maps the list onto logical cores 0.. and refuses a list with holes.
    if out.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(EnvError::BadCores {
            var: VISIBLE_CORES_VAR,
            value: raw.to_string(),
            reason: "cores must be contiguous",
        });
    }
    Ok(out)
}

/// Parse a core list of `var` (`0,2,4`, `0-3`, both) into sorted, unique core ids.
pub fn parse_core_list(var: &'static str, raw: &str) -> Result<Vec<u32>, EnvError> {
    let bad = |reason| EnvError::BadCores { var, value: raw.to_string(), reason };
    let num = |s: &str| -> Result<u32, EnvError> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("expected a core number"));
        }
        s.parse::<u32>().map_err(|_| bad("core number out of range"))
    };
    let mut out = Vec::new();
    for item in raw.split(',') {
        if item.trim().is_empty() {
            return Err(bad("empty item"));
        }
        match item.split_once('-') {
            None => out.push(num(item)?),
            Some((a, b)) => {
                let (lo, hi) = (num(a)?, num(b)?);
                if lo > hi {
                    return Err(bad("range start exceeds range end"));
                }
                if hi - lo >= 4096 {
                    return Err(bad("range too large"));
                }
                out.extend(lo..=hi);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parse `NEURON_RT_LOG_LEVEL`.
pub fn parse_log_level(raw: &str) -> Result<tracing::Level, EnvError> {
    match raw.trim().to_ascii_uppercase().as_str() {
        "ERROR" => Ok(tracing::Level::ERROR),
        "WARNING" | "WARN" => Ok(tracing::Level::WARN),
        "INFO" => Ok(tracing::Level::INFO),
        "DEBUG" => Ok(tracing::Level::DEBUG),
        "TRACE" => Ok(tracing::Level::TRACE),
        _ => Err(EnvError::BadLogLevel { var: LOG_LEVEL_VAR, value: raw.to_string() }),
    }
}

/// Launchers' (local rank, job size) variables: Open MPI, Slurm, torchrun.
pub const LAUNCHER_LOCAL_RANK: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_LOCALID", "SLURM_NTASKS"),
    ("LOCAL_RANK", "WORLD_SIZE"),
];

/// The local rank of a process that a launcher started as one of several (the first launcher
/// whose two variables are set and numeric, with a job size above 1). With
/// `NEURON_RT_VISIBLE_CORES` unset, such a process sees NeuronCore `local rank` only — one
/// core per worker, as the Neuron PyTorch plugin sets it from the local rank.
pub fn launcher_local_rank<F: Fn(&str) -> Option<String>>(lookup: &F) -> Option<u32> {
    LAUNCHER_LOCAL_RANK.iter().find_map(|(lr, ws)| {
        let local: u32 = lookup(lr)?.trim().parse().ok()?;
        let size: u32 = lookup(ws)?.trim().parse().ok()?;
        (size > 1).then_some(local)
    })
}

/// The parsed knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtEnv {
    /// Execution timeout, seconds.
    pub exec_timeout_secs: u32,
    /// Visible cores; `None` = all.
    pub visible_cores: Option<Vec<u32>>,
    /// `NEURON_RT_NUM_CORES` (`None`: unset or 0, all).
    pub num_cores: Option<u32>,
    /// Log level.
    pub log_level: tracing::Level,
    /// The logical NeuronCore size asked for (None: the arch's default, [`crate::cores`]).
    pub lnc: Option<LncRequest>,
    /// `NEURON_RT_VALIDATE_HASH` (default off, as libnrt).
    pub validate_hash: bool,
    /// `NEURON_RT_ALLOW_LEGACY_NEFF` (default off).
    pub allow_legacy: bool,
    /// `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS` (None: unset or 0).
    pub async_inflight: Option<u32>,
}

impl Default for RtEnv {
    fn default() -> Self {
        Self {
            exec_timeout_secs: DEFAULT_EXEC_TIMEOUT_SECS,
            visible_cores: None,
            num_cores: None,
            log_level: DEFAULT_LOG_LEVEL,
            lnc: None,
            validate_hash: false,
            allow_legacy: false,
            async_inflight: None,
        }
    }
}

impl RtEnv {
    /// Build from a lookup function (`name → raw value`), so tests need not touch the process
    /// environment. Unset variables take their defaults.
    pub fn from_lookup<F: Fn(&str) -> Option<String>>(lookup: F) -> Result<Self, EnvError> {
        let mut env = RtEnv::default();
        if let Some(v) = lookup(EXEC_TIMEOUT_VAR) {
            env.exec_timeout_secs = parse_exec_timeout(&v)?;
        }
        if let Some(v) = lookup(VISIBLE_CORES_VAR) {
            env.visible_cores = Some(parse_visible_cores(&v)?);
        } else if let Some(local) = launcher_local_rank(&lookup) {
            env.visible_cores = Some(vec![local]);
        }
        if let Some(v) = lookup(NUM_CORES_VAR) {
            let t = v.trim();
            let n = t.parse::<u32>().ok().filter(|_| t.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| {
                EnvError::BadCores { var: NUM_CORES_VAR, value: v.clone(), reason: "expected a number of cores" }
            })?;
            env.num_cores = (n > 0).then_some(n);
        }
        if let Some(v) = lookup(LOG_LEVEL_VAR) {
            // QUIET: nothing on the console (log::LogConfig); the level of what is kept is moot.
            env.log_level = match log::parse_level(LOG_LEVEL_VAR, &v)? {
                Some(l) => l,
                None => tracing::Level::ERROR,
            };
        }
        env.lnc = lnc_request(&lookup)?;
        env.validate_hash = parse_bool(VALIDATE_HASH_VAR, lookup(VALIDATE_HASH_VAR), false)?;
        env.allow_legacy = parse_bool(ALLOW_LEGACY_VAR, lookup(ALLOW_LEGACY_VAR), false)?;
        if let Some(v) = lookup(ASYNC_INFLIGHT_VAR) {
            let t = v.trim();
            let n = t
                .parse::<u32>()
                .ok()
                .filter(|n| t.bytes().all(|b| b.is_ascii_digit()) && *n <= i32::MAX as u32)
                .ok_or_else(|| EnvError::BadCount { var: ASYNC_INFLIGHT_VAR, value: v.clone() })?;
            env.async_inflight = (n > 0).then_some(n);
        }
        Ok(env)
    }

    /// Read the process environment.
    pub fn from_env() -> Result<Self, EnvError> {
        for var in [
            EXEC_TIMEOUT_VAR,
            VISIBLE_CORES_VAR,
            NUM_CORES_VAR,
            LOG_LEVEL_VAR,
            LNC_VAR,
            VIRTUAL_CORE_SIZE_VAR,
            VALIDATE_HASH_VAR,
            ALLOW_LEGACY_VAR,
            ASYNC_INFLIGHT_VAR,
        ] {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(var) {
                return Err(EnvError::NotUnicode { var });
            }
        }
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Core-phase timeout for the configured exec timeout.
    pub fn core_timeout(&self) -> Duration {
        core_timeout(self.exec_timeout_secs)
    }
}

/// libnrt's inspect knobs (`NEURON_RT_INSPECT_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectEnv {
    /// `NEURON_RT_INSPECT_ENABLE`: capture the system trace for the whole run.
    pub enable: bool,
    /// `NEURON_RT_INSPECT_OUTPUT_DIR` (default `./output`).
    pub output_dir: PathBuf,
    /// `NEURON_RT_INSPECT_EVENT_FILTER_TYPE`, raw (`None`: every type).
    pub filter_type: Option<String>,
    /// `NEURON_RT_INSPECT_EVENT_FILTER_NC` (`None`: every NC).
    pub filter_nc: Option<Vec<u32>>,
    /// `NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC`.
    pub max_events_per_nc: u64,
    /// `NEURON_RT_INSPECT_SYSTEM_PROFILE` (default on).
    pub system_profile: bool,
    /// `NEURON_RT_INSPECT_DEVICE_PROFILE` (default off; `1`, `model` or `session` on).
    pub device_profile: bool,
    /// `NEURON_RT_INSPECT_ON_FAIL` (default off).
    pub on_fail: bool,
}

impl InspectEnv {
    /// Build from a lookup function (`name → raw value`).
    pub fn from_lookup<F: Fn(&str) -> Option<String>>(lookup: F) -> Result<Self, EnvError> {
        let output_dir = lookup(INSPECT_OUTPUT_DIR_VAR).filter(|d| !d.is_empty()).unwrap_or_else(|| "./output".into());
        let filter_nc = match lookup(INSPECT_FILTER_NC_VAR).filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(parse_core_list(INSPECT_FILTER_NC_VAR, &v)?),
            None => None,
        };
        Ok(Self {
            enable: parse_bool(INSPECT_ENABLE_VAR, lookup(INSPECT_ENABLE_VAR), false)?,
            output_dir: PathBuf::from(output_dir),
            filter_type: lookup(INSPECT_FILTER_TYPE_VAR).filter(|v| !v.trim().is_empty()),
            filter_nc,
            max_events_per_nc: match lookup(INSPECT_MAX_EVENTS_VAR) {
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| EnvError::BadCount { var: INSPECT_MAX_EVENTS_VAR, value: v.clone() })?,
                None => DEFAULT_INSPECT_MAX_EVENTS_PER_NC,
            },
            system_profile: parse_bool(INSPECT_SYSTEM_PROFILE_VAR, lookup(INSPECT_SYSTEM_PROFILE_VAR), true)?,
            // `0` (default), `1`/`model`, `session` (the profiler's variables page).
            device_profile: matches!(
                lookup(INSPECT_DEVICE_PROFILE_VAR).as_deref().map(|v| v.trim().to_ascii_lowercase()).as_deref(),
                Some("1" | "true" | "model" | "session")
            ),
            on_fail: parse_bool(INSPECT_ON_FAIL_VAR, lookup(INSPECT_ON_FAIL_VAR), false)?,
        })
    }

    /// Read the process environment.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// `NEURON_VFIO_BARRIER_WARN_MS` from the process environment: `None` when unset.
pub fn barrier_warn_from_env() -> Result<Option<Duration>, EnvError> {
    match std::env::var(BARRIER_WARN_VAR) {
        Ok(v) => parse_barrier_warn(&v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvError::NotUnicode { var: BARRIER_WARN_VAR }),
    }
}

/// Where monitoring segments and endpoints live: `NEURON_VFIO_SHM_DIR`, else `/dev/shm`
/// (the temp dir without it).
pub fn shm_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(SHM_DIR_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Whether switch `var` is on: unset, or set to anything but `0`.
fn switch_on(var: &str) -> bool {
    std::env::var(var).map(|v| v.trim() != "0").unwrap_or(true)
}

/// Whether the counters segment is published (`NEURON_VFIO_COUNTERS` is not `0`).
pub fn counters_enabled() -> bool {
    switch_on(COUNTERS_VAR)
}

/// Whether the debug endpoint is served (`NEURON_VFIO_DEBUG_ENDPOINT` is not `0`).
pub fn debug_endpoint_enabled() -> bool {
    switch_on(DEBUG_ENDPOINT_VAR)
}
