//! A shared simulated device's inter-host seam over libfabric: the device host of each host
//! of a multi-host job joins one libfabric world (one rank per host, bootstrapped at the
//! job's root address as libnrt's `NEURON_RT_ROOT_COMM_ID`), and the replica groups that span
//! hosts are registered with it, so that the device's collective hub meets the local ranks of
//! such a group and hands their parts across ([`sim::InterHost`]): the hierarchical
//! collectives of `fabric` (`group_all_reduce`, …) when the host holds several ranks of the
//! group, the flat ones when it holds one — the reduction order of docs/fabric.md, the same
//! as the hub's; the exchanges (send/receive, permute, all-to-all, all-to-allv) as a plan
//! round and a data round of point-to-point messages (`exchange`).
//!
//! Two control lines of the device host ([`crate::control_command`]) drive it; every client
//! of a job sends both, so that none runs a collective before its groups are known:
//!
//! - `interhost join JOB ROOT RANK SIZE EXEC_TIMEOUT_S` — this host is rank RANK of SIZE hosts
//!   of job JOB, whose executions time out after EXEC_TIMEOUT_S seconds (libnrt's
//!   `NEURON_RT_EXEC_TIMEOUT`; the transport gives up on a peer within
//!   [`fabric::transport_timeout`] of it, so that a dead host fails the execution with
//!   NRT_NETWORK_PROXY_FAILURE before it times out). The first line of a job starts the join on
//!   a thread of its own and installs the seam (a later job's replaces it); later lines of the
//!   same job are answered at once. A collective waits for the join (at most the transport
//!   timeout); a failed join fails it as a network failure.
//! - `interhost span JOB COMM H0,H1,…` — communicator COMM (as the runtime lowers it) is a
//!   group whose rank `g` lives on host `Hg`.
//!
//! Messages from other hosts are the transport's (`fabric` checks their sizes); a peer that
//! stops answering fails the collective within the transport timeout.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use fabric::bootstrap::{Oob, RankSpec};
use fabric::coll::CollConfig;
use fabric::ofi::OfiTransport;
use fabric::{Communicator, FabricError, Subgroup, Transport};
use sim::{CollKind, InterHost, InterHostError, InterHostRequest, SimDevice};

mod exchange;
pub use exchange::ExchangeError;

/// A replica group spanning processes: the process (host) of each group rank, and the group
/// ranks hosted here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub procs: Vec<usize>,
    pub local: Vec<usize>,
}

impl Span {
    /// The span of a group whose rank `g` lives on process `procs[g]`, seen from process `me`.
    pub fn new(procs: Vec<usize>, me: usize) -> Span {
        let local = procs.iter().enumerate().filter(|(_, &p)| p == me).map(|(g, _)| g).collect();
        Span { procs, local }
    }

    /// The group's processes in order of first appearance (the subgroup of the transport),
    /// and each group rank's index among them.
    pub fn placement(&self) -> (Vec<usize>, Vec<usize>) {
        let mut uniq: Vec<usize> = Vec::new();
        let mut at = Vec::with_capacity(self.procs.len());
        for &p in &self.procs {
            let i = match uniq.iter().position(|&q| q == p) {
                Some(i) => i,
                None => {
                    uniq.push(p);
                    uniq.len() - 1
                }
            };
            at.push(i);
        }
        (uniq, at)
    }

    /// One group rank per process: the flat algorithms apply as they are.
    pub fn flat(&self) -> bool {
        self.placement().0.len() == self.procs.len()
    }
}

fn seam_err(e: FabricError) -> InterHostError {
    if e.status_code() == fabric::NRT_NETWORK_PROXY_FAILURE {
        InterHostError::Network(e.to_string())
    } else {
        InterHostError::Collective(e.to_string())
    }
}

/// The tag sequence of collective `seq` of communicator `comm` on the transport: folded into
/// the 16-bit tag sequence in steps of 2 (barriers use the odd steps of another base). A
/// collective uses one sequence number — an exchange two, the second in the odd step after
/// its own (its plan and data rounds, with the exchange's own tag phase).
pub fn tag_seq(comm: u32, seq: u32) -> u64 {
    u64::from(comm.wrapping_mul(0x9e37_79b1).wrapping_add(seq.wrapping_mul(2)) & 0xffff)
}

