//! `dma copy` (file ↔ device memory) and `dma bench` (H2D/D2H/D2D next to a memcpy
//! baseline measured in the same run). Transfers run on the NC's host-facing DMA engine
//! through DMA-mapped host buffers.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use hal::{Device, Xfer};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::device::{self, DeviceSpec, SimTiming};
use crate::report::{print_json, CliError};

/// Host bounce-buffer size for `copy`.
const CHUNK: usize = 4 << 20;
/// Transfers at least this long get a progress bar (on a TTY, not under --json).
const PROGRESS_MIN: u64 = 8 << 20;

#[derive(Subcommand)]
pub enum DmaCmd {
    /// Copy a file to device memory, or device memory to a file.
    ///
    /// ADDR is a device address (0x…) or hbm:CHAN:OFFSET.
    /// `--to-device FILE --addr ADDR [--out BACK]` writes FILE (and reads the range back
    /// into BACK in the same run); `--from-device ADDR --len N --out FILE` reads.
    Copy(CopyArgs),
    /// H2D / D2H / D2D bandwidth next to a host memcpy of the same size.
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct CopyArgs {
    /// File to write to device memory.
    #[arg(long, value_name = "FILE", conflicts_with = "from_device", required_unless_present = "from_device")]
    to_device: Option<PathBuf>,
    /// Destination of --to-device.
    #[arg(long, value_name = "ADDR", requires = "to_device")]
    addr: Option<String>,
    /// Device address to read from.
    #[arg(long, value_name = "ADDR", requires_all = ["len", "out"])]
    from_device: Option<String>,
    /// Bytes to read (K/M/G suffixes allowed).
    #[arg(long)]
    len: Option<String>,
    /// Output file (with --to-device: read the written range back into it).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// NeuronCore whose host-facing engine moves the data.
    #[arg(long, default_value_t = 0)]
    nc: usize,
    /// Allow writes into the firmware carve-out at the start of an HBM channel.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Bytes per transfer (K/M/G suffixes allowed).
    #[arg(long, default_value = "64M")]
    size: String,
    /// Timed transfers per direction (after one warm-up).
    #[arg(long, default_value_t = 5)]
    iters: u32,
    /// NeuronCore whose host-facing engine moves the data.
    #[arg(long, default_value_t = 0)]
    nc: usize,
}

pub fn run(cmd: DmaCmd, spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    match cmd {
        DmaCmd::Copy(a) => copy(a, spec, timing, json),
        DmaCmd::Bench(a) => bench(a, spec, timing, json),
    }
}

/// A byte count: decimal, 0x hex, or with a K/M/G (KiB/MiB/GiB) suffix.
pub fn parse_size(s: &str) -> Result<u64, CliError> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, shift) = [("kib", 10), ("mib", 20), ("gib", 30), ("k", 10), ("m", 20), ("g", 30)]
        .iter()
        .find_map(|(suf, sh)| lower.strip_suffix(suf).map(|n| (n.to_string(), *sh)))
        .unwrap_or((lower.clone(), 0));
    csr_maps::parse_u64(&num)
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| CliError::invalid(format!("bad size `{s}` (bytes, or with a K/M/G suffix)")))
}

/// A device address: `0x…` or `hbm:CHAN:OFFSET`; checked to lie in one HBM channel for
/// `len` bytes. Returns the address and its (channel, offset).
fn parse_addr(dev: &Device, s: &str, len: u64, force: bool) -> Result<u64, CliError> {
    let arch = dev.arch();
    let addr = match s.trim().strip_prefix("hbm:") {
        Some(rest) => {
            let (c, o) = rest
                .split_once(':')
                .ok_or_else(|| CliError::invalid(format!("bad address `{s}` (hbm:CHAN:OFFSET)")))?;
            let chan = csr_maps::parse_u64(c).ok_or_else(|| CliError::invalid(format!("bad HBM channel `{c}`")))?;
            let off = csr_maps::parse_u64(o).ok_or_else(|| CliError::invalid(format!("bad HBM offset `{o}`")))?;
            if chan >= arch.counts.hbm_stacks {
                return Err(CliError::invalid(format!(
                    "HBM channel {chan} out of range ({} has {})",
                    arch.name, arch.counts.hbm_stacks
                )));
            }
            arch.hbm_dev_addr(chan, off).ok_or_else(|| CliError::invalid(format!("no HBM channel {chan}")))?
        }
        None => csr_maps::parse_u64(s).ok_or_else(|| CliError::invalid(format!("bad device address `{s}`")))?,
    };
    let last = addr.checked_add(len.max(1) - 1).ok_or_else(|| CliError::invalid("address range overflows"))?;
    // The allocator's capacity excludes the carve-out at the start of the channel; offsets
    // here count from the channel start, so the channel ends at carve-out + capacity.
    let usable = dev
        .allocator()
        .usage(0)
        .map(|u| u.capacity.saturating_add(arch.consts.fw_carveout))
        .unwrap_or(arch.consts.hbm_active_size);
    match (arch.dev_to_hbm(addr), arch.dev_to_hbm(last)) {
        (Some((c0, o0)), Some((c1, o1))) if c0 == c1 && o1 < usable => {
            if o0 < arch.consts.fw_carveout && !force {
                return Err(CliError::invalid(format!(
                    "{addr:#x} is in the firmware carve-out of HBM channel {c0} (first {:#x} bytes); use --force",
                    arch.consts.fw_carveout
                )));
            }
            Ok(addr)
        }
        _ => Err(CliError::invalid(format!(
            "device range {addr:#x}+{len:#x} is not inside one HBM channel of {} ({:#x} bytes each)",
            arch.name, usable
        ))),
    }
}

