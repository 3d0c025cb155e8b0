//! In-memory formats shared by driver and device. Every decoder is total:
//! any bytes decode to a value (unknown encodings are kept raw), never a panic.

pub mod neff_header;
pub mod slot;
