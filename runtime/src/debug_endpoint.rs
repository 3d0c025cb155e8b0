//! The read-only debug endpoint: lets `neuron-vfio csr watch|snapshot --pid` and
//! `nq watch|dump --pid` in another process read the registers and notification rings of the
//! devices this runtime drives (VFIO gives a device to one process, so a second process cannot
//! open it; the owner serves the reads through its own mapping).
//!
//! A Unix stream socket `neuron-vfio.PID.N.debug/sock` in [`crate::env::shm_dir`] (the
//! directory mode 0700, the socket 0600: only the same user connects), served by one accept
//! thread and a thread per connection (at most [`MAX_CONNECTIONS`]), off the execute path.
//! Protocol version 1 (docs/monitoring.md): one JSON request per line, one JSON response line
//! each. Requests are untrusted: lines are bounded ([`MAX_LINE`]), reads are bounded per
//! request ([`MAX_READS`], [`MAX_RECORDS`]), offsets must lie inside the BAR, and nothing can
//! be written: there is no write request, and registers whose read has a side effect
//! (clear-on-read) are refused.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use csr_maps::formats::notify::RECORD_BYTES;
use hal::nq::SlotState;
use hal::Device;
use serde_json::{json, Value};

use crate::locks::{Rank, Ranked};
use crate::observe::Observer;

/// Protocol version.
pub const VERSION: u64 = 1;
/// Longest request line, bytes.
pub const MAX_LINE: usize = 64 * 1024;
/// Most register reads in one `read` request.
pub const MAX_READS: usize = 4096;
/// Most records in one `nq` response.
pub const MAX_RECORDS: u64 = 4096;
/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 8;

/// Whether the endpoint is on (`NEURON_VFIO_DEBUG_ENDPOINT` is not `0`).
pub fn enabled() -> bool {
    crate::env::debug_endpoint_enabled()
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The directory holding a process's endpoint `n`.
pub fn endpoint_dir(dir: &Path, pid: u32, n: u64) -> PathBuf {
    dir.join(format!("neuron-vfio.{pid}.{n}.debug"))
}

/// `(pid, n, socket path)` of every endpoint in `dir` whose process is alive, by pid then n.
pub fn discover(dir: &Path) -> Vec<(u32, u64, PathBuf)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some((pid, n)) = parse_name(&name.to_string_lossy()) else { continue };
        if alive(pid) {
            out.push((pid, n, e.path().join("sock")));
        }
    }
    out.sort();
    out
}

fn parse_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix("neuron-vfio.")?.strip_suffix(".debug")?;
    let (pid, n) = rest.split_once('.')?;
    Some((pid.parse().ok()?, n.parse().ok()?))
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Remove endpoint directories of processes that no longer exist.
fn remove_stale(dir: &Path) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Some((pid, _)) = parse_name(&e.file_name().to_string_lossy()) {
            if !alive(pid) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A running endpoint; stopped (threads joined, socket removed) on drop.
pub struct Endpoint {
    dir: PathBuf,
    sock: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    conns: Conns,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("sock", &self.sock).finish()
    }
}

