//! Global communicators: ranks in several processes or hosts (feature `fabric`).
//!
//! - Bootstrap as libnrt: the root address from `NEURON_RT_ROOT_COMM_ID` (`host:port`, rank 0
//!   listens), this process's rank and the rank count from the API (`g_device_id`,
//!   `g_device_count`), else from the launcher's environment; `fabric::ofi::join` opens the
//!   libfabric endpoint (provider from `FI_PROVIDER`, default `tcp`). The exchange timeout is
//!   `NEURON_RT_EXEC_TIMEOUT` (default 600 s), so a dead peer fails executions within it.
//! - `nrt_load_collectives(…, g_device_id, g_device_count)` with `g_device_count` > 1 checks the
//!   communicator (`enc_validate_global_comm` in libnrt: joined with the same id and count),
//!   loads the NEFF with graph `i` as global rank `g_device_id × G + i` (`G` graphs per
//!   process), then checks the replica groups (`kmgr_validate_replica_groups`): every process
//!   must load the same NEFF layout (graph count, replica-group table, load sequence), and the
//!   outcome of every process's load is shared so that they succeed or fail together.
//! - Replica groups spanning processes are registered with the simulator's collective hub
//!   through [`sim::InterHost`]: the hub meets the local participant and hands its part to
//!   [`Global`], which runs the collective over the libfabric ring/direct algorithms on the
//!   group's processes (`sim_serve::seam`, which the device hosts of nccom-test's multi-host
//!   runs use too); a group inside this process stays on the device
//!   path. A spanning group with several ranks in this process hands all their parts across
//!   together and runs the hierarchical collective (`Communicator::group_all_reduce`, …).
//!   The reduction order is the one of `docs/fabric.md`, the same in every path.
//! - `nrt_barrier` and `nrt_all_gather` run over the bootstrap's out-of-band channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use fabric::bootstrap::{resolve_rank, root_from_env, Oob, RankSpec};
use fabric::coll::CollConfig;
use fabric::ofi::OfiTransport;
use fabric::{Communicator, FabricError};
use neff::NrtStatus;
use runtime::RtError;
use sim::{InterHost, InterHostError, InterHostRequest};
use sim_serve::seam::{self, Span};

use crate::base::{err, lock};

struct World {
    comm: Communicator<OfiTransport>,
    oob: Oob,
    spec: RankSpec,
    /// Global loads made so far (the communicator ids of the next one follow from it).
    loads: u32,
}

/// The process's global communicator and the groups registered on it.
#[derive(Default)]
pub struct Global {
    world: Mutex<Option<World>>,
    spans: RwLock<HashMap<u32, Span>>,
}

/// The process-wide instance (installed on every simulated device this library opens).
pub fn global() -> &'static Arc<Global> {
    static G: OnceLock<Arc<Global>> = OnceLock::new();
    G.get_or_init(|| Arc::new(Global::default()))
}

fn fab(e: FabricError) -> RtError {
    err(e.status(), e.to_string())
}

/// Transport timeout: [`fabric::transport_timeout`] of `NEURON_RT_EXEC_TIMEOUT` (default
/// 600 s), so that a dead peer fails the collective — and the execution with
/// NRT_NETWORK_PROXY_FAILURE — before the execution's own timeout would report a plain
/// NRT_TIMEOUT.
pub(crate) fn timeout() -> Result<Duration, RtError> {
    let secs = match std::env::var(runtime::env::EXEC_TIMEOUT_VAR) {
        Ok(v) => runtime::env::parse_exec_timeout(&v).map_err(|e| err(NrtStatus::Invalid, e.to_string()))?,
        Err(_) => runtime::env::DEFAULT_EXEC_TIMEOUT_SECS,
    };
    Ok(fabric::transport_timeout(secs))
}

impl Global {
    /// Joins (once) or checks the global communicator of `g_device_id` of `g_device_count`.
    pub fn ensure(&self, id: u32, count: u32) -> Result<(), RtError> {
        if count == 0 || id >= count {
            return Err(err(NrtStatus::Invalid, format!("g_device_id {id} of {count}")));
        }
        let mut w = lock(&self.world);
        if let Some(w) = w.as_ref() {
            return if w.spec.rank == id as usize && w.spec.size == count as usize {
                Ok(())
            } else {
                Err(err(
                    NrtStatus::Invalid,
                    format!("the global communicator is rank {} of {}, not {id} of {count}", w.spec.rank, w.spec.size),
                ))
            };
        }
        let spec = resolve_rank(Some(id as usize), Some(count as usize), |k| std::env::var(k).ok()).map_err(fab)?;
        let root = root_from_env().map_err(fab)?;
        let (comm, oob) = fabric::ofi::join(&root, spec, timeout()?, CollConfig::default()).map_err(fab)?;
        tracing::info!(rank = spec.rank, size = spec.size, %root, "global communicator up");
        *w = Some(World { comm, oob, spec, loads: 0 });
        Ok(())
    }

