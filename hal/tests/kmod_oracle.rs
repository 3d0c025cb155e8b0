//! hal's register sequences against the kernel module's own (docs/hardware-safety.md, "The
//! kmod as an oracle"). The golden traces in `hal/tests/kmod-oracle/<arch>/` are what the
//! public kmod's code does, compiled unmodified in userspace by `scripts/dev/kmod-oracle`; this
//! test runs hal's counterpart of each traced operation with the same parameters on the
//! simulator, records every BAR0 access, and diffs the two (writes by offset and value, reads
//! by offset: a read's value is the device's). Every difference must be a row of the explained
//! table in docs/hardware-safety.md, and every row must explain a difference.
//!
//! The host copies (`memcpy_*`) also carry the descriptors the kmod wrote into its fresh ring
//! (`M <half> <index> <word0> <word1> <address>` lines): hal's descriptors for the same copy
//! must be those, word for word, with buffer addresses compared relative to the copy's source,
//! destination and completion marker (each side's own allocations).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use csr_maps::consts::{fwio as fwc, udma as udc};
use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use hal::fwio::{self, PollTiming, ResetKind};
use hal::ring::Xfer;
use hal::{nq, udma, Device, DeviceOptions, NqOwner};
use sim::{SimConfig, SimDevice, Timing};
use support::{Access, AccessLog, AccessRecording};

/// The parameters of the traced operations (`scripts/dev/kmod-oracle/oracle.c`).
const QUEUE: (u64, u64) = (1, 3);
const QUEUE_M2S: u64 = 0x0000_0012_3456_7000;
const QUEUE_S2M: u64 = 0x0000_00AB_CDEF_8000;
const QUEUE_DESCS: u32 = 256;
const PARK: (u64, u64) = (0, 2);
const NQ_NC: usize = 1;
const NQ_PA: u64 = 0x0000_0001_2345_6000;
const NQ_BYTES: u64 = 4096;
const SEM_NC: usize = 1;
const SEM: u64 = 5;
const EVENT: u64 = 7;

const ARCHES: [&Arch; 3] = [&SUNDA, &CAYMAN, &MARIANA];

fn fixtures(arch: &Arch) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kmod-oracle").join(arch.name)
}

/// One golden trace: its operation, parameters (`key=value` of the `# op` line), accesses and
/// the descriptors it wrote.
struct Trace {
    params: BTreeMap<String, String>,
    accesses: Vec<Access>,
    descs: Vec<Desc>,
}

/// One descriptor as written into a ring: half (`m2s`/`s2m`), slot, word0, word1, address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Desc {
    half: &'static str,
    slot: u32,
    w0: u32,
    w1: u32,
    addr: u64,
}

impl std::fmt::Display for Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:#010x} {:#010x} {:#018x}", self.half, self.slot, self.w0, self.w1, self.addr)
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

fn parse(path: &Path) -> Trace {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut t = Trace { params: BTreeMap::new(), accesses: Vec::new(), descs: Vec::new() };
    for (n, line) in text.lines().enumerate() {
        let bad = || -> ! { panic!("{}:{}: cannot read `{line}`", path.display(), n + 1) };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["#", "op", _, params @ ..] => {
                for p in params {
                    let (k, v) = p.split_once('=').unwrap_or_else(|| bad());
                    t.params.insert(k.to_string(), v.to_string());
                }
            }
            ["#", ..] | [] => {}
            // Only BAR0 is programmed by these operations; another BAR would be a new fact.
            [rw @ ("R" | "W"), "0", off, val] => {
                let (off, val) = (hex(off).unwrap_or_else(|| bad()), hex(val).unwrap_or_else(|| bad()) as u32);
                t.accesses.push(if *rw == "W" { Access::W(off, val) } else { Access::R(off, val) });
            }
            // Waits: hal's are not visible through the Platform (docs: "Waits").
            ["D", _, _] => {}
            ["M", half @ ("m2s" | "s2m"), slot, w0, w1, addr] => {
                let half = if *half == "m2s" { "m2s" } else { "s2m" };
                let slot = slot.parse().unwrap_or_else(|_| bad());
                let num = |x: &str| hex(x).unwrap_or_else(|| bad());
                t.descs.push(Desc { half, slot, w0: num(w0) as u32, w1: num(w1) as u32, addr: num(addr) });
            }
            _ => bad(),
        }
    }
    t
}

