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
//! - a queue's programming and doorbells (`queue_init.trace`) = hal's `udma::program_queue` and
//!   `udma::ring_doorbells` with the live trace's engine, queue, ring addresses, length and
//!   count, write for write;
//! - each NC reset and the device resets (`nc_reset.trace`, `device_reset.trace`) = hal's
//!   `fwio::reset` of that NC / the device, on the reset registers (a poll counted once), but
//!   for hal's explained V3/V4 write of the reset map's HIGH word.
//!
//! The semaphore fixtures are facts for reading.

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

// ---- the live traffic against hal's own sequences ----

mod support;

use std::sync::Arc;

use hal::fwio::{self, PollTiming, ResetKind};
use hal::{udma, Device, DeviceOptions};
use sim::{SimConfig, SimDevice, Timing};
use support::{Access, AccessLog, AccessRecording};

/// hal's accesses for `f` on a fresh simulated device of `arch` (opened, not recorded).
fn hal_accesses(arch: &'static Arch, f: impl FnOnce(&Device)) -> Vec<Acc> {
    let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let log: AccessLog = Default::default();
    let opts = DeviceOptions { hbm_limit: Some(1 << 26), poll: PollTiming::fast(), ..Default::default() };
    let dev = Device::open(Arc::new(AccessRecording(sim, log.clone())), opts).unwrap();
    platform::sync::lock(&log).clear();
    f(&dev);
    let got = std::mem::take(&mut *platform::sync::lock(&log));
    got.into_iter()
        .map(|a| match a {
            Access::R(o, v) => Acc::R(o, v),
            Access::W(o, v) => Acc::W(o, v),
        })
        .collect()
}

/// The accesses to the misc-RAM reset registers (map, map high, request, doorbell, status),
/// split into one reset each (a reset starts with a write after a read), with consecutive
/// reads of one register (a poll, as long as the firmware took) counted once.
fn resets(arch: &Arch, acc: &[Acc]) -> Vec<Vec<Acc>> {
    let names = [
        "misc_ram.reset_map",
        "misc_ram.reset_map_high",
        "misc_ram.reset_request",
        "misc_ram.trigger",
        "misc_ram.fw_status",
    ];
    let wanted = |o: u64| arch.lookup(0, o).is_ok_and(|r| names.contains(&r.name.as_str()));
    let mut out: Vec<Vec<Acc>> = Vec::new();
    let mut last_was_read = true;
    for a in acc {
        let (o, is_read) = match *a {
            Acc::R(o, _) => (o, true),
            Acc::W(o, _) => (o, false),
        };
        if !wanted(o) {
            continue;
        }
        if !is_read && last_was_read {
            out.push(Vec::new());
        }
        let Some(cur) = out.last_mut() else { continue };
        let polled_again = is_read
            && cur.iter().rev().find(|x| matches!(x, Acc::R(..))).is_some_and(|x| matches!(x, Acc::R(p, _) if *p == o))
            && matches!(cur.last(), Some(Acc::R(..)));
        if !polled_again {
            // A read by offset (its value is the device's), a write by offset and value.
            cur.push(match *a {
                Acc::R(o, _) => Acc::R(o, 0),
                w => w,
            });
        }
        last_was_read = is_read;
    }
    out
}

/// hal's reset `ours` without its write of the reset map's HIGH word where the live kmod's
/// reset `live` has none: on V3/V4 hal writes HIGH (0: the top-level DMA groups stay out of an
/// NC reset) as the newer kmod does (`r:neuron_fw_io.h`); the pinned 2.24 kmod writes only LOW
/// (docs/hardware-safety.md, the explained table's `reset_map_high` rows). The one difference
/// allowed: a single write of 0, on V3/V4 only.
fn without_high_map(arch: &Arch, live: &[Acc], ours: &[Acc]) -> Vec<Acc> {
    let high =
        |a: &Acc| matches!(a, Acc::W(o, _) if arch.lookup(0, *o).is_ok_and(|r| r.name == "misc_ram.reset_map_high"));
    if live.iter().any(high) {
        return ours.to_vec();
    }
    let dropped: Vec<&Acc> = ours.iter().filter(|a| high(a)).collect();
    assert!(
        dropped.is_empty() || (arch.name != "sunda" && dropped.len() == 1 && matches!(dropped[0], Acc::W(_, 0))),
        "{}: hal's reset-map HIGH writes {dropped:?}",
        arch.name
    );
    ours.iter().filter(|a| !high(a)).copied().collect()
}

