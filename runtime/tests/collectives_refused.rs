//! Collectives that can never complete are refused at load with NRT_INVALID, naming the graph,
//! the instruction and the group (docs/trust.md) — the hostile models that once loaded and then
//! hung every execute for ever — while every model whose collectives can meet still loads and
//! runs, and a refused load leaves nothing behind.

use std::sync::Arc;
use std::time::Duration;

use csr_maps::CAYMAN;
use isa::slot::{coll_dtype, coll_op, Instruction, TriggerCollective};
use neff::builder::{self, EngineDesc, ModelDesc};
use neff::Engine;
use platform::Platform;
use runtime::collectives::{check, CollectiveError, LoadRanks, Mismatch};
use runtime::{GlobalPlacement, ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

fn runtime() -> (Runtime, SimDevice) {
    let sim = SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Threaded).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let cfg = RuntimeConfig { exec_timeout: Duration::from_secs(2), ..RuntimeConfig::physical() };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    (rt, sim)
}

fn model(graphs: usize, edit: impl FnOnce(&mut ModelDesc)) -> Vec<u8> {
    let mut d = builder::allreduce_model(graphs);
    d.target = CAYMAN.name.to_string();
    edit(&mut d);
    d.build().unwrap()
}

/// The all-reduce graph's one collective, as the builder writes it.
fn collective(d: &ModelDesc, graph: usize) -> TriggerCollective {
    let pe = d.graphs[graph].engines.iter().find(|e| e.kind == Engine::Pe).unwrap();
    match Instruction::decode(pe.code[..64].try_into().unwrap()) {
        Instruction::TriggerCollective(c) => c,
        other => panic!("not a collective: {other:?}"),
    }
}

fn set_collective(d: &mut ModelDesc, graph: usize, c: TriggerCollective) {
    let pe = d.graphs[graph].engines.iter_mut().find(|e| e.kind == Engine::Pe).unwrap();
    pe.code.clear();
    pe.push(&Instruction::TriggerCollective(c));
}

fn parse(bytes: &[u8]) -> neff::Neff {
    neff::Neff::parse(bytes, &neff::ReadOptions::default()).unwrap()
}

fn exec(rt: &Runtime, m: &ModelHandle) -> NrtStatus {
    let ti = rt.alloc_tensor("input", 128, false, m.ncs[0]).unwrap();
    ti.write(0, &[1u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, m.ncs[0]).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to);
    rt.execute(m, &i, &o).unwrap().0
}

/// Load `bytes`: refused with NRT_INVALID and a message naming `words`; then the device is as
/// before (nothing placed, mapped or allocated) and a good 2-NC model loads and runs.
fn refused(bytes: &[u8], words: &[&str]) {
    let (rt, sim) = runtime();
    let before = sim.stats();
    let e = rt.load(bytes, Some(0), None).expect_err("a collective that can never complete loads");
    assert_eq!(e.status, NrtStatus::Invalid, "{e}");
    assert!(matches!(e.kind, runtime::error::RtErrorKind::Collective(_)), "{e:?}");
    let msg = e.to_string();
    for w in words {
        assert!(msg.contains(w), "`{msg}` does not name `{w}`");
    }
    let after = sim.stats();
    assert_eq!((after.iommu_mappings, after.device_bytes), (before.iommu_mappings, before.device_bytes));
    let good = model(2, |_| {});
    let m = rt.load(&good, Some(0), None).unwrap();
    assert_eq!(exec(&rt, &m), NrtStatus::Success);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}