impl Endpoint {
    /// Serve `devs` at this process's next endpoint in `dir`.
    pub fn start(dir: &Path, devs: &[Device]) -> std::io::Result<Self> {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            remove_stale(dir);
        }
        let d = endpoint_dir(dir, std::process::id(), n);
        let _ = fs::remove_dir_all(&d);
        fs::create_dir(&d)?;
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700))?;
        let sock = d.join("sock");
        let listener = match UnixListener::bind(&sock)
            .and_then(|l| fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).map(|_| l))
        {
            Ok(l) => l,
            Err(e) => {
                let _ = fs::remove_dir_all(&d);
                return Err(e);
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Conns = Arc::new(Ranked::new(Rank::Leaf, Vec::new()));
        let devs: Arc<Vec<Device>> = Arc::new(devs.to_vec());
        let (s, c) = (stop.clone(), conns.clone());
        let accept = std::thread::Builder::new()
            .name("nrt-debug-endpoint".into())
            .spawn(move || accept_loop(listener, devs, s, c))?;
        Ok(Self { dir: d, sock, stop, accept: Some(accept), conns })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.sock
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept thread with a connection. Should the socket be gone (its directory
        // removed from outside), the thread cannot be woken: leave it blocked rather than hang
        // here (it holds handles on the devices until the process exits).
        match UnixStream::connect(&self.sock) {
            Ok(_) => {
                if let Some(t) = self.accept.take() {
                    let _ = t.join();
                }
            }
            Err(e) => {
                tracing::warn!("debug endpoint {}: cannot wake its thread ({e}); leaving it", self.sock.display())
            }
        }
        let conns: Vec<_> = self.conns.lock().drain(..).collect();
        for (s, t) in conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
            let _ = t.join();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Start the endpoint for a runtime's devices unless it is off; failures are logged, not
/// fatal (the runtime works without it).
pub fn serve(devs: &[Device]) -> Option<Endpoint> {
    if !enabled() {
        return None;
    }
    match Endpoint::start(&crate::env::shm_dir(), devs) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!("debug endpoint not started: {e}");
            None
        }
    }
}

/// The debug-endpoint observer of a runtime's init…close session: [`serve`] as an
/// [`Attach`](crate::observe::Attach)er (front ends install it; [`crate::monitoring`]). It
/// stops serving at the runtime's `close`, before the devices are closed.
pub fn attach(devs: &[Device]) -> Option<Arc<dyn Observer>> {
    serve(devs).map(|e| Arc::new(Serving(Ranked::new(Rank::Leaf, Some(e)))) as Arc<dyn Observer>)
}

/// A served endpoint until the runtime closes.
struct Serving(Ranked<Option<Endpoint>>);

impl Observer for Serving {
    fn kind(&self) -> &'static str {
        crate::observe::DEBUG_ENDPOINT
    }

    fn observes_executions(&self) -> bool {
        false
    }

    fn path(&self) -> Option<PathBuf> {
        self.0.lock().as_ref().map(|e| e.path().to_path_buf())
    }

    fn close(&self) {
        // Taken out under the lock, dropped (threads joined) after it.
        let e = self.0.lock().take();
        drop(e);
    }
}

type Conns = Arc<Ranked<Vec<(UnixStream, JoinHandle<()>)>>>;

fn accept_loop(listener: UnixListener, devs: Arc<Vec<Device>>, stop: Arc<AtomicBool>, conns: Conns) {
    let active = Arc::new(AtomicUsize::new(0));
    for s in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(s) = s else { continue };
        if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            let mut s = s;
            let _ = writeln!(s, "{}", error("too many connections"));
            continue;
        }
        let Ok(handle) = s.try_clone() else { continue };
        let (d, a) = (devs.clone(), active.clone());
        a.fetch_add(1, Ordering::SeqCst);
        let t = std::thread::Builder::new().name("nrt-debug-conn".into()).spawn(move || {
            serve_conn(s, &d);
            a.fetch_sub(1, Ordering::SeqCst);
        });
        let mut list = conns.lock();
        // Reap finished connections so the list stays short.
        let (done, live): (Vec<_>, Vec<_>) = list.drain(..).partition(|(_, t)| t.is_finished());
        *list = live;
        for (_, t) in done {
            let _ = t.join();
        }
        match t {
            Ok(t) => list.push((handle, t)),
            Err(_) => {
                active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn serve_conn(s: UnixStream, devs: &[Device]) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    let mut line = Vec::new();
    loop {
        line.clear();
        // One byte past the limit tells an over-long line from one that fits.
        match (&mut r).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let reply = if line.len() > MAX_LINE {
            // Unrecoverable framing: answer and close.
            let _ = writeln!(w, "{}", error(&format!("request longer than {MAX_LINE} bytes")));
            return;
        } else {
            handle(&line, devs)
        };
        if writeln!(w, "{reply}").is_err() {
            return;
        }
    }
}

fn error(msg: &str) -> Value {
    json!({"v": VERSION, "ok": false, "error": msg})
}

/// Answer one request line (the protocol, without the transport).
pub fn handle(line: &[u8], devs: &[Device]) -> Value {
    let req: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return error(&format!("bad request: {e}")),
    };
    match req.get("v").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(v) => return error(&format!("protocol version {v} is not supported (this endpoint speaks {VERSION})")),
        None => return error("missing protocol version \"v\""),
    }
    let op = req.get("op").and_then(Value::as_str).unwrap_or("");
    let res = match op {
        "hello" => Ok(hello(devs)),
        "read" => read(&req, devs),
        "nq_slots" => nq_slots(&req, devs),
        "nq" => nq(&req, devs),
        "write" => Err("the debug endpoint is read-only: writes are refused".to_string()),
        "" => Err("missing \"op\"".to_string()),
        o => Err(format!("unknown op `{o}` (hello, read, nq_slots, nq)")),
    };
    match res {
        Ok(mut v) => {
            v["v"] = json!(VERSION);
            v["ok"] = json!(true);
            v
        }
        Err(e) => error(&e),
    }
}

