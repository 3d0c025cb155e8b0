//! The records the simulator writes, read raw off the host rings, against the hand-written
//! golden vectors of docs/records.md (`tests/golden/records.rs`). Bytes 0..8 carry every field
//! but the timestamp and must match exactly; the timestamp (device clock) is checked to be
//! non-zero and ordered. A change of a field's meaning on the device side fails here.

mod common;
use common::*;
use csr_maps::blocks::tpb_sem as ts;
use csr_maps::SUNDA;
use isa::slot::{Events, Opcode, WaitMode, SLOT_BYTES};
use sim::FaultSpec;

/// The shared hand-written vectors (each test uses the kinds it checks).
#[allow(dead_code)]
mod vectors {
    include!("../../tests/golden/records.rs");
}
use vectors::*;

const TRACE_BOTH: u8 = 3;

fn nop(trace: u8, ev: Events) -> [u8; SLOT_BYTES] {
    isa::device_ops::events_only(Opcode::Nop, trace, ev)
}

fn raw(ring: &platform::DmaMapping, i: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    ring.mem().read(i * 16, &mut b).unwrap();
    b
}

fn ts(b: &[u8; 16]) -> u64 {
    u64::from_le_bytes(b[8..16].try_into().unwrap())
}

fn golden_error(name: &str) -> &'static GoldenError {
    GOLDEN_ERRORS.iter().find(|g| g.name == name).unwrap()
}

fn golden_infer(name: &str) -> &'static GoldenInfer {
    GOLDEN_INFERS.iter().find(|g| g.name == name).unwrap()
}

/// `fp-nan@nc0:pe` on the first slot: `error.fp_nan.pe` (the engine index is not the mask).
#[test]
fn fp_nan_pe_record() {
    let t = T::new(&SUNDA);
    let err = t.err_ring(0, 16);
    let _ring = t.infer_ring(0, 0, 16);
    t.load_program(0, 0, nc_area(&t, 0, 0x20_0000), &[nop(0, Events::NONE)], false);
    t.dev.inject("fp-nan@nc0:pe".parse::<FaultSpec>().unwrap());
    t.start(0, 0, false);
    let b = raw(&err, 0);
    assert_eq!(b[..8], golden_error("error.fp_nan.pe").bytes[..8], "{b:02X?}");
    assert!(ts(&b) > 0);
}

/// `fp-nan@nc0:dve` firing on the slot at pc 2 (the engine waited there on a semaphore when
/// the fault was armed): `error.fp_nan.dve`.
#[test]
fn fp_nan_dve_record_at_pc2() {
    let t = T::new(&SUNDA);
    let err = t.err_ring(0, 16);
    let _ring = t.infer_ring(0, 3, 16);
    let wait = Events { wait_mode: WaitMode::GeImm, wait_idx: 5, semaphore_value: 1, ..Events::NONE };
    let prog = [nop(0, Events::NONE), nop(0, Events::NONE), nop(0, wait)];
    t.load_program(0, 3, nc_area(&t, 0, 0x20_0000), &prog, false);
    t.start(0, 3, false);
    assert_eq!(raw(&err, 0)[3] & 0x80, 0, "no error record yet");
    t.dev.inject("fp-nan@nc0:dve".parse::<FaultSpec>().unwrap());
    t.regs().tpb_sem(0).unwrap().sem_inc(5).unwrap().write(ts::SemInc(1)).unwrap();
    let b = raw(&err, 0);
    assert_eq!(b[..8], golden_error("error.fp_nan.dve").bytes[..8], "{b:02X?}");
}

/// Every engine's FP_NAN record carries the NaN mask 0x0001 at +1 and the engine as block id.
#[test]
fn fp_nan_every_engine_mask_and_block() {
    for (e, name) in csr_maps::Engine::ALL.map(csr_maps::Engine::name).into_iter().enumerate() {
        let t = T::new(&SUNDA);
        let err = t.err_ring(0, 16);
        let _ring = t.infer_ring(0, e as u64, 16);
        t.load_program(0, e as u64, nc_area(&t, 0, 0x20_0000), &[nop(0, Events::NONE)], false);
        t.dev.inject(format!("fp-nan@nc0:{name}").parse::<FaultSpec>().unwrap());
        t.start(0, e as u64, false);
        // Hand-written: FP_NAN, mask 01 00, ERROR|phase, block e, pc 0, info 0x10.
        assert_eq!(raw(&err, 0)[..8], [0x01, 0x01, 0x00, 0x83, e as u8, 0x00, 0x10, 0x00], "{name}");
    }
}

/// `nc-ue@nc0:act` on the first slot: the uncorrectable ECC record `error.ecc.uncorrectable.act`
/// on the error ring (besides the NC-UE interrupt line).
#[test]
fn nc_ue_ecc_record() {
    let t = T::new(&SUNDA);
    let err = t.err_ring(0, 16);
    let _ring = t.infer_ring(0, 1, 16);
    t.load_program(0, 1, nc_area(&t, 0, 0x20_0000), &[nop(0, Events::NONE)], false);
    t.dev.inject("nc-ue@nc0:act".parse::<FaultSpec>().unwrap());
    t.start(0, 1, false);
    let b = raw(&err, 0);
    assert_eq!(b[..8], golden_error("error.ecc.uncorrectable.act").bytes[..8], "{b:02X?}");
    assert!(ts(&b) > 0);
}

