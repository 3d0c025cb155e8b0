//! Device forms of the instructions the simulator's sequencers execute and the
//! runtime's lowering emits. Where the public sources give no operand layout
//! (docs/facts/libnrt.md §11: "byte layout of the real instructions that replace pseudos"),
//! the layout here is **modeled** and is the single definition both sides use.
//!
//! | opcode | form | payload (after header +0 and 8-byte events +4) |
//! |---|---|---|
//! | 0x69 WRITE | [`WriteOp`] | +0x10 device address u64, +0x18 value u32 — a 32-bit store to a device address (a DMA queue's tail-increment CSR for a lowered PSEUDO_DMA_TRIGGER; a semaphore window) |
//! | 0x6A NOTIFY | [`NotifyOp`] | +0x0C sub-id u16, +0x10 value u32 — a custom INFER_STATUS record (subtype 6) |
//! | 0xBF SB2SB_COLLECTIVE | [`CollectiveOp`] | see the struct — a lowered PSEUDO_TRIGGER_COLLECTIVE |
//! | 0xA1 SYNC | halt | engine stops (no payload) |
//! | 0xB8 DMAMEMCPY | `slot::Dma2d` | docs/facts/libnrt.md §2.4 (documented) |
//! | 0xA0 EVENT_SEMAPHORE, 0x68 NOP, 0xF0 EXTENDED_INST | events only | — |
//!
//! Update mode 0x14 (`UpdateMode::Other(0x14)`) is modeled as "decrement `$S[update_idx]`
//! by 1 on completion", from DHN's WAIT_GE_AND_DEC sub-op 0x14 (docs/facts/libnrt.md §2.4).

use super::slot::{Events, Opcode, SlotHeader, SLOT_BYTES};
use csr_maps::formats::le::{u16_at, u32_at, u64_at};

/// Update mode 0x14: decrement on completion (modeled).
pub const UPDATE_DEC_COMPLETE: u8 = 0x14;

/// Collective ALU ops: ADD and MAX are the documented codes of PSEUDO_TRIGGER_COLLECTIVE
/// (`slot::coll_op`, docs/facts/libnrt.md §2.4); MIN is modeled. As the workspace's one
/// reduction operator: [`reduce::ReduceOp`].
pub mod alu {
    pub use crate::slot::coll_op::{ADD, MAX};
    use reduce::ReduceOp;
    /// Modeled.
    pub const MIN: u8 = 0x0C;

    /// The reduction operator of ALU code `op`, or `None` for a code a collective cannot use.
    pub fn op(op: u8) -> Option<ReduceOp> {
        match op {
            ADD => Some(ReduceOp::Add),
            MAX => Some(ReduceOp::Max),
            MIN => Some(ReduceOp::Min),
            _ => None,
        }
    }

    /// The ALU code of `op`.
    pub fn code(op: ReduceOp) -> u8 {
        match op {
            ReduceOp::Add => ADD,
            ReduceOp::Max => MAX,
            ReduceOp::Min => MIN,
        }
    }
}

/// Collective kinds: ALL_REDUCE is documented (`slot::coll_type`); the others are modeled
/// (docs/modeled.md), numbered after it in the order nccom-test lists its operations.
pub mod ctype {
    pub use crate::slot::coll_type::ALL_REDUCE;
    /// Modeled.
    pub const ALL_GATHER: u8 = 0x02;
    /// Modeled.
    pub const REDUCE_SCATTER: u8 = 0x03;
    /// Modeled: every rank sends its buffer to the next rank of the group (`r + 1 mod n`) and
    /// receives the previous rank's (the pattern of nccl-tests' send/receive).
    pub const SEND_RECV: u8 = 0x04;
    /// Modeled: rank `r`'s input is `n` equal chunks, chunk `j` goes to rank `j`; rank `r`'s
    /// output is every rank's chunk `r`, in rank order.
    pub const ALL_TO_ALL: u8 = 0x05;
    /// Modeled: every rank sends its buffer to the one rank its source-target pair names (the
    /// graph's `src_target_pairs`); a rank no pair targets receives zeros.
    pub const PERMUTE: u8 = 0x06;
    /// Modeled: an all-to-all of per-pair counts and displacements, read from each rank's
    /// metadata tensor ([`super::AllToAllV`]).
    pub const ALL_TO_ALLV: u8 = 0x07;

