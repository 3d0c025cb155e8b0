//! Multi-host runs: how the hosts are named (MPI mode: `-s/--hosts`, `--hosts-file`, `~/hosts`;
//! Slurm mode: the job's allocation), the root address every host joins
//! (`NEURON_RT_ROOT_COMM_ID`), and which host a node process is (the launcher's environment:
//! Open MPI's `OMPI_COMM_WORLD_RANK/SIZE`, Slurm's `SLURM_PROCID/SLURM_NTASKS`).

use std::path::Path;

/// The root address's variable (libnrt's).
pub const ROOT_VAR: &str = "NEURON_RT_ROOT_COMM_ID";

/// How the node processes start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    /// `mpirun` on these hosts, one process each, in this order (host 0 first).
    Mpi { hosts: Vec<String> },
    /// `srun` in Slurm job `job`, one task per node.
    Slurm { job: String },
}

/// A multi-host run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multi {
    pub launcher: Launcher,
    /// `NEURON_RT_ROOT_COMM_ID` (`host:port`): host 0's device host listens there.
    pub root: String,
    /// Where the node processes send their workers' reports (`--data-collector-host`, default
    /// the root address's host) and the port the launching process listens on (0: any).
    pub collector_host: String,
    pub collector_port: u16,
}

/// The hosts of a hosts file: one a line, blank lines and `#` comments skipped, a trailing
/// `slots=…` (Open MPI's hostfile syntax) ignored.
pub fn parse_hosts(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// The host part of a `host:port` (or `[v6]:port`) address whose port is a number, or `None`.
pub fn root_host(root: &str) -> Option<String> {
    let (host, port) = match root.strip_prefix('[') {
        Some(rest) => rest.split_once("]:")?,
        None => root.rsplit_once(':')?,
    };
    (!host.is_empty() && port.parse::<u16>().is_ok()).then(|| host.to_string())
}

/// Reads the hosts of MPI mode: `-s` when given, else `--hosts-file`, else `~/hosts` (the
/// page's fallback). `Err` names the source that failed.
pub fn mpi_hosts(flag: &[String], file: Option<&Path>, home: Option<&Path>) -> Result<Vec<String>, (String, String)> {
    if !flag.is_empty() {
        return Ok(flag.to_vec());
    }
    let (name, path) = match (file, home) {
        (Some(f), _) => ("--hosts-file".to_string(), f.to_path_buf()),
        (None, Some(h)) => ("~/hosts".to_string(), h.join("hosts")),
        (None, None) => return Err(("-s/--hosts".into(), "no hosts: give -s/--hosts or --hosts-file".into())),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| (name.clone(), format!("{}: {e}", path.display())))?;
    let hosts = parse_hosts(&text);
    if hosts.is_empty() {
        return Err((name, format!("{}: no hosts in it", path.display())));
    }
    Ok(hosts)
}

/// Which node process of `nnodes` this is, from the launcher's environment (`get` reads a
/// variable): Open MPI's world rank and size, or Slurm's task id and count.
pub fn node_index(launcher: &Launcher, nnodes: usize, get: impl Fn(&str) -> Option<String>) -> Result<usize, String> {
    let (rank_var, size_var) = match launcher {
        Launcher::Mpi { .. } => ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        Launcher::Slurm { .. } => ("SLURM_PROCID", "SLURM_NTASKS"),
    };
    let num = |var: &str| -> Result<usize, String> {
        let v = get(var).ok_or_else(|| format!("{var} is not set (a node process runs under the launcher)"))?;
        v.trim().parse().map_err(|_| format!("{var}={v}: not a number"))
    };
    let (rank, size) = (num(rank_var)?, num(size_var)?);
    if size != nnodes || rank >= size {
        return Err(format!("{rank_var}={rank} of {size_var}={size}: this run has {nnodes} nodes, one process each"));
    }
    Ok(rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_files_and_roots() {
        assert_eq!(parse_hosts("a\n\n  b slots=4 # second\n# c\n"), vec!["a", "b"]);
        assert_eq!(root_host("10.1.4.145:45654").as_deref(), Some("10.1.4.145"));
        assert_eq!(root_host("[fd00::1]:44444").as_deref(), Some("fd00::1"));
        assert_eq!(root_host("10.1.4.145"), None);
        assert_eq!(root_host("h:port"), None);
        assert_eq!(mpi_hosts(&["x".into()], None, None), Ok(vec!["x".to_string()]));
        let e = mpi_hosts(&[], Some(Path::new("/nonexistent/h")), None).unwrap_err();
        assert_eq!(e.0, "--hosts-file");
        assert_eq!(mpi_hosts(&[], None, None).unwrap_err().0, "-s/--hosts");
    }

    #[test]
    fn node_index_from_the_launchers_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
        };
        let mpi = Launcher::Mpi { hosts: vec![] };
        let slurm = Launcher::Slurm { job: "7".into() };
        assert_eq!(node_index(&mpi, 2, env(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")])), Ok(1));
        assert_eq!(node_index(&slurm, 2, env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")])), Ok(0));
        assert!(node_index(&slurm, 2, env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])).is_err());
        assert!(node_index(&mpi, 2, env(&[])).unwrap_err().contains("OMPI_COMM_WORLD_RANK"));
    }
}
