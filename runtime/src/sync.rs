//! The synchronisation primitives [`crate::lanes`] is written against (std here, with the
//! poison-tolerant [`platform::sync`] helpers; the loom model test substitutes loom's).

pub use platform::sync::{lock, wait};
pub use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
pub use std::sync::{Condvar, Mutex, MutexGuard};
