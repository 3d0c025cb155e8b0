//! The loader's confinement rule: each hostile class, built with the NEFF writer, is refused
//! at load with NRT_INVALID / NRT_RESOURCE and a reason that names what was refused; and a
//! hostile model next to a victim on another NC leaves the victim's bytes and runs intact.
//! The device's own check: with the loader's checks off (a test-only switch), each class that
//! reaches the device is stopped by the NC's ownership region table — the execution returns
//! NRT_EXEC_OOB (1006) and the victim's tensors and next run are intact.

use std::sync::Arc;

use csr_maps::consts::addr8;
use csr_maps::formats::notify::custom;
use csr_maps::SUNDA;
use isa::device_ops::{NotifyOp, WriteOp};
use isa::slot::{Dma2d, Dma2dLeg, Events, Instruction, Opcode, SlotHeader};
use neff::builder::{self, ModelDesc, VarDesc};
use neff::{Engine, VarKind};
use platform::Platform;
use runtime::collectives::CollectiveError;
use runtime::{NrtStatus, RtErrorKind, Runtime, RuntimeConfig, StageErrorKind as K, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

fn runtime() -> (SimDevice, Runtime) {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 26)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
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
    match g.engines.iter_mut().find(|e| e.kind == Engine::Act) {
        Some(e) => e.push(&i),
        None => {
            let mut e = builder::EngineDesc::new(Engine::Act);
            e.push(&i);
            g.engines.push(e);
        }
    }
    m
}

/// The load of `m` is refused with `status` and a staging error of the kind `reason` accepts
/// (the variant and its fields name what was refused).
fn refused(rt: &Runtime, m: &ModelDesc, status: NrtStatus, reason: impl Fn(&K) -> bool) {
    refused_with(rt, m, status, |k| match k {
        RtErrorKind::Stage { source, .. } | RtErrorKind::Bindings(source) => reason(&source.kind),
        _ => false,
    });
}

/// A check of a load refusal's kind.
type Refusal = dyn Fn(&RtErrorKind) -> bool;

