//! csr-maps: the Neuron hardware interface as data.
//!
//! Register blocks (`blocks/*.toml`) and per-arch address maps (`arch/*.toml`) are
//! described declaratively, each number with its public source, and turned into
//! typed Rust at build time:
//!
//! - [`blocks`]: one module per block, with a value type per register (typed field
//!   getters `x()` and builders `with_x(v)`) and a `Block` handle whose methods
//!   return [`regs::Reg`]s that read and write through a [`platform::Mmio`];
//! - [`Regs`]: typed entry points per instance (`regs.udma(33)?.m2s().q(0)?.tail_inc()`);
//! - [`Arch`] ([`SUNDA`], [`CAYMAN`], [`MARIANA`]): counts, constants, BAR roles,
//!   instance placements and memory regions;
//! - [`meta`] and [`Arch::registers`]: the same definitions at run time, for the
//!   CSR debugger (name ↔ offset ↔ fields);
//! - [`formats`]: in-memory records shared by driver and device.
//!
//! No I/O, no unsafe.
#![forbid(unsafe_code)]

pub mod consts;
pub mod formats;

pub use consts::seq::Engine;
pub mod meta;
pub mod names;
pub mod regs;

pub use names::{parse_u64, RegInstance};

use platform::{Mmio, MmioError};

mod generated {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/generated.rs"));
}
pub use generated::{blocks, Bars, Consts, Counts, InstanceId, LeafReg, RegId, ARCHES, BLOCKS, CAYMAN, MARIANA, SUNDA};

use meta::{BlockDef, ConstDef, InstanceDef, RegionDef};

