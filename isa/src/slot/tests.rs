//! The slot codecs: round trips, pinned layouts, and totality on random bytes.

use super::*;
use proptest::prelude::*;

fn slot_from(v: &[u8]) -> [u8; SLOT_BYTES] {
    let mut a = [0u8; SLOT_BYTES];
    a.copy_from_slice(v);
    a
}

#[test]
fn opcode_table_is_consistent() {
    for &op in Opcode::ALL {
        assert_eq!(Opcode::from_code(op.code()), op);
        let name = op.name().unwrap_or_default();
        assert_eq!(Opcode::from_name(name), Some(op), "{name}");
    }
    assert_eq!(Opcode::from_code(0x03), Opcode::Raw(0x03));
    assert_eq!(Opcode::PseudoDmaTrigger.code(), 0xC1);
    assert_eq!(Opcode::PseudoTriggerCollective.engine_class(), EngineClass::Rt);
    assert_eq!(Opcode::EventSemaphore.engine_class(), EngineClass::Seq);
    assert_eq!(Opcode::Matmul.engine_class(), EngineClass::Engine(Engine::Pe));
    assert_eq!(Opcode::SimMemcpy.engine_class(), EngineClass::Sim);
    for &op in SpOpcode::ALL {
        assert_eq!(SpOpcode::from_code(op.code()), op);
    }
}

