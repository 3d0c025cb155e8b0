//! The synchronisation primitives [`crate::lanes`] is written against (std here; the loom
//! model test substitutes loom's).

pub use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
pub use std::sync::{Condvar, Mutex, MutexGuard};