/// A garbage slot on POOL (events byte 0xA5: no such wait mode): SEQUENCER_FATAL, block 2,
/// info WAIT_MODE (0x04).
#[test]
fn seq_fatal_record() {
    let t = T::new(&SUNDA);
    let err = t.err_ring(0, 16);
    let mut garbage = [0xA5u8; SLOT_BYTES];
    garbage[1] = 0x10;
    t.load_program(0, 2, nc_area(&t, 0, 0x20_0000), &[garbage], false);
    t.start(0, 2, false);
    assert_eq!(raw(&err, 0)[..8], [0x0A, 0x00, 0x00, 0x83, 0x02, 0x00, 0x04, 0x00]);
}

/// Trace records: PE START of the slot at pc 5 (`infer.start.pe`), ACT END of the slot at
/// pc 7 (`infer.end.act`).
#[test]
fn trace_start_end_records() {
    let t = T::new(&SUNDA);
    let pe = t.infer_ring(0, 0, 16);
    let act = t.infer_ring(0, 1, 16);
    let mut prog = vec![nop(0, Events::NONE); 8];
    prog[5] = nop(1, Events::NONE);
    t.load_program(0, 0, nc_area(&t, 0, 0x20_0000), &prog, false);
    let mut prog = vec![nop(0, Events::NONE); 8];
    prog[7] = nop(2, Events::NONE);
    t.load_program(0, 1, nc_area(&t, 0, 0x21_0000), &prog, false);
    t.start(0, 0, false);
    t.start(0, 1, false);
    let s = raw(&pe, 0);
    assert_eq!(s[..8], golden_infer("infer.start.pe").bytes[..8], "{s:02X?}");
    assert_eq!(raw(&pe, 1)[3] & 0x80, 0, "START only");
    let e = raw(&act, 0);
    assert_eq!(e[..8], golden_infer("infer.end.act").bytes[..8], "{e:02X?}");
    assert!(ts(&s) > 0 && ts(&e) > 0);
}

/// `oob@nc0:pe`: the CUSTOM record of sub-id 2 from PE's EXPLICIT type, line = pc 0.
#[test]
fn oob_custom_record() {
    let t = T::new(&SUNDA);
    let pe = t.infer_ring(0, 0, 16);
    t.load_program(0, 0, nc_area(&t, 0, 0x20_0000), &[nop(TRACE_BOTH, Events::NONE)], false);
    t.dev.inject("oob@nc0:pe".parse::<FaultSpec>().unwrap());
    t.start(0, 0, false);
    // OOB first (the fault fires before the slot), then START, END.
    assert_eq!(raw(&pe, 0)[..8], [0x00, 0x00, 0x00, 0x86, 0x02, 0x00, 0x06, 0x00]);
    assert_eq!(raw(&pe, 1)[..8], [0x00, 0x00, 0x00, 0x84, 0x00, 0x00, 0x02, 0x00]);
    assert_eq!(raw(&pe, 2)[..8], [0x00, 0x00, 0x00, 0x85, 0x00, 0x00, 0x03, 0x00]);
    assert!(ts(&raw(&pe, 1)) <= ts(&raw(&pe, 2)));
}

/// A ring that really fills: the record after the drop carries the software-overflow bit
/// (`infer.end.sp.overflowed` sets it on an SP END), and the NC INTC overflow line is raised.
#[test]
fn overflow_bit_on_the_record_after_a_drop() {
    let t = T::new(&SUNDA);
    // Two-record ring: one record fits (a full ring keeps one entry empty).
    let sp = t.infer_ring(0, 4, 2);
    let prog = [nop(1, Events::NONE), nop(2, Events::NONE)];
    t.load_program(0, 4, nc_area(&t, 0, 0x20_0000), &prog, false);
    t.start(0, 4, false);
    // START written, END dropped (head still 0).
    assert_eq!(raw(&sp, 0)[..8], [0x00, 0x00, 0x00, 0x94, 0x00, 0x00, 0x02, 0x00]);
    assert_eq!(t.dev.stats().dropped_records, 1);
    // The consumer catches up; the next END goes in with the overflow bit.
    let n = t.regs().notific(0).unwrap().nq(SUNDA.consts.nq_slot_infer_status + 4).unwrap();
    n.head().write(csr_maps::blocks::notific_slot::Head(16)).unwrap();
    let g = golden_infer("infer.end.sp.overflowed");
    let slots = [nop(2, Events::NONE)];
    t.load_program(0, 4, nc_area(&t, 0, 0x21_0000), &slots, false);
    t.start(0, 4, false);
    assert_eq!(raw(&sp, 1)[..8], g.bytes[..8], "{:02X?}", raw(&sp, 1));
    let g1 = t.regs().nc_intc(0).unwrap().g1().cause().read().unwrap();
    assert_eq!((g1.0 >> 29) & 1, 1, "NC INTC g1 bit 29");
}