    /// Whether `id` of `count` is the single-worker communicator (no fabric needed).
    pub fn single(id: u32, count: u32) -> bool {
        id == 0 && count == 1
    }

    /// `nrt_barrier`.
    pub fn barrier(&self, id: u32, count: u32) -> Result<(), RtError> {
        self.ensure(id, count)?;
        let mut w = lock(&self.world);
        let w = w.as_mut().ok_or_else(|| err(NrtStatus::Invalid, "no global communicator"))?;
        w.oob.barrier().map_err(fab)
    }

    /// `nrt_all_gather`: every rank's `input` concatenated in rank order.
    pub fn all_gather(&self, id: u32, count: u32, input: &[u8]) -> Result<Vec<u8>, RtError> {
        self.ensure(id, count)?;
        let mut w = lock(&self.world);
        let w = w.as_mut().ok_or_else(|| err(NrtStatus::Invalid, "no global communicator"))?;
        let all = w.oob.allgather(input).map_err(fab)?;
        if all.iter().any(|b| b.len() != input.len()) {
            return Err(err(NrtStatus::Invalid, "nrt_all_gather: ranks passed different rank_input_size"));
        }
        Ok(all.concat())
    }

    /// `nrt_load_collectives` with `count` > 1: see the module docs.
    pub fn load(
        &self,
        bytes: &[u8],
        start: Option<usize>,
        nc_count: Option<usize>,
        id: u32,
        count: u32,
    ) -> Result<runtime::ModelHandle, RtError> {
        self.ensure(id, count)?;
        let layout = layout_of(bytes)?;
        let g = layout.graphs;
        let mut wg = lock(&self.world);
        let w = wg.as_mut().ok_or_else(|| err(NrtStatus::Invalid, "no global communicator"))?;
        let me = w.spec.rank;
        let world = w.spec.size;
        // enc_validate_global_comm: the same load, in the same sequence, on every process.
        let digest = layout.digest(w.loads);
        let all = w.oob.allgather(&digest).map_err(fab)?;
        if let Some(r) = all.iter().position(|d| d != &digest) {
            return Err(err(
                NrtStatus::Invalid,
                format!(
                    "rank {r} loads a different collective model (graph count, replica groups, collective \
                     sequences or load order)"
                ),
            ));
        }
        let comm_base = 0x6e00_0000u32 ^ w.loads.wrapping_mul(0x9e37_79b1);
        w.loads = w.loads.wrapping_add(1);
        // kmgr_validate_replica_groups: every group names existing global ranks, each once. A
        // group spanning processes may hold several ranks of one process: they meet in the
        // hub and the fabric runs the hierarchical collective (`fabric::coll::hier`).
        let mut spans = HashMap::new();
        let mut bad = None;
        for (j, grp) in layout.groups.iter().enumerate() {
            let mut procs = Vec::with_capacity(grp.len());
            for &r in grp {
                if (r as usize) >= g * world {
                    bad = Some(format!("replica group {j} names rank {r} of {} global ranks", g * world));
                }
                procs.push(r as usize / g.max(1));
            }
            if bad.is_some() || procs.iter().all(|&p| p == me) {
                continue;
            }
            let mut seen = grp.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != grp.len() {
                bad = Some(format!("replica group {j} {grp:?} names a rank twice"));
                continue;
            }
            let local: Vec<usize> = procs.iter().enumerate().filter(|(_, &p)| p == me).map(|(i, _)| i).collect();
            if !local.is_empty() {
                spans.insert(comm_base.wrapping_mul(256).wrapping_add(j as u32), Span { procs, local });
            }
        }
        let res = match bad {
            Some(m) => Err(err(NrtStatus::Invalid, m)),
            None => crate::base::rt().load_reader_global(
                bytes,
                bytes.len() as u64,
                start,
                nc_count,
                runtime::GlobalPlacement { rank_base: me * g, comm_id: comm_base, ranks: g * world },
            ),
        };
        // Every process learns every load's outcome: all succeed or all fail.
        let ok = [u8::from(res.is_ok())];
        let outcome = w.oob.allgather(&ok);
        let failed = match &outcome {
            Ok(all) => all.iter().position(|o| o.first() != Some(&1)),
            Err(_) => Some(me),
        };
        match (res, outcome, failed) {
            (Ok(m), Ok(_), None) => {
                platform::sync::write(&self.spans).extend(spans);
                Ok(m)
            }
            (Ok(m), outcome, failed) => {
                let _ = crate::base::rt().unload(&m);
                match outcome {
                    Err(e) => Err(fab(e)),
                    Ok(_) => Err(err(
                        NrtStatus::Invalid,
                        format!("rank {} failed to load the collective model", failed.unwrap_or(me)),
                    )),
                }
            }
            (Err(e), _, _) => Err(e),
        }
    }
}

