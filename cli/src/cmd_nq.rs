//! `nq dump|watch --nc N`: an NC's programmed NOTIFIC slots and their decoded records.
//!
//! Records are read where the tool can reach them: rings this process owns (`--demo`),
//! and rings in device memory (read by DMA). A ring in another process's host memory
//! is shown with its pointers only.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use csr_maps::consts::{nq as nqc, seq as seqc};
use csr_maps::formats::notify::{custom, ntype, InferStatus, RECORD_BYTES};
use hal::nq::SlotState;
use hal::{Device, NqOwner, NqRing, Stream};
use isa::device_ops::{events_only, NotifyOp};
use isa::slot::{Events, Opcode, TraceMode};
use serde_json::{json, Value};

use crate::device::{self, DeviceSpec, SimTiming};
use crate::follow::{FollowArgs, Remote};
use crate::report::{print_json, CliError};

#[derive(Args, Clone)]
pub struct NqArgs {
    /// NeuronCore.
    #[arg(long, default_value_t = 0)]
    nc: usize,
    /// Simulator only: first run a small sequencer program on every TPB engine of the NC
    /// that posts START, CUSTOM and END records into rings this process owns.
    #[arg(long, conflicts_with_all = ["pid", "follow"])]
    demo: bool,
    #[command(flatten)]
    follow: FollowArgs,
}

#[derive(Subcommand)]
pub enum NqCmd {
    /// Programmed slots (base, size, head, tail, status) and the records between head and tail.
    Dump(NqArgs),
    /// Poll and print new records until --count records or --timeout-ms.
    Watch {
        #[command(flatten)]
        a: NqArgs,
        /// Stop after this many records.
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this long.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Poll period.
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
    },
}

pub fn run(cmd: NqCmd, spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    match cmd {
        NqCmd::Dump(a) if a.follow.active() => remote_dump(&a, json),
        NqCmd::Dump(a) => dump(spec, timing, &a, json),
        NqCmd::Watch { a, count, timeout_ms, interval_ms } if a.follow.active() => {
            remote_watch(&a, count, timeout_ms, interval_ms, json)
        }
        NqCmd::Watch { a, count, timeout_ms, interval_ms } => {
            watch(spec, timing, &a, count, timeout_ms, interval_ms, json)
        }
    }
}

/// Slot `slot` of NC `nc` ([`hal::nq::slot_state`]).
fn read_slot(dev: &Device, nc: usize, slot: u64) -> Result<SlotState, CliError> {
    Ok(hal::nq::slot_state(&dev.regs(), NqOwner::Nc(nc), slot)?)
}

/// NC `nc`'s programmed slots.
fn programmed(dev: &Device, nc: usize) -> Result<Vec<SlotState>, CliError> {
    Ok(hal::nq::programmed_slots(&dev.regs(), NqOwner::Nc(nc), dev.arch().counts.nq_slots)?)
}

fn record_json(slot: u64, pos: u64, b: &[u8; RECORD_BYTES]) -> Value {
    let r = InferStatus::decode(b);
    let (engine, kind) = ntype::describe(r.tag);
    json!({
        "slot": slot,
        "pos": pos,
        "engine": engine.map(|e| e.name()),
        "tag": r.tag,
        "tag_kind": kind,
        "subtype": r.kind().to_string(),
        "sub_id": r.sub_id,
        "line": r.line,
        "timestamp_ps": r.timestamp,
        "phase": r.phase,
        "sw_overflow": r.sw_overflow,
        "hw_overflow": r.hw_overflow,
        "raw": b.iter().map(|x| format!("{x:02x}")).collect::<String>(),
    })
}

fn record_text(v: &Value) -> String {
    format!(
        "  slot {:>2} @{:#06x}  {:<5} {:<10} {:<8} sub_id {:<3} line {:<5} ts {:>14} ps  phase {} ovf sw={} hw={}",
        v["slot"],
        v["pos"].as_u64().unwrap_or(0),
        v["engine"].as_str().unwrap_or("-"),
        v["tag_kind"].as_str().unwrap_or("?"),
        v["subtype"].as_str().unwrap_or("?"),
        v["sub_id"],
        v["line"],
        v["timestamp_ps"],
        v["phase"].as_bool().map(u8::from).unwrap_or(0),
        v["sw_overflow"].as_bool().map(u8::from).unwrap_or(0),
        v["hw_overflow"].as_bool().map(u8::from).unwrap_or(0),
    )
}

