//! The sequencer instruction set shared by the runtime's lowering, the NEFF tools and the
//! simulator's engines:
//!
//! - [`slot`]: the 64-byte sequencer slot (header, events block, instruction payloads) and the
//!   8-byte SP slot of `sp.bin`;
//! - [`device_ops`]: the device forms of lowered pseudo-instructions.
//!
//! Every decoder is total: any bytes decode to a value (unknown encodings are kept raw), never
//! a panic. Pure data: no I/O, no unsafe.

#![forbid(unsafe_code)]

pub mod device_ops;
pub mod slot;

/// The collective element type and reduction operator the collective encodings
/// ([`device_ops::dtype`], [`device_ops::alu`]) stand for.
pub use reduce::{DType, ReduceOp};