/// What every process of a global load must agree on.
struct Layout {
    graphs: usize,
    groups: Vec<Vec<u32>>,
    /// Every graph's collective sequences (`runtime::collectives::layout_signature`): the
    /// part of the layout a rank's partners in other processes must match.
    collectives: Vec<u8>,
}

impl Layout {
    fn digest(&self, load: u32) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&load.to_le_bytes());
        d.extend_from_slice(&(self.graphs as u64).to_le_bytes());
        for g in &self.groups {
            d.extend_from_slice(&(g.len() as u64).to_le_bytes());
            for r in g {
                d.extend_from_slice(&r.to_le_bytes());
            }
        }
        d.extend_from_slice(&self.collectives);
        d
    }
}

/// Takes the weights of a NEFF read only for its layout and keeps nothing of them.
struct SkipWeights;

impl neff::MemberSink for SkipWeights {
    fn wants(&mut self, name: &str, size: u64) -> bool {
        size >= 1 << 20 && name.ends_with(".npy")
    }
    fn begin(&mut self, _: &str, _: u64) -> Result<(), neff::SinkError> {
        Ok(())
    }
    fn write(&mut self, _: &[u8]) -> Result<(), neff::SinkError> {
        Ok(())
    }
    fn end(&mut self) -> Result<(), neff::SinkError> {
        Ok(())
    }
}

/// The graph count and replica groups (the weights are inflated past, not held).
fn layout_of(bytes: &[u8]) -> Result<Layout, RtError> {
    let n = neff::Neff::parse_streaming(bytes, bytes.len() as u64, &neff::ReadOptions::default(), &mut SkipWeights)?;
    let first = n.graphs.first().ok_or_else(|| err(NrtStatus::Invalid, "the NEFF has no graph"))?;
    if n.graphs.iter().any(|g| g.replica_groups != first.replica_groups) {
        return Err(err(NrtStatus::Invalid, "graphs of a global load must share one replica-group table"));
    }
    Ok(Layout {
        graphs: n.graphs.len(),
        groups: first.replica_groups.iter().map(|g| g.to_vec()).collect(),
        collectives: runtime::collectives::layout_signature(&n),
    })
}

impl InterHost for Global {
    fn local_ranks(&self, comm: u32) -> Option<Vec<usize>> {
        platform::sync::read(&self.spans).get(&comm).map(|s| s.local.clone())
    }

    /// The group's other processes over the global communicator's transport
    /// (`sim_serve::seam::collective`: hierarchical when this process holds several ranks of
    /// the group, flat otherwise).
    fn collective(&self, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError> {
        let span = self.span(req.comm)?;
        let mut w = lock(&self.world);
        let w = w.as_mut().ok_or_else(|| InterHostError::Network("no global communicator".into()))?;
        seam::collective(w.comm.transport(), &span, req)
    }

    /// The collectives barrier of a spanning group (`sim_serve::seam::barrier`: one arrival per
    /// process, once the hub has met its local ranks; a dead process fails it when the
    /// transport's timeout expires: network proxy).
    fn barrier(&self, comm: u32, seq: u32, size: usize, local: &[usize]) -> Result<(), InterHostError> {
        let span = self.span(comm)?;
        let mut w = lock(&self.world);
        let w = w.as_mut().ok_or_else(|| InterHostError::Network("no global communicator".into()))?;
        seam::barrier(w.comm.transport(), &span, comm, seq, size, local)
    }
}

impl Global {
    fn span(&self, comm: u32) -> Result<Span, InterHostError> {
        platform::sync::read(&self.spans)
            .get(&comm)
            .cloned()
            .ok_or_else(|| InterHostError::Collective(format!("communicator {comm:#x} is not registered")))
    }
}