/// Runs `req` (the local parts of the group `span`) with the group's other processes over
/// transport `t` (whose ranks are the processes): the hierarchical collective when this
/// process holds several ranks of the group, else the flat one; an exchange as its two rounds
/// of point-to-point messages (`seam/exchange.rs`). The outputs in the order of `req.parts`
/// (of `req.exchange` for an exchange).
pub fn collective<T: Transport>(t: &mut T, span: &Span, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError> {
    let given: Vec<usize> = match req.kind {
        CollKind::Exchange if req.parts.is_empty() => req.exchange.iter().map(|x| x.rank).collect(),
        CollKind::Exchange => return Err(InterHostError::Collective("an exchange with reduction parts".into())),
        _ => req.parts.iter().map(|(g, _)| *g).collect(),
    };
    if span.procs.len() != req.size || span.local != given {
        return Err(InterHostError::Collective(format!(
            "group ranks {given:?} of {} do not match the registered group {:?} (local {:?})",
            req.size, span.procs, span.local
        )));
    }
    let (uniq, at) = span.placement();
    let flat = uniq.len() == span.procs.len();
    let mut c =
        Communicator::new(Subgroup::new(t, uniq).map_err(seam_err)?, CollConfig::default()).map_err(seam_err)?;
    // Tags of this collective: (communicator, sequence) folded into the 16-bit tag sequence.
    c.set_seq(tag_seq(req.comm, req.seq));
    if req.kind == CollKind::Exchange {
        return exchange::run(&mut c, span, &at, req.exchange).map_err(InterHostError::from);
    }
    let (dt, op) = (req.elem, req.op);
    if !flat {
        let out = match req.kind {
            CollKind::AllReduce => {
                let mut parts = req.parts;
                c.group_all_reduce(&at, &mut parts, dt, op).map(|()| parts.into_iter().map(|(_, b)| b).collect())
            }
            CollKind::AllGather => c.group_all_gather(&at, &req.parts).map(|all| vec![all; req.parts.len()]),
            CollKind::ReduceScatter => c.group_reduce_scatter(&at, &req.parts, dt, op),
            CollKind::Exchange => return Err(InterHostError::Collective("an exchange past its path".into())),
        };
        return out.map_err(seam_err);
    }
    let [(grank, input)] = <[(usize, Vec<u8>); 1]>::try_from(req.parts)
        .map_err(|p| InterHostError::Collective(format!("{} local parts in a one-rank-per-process group", p.len())))?;
    let out = match req.kind {
        CollKind::AllReduce => {
            let mut buf = input;
            c.all_reduce(&mut buf, dt, op).map(|()| buf)
        }
        CollKind::AllGather => {
            let mut out = vec![0u8; input.len() * req.size];
            c.all_gather(&input, &mut out).map(|()| out)
        }
        CollKind::ReduceScatter => {
            let seg = fabric::reduce::segment(input.len() / dt.size(), req.size, grank);
            let mut out = vec![0u8; seg.len() * dt.size()];
            c.reduce_scatter(&input, &mut out, dt, op).map(|()| out)
        }
        CollKind::Exchange => return Err(InterHostError::Collective("an exchange past its path".into())),
    };
    out.map(|o| vec![o]).map_err(seam_err)
}

/// The collectives barrier of the group `span` over transport `t`: a one-byte all-gather over
/// the group's distinct processes (a process hosting several ranks arrives once, when the hub
/// has met all of them).
pub fn barrier<T: Transport>(
    t: &mut T,
    span: &Span,
    comm: u32,
    seq: u32,
    size: usize,
    local: &[usize],
) -> Result<(), InterHostError> {
    if span.procs.len() != size || span.local != local {
        return Err(InterHostError::Collective(format!(
            "barrier ranks {local:?} of {size} do not match the registered group {:?}",
            span.procs
        )));
    }
    let (uniq, _) = span.placement();
    let n = uniq.len();
    let mut c =
        Communicator::new(Subgroup::new(t, uniq).map_err(seam_err)?, CollConfig::default()).map_err(seam_err)?;
    // Tags apart from the collectives' (their sequence numbers are folded in even steps from
    // another base).
    c.set_seq(u64::from(comm.wrapping_mul(0x85eb_ca6b).wrapping_add(seq.wrapping_mul(2)).wrapping_add(1) & 0xffff));
    let mut out = vec![0u8; n];
    c.all_gather(&[1u8], &mut out).map_err(seam_err)
}

/// The world of one job: joining, joined, or failed to join.
enum World {
    Joining,
    Up {
        comm: Box<Communicator<OfiTransport>>,
        // Kept for the job's lifetime: its links are the bootstrap's.
        _oob: Box<Oob>,
    },
    Failed(String),
}

/// The seam of one job (module docs).
pub struct FabricSeam {
    job: u64,
    rank: usize,
    hosts: usize,
    timeout: Duration,
    world: Mutex<World>,
    joined: Condvar,
    spans: RwLock<HashMap<u32, Span>>,
}

impl FabricSeam {
    /// Waits (at most the timeout) for the join, then runs `f` on the job's transport.
    fn with_transport<R>(
        &self,
        f: impl FnOnce(&mut OfiTransport) -> Result<R, InterHostError>,
    ) -> Result<R, InterHostError> {
        let deadline = Instant::now() + self.timeout;
        let mut w = platform::sync::lock(&self.world);
        loop {
            match &mut *w {
                World::Up { comm, .. } => return f(comm.transport()),
                World::Failed(e) => return Err(InterHostError::Network(format!("joining the job's hosts: {e}"))),
                World::Joining => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(InterHostError::Network(format!(
                            "the job's hosts did not all join within {:?}",
                            self.timeout
                        )));
                    }
                    w = platform::sync::wait_timeout(&self.joined, w, left).0;
                }
            }
        }
    }

    fn span(&self, comm: u32) -> Result<Span, InterHostError> {
        platform::sync::read(&self.spans)
            .get(&comm)
            .cloned()
            .ok_or_else(|| InterHostError::Collective(format!("communicator {comm:#x} is not registered")))
    }
}