fn progress(len: u64, json: bool, what: &str) -> ProgressBar {
    bar(
        len,
        json || len < PROGRESS_MIN,
        what,
        "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
}

/// A progress bar on stderr, hidden under --json or when stderr is not a terminal.
fn bar(len: u64, hidden: bool, what: &str, template: &str) -> ProgressBar {
    if hidden || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn io_err(p: &std::path::Path, e: std::io::Error) -> CliError {
    CliError::invalid(format!("{}: {e}", p.display()))
}

/// Device range → file, through a bounce buffer.
fn to_file(dev: &Device, nc: usize, addr: u64, len: u64, out: &std::path::Path, json: bool) -> Result<(), CliError> {
    let f = File::create(out).map_err(|e| io_err(out, e))?;
    let mut w = BufWriter::new(f);
    let bounce = dev.alloc_host(CHUNK.min(len.max(1) as usize), 4096)?;
    let mut buf = vec![0u8; bounce.len()];
    let pb = progress(len, json, "D2H");
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(bounce.len() as u64) as usize;
        dev.copy(nc, &[Xfer { src: addr + done, dst: dev.host_addr(&bounce), len: n as u64 }])?;
        bounce.read(0, &mut buf[..n])?;
        w.write_all(&buf[..n]).map_err(|e| io_err(out, e))?;
        done += n as u64;
        pb.set_position(done);
    }
    w.flush().map_err(|e| io_err(out, e))?;
    pb.finish_and_clear();
    Ok(())
}

fn copy(a: CopyArgs, spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    let o = device::open(spec, timing)?;
    o.check_nc(a.nc)?;
    let dev = &o.dev;
    let start = Instant::now();
    let (dir, addr, len) = if let Some(path) = &a.to_device {
        let addr_s = a.addr.as_deref().ok_or_else(|| CliError::invalid("--to-device needs --addr ADDR"))?;
        let f = File::open(path).map_err(|e| io_err(path, e))?;
        let len = f.metadata().map_err(|e| io_err(path, e))?.len();
        let addr = parse_addr(dev, addr_s, len, a.force)?;
        let mut r = BufReader::new(f);
        let bounce = dev.alloc_host(CHUNK.min(len.max(1) as usize), 4096)?;
        let mut buf = vec![0u8; bounce.len()];
        let pb = progress(len, json, "H2D");
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(bounce.len() as u64) as usize;
            r.read_exact(&mut buf[..n]).map_err(|e| io_err(path, e))?;
            bounce.write(0, &buf[..n])?;
            dev.copy(a.nc, &[Xfer { src: dev.host_addr(&bounce), dst: addr + done, len: n as u64 }])?;
            done += n as u64;
            pb.set_position(done);
        }
        pb.finish_and_clear();
        if let Some(out) = &a.out {
            to_file(dev, a.nc, addr, len, out, json)?;
        }
        ("to_device", addr, len)
    } else {
        let from = a.from_device.as_deref().ok_or_else(|| CliError::invalid("give --to-device or --from-device"))?;
        let len = parse_size(a.len.as_deref().ok_or_else(|| CliError::invalid("--from-device needs --len N"))?)?;
        let out = a.out.as_deref().ok_or_else(|| CliError::invalid("--from-device needs --out FILE"))?;
        let addr = parse_addr(dev, from, len, true)?;
        to_file(dev, a.nc, addr, len, out, json)?;
        ("from_device", addr, len)
    };
    let secs = start.elapsed().as_secs_f64();
    if json {
        print_json(&json!({
            "device": o.label, "direction": dir, "addr": addr, "len": len, "nc": a.nc, "seconds": secs,
            "read_back": a.to_device.is_some() && a.out.is_some(),
        }));
    } else {
        println!("{dir}: {len} bytes at device address {addr:#x} on {} NC {} in {:.3} s", o.label, a.nc, secs);
    }
    Ok(())
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 / s / 1e9
    } else {
        0.0
    }
}

fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

