//! Shutdown hooks: what `nrt_close` must stop besides the runtime. An area with
//! process-global state of its own (execution-unit workers, communicators) registers its
//! hook when it first makes that state; `nrt_close` runs every registered hook, in
//! registration order, before it closes the runtime. The core knows no area.

use std::sync::Mutex;

use super::entry::lock;

/// A registered hook: a name (one registration per name) and what to run.
struct Hook {
    name: &'static str,
    run: fn(),
}

static HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());

/// Run `run` at every later `nrt_close` (until the process exits). Registering the same
/// `name` again keeps the first registration, so an area may call this on every first use
/// after an init.
pub(crate) fn on_close(name: &'static str, run: fn()) {
    let mut hooks = lock(&HOOKS);
    if !hooks.iter().any(|h| h.name == name) {
        hooks.push(Hook { name, run });
    }
}

/// Run every registered hook, oldest first. A hook's panic is contained (and the next hooks
/// still run): `nrt_close` returns nothing and must finish.
pub(crate) fn run_all() {
    run(|_| true);
}

/// Run the registered hooks whose name passes `which`, oldest first.
fn run(which: impl Fn(&str) -> bool) {
    let hooks: Vec<(&'static str, fn())> =
        lock(&HOOKS).iter().filter(|h| which(h.name)).map(|h| (h.name, h.run)).collect();
    for (name, run) in hooks {
        if std::panic::catch_unwind(run).is_err() {
            tracing::error!(hook = name, "nrt_close: a shutdown hook panicked");
        }
    }
}

/// Run only the hooks whose name starts with `prefix` (tests: other tests' hooks stay).
#[cfg(test)]
pub(crate) fn run_prefixed(prefix: &str) {
    run(|n| n.starts_with(prefix));
}

/// Names of the registered hooks, oldest first.
#[cfg(test)]
pub(crate) fn registered() -> Vec<&'static str> {
    lock(&HOOKS).iter().map(|h| h.name).collect()
}
