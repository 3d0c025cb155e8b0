//! neuron-monitor's configuration file (`-c FILE`): which applications to watch (by a regex
//! over their tag), which metric groups to collect for them and for the system, and each
//! group's period. Without a file: every group, every application, every 5 seconds.

use std::time::Duration;

use regex::Regex;
use serde_json::Value;

/// The period a group gets when nothing sets one.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(5);

/// Application-level metric groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtGroup {
    NeuroncoreCounters,
    ExecutionStats,
    MemoryUsed,
    VcpuUsage,
}

impl RtGroup {
    pub const ALL: [RtGroup; 4] =
        [RtGroup::NeuroncoreCounters, RtGroup::ExecutionStats, RtGroup::MemoryUsed, RtGroup::VcpuUsage];

    /// The group's `type` (and its key in the report).
    pub fn name(self) -> &'static str {
        match self {
            RtGroup::NeuroncoreCounters => "neuroncore_counters",
            RtGroup::ExecutionStats => "execution_stats",
            RtGroup::MemoryUsed => "memory_used",
            RtGroup::VcpuUsage => "neuron_runtime_vcpu_usage",
        }
    }
}

/// System-level metric groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysGroup {
    HwCounters,
    VcpuUsage,
    MemoryInfo,
}

impl SysGroup {
    pub const ALL: [SysGroup; 3] = [SysGroup::HwCounters, SysGroup::VcpuUsage, SysGroup::MemoryInfo];

    pub fn name(self) -> &'static str {
        match self {
            SysGroup::HwCounters => "neuron_hw_counters",
            SysGroup::VcpuUsage => "vcpu_usage",
            SysGroup::MemoryInfo => "memory_info",
        }
    }
}

/// One `neuron_runtimes` entry: applications whose tag matches `filter` (all without one)
/// get `metrics`.
#[derive(Debug, Clone)]
pub struct RuntimeSel {
    pub filter: Option<Regex>,
    pub metrics: Vec<(RtGroup, Duration)>,
}

/// A parsed configuration.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// The root period (what groups inherit).
    pub period: Duration,
    pub runtimes: Vec<RuntimeSel>,
    pub system: Vec<(SysGroup, Duration)>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}: expected {1}")]
    Shape(String, &'static str),
    #[error("{0}: bad period {1:?} (e.g. \"1s\", \"500ms\", \"2m\")")]
    Period(String, String),
    #[error("tag_filter {0:?}: {1}")]
    Regex(String, regex::Error),
}

impl Default for MonitorConfig {
    fn default() -> Self {
        Self::all(DEFAULT_PERIOD)
    }
}

impl MonitorConfig {
    /// Every group for every application, each every `p`.
    pub fn all(p: Duration) -> Self {
        Self {
            period: p,
            runtimes: vec![RuntimeSel { filter: None, metrics: RtGroup::ALL.iter().map(|g| (*g, p)).collect() }],
            system: SysGroup::ALL.iter().map(|g| (*g, p)).collect(),
        }
    }

    /// Parse the file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let v: Value = serde_json::from_str(text)?;
        if !v.is_object() {
            return Err(ConfigError::Shape("the file".into(), "an object"));
        }
        let root_p = period_of(&v, "period", DEFAULT_PERIOD)?;
        let mut runtimes = Vec::new();
        for (i, r) in array(&v, "neuron_runtimes")?.iter().enumerate() {
            let at = format!("neuron_runtimes[{i}]");
            let p = period_of(r, &at, root_p)?;
            let filter = match r.get("tag_filter") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => {
                    // The filter matches the whole tag.
                    Some(Regex::new(&format!("^(?:{s})$")).map_err(|e| ConfigError::Regex(s.clone(), e))?)
                }
                Some(_) => return Err(ConfigError::Shape(format!("{at}.tag_filter"), "a string")),
            };
            let mut metrics = Vec::new();
            for (j, m) in array(r, "metrics")?.iter().enumerate() {
                let mat = format!("{at}.metrics[{j}]");
                let ty = type_of(m, &mat)?;
                match RtGroup::ALL.iter().find(|g| g.name() == ty) {
                    Some(g) => metrics.push((*g, period_of(m, &mat, p)?)),
                    None => tracing::warn!("{mat}: metric group {ty:?} is not collected here; ignored"),
                }
            }
            runtimes.push(RuntimeSel { filter, metrics });
        }
        let mut system = Vec::new();
        for (j, m) in array(&v, "system_metrics")?.iter().enumerate() {
            let at = format!("system_metrics[{j}]");
            let ty = type_of(m, &at)?;
            match SysGroup::ALL.iter().find(|g| g.name() == ty) {
                Some(g) => system.push((*g, period_of(m, &at, root_p)?)),
                None => tracing::warn!("{at}: metric group {ty:?} is not collected here; ignored"),
            }
        }
        Ok(Self { period: root_p, runtimes, system })
    }

    /// The metric groups (with periods) of an application tagged `tag`: those of the first
    /// `neuron_runtimes` entry whose filter matches it; None when no entry does.
    pub fn groups_for(&self, tag: &str) -> Option<&[(RtGroup, Duration)]> {
        self.runtimes.iter().find(|r| r.filter.as_ref().is_none_or(|f| f.is_match(tag))).map(|r| r.metrics.as_slice())
    }

    /// Every period any group uses.
    pub fn periods(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self
            .runtimes
            .iter()
            .flat_map(|r| r.metrics.iter().map(|m| m.1))
            .chain(self.system.iter().map(|s| s.1))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a [Value], ConfigError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(ConfigError::Shape(key.into(), "an array")),
    }
}