/// Rings and streams of the `--demo` program (kept alive while records are read).
struct Demo {
    rings: BTreeMap<u64, NqRing>,
    streams: Vec<Stream>,
    /// Records each engine posts per pass (one per slot of the program).
    per_pass: u64,
}

impl Demo {
    /// One stream per TPB engine: START (trace on the first slot), a CUSTOM debug record
    /// carrying the engine number, a CUSTOM tensor-completion record, END (trace on the last).
    fn start(dev: &Device, nc: usize) -> Result<Self, CliError> {
        let mut rings = BTreeMap::new();
        let mut streams = Vec::new();
        let mut per_pass = 0;
        for e in 0..seqc::Engine::COUNT {
            let slot = dev.infer_slot(e);
            rings.insert(slot, dev.nq_ring(NqOwner::Nc(nc), slot, 64)?);
            let prog = [
                events_only(Opcode::Nop, TraceMode::OnStart as u8, Events::NONE),
                NotifyOp::new(Events::NONE, custom::DEBUG, e as u32).encode(),
                NotifyOp::new(Events::NONE, custom::TENSOR_COMPLETION, e as u32).encode(),
                events_only(Opcode::Nop, TraceMode::OnEnd as u8, Events::NONE),
            ];
            per_pass = prog.len() as u64;
            let bytes: Vec<u8> = prog.iter().flatten().copied().collect();
            streams.push(dev.load_stream(nc, e, &bytes, false)?);
        }
        Ok(Self { rings, streams, per_pass })
    }

    /// Run every stream once (engines that are still running are left alone).
    fn kick(&self, dev: &Device) -> Result<(), CliError> {
        let regs = dev.regs();
        for s in &self.streams {
            if dev.engine_status(s.nc, s.engine)?.state != seqc::STATE_RUNNING {
                s.enable(&regs, false)?;
            }
        }
        Ok(())
    }

    /// Wait until every ring's tail has moved `records` entries (or a deadline).
    fn wait(&self, dev: &Device, nc: usize, records: u64) -> Result<(), CliError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut done = true;
            for slot in self.rings.keys() {
                done &= read_slot(dev, nc, *slot)?.tail >= records * RECORD_BYTES as u64;
            }
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CliError::new(
                    crate::report::NrtStatus::Timeout,
                    "the demo program did not post its records within 5 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn stop(self, dev: &Device) {
        let regs = dev.regs();
        for s in self.streams {
            let _ = s.unload();
        }
        for r in self.rings.values() {
            let _ = r.halt(&regs);
        }
    }
}

/// Where a slot's ring is and whether its records can be read from here.
fn location(dev: &Device, s: &SlotState, own: bool) -> &'static str {
    if own {
        "host (this process)"
    } else if dev.arch().dev_to_hbm(s.base).is_some() {
        "device memory"
    } else if dev.arch().dev_to_host_iova(s.base).is_some() {
        "host (another process: not reachable)"
    } else {
        "unknown"
    }
}

/// Records of a device-memory ring between byte positions `from` and `to` (with wrap).
fn device_records(
    dev: &Device,
    nc: usize,
    s: &SlotState,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, [u8; 16])>, CliError> {
    let mut out = Vec::new();
    if s.size < RECORD_BYTES as u64 || !s.size.is_power_of_two() {
        return Ok(out);
    }
    let mut pos = from % s.size;
    let end = to % s.size;
    let mut guard = s.size / RECORD_BYTES as u64;
    while pos != end && guard > 0 {
        let mut b = [0u8; RECORD_BYTES];
        dev.read_device(nc, s.base + pos, &mut b)?;
        out.push((pos, b));
        pos = (pos + RECORD_BYTES as u64) % s.size;
        guard -= 1;
    }
    Ok(out)
}

