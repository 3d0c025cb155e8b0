//! `neuron-vfio neff inspect`, `neuron-vfio bench neff-load` and `neuron-vfio bench large-var`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use neff::builder::{self, WriteOptions};
use neff::{arch_by_name, Neff, NrtStatus, Program, ReadOptions, WeightFormat};
use serde_json::{json, Value};

use crate::report::CliError as CmdError;

fn io_err(what: &str, path: &Path, e: io::Error) -> CmdError {
    CmdError::opt(None, format!("{what} {}: {e}", path.display()))
}

/// `neuron-vfio neff …`
#[derive(Debug, Subcommand)]
pub enum NeffCmd {
    /// Parse and validate a NEFF, then print its header, members, graphs, vars, queues, DMA blocks
    /// and programs.
    Inspect {
        /// The .neff file.
        path: PathBuf,
        /// Also print every engine program in the producer's .asm syntax.
        #[arg(long)]
        disasm: bool,
        /// Skip the MD5 / SHA-256 check.
        #[arg(long)]
        no_verify: bool,
        /// Apply the KELF target gate for this arch (sunda|cayman|mariana).
        #[arg(long)]
        arch: Option<String>,
        /// Cap on the inflated payload, MiB.
        #[arg(long, default_value_t = 4096)]
        mem_cap_mib: u64,
    },
}

