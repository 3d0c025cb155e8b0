//! The loader's confinement rule: each hostile class, built with the NEFF writer, is refused
//! at load with NRT_INVALID / NRT_RESOURCE and a reason that names what was refused; and a
//! hostile model next to a victim on another NC leaves the victim's bytes and runs intact.

use std::sync::Arc;

use csr_maps::consts::addr8;
use csr_maps::SUNDA;
use isa::device_ops::WriteOp;
use isa::slot::{Dma2d, Dma2dLeg, Events, Instruction, Opcode, SlotHeader};
use neff::builder::{self, ModelDesc, VarDesc};
use neff::{EngineKind, VarKind};
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

fn runtime() -> (SimDevice, Runtime) {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 26)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::default(), opts).unwrap();
    (sim, rt)
}

/// The device address of a BAR0 register path on sunda.
fn reg_addr(path: &str) -> u64 {
    let r = SUNDA.resolve(path).unwrap();
    SUNDA.bar0_to_dev(r.offset).unwrap()
}

fn var_addr(id: u32, off: u64) -> u64 {
    addr8::VAR_MARKER | (u64::from(id) << addr8::VAR_ID_SHIFT) | off
}

fn leg(start_addr: u64, step: [i32; 2], n: [u16; 2], es: u16) -> Dma2dLeg {
    Dma2dLeg { start_addr, step_elem: step, num_elem: n, elem_size: es }
}

fn memcpy(src: Dma2dLeg, dst: Dma2dLeg) -> Instruction {
    let mut d = Dma2d::decode(&[0u8; 64]);
    d.header = SlotHeader::new(Opcode::DmaMemcpy);
    d.events = Events::NONE;
    d.src = src;
    d.dst = dst;
    Instruction::DmaMemcpy(d)
}

/// The all-reduce model with `i` appended to its ACT program.
fn with_act(i: Instruction) -> ModelDesc {
    let mut m = builder::single_nc_allreduce();
    let g = &mut m.graphs[0];
    match g.engines.iter_mut().find(|e| e.kind == EngineKind::Act) {
        Some(e) => e.push(&i),
        None => {
            let mut e = builder::EngineDesc::new(EngineKind::Act);
            e.push(&i);
            g.engines.push(e);
        }
    }
    m
}

fn refused(rt: &Runtime, m: &ModelDesc, status: NrtStatus, reason: &str) {
    let bytes = m.build().unwrap();
    let Err(e) = rt.load(&bytes, Some(0), None) else { panic!("hostile model loaded") };
    assert_eq!(e.status, status, "{e}");
    assert!(e.to_string().contains(reason), "reason `{reason}` not in `{e}`");
}

#[test]
fn each_hostile_class_is_refused_at_load_with_a_named_reason() {
    let (_sim, rt) = runtime();
    let id = |m: &ModelDesc, n: &str| m.graphs[0].var_id(n).unwrap();
    let base = builder::single_nc_allreduce();
    let (inp, tmp) = (id(&base, "input"), id(&base, "gradient_in"));

    // DMAMEMCPY with a raw device address (another model's memory, or the carve-out at 0).
    for raw in [0u64, 0x10_0000, reg_addr("misc_ram.reset_request")] {
        let m = with_act(memcpy(leg(raw, [1, 0], [128, 1], 1), leg(var_addr(tmp, 0), [1, 0], [128, 1], 1)));
        refused(&rt, &m, NrtStatus::Invalid, "raw device address");
    }
    // A DIRECT2D pattern with a negative step reaching before its var.
    let m = with_act(memcpy(leg(var_addr(inp, 0), [-1, 0], [16, 1], 4), leg(var_addr(tmp, 0), [1, 0], [16, 1], 4)));
    refused(&rt, &m, NrtStatus::Invalid, "bytes before var");
    // ... and one running past the end with a large positive outer step.
    let m = with_act(memcpy(leg(var_addr(inp, 0), [1, 1000], [4, 2], 4), leg(var_addr(tmp, 0), [1, 0], [8, 1], 4)));
    refused(&rt, &m, NrtStatus::Invalid, "exceeds var input");
    // A negative step that stays inside the var is accepted (the exact span, all signs).
    let ok = with_act(memcpy(leg(var_addr(inp, 124), [-1, 0], [32, 1], 4), leg(var_addr(tmp, 0), [1, 0], [32, 1], 4)));
    let model = rt.load(&ok.build().unwrap(), Some(0), None).unwrap();
    rt.unload(&model).unwrap();

    // A var of u64::MAX bytes.
    let mut m = builder::single_nc_allreduce();
    m.graphs[0].vars.push(VarDesc::new("huge", VarKind::TmpBuf, u64::MAX));
    refused(&rt, &m, NrtStatus::Resource, "var huge");
    // Two state-buffer vars whose end wraps past 2^64.
    let mut m = builder::single_nc_allreduce();
    m.graphs[0].vars.push(VarDesc::new("sb0", VarKind::StateBuffer, 1 << 20));
    m.graphs[0].vars.push(VarDesc::new("sb1", VarKind::StateBuffer, u64::MAX - (1 << 19)));
    refused(&rt, &m, NrtStatus::Resource, "sb1");

    // WRITE to another NC's semaphore, to the reset request, to a DMA base register, to this
    // NC's reserved kickoff semaphore.
    let mut tried = 0;
    for path in
        ["tpb_sem[1].sem_set[3]", "misc_ram.reset_request", "udma[0].m2s.q[0].ring_base_lo", "tpb_sem[0].sem_inc[255]"]
    {
        let Ok(r) = SUNDA.resolve(path) else { continue };
        let Some(a) = SUNDA.bar0_to_dev(r.offset) else { continue };
        let m = with_act(Instruction::decode(&WriteOp::new(Events::NONE, a, 1).encode()));
        refused(&rt, &m, NrtStatus::Invalid, "outside the registers this NC's model may write");
        tried += 1;
    }
    assert!(tried >= 3, "only {tried} guarded registers resolved");
    // ... while its own semaphore is allowed.
    let own = with_act(Instruction::decode(&WriteOp::new(Events::NONE, reg_addr("tpb_sem[0].sem_set[7]"), 0).encode()));
    let model = rt.load(&own.build().unwrap(), Some(0), None).unwrap();
    rt.unload(&model).unwrap();

    // A collective naming a group that does not exist, and an unknown collective type.
    for (off, byte, reason) in
        [(0x20usize, 7u8, "replica group 7 does not exist"), (0x0E, 0x7F, "unknown collective type")]
    {
        let mut m = builder::single_nc_allreduce();
        let pe = m.graphs[0].engines.iter_mut().find(|e| e.kind == EngineKind::Pe).unwrap();
        let at = (0..pe.code.len() / 64)
            .find(|k| {
                matches!(
                    Instruction::decode(pe.code[k * 64..k * 64 + 64].try_into().unwrap()),
                    Instruction::TriggerCollective(_)
                )
            })
            .unwrap()
            * 64;
        let mut slot: [u8; 64] = pe.code[at..at + 64].try_into().unwrap();
        if let Instruction::TriggerCollective(mut c) = Instruction::decode(&slot) {
            if off == 0x20 {
                c.group_id = byte.into();
            } else {
                c.ctype = byte;
            }
            slot = Instruction::TriggerCollective(c).encode();
        }
        pe.code[at..at + 64].copy_from_slice(&slot);
        refused(&rt, &m, NrtStatus::Invalid, reason);
    }

    // An output bound to no var.
    let mut m = builder::single_nc_allreduce();
    m.outputs[0].name = "nowhere".into();
    refused(&rt, &m, NrtStatus::Invalid, "output nowhere is bound to no var");
    rt.close().unwrap();
}