    /// Every collective kind the device runs.
    pub const ALL: [u8; 7] = [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND_RECV, ALL_TO_ALL, PERMUTE, ALL_TO_ALLV];

    /// The kind's name (`all_reduce`, …, nccom-test's spelling), or `None` for an unknown code.
    pub fn name(c: u8) -> Option<&'static str> {
        Some(match c {
            ALL_REDUCE => "all_reduce",
            ALL_GATHER => "all_gather",
            REDUCE_SCATTER => "reduce_scatter",
            SEND_RECV => "sendrecv",
            ALL_TO_ALL => "alltoall",
            PERMUTE => "permute",
            ALL_TO_ALLV => "alltoallv",
            _ => return None,
        })
    }

    /// Whether the kind reduces (its result depends on the operator and element arithmetic).
    pub fn reduces(c: u8) -> bool {
        matches!(c, ALL_REDUCE | REDUCE_SCATTER)
    }

    /// Whether each rank sends to one peer (the instruction's `peer`).
    pub fn has_peer(c: u8) -> bool {
        matches!(c, SEND_RECV | PERMUTE)
    }
}

/// Collective data types: the DTYPE codes of `slot::coll_dtype` (docs/facts/libnrt.md §2.4),
/// as the workspace's one element type ([`reduce::DType`]).
pub mod dtype {
    pub use crate::slot::coll_dtype::{BF16, FP16, FP32, INT32};
    use reduce::DType;

    /// Modeled: the integer types' codes follow `nrt_dtype_t` (docs/facts/libnrt.md §1.5),
    /// whose numbers the four documented DTYPE codes share (fp32 10, bf16 6, fp16 7, int32 8).
    pub const INT8: u8 = 0x02;
    /// Modeled (as [`INT8`]).
    pub const UINT8: u8 = 0x03;
    /// Modeled (as [`INT8`]).
    pub const INT16: u8 = 0x04;
    /// Modeled (as [`INT8`]).
    pub const UINT16: u8 = 0x05;
    /// Modeled (as [`INT8`]).
    pub const UINT32: u8 = 0x09;
    /// Modeled (as [`INT8`]: `NRT_DTYPE_FP8_E4`).
    pub const FP8_E4M3: u8 = 0x0E;
    /// Modeled (as [`INT8`]: `NRT_DTYPE_FP8_E5`).
    pub const FP8_E5M2: u8 = 0x0F;

    /// The element type of DTYPE code `d`, or `None` for a type a collective cannot use.
    pub fn of(d: u8) -> Option<DType> {
        match d {
            FP32 => Some(DType::F32),
            BF16 => Some(DType::Bf16),
            FP16 => Some(DType::F16),
            INT32 => Some(DType::I32),
            UINT8 => Some(DType::U8),
            INT8 => Some(DType::I8),
            UINT16 => Some(DType::U16),
            INT16 => Some(DType::I16),
            UINT32 => Some(DType::U32),
            FP8_E4M3 => Some(DType::F8E4M3),
            FP8_E5M2 => Some(DType::F8E5M2),
            _ => None,
        }
    }

    /// The DTYPE code of `d`.
    pub fn code(d: DType) -> u8 {
        match d {
            DType::F32 => FP32,
            DType::Bf16 => BF16,
            DType::F16 => FP16,
            DType::I32 => INT32,
            DType::U8 => UINT8,
            DType::I8 => INT8,
            DType::U16 => UINT16,
            DType::I16 => INT16,
            DType::U32 => UINT32,
            DType::F8E4M3 => FP8_E4M3,
            DType::F8E5M2 => FP8_E5M2,
        }
    }