/// The load of `m` is refused with `status` and an error of the kind `reason` accepts.
fn refused_with(rt: &Runtime, m: &ModelDesc, status: NrtStatus, reason: impl Fn(&RtErrorKind) -> bool) {
    let bytes = m.build().unwrap();
    let Err(e) = rt.load(&bytes, Some(0), None) else { panic!("hostile model loaded") };
    assert_eq!(e.status, status, "{e}");
    assert!(reason(&e.kind), "unexpected refusal {:?} ({e})", e.kind);
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
        refused(&rt, &m, NrtStatus::Invalid, |k| matches!(k, K::RawAddress { addr, .. } if *addr == raw));
    }
    // A DIRECT2D pattern with a negative step reaching before its var.
    let m = with_act(memcpy(leg(var_addr(inp, 0), [-1, 0], [16, 1], 4), leg(var_addr(tmp, 0), [1, 0], [16, 1], 4)));
    refused(
        &rt,
        &m,
        NrtStatus::Invalid,
        |k| matches!(k, K::BeforeVar { bytes: 60, var_id, .. } if *var_id == u64::from(inp)),
    );
    // ... and one running past the end with a large positive outer step.
    let m = with_act(memcpy(leg(var_addr(inp, 0), [1, 1000], [4, 2], 4), leg(var_addr(tmp, 0), [1, 0], [8, 1], 4)));
    refused(&rt, &m, NrtStatus::Invalid, |k| matches!(k, K::OutsideVar { var, .. } if var == "input"));
    // A negative step that stays inside the var is accepted (the exact span, all signs).
    let ok = with_act(memcpy(leg(var_addr(inp, 124), [-1, 0], [32, 1], 4), leg(var_addr(tmp, 0), [1, 0], [32, 1], 4)));
    let model = rt.load(&ok.build().unwrap(), Some(0), None).unwrap();
    rt.unload(&model).unwrap();

    // A var of u64::MAX bytes.
    let mut m = builder::single_nc_allreduce();
    m.graphs[0].vars.push(VarDesc::new("huge", VarKind::TmpBuf, u64::MAX));
    refused(&rt, &m, NrtStatus::Resource, |k| matches!(k, K::VarAlloc { var, .. } if var == "huge"));
    // Two state-buffer vars whose end wraps past 2^64.
    let mut m = builder::single_nc_allreduce();
    m.graphs[0].vars.push(VarDesc::new("sb0", VarKind::StateBuffer, 1 << 20));
    m.graphs[0].vars.push(VarDesc::new("sb1", VarKind::StateBuffer, u64::MAX - (1 << 19)));
    refused(&rt, &m, NrtStatus::Resource, |k| matches!(k, K::StateBufferFull { var, .. } if var == "sb1"));

    // WRITE to another NC's semaphore, to the reset request, to a DMA base register, to this
    // NC's reserved kickoff semaphore.
    let mut tried = 0;
    for path in
        ["tpb_sem[1].sem_set[3]", "misc_ram.reset_request", "udma[0].m2s.q[0].ring_base_lo", "tpb_sem[0].sem_inc[255]"]
    {
        let Ok(r) = SUNDA.resolve(path) else { continue };
        let Some(a) = SUNDA.bar0_to_dev(r.offset) else { continue };
        let m = with_act(Instruction::decode(&WriteOp::new(Events::NONE, a, 1).encode()));
        refused(&rt, &m, NrtStatus::Invalid, |k| matches!(k, K::ForbiddenWrite { addr, .. } if *addr == a));
        tried += 1;
    }
    assert!(tried >= 3, "only {tried} guarded registers resolved");
    // ... while its own semaphore is allowed.
    let own = with_act(Instruction::decode(&WriteOp::new(Events::NONE, reg_addr("tpb_sem[0].sem_set[7]"), 0).encode()));
    let model = rt.load(&own.build().unwrap(), Some(0), None).unwrap();
    rt.unload(&model).unwrap();

    // A collective naming a group that does not exist, and an unknown collective type.
    // (The group is refused by the load's collective check, before staging.)
    let no_group = |k: &RtErrorKind| matches!(k, RtErrorKind::Collective(c) if matches!(**c, CollectiveError::NoSuchGroup { group: 7, .. }));
    let bad_type = |k: &RtErrorKind| matches!(k, RtErrorKind::Stage { source, .. } if matches!(source.kind, K::CollectiveType { ctype: 0x7F, .. }));
    let cases: [(usize, u8, &Refusal); 2] = [(0x20, 7, &no_group), (0x0E, 0x7F, &bad_type)];
    for (off, byte, reason) in cases {
        let mut m = builder::single_nc_allreduce();
        let pe = m.graphs[0].engines.iter_mut().find(|e| e.kind == Engine::Pe).unwrap();
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
        refused_with(&rt, &m, NrtStatus::Invalid, reason);
    }

    // NOTIFY posting a custom notification a program may not post, with either opcode: an
    // out-of-bounds report (the device's own finding: the execution would end 1006 with
    // nothing out of bounds) or a sub-id libnrt does not know (it would end NRT_HW_ERROR).
    for op in [Opcode::Notify, Opcode::SeqNotify] {
        for sub in [0u16, 1, 2, 3, 4, 5, 9, 10, 11, 0x100, u16::MAX] {
            let mut n = NotifyOp::new(Events::NONE, sub, 0);
            n.header = SlotHeader::new(op);
            let m = with_act(Instruction::decode(&n.encode()));
            refused(
                &rt,
                &m,
                NrtStatus::Invalid,
                |k| matches!(k, K::ForgedNotification { sub_id, opcode, .. } if *sub_id == sub && *opcode == op.code()),
            );
        }
    }
    // ... while debug, tensor completion and debug-tensor read notifications load and run.
    for sub in [custom::DEBUG, custom::TENSOR_COMPLETION, custom::DEBUG_TENSOR_READ] {
        let m = with_act(Instruction::decode(&NotifyOp::new(Events::NONE, sub, 1).encode()));
        let model = rt.load(&m.build().unwrap(), Some(0), None).unwrap_or_else(|e| panic!("sub-id {sub}: {e}"));
        let (st, input, out) = exec_on(&rt, &model, 0, 4);
        assert_eq!((st, &out), (NrtStatus::Success, &input), "sub-id {sub}");
        rt.unload(&model).unwrap();
    }

    // A virtual var backed by itself (its address would be device address 0, the carve-out).
    let mut m = builder::single_nc_allreduce();
    let mut v = VarDesc::new("self", VarKind::Virtual, 128);
    v.backing = Some(("self".into(), 0));
    m.graphs[0].vars.push(v);
    refused(&rt, &m, NrtStatus::Invalid, |k| matches!(k, K::VirtualBacking { var } if var == "self"));

    // An output bound to no var.
    let mut m = builder::single_nc_allreduce();
    m.outputs[0].name = "nowhere".into();
    refused(
        &rt,
        &m,
        NrtStatus::Invalid,
        |k| matches!(k, K::Unbound { role: runtime::error::IoRole::Output, name } if name == "nowhere"),
    );
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