fn traces(arch: &Arch) -> BTreeMap<String, Trace> {
    let dir = fixtures(arch);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "trace") {
            out.insert(p.file_stem().unwrap().to_string_lossy().into_owned(), parse(&p));
        }
    }
    assert!(!out.is_empty(), "no traces in {}", dir.display());
    out
}

/// A fresh simulated device (not initialised) with every BAR0 access recorded.
fn open(arch: &'static Arch) -> (Device, AccessLog) {
    let sim = SimDevice::new(SimConfig::new(arch).hbm_bytes(1 << 26).timing(Timing::Inline)).unwrap();
    let log: AccessLog = Default::default();
    let opts = DeviceOptions { hbm_limit: Some(1 << 26), poll: PollTiming::fast(), ..Default::default() };
    let dev = Device::open(Arc::new(AccessRecording(sim, log.clone())), opts).unwrap();
    (dev, log)
}

/// The NOTIFIC slot of NQ `kind` of engine index 0 (the kmod's `nnq_get_nqid`: type × 16 +
/// index).
fn nq_slot(arch: &Arch, kind: &str) -> u64 {
    let ty = match kind {
        "notify" => 1,
        "event" => 2,
        "error" => 3,
        other => panic!("NQ type {other}"),
    };
    ty * arch.counts.nq_engines_per_type
}

/// hal's counterpart of traced operation `op`, recorded on a fresh device: `setup` runs
/// unrecorded first. `None`: hal has no such operation.
fn hal_run(arch: &'static Arch, op: &str, t: &Trace) -> Option<Vec<Access>> {
    hal_run_with_descs(arch, op, t).map(|(a, _)| a)
}

/// The kmod's host-transfer ring size (`DMA_H2T_DESC_COUNT` 4096 rounded as
/// `ndmar_ring_get_desc_count` does).
const H2T_DESCS: u32 = 8192;

/// hal's copy of `t` (a `memcpy_*` trace) on the trace's engine and queue: the register
/// accesses of `Ring::copy` and the descriptors it wrote, their addresses written as the
/// trace's (hal's source, destination and marker are its own allocations).
fn hal_copy(arch: &'static Arch, dev: &Device, log: &AccessLog, t: &Trace) -> (Vec<Access>, Vec<Desc>) {
    let p = |k: &str| t.params.get(k).and_then(|v| hex(v).or_else(|| v.parse().ok())).unwrap();
    let (engine, queue, len) = (p("engine"), p("queue"), p("size"));
    let (k_src, k_dst, k_marker) = (p("src"), p("dst"), p("marker"));
    let regs = dev.regs();
    udma::init_engine(arch, &regs, engine).unwrap();
    let mut ring = dev.new_ring(engine, queue, H2T_DESCS).unwrap();
    // Host memory where the kmod's source is a host address, device memory otherwise.
    let host_src = k_src & arch.host_dev_addr(0) == arch.host_dev_addr(0) && arch.host_dev_addr(0) != 0;
    let held = dev.alloc_host(len as usize, 4096).unwrap();
    held.fill(0, len as usize, 0x5A).unwrap();
    let src = if host_src { arch.host_dev_addr(held.iova()) } else { arch.hbm_dev_addr(0, 0x40_0000).unwrap() };
    let dst = arch.hbm_dev_addr(0, 0x80_0000).unwrap();
    platform::sync::lock(log).clear();
    ring.copy(&regs, &[Xfer { src, dst, len }]).unwrap();
    let got = std::mem::take(&mut *platform::sync::lock(log));
    let marker = ring.marker_dev_addr();
    let relabel = |a: u64| {
        for (ours, theirs, n) in [(src, k_src, len), (dst, k_dst, len), (marker, k_marker, 8)] {
            if a >= ours && a < ours + n {
                return theirs + (a - ours);
            }
        }
        a
    };
    let n = t.descs.iter().filter(|d| d.half == "m2s").count() as u32;
    let mut descs = Vec::new();
    for (i, (m, s)) in ring.descriptors(0, n + 1).unwrap().into_iter().enumerate() {
        for (half, d) in [("m2s", m), ("s2m", s)] {
            let w = d.encode();
            let word = |k: usize| u32::from_le_bytes([w[k], w[k + 1], w[k + 2], w[k + 3]]);
            // The slot after the copy is empty on both sides (the kmod's dump stops there).
            if word(0) == 0 {
                continue;
            }
            descs.push(Desc { half, slot: i as u32, w0: word(0), w1: word(4), addr: relabel(d.addr) });
        }
    }
    (got, descs)
}

