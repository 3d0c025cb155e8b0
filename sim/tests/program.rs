//! Sequencer programs with the shape of a real NEFF, through registers and DMA only.

mod common;
use common::*;
use csr_maps::consts::seq::{STATE_HALTED, STATE_WAITING};
use csr_maps::formats::notify::{ntype, Subtype};
use csr_maps::formats::udma::UdmaDesc;
use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use isa::device_ops::{alu, ctype, dtype, CollectiveOp, WriteOp};
use isa::slot::{Events, Opcode, SlotHeader, SLOT_BYTES};
use sim::{SimConfig, SimTopology, Timing};

const PE: u64 = 0;
const POOL: u64 = 2;
const TRACE_START: u8 = 1;
const TRACE_END: u8 = 2;
const TRACE_BOTH: u8 = 3;

fn ev_only(op: Opcode, trace: u8, ev: Events) -> [u8; SLOT_BYTES] {
    isa::device_ops::events_only(op, trace, ev)
}

fn write_slot(trace: u8, ev: Events, addr: u64, value: u32) -> [u8; SLOT_BYTES] {
    let mut w = WriteOp::new(ev, addr, value);
    w.header.debug_cmd = trace;
    w.encode()
}

struct Nc {
    input: Vec<f32>,
    out_addr: u64,
    rings: Vec<platform::DmaMapping>,
    _keep: Vec<platform::DmaMapping>,
}

/// Stage the all-reduce program on `nc` of `t`: POOL triggers DMA input → scratch (queue
/// 0 of DMA engine nc*16+2), PE waits on $S[10], runs the collective scratch → scratch2 and
/// increments $S[12]; POOL waits on $S[12], triggers DMA scratch2 → output and gates on $S[11]
/// with an EVENT_SEMAPHORE.
fn stage(t: &T, nc: u64, comm: u32, rank: u8, size: u8, seed: f32) -> Nc {
    let arch = t.arch;
    let n = 32usize;
    let bytes = (n * 4) as u64;
    let input: Vec<f32> = (0..n).map(|i| seed + i as f32).collect();
    let (inp, s1, s2, out) =
        (nc_area(t, nc, 0), nc_area(t, nc, 0x1000), nc_area(t, nc, 0x2000), nc_area(t, nc, 0x3000));
    t.write_dev(inp, &input.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<_>>());
    // DMA queue with two prebuilt blocks, each followed by a semaphore-increment pair.
    let e = nc * arch.counts.dma_engines_per_nc + 2;
    let mr = t.map(4096);
    let sr = t.map(4096);
    let one = t.map(4096);
    one.mem().write_u32(0, 1).unwrap();
    t.setup_queue(e, 0, t.host(&mr, 0), t.host(&sr, 0), 64);
    let blk = |from: u64, to: u64, sem: u64| {
        (
            vec![UdmaDesc::tx(from, bytes as u32, 1, true, true), UdmaDesc::tx(t.host(&one, 0), 4, 1, true, true)],
            vec![
                UdmaDesc::rx(to, bytes as u32, 1, true, true),
                UdmaDesc::rx(t.sem_inc_addr(nc, sem), 4, 1, true, true),
            ],
        )
    };
    let (m0, s0) = blk(inp, s1, 10);
    let (m1, s1d) = blk(s2, out, 11);
    write_descs(&mr, 0, &[m0, m1].concat());
    write_descs(&sr, 0, &[s0, s1d].concat());
    let u = t.regs().udma(e).unwrap();
    let m2s_tail = arch.bar0_to_dev(u.m2s().q(0).unwrap().tail_inc().offset()).unwrap();
    let s2m_tail = arch.bar0_to_dev(u.s2m().q(0).unwrap().tail_inc().offset()).unwrap();
    let pool = [
        write_slot(TRACE_START, Events::NONE, s2m_tail, 2),
        write_slot(0, Events::NONE, m2s_tail, 2),
        ev_only(Opcode::EventSemaphore, 0, Events::wait_gt(12, 0)),
        write_slot(0, Events::NONE, s2m_tail, 2),
        write_slot(0, Events::NONE, m2s_tail, 2),
        ev_only(Opcode::EventSemaphore, TRACE_END, Events::wait_gt(11, 0)),
    ];
    let coll = CollectiveOp {
        header: SlotHeader { debug_cmd: TRACE_END, ..SlotHeader::new(Opcode::Sb2sbCollective) },
        events: Events::NONE.inc_on_complete(12),
        op: alu::ADD,
        dtype: dtype::FP32,
        ctype: ctype::ALL_REDUCE,
        rank,
        group_size: size,
        peer: isa::device_ops::NO_PEER,
        comm_id: comm,
        src: s1,
        dst: s2,
        num_elements: n as u64,
        meta: 0,
        out_elements: 0,
    };
    let pe = [ev_only(Opcode::EventSemaphore, TRACE_START, Events::wait_gt(10, 0)), coll.encode()];
    let nop = [ev_only(Opcode::Nop, TRACE_BOTH, Events::NONE)];
    let mut rings = Vec::new();
    for eng in 0..5u64 {
        rings.push(t.infer_ring(nc, eng, 16));
    }
    let prog = |eng: u64| nc_area(t, nc, 0x10_0000 + eng * 0x1000);
    t.load_program(nc, PE, prog(PE), &pe, false);
    t.load_program(nc, POOL, prog(POOL), &pool, false);
    for eng in [1u64, 3, 4] {
        t.load_program(nc, eng, prog(eng), &nop, false);
    }
    Nc { input, out_addr: out, rings, _keep: vec![mr, sr, one] }
}