fn slot_json(dev: &Device, s: &SlotState, own: bool, records: Option<Vec<Value>>) -> Value {
    json!({
        "slot": s.slot,
        "type": nqc::type_name(s.slot / nqc::ENGINES_PER_TYPE),
        "index": s.slot % nqc::ENGINES_PER_TYPE,
        "base": s.base,
        "size": s.size,
        "head": s.head,
        "tail": s.tail,
        "status": {"overflow": s.overflow, "dropped": s.dropped},
        "location": location(dev, s, own),
        "records": records,
    })
}

fn open_for(spec: &DeviceSpec, timing: SimTiming, a: &NqArgs) -> Result<device::Opened, CliError> {
    let o = device::open(spec, timing)?;
    o.check_nc(a.nc)?;
    if a.demo && !o.is_sim() {
        return Err(CliError::invalid("--demo runs only on the simulator (--device sim…)"));
    }
    Ok(o)
}

fn dump(spec: &DeviceSpec, timing: SimTiming, a: &NqArgs, json: bool) -> Result<(), CliError> {
    let o = open_for(spec, timing, a)?;
    let dev = &o.dev;
    let mut demo = if a.demo { Some(Demo::start(dev, a.nc)?) } else { None };
    if let Some(d) = &demo {
        d.kick(dev)?;
        d.wait(dev, a.nc, d.per_pass)?;
    }
    let slots = programmed(dev, a.nc)?;
    let regs = dev.regs();
    let mut out = Vec::new();
    for s in &slots {
        let own = demo.as_mut().and_then(|d| d.rings.get_mut(&s.slot));
        let is_own = own.is_some();
        let records = if let Some(ring) = own {
            let mut recs = Vec::new();
            ring.poll(&regs, &mut recs, usize::MAX)?;
            let mut pos = s.head;
            let mut v = Vec::new();
            for r in &recs {
                v.push(record_json(s.slot, pos, r));
                pos = (pos + RECORD_BYTES as u64) % s.size.max(1);
            }
            Some(v)
        } else if dev.arch().dev_to_hbm(s.base).is_some() {
            let recs = device_records(dev, a.nc, s, s.head, s.tail)?;
            Some(recs.iter().map(|(p, b)| record_json(s.slot, *p, b)).collect())
        } else {
            None
        };
        out.push(slot_json(dev, s, is_own, records));
    }
    let overflow = dev.nq_overflow(a.nc)?;
    if let Some(d) = demo {
        d.stop(dev);
    }
    if json {
        print_json(&json!({"device": o.label, "nc": a.nc, "nq_overflow": overflow, "slots": out}));
        return Ok(());
    }
    println!(
        "{} NC {}: {} programmed notification queue(s){}",
        o.label,
        a.nc,
        out.len(),
        if overflow { "; NQ overflow latched" } else { "" }
    );
    for s in &out {
        println!(
            "slot {:>2} ({} {}): base {:#x} size {} head {:#x} tail {:#x} overflow {} dropped {} — {}",
            s["slot"],
            s["type"].as_str().unwrap_or("?"),
            s["index"],
            s["base"].as_u64().unwrap_or(0),
            s["size"],
            s["head"].as_u64().unwrap_or(0),
            s["tail"].as_u64().unwrap_or(0),
            s["status"]["overflow"],
            s["status"]["dropped"],
            s["location"].as_str().unwrap_or("?"),
        );
        for r in s["records"].as_array().into_iter().flatten() {
            println!("{}", record_text(r));
        }
    }
    Ok(())
}

