//! `neuron-vfio monitor` (periodic reports: text, JSON lines, Prometheus `/metrics`) and
//! `neuron-vfio top` (a live per-NC view; `--once` prints one frame). Both read the
//! counters every runtime on this machine publishes in shared memory (runtime's `counters`
//! module, layout in docs/monitoring.md), so they see work done by other processes without
//! touching the devices those processes own.
//!
//! `monitor` writes neuron-monitor's report by default (`aws`: its groups, periods and
//! configuration file, `config`; host figures from `/proc`, `host`); `--format native` writes
//! this project's own.
//!
//! By concern: `model` (the figures of a period and the device health), the renderers
//! (`aws`, `json`, `prometheus`, `text`), `http` (the `/metrics` endpoint) and `top` (its rows,
//! frame and live UI); this module holds the arguments and the two commands.

pub mod aws;
pub mod config;
mod http;
mod json;
mod model;
mod prometheus;
#[cfg(test)]
mod tests;
mod text;
mod top;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use crate::device::DeviceSpec;
use crate::report::CliError;
use http::serve_metrics;
use json::report_json;
use model::{collect_health, report, sample};
use prometheus::prometheus_text;
use text::report_text;
use top::{top_frame, top_live, top_target};

/// What `monitor` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MonitorFormat {
    /// neuron-monitor's report: one JSON object per line (docs/monitoring.md).
    NeuronMonitor,
    /// This project's own: a table per period, or with --json one object per line.
    Native,
}

/// Arguments of `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// The report's format.
    #[arg(long, value_enum, default_value = "neuron-monitor")]
    pub format: MonitorFormat,
    /// A neuron-monitor configuration file (JSON: period, neuron_runtimes[{tag_filter,
    /// metrics[{type, period}]}], system_metrics[{type, period}]).
    #[arg(short = 'c', long = "config-file", value_name = "FILE", conflicts_with = "period_ms")]
    pub config: Option<PathBuf>,
    /// Report period in milliseconds (default: native 1000; neuron-monitor 5000, or the
    /// configuration file's periods).
    #[arg(long)]
    pub period_ms: Option<u64>,
    /// Number of reports (default: until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Also serve the figures at http://ADDR:PORT/metrics in the Prometheus text format: AWS's
    /// exporter's metric names (neuron-monitor format) and ours. Without a value
    /// 0.0.0.0:8000, the exporter's port; a bare PORT listens on 0.0.0.0 (port 0: any free
    /// port). The address is printed on stderr.
    #[arg(long, value_name = "[ADDR:]PORT", num_args = 0..=1, default_missing_value = "0.0.0.0:8000")]
    pub prometheus: Option<String>,
}

impl MonitorArgs {
    /// neuron-monitor's defaults: its format, every group every 5 s, or `config`'s.
    pub fn neuron_monitor(config: Option<PathBuf>) -> Self {
        Self { format: MonitorFormat::NeuronMonitor, config, period_ms: None, count: None, prometheus: None }
    }
}

/// Arguments of `top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// Print one frame as text (for scripts) and exit.
    #[arg(long)]
    pub once: bool,
    /// Refresh period in milliseconds (also the sampling window of `--once`).
    #[arg(long, default_value_t = 1000)]
    pub period_ms: u64,
}

pub(super) fn period(ms: u64) -> Result<Duration, CliError> {
    if ms == 0 {
        return Err(CliError::invalid("--period-ms must be at least 1"));
    }
    Ok(Duration::from_millis(ms))
}

/// The address `--prometheus` listens on: a bare port means every interface.
fn listen_addr(a: &str) -> String {
    if a.parse::<u16>().is_ok() {
        format!("0.0.0.0:{a}")
    } else {
        a.to_string()
    }
}

fn serve(a: &MonitorArgs) -> Result<Arc<Mutex<String>>, CliError> {
    let latest = Arc::new(Mutex::new(String::new()));
    if let Some(addr) = &a.prometheus {
        let bound = serve_metrics(&listen_addr(addr), latest.clone())?;
        eprintln!("serving Prometheus metrics at http://{bound}/metrics");
    }
    Ok(latest)
}