/// [`hal_run`] with the descriptors hal wrote (empty but for the host copies).
fn hal_run_with_descs(arch: &'static Arch, op: &str, t: &Trace) -> Option<(Vec<Access>, Vec<Desc>)> {
    if op.starts_with("memcpy_") {
        let (dev, log) = open(arch);
        return Some(hal_copy(arch, &dev, &log, t));
    }
    hal_run_regs(arch, op, t).map(|a| (a, Vec::new()))
}

/// [`hal_run`] for the operations that write no descriptors.
fn hal_run_regs(arch: &'static Arch, op: &str, t: &Trace) -> Option<Vec<Access>> {
    let (dev, log) = open(arch);
    let regs = dev.regs();
    let record = |f: &dyn Fn()| {
        platform::sync::lock(&log).clear();
        f();
        std::mem::take(&mut *platform::sync::lock(&log))
    };
    let (e, q) = QUEUE;
    let got = if let Some(n) = op.strip_prefix("engine_init-e") {
        let n: u64 = n.parse().unwrap();
        record(&|| udma::init_engine(arch, &regs, n).unwrap())
    } else if let Some(kind) = op.strip_prefix("nq_init-") {
        let s = nq_slot(arch, kind);
        record(&|| nq::program_slot(&regs, NqOwner::Nc(NQ_NC), s, NQ_PA, NQ_BYTES).unwrap())
    } else if let Some(kind) = op.strip_prefix("nq_halt-") {
        let s = nq_slot(arch, kind);
        nq::program_slot(&regs, NqOwner::Nc(NQ_NC), s, NQ_PA, NQ_BYTES).unwrap();
        record(&|| nq::halt_slot(&regs, NqOwner::Nc(NQ_NC), s).unwrap())
    } else {
        match op {
            "queue_init" => {
                udma::init_engine(arch, &regs, e).unwrap();
                record(&|| udma::program_queue(&regs, e, q, QUEUE_M2S, QUEUE_S2M, QUEUE_DESCS).unwrap())
            }
            "queue_pause" => {
                udma::init_engine(arch, &regs, e).unwrap();
                udma::program_queue(&regs, e, q, QUEUE_M2S, QUEUE_S2M, QUEUE_DESCS).unwrap();
                record(&|| udma::pause_queue(&regs, e, q).unwrap())
            }
            "queue_reset" => {
                udma::init_engine(arch, &regs, e).unwrap();
                udma::program_queue(&regs, e, q, QUEUE_M2S, QUEUE_S2M, QUEUE_DESCS).unwrap();
                record(&|| udma::reset_queue(&regs, e, q).unwrap())
            }
            "engine_normal" => record(&|| udma::set_normal(&regs, e).unwrap()),
            "park" => {
                // The real path: a process's ring dropped, its queue parked on the dummy ring.
                let (pe, pq) = PARK;
                udma::init_engine(arch, &regs, pe).unwrap();
                dev.prepare_reclaim().unwrap();
                let ring = std::cell::RefCell::new(Some(dev.new_ring(pe, pq, QUEUE_DESCS).unwrap()));
                let got = record(&|| drop(ring.borrow_mut().take()));
                // The dummy ring's address is this device's own allocation (the kmod's is its
                // `ndma_q_dummy_mc`): hal's is written back as the trace's `dummy` so that
                // everything else is compared as is.
                let ours = dev.parking().dummy_dev_addr().unwrap();
                let theirs = t.params.get("dummy").and_then(|d| hex(d)).unwrap();
                relabel_ring_base(arch, got, ours, theirs)
            }
            "nc_reset" => {
                let map = t.params.get("nc_map").and_then(|m| hex(m)).unwrap() as u32;
                record(&|| fwio::reset(arch, &regs, ResetKind::Ncs(map), &PollTiming::fast()).unwrap())
            }
            "device_reset" => record(&|| fwio::reset(arch, &regs, ResetKind::Device, &PollTiming::fast()).unwrap()),
            "fwio_read" => {
                // One request of the kmod's size (8 payload bytes: one 64-bit address). READ is
                // a legacy-protocol command the new protocol does not carry; SET_POWER_PROFILE
                // takes 8 bytes too.
                record(&|| {
                    let mut seq = 0u8;
                    let cmd = fwc::CMD_SET_POWER_PROFILE;
                    fwio::request(arch, &regs, &mut seq, cmd, &[0; 8], &PollTiming::fast()).unwrap();
                })
            }
            "fwio_power_profile" => {
                // The new protocol (the 2.25.4.0 tree's `fw_io_set_power_profile`): the same
                // command and 8 zero bytes, from the kmod context's sequence number.
                let before = t.params.get("seq_before").and_then(|s| s.parse::<u8>().ok()).unwrap();
                record(&|| {
                    let mut seq = before;
                    let cmd = fwc::CMD_SET_POWER_PROFILE;
                    fwio::request(arch, &regs, &mut seq, cmd, &[0; 8], &PollTiming::fast()).unwrap();
                })
            }
            "sem_reset" => record(&|| dev.sem_set(SEM_NC, SEM, 0).unwrap()),
            "sem_inc" => record(&|| dev.sem_inc(SEM_NC, SEM, 1).unwrap()),
            "sem_dec" => record(&|| dev.sem_dec(SEM_NC, SEM, 1).unwrap()),
            "event_reset" => record(&|| dev.set_event(SEM_NC, EVENT, false).unwrap()),
            _ => return None,
        }
    };
    Some(got)
}