    /// Element size in bytes, or `None` for an unsupported type.
    pub fn size(d: u8) -> Option<usize> {
        of(d).map(DType::size)
    }
}

fn base(op: Opcode, hdr: Option<SlotHeader>, ev: &Events) -> [u8; SLOT_BYTES] {
    let mut b = [0u8; SLOT_BYTES];
    b[0..4].copy_from_slice(&hdr.unwrap_or_else(|| SlotHeader::new(op)).to_bytes());
    b[4..12].copy_from_slice(&ev.to_bytes());
    b
}

/// WRITE (0x69): store `value` at device address `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOp {
    pub header: SlotHeader,
    pub events: Events,
    pub addr: u64,
    pub value: u32,
}

impl WriteOp {
    /// A WRITE with a default header.
    pub fn new(events: Events, addr: u64, value: u32) -> Self {
        Self { header: SlotHeader::new(Opcode::Write), events, addr, value }
    }
    /// Decode (total).
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        Self { header: SlotHeader::decode(b), events: Events::decode(b), addr: u64_at(b, 0x10), value: u32_at(b, 0x18) }
    }
    /// Encode.
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = base(Opcode::Write, Some(self.header), &self.events);
        b[0x10..0x18].copy_from_slice(&self.addr.to_le_bytes());
        b[0x18..0x1C].copy_from_slice(&self.value.to_le_bytes());
        b
    }
}

/// NOTIFY (0x6A): post a custom INFER_STATUS record with `sub_id` (e.g. 7 = tensor
/// completion, `value` = var id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyOp {
    pub header: SlotHeader,
    pub events: Events,
    pub sub_id: u16,
    pub value: u32,
}

impl NotifyOp {
    /// A NOTIFY with a default header.
    pub fn new(events: Events, sub_id: u16, value: u32) -> Self {
        Self { header: SlotHeader::new(Opcode::Notify), events, sub_id, value }
    }
    /// Decode (total).
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        Self {
            header: SlotHeader::decode(b),
            events: Events::decode(b),
            sub_id: u16_at(b, 0x0C),
            value: u32_at(b, 0x10),
        }
    }
    /// Encode.
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = base(Opcode::Notify, Some(self.header), &self.events);
        b[0x0C..0x0E].copy_from_slice(&self.sub_id.to_le_bytes());
        b[0x10..0x14].copy_from_slice(&self.value.to_le_bytes());
        b
    }
}

/// All-to-allv's operands (modeled): each rank's metadata tensor holds `4 × group size`
/// little-endian u32 — row 0 the element counts it sends to each rank, row 1 where in its
/// input each starts, row 2 the counts it receives from each rank, row 3 where in its output
/// each goes (the layout of NKI's `all_to_all_v` metadata tensor). In the pseudo-instruction
/// (`slot::TriggerCollective`) the metadata var id is the u32 at +0x24 and the output's element
/// count the u32 at +0x28 (bytes of its `reserved`); in the device form ([`CollectiveOp`]) the
/// metadata's device address is at +0x30 and the output's element count at +0x38.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllToAllV {
    pub meta_tensor_id: u32,
    pub out_elements: u32,
}

impl AllToAllV {
    /// Metadata bytes for a group of `n`.
    pub fn meta_bytes(n: usize) -> usize {
        16 * n
    }

    /// The operands of pseudo-instruction `t`.
    pub fn of(t: &crate::slot::TriggerCollective) -> Self {
        let r = &t.reserved;
        AllToAllV {
            meta_tensor_id: u32::from_le_bytes([r[3], r[4], r[5], r[6]]),
            out_elements: u32::from_le_bytes([r[7], r[8], r[9], r[10]]),
        }
    }

    /// Writes the operands into pseudo-instruction `t`.
    pub fn set(&self, t: &mut crate::slot::TriggerCollective) {
        t.reserved[3..7].copy_from_slice(&self.meta_tensor_id.to_le_bytes());
        t.reserved[7..11].copy_from_slice(&self.out_elements.to_le_bytes());
    }
}

