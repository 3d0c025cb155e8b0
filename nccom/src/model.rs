//! The collectives NEFF a worker loads for one (operation, data type, size): built at run time
//! with the NEFF builder's public API.
//!
//! One graph per physical NeuronCore of the worker's logical core (the header's `vnc_size`).
//! Graph 0 runs the collective: `input` → DMA → `coll_in` → collective → `coll_out` → DMA →
//! `output` (the shape of libnrt's collectives test model, which the builder's all-reduce
//! model also has); the other graphs of a logical core of two carry the same tensors and
//! replica groups and no program (the collective of a logical core runs on its first physical
//! core). Loaded as global ranks (`runtime::GlobalPlacement`): worker `w` is rank `w × lnc`,
//! and the one replica group holds the first physical core of every worker. A permute's
//! source-target pairs are the graph's `src_target_pairs` in the same global ranks; an
//! all-to-allv's metadata is a second input, `meta`, copied to `coll_meta` with the data and
//! named by the collective (`isa::device_ops::AllToAllV`).

use isa::slot::{Events, EventsOnly, Instruction, Opcode, SlotHeader, TriggerCollective};
use neff::builder::{copy_desc, EngineDesc, GraphDesc, ModelDesc, QueueDesc, TensorDesc, VarDesc};
use neff::model::{DmaBlock, Engine, QueueRole, VarKind};

use crate::ops::{Op, Wire};

/// Semaphores of the program.
const IN_DONE: u8 = 10;
const OUT_DONE: u8 = 11;
const CC_DONE: u8 = 22;

/// What one worker's NEFF does.
#[derive(Debug, Clone, Copy)]
pub struct CollModel<'a> {
    pub op: Op,
    pub wire: Wire,
    /// Bytes each rank contributes.
    pub in_bytes: u64,
    /// Bytes each rank receives (reduce-scatter: its segment at the start of a buffer as large
    /// as its input).
    pub out_bytes: u64,
    pub workers: usize,
    /// Physical cores per logical core.
    pub lnc: u32,
    pub target: &'a str,
    /// Permute: the (source, target) worker ranks.
    pub pairs: &'a [(usize, usize)],
}

/// Why a model cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{0} bytes is not whole elements of the collective's type")]
    Elements(u64),
    #[error("{0} workers of {1} physical cores are more ranks than a replica group holds")]
    Group(usize, u32),
    #[error(transparent)]
    Build(#[from] neff::builder::BuildError),
}

fn bytes_var(name: &str, kind: VarKind, bytes: u64) -> VarDesc {
    VarDesc {
        dtype: Some("uint8".into()),
        shape: vec![1, bytes],
        element_size: Some(1),
        ..VarDesc::new(name, kind, bytes)
    }
}

fn queue(name: &str, role: QueueRole, sem: u8) -> QueueDesc {
    QueueDesc { name: name.into(), role, owner: Engine::Pool, semaphore: Some(u32::from(sem)) }
}

fn block(queue: &str, from: &str, to: &str, bytes: u64) -> DmaBlock {
    DmaBlock {
        id: 0,
        queue: queue.into(),
        instance_name: None,
        comment: Some(format!("{from} -> {to}")),
        priority_class: None,
        descs: vec![copy_desc(from, to, bytes)],
    }
}

