//! `neuron-vfio csr …`: registers by name, from the csr-maps descriptions.
//!
//! Names carry instance indices (`udma[33].m2s.q[0].tail_inc`, `tpb_sem[0].sem_set[3]`) or
//! are absolute BAR0 offsets (`0x30d01034`). `list` and `decode` need no device; `read`,
//! `write`, `dump` and `watch` go through the device's MMIO (on the simulator, the same
//! Mmio path the driver uses). Each invocation opens a fresh device, so several
//! operations can be combined in one call: `read` takes several names, and
//! `write NAME VALUE --then-read [NAME…]` reads registers back after the write.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Subcommand;
use csr_maps::{Arch, RegInstance};
use platform::Mmio;
use serde_json::json;

use crate::device::{self, DeviceSpec, SimTiming};
use crate::follow::{FollowArgs, Remote};
use crate::report::{print_json, CliError};

#[derive(Subcommand)]
pub enum CsrCmd {
    /// Print every register instance of an arch with its BAR offset and fields (no device needed).
    ///
    /// `blocked`: the vendor kernel module refuses user writes to the register (FW-IO mailbox,
    /// DMA ring bases, doorbells). `guard=CLASS`: writing it could aim the device at memory or
    /// state the writer does not own — `dma-address` (a ring, queue, instruction-fetch or
    /// Q7/NX base address), `reset` (device/NC reset), `sequencer-control` (start, stop or
    /// redirect an engine) or `semaphore` (forge a semaphore count); a guard on a field is
    /// shown as `guard=CLASS(field)`. `csr write` refuses blocked and guarded registers
    /// without `--force`. `modeled`: the register is the simulator's model, not hardware.
    List {
        /// sunda | cayman | mariana (or v2/v3/v4, trn1/inf2/trn2/trn3).
        #[arg(long, default_value = "sunda")]
        arch: String,
        /// Only registers whose name contains TEXT.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Decode a register value into its fields (no device needed).
    Decode {
        /// sunda | cayman | mariana (default: the arch of `--device sim:ARCH`, else sunda,
        /// which the output then says).
        #[arg(long)]
        arch: Option<String>,
        /// Register path (udma[33].m2s.q[0].head) or BAR0 offset (0x30d01034).
        reg: String,
        /// The value to decode.
        value: String,
    },
    /// Read registers (several names or offsets allowed) and decode their fields.
    Read {
        /// Register paths (`tpb_sem[0].sem_read[3]`) or BAR0 offsets (`0x…`).
        #[arg(required = true)]
        regs: Vec<String>,
    },
    /// Write a register; write-blocked and guarded registers (see `csr list --help`) are
    /// refused unless --force.
    Write {
        /// Register path or BAR0 offset.
        reg: String,
        /// Value (decimal or 0x hex); must fit the register width.
        value: String,
        /// Write even a write-blocked, guarded or read-only register.
        #[arg(long)]
        force: bool,
        /// After the write, read these registers back in the same process (no names: the
        /// written register itself).
        #[arg(long, num_args = 0.., value_name = "REG")]
        then_read: Option<Vec<String>>,
    },
    /// Every register under a prefix (`misc_ram`, `udma[33].m2s.q[0]`) with value and fields.
    Dump {
        /// Path prefix; an index left out matches every instance (`udma[33].m2s.q`).
        prefix: String,
    },
    /// Poll registers and print changes (--pid: of the device another process drives).
    Watch {
        /// Register paths or BAR0 offsets.
        #[arg(required = true)]
        regs: Vec<String>,
        /// Poll period.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Stop after this many polls (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// Save every register instance of the named blocks or instances (`udma[0]`, `misc_ram`,
    /// `notific[2]`) with value and decoded fields to a JSON file (reads only: registers
    /// whose read has a side effect, such as clear-on-read, are listed but not read).
    Snapshot {
        /// Blocks, instances or register path prefixes.
        #[arg(required = true)]
        blocks: Vec<String>,
        /// Output file (`-`: stdout).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        follow: FollowArgs,
    },
    /// What changed between two snapshots, by register and field (no device needed).
    Diff {
        /// The earlier snapshot.
        a: PathBuf,
        /// The later snapshot.
        b: PathBuf,
    },
}

pub fn run(cmd: CsrCmd, spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    match cmd {
        CsrCmd::List { arch, filter } => list(Arch::by_name(&arch)?, filter.as_deref(), json),
        CsrCmd::Decode { arch, reg, value } => {
            let arch = match (arch, spec) {
                (Some(a), _) => Arch::by_name(&a)?,
                (None, DeviceSpec::Sim { arch, .. } | DeviceSpec::SimShared { arch, .. }) => *arch,
                (None, _) => {
                    eprintln!("notice: decoding with sunda's register map (--arch cayman|mariana for another)");
                    &csr_maps::SUNDA
                }
            };
            let r = arch.register(&reg)?;
            let v = csr_maps::parse_u64(&value).ok_or_else(|| CliError::invalid(format!("bad value `{value}`")))?;
            print_value(&r, v, json);
            Ok(())
        }
        CsrCmd::Read { regs } => {
            let o = device::open(spec, timing)?;
            let rs = regs.iter().map(|n| o.dev.arch().register(n)).collect::<Result<Vec<_>, _>>()?;
            let mut vals = Vec::new();
            for r in &rs {
                if !r.def.access.readable() {
                    return Err(CliError::invalid(format!("`{}` is write-only: reading it returns nothing", r.name)));
                }
                vals.push(read(&o.dev, r)?);
            }
            print_values(&rs, &vals, json);
            Ok(())
        }
        CsrCmd::Write { reg, value, force, then_read } => write_cmd(spec, timing, &reg, &value, force, then_read, json),
        CsrCmd::Dump { prefix } => dump(spec, timing, &prefix, json),
        CsrCmd::Watch { regs, interval_ms, count, follow } => {
            let mut t = Target::open(spec, timing, &follow)?;
            watch(&mut t, &regs, interval_ms, count, json)
        }
        CsrCmd::Snapshot { blocks, output, follow } => {
            let mut t = Target::open(spec, timing, &follow)?;
            let snap = snapshot(&mut t, &blocks)?;
            write_snapshot(&snap, &output, json)
        }
        CsrCmd::Diff { a, b } => {
            let d = diff(&load_snapshot(&a)?, &load_snapshot(&b)?)?;
            print_diff(&d, &a, &b, json);
            Ok(())
        }
    }
}

/// Where register reads go: a device this process opens, or another process's device
/// through its debug endpoint (`--pid`, `--follow`).
pub enum Target {
    /// Opened here.
    Local(device::Opened),
    /// Another process's (read-only).
    Remote(Remote),
}

impl Target {
    /// As `follow` says: the other process's device, else `spec` opened here.
    pub fn open(spec: &DeviceSpec, timing: SimTiming, follow: &FollowArgs) -> Result<Self, CliError> {
        if follow.active() {
            Ok(Target::Remote(Remote::connect(follow)?))
        } else {
            Ok(Target::Local(device::open(spec, timing)?))
        }
    }
    /// The device's arch.
    pub fn arch(&self) -> &'static Arch {
        match self {
            Target::Local(o) => o.dev.arch(),
            Target::Remote(r) => r.arch,
        }
    }
    /// `sim:0`, a BDF, or for another process's device its identity (`sim:shared:ARCH:K`, a BDF,
    /// `sim:PID/INDEX` for a simulated device private to that process).
    pub fn label(&self) -> String {
        match self {
            Target::Local(o) => o.label.clone(),
            Target::Remote(r) => r.label(),
        }
    }
    /// Read registers (all readable).
    pub fn read_many(&mut self, regs: &[&RegInstance]) -> Result<Vec<u64>, CliError> {
        match self {
            Target::Local(o) => regs.iter().map(|r| read(&o.dev, r)).collect(),
            Target::Remote(rm) => rm.read_regs(regs),
        }
    }
}

/// Snapshot file format name and version.
pub const SNAPSHOT_FORMAT: &str = "neuron-vfio-csr-snapshot";
pub const SNAPSHOT_VERSION: u64 = 1;

/// Why a register of a snapshot was not read, if it was not.
fn skip_reason(r: &RegInstance) -> Option<&'static str> {
    if !r.def.access.readable() {
        Some("write-only")
    } else {
        r.def.read_side_effect()
    }
}