pub fn run_neff(cmd: NeffCmd, json: bool) -> Result<(), CmdError> {
    match cmd {
        NeffCmd::Inspect { path, disasm, no_verify, arch, mem_cap_mib } => {
            let arch = match arch {
                None => None,
                Some(a) => Some(
                    arch_by_name(&a)
                        .ok_or_else(|| CmdError::opt(Some(NrtStatus::Invalid), format!("unknown arch {a:?}")))?,
                ),
            };
            let opts = ReadOptions { verify: !no_verify, arch, mem_cap: mem_cap_mib << 20, allow_legacy: false };
            let f = File::open(&path).map_err(|e| io_err("opening", &path, e))?;
            let len = f.metadata().map_err(|e| io_err("reading", &path, e))?.len();
            let n = Neff::parse_reader(io::BufReader::new(f), len, &opts)?;
            if json {
                let mut v = inspect_json(&n);
                if disasm {
                    v["disasm"] = disasm_json(&n);
                }
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", inspect_text(&n));
                if disasm {
                    print!("{}", neff::disasm::disassemble(&n));
                }
            }
            Ok(())
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn program_kind(p: &Program) -> &'static str {
    match p {
        Program::Tpb(_) => "64-byte slots",
        Program::Sp(_) => "8-byte SP slots",
    }
}

/// The inspect report as JSON.
pub fn inspect_json(n: &Neff) -> Value {
    let h = &n.header;
    let tensors = |ts: &[neff::TensorInfo]| -> Vec<Value> {
        ts.iter()
            .map(|t| json!({"name": t.name, "dtype": t.dtype, "nrt_dtype": t.nrt_dtype, "shape": t.shape, "size": t.size}))
            .collect()
    };
    let graphs: Vec<Value> = n
        .graphs
        .iter()
        .map(|g| {
            let vars: Vec<Value> = g
                .vars
                .iter()
                .map(|v| {
                    json!({"name": v.name, "var_id": v.var_id, "type": v.type_str, "mr_type": v.kind.mr_type(),
                           "size": v.size, "dtype": v.dtype, "shape": v.shape, "file": v.file_member,
                           "data_bytes": v.data.as_ref().map(|d| d.len())})
                })
                .collect();
            let queues: Vec<Value> = g
                .dma_queues
                .iter()
                .map(|q| {
                    json!({"name": q.name, "role": q.role.as_str(), "ring_type": q.role.ring_type(),
                           "owner": q.owner.map(|o| o.name()), "semaphore": q.semaphore})
                })
                .collect();
            let engines: Vec<Value> = g
                .engines
                .iter()
                .map(|e| {
                    let blocks: Vec<Value> = e
                        .dma_blocks
                        .iter()
                        .map(|b| {
                            let descs: Vec<Value> = b
                                .descs
                                .iter()
                                .map(|d| {
                                    json!({"op": d.op.name(), "from": d.from, "to": d.to,
                                           "from_sizes": d.from_sizes, "from_steps": d.from_steps,
                                           "to_sizes": d.to_sizes, "to_steps": d.to_steps})
                                })
                                .collect();
                            json!({"id": b.id, "queue": b.queue, "descs": descs})
                        })
                        .collect();
                    json!({"engine": e.kind.name(), "json": e.json_member, "instr": e.instr_member,
                           "slots": e.program.len(), "slot_kind": program_kind(&e.program), "dma": blocks})
                })
                .collect();
            let ulibs: Vec<Value> = g
                .ucode_libs
                .iter()
                .map(|l| {
                    json!({"name": l.name, "library": l.library, "version": l.version, "flags": l.flags,
                                 "functions": l.functions.len()})
                })
                .collect();
            json!({"name": g.name, "definition": g.definition, "vars": vars, "dma_queues": queues,
                   "replica_groups": g.replica_groups, "src_target_pairs": g.src_target_pairs,
                   "ucode_libs": ulibs, "sb_reservations": g.sb_reservations.len(),
                   "num_streams": g.num_streams, "fp8": g.fp8.map(|f| hex(&f.to_bytes())), "engines": engines})
        })
        .collect();
    let members: Vec<Value> = n.members.iter().map(|m| json!({"name": m.name, "size": m.size})).collect();
    json!({
        "status": "NRT_SUCCESS",
        "code": 0,
        "header": {
            "pkg_version": h.pkg_version, "header_size": h.header_size, "data_size": h.data_size,
            "neff_version": format!("{}.{}", h.neff_version_major, h.neff_version_minor),
            "build_version": h.build_version_str(), "hash": hex(&h.hash), "uuid": hex(&h.uuid),
            "name": h.name_str(), "requested_tpb_count": h.requested_tpb_count,
            "feature_bits": format!("{:#x}", h.feature_bits), "vnc_size": h.vnc_size,
        },
        "payload_bytes": n.payload_len(),
        "members": members,
        "kelf": {"member": n.kelf.member, "version": n.kelf.version, "target": n.kelf.target_str},
        "inputs": tensors(&n.inputs),
        "outputs": tensors(&n.outputs),
        "graphs": graphs,
    })
}

fn disasm_json(n: &Neff) -> Value {
    let mut out = serde_json::Map::new();
    for g in &n.graphs {
        for e in &g.engines {
            out.insert(format!("{}/{}", g.name, e.kind.name()), json!(neff::disasm::disasm_program(&e.program)));
        }
    }
    Value::Object(out)
}

/// The inspect report as text.
pub fn inspect_text(n: &Neff) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let h = &n.header;
    let _ = writeln!(s, "NEFF {:?}", h.name_str());
    let _ = writeln!(
        s,
        "  pkg_version {}  neff_version {}.{}  header_size {:#x}  data_size {}  payload {} bytes",
        h.pkg_version,
        h.neff_version_major,
        h.neff_version_minor,
        h.header_size,
        h.data_size,
        n.payload_len()
    );
    let _ = writeln!(
        s,
        "  build {:?}  uuid {}  tpb_count {}  vnc_size {}  feature_bits {:#x}",
        h.build_version_str(),
        hex(&h.uuid),
        h.requested_tpb_count,
        h.vnc_size,
        h.feature_bits
    );
    let _ = writeln!(s, "  hash {}", hex(&h.hash));
    let _ = writeln!(s, "members ({}):", n.members.len());
    for m in &n.members {
        let _ = writeln!(s, "  {:>10}  {}", m.size, m.name);
    }
    let _ = writeln!(s, "kelf {} version {:?} target {:?}", n.kelf.member, n.kelf.version, n.kelf.target_str);
    for (what, ts) in [("input", &n.inputs), ("output", &n.outputs)] {
        for t in ts.iter() {
            let _ = writeln!(s, "{what} {:?} {} {:?} ({} bytes)", t.name, t.dtype, t.shape, t.size);
        }
    }
    for g in &n.graphs {
        let _ = writeln!(s, "graph {} ({})", g.name, g.definition);
        for v in &g.vars {
            let _ = writeln!(
                s,
                "  var {:>3} {:<16} {:<12} size {:<10} {} {:?}{}",
                v.var_id,
                v.name,
                v.type_str,
                v.size.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                v.dtype.as_deref().unwrap_or("-"),
                v.shape,
                v.file_member.as_deref().map(|f| format!(" file {f}")).unwrap_or_default()
            );
        }
        for q in &g.dma_queues {
            let _ = writeln!(
                s,
                "  queue {:<20} {:<8} owner {:<5} semaphore {}",
                q.name,
                q.role.as_str(),
                q.owner.map(|o| o.name()).unwrap_or("-"),
                q.semaphore.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
            );
        }
        let _ = writeln!(s, "  replica_groups {:?}  src_target_pairs {:?}", g.replica_groups, g.src_target_pairs);
        for l in &g.ucode_libs {
            let _ = writeln!(
                s,
                "  ucode_lib {} ({}) version {} functions {}",
                l.name,
                l.library,
                l.version,
                l.functions.len()
            );
        }
        for e in &g.engines {
            let _ = writeln!(
                s,
                "  engine {:<4} {} slots ({}){}",
                e.kind.name(),
                e.program.len(),
                program_kind(&e.program),
                e.instr_member.as_deref().map(|m| format!(" from {m}")).unwrap_or_default()
            );
            for b in &e.dma_blocks {
                let _ = writeln!(s, "    dma block {} on {}: {} desc", b.id, b.queue, b.descs.len());
                for d in &b.descs {
                    let _ = writeln!(
                        s,
                        "      {} {} {:?}/{:?} -> {} {:?}/{:?}",
                        d.op.name(),
                        d.from,
                        d.from_sizes,
                        d.from_steps,
                        d.to,
                        d.to_sizes,
                        d.to_steps
                    );
                }
            }
        }
    }
    s
}

/// `neuron-vfio bench neff-load`
#[derive(Debug, Args)]
pub struct BenchNeffLoadArgs {
    /// Weight payload to generate, MiB.
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// A sweep over several weight sizes instead (e.g. `64M,256M,1G`): one row per size.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Benchmark this NEFF instead of generating one.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// gzip level of the generated NEFF.
    #[arg(long, default_value_t = 1)]
    pub level: u32,
    /// Runs of each measurement (the best is reported).
    #[arg(long, default_value_t = 2)]
    pub runs: u32,
}
/// A spinner on stderr while a long step runs: only on a terminal and not under --json.
fn spinner(json: bool, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if json || !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner().with_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

fn vm_hwm_kib() -> Option<u64> {
    vm_kib("VmHWM:")
}

/// A `/proc/self/status` figure in KiB (`VmHWM:`, `VmRSS:`).
fn vm_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds this process has used, all threads (user + system, `/proc/self/stat` fields
/// 14 and 15 in USER_HZ ticks, which Linux fixes at 100 per second for user space).
fn process_cpu_s() -> Option<f64> {
    cpu_s_of("/proc/self/stat")
}

/// CPU seconds of the calling thread (as [`process_cpu_s`], from `/proc/thread-self/stat`).
fn thread_cpu_s() -> Option<f64> {
    cpu_s_of("/proc/thread-self/stat")
}

fn cpu_s_of(path: &str) -> Option<f64> {
    let s = std::fs::read_to_string(path).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn reset_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Weights that look like bf16-rounded fp32 (deterministic): the low 16 bits of every float
/// are zero, so deflate has real work on both halves.
fn gen_weights(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while out.len() + 4 <= bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
        let bits = v.to_bits() & 0xFFFF_0000;
        out.extend_from_slice(&bits.to_le_bytes());
    }
    out.resize(bytes, 0);
    out
}

/// Wall time, inflated bytes, CPU seconds.
fn time_raw_inflate(path: &Path, data_size: u64) -> Result<(Duration, u64, Option<f64>), CmdError> {
    let mut f = File::open(path).map_err(|e| io_err("opening", path, e))?;
    f.seek(SeekFrom::Start(1024)).map_err(|e| io_err("seeking", path, e))?;
    let t = Instant::now();
    let cpu = thread_cpu_s();
    // bufread: the input in the BufReader's 1 MiB pieces, as the load feeds its inflater (the
    // read:: decoder would re-buffer it in 32 KiB pieces and make the baseline slower).
    let mut d = flate2::bufread::GzDecoder::new(io::BufReader::with_capacity(1 << 20, f.take(data_size)));
    // The same 1 MiB output pieces the streaming load inflates into (a smaller buffer makes
    // the baseline slower and the ratio look better than it is).
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let k = d.read(&mut buf).map_err(|e| io_err("inflating", path, e))?;
        if k == 0 {
            break;
        }
        total += k as u64;
    }
    let cpu = thread_cpu_s().zip(cpu).map(|(b, a)| b - a);
    Ok((t.elapsed(), total, cpu))
}

/// One streaming load of `path` into a fresh simulated device (see [`bench_neff_load`]).
#[cfg(feature = "sim")]
struct LoadRun {
    elapsed: Duration,
    /// VmHWM over the load, KiB.
    hwm_kib: u64,
    /// Device memory the simulator holds for the model (resident in this process), bytes.
    device_bytes: u64,
    /// Peak live heap over the load (counting allocator only), bytes.
    heap_peak: Option<u64>,
    streamed: bool,
    /// CPU seconds of the process over the load (every thread: reader, hasher, DMA, simulator).
    cpu_s: Option<f64>,
    /// CPU seconds of the calling thread over the load (inflate, tar walk, bounce-buffer copy).
    reader_cpu_s: Option<f64>,
}

#[cfg(feature = "sim")]
fn time_load(path: &Path, payload_hint: u64, verify: bool) -> Result<LoadRun, CmdError> {
    use std::sync::Arc;
    let arch = csr_maps::Arch::by_name("sunda")?;
    // HBM per channel: room for the weights in one power-of-two block beside the carve-out.
    let hbm = payload_hint
        .max(1 << 26)
        .checked_next_power_of_two()
        .and_then(|b| b.checked_mul(2))
        .unwrap_or(u64::MAX)
        .min(arch.consts.hbm_active_size);
    let sim = sim::SimDevice::new(sim::SimConfig::new(arch).hbm_bytes(hbm)).map_err(CmdError::failure)?;
    let rt = runtime::Runtime::with_observers(runtime::monitoring());
    let opts = hal::DeviceOptions { hbm_limit: Some(hbm), ..Default::default() };
    let e = |e: runtime::RtError| CmdError::new(e.status, e.message());
    let cfg = runtime::RuntimeConfig { verify, ..runtime::RuntimeConfig::physical() };
    // `--mmio-trace FILE` traces this simulator too.
    let plats =
        select::wrap_traced(vec![Arc::new(sim.clone()) as Arc<dyn platform::Platform>]).map_err(CmdError::failure)?;
    rt.init(plats, cfg, opts).map_err(e)?;
    let f = File::open(path).map_err(|e| io_err("opening", path, e))?;
    let len = f.metadata().map_err(|e| io_err("reading", path, e))?.len();
    let hwm_reset = reset_hwm();
    crate::alloc_count::reset_peak();
    let t = Instant::now();
    let cpu = process_cpu_s();
    let reader_cpu = thread_cpu_s();
    let m = rt.load_reader(io::BufReader::with_capacity(1 << 20, f), len, None, None).map_err(e)?;
    let elapsed = t.elapsed();
    let cpu_s = process_cpu_s().zip(cpu).map(|(b, a)| b - a);
    let reader_cpu_s = thread_cpu_s().zip(reader_cpu).map(|(b, a)| b - a);
    let hwm_kib = vm_hwm_kib().unwrap_or(0);
    let heap_peak = crate::alloc_count::active().then(crate::alloc_count::peak_live_bytes);
    let device_bytes = u64::try_from(sim.stats().device_bytes).unwrap_or(0);
    rt.unload(&m).map_err(e)?;
    let _ = rt.close();
    Ok(LoadRun { elapsed, hwm_kib, device_bytes, heap_peak, streamed: hwm_reset, cpu_s, reader_cpu_s })
}

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Parse a size like `64M`, `1G`, `512` (MiB).
fn parse_size_mib(s: &str) -> Result<u64, CmdError> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'G' | 'g')) => (&t[..i], 1024),
        Some((i, 'M' | 'm')) => (&t[..i], 1),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0)
        .ok_or_else(|| CmdError::opt(None, format!("--sizes: {s:?} is not a size like 64M or 1G")))
}