impl CollModel<'_> {
    /// The replica group: the first physical core of every worker.
    fn group(&self) -> Vec<u32> {
        (0..self.workers as u32).map(|w| w * self.lnc.max(1)).collect()
    }

    fn graph(&self, index: usize) -> Result<GraphDesc, ModelError> {
        let es = self.wire.dtype.size() as u64;
        if !self.in_bytes.is_multiple_of(es) || !self.out_bytes.is_multiple_of(es) {
            return Err(ModelError::Elements(self.in_bytes));
        }
        let staged = self.in_bytes.max(self.out_bytes);
        let mut g = GraphDesc::new(&format!("sg{index:02}"));
        g.vars = vec![
            bytes_var("input", VarKind::Input, self.in_bytes),
            bytes_var("output", VarKind::Output, self.out_bytes),
            bytes_var("coll_in", VarKind::TmpBuf, self.in_bytes),
            bytes_var("coll_out", VarKind::TmpBuf, staged),
        ];
        let meta = self.meta_bytes();
        if meta > 0 {
            // All-to-allv's metadata: an input, copied in beside the data (vars 4 and 5).
            g.vars.push(bytes_var("meta", VarKind::Input, meta));
            g.vars.push(bytes_var("coll_meta", VarKind::TmpBuf, meta));
        }
        g.queues = vec![queue("q_in", QueueRole::In, IN_DONE), queue("q_out", QueueRole::Out, OUT_DONE)];
        g.replica_groups = vec![self.group()];
        if self.op == Op::Permute {
            // Global ranks, as the replica group names them.
            let l = i64::from(self.lnc.max(1));
            g.src_target_pairs = self.pairs.iter().map(|&(s, t)| vec![s as i64 * l, t as i64 * l]).collect();
        }
        let ctype = self.op.ctype();
        let mut pool = EngineDesc::new(Engine::Pool);
        let mut pe = EngineDesc::new(Engine::Pe);
        if index == 0 {
            let mut inb = block("q_in", "input", "coll_in", self.in_bytes);
            if meta > 0 {
                inb.descs.push(copy_desc("meta", "coll_meta", meta));
            }
            pool.dma_blocks = vec![inb, block("q_out", "coll_out", "output", self.out_bytes)];
            pool.push(&Instruction::DmaTrigger(isa::slot::DmaTrigger::new(Events::NONE, "q_in", 0)));
            pool.push(&Instruction::DmaTrigger(isa::slot::DmaTrigger::new(Events::wait_gt(CC_DONE, 0), "q_out", 0)));
            pool.push(&Instruction::EventSemaphore(EventsOnly::new(
                Opcode::EventSemaphore,
                Events::wait_gt(OUT_DONE, 0),
            )));
            let mut t = TriggerCollective {
                header: SlotHeader::new(Opcode::PseudoTriggerCollective),
                events: Events::wait_gt(IN_DONE, 0).inc_on_complete(CC_DONE),
                op: isa::device_ops::alu::ADD,
                dtype: self.wire.code,
                group_id: 0,
                input_tensor_id: 2,
                output_tensor_id: 3,
                num_elements: self.in_bytes / es,
                ctype,
                reserved: [0; 15],
                src_offset_elems: 0,
                dst_offset_elems: 0,
            };
            if meta > 0 {
                let out_elements =
                    u32::try_from(self.out_bytes / es).map_err(|_| ModelError::Elements(self.out_bytes))?;
                isa::device_ops::AllToAllV { meta_tensor_id: 5, out_elements }.set(&mut t);
            }
            pe.push(&Instruction::TriggerCollective(t));
        }
        g.engines = vec![pe, EngineDesc::new(Engine::Act), pool, EngineDesc::new(Engine::Dve)];
        Ok(g)
    }

    /// All-to-allv's metadata bytes (0 for the other operations).
    fn meta_bytes(&self) -> u64 {
        if self.op == Op::AllToAllV {
            isa::device_ops::AllToAllV::meta_bytes(self.workers) as u64
        } else {
            0
        }
    }

    /// The NEFF's bytes.
    pub fn build(&self) -> Result<Vec<u8>, ModelError> {
        let lnc = self.lnc.max(1);
        if self.workers.saturating_mul(lnc as usize) > usize::from(u8::MAX) {
            return Err(ModelError::Group(self.workers, lnc));
        }
        let mut m = ModelDesc::new(&format!("nccom_{}_{}", self.op.name(), self.in_bytes));
        m.inputs = vec![TensorDesc { name: "input".into(), dtype: "uint8".into(), shape: vec![1, self.in_bytes] }];
        if self.meta_bytes() > 0 {
            m.inputs.push(TensorDesc { name: "meta".into(), dtype: "uint8".into(), shape: vec![1, self.meta_bytes()] });
        }
        m.outputs = vec![TensorDesc { name: "output".into(), dtype: "uint8".into(), shape: vec![1, self.out_bytes] }];
        m.graphs = (0..lnc as usize).map(|i| self.graph(i)).collect::<Result<_, _>>()?;
        m.vnc_size = lnc;
        m.target = self.target.to_string();
        Ok(m.build()?)
    }
}
