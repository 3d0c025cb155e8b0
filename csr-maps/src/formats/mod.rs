//! In-memory formats shared by driver and device. Every decoder is total:
//! any bytes decode to a value (unknown encodings are kept raw), never a panic.

pub mod dge;
pub mod error;
pub mod fwio;
pub mod le;
pub mod notify;
pub mod ucpl;
pub mod udma;
