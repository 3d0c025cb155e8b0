//! libnrt's logging knobs (configuration guide, "Logging and debugging" and "Additional
//! logging controls"): `NEURON_RT_LOG_LEVEL` (`QUIET` turns the console off), the
//! per-component `NEURON_RT_LOG_LEVEL_<comp>` (`TDRV`, `NRT`, `NMGR`, `KMGR`) and
//! `NEURON_RT_LOG_LOCATION` (`console`, `syslog`).
//!
//! The components map onto this project's crates: `TDRV` (libnrt's low-level driver library)
//! is hal, vfio, platform and the simulator; `NRT`, `NMGR` and `KMGR` are the runtime, the C
//! API and the CLI. [`LogConfig::filter`] renders the result as a `tracing` filter directive.

use super::{EnvError, LOG_LEVEL_VAR};

/// `NEURON_RT_LOG_LOCATION`.
pub const LOG_LOCATION_VAR: &str = "NEURON_RT_LOG_LOCATION";
/// The prefix of the per-component level variables.
pub const LOG_LEVEL_PREFIX: &str = "NEURON_RT_LOG_LEVEL_";

/// libnrt's log components and the crates that stand for them.
pub const COMPONENTS: [(&str, &[&str]); 4] = [
    ("TDRV", &["hal", "vfio", "platform", "sim", "sim_serve", "select"]),
    ("NRT", &["runtime", "capi", "nrtpy", "cli", "broker", "fabric"]),
    ("NMGR", &["runtime", "capi"]),
    ("KMGR", &["runtime", "capi"]),
];

/// Where the log goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogLocation {
    /// Standard error (libnrt: the console).
    #[default]
    Console,
    /// The local syslog socket.
    Syslog,
}

/// The parsed logging knobs. A level of `None` is QUIET: nothing is logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `NEURON_RT_LOG_LEVEL` (None: QUIET); unset: `default`'s.
    pub level: Option<tracing::Level>,
    /// Whether `NEURON_RT_LOG_LEVEL` was set at all.
    pub level_set: bool,
    /// `NEURON_RT_LOG_LEVEL_<comp>`, in [`COMPONENTS`] order where set.
    pub components: Vec<(&'static str, Option<tracing::Level>)>,
    pub location: LogLocation,
}

/// Parse a level of `var`: QUIET (None), ERROR, WARNING/WARN, INFO, DEBUG, TRACE, any case.
pub fn parse_level(var: &str, raw: &str) -> Result<Option<tracing::Level>, EnvError> {
    match raw.trim().to_ascii_uppercase().as_str() {
        "QUIET" => Ok(None),
        "ERROR" => Ok(Some(tracing::Level::ERROR)),
        "WARNING" | "WARN" => Ok(Some(tracing::Level::WARN)),
        "INFO" => Ok(Some(tracing::Level::INFO)),
        "DEBUG" => Ok(Some(tracing::Level::DEBUG)),
        "TRACE" => Ok(Some(tracing::Level::TRACE)),
        _ => Err(if var == LOG_LEVEL_VAR {
            EnvError::BadLogLevel { var: LOG_LEVEL_VAR, value: raw.to_string() }
        } else {
            EnvError::BadLog {
                var: var.to_string(),
                message: format!("invalid log level {raw:?} (expected QUIET, ERROR, WARNING, INFO, DEBUG or TRACE)"),
            }
        }),
    }
}