/// Errors of register addressing and access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("{what} index {index} out of range (count {count})")]
    Index { what: &'static str, index: u64, count: u64 },
    #[error("no instance {index} of `{name}` on this arch")]
    NoInstance { name: String, index: u64 },
    #[error("unknown register name `{0}`")]
    UnknownName(String),
    #[error("bad register path `{path}`: {reason}")]
    BadPath { path: String, reason: String },
    #[error("no register at BAR{bar} offset {offset:#x}")]
    NoRegisterAt { bar: u8, offset: u64 },
    #[error("unknown arch `{0}` (expected sunda, cayman or mariana)")]
    UnknownArch(String),
    #[error("bad offset `{0}`")]
    BadOffset(String),
    #[error("empty register prefix")]
    EmptyPrefix,
    #[error("bad register prefix `{0}`")]
    BadPrefix(String),
    #[error("no registers under `{0}`")]
    NothingUnder(String),
    #[error(transparent)]
    Mmio(#[from] MmioError),
}

impl CsrError {
    /// The `NRT_STATUS` a front end reports: a failed register access is NRT_FAILURE; a
    /// register name, path, index, offset or arch that does not exist is a bad argument,
    /// NRT_INVALID. Exhaustive: a new variant must choose.
    pub fn status(&self) -> nrt_status::NrtStatus {
        use nrt_status::NrtStatus;
        match self {
            CsrError::Mmio(_) => NrtStatus::Failure,
            CsrError::Index { .. }
            | CsrError::NoInstance { .. }
            | CsrError::UnknownName(_)
            | CsrError::BadPath { .. }
            | CsrError::NoRegisterAt { .. }
            | CsrError::UnknownArch(_)
            | CsrError::BadOffset(_)
            | CsrError::EmptyPrefix
            | CsrError::BadPrefix(_)
            | CsrError::NothingUnder(_) => NrtStatus::Invalid,
        }
    }
}

impl nrt_status::Status for CsrError {
    fn status(&self) -> nrt_status::NrtStatus {
        CsrError::status(self)
    }
}

/// One Neuron hardware generation: identity, counts, constants and address map.
#[derive(Debug)]
pub struct Arch {
    /// Codename: `sunda`, `cayman`, `mariana`.
    pub name: &'static str,
    /// The kmod's name (`V2`, `V3`, `V4`).
    pub kmod_name: &'static str,
    /// NeuronCore version (2, 3, 4).
    pub nc_version: u8,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    pub pci_vendor: u16,
    pub pci_devices: &'static [u16],
    pub source: &'static str,
    pub bars: Bars,
    pub counts: Counts,
    pub consts: Consts,
    pub const_meta: &'static [ConstDef],
    pub instances: &'static [InstanceDef],
    pub regions: &'static [RegionDef],
}

impl Arch {
    /// The logical NeuronCore size for a requested one (None: `lnc_default`): None when the
    /// arch has no such size (above `lnc_max`, or not dividing its cores).
    pub fn lnc(&self, requested: Option<u32>) -> Option<usize> {
        let max = self.consts.lnc_max.max(1);
        match requested {
            None => Some(self.consts.lnc_default.clamp(1, max) as usize),
            Some(r) if r >= 1 && u64::from(r) <= max && self.counts.ncs.is_multiple_of(u64::from(r)) => {
                Some(r as usize)
            }
            Some(_) => None,
        }
    }
}

impl PartialEq for Arch {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for Arch {}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Arch {
    /// Look up an arch by codename, kmod name (`v2`) or alias (`trn1`), case-insensitive.
    pub fn by_name(name: &str) -> Result<&'static Arch, CsrError> {
        let n = name.to_ascii_lowercase();
        ARCHES
            .iter()
            .copied()
            .find(|a| a.name == n || a.kmod_name.eq_ignore_ascii_case(&n) || a.aliases.iter().any(|x| *x == n))
            .ok_or_else(|| CsrError::UnknownArch(name.to_string()))
    }

    /// The arch of a PCI vendor/device ID pair.
    pub fn by_pci_id(vendor: u16, device: u16) -> Option<&'static Arch> {
        ARCHES.iter().copied().find(|a| a.pci_vendor == vendor && a.pci_devices.contains(&device))
    }

    /// The arch of a NeuronCore version number (2, 3, 4: what the runtime's counters carry).
    pub fn by_nc_version(nc_version: u64) -> Option<&'static Arch> {
        ARCHES.iter().copied().find(|a| u64::from(a.nc_version) == nc_version)
    }

    /// The placement table of instance `name`.
    pub fn instance(&self, name: &str) -> Option<&'static InstanceDef> {
        self.instances.iter().find(|i| i.name == name)
    }

    /// The memory region `name`.
    pub fn region(&self, name: &str) -> Option<&'static RegionDef> {
        self.regions.iter().find(|r| r.name == name)
    }

    /// BAR offset of instance `i` of `name`.
    pub fn instance_base(&self, name: &str, i: u64) -> Result<u64, CsrError> {
        self.instance(name)
            .and_then(|d| d.base(i))
            .ok_or_else(|| CsrError::NoInstance { name: name.to_string(), index: i })
    }

    /// BAR0 byte ranges `[start, end)` (sorted, merged) a driver must not write on real
    /// hardware without the operator's opt-in: every register whose placement or layout is
    /// modeled, and the whole span of modeled blocks and instances. Computed once per arch.
    pub fn modeled_spans(&'static self) -> &'static [(u64, u64)] {
        static SPANS: [std::sync::OnceLock<Vec<(u64, u64)>>; 3] =
            [std::sync::OnceLock::new(), std::sync::OnceLock::new(), std::sync::OnceLock::new()];
        let i = ARCHES.iter().position(|a| a.name == self.name).unwrap_or(0).min(SPANS.len() - 1);
        SPANS[i].get_or_init(|| self.compute_modeled_spans())
    }

    fn compute_modeled_spans(&self) -> Vec<(u64, u64)> {
        fn collect(arch: &Arch, b: &'static BlockDef, base: u64, whole: bool, out: &mut Vec<(u64, u64)>) {
            if whole || b.modeled {
                out.push((base, base + b.size));
                return;
            }
            for r in b.regs.iter().filter(|r| r.modeled && r.on_arch(arch.name)) {
                for k in 0..r.count {
                    let o = base + r.offset + k * r.stride;
                    out.push((o, o + r.bytes()));
                }
            }
            for s in b.subs {
                let Some(sb) = meta::block(s.block) else { continue };
                for k in 0..s.count {
                    collect(arch, sb, base + s.offset + k * s.stride, false, out);
                }
            }
        }
        let mut v = Vec::new();
        for inst in self.instances.iter().filter(|i| i.bar == self.bars.apb) {
            let Some(b) = meta::block(inst.block) else { continue };
            for i in inst.indices() {
                if let Some(base) = inst.base(i) {
                    collect(self, b, base, inst.modeled, &mut v);
                }
            }
        }
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }

    /// Whether an access of `width` bytes at BAR0 offset `offset` touches a modeled span
    /// ([`Arch::modeled_spans`]).
    pub fn is_modeled(&'static self, offset: u64, width: u64) -> bool {
        let spans = self.modeled_spans();
        let end = offset.saturating_add(width);
        // The first span ending after `offset`.
        let i = spans.partition_point(|&(_, e)| e <= offset);
        spans.get(i).is_some_and(|&(s, _)| s < end)
    }

    /// BAR0 offset of a device (chip) address that falls in a BAR0 window (TPB, TOP_SP, APB),
    /// or `None` (HBM, host, or unmapped). Used by device-side register writes (DMA to a CSR).
    pub fn dev_to_bar0(&self, addr: u64) -> Option<u64> {
        self.regions.iter().filter(|r| r.bar == self.bars.apb).find_map(|r| {
            (0..r.count()).find_map(|i| {
                let d = r.dev_base(i)?;
                (addr >= d && addr - d < r.size).then(|| r.base(i).map(|b| b + (addr - d))).flatten()
            })
        })
    }

    /// Device (chip) address of a BAR0 offset inside a window with a known device base.
    pub fn bar0_to_dev(&self, offset: u64) -> Option<u64> {
        self.regions.iter().filter(|r| r.bar == self.bars.apb).find_map(|r| {
            (0..r.count()).find_map(|i| {
                let b = r.base(i)?;
                (offset >= b && offset - b < r.size).then(|| r.dev_base(i).map(|d| d + (offset - b))).flatten()
            })
        })
    }

    /// HBM stack and offset of a device address, if it falls in a stack's active range.
    pub fn dev_to_hbm(&self, addr: u64) -> Option<(u64, u64)> {
        let hbm = self.region("hbm")?;
        (0..hbm.count()).find_map(|k| {
            let d = hbm.dev_base(k)?;
            (addr >= d && addr - d < hbm.size).then(|| (k, addr - d))
        })
    }

    /// Device address of HBM stack `k` offset `off`.
    pub fn hbm_dev_addr(&self, k: u64, off: u64) -> Option<u64> {
        self.region("hbm")?.dev_base(k).map(|d| d + off)
    }

    /// Host IOVA of a device address in the PCIe host window, if it is one.
    pub fn dev_to_host_iova(&self, addr: u64) -> Option<u64> {
        (addr & self.consts.host_route_mask == self.consts.host_base).then_some(addr & !self.consts.host_route_mask)
    }

    /// Device (chip) address of a host IOVA as DMA engines see it: the PCIe host window bit is ORed in.
    pub fn host_dev_addr(&self, iova: u64) -> u64 {
        iova | self.consts.host_base
    }
}

/// Typed register access for one arch over one BAR.
#[derive(Clone, Copy)]
pub struct Regs<'a> {
    pub arch: &'static Arch,
    pub mmio: &'a dyn Mmio,
}

impl<'a> Regs<'a> {
    /// Typed access to `mmio` laid out as `arch`'s BAR0.
    pub fn new(arch: &'static Arch, mmio: &'a dyn Mmio) -> Self {
        Self { arch, mmio }
    }
}