#[test]
fn huge_tensors_are_refused_not_wrapped() {
    let (sim, rt) = runtime();
    for on_device in [true, false] {
        for size in [u64::MAX, u64::MAX / 2 + 2, 1 << 62] {
            let e = rt.alloc_tensor("t", size, on_device, 0).err().expect("huge tensor allocated");
            assert!(matches!(e.status, NrtStatus::Resource | NrtStatus::FailHostMemAlloc), "{e}");
        }
    }
    rt.close().unwrap();
    assert_eq!(sim.stats().device_bytes, 0);
}

#[test]
fn tensors_start_zeroed_after_an_earlier_owner() {
    let (_sim, rt) = runtime();
    for on_device in [true, false] {
        let t = rt.alloc_tensor("a", 4096, on_device, 0).unwrap();
        t.write(0, &[0xAB; 4096]).unwrap();
        drop(t);
        let t = rt.alloc_tensor("b", 4096, on_device, 0).unwrap();
        let mut out = vec![0xFFu8; 4096];
        t.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0), "stale bytes in a new tensor (device {on_device})");
    }
    rt.close().unwrap();
}

#[test]
fn a_hostile_model_next_to_a_victim_leaves_it_intact() {
    let (_sim, rt) = runtime();
    let victim = rt.load(&builder::single_nc_allreduce().build().unwrap(), Some(0), None).unwrap();
    let run = |rt: &Runtime, m| {
        let ti = rt.alloc_tensor("input", 128, true, 0).unwrap();
        let to = rt.alloc_tensor("output", 128, true, 0).unwrap();
        let data: Vec<u8> = (0..32).flat_map(|k| (k as f32).to_le_bytes()).collect();
        ti.write(0, &data).unwrap();
        let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
        i.add("input", ti.clone());
        o.add("output", to.clone());
        rt.execute(m, &i, &o).unwrap();
        let mut out = vec![0u8; 128];
        to.read(0, &mut out).unwrap();
        (data, out)
    };
    let (want, first) = run(&rt, &victim);
    // The hostile model on NC 1 tries the victim's semaphores and its memory.
    let base = builder::single_nc_allreduce();
    let tmp = base.graphs[0].var_id("gradient_in").unwrap();
    for hostile in [
        with_act(Instruction::decode(&WriteOp::new(Events::NONE, reg_addr("tpb_sem[0].sem_set[1]"), 9).encode())),
        with_act(memcpy(leg(var_addr(tmp, 0), [1, 0], [128, 1], 1), leg(0x100_0000, [1, 0], [128, 1], 1))),
    ] {
        assert!(rt.load(&hostile.build().unwrap(), Some(1), None).is_err());
    }
    let (_, second) = run(&rt, &victim);
    assert_eq!(first, second);
    assert_eq!(first.len(), want.len());
    rt.unload(&victim).unwrap();
    rt.close().unwrap();
}
