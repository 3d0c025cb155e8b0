//! MMIO trace: every BAR read and write the driver makes, timestamped and decoded to the
//! register and field names csr-maps knows — like the kernel's mmiotrace, but named.
//!
//! On when `NEURON_VFIO_MMIO_TRACE=FILE` is set or a front end calls [`set_mmio_trace`]
//! (the CLI's `--mmio-trace FILE`): [`open_platforms`](crate::open_platforms) then wraps
//! each platform in a [`TracedPlatform`]. One line per access:
//!
//! ```text
//! 12.345678 dev0 W32 BAR0+0x30fa0004 = 0x00000001 misc_ram.fw_io_cmd (cmd=0x1)
//! ```
//!
//! (seconds since the trace opened, device index, access and width, BAR and offset, value,
//! register name and fields; `?` where no register is known at that offset).

use std::fs::File;
use std::io::{LineWriter, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use csr_maps::Arch;
use platform::{DeviceIdentity, DmaDir, DmaMapping, HostMem, Mmio, MmioError, Platform, PlatformError};

static TRACE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// The process's trace sink and the file it writes ([`wrap`]).
static SINK: Mutex<Option<(PathBuf, Arc<TraceSink>)>> = Mutex::new(None);

/// Trace every platform opened from now on into `path` (overrides `NEURON_VFIO_MMIO_TRACE`).
/// Only the first call takes effect.
pub fn set_mmio_trace(path: &Path) {
    let _ = TRACE_PATH.set(path.to_path_buf());
}

/// Where to trace, if anywhere: [`set_mmio_trace`], else `NEURON_VFIO_MMIO_TRACE`.
pub fn mmio_trace_path() -> Option<PathBuf> {
    TRACE_PATH
        .get()
        .cloned()
        .or_else(|| std::env::var_os("NEURON_VFIO_MMIO_TRACE").filter(|v| !v.is_empty()).map(PathBuf::from))
}

/// The trace file, shared by every traced platform of the process.
pub struct TraceSink {
    out: Mutex<LineWriter<File>>,
    t0: Instant,
}

impl TraceSink {
    /// Create (truncate) the trace file.
    pub fn create(path: &Path) -> std::io::Result<Arc<Self>> {
        let f = File::create(path)?;
        Ok(Arc::new(Self { out: Mutex::new(LineWriter::new(f)), t0: Instant::now() }))
    }

    /// A comment line in the trace: `# SECONDS mark TEXT` (what a harness did at that point).
    pub fn mark(&self, text: &str) {
        let t = self.t0.elapsed().as_secs_f64();
        let mut o = platform::sync::lock(&self.out);
        let _ = writeln!(o, "# {t:.6} mark {text}");
    }

    fn line(&self, dev: usize, arch: Option<&'static Arch>, access: &str, bar: u8, off: u64, value: u64) {
        let t = self.t0.elapsed().as_secs_f64();
        let name = match arch.map(|a| a.lookup(bar, off)) {
            Some(Ok(r)) => {
                let fields: Vec<String> = r.decode(value).iter().map(|(n, v)| format!("{n}={v:#x}")).collect();
                if fields.is_empty() {
                    r.name
                } else {
                    format!("{} ({})", r.name, fields.join(" "))
                }
            }
            _ => "?".to_string(),
        };
        let digits = if access.ends_with("64") { 16 } else { 8 };
        let mut o = platform::sync::lock(&self.out);
        // A trace that cannot be written is not worth failing the access for.
        let _ = writeln!(o, "{t:.6} dev{dev} {access} BAR{bar}+{off:#010x} = {value:#0w$x} {name}", w = digits + 2);
    }
}

/// A BAR whose accesses are traced.
pub struct TracedMmio {
    inner: Arc<dyn Mmio>,
    bar: u8,
    dev: usize,
    arch: Option<&'static Arch>,
    sink: Arc<TraceSink>,
}

impl TracedMmio {
    /// Trace the accesses to `inner` (BAR `bar` of device `dev`, registers named by `arch`).
    pub fn new(inner: Arc<dyn Mmio>, bar: u8, dev: usize, arch: Option<&'static Arch>, sink: Arc<TraceSink>) -> Self {
        Self { inner, bar, dev, arch, sink }
    }
}

impl Mmio for TracedMmio {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read32(&self, offset: u64) -> Result<u32, MmioError> {
        let v = self.inner.read32(offset)?;
        self.sink.line(self.dev, self.arch, "R32", self.bar, offset, v as u64);
        Ok(v)
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        self.sink.line(self.dev, self.arch, "W32", self.bar, offset, value as u64);
        self.inner.write32(offset, value)
    }
    fn read64(&self, offset: u64) -> Result<u64, MmioError> {
        let v = self.inner.read64(offset)?;
        self.sink.line(self.dev, self.arch, "R64", self.bar, offset, v);
        Ok(v)
    }
    fn write64(&self, offset: u64, value: u64) -> Result<(), MmioError> {
        self.sink.line(self.dev, self.arch, "W64", self.bar, offset, value);
        self.inner.write64(offset, value)
    }
}

/// A platform whose BAR accesses are traced; everything else is passed through.
pub struct TracedPlatform {
    inner: Arc<dyn Platform>,
    dev: usize,
    arch: Option<&'static Arch>,
    sink: Arc<TraceSink>,
}

impl TracedPlatform {
    /// Trace `inner` (device `dev` of the selection) into `sink`.
    pub fn new(inner: Arc<dyn Platform>, dev: usize, sink: Arc<TraceSink>) -> Self {
        let id = inner.identity();
        let arch = Arch::by_pci_id(id.vendor, id.device);
        Self { inner, dev, arch, sink }
    }
}

impl Platform for TracedPlatform {
    fn identity(&self) -> DeviceIdentity {
        self.inner.identity()
    }
    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let inner = self.inner.bar(index)?;
        Ok(Arc::new(TracedMmio { inner, bar: index, dev: self.dev, arch: self.arch, sink: self.sink.clone() }))
    }
    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        self.inner.dma_map(mem, dir)
    }
    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError> {
        self.inner.irq_eventfd(vector)
    }
    fn reset(&self) -> Result<(), PlatformError> {
        self.inner.reset()
    }
    fn account_device_memory(&self, delta: i64) {
        self.inner.account_device_memory(delta)
    }
    fn device_memory_freed(&self, addr: u64, len: u64) {
        self.inner.device_memory_freed(addr, len)
    }
    fn max_dma_mapping(&self) -> Option<usize> {
        self.inner.max_dma_mapping()
    }
    fn modeled_writes_allowed(&self) -> bool {
        self.inner.modeled_writes_allowed()
    }
    fn reachable(&self) -> bool {
        self.inner.reachable()
    }
}

