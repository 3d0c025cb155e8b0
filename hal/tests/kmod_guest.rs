//! The vendor kmod's live register traffic (`hal/tests/kmod-guest/<arch>/`: the unmodified
//! module in a QEMU guest against `neuron-vfio sim-serve`, recorded by `--mmio-trace`,
//! `scripts/dev/kmod-guest/`) against the oracle's traces of the same operations
//! (`hal/tests/kmod-oracle/<arch>/`: the same kmod files compiled in userspace, which
//! `kmod_oracle.rs` compares with hal's sequences). What is comparable:
//!
//! - engine 0's init in the probe (`probe.trace`) = the oracle's `engine_init-e0.trace`: the
//!   same writes at the same offsets in the same order. Where the kmod reads a register and
//!   writes it (or its abort-mask sibling) back with bits set, the oracle's fake device read 0
//!   and the simulator its register's state (an interrupt mask's reset value): a differing live
//!   value must be the live read ORed with the oracle's value (the bits the kmod sets are the
//!   same);
//! - an NQ's programming (`nq_init.trace`, NC1's error NQ) = the oracle's `nq_init-error.trace`
//!   (NC1, error, engine 0): the same registers in the same order (base high, base low, size);
//!   the values are each run's own ring address and size, and the high word of a host ring is the
//!   arch's host base.
//!
//! The live traces carry no register the oracle's do not name for these operations; the queue,
//! reset and semaphore fixtures are facts for reading (their addresses are the guest's).

use std::path::{Path, PathBuf};

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};

const ARCHES: [&Arch; 3] = [&SUNDA, &CAYMAN, &MARIANA];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acc {
    R(u64, u32),
    W(u64, u32),
}

fn dir(which: &str, arch: &Arch) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(which).join(arch.name)
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s}"))
}

/// The BAR0 accesses of a trace (oracle lines `R|W 0 OFF VAL`, guest lines with a register
/// name and a repeat count after them; waits and comments skipped).
fn accesses(path: &Path) -> Vec<Acc> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["R", "0", off, val, ..] => Some(Acc::R(hex(off), hex(val) as u32)),
                ["W", "0", off, val, ..] => Some(Acc::W(hex(off), hex(val) as u32)),
                _ => None,
            }
        })
        .collect()
}

/// The writes of `acc` at offsets in `offsets`, each with the value of the kmod's last read
/// before it, if it read since its previous write at another offset (the value a
/// read-modify-write, or a write of the same value to a sibling register, started from).
fn writes_at(acc: &[Acc], offsets: &std::collections::BTreeSet<u64>) -> Vec<(u64, u32, Option<u32>)> {
    let mut out = Vec::new();
    let mut last_read: Option<u32> = None;
    for a in acc {
        match *a {
            Acc::R(_, v) => last_read = Some(v),
            Acc::W(o, v) => {
                if offsets.contains(&o) {
                    out.push((o, v, last_read));
                }
            }
        }
    }
    out
}

#[test]
fn the_live_probe_inits_engine_0_as_the_oracle_traced_it() {
    for arch in ARCHES {
        let oracle = accesses(&dir("kmod-oracle", arch).join("engine_init-e0.trace"));
        let live = accesses(&dir("kmod-guest", arch).join("probe.trace"));
        let offsets = oracle.iter().filter_map(|a| if let Acc::W(o, _) = a { Some(*o) } else { None }).collect();
        let o = writes_at(&oracle, &offsets);
        let l = writes_at(&live, &offsets);
        assert_eq!(o.len(), l.len(), "{}: {} oracle writes, {} live ones", arch.name, o.len(), l.len());
        let mut rmw = 0;
        for (i, (ow, lw)) in o.iter().zip(&l).enumerate() {
            assert_eq!(ow.0, lw.0, "{}: write {i} at {:#x} in the oracle, {:#x} live", arch.name, ow.0, lw.0);
            match (ow.2, lw.2) {
                (Some(0), Some(read)) if ow.1 != lw.1 => {
                    rmw += 1;
                    assert_eq!(
                        lw.1,
                        read | ow.1,
                        "{}: {:#x}: read {read:#x}, wrote {:#x}; oracle (read 0) wrote {:#x}",
                        arch.name,
                        ow.0,
                        lw.1,
                        ow.1
                    );
                }
                _ => assert_eq!(
                    ow.1, lw.1,
                    "{}: write {i} at {:#x}: oracle {:#x}, live {:#x}",
                    arch.name, ow.0, ow.1, lw.1
                ),
            }
        }
        println!("{}: engine 0 init: {} writes as the oracle's ({rmw} read-modify-writes)", arch.name, o.len());
    }
}

#[test]
fn the_live_nq_programming_is_the_oracles() {
    for arch in ARCHES {
        let oracle = accesses(&dir("kmod-oracle", arch).join("nq_init-error.trace"));
        let live = accesses(&dir("kmod-guest", arch).join("nq_init.trace"));
        let offs: Vec<u64> = oracle
            .iter()
            .map(|a| match a {
                Acc::W(o, _) | Acc::R(o, _) => *o,
            })
            .collect();
        let set = offs.iter().copied().collect();
        let l = writes_at(&live, &set);
        let lo: Vec<u64> = l.iter().map(|w| w.0).collect();
        assert_eq!(lo, offs, "{}: NC1's error NQ: the live kmod's registers in order", arch.name);
        // Base high first: the host base's high word (a host ring); the size as asked (64 KiB).
        let host_hi = (arch.consts.host_base >> 32) as u32;
        assert_eq!(l[0].1 & host_hi, host_hi, "{}: base high {:#x} of a host ring", arch.name, l[0].1);
        assert_eq!(l[2].1, 64 * 1024, "{}: size", arch.name);
        println!("{}: NQ init: {} writes at the oracle's registers", arch.name, l.len());
    }
}