/// Every register instance under `blocks` (each once, in order), read from `t`.
pub fn snapshot(t: &mut Target, blocks: &[String]) -> Result<serde_json::Value, CliError> {
    let arch = t.arch();
    let mut seen = std::collections::HashSet::new();
    let mut regs = Vec::new();
    for b in blocks {
        for r in arch.registers_under(b)? {
            if seen.insert(r.name.clone()) {
                regs.push(r);
            }
        }
    }
    let readable: Vec<&RegInstance> = regs.iter().filter(|r| skip_reason(r).is_none()).collect();
    let vals = t.read_many(&readable)?;
    let mut vals = vals.into_iter();
    let mut out = Vec::with_capacity(regs.len());
    let mut skipped = 0;
    for r in &regs {
        let mut j = match skip_reason(r) {
            None => value_json(r, vals.next()),
            Some(why) => {
                skipped += 1;
                let mut j = value_json(r, None);
                j["skipped"] = json!(why);
                j
            }
        };
        j["width"] = json!(r.def.width);
        out.push(j);
    }
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    Ok(json!({
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "arch": arch.name,
        "device": t.label(),
        "timestamp": ts,
        "blocks": blocks,
        "skipped": skipped,
        "registers": out,
    }))
}

fn write_snapshot(snap: &serde_json::Value, output: &Path, json: bool) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(snap).map_err(|e| CliError::failure(e.to_string()))?;
    let n = snap["registers"].as_array().map(|a| a.len()).unwrap_or(0);
    if output == Path::new("-") {
        println!("{text}");
        return Ok(());
    }
    std::fs::write(output, text + "\n")
        .map_err(|e| CliError::failure(format!("cannot write {}: {e}", output.display())))?;
    if json {
        print_json(
            &json!({"output": output, "registers": n, "skipped": snap["skipped"], "arch": snap["arch"], "device": snap["device"]}),
        );
    } else {
        println!(
            "{} registers of {} ({}) to {} ({} not read: write-only or read side effect)",
            n,
            snap["device"].as_str().unwrap_or("?"),
            snap["arch"].as_str().unwrap_or("?"),
            output.display(),
            snap["skipped"]
        );
    }
    Ok(())
}

