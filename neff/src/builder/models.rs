//! libnrt's built-in test model and its variants, written as [`ModelDesc`]s: the models the
//! tests, examples and benchmarks load (`neuron-vfio neff gen`, `bench`). Behind the
//! `test-models` feature, which the crates that load them enable (as a dev-dependency, or for
//! the CLI's `neff gen` and `bench`).

use isa::slot::{
    coll_dtype, coll_op, coll_type, DmaTrigger, Events, EventsOnly, Instruction, Opcode, SlotHeader, TriggerCollective,
};

use super::{EngineDesc, GraphDesc, ModelDesc, QueueDesc, TensorDesc, VarDesc, WeightDesc};
use crate::model::{DmaBlock, DmaDesc, DmaOp, Engine, QueueRole, VarKind, WeightFormat};

/// Semaphore indices used by [`allreduce_model`].
pub mod sems {
    /// Incremented when the input DMA (q_gradient_in) completes.
    pub const IN_DONE: u8 = 10;
    /// Incremented when the output DMA (q_gradient_out) completes.
    pub const OUT_DONE: u8 = 11;
    /// Incremented when the all-reduce completes.
    pub const CC_DONE: u8 = 22;
}

/// A contiguous copy of `bytes` from var `from` to var `to` (one DMA descriptor).
pub fn copy_desc(from: &str, to: &str, bytes: u64) -> DmaDesc {
    DmaDesc {
        op: DmaOp::Copy,
        from: from.into(),
        to: to.into(),
        from_sizes: vec![bytes, 1],
        from_steps: vec![1, bytes as i64],
        to_sizes: vec![bytes, 1],
        to_steps: vec![1, bytes as i64],
    }
}

/// The all-reduce graph of libnrt's built-in test model, for one NeuronCore:
///
/// vars: 0 `input` (input, 32 × fp32), 1 `output` (output), 2 `gradient_in`, 3 `gradient_out`
/// (tmp-buf). Queues (owner POOL): `q_gradient_in` (in, semaphore 10), `q_gradient_out` (out,
/// semaphore 11); each has DMA block 0 (128-byte copy, sizes `[128,1]` steps `[1,128]`).
/// Programs:
/// - POOL 0: `PSEUDO_DMA_TRIGGER q_gradient_in block_id=0;` (input → gradient_in; the queue's
///   completion increments `$S[10]`)
/// - PE 0: `PSEUDO_TRIGGER_COLLECTIVE $S[10]>0 $S[22]+=1 all_reduce op=add dtype=fp32 group=0
///   in=%2 out=%3 n=32;`
/// - POOL 1: `PSEUDO_DMA_TRIGGER $S[22]>0 q_gradient_out block_id=0;` (gradient_out → output;
///   completion increments `$S[11]`)
/// - POOL 2: `EVENT_SEMAPHORE $S[11]>0;` (completion gate)
///
/// ACT and DVE have empty programs; SP has no engine json (empty placeholder).
pub fn allreduce_graph(name: &str, replica_group: Vec<u32>) -> GraphDesc {
    let mut g = GraphDesc::new(name);
    g.vars = vec![
        VarDesc::f32("input", VarKind::Input, 32),
        VarDesc::f32("output", VarKind::Output, 32),
        VarDesc::f32("gradient_in", VarKind::TmpBuf, 32),
        VarDesc::f32("gradient_out", VarKind::TmpBuf, 32),
    ];
    g.queues = vec![
        QueueDesc {
            name: "q_gradient_in".into(),
            role: QueueRole::In,
            owner: Engine::Pool,
            semaphore: Some(u32::from(sems::IN_DONE)),
        },
        QueueDesc {
            name: "q_gradient_out".into(),
            role: QueueRole::Out,
            owner: Engine::Pool,
            semaphore: Some(u32::from(sems::OUT_DONE)),
        },
    ];
    g.replica_groups = vec![replica_group];
    let mut pool = EngineDesc::new(Engine::Pool);
    pool.dma_blocks = vec![
        DmaBlock {
            id: 0,
            queue: "q_gradient_in".into(),
            instance_name: None,
            comment: Some("input -> gradient_in".into()),
            priority_class: None,
            descs: vec![copy_desc("input", "gradient_in", 128)],
        },
        DmaBlock {
            id: 0,
            queue: "q_gradient_out".into(),
            instance_name: None,
            comment: Some("gradient_out -> output".into()),
            priority_class: None,
            descs: vec![copy_desc("gradient_out", "output", 128)],
        },
    ];
    pool.push(&Instruction::DmaTrigger(DmaTrigger::new(Events::NONE, "q_gradient_in", 0)));
    pool.push(&Instruction::DmaTrigger(DmaTrigger::new(Events::wait_gt(sems::CC_DONE, 0), "q_gradient_out", 0)));
    pool.push(&Instruction::EventSemaphore(EventsOnly::new(
        Opcode::EventSemaphore,
        Events::wait_gt(sems::OUT_DONE, 0),
    )));
    let mut pe = EngineDesc::new(Engine::Pe);
    pe.push(&Instruction::TriggerCollective(TriggerCollective {
        header: SlotHeader::new(Opcode::PseudoTriggerCollective),
        events: Events::wait_gt(sems::IN_DONE, 0).inc_on_complete(sems::CC_DONE),
        op: coll_op::ADD,
        dtype: coll_dtype::FP32,
        group_id: 0,
        input_tensor_id: 2,
        output_tensor_id: 3,
        num_elements: 32,
        ctype: coll_type::ALL_REDUCE,
        reserved: [0; 15],
        src_offset_elems: 0,
        dst_offset_elems: 0,
    }));
    g.engines = vec![pe, EngineDesc::new(Engine::Act), pool, EngineDesc::new(Engine::Dve)];
    g
}