fn type_of<'a>(m: &'a Value, at: &str) -> Result<&'a str, ConfigError> {
    m.get("type").and_then(Value::as_str).ok_or_else(|| ConfigError::Shape(format!("{at}.type"), "a string"))
}

fn period_of(v: &Value, at: &str, inherited: Duration) -> Result<Duration, ConfigError> {
    match v.get("period") {
        None | Some(Value::Null) => Ok(inherited),
        Some(Value::String(s)) => parse_period(s).ok_or_else(|| ConfigError::Period(at.into(), s.clone())),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| *x > 0.0 && x.is_finite() && *x < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| ConfigError::Period(at.into(), n.to_string())),
        Some(other) => Err(ConfigError::Period(at.into(), other.to_string())),
    }
}

/// "1s", "500ms", "1.5s", "2m", "1h" (a bare number: seconds); at least 1 ms.
pub fn parse_period(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let x: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "" | "s" => x,
        "ms" => x / 1000.0,
        "m" => x * 60.0,
        "h" => x * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && (0.001..1e9).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let c = MonitorConfig::parse(
            r#"{"period": "1s",
                "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
                    {"type": "neuroncore_counters"}, {"type": "memory_used"},
                    {"type": "neuron_runtime_vcpu_usage"}, {"type": "execution_stats"}]}],
                "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"},
                                   {"period": "2s", "type": "neuron_hw_counters"}]}"#,
        )
        .expect("parse");
        assert_eq!(c.runtimes[0].metrics.len(), 4);
        assert!(c.runtimes[0].metrics.iter().all(|m| m.1 == Duration::from_secs(1)));
        assert_eq!(c.system[2], (SysGroup::HwCounters, Duration::from_secs(2)));
        assert_eq!(c.periods(), vec![Duration::from_secs(1), Duration::from_secs(2)]);
        assert!(c.groups_for("anything").is_some());
    }

    #[test]
    fn filters_periods_and_errors() {
        let c = MonitorConfig::parse(
            r#"{"neuron_runtimes": [{"tag_filter": "train_.*", "period": "250ms",
                                     "metrics": [{"type": "execution_stats"}, {"type": "future_group"}]}]}"#,
        )
        .expect("parse");
        assert_eq!(
            c.groups_for("train_1").map(|g| g.to_vec()),
            Some(vec![(RtGroup::ExecutionStats, Duration::from_millis(250))])
        );
        assert!(c.groups_for("infer").is_none());
        assert!(c.groups_for("xtrain_1").is_none(), "the filter matches the whole tag");
        assert!(c.system.is_empty());
        assert_eq!(MonitorConfig::default().periods(), vec![DEFAULT_PERIOD]);
        assert_eq!(parse_period("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_period("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_period("3"), Some(Duration::from_secs(3)));
        for bad in ["", "s", "1x", "0s", "-1s"] {
            assert_eq!(parse_period(bad), None, "{bad}");
        }
        assert!(matches!(MonitorConfig::parse("[1]"), Err(ConfigError::Shape(..))));
        assert!(matches!(MonitorConfig::parse("{\"period\": \"soon\"}"), Err(ConfigError::Period(..))));
        assert!(matches!(
            MonitorConfig::parse(r#"{"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]}"#),
            Err(ConfigError::Regex(..))
        ));
        assert!(matches!(
            MonitorConfig::parse(r#"{"system_metrics": [{"period": "1s"}]}"#),
            Err(ConfigError::Shape(..))
        ));
        assert!(matches!(MonitorConfig::parse("{"), Err(ConfigError::Json(_))));
    }
}
