//! The table nccom-test prints, the "Avg bus bandwidth" line and the JSON report.
//!
//! Figures as the nccom-test page defines them: time(us) the P50 of the timed operations;
//! algbw = size(B) / time in GiB/s (2^30 bytes); busbw = algbw × the operation's factor
//! ([`crate::ops::Op::busbw_factor`]). A timed operation's time is the slowest rank's time
//! for it (a collective ends when its last rank has it).

use serde_json::{json, Value};

use crate::args::{Plan, Stat};

const GIB: f64 = (1u64 << 30) as f64;

/// One finished row.
#[derive(Debug, Clone)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    /// Per timed operation, the slowest rank's nanoseconds.
    pub times_ns: Vec<u64>,
    /// Per rank that failed the check: (rank, what differs).
    pub failures: Vec<(usize, String)>,
    pub checked: bool,
}

/// Percentile `p` (0..=100) of `v` by nearest rank on the sorted values.
pub fn percentile(v: &[u64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    if s.is_empty() {
        return 0.0;
    }
    let i = ((s.len() - 1) as f64 * p / 100.0).round() as usize;
    s[i.min(s.len() - 1)] as f64
}

fn mean(v: &[u64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64
    }
}

impl Row {
    /// time(us): the P50.
    pub fn time_us(&self) -> f64 {
        percentile(&self.times_ns, 50.0) / 1e3
    }
    pub fn algbw(&self) -> f64 {
        let t = self.time_us();
        if t > 0.0 {
            self.size as f64 / (t * 1e-6) / GIB
        } else {
            0.0
        }
    }
    pub fn stat_us(&self, s: Stat) -> f64 {
        match s {
            Stat::Avg => mean(&self.times_ns) / 1e3,
            Stat::Percentile(p) => percentile(&self.times_ns, p) / 1e3,
        }
    }
}

/// The table's header line.
pub fn header(plan: &Plan) -> String {
    let mut h = format!(
        "{:>12}{:>16}{:>9}{:>12}{:>15}{:>15}",
        "size(B)", "count(elems)", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)"
    );
    for s in &plan.stats {
        h.push_str(&format!("{:>14}", format!("{}(us)", s.label())));
    }
    if plan.show_algorithm {
        h.push_str(&format!("{:>12}", "algorithm"));
    }
    h
}

/// One row of the table.
pub fn line(plan: &Plan, r: &Row, algorithm: &str) -> String {
    let factor = plan.op.busbw_factor(plan.ranks);
    let mut l = format!(
        "{:>12}{:>16}{:>9}{:>12.0}{:>15.2}{:>15.2}",
        r.size,
        r.count,
        plan.dtype.name(),
        r.time_us(),
        r.algbw(),
        r.algbw() * factor
    );
    for s in &plan.stats {
        l.push_str(&format!("{:>14.0}", r.stat_us(*s)));
    }
    if plan.show_algorithm {
        l.push_str(&format!("{algorithm:>12}"));
    }
    l
}

/// Mean busbw of the rows.
pub fn avg_busbw(plan: &Plan, rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    let f = plan.op.busbw_factor(plan.ranks);
    rows.iter().map(|r| r.algbw() * f).sum::<f64>() / rows.len() as f64
}

/// The "Avg bus bandwidth" line.
pub fn avg_line(plan: &Plan, rows: &[Row]) -> String {
    format!("Avg bus bandwidth:{:>13.4}GB/s", avg_busbw(plan, rows))
}

/// The JSON report (this tool's format; docs/collectives.md).
pub fn json(plan: &Plan, rows: &[Row], errors: &[String], device: &str, algorithm: &str) -> Value {
    let f = plan.op.busbw_factor(plan.ranks);
    json!({
        "operation": plan.op.name(),
        "datatype": plan.dtype.name(),
        "nworkers": plan.ranks,
        "nnodes": plan.nnodes,
        "iters": plan.iters,
        "warmup_iters": plan.warmup,
        "check": plan.check.map(|c| c.name()),
        "seed": plan.seed,
        "device": device,
        "algorithm": algorithm,
        "results": rows.iter().map(|r| json!({
            "size_bytes": r.size,
            "count_elems": r.count,
            "type": plan.dtype.name(),
            "time_us": r.time_us(),
            "algbw_gibps": r.algbw(),
            "busbw_gibps": r.algbw() * f,
            "stats_us": plan.stats.iter().map(|s| (s.label(), json!(r.stat_us(*s)))).collect::<serde_json::Map<_, _>>(),
            "check": if !r.checked { Value::Null } else if r.failures.is_empty() { json!("pass") } else { json!("fail") },
            "failures": r.failures.iter().map(|(k, m)| json!({"rank": k, "error": m})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "avg_busbw_gibps": avg_busbw(plan, rows),
        "errors": errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;
    use clap::Parser;

    #[test]
    fn gib_math_and_columns_as_documented() {
        // The page's first example: 32 MiB all-reduce of 2 ranks in 768 us is 40.69 GB/s both.
        let plan = Args::try_parse_from(["nccom-test", "-r", "2", "allr"]).unwrap().plan().unwrap();
        let r = Row { size: 33554432, count: 33554432, times_ns: vec![768_000], failures: vec![], checked: false };
        let l = line(&plan, &r, "x");
        assert_eq!(
            l,
            format!("{:>12}{:>16}{:>9}{:>12}{:>15}{:>15}", 33554432, 33554432, "uint8", 768, "40.69", "40.69")
        );
        assert_eq!(avg_line(&plan, &[r]), "Avg bus bandwidth:      40.6901GB/s");
        assert!(header(&plan).trim_start().starts_with("size(B)    count(elems)"));
    }

    #[test]
    fn percentiles_pick_by_nearest_rank() {
        let v = [5, 1, 4, 2, 3];
        assert_eq!(percentile(&v, 50.0), 3.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 100.0), 5.0);
        assert_eq!(mean(&v), 3.0);
    }
}