fn hello(devs: &[Device]) -> Value {
    let d: Vec<Value> = devs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut bars = vec![json!({"bar": d.arch().bars.apb, "size": d.bar0().size()})];
            if let Some(m) = d.bar4() {
                bars.push(json!({"bar": d.arch().bars.dram, "size": m.size()}));
            }
            let id = crate::counters::DeviceId::of(d, i);
            json!({"index": i, "arch": d.arch().name, "ncs": d.nc_count(), "bars": bars,
                   "identity": id.identity, "owned_ncs": id.owned.collect::<Vec<_>>()})
        })
        .collect();
    json!({"pid": std::process::id(), "devices": d})
}

fn u64_field(req: &Value, k: &str) -> Result<u64, String> {
    req.get(k).and_then(Value::as_u64).ok_or_else(|| format!("missing or bad \"{k}\""))
}

fn device<'a>(req: &Value, devs: &'a [Device]) -> Result<&'a Device, String> {
    let i = req.get("device").map(|v| v.as_u64().ok_or("bad \"device\"")).transpose()?.unwrap_or(0);
    devs.get(i as usize).ok_or_else(|| format!("device {i} does not exist (the runtime drives {})", devs.len()))
}

fn read(req: &Value, devs: &[Device]) -> Result<Value, String> {
    let dev = device(req, devs)?;
    let regs = req.get("regs").and_then(Value::as_array).ok_or("missing \"regs\": [[bar, offset, width], …]")?;
    if regs.len() > MAX_READS {
        return Err(format!("{} reads in one request; at most {MAX_READS}", regs.len()));
    }
    let arch = dev.arch();
    let mut values = Vec::with_capacity(regs.len());
    for r in regs {
        let t = r.as_array().filter(|t| t.len() == 3).ok_or("each read is [bar, offset, width]")?;
        let (bar, off, width) = match (t[0].as_u64(), t[1].as_u64(), t[2].as_u64()) {
            (Some(b), Some(o), Some(w)) => (b, o, w),
            _ => return Err("each read is [bar, offset, width] (numbers)".into()),
        };
        let mmio = if bar == arch.bars.apb as u64 {
            dev.bar0()
        } else if arch.bars.dram as u64 == bar {
            dev.bar4().ok_or_else(|| format!("BAR{bar} is not mapped"))?
        } else {
            return Err(format!("BAR{bar} is not a BAR of {}", arch.name));
        };
        let bytes = match width {
            32 => 4,
            64 => 8,
            w => return Err(format!("width {w}: 32 or 64")),
        };
        if off % bytes != 0 || off.checked_add(bytes).is_none_or(|e| e > mmio.size()) {
            return Err(format!("BAR{bar} offset {off:#x} (width {width}) is unaligned or outside the BAR"));
        }
        if let Ok(r) = arch.lookup(bar as u8, off) {
            if let Some(fx) = r.def.read_side_effect() {
                return Err(format!("`{}` is {fx}: reading it would change the device; refused", r.name));
            }
        }
        let v = if width == 64 { mmio.read64(off) } else { mmio.read32(off).map(u64::from) };
        values.push(v.map_err(|e| e.to_string())?);
    }
    Ok(json!({"values": values}))
}