impl InterHost for FabricSeam {
    fn local_ranks(&self, comm: u32) -> Option<Vec<usize>> {
        platform::sync::read(&self.spans).get(&comm).map(|s| s.local.clone())
    }

    fn collective(&self, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError> {
        let span = self.span(req.comm)?;
        self.with_transport(|t| collective(t, &span, req))
    }

    fn barrier(&self, comm: u32, seq: u32, size: usize, local: &[usize]) -> Result<(), InterHostError> {
        let span = self.span(comm)?;
        self.with_transport(|t| barrier(t, &span, comm, seq, size, local))
    }
}

/// The device host's seam (one device per host process).
fn current() -> &'static Mutex<Option<Arc<FabricSeam>>> {
    static SEAM: OnceLock<Mutex<Option<Arc<FabricSeam>>>> = OnceLock::new();
    SEAM.get_or_init(|| Mutex::new(None))
}

/// Why a control line was refused.
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    #[error("usage: `interhost join JOB ROOT RANK SIZE EXEC_TIMEOUT_S` or `interhost span JOB COMM H0,H1,…`")]
    Usage,
    #[error("{0}: not a number")]
    Number(String),
    #[error("rank {rank} of {size} hosts")]
    Rank { rank: usize, size: usize },
    #[error("job {0:#x} has not joined on this host (send `interhost join` first)")]
    NoJob(u64),
    #[error("span of communicator {comm:#x}: host {host} of a job of {hosts} hosts")]
    Host { comm: u32, host: usize, hosts: usize },
    #[error("span of communicator {comm:#x}: {ranks} ranks, more than a group holds (255)")]
    GroupSize { comm: u32, ranks: usize },
    #[error("starting the join: {0}")]
    Thread(String),
}

/// A decimal number, or a hexadecimal one with `0x`, that fits `T`.
fn num<T: TryFrom<u64>>(s: &str) -> Result<T, SeamError> {
    let t = s.trim();
    let v = match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse::<u64>().ok(),
    };
    v.and_then(|v| T::try_from(v).ok()).ok_or_else(|| SeamError::Number(s.into()))
}

