//! Collectives that can never complete are refused at load (docs/trust.md).
//!
//! A collective completes only when every member of its replica group issues the matching
//! collective. On a plain `nrt_load` every rank of every group is a graph of the model being
//! loaded, so the loader can see whether each collective will ever meet its partners; one
//! that cannot would make every execute wait on the barrier for ever (libnrt's barrier phase
//! warns and never fails, which is right for a slow peer and wrong for one the runtime knows
//! can never arrive). Refused, with NRT_INVALID naming the graph, the instruction and the
//! group:
//!
//! - a replica group the graph's table does not have;
//! - a member rank outside the load's ranks, or named twice, or a group without the graph's
//!   own rank;
//! - a member whose graph has no matching collective: the member's graph must hold the same
//!   replica group under the same id, and its collectives on that group must be the same
//!   sequence — type, operation, element type and element count, in the same order (programs
//!   are straight-line: the order in the engine streams, PE → ACT → POOL → DVE, is the order
//!   of issue).
//!
//! A load into a global communicator (`nrt_load_collectives` across processes) has ranks in
//! other processes. Every process loads the same NEFF (the C API's cross-process layout check
//! compares [`layout_signature`], which covers the collective sequences, before any process
//! loads), so a member rank `r` runs graph `r mod G` of this NEFF, and the same checks apply
//! with the communicator's rank count.

use crate::status::NrtStatus;
use isa::slot::{Instruction, TriggerCollective};
use neff::model::Program;
use neff::{Engine, Neff};

/// The ranks a load's graphs take: graph `i` is rank `first + i` of `total` ranks, and rank `r`
/// runs graph `r mod graphs` (every process of a global load loads the same NEFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadRanks {
    /// Rank of the NEFF's first graph.
    pub first: usize,
    /// Ranks in all (the graph count for a plain load).
    pub total: usize,
}

impl LoadRanks {
    /// A plain load: the graphs are all the ranks.
    pub fn local(graphs: usize) -> Self {
        Self { first: 0, total: graphs }
    }
}

/// What identifies a collective between its participants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Collective type (`ctype`).
    pub ctype: u8,
    /// ALU operation.
    pub op: u8,
    /// Element type.
    pub dtype: u8,
    /// Element count.
    pub num_elements: u64,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "type {:#04x} op {:#04x} dtype {:#04x} × {}", self.ctype, self.op, self.dtype, self.num_elements)
    }
}

impl From<&TriggerCollective> for Signature {
    fn from(c: &TriggerCollective) -> Self {
        Self { ctype: c.ctype, op: c.op, dtype: c.dtype, num_elements: c.num_elements }
    }
}

/// Where a collective instruction is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// Graph name.
    pub graph: String,
    pub engine: Engine,
    /// Instruction index in the engine's stream.
    pub index: usize,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "graph {} {} instruction {}", self.graph, self.engine.name(), self.index)
    }
}

/// Why a member's graph does not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The member's graph has fewer collectives on the group.
    Missing,
    /// The member's collective at the same place differs.
    Differs(Signature),
    /// The member's graph has a different group under the same id.
    Group(Option<Vec<u32>>),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Missing => write!(f, "it has no collective there"),
            Mismatch::Differs(s) => write!(f, "its collective there is {s}"),
            Mismatch::Group(Some(g)) => write!(f, "its replica group under that id is {g:?}"),
            Mismatch::Group(None) => write!(f, "it has no replica group under that id"),
        }
    }
}

/// A collective that can never complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    #[error("{site}: replica group {group} does not exist ({groups} groups)")]
    NoSuchGroup { site: Site, group: u16, groups: usize },
    #[error("{site}: replica group {group} {members:?} names rank {rank}, outside the load's {ranks} ranks")]
    RankOutside { site: Site, group: u16, members: Vec<u32>, rank: u32, ranks: usize },
    #[error("{site}: replica group {group} {members:?} names rank {rank} twice")]
    RankTwice { site: Site, group: u16, members: Vec<u32>, rank: u32 },
    #[error("{site}: replica group {group} {members:?} does not hold the graph's own rank {rank}")]
    NotAMember { site: Site, group: u16, members: Vec<u32>, rank: usize },
    #[error(
        "{site}: collective {nth} on replica group {group} {members:?} ({signature}) has no match in graph \
         {peer} (rank {rank}): {mismatch}"
    )]
    Unmatched {
        site: Site,
        /// Position among the graph's collectives on the group.
        nth: usize,
        group: u16,
        members: Vec<u32>,
        signature: Signature,
        /// The member's graph and rank.
        peer: String,
        rank: u32,
        mismatch: Mismatch,
    },
}

impl CollectiveError {
    /// NRT_INVALID: a collective that can never complete is refused at load as malformed
    /// content (exhaustive: a new variant must choose).
    pub fn status(&self) -> NrtStatus {
        match self {
            CollectiveError::NoSuchGroup { .. }
            | CollectiveError::RankOutside { .. }
            | CollectiveError::RankTwice { .. }
            | CollectiveError::NotAMember { .. }
            | CollectiveError::Unmatched { .. } => NrtStatus::Invalid,
        }
    }
}

