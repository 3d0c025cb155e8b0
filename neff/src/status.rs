//! `NRT_STATUS`: re-exported from the `nrt-status` leaf crate (the one status table).

pub use nrt_status::{NrtStatus, Status};
