//! The command line: nccom-test's flags (docs/collectives.md lists each with its source), the
//! size sweep, and the refusals of what this build cannot honour.

use std::path::PathBuf;

use clap::Parser;

use crate::nodes::{self, Launcher, Multi};
use crate::ops::{Dtype, Op};

/// nccom-test: collectives across NeuronCores, timed, with bus bandwidth and a correctness
/// check (the Neuron SDK's tool of that name, run on this project's runtime).
#[derive(Parser, Debug, Clone)]
#[command(name = "nccom-test", version)]
pub struct Args {
    /// The collective: all_reduce|allr, all_gather|allg, reduce_scatter|redsct, sendrecv,
    /// alltoall, alltoallv, permute.
    pub op: String,
    /// Total number of workers (ranks).
    #[arg(short = 'r', long = "nworkers")]
    pub nworkers: usize,
    /// Number of nodes (hosts) the workers are divided over.
    #[arg(short = 'N', long = "nnodes", default_value_t = 1)]
    pub nnodes: usize,
    /// First size in bytes (units k, m, g — powers of 1024 — with optional b/ib).
    #[arg(short = 'b', long = "minbytes", default_value = "32M")]
    pub minbytes: String,
    /// Last size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M")]
    pub maxbytes: String,
    /// Step added to the size (default: (maxbytes - minbytes) / 10).
    #[arg(short = 'i', long = "stepbytes", conflicts_with = "stepfactor")]
    pub stepbytes: Option<String>,
    /// Factor the size is multiplied by.
    #[arg(short = 'f', long = "stepfactor")]
    pub stepfactor: Option<String>,
    /// Timed operations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Untimed warm-up operations per size.
    #[arg(short = 'w', long = "warmup_iters", visible_alias = "warmup-iters", default_value_t = 5)]
    pub warmup_iters: usize,
    /// Data type.
    #[arg(short = 'd', long = "datatype", default_value = "uint8")]
    pub datatype: String,
    /// Check every rank's output: random (inputs from --seed; the bare flag) or all_ones (every
    /// input element 1).
    #[arg(short = 'c', long = "check", num_args = 0..=1, default_missing_value = "random")]
    pub check: Option<String>,
    /// Seed of the random check's inputs.
    #[arg(long = "seed", default_value_t = 0)]
    pub seed: u64,
    /// Extra time statistics, each a column: avg, pNN (percentile NN of the timed operations).
    #[arg(short = 't', long = "stats", num_args = 1..)]
    pub stats: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long = "report-to-json-file")]
    pub report_to_json_file: Option<PathBuf>,
    /// Add the algorithm column.
    #[arg(long = "show-algorithm")]
    pub show_algorithm: bool,
    /// Show no animation or progress indicator (this tool shows none).
    #[arg(long = "non-interactive")]
    pub non_interactive: bool,
    /// permute: a JSON file `{"src_target_pairs": [[[source, target], …]]}` of worker ranks
    /// (default: every rank sends to the next, `r -> r + 1 mod n`).
    #[arg(long = "custom-src-target-pairs")]
    pub custom_src_target_pairs: Option<PathBuf>,
    /// MPI mode: the hosts, host 0 first (one process per host starts its local workers;
    /// default: `~/hosts`).
    #[arg(short = 's', long = "hosts", num_args = 1..)]
    pub hosts: Vec<String>,
    /// MPI mode: a file of hosts, one a line.
    #[arg(long = "hosts-file", conflicts_with = "hosts")]
    pub hosts_file: Option<PathBuf>,
    /// Slurm mode: one process per node of a Slurm allocation, started with `srun`.
    #[arg(short = 'S', long = "slurm-mode", visible_alias = "slurm")]
    pub slurm: bool,
    /// Slurm mode: the job whose allocation to use (default: the allocation this runs in,
    /// `SLURM_JOB_ID`).
    #[arg(long = "slurm-job-id")]
    pub slurm_job_id: Option<String>,
    /// Multi-host runs: the host the node processes send their reports to (default: the host
    /// of NEURON_RT_ROOT_COMM_ID).
    #[arg(long = "data-collector-host")]
    pub data_collector_host: Option<String>,
    /// Multi-host runs: the port this process collects the reports on (0: any free port).
    #[arg(long = "data-collector-port", default_value_t = 60006)]
    pub data_collector_port: u16,
    /// Internal: run as the node process of a multi-host run (its launcher starts it),
    /// reporting to ADDR for job JOB.
    #[arg(long = "node", hide = true, num_args = 2, value_names = ["ADDR", "JOB"])]
    pub node: Vec<String>,
    /// Internal: run as worker RANK of job JOB (the launcher starts the workers).
    #[arg(long = "worker", hide = true, num_args = 2, value_names = ["RANK", "JOB"])]
    pub worker: Vec<u64>,
}