fn run(t: &T, nc: u64) {
    for eng in 0..5 {
        t.start(nc, eng, false);
    }
}

fn output(t: &T, n: &Nc) -> Vec<f32> {
    t.read_dev(n.out_addr, 128).chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn check_records(n: &Nc) {
    for (e, ring) in n.rings.iter().enumerate() {
        let r = records(ring, 16);
        assert_eq!(r.len(), 2, "engine {e}: {r:?}");
        assert_eq!(r[0].kind(), Subtype::Start);
        assert_eq!(r[0].tag, ntype::engine(e as u8, ntype::INST_START));
        assert_eq!(r[1].kind(), Subtype::End);
        assert_eq!(r[1].tag, ntype::engine(e as u8, ntype::INST_END));
        assert!(r[1].timestamp >= r[0].timestamp);
    }
}

#[test]
fn single_nc_all_reduce_identity_all_arches() {
    for arch in [&SUNDA, &CAYMAN, &MARIANA] {
        let t = T::new(arch);
        let n = stage(&t, 0, 1, 0, 1, 1.5);
        run(&t, 0);
        assert_eq!(output(&t, &n), n.input, "{arch}");
        check_records(&n);
        let st = t.dev.stats();
        assert_eq!(st.engine_states[0], [STATE_HALTED; 5]);
        assert_eq!(st.collectives, 1);
        assert_eq!(st.dma_faults, 0);
    }
}

#[test]
fn two_ncs_sum() {
    let t = T::new(&CAYMAN);
    let a = stage(&t, 0, 7, 0, 2, 1.0);
    let b = stage(&t, 1, 7, 1, 2, 100.0);
    run(&t, 0);
    // NC0 waits in the collective until NC1 arrives.
    assert_eq!(t.dev.stats().engine_states[0][PE as usize], STATE_WAITING);
    run(&t, 1);
    let sum: Vec<f32> = a.input.iter().zip(&b.input).map(|(x, y)| x + y).collect();
    assert_eq!(output(&t, &a), sum);
    assert_eq!(output(&t, &b), sum);
    check_records(&a);
    check_records(&b);
}

fn two_devices(timing: Timing) {
    let topo = SimTopology::new(SimConfig::new(&SUNDA).timing(timing).hbm_bytes(1 << 30), 2).unwrap();
    let t0 = T::from(topo.devices[0].clone(), &SUNDA);
    let t1 = T::from(topo.devices[1].clone(), &SUNDA);
    let a = stage(&t0, 0, 9, 0, 2, 3.0);
    let b = stage(&t1, 0, 9, 1, 2, -1.0);
    run(&t0, 0);
    run(&t1, 0);
    let sum: Vec<f32> = a.input.iter().zip(&b.input).map(|(x, y)| x + y).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (records(&a.rings[POOL as usize], 16).len() < 2 || records(&b.rings[POOL as usize], 16).len() < 2)
        && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    assert_eq!(output(&t0, &a), sum);
    assert_eq!(output(&t1, &b), sum);
    check_records(&a);
    check_records(&b);
}

#[test]
fn two_devices_one_replica_group_inline() {
    two_devices(Timing::Inline);
}

#[test]
fn two_devices_threaded_host_polls() {
    two_devices(Timing::Threaded);
}

#[test]
fn step_mode_runs_only_when_stepped() {
    let t = T::with(SimConfig::new(&SUNDA).timing(Timing::Step).hbm_bytes(1 << 30));
    let n = stage(&t, 1, 3, 0, 1, 2.0);
    run(&t, 1);
    assert!(records(&n.rings[0], 16).is_empty());
    t.dev.run_until_idle();
    assert_eq!(output(&t, &n), n.input);
    check_records(&n);
}

#[test]
fn unknown_and_unlowered_slots_post_sequencer_fatal() {
    use csr_maps::formats::error::{ErrorId, TpbErrorRecord};
    for arch in [&SUNDA, &CAYMAN] {
        let t = T::new(arch);
        let err = t.err_ring(0, 16);
        let ring = t.infer_ring(0, 1, 16);
        let mut garbage = [0xA5u8; SLOT_BYTES];
        garbage[1] = 0x10;
        let trigger = isa::slot::DmaTrigger::new(Events::NONE, "q_in", 0).encode();
        t.load_program(
            0,
            1,
            nc_area(&t, 0, 0x20_0000),
            &[ev_only(Opcode::Nop, TRACE_START, Events::NONE), trigger],
            false,
        );
        t.load_program(0, 3, nc_area(&t, 0, 0x21_0000), &[garbage], false);
        t.start(0, 1, false);
        t.start(0, 3, false);
        let st = t.dev.stats();
        assert_eq!(st.engine_states[0][1], csr_maps::consts::seq::STATE_FAULT);
        assert_eq!(st.engine_states[0][3], csr_maps::consts::seq::STATE_FAULT);
        let mut recs = vec![];
        for i in 0..2 {
            let mut b = [0u8; 16];
            err.mem().read(i * 16, &mut b).unwrap();
            recs.push(TpbErrorRecord::decode(&b));
        }
        assert!(recs.iter().all(|r| r.id() == ErrorId::SequencerFatal && r.header & 0x80 != 0), "{recs:?}");
        assert_eq!(records(&ring, 16).len(), 1, "START then the fault; no END");
        let intc = t.regs().nc_intc(0).unwrap().g0().cause().read().unwrap();
        assert_eq!(intc.seq_fatal(), 1);
    }
}

#[allow(dead_code)]
fn arch_name(a: &Arch) -> &str {
    a.name
}

/// All-reduce / all-gather / reduce-scatter with ADD/MAX/MIN on fp32/bf16/fp16/int32 across
/// two NCs, one SB2SB_COLLECTIVE slot each.
#[test]
fn collective_kinds_ops_and_types() {
    fn enc(dt: u8, v: f64) -> Vec<u8> {
        match dt {
            dtype::FP32 => (v as f32).to_le_bytes().to_vec(),
            dtype::INT32 => (v as i32).to_le_bytes().to_vec(),
            dtype::BF16 => (((v as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
            _ => {
                // Small integers are exact in fp16: sign 0, exponent and mantissa by hand.
                let f = v as f32;
                if f == 0.0 {
                    return vec![0, 0];
                }
                let e = f.abs().log2().floor() as i32;
                let m = ((f.abs() / 2f32.powi(e) - 1.0) * 1024.0).round() as u16;
                let s = if f < 0.0 { 0x8000u16 } else { 0 };
                (s | (((e + 15) as u16) << 10) | m).to_le_bytes().to_vec()
            }
        }
    }
    let t = T::new(&CAYMAN);
    let n = 8usize;
    let a: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
    let b: Vec<f64> = (0..n).map(|i| 10.0 - i as f64 * 2.0).collect();
    for (ct, op, dt) in [
        (ctype::ALL_REDUCE, alu::ADD, dtype::FP32),
        (ctype::ALL_REDUCE, alu::MAX, dtype::BF16),
        (ctype::ALL_REDUCE, alu::MIN, dtype::FP16),
        (ctype::ALL_REDUCE, alu::ADD, dtype::INT32),
        (ctype::ALL_GATHER, alu::ADD, dtype::FP32),
        (ctype::REDUCE_SCATTER, alu::ADD, dtype::INT32),
    ] {
        let es = dtype::size(dt).unwrap();
        let comm = 1000 + ct as u32 * 16 + op as u32 + dt as u32 * 64;
        for (nc, data) in [(0u64, &a), (1u64, &b)] {
            let src = nc_area(&t, nc, 0x4_0000);
            let dst = nc_area(&t, nc, 0x5_0000);
            t.write_dev(src, &data.iter().flat_map(|&v| enc(dt, v)).collect::<Vec<_>>());
            t.write_dev(dst, &[0u8; 256]);
            let c = CollectiveOp {
                header: SlotHeader::new(Opcode::Sb2sbCollective),
                events: Events::NONE,
                op,
                dtype: dt,
                ctype: ct,
                rank: nc as u8,
                group_size: 2,
                peer: isa::device_ops::NO_PEER,
                comm_id: comm,
                src,
                dst,
                num_elements: n as u64,
                meta: 0,
                out_elements: 0,
            };
            t.load_program(nc, PE, nc_area(&t, nc, 0x6_0000), &[c.encode()], false);
        }
        run(&t, 0);
        run(&t, 1);
        let combine = |x: f64, y: f64| match op {
            alu::MAX => x.max(y),
            alu::MIN => x.min(y),
            _ => x + y,
        };
        let red: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| combine(x, y)).collect();
        for nc in 0..2u64 {
            let expect: Vec<f64> = match ct {
                ctype::ALL_GATHER => a.iter().chain(&b).copied().collect(),
                ctype::REDUCE_SCATTER => red[nc as usize * n / 2..(nc as usize + 1) * n / 2].to_vec(),
                _ => red.clone(),
            };
            let got = t.read_dev(nc_area(&t, nc, 0x5_0000), expect.len() * es);
            let want: Vec<u8> = expect.iter().flat_map(|&v| enc(dt, v)).collect();
            assert_eq!(got, want, "ctype {ct} op {op:#x} dtype {dt:#x} nc {nc}");
        }
    }
}