/// `got` with the ring-base writes of address `from` rewritten to address `to`.
fn relabel_ring_base(arch: &Arch, got: Vec<Access>, from: u64, to: u64) -> Vec<Access> {
    got.into_iter()
        .map(|a| match a {
            Access::W(o, v) => {
                let name = reg_name(arch, o);
                if name.ends_with(".ring_base_lo") && v == from as u32 {
                    Access::W(o, to as u32)
                } else if name.ends_with(".ring_base_hi") && v == (from >> 32) as u32 {
                    Access::W(o, (to >> 32) as u32)
                } else {
                    a
                }
            }
            r => r,
        })
        .collect()
}

/// csr-maps' name of the register at BAR0 `offset`, or `bar0+0x…` where csr-maps has none.
fn reg_name(arch: &Arch, offset: u64) -> String {
    arch.lookup(0, offset).map(|r| r.name).unwrap_or_else(|_| format!("bar0+{offset:#x}"))
}

/// One access present on one side only.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Diff {
    /// `kmod-only` or `hal-only`.
    side: &'static str,
    access: Access,
}

/// The same access for the comparison: a write by offset and value, a read by offset.
fn same(a: &Access, b: &Access) -> bool {
    match (a, b) {
        (Access::W(o1, v1), Access::W(o2, v2)) => o1 == o2 && v1 == v2,
        (Access::R(o1, _), Access::R(o2, _)) => o1 == o2,
        _ => false,
    }
}

/// The accesses of `kmod` and `hal` outside their longest common subsequence, in order.
fn diff(kmod: &[Access], hal: &[Access]) -> Vec<Diff> {
    let (n, m) = (kmod.len(), hal.len());
    let mut l = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if same(&kmod[i], &hal[j]) { l[i + 1][j + 1] + 1 } else { l[i + 1][j].max(l[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && same(&kmod[i], &hal[j]) {
            (i, j) = (i + 1, j + 1);
        } else if j < m && (i == n || l[i][j + 1] >= l[i + 1][j]) {
            out.push(Diff { side: "hal-only", access: hal[j] });
            j += 1;
        } else {
            out.push(Diff { side: "kmod-only", access: kmod[i] });
            i += 1;
        }
    }
    out
}

/// A row of the explained-differences table in docs/hardware-safety.md.
#[derive(Debug, Clone)]
struct Explained {
    line: usize,
    arch: String,
    op: String,
    side: String,
    access: String,
    register: String,
    value: String,
}

impl Explained {
    fn matches(&self, arch: &Arch, op: &str, d: &Diff) -> bool {
        let (rw, off, val) = match d.access {
            Access::W(o, v) => ("W", o, Some(v)),
            Access::R(o, _) => ("R", o, None),
        };
        let op_ok = match self.op.strip_suffix('*') {
            Some(prefix) => op.starts_with(prefix),
            None => self.op == op,
        };
        (self.arch == "*" || self.arch == arch.name)
            && op_ok
            && self.side == d.side
            && self.access == rw
            && self.register == reg_name(arch, off)
            && match val {
                Some(v) => hex(&self.value) == Some(v as u64),
                None => self.value == "-",
            }
    }
}

fn doc() -> (PathBuf, String) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/hardware-safety.md");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p, text)
}

/// The lines of `text` between `<!-- kmod-oracle:<name> -->` and `<!-- /kmod-oracle:<name> -->`,
/// with their line numbers.
fn section<'a>(text: &'a str, name: &str) -> Vec<(usize, &'a str)> {
    let (open, close) = (format!("<!-- kmod-oracle:{name} -->"), format!("<!-- /kmod-oracle:{name} -->"));
    let mut inside = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim() == open {
            inside = true;
        } else if line.trim() == close {
            return out;
        } else if inside {
            out.push((n + 1, line));
        }
    }
    panic!("docs/hardware-safety.md has no {open} … {close} section");
}