/// Why the command line cannot run (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("unknown operation `{0}` (expected one of {names})", names = Op::NAMES)]
    Op(String),
    #[error("unknown data type `{0}` (expected one of {names})", names = Dtype::NAMES)]
    Dtype(String),
    #[error("{flag} {value}: {why}")]
    Bad { flag: &'static str, value: String, why: String },
    #[error("{0}")]
    Unsupported(String),
}

/// The check named by `-c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    AllOnes,
    Random,
}

impl Check {
    pub fn name(self) -> &'static str {
        match self {
            Check::AllOnes => "all_ones",
            Check::Random => "random",
        }
    }
}

/// One extra time statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    Avg,
    Percentile(f64),
}

impl Stat {
    pub fn label(self) -> String {
        match self {
            Stat::Avg => "avg".into(),
            Stat::Percentile(p) => format!("p{p}"),
        }
    }
}

/// A checked command line.
#[derive(Debug, Clone)]
pub struct Plan {
    pub op: Op,
    pub dtype: Dtype,
    pub ranks: usize,
    pub sizes: Vec<u64>,
    pub iters: usize,
    pub warmup: usize,
    pub check: Option<Check>,
    pub seed: u64,
    pub stats: Vec<Stat>,
    pub json: Option<PathBuf>,
    pub show_algorithm: bool,
    /// permute: the (source, target) worker ranks.
    pub pairs: Vec<(usize, usize)>,
    /// Hosts the workers are divided over (`-N`).
    pub nnodes: usize,
    /// A multi-host run's launcher and addresses (MPI or Slurm mode).
    pub multi: Option<Multi>,
}

/// The (source, target) pairs of `--custom-src-target-pairs`' file `text` over `n` workers:
/// one table, every rank below `n`, each the source of at most one pair and the target of at
/// most one.
pub fn parse_pairs(text: &str, n: usize) -> Result<Vec<(usize, usize)>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let tables = v
        .get("src_target_pairs")
        .and_then(serde_json::Value::as_array)
        .ok_or("expected {\"src_target_pairs\": [[[source, target], …]]}")?;
    let [table] = &tables[..] else {
        return Err(format!("{} tables of pairs; this tool runs one replica group, so one table", tables.len()));
    };
    let table = table.as_array().ok_or("the table is not an array of [source, target] pairs")?;
    let mut pairs: Vec<(usize, usize)> = Vec::with_capacity(table.len());
    for (i, p) in table.iter().enumerate() {
        let rank = |k: usize| p.get(k).and_then(serde_json::Value::as_u64).and_then(|x| usize::try_from(x).ok());
        let (Some(s), Some(t), Some(2)) = (rank(0), rank(1), p.as_array().map(Vec::len)) else {
            return Err(format!("pair {i} is {p}, not [source, target]"));
        };
        if s >= n || t >= n {
            return Err(format!("pair {i} [{s}, {t}] names a rank of {n} workers that does not exist"));
        }
        if pairs.iter().any(|q| q.0 == s) {
            return Err(format!("rank {s} is the source of two pairs"));
        }
        if pairs.iter().any(|q| q.1 == t) {
            return Err(format!("rank {t} is the target of two pairs"));
        }
        pairs.push((s, t));
    }
    Ok(pairs)
}

