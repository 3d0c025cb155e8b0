//! The SP sequencer's own slot format (`sp.bin`, docs/facts/libnrt.md §2.4 "SP sequencer"): 8
//! bytes, a header byte {opcode:7, phase:1} and 7 operand bytes, unlike the 64-byte slots of
//! the other engines.

use csr_maps::formats::le::{array_at as arr, put};

/// Bytes in one SP (`sp.bin`) slot (the number lives in csr-maps).
pub const SP_SLOT_BYTES: usize = csr_maps::consts::seq::SP_SLOT_BYTES;

macro_rules! sp_opcodes {
    ($( $var:ident = $code:literal => $name:literal, )*) => {
        /// SP sequencer opcodes (`sp.bin`, 7-bit field) (§2.4 "SP sequencer").
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum SpOpcode {
            $( $var, )*
            Raw(u8),
        }
        impl SpOpcode {
            pub const ALL: &'static [SpOpcode] = &[$(SpOpcode::$var,)*];
            pub fn from_code(c: u8) -> Self {
                match c & 0x7F {
                    $( $code => SpOpcode::$var, )*
                    c => SpOpcode::Raw(c),
                }
            }
            pub fn code(self) -> u8 {
                match self {
                    $( SpOpcode::$var => $code, )*
                    SpOpcode::Raw(c) => c & 0x7F,
                }
            }
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( SpOpcode::$var => Some($name), )*
                    SpOpcode::Raw(_) => None,
                }
            }
        }
    };
}

sp_opcodes! {
    Write8Ind = 0x04 => "WRITE8_IND",
    Write32Ind = 0x05 => "WRITE32_IND",
    Write8Dir = 0x08 => "WRITE8_DIR",
    NotifyHalt = 0x10 => "NOTIFY_HALT",
    WaitCycles = 0x20 => "WAIT_CYCLES",
    WaitEventSet = 0x24 => "WAIT_EVENT_SET",
    WaitEventSetM = 0x25 => "WAIT_EVENT_SET_M",
    BranchU = 0x30 => "BRANCH_U",
    BranchCEventSet = 0x34 => "BRANCH_C_EVENT_SET",
    BranchCCntrZ = 0x38 => "BRANCH_C_CNTR_Z",
    BranchCCntrNz = 0x39 => "BRANCH_C_CNTR_NZ",
    SetCntr = 0x40 => "SET_CNTR",
    DecrCntr = 0x41 => "DECR_CNTR",
    ClrAllEvents = 0x50 => "CLR_ALL_EVENTS",
    ClrEvent = 0x51 => "CLR_EVENT",
    SetAr = 0x60 => "SET_AR",
}

/// One 8-byte SP slot: header byte {opcode:7 (bits 0..6), phase:1 (bit 7)} and 7 operand bytes
/// whose layout the public sources do not give (kept verbatim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpSlot {
    pub opcode: SpOpcode,
    pub phase: bool,
    pub operands: [u8; 7],
}

impl SpSlot {
    pub fn decode(b: &[u8; SP_SLOT_BYTES]) -> Self {
        SpSlot { opcode: SpOpcode::from_code(b[0]), phase: b[0] & 0x80 != 0, operands: arr(b, 1) }
    }
    pub fn encode(&self) -> [u8; SP_SLOT_BYTES] {
        let mut b = [0u8; SP_SLOT_BYTES];
        b[0] = self.opcode.code() | if self.phase { 0x80 } else { 0 };
        put(&mut b, 1, &self.operands);
        b
    }
}