/// NC `nc`'s slot `slot` ([`hal::nq::slot_state`]).
fn slot_state(dev: &Device, nc: u64, slot: u64) -> Result<SlotState, String> {
    hal::nq::slot_state(&dev.regs(), hal::NqOwner::Nc(nc as usize), slot).map_err(|e| e.to_string())
}

fn slot_json(s: &SlotState) -> Value {
    json!({"slot": s.slot, "base": s.base, "size": s.size, "head": s.head, "tail": s.tail,
           "overflow": s.overflow, "dropped": s.dropped})
}

fn nc_of(req: &Value, dev: &Device) -> Result<u64, String> {
    let nc = u64_field(req, "nc")?;
    if nc as usize >= dev.nc_count() {
        return Err(format!("NeuronCore {nc} does not exist ({} has {})", dev.arch().name, dev.nc_count()));
    }
    Ok(nc)
}

fn nq_slots(req: &Value, devs: &[Device]) -> Result<Value, String> {
    let dev = device(req, devs)?;
    let nc = nc_of(req, dev)?;
    let slots = hal::nq::programmed_slots(&dev.regs(), hal::NqOwner::Nc(nc as usize), dev.arch().counts.nq_slots)
        .map_err(|e| e.to_string())?;
    Ok(json!({"slots": slots.iter().map(slot_json).collect::<Vec<_>>()}))
}