/// libnrt's built-in test model shape: input 32 fp32 → DMA → all-reduce → DMA → output, on
/// `num_nc` NeuronCores (one graph each, `sg00`, `sg01`, …; replica group `[]` for one NC, else
/// `[0, 1, …]`). See [`allreduce_graph`] for the programs.
pub fn allreduce_model(num_nc: usize) -> ModelDesc {
    let mut m = ModelDesc::new(if num_nc == 1 { "allreduce_1nc" } else { "allreduce_nnc" });
    m.inputs = vec![TensorDesc { name: "input".into(), dtype: "float32".into(), shape: vec![1, 32] }];
    m.outputs = vec![TensorDesc { name: "output".into(), dtype: "float32".into(), shape: vec![1, 32] }];
    let group: Vec<u32> = if num_nc == 1 { Vec::new() } else { (0..num_nc as u32).collect() };
    m.graphs = (0..num_nc.max(1)).map(|i| allreduce_graph(&format!("sg{i:02}"), group.clone())).collect();
    m
}

/// [`allreduce_model`] compiled for logical NeuronCores of `lnc` physical cores (`--lnc`,
/// the header's `vnc_size`): `num_vnc` logical cores, so `num_vnc × lnc` graphs, one per
/// physical core, all in one replica group (the all-reduce spans the physical cores; the
/// output is the input times `num_vnc × lnc`). `target` names the arch (LNC=2 exists on
/// cayman and mariana only).
pub fn allreduce_model_lnc(num_vnc: usize, lnc: u32, target: &str) -> ModelDesc {
    let graphs = num_vnc.max(1) * (lnc.max(1) as usize);
    let mut m = allreduce_model(graphs);
    if graphs > 1 {
        m.name = format!("allreduce_{}vnc_lnc{lnc}", num_vnc.max(1));
    }
    m.vnc_size = lnc.max(1);
    m.target = target.to_string();
    m
}

/// The single-NC all-reduce test model.
pub fn single_nc_allreduce() -> ModelDesc {
    allreduce_model(1)
}

/// The two-NC variant (two graphs, replica group `[0, 1]`).
pub fn two_nc_allreduce() -> ModelDesc {
    allreduce_model(2)
}

/// A model whose graph carries one `file` var of `data.len()` bytes (npy or raw) next to the
/// all-reduce program — for weight tests and the load benchmark.
pub fn weights_model(data: Vec<u8>, format: WeightFormat) -> ModelDesc {
    let mut m = allreduce_model(1);
    m.name = "weights".into();
    let n = data.len() as u64;
    if let Some(g) = m.graphs.first_mut() {
        g.vars.push(VarDesc {
            name: "weights".into(),
            kind: VarKind::File,
            size: n,
            dtype: Some("float32".into()),
            shape: vec![n / 4],
            element_size: Some(4),
            weights: Some(WeightDesc { format, data }),
            backing: None,
        });
    }
    m
}