#[test]
fn fixture_style_dma_trigger() {
    // 0xC1, len 16, wait $S[22] > 0, queue "q_gradient_out", block 0.
    let t = DmaTrigger::new(Events::wait_gt(22, 0), "q_gradient_out", 0);
    let b = t.encode();
    assert_eq!(&b[0..4], &[0xC1, 0x10, 0, 0]);
    assert_eq!(&b[4..12], &[4, 22, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[0x0C..0x0C + 14], b"q_gradient_out");
    assert_eq!(b[0x0C + 14], 0);
    assert_eq!(u32_at(&b, 0x2C), 0);
    assert_eq!(u32_at(&b, 0x30), 0);
    assert!(t.is_valid());
    assert_eq!(t.queue(), "q_gradient_out");
    assert_eq!(Instruction::decode(&b), Instruction::DmaTrigger(t));
}

#[test]
fn header_fields() {
    let mut b = [0u8; SLOT_BYTES];
    b[0] = 0xC8;
    b[1] = 0x10;
    b[2] = 0x83;
    b[3] = 9;
    let h = SlotHeader::decode(&b);
    assert_eq!(h.base(), 8);
    assert_eq!(h.engine_class(), EngineClass::Rt);
    assert_eq!(h.trace_mode(), TraceMode::Both);
    assert!(h.halt_en());
    assert_eq!(h.debug_hint, 9);
    // A little-endian u16 read of bytes 0..2 gives 0x10C8: opcode 0xC8 plus the length.
    assert_eq!(u16_at(&b, 0), 0x10C8);
}

#[test]
fn collective_offsets() {
    let mut b = [0u8; SLOT_BYTES];
    b[0] = 0xC8;
    b[1] = 0x10;
    b[0x0C] = coll_op::ADD;
    b[0x0D] = coll_dtype::FP32;
    b[0x0E] = 3;
    b[0x10] = 2;
    b[0x14] = 3;
    b[0x18] = 32;
    b[0x20] = coll_type::ALL_REDUCE;
    b[0x30] = 5;
    b[0x38] = 6;
    match Instruction::decode(&b) {
        Instruction::TriggerCollective(c) => {
            assert_eq!((c.op, c.dtype, c.group_id), (4, 0x0A, 3));
            assert_eq!((c.input_tensor_id, c.output_tensor_id, c.num_elements), (2, 3, 32));
            assert_eq!((c.ctype, c.src_offset_elems, c.dst_offset_elems), (1, 5, 6));
        }
        other => panic!("wrong decode {other:?}"),
    }
}

#[test]
fn dma2d_offsets() {
    let mut b = [0u8; SLOT_BYTES];
    b[0] = 0xD4;
    b[12] = 0xFB;
    b[15] = 2;
    b[16] = 0x11;
    b[23] = 0x10;
    b[24] = 0xFF;
    b[25] = 0xFF;
    b[26] = 0xFF;
    b[27] = 0xFF;
    b[32] = 4;
    b[36] = 8;
    b[38] = 0x81;
    b[40] = 0x22;
    b[56] = 7;
    b[60] = 0;
    b[62] = 0x0A;
    b[63] = 0x06;
    match Instruction::decode(&b) {
        Instruction::PseudoDmaDirect2d(d) => {
            assert_eq!(d.priority_class(), 3);
            assert_eq!(d.op, 2);
            assert_eq!(d.src.start_addr, 0x1000_0000_0000_0011);
            assert_eq!(d.src.step_elem[0], -1);
            assert_eq!(d.src.num_elem, [4, 0]);
            assert_eq!(d.src.elem_size, 8);
            assert_eq!(d.src_bound_reg, 0x81);
            assert_eq!(d.dst.start_addr, 0x22);
            assert_eq!(d.dst.num_elem, [7, 0]);
            assert_eq!(d.dst.total_bytes(), 0);
            assert_eq!((d.in_dtype, d.out_dtype), (0x0A, 0x06));
        }
        other => panic!("wrong decode {other:?}"),
    }
}

#[test]
fn wait_mode_gt_is_4_and_ge_is_5() {
    assert_eq!(WaitMode::from_code(4), WaitMode::GtImm);
    assert_eq!(WaitMode::from_code(5), WaitMode::GeImm);
    assert_eq!(WaitMode::from_code(0x83), WaitMode::Reg83);
    assert!(WaitMode::Reg83.is_register() && !WaitMode::GeImm.is_register() && !WaitMode::Other(0x80).is_register());
    let registers: Vec<u8> = (0..=u8::MAX).filter(|&c| WaitMode::from_code(c).is_register()).collect();
    assert_eq!(registers, (0x81..=0x85).collect::<Vec<u8>>());
    assert!((0..=u8::MAX).all(|c| WaitMode::from_code(c).code() == c && UpdateMode::from_code(c).code() == c));
    assert_eq!(WaitMode::from_code(0x86), WaitMode::Other(0x86));
    assert_eq!(UpdateMode::from_code(0x13), UpdateMode::IncComplete);
}

#[test]
fn sp_slot_bits() {
    let s = SpSlot::decode(&[0xA4, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(s.opcode, SpOpcode::WaitEventSet);
    assert!(s.phase);
    assert_eq!(s.encode(), [0xA4, 1, 2, 3, 4, 5, 6, 7]);
}

proptest! {
    #[test]
    fn instruction_decode_encode_is_identity(v in proptest::collection::vec(any::<u8>(), 64)) {
        let b = slot_from(&v);
        let i = Instruction::decode(&b);
        prop_assert_eq!(i.encode(), b);
        prop_assert_eq!(i.header().opcode, b[0]);
        prop_assert_eq!(Instruction::decode(&i.encode()), i);
    }

    #[test]
    fn every_opcode_round_trips(op in any::<u8>(), v in proptest::collection::vec(any::<u8>(), 63)) {
        let mut b = [0u8; SLOT_BYTES];
        b[0] = op;
        b[1..].copy_from_slice(&v);
        let i = Instruction::decode(&b);
        prop_assert_eq!(i.opcode().code(), op);
        prop_assert_eq!(i.encode(), b);
    }

    #[test]
    fn events_round_trip(w in any::<u8>(), wi in any::<u8>(), u in any::<u8>(), ui in any::<u8>(), val in any::<u32>()) {
        let mut b = [0u8; SLOT_BYTES];
        b[4] = w; b[5] = wi; b[6] = u; b[7] = ui;
        b[8..12].copy_from_slice(&val.to_le_bytes());
        let e = Events::decode(&b);
        prop_assert_eq!(&e.to_bytes()[..], &b[4..12]);
    }

    #[test]
    fn typed_trigger_round_trips(q in "[a-z_]{1,31}", block in any::<u32>(), idx in any::<u8>()) {
        let t = DmaTrigger::new(Events::wait_gt(idx, 0).inc_on_complete(idx), &q, block);
        prop_assert_eq!(Instruction::decode(&t.encode()), Instruction::DmaTrigger(t));
        prop_assert_eq!(t.queue(), q);
    }

    #[test]
    fn sp_slot_round_trips(v in proptest::collection::vec(any::<u8>(), 8)) {
        let mut b = [0u8; SP_SLOT_BYTES];
        b.copy_from_slice(&v);
        prop_assert_eq!(SpSlot::decode(&b).encode(), b);
    }
}