/// A snapshot file, checked for format and version.
pub fn load_snapshot(p: &Path) -> Result<serde_json::Value, CliError> {
    let text =
        std::fs::read_to_string(p).map_err(|e| CliError::invalid(format!("cannot read {}: {e}", p.display())))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| CliError::invalid(format!("{} is not JSON: {e}", p.display())))?;
    if v["format"].as_str() != Some(SNAPSHOT_FORMAT) {
        return Err(CliError::invalid(format!("{} is not a `csr snapshot` file", p.display())));
    }
    if v["version"].as_u64() != Some(SNAPSHOT_VERSION) {
        return Err(CliError::invalid(format!(
            "{}: snapshot version {} (this tool reads {SNAPSHOT_VERSION})",
            p.display(),
            v["version"]
        )));
    }
    if !v["registers"].is_array() {
        return Err(CliError::invalid(format!("{}: no register list", p.display())));
    }
    Ok(v)
}

/// What changed from snapshot `a` to `b`: registers whose value differs (with the fields that
/// differ), and registers only one of them has.
pub fn diff(a: &serde_json::Value, b: &serde_json::Value) -> Result<serde_json::Value, CliError> {
    if a["arch"] != b["arch"] {
        return Err(CliError::invalid(format!(
            "the snapshots are of different arches ({} and {})",
            a["arch"], b["arch"]
        )));
    }
    let empty = Vec::new();
    let regs =
        |s: &serde_json::Value| -> Vec<serde_json::Value> { s["registers"].as_array().unwrap_or(&empty).clone() };
    let (ra, rb) = (regs(a), regs(b));
    let index = |v: &[serde_json::Value]| -> std::collections::HashMap<String, usize> {
        v.iter().enumerate().filter_map(|(i, r)| Some((r["name"].as_str()?.to_string(), i))).collect()
    };
    let (ia, ib) = (index(&ra), index(&rb));
    let mut changed = Vec::new();
    for r in &ra {
        let Some(name) = r["name"].as_str() else { continue };
        let Some(&j) = ib.get(name) else { continue };
        let q = &rb[j];
        if r["value"] == q["value"] {
            continue;
        }
        let mut fields = Vec::new();
        if let (Some(fa), Some(fb)) = (r["fields"].as_object(), q["fields"].as_object()) {
            for (f, va) in fa {
                let vb = fb.get(f).cloned().unwrap_or(serde_json::Value::Null);
                if *va != vb {
                    fields.push(json!({"name": f, "before": va, "after": vb}));
                }
            }
        }
        changed.push(json!({
            "name": name, "bar": r["bar"], "offset": r["offset"],
            "before": r["value"], "after": q["value"], "fields": fields,
        }));
    }
    let only = |v: &[serde_json::Value], other: &std::collections::HashMap<String, usize>| -> Vec<serde_json::Value> {
        v.iter().filter_map(|r| r["name"].as_str()).filter(|n| !other.contains_key(*n)).map(|n| json!(n)).collect()
    };
    Ok(json!({
        "arch": a["arch"],
        "a": {"device": a["device"], "timestamp": a["timestamp"], "registers": ra.len()},
        "b": {"device": b["device"], "timestamp": b["timestamp"], "registers": rb.len()},
        "changed": changed,
        "only_in_a": only(&ra, &ib),
        "only_in_b": only(&rb, &ia),
    }))
}