/// A size: digits with an optional unit k/m/g (powers of 1024), optionally followed by `b`
/// or `ib`, any case (`2kb`, `1MB`, `64M`, `8`).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// The sizes from `min` to `max`: multiplied by `factor`, else increased by `step` (default
/// (max - min) / 10; one size when that is 0).
pub fn sweep(min: u64, max: u64, step: Option<u64>, factor: Option<u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min;
    while s <= max {
        out.push(s);
        let next = match factor {
            Some(f) => s.checked_mul(f),
            None => s.checked_add(step.unwrap_or((max - min) / 10)),
        };
        match next {
            Some(n) if n > s => s = n,
            _ => break,
        }
    }
    out
}

fn size_flag(flag: &'static str, v: &str) -> Result<u64, ArgError> {
    parse_size(v).ok_or_else(|| ArgError::Bad {
        flag,
        value: v.into(),
        why: "not a size (digits, then optionally k, m or g, with b or ib)".into(),
    })
}

fn stat(v: &str) -> Result<Stat, ArgError> {
    if v == "avg" {
        return Ok(Stat::Avg);
    }
    v.strip_prefix('p')
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| (0.0..=100.0).contains(p))
        .map(Stat::Percentile)
        .ok_or_else(|| ArgError::Bad { flag: "--stats", value: v.into(), why: "expected avg or pNN (0..=100)".into() })
}