/// [`CollectiveOp::peer`] of a rank that sends to no one (a group has at most 255 ranks, so
/// 255 is never a group rank).
pub const NO_PEER: u8 = 0xFF;

/// SB2SB_COLLECTIVE (0xBF), modeled payload: the collective a lowered
/// PSEUDO_TRIGGER_COLLECTIVE becomes. Participants meet by (`comm_id`, per-NC sequence
/// number); `rank` orders them within the group of `group_size`.
///
/// ```text
/// +0x0C op u8 | +0x0D dtype u8 | +0x0E ctype u8 | +0x0F rank u8 | +0x10 group_size u8 | +0x11 peer u8
/// +0x12..0x14 reserved | +0x14 comm_id u32 | +0x18 src device address u64 | +0x20 dst device address u64
/// +0x28 num_elements u64 | +0x30 meta device address u64 | +0x38 out_elements u64
/// ```
///
/// `peer` is the group rank a send/receive or permute sends to ([`NO_PEER`]: none; the other
/// kinds carry [`NO_PEER`]); `meta` and `out_elements` are all-to-allv's ([`AllToAllV`]; 0 for
/// the other kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectiveOp {
    pub header: SlotHeader,
    pub events: Events,
    pub op: u8,
    pub dtype: u8,
    pub ctype: u8,
    pub rank: u8,
    pub group_size: u8,
    /// Send/receive and permute: the group rank this rank sends to.
    pub peer: u8,
    pub comm_id: u32,
    pub src: u64,
    pub dst: u64,
    /// Elements per rank's input.
    pub num_elements: u64,
    /// All-to-allv: the metadata's device address.
    pub meta: u64,
    /// All-to-allv: the output's element count.
    pub out_elements: u64,
}

impl CollectiveOp {
    /// Decode (total).
    pub fn decode(b: &[u8; SLOT_BYTES]) -> Self {
        Self {
            header: SlotHeader::decode(b),
            events: Events::decode(b),
            op: b[0x0C],
            dtype: b[0x0D],
            ctype: b[0x0E],
            rank: b[0x0F],
            group_size: b[0x10],
            peer: b[0x11],
            comm_id: u32_at(b, 0x14),
            src: u64_at(b, 0x18),
            dst: u64_at(b, 0x20),
            num_elements: u64_at(b, 0x28),
            meta: u64_at(b, 0x30),
            out_elements: u64_at(b, 0x38),
        }
    }
    /// Encode.
    pub fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = base(Opcode::Sb2sbCollective, Some(self.header), &self.events);
        b[0x0C] = self.op;
        b[0x0D] = self.dtype;
        b[0x0E] = self.ctype;
        b[0x0F] = self.rank;
        b[0x10] = self.group_size;
        b[0x11] = self.peer;
        b[0x14..0x18].copy_from_slice(&self.comm_id.to_le_bytes());
        b[0x18..0x20].copy_from_slice(&self.src.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&self.dst.to_le_bytes());
        b[0x28..0x30].copy_from_slice(&self.num_elements.to_le_bytes());
        b[0x30..0x38].copy_from_slice(&self.meta.to_le_bytes());
        b[0x38..0x40].copy_from_slice(&self.out_elements.to_le_bytes());
        b
    }
}