fn watch(
    spec: &DeviceSpec,
    timing: SimTiming,
    a: &NqArgs,
    count: Option<u64>,
    timeout_ms: u64,
    interval_ms: u64,
    json: bool,
) -> Result<(), CliError> {
    let o = open_for(spec, timing, a)?;
    let dev = &o.dev;
    let mut demo = if a.demo { Some(Demo::start(dev, a.nc)?) } else { None };
    // Device-memory rings are followed from their current tail (new records only).
    let mut followed: BTreeMap<u64, (SlotState, u64)> = BTreeMap::new();
    for s in programmed(dev, a.nc)? {
        if demo.as_ref().is_some_and(|d| d.rings.contains_key(&s.slot)) {
            continue;
        }
        if dev.arch().dev_to_hbm(s.base).is_some() {
            followed.insert(s.slot, (s, s.tail));
        } else {
            tracing::warn!("slot {} ring at {:#x} is not reachable from this process", s.slot, s.base);
        }
    }
    if demo.is_none() && followed.is_empty() {
        eprintln!("notice: NC {} has no notification queue this process can read (try --demo on the simulator)", a.nc);
    }
    let start = Instant::now();
    let regs = dev.regs();
    let mut seen = 0u64;
    let mut buf = Vec::new();
    let done = |seen: u64| count.is_some_and(|c| seen >= c);
    'outer: while !done(seen) && start.elapsed() < Duration::from_millis(timeout_ms) {
        if let Some(d) = &demo {
            d.kick(dev)?;
        }
        let mut new: Vec<Value> = Vec::new();
        if let Some(d) = demo.as_mut() {
            for (slot, ring) in d.rings.iter_mut() {
                buf.clear();
                let before = read_slot(dev, a.nc, *slot)?.head;
                ring.poll(&regs, &mut buf, usize::MAX)?;
                let size = ring.size().max(1);
                for (k, r) in buf.iter().enumerate() {
                    new.push(record_json(*slot, (before + (k * RECORD_BYTES) as u64) % size, r));
                }
            }
        }
        for (slot, (s, pos)) in followed.iter_mut() {
            let tail = read_slot(dev, a.nc, *slot)?.tail;
            for (p, b) in device_records(dev, a.nc, s, *pos, tail)? {
                new.push(record_json(*slot, p, &b));
            }
            *pos = tail;
        }
        for r in new {
            let mut r = r;
            r["t_ms"] = json!(start.elapsed().as_millis() as u64);
            if json {
                print_json(&r);
            } else {
                println!("[{:>7} ms]{}", r["t_ms"], record_text(&r));
            }
            seen += 1;
            if done(seen) {
                break 'outer;
            }
        }
        std::thread::sleep(Duration::from_millis(interval_ms.max(1)));
    }
    if let Some(d) = demo {
        d.stop(dev);
    }
    if !json {
        println!(
            "{seen} record(s) in {} ms{}",
            start.elapsed().as_millis(),
            if done(seen) { "" } else { " (timeout)" }
        );
    }
    Ok(())
}

// ------------------------------------------------------------ another process (--pid)

fn remote_for(a: &NqArgs) -> Result<Remote, CliError> {
    let r = Remote::connect(&a.follow)?;
    if a.nc >= r.ncs {
        return Err(CliError::invalid(format!("NeuronCore {} does not exist ({} has {})", a.nc, r.arch.name, r.ncs)));
    }
    Ok(r)
}

