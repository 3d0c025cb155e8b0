//! In-memory formats shared by driver and device. Every decoder is total:
//! any bytes decode to a value (unknown encodings are kept raw), never a panic.

pub mod device_ops;
pub mod dge;
pub mod error;
pub mod fwio;
pub mod neff_header;
pub mod notify;
pub mod slot;
pub mod ucpl;
pub mod udma;
