//! `neuron-vfio monitor` (periodic reports: text, JSON lines, Prometheus `/metrics`) and
//! `neuron-vfio top` (a live per-NC view; `--once` prints one frame). Both read the
//! counters every runtime on this machine publishes in shared memory (runtime's `counters`
//! module, layout in docs/monitoring.md), so they see work done by other processes without
//! touching the devices those processes own.
//!
//! By concern: `model` (the figures of a period and the device health), the three renderers
//! (`json`, `prometheus`, `text`), `http` (the `/metrics` endpoint) and `top` (its rows, frame
//! and live UI); this module holds the arguments and the two commands.

mod http;
mod json;
mod model;
mod prometheus;
#[cfg(test)]
mod tests;
mod text;
mod top;

use std::io::Write as _;
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

/// Arguments of `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// Report period in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub period_ms: u64,
    /// Number of reports (default: until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Also serve the figures at http://ADDR:PORT/metrics in the Prometheus text format
    /// (port 0: any free port; the address is printed on stderr).
    #[arg(long, value_name = "ADDR:PORT")]
    pub prometheus: Option<String>,
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

/// `monitor`.
pub fn monitor(a: MonitorArgs, json_out: bool) -> Result<(), CliError> {
    let p = period(a.period_ms)?;
    let latest = Arc::new(Mutex::new(String::new()));
    if let Some(addr) = &a.prometheus {
        let bound = serve_metrics(addr, latest.clone())?;
        eprintln!("serving Prometheus metrics at http://{bound}/metrics");
    }
    let mut before = sample();
    let mut t = Instant::now();
    if let Ok(mut l) = latest.lock() {
        *l = prometheus_text(&report(&before, &before, 0));
    }
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        std::thread::sleep(p.saturating_sub(t.elapsed()));
        let now = sample();
        let elapsed = t.elapsed();
        t = Instant::now();
        let mut r = report(&before, &now, elapsed.as_nanos() as u64);
        r.health = collect_health();
        if let Ok(mut l) = latest.lock() {
            *l = prometheus_text(&r);
        }
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
    let (arch, label) = top_target(spec)?;
    let interactive = !a.once && std::io::stdout().is_terminal();
    if interactive && !json_out {
        return top_live(arch, &label, p);
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
        let frame = if json_out { format!("{}\n", report_json(&r)) } else { top_frame(arch, &label, &r) };
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