impl nrt_status::Status for CollectiveError {
    fn status(&self) -> NrtStatus {
        CollectiveError::status(self)
    }
}

/// One graph's collectives on one group id, in order of issue.
type Sequence = Vec<(Signature, Engine, usize)>;

/// Each graph's collectives by group id (sorted by id), in order of issue.
fn sequences(n: &Neff) -> Vec<Vec<(u16, Sequence)>> {
    n.graphs
        .iter()
        .map(|g| {
            let mut by_group: Vec<(u16, Sequence)> = Vec::new();
            for e in &g.engines {
                let Program::Tpb(code) = &e.program else { continue };
                for (index, i) in code.iter().enumerate() {
                    if let Instruction::TriggerCollective(c) = i {
                        let at = match by_group.binary_search_by_key(&c.group_id, |(id, _)| *id) {
                            Ok(k) => k,
                            Err(k) => {
                                by_group.insert(k, (c.group_id, Vec::new()));
                                k
                            }
                        };
                        by_group[at].1.push((Signature::from(c), e.kind, index));
                    }
                }
            }
            by_group
        })
        .collect()
}

fn sequence(seqs: &[(u16, Sequence)], group: u16) -> &[(Signature, Engine, usize)] {
    match seqs.binary_search_by_key(&group, |(id, _)| *id) {
        Ok(k) => &seqs[k].1,
        Err(_) => &[],
    }
}

/// Refuse every collective of `n` that can never complete when its graphs take `ranks`.
pub fn check(n: &Neff, ranks: LoadRanks) -> Result<(), Box<CollectiveError>> {
    let graphs = n.graphs.len();
    if graphs == 0 {
        return Ok(());
    }
    let seqs = sequences(n);
    for (i, g) in n.graphs.iter().enumerate() {
        let own = ranks.first.saturating_add(i);
        for (group, seq) in &seqs[i] {
            let Some(&(_, engine, index)) = seq.first() else { continue };
            let site = |engine: Engine, index: usize| Site { graph: g.name.clone(), engine, index };
            let Some(members) = g.replica_groups.get(usize::from(*group)) else {
                return Err(Box::new(CollectiveError::NoSuchGroup {
                    site: site(engine, index),
                    group: *group,
                    groups: g.replica_groups.len(),
                }));
            };
            // An empty group is the graph alone (a collective of one).
            if members.is_empty() {
                continue;
            }
            let err_members = || members.clone();
            for (k, &r) in members.iter().enumerate() {
                if r as usize >= ranks.total {
                    return Err(Box::new(CollectiveError::RankOutside {
                        site: site(engine, index),
                        group: *group,
                        members: err_members(),
                        rank: r,
                        ranks: ranks.total,
                    }));
                }
                if members[..k].contains(&r) {
                    return Err(Box::new(CollectiveError::RankTwice {
                        site: site(engine, index),
                        group: *group,
                        members: err_members(),
                        rank: r,
                    }));
                }
            }
            if !members.iter().any(|&r| r as usize == own) {
                return Err(Box::new(CollectiveError::NotAMember {
                    site: site(engine, index),
                    group: *group,
                    members: err_members(),
                    rank: own,
                }));
            }
            for &r in members {
                let p = r as usize % graphs;
                if p == i {
                    continue;
                }
                let peer = &n.graphs[p];
                let unmatched = |nth: usize, mismatch: Mismatch| {
                    let (signature, engine, index) = seq[nth.min(seq.len() - 1)];
                    Box::new(CollectiveError::Unmatched {
                        site: site(engine, index),
                        nth,
                        group: *group,
                        members: err_members(),
                        signature,
                        peer: peer.name.clone(),
                        rank: r,
                        mismatch,
                    })
                };
                let theirs = peer.replica_groups.get(usize::from(*group));
                if theirs != Some(members) {
                    return Err(unmatched(0, Mismatch::Group(theirs.cloned())));
                }
                let other = sequence(&seqs[p], *group);
                for (nth, (s, _, _)) in seq.iter().enumerate() {
                    match other.get(nth) {
                        None => return Err(unmatched(nth, Mismatch::Missing)),
                        Some((t, _, _)) if t != s => return Err(unmatched(nth, Mismatch::Differs(*t))),
                        Some(_) => {}
                    }
                }
            }
        }
    }
    Ok(())
}

/// The graphs' collective sequences as bytes, for a cross-process comparison of two loads
/// (equal bytes: the same groups ids, signatures and order in every graph).
pub fn layout_signature(n: &Neff) -> Vec<u8> {
    let mut d = Vec::new();
    for g in sequences(n) {
        d.extend_from_slice(&(g.len() as u64).to_le_bytes());
        for (group, seq) in g {
            d.extend_from_slice(&group.to_le_bytes());
            d.extend_from_slice(&(seq.len() as u64).to_le_bytes());
            for (s, _, _) in seq {
                d.extend_from_slice(&[s.ctype, s.op, s.dtype]);
                d.extend_from_slice(&s.num_elements.to_le_bytes());
            }
        }
    }
    d
}