/// A record from the endpoint's hex.
fn unhex(s: &str) -> Option<[u8; RECORD_BYTES]> {
    let mut b = [0u8; RECORD_BYTES];
    if s.len() != 2 * RECORD_BYTES {
        return None;
    }
    for (i, x) in b.iter_mut().enumerate() {
        *x = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(b)
}

/// Records of one `nq` response, decoded.
fn remote_records(slot: u64, v: &Value) -> Option<Vec<Value>> {
    let recs = v["records"].as_array()?;
    Some(recs.iter().filter_map(|r| Some(record_json(slot, r["pos"].as_u64()?, &unhex(r["raw"].as_str()?)?))).collect())
}

fn remote_slots(r: &mut Remote, nc: usize) -> Result<Vec<Value>, CliError> {
    let v = r.request(json!({"op": "nq_slots", "nc": nc}))?;
    Ok(v["slots"].as_array().cloned().unwrap_or_default())
}

fn remote_dump(a: &NqArgs, json: bool) -> Result<(), CliError> {
    let mut r = remote_for(a)?;
    let mut out = Vec::new();
    for s in remote_slots(&mut r, a.nc)? {
        let slot = s["slot"].as_u64().unwrap_or(0);
        let q = r.request(json!({"op": "nq", "nc": a.nc, "slot": slot}))?;
        let mut j = s.clone();
        j["type"] = json!(nqc::type_name(slot / nqc::ENGINES_PER_TYPE));
        j["index"] = json!(slot % nqc::ENGINES_PER_TYPE);
        j["location"] = json!(match remote_records(slot, &q) {
            Some(_) => format!("host (process {})", r.pid),
            None => q["reason"].as_str().unwrap_or("not readable").to_string(),
        });
        j["records"] = remote_records(slot, &q).map(Value::from).unwrap_or(Value::Null);
        out.push(j);
    }
    if json {
        print_json(&json!({"device": r.label(), "nc": a.nc, "slots": out}));
        return Ok(());
    }
    println!("{} NC {}: {} programmed notification queue(s)", r.label(), a.nc, out.len());
    for s in &out {
        println!(
            "slot {:>2} ({} {}): base {:#x} size {} head {:#x} tail {:#x} overflow {} dropped {} — {}",
            s["slot"],
            s["type"].as_str().unwrap_or("?"),
            s["index"],
            s["base"].as_u64().unwrap_or(0),
            s["size"],
            s["head"].as_u64().unwrap_or(0),
            s["tail"].as_u64().unwrap_or(0),
            s["overflow"],
            s["dropped"],
            s["location"].as_str().unwrap_or("?"),
        );
        for rec in s["records"].as_array().into_iter().flatten() {
            println!("{}", record_text(rec));
        }
    }
    Ok(())
}

/// Follow the rings of another process's NC from their current tails: new records only.
/// A ring that moves by more than its size between two polls loses the overwritten records.
fn remote_watch(a: &NqArgs, count: Option<u64>, timeout_ms: u64, interval_ms: u64, json: bool) -> Result<(), CliError> {
    let mut r = remote_for(a)?;
    let mut followed: BTreeMap<u64, u64> = BTreeMap::new();
    for s in remote_slots(&mut r, a.nc)? {
        if let (Some(slot), Some(tail)) = (s["slot"].as_u64(), s["tail"].as_u64()) {
            followed.insert(slot, tail);
        }
    }
    if followed.is_empty() {
        eprintln!("notice: NC {} of {} has no programmed notification queue (yet)", a.nc, r.label());
    }
    let start = Instant::now();
    let mut seen = 0u64;
    let done = |seen: u64| count.is_some_and(|c| seen >= c);
    'outer: while !done(seen) && start.elapsed() < Duration::from_millis(timeout_ms) {
        // Slots programmed since the start (a model loaded later) are followed from their tail.
        if followed.is_empty() {
            for s in remote_slots(&mut r, a.nc)? {
                if let (Some(slot), Some(tail)) = (s["slot"].as_u64(), s["tail"].as_u64()) {
                    followed.insert(slot, tail);
                }
            }
        }
        let mut new = Vec::new();
        for (slot, pos) in followed.iter_mut() {
            let q = r.request(json!({"op": "nq", "nc": a.nc, "slot": *slot, "from": *pos}))?;
            new.extend(remote_records(*slot, &q).unwrap_or_default());
            if let Some(n) = q["next"].as_u64() {
                *pos = n;
            }
        }
        for mut rec in new {
            rec["t_ms"] = json!(start.elapsed().as_millis() as u64);
            if json {
                print_json(&rec);
            } else {
                println!("[{:>7} ms]{}", rec["t_ms"], record_text(&rec));
            }
            seen += 1;
            if done(seen) {
                break 'outer;
            }
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::thread::sleep(Duration::from_millis(interval_ms.max(1)));
    }
    if !json {
        println!(
            "{seen} record(s) from {} in {} ms{}",
            r.label(),
            start.elapsed().as_millis(),
            if done(seen) { "" } else { " (timeout)" }
        );
    }
    Ok(())
}