/// Replica group `[0, 0]`: rank 0 twice (it once loaded, then every execute waited for ever).
#[test]
fn a_rank_twice_in_a_group_is_refused() {
    let bytes = model(2, |d| {
        for g in &mut d.graphs {
            g.replica_groups = vec![vec![0, 0]];
        }
    });
    match check(&parse(&bytes), LoadRanks::local(2)).map_err(|e| *e) {
        Err(CollectiveError::RankTwice { rank: 0, group: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
    refused(&bytes, &["graph sg00", "pe instruction 0", "replica group 0", "[0, 0]", "twice"]);
}

/// Group `[0, 1]` in a one-graph model: rank 1 is no graph of the load.
#[test]
fn a_rank_outside_the_load_is_refused() {
    let bytes = model(1, |d| d.graphs[0].replica_groups = vec![vec![0, 1]]);
    match check(&parse(&bytes), LoadRanks::local(1)).map_err(|e| *e) {
        Err(CollectiveError::RankOutside { rank: 1, ranks: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    refused(&bytes, &["graph sg00", "rank 1", "outside the load's 1 ranks"]);
}

/// A two-graph model whose second graph lost its collective (the mutation campaign's hang:
/// `pe.json`'s instruction missing): the first graph's collective has no partner.
#[test]
fn a_member_without_the_collective_is_refused() {
    let bytes = model(2, |d| {
        let pe = d.graphs[1].engines.iter_mut().find(|e| e.kind == Engine::Pe).unwrap();
        *pe = EngineDesc::new(Engine::Pe);
    });
    match check(&parse(&bytes), LoadRanks::local(2)).map_err(|e| *e) {
        Err(CollectiveError::Unmatched { mismatch: Mismatch::Missing, rank: 1, nth: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
    refused(&bytes, &["graph sg00", "pe instruction 0", "no match in graph sg01", "no collective there"]);
}

/// Members whose collectives differ in element count, element type or operation.
#[test]
fn mismatched_members_are_refused() {
    type Edit = fn(&mut TriggerCollective);
    let edits: [(&str, Edit); 3] = [
        ("× 16", |c| c.num_elements = 16),
        ("dtype 0x08", |c| c.dtype = coll_dtype::INT32),
        ("op 0x08", |c| c.op = coll_op::MAX),
    ];
    for (word, edit) in edits {
        let bytes = model(2, |d| {
            let mut c = collective(d, 1);
            edit(&mut c);
            set_collective(d, 1, c);
        });
        match check(&parse(&bytes), LoadRanks::local(2)).map_err(|e| *e) {
            Err(CollectiveError::Unmatched { mismatch: Mismatch::Differs(_), .. }) => {}
            other => panic!("{word}: {other:?}"),
        }
        refused(&bytes, &["graph sg00", "no match in graph sg01", word]);
    }
}

/// The member's graph holds another group under the same id (`[1, 0]`: both graphs would be
/// rank 0 of the collective), or none.
#[test]
fn a_member_with_another_group_under_the_id_is_refused() {
    let bytes = model(2, |d| d.graphs[1].replica_groups = vec![vec![1, 0]]);
    match check(&parse(&bytes), LoadRanks::local(2)).map_err(|e| *e) {
        Err(CollectiveError::Unmatched { mismatch: Mismatch::Group(Some(g)), .. }) => assert_eq!(g, vec![1, 0]),
        other => panic!("{other:?}"),
    }
    refused(&bytes, &["graph sg00", "replica group under that id is [1, 0]"]);
}

/// A group id the graph's table lacks, and a group that leaves out the graph's own rank.
#[test]
fn a_missing_group_or_a_group_without_the_graph_is_refused() {
    let bytes = model(2, |d| {
        for i in 0..2 {
            let mut c = collective(d, i);
            c.group_id = 3;
            set_collective(d, i, c);
        }
    });
    match check(&parse(&bytes), LoadRanks::local(2)).map_err(|e| *e) {
        Err(CollectiveError::NoSuchGroup { group: 3, groups: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    refused(&bytes, &["replica group 3 does not exist"]);
    let bytes = model(3, |d| {
        for g in &mut d.graphs {
            g.replica_groups = vec![vec![0, 1]];
        }
    });
    match check(&parse(&bytes), LoadRanks::local(3)).map_err(|e| *e) {
        Err(CollectiveError::NotAMember { rank: 2, .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// What can meet still loads: the 1-, 2- and 4-graph models, a collective of one (empty
/// group), a group of a subset of the graphs whose members match, and a global load whose
/// ranks lie in other processes (checked against the communicator's rank count).
#[test]
fn collectives_that_can_meet_load() {
    for n in [1, 2, 4] {
        let bytes = model(n, |_| {});
        check(&parse(&bytes), LoadRanks::local(n)).unwrap();
    }
    let subset = model(3, |d| {
        for g in &mut d.graphs {
            g.replica_groups = vec![vec![0, 2], vec![]];
        }
        // Graph 1 is alone: its collective uses the empty group 1.
        let mut c = collective(d, 1);
        c.group_id = 1;
        set_collective(d, 1, c);
    });
    check(&parse(&subset), LoadRanks::local(3)).unwrap();
    let (rt, _sim) = runtime();
    let m = rt.load(&subset, Some(0), None).unwrap();
    assert_eq!(exec(&rt, &m), NrtStatus::Success);
    rt.unload(&m).unwrap();

    // One graph, group [0, 1]: rank 1 is the same graph in another process.
    let one = model(1, |d| d.graphs[0].replica_groups = vec![vec![0, 1]]);
    check(&parse(&one), LoadRanks { first: 1, total: 2 }).unwrap();
    let e = rt
        .load_global(&one, Some(0), Some(1), GlobalPlacement { rank_base: 2, comm_id: 7, ranks: 2 })
        .expect_err("rank 2 of 2");
    assert!(
        matches!(&e.kind, runtime::error::RtErrorKind::Collective(c) if matches!(**c, CollectiveError::NotAMember { rank: 2, .. })),
        "{e}"
    );
    rt.close().unwrap();
}