/// `bench neff-load`: for each weight size, the NEFF is loaded through the runtime's streaming
/// path (inflate → tar walk → weights into the simulated device's memory through DMA) with
/// libnrt's defaults (`NEURON_RT_VALIDATE_HASH` off: no digest) and again with the MD5 on the
/// same pass (`NEURON_RT_VALIDATE_HASH=1`), interleaved with a raw inflate of the same gzip
/// payload to a sink.
pub fn bench_neff_load(args: BenchNeffLoadArgs, json: bool) -> Result<(), CmdError> {
    if args.sizes.is_empty() || args.path.is_some() {
        let row = bench_one(&args, args.size_mib, json)?;
        if json {
            println!("{row}");
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for s in &args.sizes {
        rows.push(bench_one(&args, parse_size_mib(s)?, json)?);
    }
    if json {
        println!("{}", json!({"bench": "neff-load", "sizes": rows}));
    }
    Ok(())
}

/// `bench neff-load`'s targets (docs/performance.md): load time over raw inflate with libnrt's
/// defaults, and the host RSS of a load less the simulated device memory.
const TARGET_RATIO: f64 = 1.05;
const RSS_BUDGET_MIB: f64 = 64.0;

#[cfg(not(feature = "sim"))]
fn bench_one(_: &BenchNeffLoadArgs, _: u64, _: bool) -> Result<Value, CmdError> {
    Err(CmdError::invalid("bench neff-load loads into the simulator: built without it (cargo feature `sim`)"))
}

#[cfg(feature = "sim")]
fn bench_one(args: &BenchNeffLoadArgs, size_mib: u64, json: bool) -> Result<Value, CmdError> {
    let mut _temp = None;
    let path = match &args.path {
        Some(p) => p.clone(),
        None => {
            let p = std::env::temp_dir().join(format!("neuron-vfio-bench-{}.neff", std::process::id()));
            let bytes = usize::try_from(size_mib << 20)
                .map_err(|_| CmdError::opt(None, format!("--size-mib {size_mib} too large")))?;
            // Said before the work starts: the generated weights compress to about 2/3.
            eprintln!(
                "bench neff-load: generating {} MiB of weights in memory (needs ~{} MiB), writing a ~{} MB NEFF \
                 to {} (removed at the end); --size-mib for less, --path to use a file",
                size_mib,
                size_mib + size_mib / 8,
                (size_mib << 20) * 2 / 3 / 1_000_000,
                p.display()
            );
            let pb = spinner(json, "generating the NEFF");
            let model = builder::weights_model(gen_weights(bytes), WeightFormat::Npy);
            let f = File::create(&p).map_err(|e| io_err("creating", &p, e))?;
            let wopts = WriteOptions { level: args.level, ..WriteOptions::default() };
            model.write_to(io::BufWriter::new(f), &wopts).map_err(|e| CmdError::opt(None, e.to_string()))?;
            pb.finish_and_clear();
            _temp = Some(TempFile(p.clone()));
            p
        }
    };
    let file_len = std::fs::metadata(&path).map_err(|e| io_err("reading", &path, e))?.len();
    let data_size = file_len.saturating_sub(1024);
    let mut best_inflate = Duration::MAX;
    let mut inflate_cpu: Option<f64> = None;
    let mut best: Option<LoadRun> = None;
    let mut best_hashed = Duration::MAX;
    let mut inflated = 0;
    let mut worst_host_kib = 0u64;
    let mut hwm_reset = true;
    let runs = args.runs.max(1);
    // Off a terminal (CI logs, a pipe) the spinner is hidden: say where the run is instead.
    let progress = !io::IsTerminal::is_terminal(&io::stderr());
    for run in 1..=runs {
        if progress {
            eprintln!("bench neff-load: {size_mib} MiB, run {run}/{runs}: raw inflate, streaming load, hashed load");
        }
        let (t, n, cpu) = time_raw_inflate(&path, data_size)?;
        if t < best_inflate {
            inflate_cpu = cpu;
        }
        best_inflate = best_inflate.min(t);
        inflated = n;
        let r = time_load(&path, size_mib << 20, false)?;
        hwm_reset &= r.streamed;
        // Host memory: the process peak less the simulated device memory (which lives in this
        // process); the worst run is reported.
        worst_host_kib = worst_host_kib.max(r.hwm_kib.saturating_sub(r.device_bytes / 1024));
        if best.as_ref().is_none_or(|b| r.elapsed < b.elapsed) {
            best = Some(r);
        }
        let h = time_load(&path, size_mib << 20, true)?;
        hwm_reset &= h.streamed;
        worst_host_kib = worst_host_kib.max(h.hwm_kib.saturating_sub(h.device_bytes / 1024));
        best_hashed = best_hashed.min(h.elapsed);
    }
    let best = best.ok_or_else(|| CmdError::invalid("no run"))?;
    let ratio = best.elapsed.as_secs_f64() / best_inflate.as_secs_f64().max(1e-9);
    let hashed_ratio = best_hashed.as_secs_f64() / best_inflate.as_secs_f64().max(1e-9);
    let peak_mib = worst_host_kib as f64 / 1024.0;
    let weights_mib = (size_mib << 20) as f64 / (1 << 20) as f64;
    let heap_mib = best.heap_peak.map(|b| b as f64 / (1 << 20) as f64);
    let row = json!({
        "bench": "neff-load", "weights_mib": weights_mib, "file_bytes": file_len, "compressed_bytes": data_size,
        "inflated_bytes": inflated,
        "neff_load_s": best.elapsed.as_secs_f64(), "raw_inflate_s": best_inflate.as_secs_f64(),
        "ratio": ratio, "target_ratio": TARGET_RATIO, "within_target": ratio <= TARGET_RATIO,
        "neff_load_hashed_s": best_hashed.as_secs_f64(), "hashed_ratio": hashed_ratio,
        "peak_rss_mib": peak_mib, "peak_rss_incl_sim_device_mib": best.hwm_kib as f64 / 1024.0,
        "sim_device_mib": best.device_bytes as f64 / (1 << 20) as f64,
        "peak_heap_mib": heap_mib, "peak_rss_reset": hwm_reset,
        "neff_load_cpu_s": best.cpu_s, "raw_inflate_cpu_s": inflate_cpu,
        "cpu_ratio": best.cpu_s.zip(inflate_cpu).map(|(l, r)| l / r.max(0.01)),
        "reader_cpu_s": best.reader_cpu_s,
        "reader_cpu_ratio": best.reader_cpu_s.zip(inflate_cpu).map(|(l, r)| l / r.max(0.01)),
        "load_avg": std::fs::read_to_string("/proc/loadavg").ok()
            .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse::<f64>().ok())),
        "rss_budget_mib": RSS_BUDGET_MIB, "rss_within_budget": peak_mib <= RSS_BUDGET_MIB,
    });
    if !json {
        println!("neff-load: {} ({} bytes compressed, {} inflated)", path.display(), data_size, inflated);
        println!("  raw inflate (flate2 → sink):                     {:>8.3} s", best_inflate.as_secs_f64());
        println!("  streaming load (inflate + DMA into device):       {:>8.3} s", best.elapsed.as_secs_f64());
        println!(
            "  ratio {ratio:.3}: {} (target <= {TARGET_RATIO}; libnrt's default, NEURON_RT_VALIDATE_HASH off)",
            if ratio <= TARGET_RATIO { "PASS" } else { "FAIL" }
        );
        println!(
            "  with NEURON_RT_VALIDATE_HASH=1 (+ MD5 on a helper thread): {:>8.3} s, ratio {hashed_ratio:.3}",
            best_hashed.as_secs_f64()
        );
        if let (Some(l), Some(r)) = (best.cpu_s, inflate_cpu) {
            println!(
                "  CPU time: load {l:.2} s (all threads; {:.2} s on the reading thread), raw inflate {r:.2} s",
                best.reader_cpu_s.unwrap_or(0.0)
            );
        }
        println!(
            "  peak host RSS {peak_mib:.1} MiB (process peak {:.1} MiB less {:.1} MiB of simulated device memory; \
             budget {RSS_BUDGET_MIB} MiB: {}){}{}",
            best.hwm_kib as f64 / 1024.0,
            best.device_bytes as f64 / (1 << 20) as f64,
            if peak_mib <= RSS_BUDGET_MIB { "within" } else { "OVER" },
            heap_mib.map(|h| format!(", peak heap {h:.1} MiB")).unwrap_or_default(),
            if hwm_reset { "" } else { " [VmHWM not reset: includes generation]" }
        );
    }
    Ok(row)
}

