//! Capture the `tracing` output of one test thread, deterministically, in a test binary whose
//! tests run in parallel threads.
//!
//! A scoped subscriber (`tracing::subscriber::with_default`) is not deterministic there:
//! tracing caches each log site's interest globally, and a site first reached by another test
//! thread while only the no-op global dispatcher existed can keep "never" even after the
//! scoped subscriber registered (a race in tracing-core's registration fast path) — a log line
//! then goes missing in one run of many. Here one global subscriber (DEBUG and up) is
//! installed before anything logs, so every site's interest is computed against it, and its
//! writer appends to the current thread's capture buffer, if it has one.
//!
//! Rule for a binary that includes this file: **every test calls [`init`] before anything
//! that may log** (the crates' test helpers that create devices or runtimes do it for them).
//!
//! Included with `#[path]` by the test binaries that check log lines (sim's `typed`,
//! runtime's `fault_paths`); it has no crate of its own.

#![allow(dead_code)]

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;

thread_local! {
    static CAPTURE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Writes into the current thread's capture buffer; discards when it has none.
struct ThreadSink;

impl Write for ThreadSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = c.borrow_mut().as_mut() {
                buf.extend_from_slice(b);
            }
        });
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Install the process's global subscriber (once; later calls wait for the first).
pub fn init() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(|| ThreadSink)
            .finish();
        tracing::subscriber::set_global_default(sub).expect("the test binary's only global subscriber");
    });
}

/// Run `f` with this thread's log captured; returns its result and the log text.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    init();
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let r = f();
    let buf = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, String::from_utf8_lossy(&buf).into_owned())
}