/// Wrap every platform when a trace is configured (for front ends that open platforms
/// themselves, e.g. the benchmarks' own simulator).
/// Every open of the process appends to one trace: the file is created (truncated) by the
/// first, later opens share its sink (a benchmark opens several simulators in turn).
pub fn wrap(platforms: Vec<Arc<dyn Platform>>) -> Result<Vec<Arc<dyn Platform>>, crate::SelectError> {
    let Some(path) = mmio_trace_path() else { return Ok(platforms) };
    let sink = {
        let mut shared = platform::sync::lock(&SINK);
        match shared.as_ref() {
            Some((p, s)) if *p == path => s.clone(),
            _ => {
                let s = TraceSink::create(&path)
                    .map_err(|source| crate::SelectError::Trace { path: path.clone(), source })?;
                *shared = Some((path, s.clone()));
                s
            }
        }
    };
    Ok(platforms
        .into_iter()
        .enumerate()
        .map(|(i, p)| Arc::new(TracedPlatform::new(p, i, sink.clone())) as Arc<dyn Platform>)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::MemMmio;

    #[test]
    fn accesses_are_logged_with_register_and_field_names() {
        let p = std::env::temp_dir().join(format!("select-trace-{}", std::process::id()));
        let sink = TraceSink::create(&p).expect("create");
        let arch = &csr_maps::SUNDA;
        let r = arch.resolve("misc_ram.fw_api_version").expect("a known register");
        let m =
            TracedMmio { inner: Arc::new(MemMmio::new(r.offset + 0x1000)), bar: r.bar, dev: 0, arch: Some(arch), sink };
        m.write32(r.offset, 7).expect("write");
        assert_eq!(m.read32(r.offset).expect("read"), 7);
        m.write32(r.offset + 0x800, 1).expect("write");
        drop(m);
        let text = std::fs::read_to_string(&p).expect("trace");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("dev0 W32") && lines[0].contains("= 0x00000007 misc_ram.fw_api_version"), "{text}");
        assert!(lines[1].contains("R32") && lines[1].contains("misc_ram.fw_api_version"), "{text}");
        assert!(lines[0].split_whitespace().next().is_some_and(|t| t.parse::<f64>().is_ok()));
        let _ = std::fs::remove_file(&p);
    }
}