impl LogConfig {
    /// From a lookup of single variables and the names of every variable set (for the
    /// per-component ones). `default` is the front end's level when `NEURON_RT_LOG_LEVEL` is
    /// unset (libnrt: ERROR; the CLI: WARN).
    pub fn from_lookup<F: Fn(&str) -> Option<String>>(
        lookup: F,
        names: &[String],
        default: tracing::Level,
    ) -> Result<Self, EnvError> {
        let (level, level_set) = match lookup(LOG_LEVEL_VAR) {
            Some(v) if !v.trim().is_empty() => (parse_level(LOG_LEVEL_VAR, &v)?, true),
            _ => (Some(default), false),
        };
        let mut components = Vec::new();
        for name in names {
            let Some(comp) = name.strip_prefix(LOG_LEVEL_PREFIX) else { continue };
            let Some(&(known, _)) = COMPONENTS.iter().find(|(c, _)| *c == comp) else {
                return Err(EnvError::BadLog {
                    var: name.clone(),
                    message: format!("unknown component {comp:?} (expected TDRV, NRT, NMGR or KMGR)"),
                });
            };
            let raw = lookup(name).unwrap_or_default();
            components.push((known, parse_level(name, &raw)?));
        }
        components.sort_by_key(|(c, _)| COMPONENTS.iter().position(|(k, _)| k == c));
        let location = match lookup(LOG_LOCATION_VAR).map(|v| v.trim().to_ascii_lowercase()) {
            None => LogLocation::Console,
            Some(v) if v.is_empty() || v == "console" => LogLocation::Console,
            Some(v) if v == "syslog" => LogLocation::Syslog,
            Some(v) => {
                return Err(EnvError::BadLog {
                    var: LOG_LOCATION_VAR.into(),
                    message: format!("invalid log location {v:?} (expected console or syslog)"),
                })
            }
        };
        Ok(Self { level, level_set, components, location })
    }

    /// From the process environment.
    pub fn from_env(default: tracing::Level) -> Result<Self, EnvError> {
        let names: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
        Self::from_lookup(|k| std::env::var(k).ok(), &names, default)
    }

    /// Whether nothing at all is logged (QUIET everywhere).
    pub fn quiet(&self) -> bool {
        self.level.is_none() && self.components.iter().all(|(_, l)| l.is_none())
    }

    /// The `tracing` filter directive: the global level, then each component's crates at
    /// its own level (QUIET: `off`).
    pub fn filter(&self) -> String {
        let name = |l: Option<tracing::Level>| match l {
            None => "off".to_string(),
            Some(l) => l.as_str().to_ascii_lowercase(),
        };
        let mut parts = vec![name(self.level)];
        for (comp, level) in &self.components {
            if let Some((_, crates)) = COMPONENTS.iter().find(|(c, _)| c == comp) {
                parts.extend(crates.iter().map(|k| format!("{k}={}", name(*level))));
            }
        }
        parts.join(",")
    }
}

impl LogConfig {
    /// Whether an event of `level` from `krate` (a crate name, e.g. `hal`) is logged: the
    /// level of the component the crate belongs to where one is set, else the global one.
    pub fn enabled(&self, krate: &str, level: tracing::Level) -> bool {
        let own = self
            .components
            .iter()
            .rev()
            .find(|(comp, _)| COMPONENTS.iter().any(|(c, crates)| c == comp && crates.contains(&krate)))
            .map(|(_, l)| *l);
        // tracing orders levels by verbosity: ERROR is the "largest" in its Ord.
        own.unwrap_or(self.level).is_some_and(|max| level <= max)
    }
}

/// Where log lines go: stderr, or the local syslog socket (`/dev/log`, RFC 3164 framing,
/// facility `user`). A syslog that cannot be reached falls back to stderr, said once there.
#[derive(Debug)]
pub struct LogSink {
    syslog: Option<std::os::unix::net::UnixDatagram>,
    ident: String,
}

/// The local syslog socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

impl LogSink {
    /// The sink of `location`; `ident` names the program in syslog lines.
    pub fn new(location: LogLocation, ident: &str) -> Self {
        Self::with_socket(location, ident, std::path::Path::new(SYSLOG_SOCKET))
    }