/// `monitor`.
pub fn monitor(a: MonitorArgs, json_out: bool) -> Result<(), CliError> {
    match a.format {
        MonitorFormat::Native => monitor_native(a, json_out),
        MonitorFormat::NeuronMonitor => monitor_aws(a),
    }
}

/// `monitor` in neuron-monitor's format.
fn monitor_aws(a: MonitorArgs) -> Result<(), CliError> {
    let cfg = match &a.config {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| CliError::invalid(format!("{}: {e}", f.display())))?;
            config::MonitorConfig::parse(&text).map_err(|e| CliError::invalid(format!("{}: {e}", f.display())))?
        }
        None => match a.period_ms {
            Some(ms) => config::MonitorConfig::all(period(ms)?),
            None => config::MonitorConfig::default(),
        },
    };
    let latest = serve(&a)?;
    let mut nm = aws::NeuronMonitor::new(cfg, crate::device::sysfs().root().to_path_buf());
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        std::thread::sleep(nm.next_due());
        if !nm.step() {
            continue;
        }
        let v = nm.report();
        if a.prometheus.is_some() {
            let mut text = prometheus::exporter_text(&v);
            if let Some(r) = nm.native() {
                text.push_str(&prometheus_text(&r));
            }
            *platform::sync::lock(&latest) = text;
        }
        let mut so = std::io::stdout().lock();
        if so.write_all(format!("{v}\n").as_bytes()).and_then(|_| so.flush()).is_err() {
            return Ok(());
        }
        n += 1;
    }
    Ok(())
}

/// `monitor --format native`.
fn monitor_native(a: MonitorArgs, json_out: bool) -> Result<(), CliError> {
    let p = period(a.period_ms.unwrap_or(1000))?;
    let latest = serve(&a)?;
    let mut before = sample();
    let mut t = Instant::now();
    *platform::sync::lock(&latest) = prometheus_text(&report(&before, &before, 0));
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        std::thread::sleep(p.saturating_sub(t.elapsed()));
        let now = sample();
        let elapsed = t.elapsed();
        t = Instant::now();
        let mut r = report(&before, &now, elapsed.as_nanos() as u64);
        r.health = collect_health();
        *platform::sync::lock(&latest) = prometheus_text(&r);
        let out = if json_out { format!("{}\n", report_json(&r)) } else { report_text(&r) + "\n" };
        let mut so = std::io::stdout().lock();
        if so.write_all(out.as_bytes()).and_then(|_| so.flush()).is_err() {
            return Ok(());
        }
        before = now;
        n += 1;
    }
    Ok(())
}

/// `top`.
pub fn top(a: TopArgs, spec: &DeviceSpec, json_out: bool) -> Result<(), CliError> {
    use std::io::IsTerminal;
    let p = period(a.period_ms)?;
    let target = top_target(spec)?;
    let interactive = !a.once && std::io::stdout().is_terminal();
    if interactive && !json_out {
        return top_live(&target, p);
    }
    let mut before = sample();
    let mut t = Instant::now();
    loop {
        std::thread::sleep(p.saturating_sub(t.elapsed()));
        let now = sample();
        let r = report(&before, &now, t.elapsed().as_nanos() as u64);
        t = Instant::now();
        before = now;
        let mut so = std::io::stdout().lock();
        let frame = if json_out { format!("{}\n", report_json(&r)) } else { top_frame(&target, &r) };
        // A live view redraws in place: home the cursor and clear the screen first.
        let out = if interactive { format!("\x1b[H\x1b[2J{frame}(Ctrl-C to quit)\n") } else { frame };
        if so.write_all(out.as_bytes()).and_then(|_| so.flush()).is_err() || a.once {
            return Ok(());
        }
        if !interactive {
            let _ = so.write_all(b"\n");
        }
    }
}