/// A slot with only header and events (EVENT_SEMAPHORE, NOP, SYNC/halt, EXTENDED_INST).
pub fn events_only(op: Opcode, header_debug_cmd: u8, events: Events) -> [u8; SLOT_BYTES] {
    let mut h = SlotHeader::new(op);
    h.debug_cmd = header_debug_cmd;
    base(op, Some(h), &events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn collective_codes_map_onto_the_one_dtype_and_op() {
        for d in reduce::DType::ALL {
            assert_eq!(dtype::of(dtype::code(d)), Some(d));
            assert_eq!(dtype::size(dtype::code(d)), Some(d.size()));
        }
        for o in reduce::ReduceOp::ALL {
            assert_eq!(alu::op(alu::code(o)), Some(o));
        }
        // Every other code is refused, and the codes are the documented / modeled numbers.
        assert_eq!((0..=u8::MAX).filter(|&c| dtype::of(c).is_some()).count(), reduce::DType::ALL.len());
        assert_eq!((0..=u8::MAX).filter(|&c| alu::op(c).is_some()).count(), reduce::ReduceOp::ALL.len());
        assert_eq!((dtype::code(reduce::DType::Bf16), dtype::code(reduce::DType::F32)), (0x06, 0x0A));
        assert_eq!(alu::code(reduce::ReduceOp::Min), 0x0C);
    }

    #[test]
    fn roundtrips() {
        let w = WriteOp::new(Events::wait_gt(3, 0), 0xFFF_F0D0_1038, 4);
        assert_eq!(WriteOp::decode(&w.encode()), w);
        assert_eq!(w.encode()[0], 0x69);
        let n = NotifyOp::new(Events::NONE, 7, 12);
        assert_eq!(NotifyOp::decode(&n.encode()), n);
        let c = CollectiveOp {
            header: SlotHeader::new(Opcode::Sb2sbCollective),
            events: Events::NONE,
            op: alu::ADD,
            dtype: dtype::FP32,
            ctype: ctype::ALL_REDUCE,
            rank: 1,
            group_size: 2,
            peer: 0,
            comm_id: 77,
            src: 0x1000,
            dst: 0x2000,
            num_elements: 32,
            meta: 0,
            out_elements: 0,
        };
        assert_eq!(CollectiveOp::decode(&c.encode()), c);
        assert_eq!(c.encode()[0], 0xBF);
        // The peer is the byte after the group size; the reserved bytes stay zero.
        let p = CollectiveOp { ctype: ctype::PERMUTE, peer: 0x5A, ..c }.encode();
        assert_eq!((p[0x0E], p[0x10], p[0x11], p[0x12], p[0x13]), (0x06, 2, 0x5A, 0, 0));
        let v = CollectiveOp { ctype: ctype::ALL_TO_ALLV, meta: 0x3000, out_elements: 48, ..c };
        assert_eq!(CollectiveOp::decode(&v.encode()), v);
        assert_eq!((u64_at(&v.encode(), 0x30), u64_at(&v.encode(), 0x38)), (0x3000, 48));
        // The pseudo-instruction's all-to-allv operands sit in its reserved bytes at +0x24/+0x28.
        let mut t = crate::slot::TriggerCollective::decode(&[0u8; SLOT_BYTES]);
        AllToAllV { meta_tensor_id: 5, out_elements: 0x0102_0304 }.set(&mut t);
        let b = t.encode();
        assert_eq!((u32_at(&b, 0x24), u32_at(&b, 0x28)), (5, 0x0102_0304));
        assert_eq!(AllToAllV::of(&t), AllToAllV { meta_tensor_id: 5, out_elements: 0x0102_0304 });
    }

    #[test]
    fn collective_kinds_are_named_once() {
        let named: Vec<u8> = (0..=u8::MAX).filter(|&c| ctype::name(c).is_some()).collect();
        assert_eq!(named, ctype::ALL.to_vec());
        assert_eq!(ctype::name(ctype::ALL_REDUCE), Some("all_reduce"));
        assert_eq!(ctype::ALL.iter().filter(|&&c| ctype::reduces(c)).count(), 2);
        assert_eq!(ctype::ALL.iter().filter(|&&c| ctype::has_peer(c)).collect::<Vec<_>>(), vec![&0x04, &0x06]);
    }

    proptest! {
        #[test]
        fn decoders_total(v in proptest::collection::vec(any::<u8>(), 64)) {
            let mut b = [0u8; SLOT_BYTES];
            b.copy_from_slice(&v);
            let _ = WriteOp::decode(&b).encode();
            let _ = NotifyOp::decode(&b).encode();
            let _ = CollectiveOp::decode(&b).encode();
        }
    }
}