    /// As [`LogSink::new`], with syslog's socket at `socket`.
    pub fn with_socket(location: LogLocation, ident: &str, socket: &std::path::Path) -> Self {
        let syslog = match location {
            LogLocation::Console => None,
            LogLocation::Syslog => {
                let sock = std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.connect(socket).map(|()| s));
                match sock {
                    Ok(s) => Some(s),
                    Err(e) => {
                        use std::io::Write;
                        let _ = writeln!(
                            std::io::stderr(),
                            "{LOG_LOCATION_VAR}=syslog: cannot reach {} ({e}); logging to the console",
                            socket.display()
                        );
                        None
                    }
                }
            }
        };
        Self { syslog, ident: ident.to_string() }
    }

    /// Whether lines go to syslog.
    pub fn is_syslog(&self) -> bool {
        self.syslog.is_some()
    }

    /// Write one line (without its newline) at `level`.
    pub fn write_line(&self, level: tracing::Level, line: &str) {
        use std::io::Write;
        let line = line.trim_end_matches('\n');
        match &self.syslog {
            Some(sock) => {
                // RFC 3164: <facility * 8 + severity>; facility 1 (user).
                let severity = match level {
                    tracing::Level::ERROR => 3,
                    tracing::Level::WARN => 4,
                    tracing::Level::INFO => 6,
                    _ => 7,
                };
                let msg = format!("<{}>{}[{}]: {line}", 8 + severity, self.ident, std::process::id());
                if sock.send(msg.as_bytes()).is_err() {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
            None => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn cfg(vars: &[(&str, &str)]) -> Result<LogConfig, EnvError> {
        let names: Vec<String> = vars.iter().map(|(k, _)| k.to_string()).collect();
        LogConfig::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()), &names, Level::WARN)
    }

    #[test]
    fn quiet_turns_everything_off() {
        let c = cfg(&[("NEURON_RT_LOG_LEVEL", "QUIET")]).unwrap();
        assert!(c.quiet() && c.level_set);
        assert_eq!(c.filter(), "off");
        assert!(!c.enabled("runtime", Level::ERROR));
        let c = cfg(&[("NEURON_RT_LOG_LEVEL", "quiet"), ("NEURON_RT_LOG_LEVEL_TDRV", "INFO")]).unwrap();
        assert!(!c.quiet());
        assert!(c.enabled("hal", Level::INFO) && !c.enabled("hal", Level::DEBUG));
        assert!(!c.enabled("runtime", Level::ERROR));
        assert_eq!(c.filter(), "off,hal=info,vfio=info,platform=info,sim=info,sim_serve=info,select=info");
    }

    #[test]
    fn levels_and_components_parse_as_libnrt_names_them() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.level, c.level_set, c.location), (Some(Level::WARN), false, LogLocation::Console));
        assert!(c.enabled("capi", Level::WARN) && !c.enabled("capi", Level::INFO));
        let c = cfg(&[("NEURON_RT_LOG_LEVEL", "warning"), ("NEURON_RT_LOG_LEVEL_NRT", "QUIET")]).unwrap();
        assert_eq!(c.level, Some(Level::WARN));
        assert!(!c.enabled("runtime", Level::ERROR) && c.enabled("hal", Level::WARN));
        for bad in
            [("NEURON_RT_LOG_LEVEL", "LOUD"), ("NEURON_RT_LOG_LEVEL_XYZ", "INFO"), ("NEURON_RT_LOG_LEVEL_NRT", "3")]
        {
            assert!(cfg(&[bad]).is_err(), "{bad:?} accepted");
        }
        assert_eq!(cfg(&[("NEURON_RT_LOG_LOCATION", "SYSLOG")]).unwrap().location, LogLocation::Syslog);
        assert!(matches!(cfg(&[("NEURON_RT_LOG_LOCATION", "file")]), Err(EnvError::BadLog { .. })));
    }

    #[test]
    fn syslog_lines_reach_the_socket_framed_and_fall_back_to_stderr() {
        let dir = std::env::temp_dir().join(format!("nv-syslog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log");
        let _ = std::fs::remove_file(&path);
        let server = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let sink = LogSink::with_socket(LogLocation::Syslog, "nrt", &path);
        assert!(sink.is_syslog());
        sink.write_line(Level::ERROR, "NRT load failed\n");
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).unwrap();
        assert_eq!(got, format!("<11>nrt[{}]: NRT load failed", std::process::id()));
        let missing = LogSink::with_socket(LogLocation::Syslog, "nrt", &dir.join("absent"));
        assert!(!missing.is_syslog());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
