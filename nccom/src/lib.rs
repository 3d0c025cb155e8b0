//! `nccom-test`: the Neuron SDK's collectives benchmark and check (its command line, table and
//! bus-bandwidth figures; docs/collectives.md), run as device collectives: one worker process
//! per rank, each a runtime client on its own logical NeuronCore of a device the workers share
//! through the broker (docs/sharing.md), loading a collectives NEFF built at run time for the
//! operation, size and data type and executing it through the runtime.
//!
//! The crate is the whole tool; the `nccom-test` binary and `neuron-vfio nccom-test` (crate
//! `cli`) call [`main`].

pub mod args;
pub mod data;
pub mod launch;
pub mod model;
pub mod multi;
pub mod nodes;
pub mod ops;
pub mod report;
pub mod worker;

use std::ffi::OsString;

use clap::Parser;

/// Run the command line `args` (without the program name). `prefix` is what re-runs this
/// command from the current executable (`["nccom-test"]` under `neuron-vfio`, nothing for the
/// `nccom-test` binary). Returns the exit status: 0 when every row ran and passed its check,
/// 1 when a worker or a check failed (each failure names its rank), 2 for a command line that
/// cannot run.
pub fn main(args: Vec<OsString>, prefix: &[OsString]) -> i32 {
    let parsed = match args::Args::try_parse_from(std::iter::once(OsString::from("nccom-test")).chain(args.clone())) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let plan = match parsed.plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nccom-test: {e}");
            return 2;
        }
    };
    if let [addr, job] = &parsed.node[..] {
        let (Some(m), Ok(job)) = (&plan.multi, job.parse::<u64>()) else {
            eprintln!("nccom-test: --node is for the node processes of a multi-host run");
            return 2;
        };
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("nccom-test: cannot find this program to start the workers: {e}");
                return 1;
            }
        };
        // The node's own command line: the user's, without `--node ADDR JOB`.
        let user: Vec<OsString> = strip_node(&args);
        return match multi::node(&plan, m, &exe, prefix, &user, addr, job) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("nccom-test: {e}");
                1
            }
        };
    }
    if let [rank, job] = parsed.worker[..] {
        // A failure is reported on stdout, where the launcher names the rank.
        return match worker::run(&plan, rank as usize, job) {
            Ok(()) => 0,
            Err(_) => 1,
        };
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("nccom-test: cannot find this program to start the workers: {e}");
            return 1;
        }
    };
    let run = match &plan.multi {
        Some(m) => multi::run(&plan, m, &exe, prefix, &args),
        None => launch::run(&plan, &exe, prefix, &args),
    };
    let out = match run {
        Ok(o) => o,
        Err(
            e @ (launch::LaunchError::PrivateSim(_)
            | launch::LaunchError::Launcher { .. }
            | launch::LaunchError::Collector { .. }),
        ) => {
            eprintln!("nccom-test: {e}");
            return 2;
        }
        Err(e) => {
            eprintln!("nccom-test: {e}");
            return 1;
        }
    };
    if let Some(path) = &plan.json {
        let j = report::json(&plan, &out.rows, &out.errors, &out.device, &out.algorithm);
        if let Err(e) = std::fs::write(path, format!("{j:#}\n")) {
            eprintln!("nccom-test: {}: {e}", path.display());
            return 1;
        }
    }
    if out.errors.is_empty() {
        return 0;
    }
    for e in &out.errors {
        eprintln!("nccom-test: {e}");
    }
    println!("{} errors found - test failed", out.errors.len());
    1
}

/// `args` without the internal `--node ADDR JOB`.
fn strip_node(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--node" {
            it.next();
            it.next();
            continue;
        }
        out.push(a.clone());
    }
    out
}