/// The explained table: `| arch | op | side | access | register | value | reason |`.
fn explained() -> Vec<Explained> {
    let (_, text) = doc();
    let mut rows = Vec::new();
    for (line, l) in section(&text, "explained") {
        let cells: Vec<&str> = l.trim().trim_matches('|').split('|').map(|c| c.trim().trim_matches('`')).collect();
        if cells.len() != 7 || cells[0] == "arch" || cells[0].starts_with("---") {
            continue;
        }
        assert!(!cells[6].is_empty(), "docs/hardware-safety.md:{line}: an explained difference needs its reason");
        rows.push(Explained {
            line,
            arch: cells[0].into(),
            op: cells[1].into(),
            side: cells[2].into(),
            access: cells[3].into(),
            register: cells[4].into(),
            value: cells[5].into(),
        });
    }
    rows
}

/// Each traced operation's differences, per arch: (arch, op, differences), `None` for an
/// operation hal has no counterpart of.
type Compared = Vec<(&'static Arch, String, Option<Vec<Diff>>)>;

fn compare_all() -> Compared {
    let mut out = Vec::new();
    for arch in ARCHES {
        for (op, t) in traces(arch) {
            let d = hal_run(arch, &op, &t).map(|hal| diff(&t.accesses, &hal));
            out.push((arch, op, d));
        }
    }
    out
}

/// The differences no row explains, and the rows that explain nothing.
fn judge(compared: &Compared, rows: &[Explained]) -> (Vec<String>, Vec<usize>) {
    let mut used = vec![false; rows.len()];
    let mut unexplained = Vec::new();
    for (arch, op, d) in compared {
        for d in d.iter().flatten() {
            match rows.iter().position(|r| r.matches(arch, op, d)) {
                Some(i) => {
                    used[i] = true;
                    // Every row that matches counts as used (overlapping rows are both needed
                    // only if neither covers the other's differences: checked by removal).
                    for (k, r) in rows.iter().enumerate() {
                        if r.matches(arch, op, d) {
                            used[k] = true;
                        }
                    }
                }
                None => unexplained.push(describe(arch, op, d)),
            }
        }
    }
    let stale = rows.iter().zip(&used).filter(|(_, u)| !**u).map(|(r, _)| r.line).collect();
    (unexplained, stale)
}

fn describe(arch: &Arch, op: &str, d: &Diff) -> String {
    let (rw, off, val) = match d.access {
        Access::W(o, v) => ("W", o, format!("{v:#010x}")),
        Access::R(o, _) => ("R", o, "-".to_string()),
    };
    format!("| {} | {op} | {} | {rw} | `{}` | {val} |", arch.name, d.side, reg_name(arch, off))
}

/// The coverage lines: per arch, operations with a hal counterpart, identical, explained,
/// unexplained, and those without a counterpart.
fn coverage(compared: &Compared, rows: &[Explained]) -> Vec<String> {
    let mut out = vec!["| arch | traced | with hal counterpart | identical | explained | unexplained |".to_string()];
    out.push("|---|---|---|---|---|---|".to_string());
    for arch in ARCHES {
        let mine: Vec<_> = compared.iter().filter(|c| c.0.name == arch.name).collect();
        let with: Vec<_> = mine.iter().filter_map(|c| c.2.as_ref().map(|d| (c, d))).collect();
        let identical = with.iter().filter(|(_, d)| d.is_empty()).count();
        let unexplained =
            with.iter().filter(|(c, d)| d.iter().any(|d| !rows.iter().any(|r| r.matches(arch, &c.1, d)))).count();
        out.push(format!(
            "| {} | {} | {} | {identical} | {} | {unexplained} |",
            arch.name,
            mine.len(),
            with.len(),
            with.len() - identical - unexplained
        ));
    }
    out
}

#[test]
fn hal_sequences_equal_the_kmod_traces_or_differ_as_documented() {
    let compared = compare_all();
    let rows = explained();
    for (arch, op, d) in &compared {
        match d {
            None => println!("{} {op}: no hal counterpart", arch.name),
            Some(d) if d.is_empty() => println!("{} {op}: identical", arch.name),
            Some(d) => {
                println!("{} {op}: {} difference(s)", arch.name, d.len());
                for d in d {
                    println!("  {}", describe(arch, op, d));
                }
            }
        }
    }
    let figure = coverage(&compared, &rows);
    println!("{}", figure.join("\n"));
    let (unexplained, stale) = judge(&compared, &rows);
    assert!(
        unexplained.is_empty(),
        "{} difference(s) from the kmod with no row in docs/hardware-safety.md (explained table):\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    assert!(
        stale.is_empty(),
        "rows of the explained table that explain no difference: docs/hardware-safety.md lines {stale:?}"
    );
    // Every traced operation has a hal counterpart: an operation hal lacks is a gap to close.
    let missing: Vec<_> = compared.iter().filter(|c| c.2.is_none()).map(|c| format!("{} {}", c.0.name, c.1)).collect();
    assert!(missing.is_empty(), "traced operations without a hal counterpart: {missing:?}");
    // The figure in the document is the one this run measured.
    let (_, text) = doc();
    let documented: Vec<&str> =
        section(&text, "coverage").into_iter().map(|(_, l)| l).filter(|l| l.starts_with('|')).collect();
    assert_eq!(
        documented,
        figure,
        "docs/hardware-safety.md coverage table differs from this run:\n{}",
        figure.join("\n")
    );
}

#[test]
fn removing_any_explained_row_leaves_a_difference_unexplained() {
    let compared = compare_all();
    let rows = explained();
    for i in 0..rows.len() {
        let mut fewer = rows.clone();
        let gone = fewer.remove(i);
        let (unexplained, _) = judge(&compared, &fewer);
        assert!(!unexplained.is_empty(), "docs/hardware-safety.md:{}: removing this row changes nothing", gone.line);
    }
}

#[test]
fn changing_any_value_hal_writes_is_a_difference() {
    // Each write of each hal sequence with one bit flipped: the comparison must see it.
    let rows = explained();
    for arch in ARCHES {
        for (op, t) in traces(arch) {
            let Some(hal) = hal_run(arch, &op, &t) else { continue };
            let base = diff(&t.accesses, &hal);
            for (k, a) in hal.iter().enumerate() {
                let Access::W(o, v) = *a else { continue };
                let mut changed = hal.clone();
                changed[k] = Access::W(o, v ^ 1);
                let d = diff(&t.accesses, &changed);
                let new: Vec<&Diff> = d.iter().filter(|x| !base.contains(x)).collect();
                assert!(
                    new.iter().any(|x| !rows.iter().any(|r| r.matches(arch, &op, x))),
                    "{} {op}: write {k} ({:#x} := {v:#x}) changed and the comparison did not object",
                    arch.name,
                    o
                );
            }
        }
    }
}

/// hal's descriptors against the kmod's, per copy: `(arch, op, kmod's, hal's)`.
fn descriptor_runs() -> Vec<(&'static Arch, String, Vec<Desc>, Vec<Desc>)> {
    let mut out = Vec::new();
    for arch in ARCHES {
        for (op, t) in traces(arch) {
            if t.descs.is_empty() {
                continue;
            }
            let (_, hal) = hal_run_with_descs(arch, &op, &t).unwrap_or_else(|| panic!("{op}: no hal counterpart"));
            out.push((arch, op, t.descs, hal));
        }
    }
    out
}

/// The descriptors of one side that the other lacks, as lines.
fn desc_diff(kmod: &[Desc], hal: &[Desc]) -> Vec<String> {
    let mut out: Vec<String> = kmod.iter().filter(|d| !hal.contains(d)).map(|d| format!("kmod-only {d}")).collect();
    out.extend(hal.iter().filter(|d| !kmod.contains(d)).map(|d| format!("hal-only  {d}")));
    out
}

#[test]
fn hal_writes_the_descriptors_the_kmod_writes() {
    let runs = descriptor_runs();
    // Both copies (device-to-device and host-to-device) on every arch.
    assert_eq!(runs.len(), 2 * ARCHES.len(), "{:?}", runs.iter().map(|r| (r.0.name, &r.1)).collect::<Vec<_>>());
    for (arch, op, kmod, hal) in &runs {
        let d = desc_diff(kmod, hal);
        assert!(d.is_empty(), "{} {op}: hal's descriptors differ from the kmod's:\n{}", arch.name, d.join("\n"));
        println!("{} {op}: {} descriptors identical", arch.name, kmod.len());
    }
}

#[test]
fn changing_any_descriptor_hal_writes_is_a_difference() {
    // A flipped bit in any word of any descriptor, and the packet flags the two sides must
    // not disagree on (LAST set on an S2M descriptor, FIRST or LAST cleared on an M2S one).
    const FIRST: u32 = 1 << 26;
    const LAST: u32 = 1 << 27;
    for (arch, op, kmod, hal) in descriptor_runs() {
        for k in 0..hal.len() {
            let mut changes: Vec<Desc> = Vec::new();
            for bit in [0u32, 16, 24, 26, 27, 28, 31] {
                changes.push(Desc { w0: hal[k].w0 ^ (1 << bit), ..hal[k] });
            }
            changes.push(Desc { w1: hal[k].w1 ^ (1 << 26), ..hal[k] });
            changes.push(Desc { addr: hal[k].addr ^ 0x40, ..hal[k] });
            if hal[k].half == "s2m" {
                changes.push(Desc { w0: hal[k].w0 | LAST, ..hal[k] });
            } else {
                changes.push(Desc { w0: hal[k].w0 & !FIRST, ..hal[k] });
                changes.push(Desc { w0: hal[k].w0 & !LAST, ..hal[k] });
            }
            for c in changes.into_iter().filter(|c| *c != hal[k]) {
                let mut changed = hal.clone();
                changed[k] = c;
                assert!(
                    !desc_diff(&kmod, &changed).is_empty(),
                    "{} {op}: descriptor {k} changed to {c} unseen",
                    arch.name
                );
            }
        }
    }
}

#[test]
fn traces_name_their_kmod_commit() {
    let pin = |file: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/dev/kmod-oracle").join(file);
        std::fs::read_to_string(p).unwrap().trim().to_string()
    };
    // sunda and cayman from the aws-neuron tree; mariana from the only public tree with v4/,
    // the aws-neuronx-dkms 2.25.4.0 release (scripts/dev/kmod-oracle/README.md).
    let (v2v3, v4) = (pin("KMOD_COMMIT"), pin("KMOD_V4_COMMIT"));
    for arch in ARCHES {
        let stamp = match arch.name {
            "mariana" => format!("# kmod: wombelix/aws-neuron-driver@{v4} src/ = aws-neuronx-dkms 2.25.4.0 (v4), "),
            _ => format!("# kmod: aws-neuron/aws-neuron-driver@{v2v3} ("),
        };
        for e in std::fs::read_dir(fixtures(arch)).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(text.starts_with(&stamp), "{}: not stamped `{stamp}…`", p.display());
        }
    }
}