#[test]
fn the_live_nc_and_device_resets_are_hals() {
    for arch in ARCHES {
        let live = resets(arch, &accesses(&dir("kmod-guest", arch).join("nc_reset.trace")));
        // NC_RESET of each NC in turn: hal's reset of that NC's map, register for register.
        assert_eq!(live.len(), arch.counts.ncs as usize, "{}: one reset per NC", arch.name);
        for (nc, l) in live.iter().enumerate() {
            let ours = resets(
                arch,
                &hal_accesses(arch, |d| {
                    fwio::reset(arch, &d.regs(), ResetKind::Ncs(1 << nc), &PollTiming::fast()).unwrap()
                }),
            );
            assert_eq!(ours.len(), 1, "{}: hal's NC {nc} reset is one reset", arch.name);
            let ours = without_high_map(arch, l, &ours[0]);
            assert_eq!(l, &ours, "{}: NC {nc}: the kmod's reset (left) is not hal's (right)", arch.name);
        }
        // The whole device, through NC_RESET and the deprecated DEVICE_RESET: hal's device reset.
        let live = resets(arch, &accesses(&dir("kmod-guest", arch).join("device_reset.trace")));
        let ours = resets(
            arch,
            &hal_accesses(arch, |d| fwio::reset(arch, &d.regs(), ResetKind::Device, &PollTiming::fast()).unwrap()),
        );
        assert_eq!(live.len(), 2, "{}: two device resets", arch.name);
        for (i, l) in live.iter().enumerate() {
            assert_eq!(l, &ours[0], "{}: device reset {i}: the kmod's (left) is not hal's (right)", arch.name);
        }
        println!("{}: {} NC resets and 2 device resets as hal's", arch.name, arch.counts.ncs);
    }
}

#[test]
fn the_live_queue_programming_and_doorbells_are_hals() {
    for arch in ARCHES {
        let path = dir("kmod-guest", arch).join("queue_init.trace");
        let text = std::fs::read_to_string(&path).unwrap();
        let op = text.lines().find(|l| l.starts_with("# op")).unwrap_or_else(|| panic!("{}: no op", path.display()));
        let num_after = |word: &str| -> u64 {
            let rest = op.split(word).nth(1).unwrap_or_else(|| panic!("{op}: no {word}"));
            let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            n.parse().unwrap_or_else(|_| panic!("{op}: {word} N"))
        };
        let (e, q) = (num_after(" engine "), num_after(" queue "));
        // The writes up to the doorbells (the state reads after them are the kmod's ioctl's).
        let acc = accesses(&path);
        let writes: Vec<Acc> = acc.iter().copied().filter(|a| matches!(a, Acc::W(..))).collect();
        let name = |o: u64| arch.lookup(0, o).map(|r| r.name).unwrap_or_default();
        let last = writes.iter().rposition(|a| matches!(a, Acc::W(o, _) if name(*o).ends_with(".tail_inc"))).unwrap();
        let live = &writes[..=last];
        let value_of = |suffix: &str| -> u32 {
            live.iter()
                .find_map(|a| match a {
                    Acc::W(o, v) if name(*o).ends_with(suffix) => Some(*v),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{}: no write of {suffix}", arch.name))
        };
        let base = |half: &str| {
            (value_of(&format!("{half}.q[{q}].ring_base_hi")) as u64) << 32
                | value_of(&format!("{half}.q[{q}].ring_base_lo")) as u64
        };
        let (m2s, s2m) = (base("m2s"), base("s2m"));
        let ndesc = value_of(&format!("m2s.q[{q}].ring_len"));
        let kicked = value_of(&format!("m2s.q[{q}].tail_inc"));
        let ours = hal_accesses(arch, |d| {
            let regs = d.regs();
            udma::program_queue(&regs, e, q, m2s, s2m, ndesc).unwrap();
            udma::ring_doorbells(&regs, e, q, kicked).unwrap();
        });
        let ours: Vec<Acc> = ours.into_iter().filter(|a| matches!(a, Acc::W(..))).collect();
        assert_eq!(
            live,
            &ours[..],
            "{}: engine {e} queue {q}: the kmod's writes (left) are not hal's (right)",
            arch.name
        );
        println!("{}: DMA_QUEUE_INIT + COPY_START: {} writes as hal's", arch.name, live.len());
    }
}
