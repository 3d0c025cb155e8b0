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
//!
//! Every environment read of the runtime is here.

use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// `NEURON_RT_EXEC_TIMEOUT`.
pub const EXEC_TIMEOUT_VAR: &str = "NEURON_RT_EXEC_TIMEOUT";
/// `NEURON_RT_VISIBLE_CORES`.
pub const VISIBLE_CORES_VAR: &str = "NEURON_RT_VISIBLE_CORES";
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
    #[error("{var}: invalid log level {value:?} (expected ERROR, WARNING, INFO, DEBUG or TRACE)")]
    BadLogLevel { var: &'static str, value: String },
    #[error("{var}: invalid threshold {value:?} (expected whole milliseconds, at least 1)")]
    BadThreshold { var: &'static str, value: String },
    #[error("{var}: value is not valid unicode")]
    NotUnicode { var: &'static str },
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
    let bad = |reason| EnvError::BadCores { var: VISIBLE_CORES_VAR, value: raw.to_string(), reason };
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
    // libnrt maps the list onto logical cores 0.. and refuses a list with holes.
    if out.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(bad("cores must be contiguous"));
    }
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
    /// Log level.
    pub log_level: tracing::Level,
}

impl Default for RtEnv {
    fn default() -> Self {
        Self { exec_timeout_secs: DEFAULT_EXEC_TIMEOUT_SECS, visible_cores: None, log_level: DEFAULT_LOG_LEVEL }
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
        if let Some(v) = lookup(LOG_LEVEL_VAR) {
            env.log_level = parse_log_level(&v)?;
        }
        Ok(env)
    }

    /// Read the process environment.
    pub fn from_env() -> Result<Self, EnvError> {
        for var in [EXEC_TIMEOUT_VAR, VISIBLE_CORES_VAR, LOG_LEVEL_VAR] {
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