#[test]
fn traced_operations_are_the_acceptance_list() {
    let want = [
        "device_reset",
        "engine_normal",
        "event_reset",
        "fwio_read",
        "memcpy_d2d",
        "memcpy_h2d",
        "nc_reset",
        "nq_halt-error",
        "nq_halt-event",
        "nq_halt-notify",
        "nq_init-error",
        "nq_init-event",
        "nq_init-notify",
        "park",
        "queue_init",
        "queue_pause",
        "queue_reset",
        "sem_dec",
        "sem_inc",
        "sem_reset",
    ];
    for arch in ARCHES {
        let have = traces(arch);
        for w in want {
            assert!(have.contains_key(w), "{}: no trace for {w}", arch.name);
        }
        // The new FW-IO protocol hal speaks is in the v4 (2.25.4.0) tree only.
        if arch.name == "mariana" {
            assert!(have.contains_key("fwio_power_profile"), "mariana: no trace of the new FW-IO protocol");
        }
        let engines: Vec<_> = have.keys().filter(|k| k.starts_with("engine_init-e")).collect();
        let h2t = format!("engine_init-e{}", udma::h2t(arch, 0).0);
        assert!(engines.len() >= 2 && have.contains_key(&h2t), "{}: engine inits {engines:?}", arch.name);
        let _ = udc::QUEUES;
    }
}