fn nq(req: &Value, devs: &[Device]) -> Result<Value, String> {
    let dev = device(req, devs)?;
    let nc = nc_of(req, dev)?;
    let slot = u64_field(req, "slot")?;
    if slot >= dev.arch().counts.nq_slots {
        return Err(format!("slot {slot} does not exist ({} slots)", dev.arch().counts.nq_slots));
    }
    let max = req.get("max").and_then(Value::as_u64).unwrap_or(MAX_RECORDS).min(MAX_RECORDS);
    let s = slot_state(dev, nc, slot)?;
    let mut j = json!({"slot": slot_json(&s), "next": s.tail});
    let rec = RECORD_BYTES as u64;
    if s.size < rec || !s.size.is_power_of_two() || s.size > MAX_RECORDS * rec {
        j["records"] = Value::Null;
        j["reason"] = json!("the slot holds no ring of a readable size");
        return Ok(j);
    }
    let from = req.get("from").and_then(Value::as_u64).unwrap_or(s.head) % s.size;
    let end = s.tail % s.size;
    let mut pos = from;
    let mut recs = Vec::new();
    let mut b = [0u8; RECORD_BYTES];
    while pos != end && (recs.len() as u64) < max {
        if !dev.read_host(s.base + pos, &mut b).map_err(|e| e.to_string())? {
            j["records"] = Value::Null;
            j["reason"] = json!("the ring is not in this process's host memory");
            return Ok(j);
        }
        recs.push(json!({"pos": pos, "raw": b.iter().map(|x| format!("{x:02x}")).collect::<String>()}));
        pos = (pos + rec) % s.size;
    }
    j["records"] = json!(recs);
    j["next"] = json!(pos);
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim_dev() -> Device {
        let sim = sim::SimDevice::new(sim::SimConfig::new(&csr_maps::CAYMAN).hbm_bytes(1 << 26)).expect("sim");
        let p: Arc<dyn platform::Platform> = Arc::new(sim);
        let d = Device::open(p, hal::DeviceOptions::default()).expect("sim device");
        d.init().expect("init");
        d
    }

    #[test]
    fn requests_are_validated_and_writes_refused() {
        let devs = vec![sim_dev()];
        let ok = |v: &Value| v["ok"].as_bool() == Some(true);
        let h = handle(br#"{"v":1,"op":"hello"}"#, &devs);
        assert!(ok(&h) && h["devices"][0]["arch"] == "cayman", "{h}");
        // A private simulated device is named after this process, and it owns every NC.
        assert_eq!(h["devices"][0]["identity"], format!("sim:{}/0", std::process::id()), "{h}");
        assert_eq!(h["devices"][0]["owned_ncs"], json!([0, 1, 2, 3, 4, 5, 6, 7]), "{h}");
        let id = csr_maps::CAYMAN.resolve("misc_ram.device_id").expect("reg");
        let r = handle(format!(r#"{{"v":1,"op":"read","regs":[[0,{},32]]}}"#, id.offset).as_bytes(), &devs);
        assert!(ok(&r), "{r}");
        assert_ne!(r["values"][0].as_u64(), Some(0xDEAD_BEEF));
        for bad in [
            r#"{"v":1,"op":"write","regs":[[0,0,32]],"value":1}"#.to_string(),
            r#"{"v":2,"op":"hello"}"#.to_string(),
            r#"{"op":"hello"}"#.to_string(),
            "not json".to_string(),
            r#"{"v":1,"op":"read","regs":[[0,2,32]]}"#.to_string(),
            r#"{"v":1,"op":"read","regs":[[0,18446744073709551612,32]]}"#.to_string(),
            r#"{"v":1,"op":"read","regs":[[3,0,32]]}"#.to_string(),
            r#"{"v":1,"op":"read","regs":[[0,0,16]]}"#.to_string(),
            r#"{"v":1,"op":"read","device":5,"regs":[]}"#.to_string(),
            r#"{"v":1,"op":"nq","nc":99,"slot":0}"#.to_string(),
            format!(r#"{{"v":1,"op":"read","regs":[{}]}}"#, vec!["[0,0,32]"; MAX_READS + 1].join(",")),
        ] {
            let r = handle(bad.as_bytes(), &devs);
            assert_eq!(r["ok"].as_bool(), Some(false), "{bad}: {r}");
            assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
        }
        let w = handle(br#"{"v":1,"op":"write"}"#, &devs);
        assert!(w["error"].as_str().is_some_and(|e| e.contains("read-only")), "{w}");
        // A clear-on-read register is refused.
        let c = csr_maps::CAYMAN.resolve("udma[0].gen.axi_q_err_status[0]").expect("reg");
        assert_eq!(c.def.read_side_effect(), Some("clear-on-read"));
        let r = handle(format!(r#"{{"v":1,"op":"read","regs":[[{},{},32]]}}"#, c.bar, c.offset).as_bytes(), &devs);
        assert!(r["error"].as_str().is_some_and(|e| e.contains("clear-on-read")), "{r}");
    }

    #[test]
    fn socket_is_private_serves_rings_and_goes_away() {
        let dir = std::env::temp_dir().join(format!("nvdbg-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        let dev = sim_dev();
        let mut ring = dev.nq_ring(hal::NqOwner::Nc(1), 3, 16).expect("ring");
        let ep = Endpoint::start(&dir, std::slice::from_ref(&dev)).expect("start");
        let mode = fs::metadata(ep.path()).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let found = discover(&dir);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, std::process::id());
        let mut s = UnixStream::connect(ep.path()).expect("connect");
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut ask = |req: &str| -> Value {
            writeln!(s, "{req}").expect("send");
            let mut l = String::new();
            r.read_line(&mut l).expect("recv");
            serde_json::from_str(&l).expect("json")
        };
        let slots = ask(r#"{"v":1,"op":"nq_slots","nc":1}"#);
        assert_eq!(slots["slots"].as_array().map(|a| a.len()), Some(1), "{slots}");
        assert_eq!(slots["slots"][0]["slot"], 3);
        let q = ask(r#"{"v":1,"op":"nq","nc":1,"slot":3}"#);
        assert_eq!(q["records"].as_array().map(|a| a.len()), Some(0), "{q}");
        // An over-long line is answered with an error and the connection closed.
        let long = format!("{{\"v\":1,\"op\":\"hello\",\"pad\":\"{}\"}}", "x".repeat(MAX_LINE));
        let e = ask(&long);
        assert_eq!(e["ok"].as_bool(), Some(false), "{e}");
        let _ = ring.sync_head(&dev.regs());
        let path = ep.path().to_path_buf();
        drop(ep);
        assert!(!path.exists());
        assert!(discover(&dir).is_empty());
        let _ = fs::remove_dir_all(&dir);
    }
}