/// A runtime whose loader skips its confinement checks (tests only), so that the NC's
/// ownership region table is what stops a hostile model.
fn unchecked_runtime() -> (SimDevice, Runtime) {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 26)).unwrap();
    let rt = Runtime::new();
    let cfg = RuntimeConfig {
        unchecked_loader_for_tests: true,
        exec_timeout: std::time::Duration::from_secs(5),
        ..RuntimeConfig::physical()
    };
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], cfg, opts).unwrap();
    (sim, rt)
}

/// One execution of the all-reduce model on NC `nc`: (status, input bytes, output bytes).
fn exec_on(rt: &Runtime, m: &runtime::ModelHandle, nc: usize, seed: u32) -> (NrtStatus, Vec<u8>, Vec<u8>) {
    let ti = rt.alloc_tensor("input", 128, true, nc).unwrap();
    let to = rt.alloc_tensor("output", 128, true, nc).unwrap();
    let data: Vec<u8> = (0..32u32).flat_map(|k| ((k + seed) as f32).to_le_bytes()).collect();
    ti.write(0, &data).unwrap();
    let (mut i, mut o) = (TensorSet::new(), TensorSet::new());
    i.add("input", ti);
    o.add("output", to.clone());
    let status = match rt.execute(m, &i, &o) {
        Ok((s, _)) => s,
        Err(e) => e.status,
    };
    (status, data, to.to_vec().unwrap())
}