/// Handles an `interhost …` control line (module docs) for the host's device `sim`.
pub fn control(sim: &SimDevice, words: &[&str]) -> Result<String, SeamError> {
    match words {
        ["join", job, root, rank, size, exec_timeout_s] => {
            let (job, rank, size) = (num::<u64>(job)?, num::<usize>(rank)?, num::<usize>(size)?);
            let timeout = fabric::transport_timeout(num::<u32>(exec_timeout_s)?);
            if size == 0 || rank >= size {
                return Err(SeamError::Rank { rank, size });
            }
            let mut cur = platform::sync::lock(current());
            if let Some(s) = cur.as_ref().filter(|s| s.job == job) {
                return Ok(format!("ok job {job:#x}: host {} joined", s.rank));
            }
            let seam = Arc::new(FabricSeam {
                job,
                rank,
                hosts: size,
                timeout,
                world: Mutex::new(World::Joining),
                joined: Condvar::new(),
                spans: RwLock::new(HashMap::new()),
            });
            let joining = seam.clone();
            let at = root.to_string();
            std::thread::Builder::new()
                .name(format!("sim-seam-join-{job:x}"))
                .spawn(move || {
                    let w = match fabric::ofi::join(&at, RankSpec { rank, size }, timeout, CollConfig::default()) {
                        Ok((comm, oob)) => {
                            tracing::info!(job, rank, size, root = %at, "sim host: joined the job's hosts");
                            World::Up { comm: Box::new(comm), _oob: Box::new(oob) }
                        }
                        Err(e) => {
                            tracing::error!(job, rank, size, root = %at, "sim host: joining the job's hosts: {e}");
                            World::Failed(e.to_string())
                        }
                    };
                    *platform::sync::lock(&joining.world) = w;
                    joining.joined.notify_all();
                })
                .map_err(|e| SeamError::Thread(e.to_string()))?;
            sim.set_inter_host(Some(seam.clone() as Arc<dyn InterHost>));
            *cur = Some(seam);
            Ok(format!("ok job {job:#x}: host {rank} of {size} joining at {root}"))
        }
        ["span", job, comm, hosts] => {
            let (job, comm) = (num::<u64>(job)?, num::<u32>(comm)?);
            let seam = platform::sync::lock(current()).clone().filter(|s| s.job == job).ok_or(SeamError::NoJob(job))?;
            let procs: Vec<usize> = hosts.split(',').map(num::<usize>).collect::<Result<_, _>>()?;
            if procs.len() > usize::from(u8::MAX) {
                return Err(SeamError::GroupSize { comm, ranks: procs.len() });
            }
            if let Some(&host) = procs.iter().find(|&&p| p >= seam.hosts) {
                return Err(SeamError::Host { comm, host, hosts: seam.hosts });
            }
            let span = Span::new(procs, seam.rank);
            let local = span.local.len();
            platform::sync::write(&seam.spans).insert(comm, span);
            Ok(format!("ok communicator {comm:#x}: {local} local ranks"))
        }
        _ => Err(SeamError::Usage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_place_group_ranks_on_their_hosts() {
        let s = Span::new(vec![0, 0, 1, 1], 1);
        assert_eq!(s.local, vec![2, 3]);
        assert_eq!(s.placement(), (vec![0, 1], vec![0, 0, 1, 1]));
        assert!(!s.flat());
        assert!(Span::new(vec![1, 0], 0).flat());
    }

    #[test]
    fn control_lines_are_checked() {
        let Ok(sim) = SimDevice::new(sim::SimConfig::new(&csr_maps::SUNDA)) else { panic!("sim device") };
        for (line, want) in [
            ("join 1 127.0.0.1:1 2 2 10", "rank 2 of 2"),
            ("join x 127.0.0.1:1 0 2 10", "not a number"),
            ("span 77 5 0,1", "has not joined"),
            ("leave", "usage"),
        ] {
            let w: Vec<&str> = line.split_whitespace().collect();
            let e = control(&sim, &w).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(want), "{line}: {e}");
        }
    }
}