/// `neuron-vfio bench large-var`
#[derive(Debug, Args)]
pub struct BenchLargeVarArgs {
    /// Size of the model's one large variable (an internal tmp-buf var), e.g. `8G`, `512M`.
    #[arg(long, default_value = "8G")]
    pub size: String,
    /// Simulated arch (its HBM per stack bounds the size).
    #[arg(long, default_value = "sunda")]
    pub arch: String,
    /// Load through the in-memory reader (`Runtime::load`) instead of the streaming one the
    /// CLI uses (`Runtime::load_reader`).
    #[arg(long)]
    pub in_memory: bool,
    /// Runs (a fresh simulated device each; the fastest is reported, the worst peak RSS).
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
}

#[cfg(not(feature = "sim"))]
pub fn bench_large_var(_: BenchLargeVarArgs, _: bool) -> Result<(), CmdError> {
    Err(CmdError::invalid("bench large-var loads into the simulator: built without it (cargo feature `sim`)"))
}

/// `bench large-var`: a model whose one large variable needs zeroed device memory (the trust
/// rule: memory reaches a new owner zeroed) is loaded into a fresh simulated device; prints the
/// load time and the process's peak RSS over the load (the simulated HBM lives in this
/// process, so a simulator that paid host pages for zeroed memory shows it here).
#[cfg(feature = "sim")]
pub fn bench_large_var(args: BenchLargeVarArgs, json: bool) -> Result<(), CmdError> {
    use std::sync::Arc;
    let size = parse_size_mib(&args.size)?
        .checked_mul(1 << 20)
        .ok_or_else(|| CmdError::opt(None, format!("--size {:?} too large", args.size)))?;
    let arch = csr_maps::Arch::by_name(&args.arch)?;
    // HBM per channel: one power-of-two block for the var beside the firmware carve-out.
    let hbm = size
        .max(1 << 26)
        .checked_next_power_of_two()
        .and_then(|b| b.checked_mul(2))
        .filter(|&b| b <= arch.consts.hbm_active_size)
        .ok_or_else(|| {
            CmdError::opt(
                None,
                format!(
                    "--size {}: a {} var does not fit one {} MiB HBM stack of {} twice over (the buddy allocator's \
                     block beside the carve-out)",
                    args.size,
                    args.size,
                    arch.consts.hbm_active_size >> 20,
                    arch.name
                ),
            )
        })?;
    let mut model = builder::single_nc_allreduce();
    model.target = arch.name.to_string();
    if let Some(g) = model.graphs.first_mut() {
        g.vars.push(neff::builder::VarDesc::new("large", neff::VarKind::TmpBuf, size));
    }
    let bytes = model.build().map_err(|e| CmdError::opt(None, e.to_string()))?;
    let e = |e: runtime::RtError| CmdError::new(e.status, e.message());
    let mut best: Option<Duration> = None;
    let (mut worst_hwm, mut worst_rss, mut init_s) = (0u64, 0u64, 0f64);
    let mut hwm_reset = true;
    for _ in 0..args.runs.max(1) {
        let t = Instant::now();
        let sim = sim::SimDevice::new(sim::SimConfig::new(arch).hbm_bytes(hbm)).map_err(CmdError::failure)?;
        let rt = runtime::Runtime::with_observers(runtime::monitoring());
        let opts = hal::DeviceOptions { hbm_limit: Some(hbm), ..Default::default() };
        let plats = select::wrap_traced(vec![Arc::new(sim.clone()) as Arc<dyn platform::Platform>])
            .map_err(CmdError::failure)?;
        rt.init(plats, runtime::RuntimeConfig::physical(), opts).map_err(e)?;
        init_s = t.elapsed().as_secs_f64();
        hwm_reset &= reset_hwm();
        let t = Instant::now();
        let m = if args.in_memory {
            rt.load(&bytes, None, None)
        } else {
            rt.load_reader(&bytes[..], bytes.len() as u64, None, None)
        }
        .map_err(e)?;
        let elapsed = t.elapsed();
        worst_hwm = worst_hwm.max(vm_hwm_kib().unwrap_or(0));
        worst_rss = worst_rss.max(vm_kib("VmRSS:").unwrap_or(0));
        rt.unload(&m).map_err(e)?;
        let _ = rt.close();
        best = Some(best.map_or(elapsed, |b| b.min(elapsed)));
    }
    let best = best.ok_or_else(|| CmdError::invalid("no run"))?;
    let (hwm_mib, rss_mib) = (worst_hwm as f64 / 1024.0, worst_rss as f64 / 1024.0);
    let row = json!({
        "bench": "large-var", "arch": arch.name, "var_bytes": size, "sim_hbm_bytes_per_stack": hbm,
        "reader": if args.in_memory { "in-memory" } else { "streaming" }, "neff_bytes": bytes.len(),
        "load_s": best.as_secs_f64(), "init_s": init_s, "peak_rss_mib": hwm_mib, "rss_after_load_mib": rss_mib,
        "peak_rss_reset": hwm_reset, "load_budget_s": 2.0, "rss_budget_mib": 256.0,
        "within_budget": best.as_secs_f64() < 2.0 && hwm_mib < 256.0,
    });
    if json {
        println!("{row}");
    } else {
        println!(
            "large-var: one {} MiB var on {} ({} MiB HBM per stack, {} reader, NEFF {} bytes)",
            size >> 20,
            arch.name,
            hbm >> 20,
            if args.in_memory { "in-memory" } else { "streaming" },
            bytes.len()
        );
        println!(
            "  load              {:>8.3} s   (budget < 2 s; device open + init {init_s:.3} s)",
            best.as_secs_f64()
        );
        println!(
            "  peak RSS          {hwm_mib:>8.1} MiB (budget < 256 MiB){}",
            if hwm_reset { "" } else { " [VmHWM not reset: includes process start]" }
        );
        println!("  RSS after load    {rss_mib:>8.1} MiB");
    }
    Ok(())
}
