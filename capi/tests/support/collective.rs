//! A collective NEFF for the cross-process tests (global_comm.rs, launchers.rs): one graph
//! per rank, input `in{i}` → DMA → the collective → DMA → `output`, and each rank's input and
//! expected output from the host reference (`fabric::reduce`).

use fabric::reduce::{pattern, reference_all_gather, reference_all_reduce, reference_reduce_scatter};
use fabric::{DType, ReduceOp};
use isa::device_ops::{alu, ctype, dtype};
use isa::slot::{Events, Instruction, Opcode, SlotHeader, TriggerCollective};
use neff::builder::{self, sems, EngineDesc, GraphDesc, TensorDesc, VarDesc};
use neff::model::Engine;
use neff::model::VarKind;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

/// One collective of the matrix: a NEFF of `g` graphs per process, replica group `group`
/// (global ranks), `elems` input elements per rank.
#[derive(Debug, Clone)]
pub struct Case {
    pub kind: Kind,
    pub dt: DType,
    pub op: ReduceOp,
    pub elems: usize,
    pub group: Vec<u32>,
}

impl Case {
    pub fn label(&self) -> String {
        format!("{:?} {} {} x{} group {:?}", self.kind, self.op.name(), self.dt.name(), self.elems, self.group)
    }

    pub fn in_bytes(&self) -> usize {
        self.elems * self.dt.size()
    }

    /// Bytes of the output tensor (reduce-scatter: the largest segment).
    pub fn out_bytes(&self) -> usize {
        let n = self.group.len();
        match self.kind {
            Kind::AllReduce => self.in_bytes(),
            Kind::AllGather => self.in_bytes() * n,
            Kind::ReduceScatter => self.elems.div_ceil(n) * self.dt.size(),
        }
    }
}

/// Graph `i`: input `in{i}` → DMA → the collective → DMA → `output` (libnrt's test model's
/// program shape, [`builder::allreduce_graph`], with the case's collective and sizes).
pub fn graph(c: &Case, i: usize) -> GraphDesc {
    let (ib, ob) = (c.in_bytes() as u64, c.out_bytes() as u64);
    // The collective's destination must hold the input's size too (the staging check).
    let gb = ib.max(ob);
    let input = format!("in{i}");
    let mut gr = builder::allreduce_graph(&format!("sg{i:02}"), c.group.clone());
    gr.vars = vec![
        VarDesc::new(&input, VarKind::Input, ib),
        VarDesc::new("output", VarKind::Output, ob),
        VarDesc::new("gradient_in", VarKind::TmpBuf, ib),
        VarDesc::new("gradient_out", VarKind::TmpBuf, gb),
    ];
    for e in gr.engines.iter_mut() {
        for b in e.dma_blocks.iter_mut() {
            for d in b.descs.iter_mut() {
                *d = if d.from == "input" {
                    neff::builder::copy_desc(&input, "gradient_in", ib)
                } else {
                    neff::builder::copy_desc("gradient_out", "output", ob)
                };
            }
        }
    }
    let mut pe = EngineDesc::new(Engine::Pe);
    pe.push(&Instruction::TriggerCollective(TriggerCollective {
        header: SlotHeader::new(Opcode::PseudoTriggerCollective),
        events: Events::wait_gt(sems::IN_DONE, 0).inc_on_complete(sems::CC_DONE),
        op: match c.op {
            ReduceOp::Add => alu::ADD,
            ReduceOp::Max => alu::MAX,
            ReduceOp::Min => alu::MIN,
        },
        dtype: dtype::code(c.dt),
        group_id: 0,
        input_tensor_id: 2,
        output_tensor_id: 3,
        num_elements: c.elems as u64,
        ctype: match c.kind {
            Kind::AllReduce => ctype::ALL_REDUCE,
            Kind::AllGather => ctype::ALL_GATHER,
            Kind::ReduceScatter => ctype::REDUCE_SCATTER,
        },
        reserved: [0; 15],
        src_offset_elems: 0,
        dst_offset_elems: 0,
    }));
    for e in gr.engines.iter_mut() {
        if e.kind == Engine::Pe {
            *e = pe.clone();
        }
    }
    gr
}

pub fn case_neff(c: &Case, g: usize) -> Result<Vec<u8>, String> {
    let mut m = builder::allreduce_model(1);
    m.name = "collective".into();
    m.inputs = (0..g)
        .map(|i| TensorDesc { name: format!("in{i}"), dtype: "uint8".into(), shape: vec![c.in_bytes() as u64] })
        .collect();
    m.outputs = vec![TensorDesc { name: "output".into(), dtype: "uint8".into(), shape: vec![c.out_bytes() as u64] }];
    m.graphs = (0..g).map(|i| graph(c, i)).collect();
    m.build().map_err(|e| e.to_string())
}

/// Input of global rank `r` in case `k`.
pub fn case_input(c: &Case, k: usize, r: u32) -> Vec<u8> {
    pattern(r as usize, c.in_bytes(), c.dt, 0x7700 + k as u64)
}

/// What graph 0 of process `proc` (global rank `proc·g`) must output: the host reference over
/// the group's inputs in group order.
pub fn case_expect(c: &Case, k: usize, proc: usize, g: usize) -> Result<Vec<u8>, String> {
    let ins: Vec<Vec<u8>> = c.group.iter().map(|&r| case_input(c, k, r)).collect();
    let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
    let me = c.group.iter().position(|&r| r as usize == proc * g).ok_or("graph 0 is not in the group")?;
    match c.kind {
        Kind::AllReduce => reference_all_reduce(&refs, c.dt, c.op).map_err(|e| e.to_string()),
        Kind::AllGather => Ok(reference_all_gather(&refs)),
        Kind::ReduceScatter => reference_reduce_scatter(&refs, c.dt, c.op, me).map_err(|e| e.to_string()),
    }
}