fn bench(a: BenchArgs, spec: &DeviceSpec, timing: SimTiming, json: bool) -> Result<(), CliError> {
    let size = parse_size(&a.size)?;
    if size == 0 || size > (1 << 34) {
        return Err(CliError::invalid(format!("--size {size} out of range (1 byte to 16 GiB)")));
    }
    if a.iters == 0 {
        return Err(CliError::invalid("--iters must be at least 1"));
    }
    let o = device::open(spec, timing)?;
    o.check_nc(a.nc)?;
    let dev = &o.dev;
    let n = size as usize;
    let chan = dev.hbm_for_nc(a.nc);
    // Pinned (DMA-mapped) host buffers: what the engines move.
    let src = dev.alloc_host(n, 4096)?;
    let dst = dev.alloc_host(n, 4096)?;
    let mut data = vec![0u8; n];
    pattern(&mut data, 1);
    src.write(0, &data)?;
    dst.fill(0, n, 0)?;
    let d0 = dev.alloc_device(chan, size, 4096)?;
    let d1 = dev.alloc_device(chan, size, 4096)?;
    let h2d = Xfer { src: dev.host_addr(&src), dst: d0.addr(), len: size };
    let d2h = Xfer { src: d0.addr(), dst: dev.host_addr(&dst), len: size };
    let d2d = Xfer { src: d0.addr(), dst: d1.addr(), len: size };

    let steps = 3 * (a.iters as u64 + 1) + a.iters as u64 + 1;
    let pb = bar(steps, json || size < PROGRESS_MIN, "dma bench", "{msg} [{bar:40}] {pos}/{len} transfers");
    let time = |x: &Xfer| -> Result<Duration, CliError> {
        dev.copy(a.nc, std::slice::from_ref(x))?; // warm-up: first touch of every page
        pb.inc(1);
        let t = Instant::now();
        for _ in 0..a.iters {
            dev.copy(a.nc, std::slice::from_ref(x))?;
            pb.inc(1);
        }
        Ok(t.elapsed())
    };
    let t_h2d = time(&h2d)?;
    let t_d2d = time(&d2d)?;
    // D2D last into d1 must not disturb the D2H check: D2H reads d0.
    let t_d2h = time(&d2h)?;
    // Check what arrived (outside the timed loops).
    let mut back = vec![0u8; n];
    dst.read(0, &mut back)?;
    if back != data {
        return Err(CliError::new(
            crate::report::NrtStatus::HwError,
            "DMA bench: data read back differs from data written",
        ));
    }
    // Baseline: a plain copy of the same size between two host buffers, same run.
    let mut m_dst = vec![0u8; n];
    m_dst.copy_from_slice(&data);
    pb.inc(1);
    let t = Instant::now();
    for _ in 0..a.iters {
        m_dst.copy_from_slice(std::hint::black_box(&data));
        std::hint::black_box(&mut m_dst);
        pb.inc(1);
    }
    let t_memcpy = t.elapsed();
    pb.finish_and_clear();
    drop((d0, d1, src, dst));

    let bytes = size * a.iters as u64;
    let memcpy = gbps(bytes, t_memcpy);
    let dir = |d: Duration| {
        let g = gbps(bytes, d);
        json!({"gbps": g, "memcpy_gbps": memcpy, "ratio_vs_memcpy": if memcpy > 0.0 { g / memcpy } else { 0.0 }, "seconds": d.as_secs_f64()})
    };
    let v = json!({
        "device": o.label,
        "arch": dev.arch().name,
        "simulated": o.is_sim(),
        "sim_timing": if o.is_sim() { Some(format!("{timing:?}").to_lowercase()) } else { None },
        "size": size,
        "iters": a.iters,
        "nc": a.nc,
        "memcpy_gbps": memcpy,
        "h2d": dir(t_h2d),
        "d2h": dir(t_d2h),
        "d2d": dir(t_d2d),
    });
    if json {
        print_json(&v);
        return Ok(());
    }
    println!(
        "dma bench on {} ({}{}), NC {}: {} MiB x {} per direction",
        o.label,
        dev.arch().name,
        if o.is_sim() { format!(", sim timing {}", v["sim_timing"].as_str().unwrap_or("?")) } else { String::new() },
        a.nc,
        size >> 20,
        a.iters
    );
    println!("{:<8} {:>10} {:>12} {:>8}", "dir", "GB/s", "memcpy GB/s", "ratio");
    for d in ["h2d", "d2h", "d2d"] {
        println!(
            "{:<8} {:>10.2} {:>12.2} {:>8.2}",
            d.to_uppercase(),
            v[d]["gbps"].as_f64().unwrap_or(0.0),
            memcpy,
            v[d]["ratio_vs_memcpy"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("0x1000").ok(), Some(4096));
        assert_eq!(parse_size("64M").ok(), Some(64 << 20));
        assert_eq!(parse_size("64MiB").ok(), Some(64 << 20));
        assert_eq!(parse_size("2g").ok(), Some(2 << 30));
        assert_eq!(parse_size("8K").ok(), Some(8 << 10));
        for bad in ["", "M", "lots", "-1", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