fn hex(v: &serde_json::Value) -> String {
    v.as_u64().map(|x| format!("{x:#x}")).unwrap_or_else(|| "(not read)".into())
}

fn print_diff(d: &serde_json::Value, a: &Path, b: &Path, json: bool) {
    if json {
        print_json(d);
        return;
    }
    let empty = Vec::new();
    let changed = d["changed"].as_array().unwrap_or(&empty);
    println!("# {} -> {} ({})", a.display(), b.display(), d["arch"].as_str().unwrap_or("?"));
    let mut nf = 0;
    for c in changed {
        println!(
            "{:<44} BAR{} {:#010x}: {} -> {}",
            c["name"].as_str().unwrap_or("?"),
            c["bar"],
            c["offset"].as_u64().unwrap_or(0),
            hex(&c["before"]),
            hex(&c["after"])
        );
        for f in c["fields"].as_array().unwrap_or(&empty) {
            nf += 1;
            println!("    {:<40} {} -> {}", f["name"].as_str().unwrap_or("?"), hex(&f["before"]), hex(&f["after"]));
        }
    }
    for (k, what) in [("only_in_a", "only in"), ("only_in_b", "only in")] {
        let file = if k == "only_in_a" { a } else { b };
        for n in d[k].as_array().unwrap_or(&empty) {
            println!("{:<44} {what} {}", n.as_str().unwrap_or("?"), file.display());
        }
    }
    println!("{} register(s) changed, {nf} field(s)", changed.len());
}

/// The BAR a register lives in.
fn bar<'a>(dev: &'a hal::Device, r: &RegInstance) -> Result<&'a dyn Mmio, CliError> {
    let a = dev.arch();
    if r.bar == a.bars.apb {
        Ok(dev.bar0())
    } else if Some(r.bar) == Some(a.bars.dram) {
        dev.bar4().ok_or_else(|| CliError::failure(format!("BAR{} of `{}` is not mapped", r.bar, r.name)))
    } else {
        Err(CliError::failure(format!("BAR{} of `{}` is not mapped", r.bar, r.name)))
    }
}

fn read(dev: &hal::Device, r: &RegInstance) -> Result<u64, CliError> {
    Ok(r.read(bar(dev, r)?)?)
}

fn value_json(r: &RegInstance, v: Option<u64>) -> serde_json::Value {
    let fields: serde_json::Map<String, serde_json::Value> = match v {
        Some(v) => r.decode(v).into_iter().map(|(n, x)| (n.to_string(), json!(x))).collect(),
        None => Default::default(),
    };
    json!({"name": r.name, "bar": r.bar, "offset": r.offset, "access": r.def.access.as_str(), "value": v, "fields": fields})
}

fn value_text(r: &RegInstance, v: Option<u64>) -> String {
    match v {
        Some(v) => {
            let f: Vec<String> = r.decode(v).into_iter().map(|(n, x)| format!("{n}={x:#x}")).collect();
            format!("{:<44} BAR{} {:#010x} = {:#010x}  {}", r.name, r.bar, r.offset, v, f.join(" "))
        }
        None => format!("{:<44} BAR{} {:#010x} = (write-only)", r.name, r.bar, r.offset),
    }
}

fn print_values(rs: &[RegInstance], vals: &[u64], json: bool) {
    if json {
        print_json(&serde_json::Value::Array(rs.iter().zip(vals).map(|(r, v)| value_json(r, Some(*v))).collect()));
    } else {
        for (r, v) in rs.iter().zip(vals) {
            println!("{}", value_text(r, Some(*v)));
        }
    }
}