impl Args {
    /// The multi-host run the flags ask for, or `None` for one host (module docs of
    /// [`crate::nodes`]); refuses, by name, what cannot run.
    fn multi(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Multi>, ArgError> {
        let bad = |flag: &'static str, value: String, why: String| ArgError::Bad { flag, value, why };
        if self.nnodes == 0 {
            return Err(bad("-N/--nnodes", "0".into(), "at least one node".into()));
        }
        if self.slurm_job_id.is_some() && !self.slurm {
            return Err(bad(
                "--slurm-job-id",
                self.slurm_job_id.clone().unwrap_or_default(),
                "is for Slurm mode (-S/--slurm-mode)".into(),
            ));
        }
        if self.slurm && (!self.hosts.is_empty() || self.hosts_file.is_some()) {
            return Err(bad(
                "-S/--slurm-mode",
                String::new(),
                "the hosts are the Slurm allocation's; -s/--hosts and --hosts-file are for MPI mode".into(),
            ));
        }
        let launcher = if self.slurm {
            let job = self.slurm_job_id.clone().or_else(|| get("SLURM_JOB_ID")).ok_or_else(|| {
                bad(
                    "-S/--slurm-mode",
                    String::new(),
                    "no --slurm-job-id and not inside an allocation (SLURM_JOB_ID unset); creating an \
                     allocation is not supported"
                        .into(),
                )
            })?;
            Launcher::Slurm { job }
        } else if self.nnodes > 1 || !self.hosts.is_empty() || self.hosts_file.is_some() {
            let home = get("HOME").map(PathBuf::from);
            let hosts = nodes::mpi_hosts(&self.hosts, self.hosts_file.as_deref(), home.as_deref())
                .map_err(|(flag, why)| ArgError::Unsupported(format!("{flag}: {why}")))?;
            if hosts.len() != self.nnodes {
                return Err(bad(
                    "-s/--hosts",
                    hosts.join(" "),
                    format!("{} hosts for -N/--nnodes {}: give one host per node", hosts.len(), self.nnodes),
                ));
            }
            Launcher::Mpi { hosts }
        } else {
            return Ok(None);
        };
        if !self.nworkers.is_multiple_of(self.nnodes) {
            return Err(bad(
                "-r/--nworkers",
                self.nworkers.to_string(),
                format!("the workers are divided equally over -N/--nnodes {}", self.nnodes),
            ));
        }
        let root = get(nodes::ROOT_VAR).unwrap_or_default();
        let Some(root_host) = nodes::root_host(&root) else {
            return Err(ArgError::Unsupported(format!(
                "{}={root:?}: a multi-host run needs the root address, host:port of the first host and a \
                 free port (NEURON_RT_ROOT_COMM_ID=10.0.0.1:44444)",
                nodes::ROOT_VAR
            )));
        };
        Ok(Some(Multi {
            launcher,
            root,
            collector_host: self.data_collector_host.clone().unwrap_or(root_host),
            collector_port: self.data_collector_port,
        }))
    }

    /// Check the command line in this process's environment; refuse, by name, every flag this
    /// build cannot honour.
    pub fn plan(&self) -> Result<Plan, ArgError> {
        self.plan_in(&|k| std::env::var(k).ok())
    }

    /// [`Args::plan`] with the environment `get`.
    pub fn plan_in(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Plan, ArgError> {
        let op = Op::parse(&self.op).ok_or_else(|| ArgError::Op(self.op.clone()))?;
        let dtype = Dtype::parse(&self.datatype).ok_or_else(|| ArgError::Dtype(self.datatype.clone()))?;
        if self.nworkers == 0 {
            return Err(ArgError::Bad { flag: "-r/--nworkers", value: "0".into(), why: "at least one worker".into() });
        }
        let multi = self.multi(get)?;
        let min = size_flag("-b/--minbytes", &self.minbytes)?;
        let max = size_flag("-e/--maxbytes", &self.maxbytes)?;
        if max < min {
            return Err(ArgError::Bad {
                flag: "-e/--maxbytes",
                value: self.maxbytes.clone(),
                why: format!("below -b/--minbytes ({min})"),
            });
        }
        let step = self.stepbytes.as_deref().map(|v| size_flag("-i/--stepbytes", v)).transpose()?;
        let factor = self.stepfactor.as_deref().map(|v| size_flag("-f/--stepfactor", v)).transpose()?;
        if factor.is_some_and(|f| f < 2) {
            return Err(ArgError::Bad {
                flag: "-f/--stepfactor",
                value: self.stepfactor.clone().unwrap_or_default(),
                why: "at least 2".into(),
            });
        }
        if min == 0 {
            return Err(ArgError::Bad {
                flag: "-b/--minbytes",
                value: self.minbytes.clone(),
                why: "at least 1".into(),
            });
        }
        let check = match self.check.as_deref() {
            None => None,
            Some("all_ones") => Some(Check::AllOnes),
            Some("random") => Some(Check::Random),
            Some(v) => {
                return Err(ArgError::Bad {
                    flag: "-c/--check",
                    value: v.into(),
                    why: "expected all_ones or random".into(),
                })
            }
        };
        if self.iters == 0 {
            return Err(ArgError::Bad { flag: "-n/--iters", value: "0".into(), why: "at least one".into() });
        }
        let pairs = match &self.custom_src_target_pairs {
            None => (0..self.nworkers).map(|r| (r, (r + 1) % self.nworkers)).collect(),
            Some(_) if op != Op::Permute => {
                return Err(ArgError::Bad {
                    flag: "--custom-src-target-pairs",
                    value: self.op.clone(),
                    why: "source-target pairs are for permute".into(),
                })
            }
            Some(path) => {
                let bad = |why: String| ArgError::Bad {
                    flag: "--custom-src-target-pairs",
                    value: path.display().to_string(),
                    why,
                };
                let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
                parse_pairs(&text, self.nworkers).map_err(bad)?
            }
        };
        Ok(Plan {
            op,
            dtype,
            ranks: self.nworkers,
            sizes: sweep(min, max, step, factor),
            iters: self.iters,
            warmup: self.warmup_iters,
            check,
            seed: self.seed,
            stats: self.stats.iter().map(|s| stat(s)).collect::<Result<_, _>>()?,
            json: self.report_to_json_file.clone(),
            show_algorithm: self.show_algorithm,
            pairs,
            nnodes: self.nnodes,
            multi,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsed in an environment of `env` only.
    fn parse_in(v: &[&str], env: &[(&str, &str)]) -> Result<Plan, String> {
        let a =
            Args::try_parse_from(std::iter::once("nccom-test").chain(v.iter().copied())).map_err(|e| e.to_string())?;
        a.plan_in(&|k| env.iter().find(|p| p.0 == k).map(|p| p.1.to_string())).map_err(|e| e.to_string())
    }

    fn parse(v: &[&str]) -> Result<Plan, String> {
        parse_in(v, &[])
    }

    #[test]
    fn multi_host_runs_from_flags_and_environment() {
        let root = [("NEURON_RT_ROOT_COMM_ID", "10.1.4.145:45654")];
        let p = parse_in(&["allr", "-r", "8", "-N", "2", "-s", "10.1.4.145", "10.1.4.138"], &root).unwrap();
        let m = p.multi.unwrap();
        assert_eq!(m.launcher, Launcher::Mpi { hosts: vec!["10.1.4.145".into(), "10.1.4.138".into()] });
        assert_eq!((m.collector_host.as_str(), m.collector_port), ("10.1.4.145", 60006));
        // Without the root address: refused, naming the variable.
        let e = parse(&["allr", "-r", "8", "-N", "2", "-s", "a", "b"]).unwrap_err();
        assert!(e.contains("NEURON_RT_ROOT_COMM_ID"), "{e}");
        // Slurm: the allocation this runs in, or the one named.
        let p = parse_in(&["allr", "-r", "8", "-N", "2", "-S"], &[root[0], ("SLURM_JOB_ID", "77")]).unwrap();
        assert_eq!(p.multi.map(|m| m.launcher), Some(Launcher::Slurm { job: "77".into() }));
        let p = parse_in(&["allr", "-r", "8", "-N", "2", "--slurm-mode", "--slurm-job-id", "5"], &root).unwrap();
        assert_eq!(p.multi.map(|m| m.launcher), Some(Launcher::Slurm { job: "5".into() }));
        let e = parse_in(&["allr", "-r", "8", "-N", "2", "-S"], &root).unwrap_err();
        assert!(e.contains("-S/--slurm-mode") && e.contains("SLURM_JOB_ID"), "{e}");
        // The exchanges cross hosts too (the seam's point-to-point rounds).
        for op in ["permute", "sendrecv", "alltoall", "alltoallv"] {
            let p = parse_in(&[op, "-r", "8", "-N", "2", "-s", "a", "b"], &root).unwrap();
            assert_eq!((p.nnodes, p.multi.is_some()), (2, true), "{op}");
        }
        // One host, no flags: no multi-host run.
        assert!(parse(&["allr", "-r", "8"]).unwrap().multi.is_none());
    }

    #[test]
    fn sizes_take_units_of_1024() {
        assert_eq!(parse_size("8"), Some(8));
        assert_eq!(parse_size("2kb"), Some(2048));
        assert_eq!(parse_size("1MB"), Some(1 << 20));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("1gib"), Some(1 << 30));
        assert_eq!(parse_size("1.5M"), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("3q"), None);
    }

    #[test]
    fn sweeps_by_factor_or_step() {
        assert_eq!(sweep(8, 32, None, Some(2)), vec![8, 16, 32]);
        assert_eq!(sweep(8, 16, Some(4), None), vec![8, 12, 16]);
        assert_eq!(sweep(32, 32, None, None), vec![32]);
        assert_eq!(sweep(0, 100, None, None).len(), 11);
        assert_eq!(sweep(8, 64 << 20, None, Some(2)).len(), 24);
    }

    #[test]
    fn the_acceptance_command_line_parses() {
        let p = parse(&["allr", "-r", "8", "-b", "8", "-e", "64M", "-f", "2", "-c", "all_ones"]).unwrap();
        assert_eq!(p.op, Op::AllReduce);
        assert_eq!(p.ranks, 8);
        assert_eq!(p.sizes.first(), Some(&8));
        assert_eq!(p.sizes.last(), Some(&(64 << 20)));
        assert_eq!(p.check, Some(Check::AllOnes));
        assert_eq!(p.dtype, Dtype::U8);
        assert_eq!((p.iters, p.warmup), (20, 5));
    }

    #[test]
    fn every_documented_flag_parses() {
        let p = parse(&[
            "-r",
            "2",
            "--minbytes",
            "1kb",
            "--maxbytes",
            "1mb",
            "--stepfactor",
            "4",
            "--datatype",
            "fp32",
            "--check",
            "random",
            "--seed",
            "7",
            "-n",
            "3",
            "--warmup_iters",
            "1",
            "-t",
            "avg",
            "p99",
            "--report-to-json-file",
            "/tmp/x.json",
            "--show-algorithm",
            "allg",
        ])
        .unwrap();
        assert_eq!(p.op, Op::AllGather);
        assert_eq!(p.sizes, vec![1024, 4096, 16384, 65536, 262144, 1 << 20]);
        assert_eq!(p.check, Some(Check::Random));
        assert_eq!(p.seed, 7);
        assert_eq!(p.stats, vec![Stat::Avg, Stat::Percentile(99.0)]);
        assert!(p.show_algorithm);
        assert_eq!(parse(&["allr", "-r", "2", "-c"]).unwrap().check, Some(Check::Random));
        assert_eq!(parse(&["permute", "-r", "3"]).unwrap().pairs, vec![(0, 1), (1, 2), (2, 0)]);
        assert!(parse(&["allr", "-r", "2", "--non-interactive"]).is_ok());
    }

    #[test]
    fn source_target_pairs_as_the_page_writes_them() {
        let ok = r#"{"src_target_pairs": [[[0, 1], [1, 0], [2, 3], [3, 2], [4, 4]]]}"#;
        assert_eq!(parse_pairs(ok, 8), Ok(vec![(0, 1), (1, 0), (2, 3), (3, 2), (4, 4)]));
        for (bad, why) in [
            (r#"{"src_target_pairs": [[[0, 8]]]}"#, "does not exist"),
            (r#"{"src_target_pairs": [[[0, 1], [0, 2]]]}"#, "source of two"),
            (r#"{"src_target_pairs": [[[0, 1], [2, 1]]]}"#, "target of two"),
            (r#"{"src_target_pairs": [[[0, 1, 2]]]}"#, "not [source, target]"),
            (r#"{"src_target_pairs": [[[0, 1]], [[1, 0]]]}"#, "2 tables"),
            (r#"{"pairs": []}"#, "expected"),
            ("[", "not JSON"),
        ] {
            let e = parse_pairs(bad, 8).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        for (args, name) in [
            (vec!["allr", "-r", "8", "-N", "0"], "-N/--nnodes"),
            (vec!["allr", "-r", "8", "-N", "2", "-s", "h1", "h2", "h3"], "-s/--hosts"),
            (vec!["allr", "-r", "7", "-N", "2", "-s", "h1", "h2"], "-r/--nworkers"),
            (vec!["allr", "-r", "8", "-N", "2", "--hosts-file", "/nonexistent/h"], "--hosts-file"),
            (vec!["allr", "-r", "8", "-S", "-s", "h1"], "-S/--slurm-mode"),
            (vec!["allr", "-r", "8", "--custom-src-target-pairs", "/tmp/p"], "--custom-src-target-pairs"),
            (vec!["allr", "-r", "8", "--unique-buff"], "--unique-buff"),
            (vec!["allr", "-r", "8", "--slurm-job-id", "12"], "--slurm-job-id"),
            (vec!["allr", "-r", "8", "-c", "zeros"], "-c/--check"),
            (vec!["allr", "-r", "8", "-t", "median"], "--stats"),
            (vec!["allr", "-r", "8", "-b", "1.5M"], "-b/--minbytes"),
            (vec!["broadcast", "-r", "8"], "broadcast"),
            (vec!["allr", "-r", "8", "-d", "fp64"], "fp64"),
        ] {
            let e = parse(&args).unwrap_err();
            assert!(e.contains(name), "{args:?}: {e}");
        }
        assert!(parse(&["allr", "-r", "8", "-i", "4", "-f", "2"]).is_err());
    }
}