#[test]
fn with_the_loader_check_off_the_device_stops_each_hostile_class_with_1006() {
    let (sim, rt) = unchecked_runtime();
    // The victim on NC 1: a model, a device tensor with a pattern, its first run.
    let victim = rt.load(&builder::single_nc_allreduce().build().unwrap(), Some(1), None).unwrap();
    let vt = rt.alloc_tensor("victim", 4096, true, 1).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|k| (k * 7 + 3) as u8).collect();
    vt.write(0, &pattern).unwrap();
    let (st, input, out) = exec_on(&rt, &victim, 1, 0);
    assert_eq!((st, &out), (NrtStatus::Success, &input));

    let base = builder::single_nc_allreduce();
    let id = |m: &ModelDesc, n: &str| m.graphs[0].var_id(n).unwrap();
    let (inp, tmp) = (id(&base, "input"), id(&base, "gradient_in"));
    assert!(
        base.graphs[0].vars.iter().all(|v| v.kind != VarKind::StateBuffer),
        "the wrapping class below assumes the base model has no state-buffer var"
    );
    let with_vars = |extra: Vec<VarDesc>, i: &dyn Fn(&ModelDesc) -> Vec<Instruction>| {
        let mut m = builder::single_nc_allreduce();
        m.graphs[0].vars.extend(extra);
        let ins = i(&m);
        let g = &mut m.graphs[0];
        let act = g.engines.iter_mut().find(|e| e.kind == Engine::Act).unwrap();
        for x in &ins {
            act.push(x);
        }
        m
    };
    let copy = |src: u64, dst: u64, n: u16| memcpy(leg(src, [1, 0], [n, 1], 1), leg(dst, [1, 0], [n, 1], 1));
    let write = |path: &str, v: u32| Instruction::decode(&WriteOp::new(Events::NONE, reg_addr(path), v).encode());
    // Two state-buffer vars whose end wraps past 2^64: the second starts 1 MiB into NC 0's
    // state buffer and claims nearly 2^64 bytes; an offset into it names NC 1's semaphore.
    let sb1 = SUNDA.region("sbuf").unwrap().dev_base(0).unwrap() + (1 << 20);
    let victim_sem = reg_addr("tpb_sem[1].sem_set[1]");
    let wrapping = vec![
        VarDesc::new("sb0", VarKind::StateBuffer, 1 << 20),
        VarDesc::new("sb1", VarKind::StateBuffer, u64::MAX - (1 << 19)),
    ];
    let mut selfv = VarDesc::new("self", VarKind::Virtual, 128);
    selfv.backing = Some(("self".into(), 0));

    let classes: Vec<(&str, ModelDesc)> = vec![
        (
            "DMAMEMCPY reading a raw device address (the victim's tensor)",
            with_act(copy(vt.dev_addr(), var_addr(tmp, 0), 128)),
        ),
        (
            "DMAMEMCPY writing a raw device address (the victim's tensor)",
            with_act(copy(var_addr(inp, 0), vt.dev_addr(), 128)),
        ),
        ("DMAMEMCPY reading the carve-out at device address 0", with_act(copy(0, var_addr(tmp, 0), 128))),
        (
            "state-buffer vars whose end wraps, writing NC 1's semaphore",
            with_vars(wrapping, &|m| {
                let off = victim_sem - sb1;
                vec![memcpy(
                    leg(var_addr(inp, 0), [1, 0], [1, 1], 4),
                    leg(var_addr(id(m, "sb1"), off), [1, 0], [1, 1], 4),
                )]
            }),
        ),
        (
            "DIRECT2D with a negative step reaching 4 MiB before its var",
            with_act(memcpy(
                leg(var_addr(inp, 0), [-(1 << 20), 0], [2, 1], 4),
                leg(var_addr(tmp, 0), [1, 0], [2, 1], 4),
            )),
        ),
        (
            "a virtual var backed by itself (device address 0), read and written",
            with_vars(vec![selfv], &|m| {
                let v = id(m, "self");
                vec![copy(var_addr(v, 0), var_addr(tmp, 0), 128), copy(var_addr(inp, 0), var_addr(v, 0), 128)]
            }),
        ),
        ("WRITE to another NC's semaphore", with_act(write("tpb_sem[1].sem_set[1]", 9))),
        ("WRITE to misc_ram.reset_request", with_act(write("misc_ram.reset_request", 1))),
    ];
    for (name, m) in classes {
        let before = sim.stats();
        let hostile = rt.load(&m.build().unwrap(), Some(0), None).unwrap_or_else(|e| panic!("{name}: not loaded: {e}"));
        let (st, _, _) = exec_on(&rt, &hostile, 0, 1);
        assert_eq!(st, NrtStatus::ExecOob, "{name}");
        let after = sim.stats();
        assert!(after.oob_refused > before.oob_refused, "{name}: the region table refused nothing");
        assert_eq!(after.resets, before.resets, "{name}: the device was reset");
        rt.unload(&hostile).unwrap();
        assert_eq!(vt.to_vec().unwrap(), pattern, "{name}: the victim's tensor changed");
        let (st, input, out) = exec_on(&rt, &victim, 1, 2);
        assert_eq!((st, &out), (NrtStatus::Success, &input), "{name}: the victim's next run");
    }

    // A forged report is the one class the device cannot stop: a NOTIFY posting an
    // out-of-bounds sub-id touches nothing the table checks, yet the execution ends 1006.
    // Only the loader's refusal (ForgedNotification) keeps it out.
    let before = sim.stats().oob_refused;
    let forged = with_act(Instruction::decode(&NotifyOp::new(Events::NONE, custom::OOB_EMBEDDING_TEXT, 0).encode()));
    let hostile = rt.load(&forged.build().unwrap(), Some(0), None).unwrap();
    let (st, _, _) = exec_on(&rt, &hostile, 0, 5);
    assert_eq!(st, NrtStatus::ExecOob);
    assert_eq!(sim.stats().oob_refused, before, "the region table refused an access of the forged report");
    rt.unload(&hostile).unwrap();

    // A var of u64::MAX bytes cannot reach the device even with the loader's checks off: the
    // checked allocator refuses it at load.
    let mut m = builder::single_nc_allreduce();
    m.graphs[0].vars.push(VarDesc::new("huge", VarKind::TmpBuf, u64::MAX));
    let Err(e) = rt.load(&m.build().unwrap(), Some(0), None) else { panic!("a u64::MAX var loaded") };
    assert_eq!(e.status, NrtStatus::Resource, "{e}");

    // The same model with the loader on: the table never fires on what the loader accepts.
    let before = sim.stats().oob_refused;
    let ok = rt
        .load(
            &with_act(memcpy(leg(var_addr(inp, 124), [-1, 0], [32, 1], 4), leg(var_addr(tmp, 0), [1, 0], [32, 1], 4)))
                .build()
                .unwrap(),
            Some(0),
            None,
        )
        .unwrap();
    let (st, _, _) = exec_on(&rt, &ok, 0, 3);
    assert_eq!(st, NrtStatus::Success);
    assert_eq!(sim.stats().oob_refused, before);
    rt.unload(&ok).unwrap();
    rt.unload(&victim).unwrap();
    drop(vt);
    rt.close().unwrap();
}