fn write_cmd(
    spec: &DeviceSpec,
    timing: SimTiming,
    reg: &str,
    value: &str,
    force: bool,
    then_read: Option<Vec<String>>,
    json: bool,
) -> Result<(), CliError> {
    let v = csr_maps::parse_u64(value).ok_or_else(|| CliError::invalid(format!("bad value `{value}`")))?;
    // Resolve everything against the arch before touching the device.
    let arch = match spec {
        DeviceSpec::Sim { arch, .. } => Some(*arch),
        _ => None,
    };
    let o = device::open(spec, timing)?;
    let arch = arch.unwrap_or(o.dev.arch());
    let r = arch.register(reg)?;
    let reads = match &then_read {
        Some(names) if names.is_empty() => vec![r.clone()],
        Some(names) => names.iter().map(|n| arch.register(n)).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    if r.def.width < 64 && v >> r.def.width != 0 {
        return Err(CliError::invalid(format!(
            "value {v:#x} does not fit the {}-bit register `{}`",
            r.def.width, r.name
        )));
    }
    if let (false, Some((g, field))) = (force, r.def.guard()) {
        let what = field.map(|f| format!(" (field `{f}`)")).unwrap_or_default();
        return Err(CliError::invalid(format!(
            "refusing to write `{}` (BAR{} {:#x}): guard `{}`{what}: {}{}; use --force to write it anyway",
            r.name,
            r.bar,
            r.offset,
            g.as_str(),
            g.reason(),
            if r.def.blocked { " (and write-blocked)" } else { "" }
        )));
    }
    if !force && (r.def.blocked || arch.write_blocked(r.bar, r.offset)) {
        return Err(CliError::invalid(format!(
            "refusing to write `{}` (BAR{} {:#x}): the register is write-blocked; use --force to write it anyway",
            r.name, r.bar, r.offset
        )));
    }
    if !force && !r.def.access.writable() {
        return Err(CliError::invalid(format!("`{}` is read-only; use --force to write it anyway", r.name)));
    }
    if r.def.blocked {
        tracing::warn!("writing write-blocked register {} (--force)", r.name);
    }
    if let Some((g, _)) = r.def.guard() {
        tracing::warn!("writing guarded register {} (guard {}, --force)", r.name, g.as_str());
    }
    r.write(bar(&o.dev, &r)?, v)?;
    let mut vals = Vec::new();
    for x in &reads {
        vals.push(read(&o.dev, x)?);
    }
    if json {
        print_json(&json!({
            "written": {"name": r.name, "bar": r.bar, "offset": r.offset, "value": v},
            "reads": reads.iter().zip(&vals).map(|(x, v)| value_json(x, Some(*v))).collect::<Vec<_>>(),
        }));
    } else {
        println!("wrote {:#x} to {} (BAR{} {:#x})", v, r.name, r.bar, r.offset);
        for (x, v) in reads.iter().zip(&vals) {
            println!("{}", value_text(x, Some(*v)));
        }
    }
    Ok(())
}

fn dump(spec: &DeviceSpec, timing: SimTiming, prefix: &str, json: bool) -> Result<(), CliError> {
    let o = device::open(spec, timing)?;
    let regs = o.dev.arch().registers_under(prefix)?;
    let mut vals = Vec::with_capacity(regs.len());
    for r in &regs {
        vals.push(if r.def.access.readable() { Some(read(&o.dev, r)?) } else { None });
    }
    if json {
        print_json(&json!({
            "prefix": prefix,
            "registers": regs.iter().zip(&vals).map(|(r, v)| value_json(r, *v)).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    let _ = writeln!(w, "# {} on {} ({}): {} registers", prefix, o.label, o.dev.arch().name, regs.len());
    for (r, v) in regs.iter().zip(&vals) {
        let _ = writeln!(w, "{}", value_text(r, *v));
    }
    Ok(())
}

fn watch(t: &mut Target, names: &[String], interval_ms: u64, count: Option<u64>, json: bool) -> Result<(), CliError> {
    let rs = names.iter().map(|n| t.arch().register(n)).collect::<Result<Vec<_>, _>>()?;
    if let Some(r) = rs.iter().find(|r| !r.def.access.readable()) {
        return Err(CliError::invalid(format!("`{}` is write-only and cannot be watched", r.name)));
    }
    if let Some(r) = rs.iter().find(|r| r.def.read_side_effect().is_some()) {
        return Err(CliError::invalid(format!(
            "`{}` is clear-on-read: watching it would clear it; read it once with `csr read`",
            r.name
        )));
    }
    let refs: Vec<&RegInstance> = rs.iter().collect();
    let start = Instant::now();
    let mut last: Vec<Option<u64>> = vec![None; rs.len()];
    let mut polls = 0u64;
    loop {
        let t_ms = start.elapsed().as_millis() as u64;
        let vals = t.read_many(&refs)?;
        for ((r, prev), v) in rs.iter().zip(last.iter_mut()).zip(vals) {
            if *prev == Some(v) {
                continue;
            }
            if json {
                let mut j = value_json(r, Some(v));
                j["t_ms"] = json!(t_ms);
                j["previous"] = json!(*prev);
                print_json(&j);
            } else {
                match prev {
                    Some(p) => println!("[{t_ms:>7} ms] {}  (was {p:#x})", value_text(r, Some(v))),
                    None => println!("[{t_ms:>7} ms] {}", value_text(r, Some(v))),
                }
            }
            *prev = Some(v);
        }
        let _ = std::io::stdout().flush();
        polls += 1;
        if count.is_some_and(|c| polls >= c) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(interval_ms.max(1)));
    }
}

/// A field of `csr list --json`; `guard` only on a guarded field.
fn field_json(f: &csr_maps::meta::FieldDef) -> serde_json::Value {
    let mut j = json!({"name": f.name, "lsb": f.lsb, "width": f.width});
    if let Some(g) = f.guard {
        j["guard"] = json!(g.as_str());
    }
    j
}

pub fn reg_json(r: &RegInstance) -> serde_json::Value {
    json!({
        "name": r.name,
        "bar": r.bar,
        "offset": r.offset,
        "width": r.def.width,
        "access": r.def.access.as_str(),
        "reset": r.def.reset,
        "blocked": r.def.blocked,
        "guard": r.def.guard().map(|(g, _)| g.as_str()),
        "guard_field": r.def.guard().and_then(|(_, f)| f),
        "modeled": r.modeled,
        "fields": r.def.fields.iter().map(field_json).collect::<Vec<_>>(),
        "source": readable_source(r.def.source),
        "description": r.def.desc,
    })
}

fn list(arch: &'static Arch, filter: Option<&str>, json: bool) -> Result<(), CliError> {
    let regs: Vec<RegInstance> =
        arch.registers().into_iter().filter(|r| filter.is_none_or(|f| r.name.contains(f))).collect();
    if json {
        print_json(&serde_json::Value::Array(regs.iter().map(reg_json).collect()));
        return Ok(());
    }
    use std::io::Write;
    let out = std::io::stdout();
    let mut w = std::io::BufWriter::new(out.lock());
    let _ = writeln!(
        w,
        "# {} (NeuronCore-v{}, kmod {}): {} registers",
        arch.name,
        arch.nc_version,
        arch.kmod_name,
        regs.len()
    );
    let _ = writeln!(w, "{LIST_LEGEND}");
    for r in &regs {
        let fields: Vec<String> = r
            .def
            .fields
            .iter()
            .map(|f| {
                if f.width == 1 {
                    format!("{}[{}]", f.name, f.lsb)
                } else {
                    format!("{}[{}:{}]", f.name, f.lsb + f.width - 1, f.lsb)
                }
            })
            .collect();
        let _ = writeln!(
            w,
            "{:<44} BAR{} {:#010x} {:>2} {:<3}{}{} {}  ({}{})",
            r.name,
            r.bar,
            r.offset,
            r.def.width,
            r.def.access.as_str(),
            if r.def.blocked { " blocked" } else { "" },
            match r.def.guard() {
                Some((g, Some(f))) => format!(" guard={}({f})", g.as_str()),
                Some((g, None)) => format!(" guard={}", g.as_str()),
                None => String::new(),
            },
            fields.join(" "),
            readable_source(r.def.source),
            if r.modeled { "; modeled" } else { "" }
        );
    }
    Ok(())
}

/// The key printed under `csr list`'s header.
const LIST_LEGEND: &str = "# columns: name, BAR, offset, width, access (blocked: the kmod never lets user space write it; \
`csr write` refuses unless --force), fields [msb:lsb], (source; modeled: a project choice where the public sources are silent)";

/// A register's source as a reader can follow it: `m:`/`r:` tags become the public kmod
/// (`aws-neuron-driver`, the newer copy for `r:`) file; sections already cite the
/// repository's `docs/facts/` pages.
pub fn readable_source(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 16);
    let mut rest = src;
    while !rest.is_empty() {
        let at_word = out.is_empty() || out.ends_with([' ', '(', ',', ';']);
        if let (true, Some(r)) = (at_word, rest.strip_prefix("m:")) {
            out.push_str("kmod ");
            rest = r;
        } else if let (true, Some(r)) = (at_word, rest.strip_prefix("r:")) {
            out.push_str("kmod(newer) ");
            rest = r;
        } else if let Some(c) = rest.chars().next() {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

pub fn print_value(r: &RegInstance, v: u64, json: bool) {
    if json {
        let fields: serde_json::Map<String, serde_json::Value> =
            r.decode(v).into_iter().map(|(n, x)| (n.to_string(), json!(x))).collect();
        print_json(&json!({"name": r.name, "bar": r.bar, "offset": r.offset, "value": v, "fields": fields}));
    } else {
        let f: Vec<String> = r.decode(v).into_iter().map(|(n, x)| format!("{n}={x:#x}")).collect();
        println!("{} (BAR{} {:#x}) = {:#x}  {}", r.name, r.bar, r.offset, v, f.join(" "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_as_public_files_and_repo_docs() {
        assert_eq!(
            readable_source("m:udma/udma_regs.h, r:udma/udma_main.c (docs/facts/hardware.md §3.2)"),
            "kmod udma/udma_regs.h, kmod(newer) udma/udma_main.c (docs/facts/hardware.md §3.2)"
        );
        // Only tags at the start of a word are rewritten.
        assert_eq!(readable_source("modeled; nrm:x"), "modeled; nrm:x");
        for r in csr_maps::SUNDA.registers().iter().chain(csr_maps::MARIANA.registers().iter()) {
            let s = readable_source(r.def.source);
            assert!(!s.contains("FACTS") && !s.contains(" m:") && !s.starts_with("m:"), "{}: {s}", r.name);
        }
    }

    #[test]
    fn snapshot_diff_names_exactly_the_written_field() {
        let spec = DeviceSpec::parse(Some("sim:cayman")).expect("spec");
        let mut t = Target::open(&spec, SimTiming::Inline, &FollowArgs::default()).expect("open");
        let blocks = vec!["udma[5].m2s.q[3]".to_string(), "udma[5].gen".to_string()];
        let a = snapshot(&mut t, &blocks).expect("snapshot a");
        let regs = a["registers"].as_array().expect("registers");
        assert!(regs.len() > 10, "{}", regs.len());
        // Clear-on-read registers are listed, not read.
        let cor: Vec<_> = regs.iter().filter(|r| r["skipped"] == "clear-on-read").collect();
        assert!(!cor.is_empty() && cor.iter().all(|r| r["value"].is_null()));
        assert!(cor.iter().all(|r| r["name"].as_str().is_some_and(|n| n.contains("axi_q_err_status"))));
        assert_eq!(a["arch"], "cayman");
        assert!(a["timestamp"].as_f64().is_some_and(|t| t > 0.0));
        let r = csr_maps::CAYMAN.register("udma[5].m2s.q[3].rlimit_mask").expect("reg");
        let Target::Local(o) = &t else { panic!("local target") };
        let before = read(&o.dev, &r).expect("read");
        r.write(o.dev.bar0(), before ^ 0b10).expect("write");
        let b = snapshot(&mut t, &blocks).expect("snapshot b");
        let d = diff(&a, &b).expect("diff");
        let changed = d["changed"].as_array().expect("changed");
        assert_eq!(changed.len(), 1, "{d}");
        assert_eq!(changed[0]["name"], "udma[5].m2s.q[3].rlimit_mask");
        assert_eq!(changed[0]["before"].as_u64(), Some(before));
        assert_eq!(changed[0]["after"].as_u64(), Some(before ^ 0b10));
        let f = changed[0]["fields"].as_array().expect("fields");
        assert_eq!(f.len(), 1, "{d}");
        assert_eq!(f[0]["name"], "mask1");
        assert_eq!(diff(&a, &a).expect("self")["changed"].as_array().map(|c| c.len()), Some(0));
        // Different arches do not compare.
        let mut other = a.clone();
        other["arch"] = json!("sunda");
        assert!(diff(&a, &other).is_err());
    }
}
