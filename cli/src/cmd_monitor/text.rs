//! The text renderer of a report, and the number formats `top` shares.

use std::fmt::Write as _;

use runtime::counters::{self, ErrorKind};

use super::model::Report;

pub(super) fn fmt_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1}K", b as f64 / 1024.0),
        b => format!("{b}B"),
    }
}

pub(super) fn opt_us(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The text form of a report (one block per period).
pub fn report_text(r: &Report) -> String {
    let mut o = String::new();
    // Devices by identity; a device shared by several processes lists each NC with its owner.
    let w = r.ncs.iter().map(|n| n.device_id.len()).max().unwrap_or(0).max(10);
    let _ = writeln!(
        o,
        "{:<w$} {:>3} {:>8} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9}  errors",
        "device", "nc", "pid", "util%", "execs", "p50 µs", "p99 µs", "model", "tensors"
    );
    if r.ncs.is_empty() {
        let _ = writeln!(o, "(no runtime is publishing counters in {})", counters::shm_dir().display());
    }
    for n in &r.ncs {
        let mut errs: Vec<String> = ErrorKind::ALL
            .iter()
            .filter(|k| n.errors[**k as usize] > 0)
            .map(|k| format!("{}={}", k.name(), n.errors[*k as usize]))
            .collect();
        if n.barrier_warnings > 0 {
            errs.push(format!("barrier_warnings={}", n.barrier_warnings));
        }
        let _ = writeln!(
            o,
            "{:<w$} {:>3} {:>8} {:>6.1} {:>8} {:>9} {:>9} {:>9} {:>9}  {}",
            n.device_id,
            n.nc,
            n.pid,
            n.utilization * 100.0,
            n.executions,
            opt_us(n.p50_us),
            opt_us(n.p99_us),
            fmt_bytes(n.mem_model),
            fmt_bytes(n.mem_tensors),
            if errs.is_empty() { "-".into() } else { errs.join(" ") }
        );
    }
    for h in &r.health {
        let hbm: Vec<String> = h.hbm.iter().map(|(rep, unc)| format!("{rep}/{unc}")).collect();
        let _ = writeln!(
            o,
            "{:<w$} firmware api {} heartbeat {} status {:#x}; ECC sram corrected {} uncorrected {}; hbm repairable/uncorrectable {}",
            h.device_id,
            h.fw_api_version,
            h.heartbeat,
            h.health_status,
            h.sram_corrected,
            h.sram_uncorrected,
            hbm.join(" ")
        );
    }
    o
}