#[test]
fn a_model_that_needs_more_region_entries_than_the_table_holds_is_refused() {
    let (_sim, rt) = runtime();
    // Realistic sizes fit: the all-reduce model plus 100 more vars of their own.
    let mut m = builder::single_nc_allreduce();
    for k in 0..100 {
        m.graphs[0].vars.push(VarDesc::new(&format!("w{k}"), VarKind::TmpBuf, 4096 * (1 + k % 3)));
    }
    let model = rt.load(&m.build().unwrap(), Some(0), None).unwrap();
    rt.unload(&model).unwrap();
    // Allocations that cannot coalesce: device memory fragmented by tensors (every other
    // 4 KiB block still held), so each 4 KiB var of the model lands in its own hole and needs
    // its own entry. One more var than the table holds is refused at load with NRT_RESOURCE.
    let all: Vec<_> = (0..2 * (hal::regions::TABLE_ENTRIES + 64))
        .map(|k| rt.alloc_tensor(&format!("t{k}"), 4096, true, 0).unwrap())
        .collect();
    let held: Vec<_> = all.into_iter().enumerate().filter_map(|(k, t)| (k % 2 == 1).then_some(t)).collect();
    let mut m = builder::single_nc_allreduce();
    for k in 0..hal::regions::TABLE_ENTRIES + 1 {
        m.graphs[0].vars.push(VarDesc::new(&format!("w{k}"), VarKind::TmpBuf, 4096));
    }
    refused(&rt, &m, NrtStatus::Resource, |k| matches!(k, K::RegionTableFull { need, have: 256 } if *need > 256));
    drop(held);
    rt.close().unwrap();
}
