//! Q7 (GPSIMD) ucode staging and DGE programming: the nrtucode object model (docs/facts/libnrt-runtime-model.md §C,
//! docs/facts/libnrt.md §6-7) over the cores' device-DRAM control blocks.
//!
//! - [`UcodeContext`]: created only at API level 3 (else error 4).
//! - [`UcodeCore`]: one core (a Q7 pool core or an NX engine core); `on_ucode_booted`
//!   performs the claim handshake (`READY` → `CLAIMED`, the words in
//!   [`csr_maps::consts::q7`]; already claimed → 8); dropping a booted core releases it
//!   (writes `READY` back).
//! - [`LoadableLib`]: a prelinked UCPL image staged in device memory (> 64 KiB → 7).
//! - [`Opset`]: 256 opcode slots, each optionally a 256-bit specialisation bitmap.
//! - DGE: priority-class map and mailboxes, gated to NX_POOL coretypes (violation → 8).

use csr_maps::blocks::q7 as qb;
use csr_maps::consts::q7 as q7c;
use csr_maps::formats::dge::{DgeMailbox, MAILBOXES, MAILBOX_RESET, PRIORITY_CLASSES};
use csr_maps::formats::ucpl::{UcplHeader, MAX_IMAGE_BYTES};
use csr_maps::{Arch, Regs};

use crate::device::Device;
use crate::error::HalError;
pub use crate::error::UcodeError;
use crate::mem::DevBuf;

impl UcodeError {
    /// The `NRT_STATUS` for an nrtucode failure, by its code: an image too large or memory
    /// short (7, 5) is NRT_RESOURCE; invalid arguments and states (8) NRT_INVALID; an
    /// unsupported API level (4) or any other code NRT_FAILURE.
    pub fn status(&self) -> nrt_status::NrtStatus {
        use nrt_status::NrtStatus;
        match self.code {
            q7c::ERR_TOO_LARGE | q7c::ERR_OOM => NrtStatus::Resource,
            q7c::ERR_INVALID => NrtStatus::Invalid,
            _ => NrtStatus::Failure,
        }
    }
}

impl nrt_status::Status for UcodeError {
    fn status(&self) -> nrt_status::NrtStatus {
        UcodeError::status(self)
    }
}

fn err(code: u32, what: &'static str) -> UcodeError {
    UcodeError { code, what }
}

/// nrtucode context.
#[derive(Debug)]
pub struct UcodeContext {
    api_level: u32,
}

impl UcodeContext {
    /// Create a context; only API level 3 is supported.
    pub fn new(api_level: u32) -> Result<Self, UcodeError> {
        if api_level != q7c::API_LEVEL {
            return Err(err(q7c::ERR_BAD_API, "unsupported nrtucode API level"));
        }
        Ok(Self { api_level })
    }
    /// API level.
    pub fn api_level(&self) -> u32 {
        self.api_level
    }
}

/// Which control block a core object drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreKind {
    /// Q7 pool core `core` (0..8) of an NC.
    Q7Pool { core: u64 },
    /// NX engine core of an NC (0 PE, 1 ACT, 2 POOL, 3 DVE, 4 SP).
    Nx { engine: u64 },
}

/// The coretype number of a core on `arch` (docs/facts/libnrt.md §7.1): Q7 pool cores use the
/// arch's Q7_POOL coretype; the NX POOL core uses the coretype admitted by the DGE gate.
pub fn coretype(arch: &Arch, kind: CoreKind) -> u32 {
    match kind {
        CoreKind::Q7Pool { .. } => arch.consts.q7_pool_coretype as u32,
        CoreKind::Nx { .. } => arch.consts.nx_pool_coretype as u32,
    }
}

/// nrtucode core object.
pub struct UcodeCore {
    dev: Device,
    pub nc: usize,
    pub kind: CoreKind,
    pub coretype: u32,
    booted: bool,
    friendly: String,
}

impl UcodeCore {
    /// A core object for `kind` on NC `nc` (not yet booted).
    pub fn new(_ctx: &UcodeContext, dev: &Device, nc: usize, kind: CoreKind) -> Result<Self, UcodeError> {
        if nc >= dev.nc_count() {
            return Err(err(q7c::ERR_INVALID, "no such NeuronCore"));
        }
        let ok = match kind {
            CoreKind::Q7Pool { core } => core < q7c::POOL_CORES,
            CoreKind::Nx { engine } => engine < csr_maps::Engine::COUNT as u64,
        };
        if !ok {
            return Err(err(q7c::ERR_INVALID, "no such core"));
        }
        let friendly = match kind {
            CoreKind::Q7Pool { core } => format!("ND[{}]NC[{nc}].Q7_POOL[{core}]", dev.index()),
            CoreKind::Nx { engine } => format!("ND[{}]NC[{nc}].NX[{engine}]", dev.index()),
        };
        Ok(Self { dev: dev.clone(), nc, kind, coretype: coretype(dev.arch(), kind), booted: false, friendly })
    }

    /// Friendly name.
    pub fn name(&self) -> &str {
        &self.friendly
    }

    fn block(&self) -> Result<qb::Block<'_>, UcodeError> {
        let regs = self.dev.regs();
        let nx = csr_maps::Engine::COUNT as u64;
        let b = match self.kind {
            CoreKind::Q7Pool { core } => regs.q7(self.nc as u64 * q7c::POOL_CORES + core),
            CoreKind::Nx { engine } => regs.nx(self.nc as u64 * nx + engine),
        };
        b.map(|b| qb::Block::at(self.dev.bar0(), b.base())).map_err(|_| err(q7c::ERR_INVALID, "no control block"))
    }

    fn rd(&self, f: impl FnOnce(&qb::Block<'_>) -> Result<u32, csr_maps::CsrError>) -> Result<u32, UcodeError> {
        let b = self.block()?;
        f(&b).map_err(|_| err(q7c::ERR_INVALID, "control block access failed"))
    }

    /// The claim handshake: READY → write CLAIMED, booted; CLAIMED → 8 (another instance
    /// owns it); anything else → 8 (magic mismatch).
    pub fn on_ucode_booted(&mut self) -> Result<(), UcodeError> {
        platform::failpoint::hit("hal.q7.claim").map_err(|_| err(q7c::ERR_INVALID, "injected failure (failpoint)"))?;
        let b = self.block()?;
        let v = b.claim().read().map_err(|_| err(q7c::ERR_INVALID, "claim read failed"))?.0;
        match v {
            q7c::READY => {
                b.claim().write(qb::Claim(q7c::CLAIMED)).map_err(|_| err(q7c::ERR_INVALID, "claim write failed"))?;
                self.booted = true;
                Ok(())
            }
            q7c::CLAIMED => Err(err(q7c::ERR_INVALID, "core already claimed by another instance")),
            _ => Err(err(q7c::ERR_INVALID, "boot magic mismatch")),
        }
    }

    /// Whether the handshake succeeded.
    pub fn booted(&self) -> bool {
        self.booted
    }

    fn dge_gate(&self) -> Result<(), UcodeError> {
        if !self.booted {
            return Err(err(q7c::ERR_INVALID, "core not booted"));
        }
        if self.coretype >= 64 || q7c::NX_POOL_MASK & (1u64 << self.coretype) == 0 {
            return Err(err(q7c::ERR_INVALID, "DGE API is NX_POOL-only"));
        }
        Ok(())
    }

    /// Program priority classes 1..=n (bytes per packet); n ≤ 4.
    pub fn dge_set_priority_class_map(&self, classes: &[u32]) -> Result<(), UcodeError> {
        self.dge_gate()?;
        if classes.len() > PRIORITY_CLASSES {
            return Err(err(q7c::ERR_INVALID, "more than 4 priority classes"));
        }
        let b = self.block()?;
        for (i, &v) in classes.iter().enumerate() {
            b.prio_class(i as u64)
                .and_then(|r| r.write(qb::PrioClass(v)))
                .map_err(|_| err(q7c::ERR_INVALID, "priority class write failed"))?;
        }
        Ok(())
    }

    /// Read back priority classes.
    pub fn dge_get_priority_class_map(&self) -> Result<[u32; PRIORITY_CLASSES], UcodeError> {
        self.dge_gate()?;
        let mut out = [0u32; PRIORITY_CLASSES];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.rd(|b| b.prio_class(i as u64)?.read().map(|v| v.0))?;
        }
        Ok(out)
    }

    /// Use the first `n` mailboxes (n ≤ 4): entries ≥ n are reset to the default.
    pub fn dge_mailboxes(&self, n: usize) -> Result<(), UcodeError> {
        self.dge_gate()?;
        if n > MAILBOXES {
            return Err(err(q7c::ERR_INVALID, "more than 4 mailboxes"));
        }
        let b = self.block()?;
        for i in n..MAILBOXES {
            b.dge_mailbox(i as u64)
                .and_then(|r| r.write(qb::DgeMailbox(MAILBOX_RESET)))
                .map_err(|_| err(q7c::ERR_INVALID, "mailbox write failed"))?;
        }
        Ok(())
    }

    /// Set mailbox `idx` (≤ 3).
    pub fn dge_set_mailbox(&self, idx: usize, m: DgeMailbox) -> Result<(), UcodeError> {
        platform::failpoint::hit("hal.q7.mailbox")
            .map_err(|_| err(q7c::ERR_INVALID, "injected failure (failpoint)"))?;
        self.dge_gate()?;
        if idx >= MAILBOXES {
            return Err(err(q7c::ERR_INVALID, "mailbox index > 3"));
        }
        let b = self.block()?;
        b.dge_mailbox(idx as u64)
            .and_then(|r| r.write(qb::DgeMailbox(m.encode())))
            .map_err(|_| err(q7c::ERR_INVALID, "mailbox write failed"))
    }

    /// Read mailbox `idx`.
    pub fn dge_get_mailbox(&self, idx: usize) -> Result<DgeMailbox, UcodeError> {
        self.dge_gate()?;
        if idx >= MAILBOXES {
            return Err(err(q7c::ERR_INVALID, "mailbox index > 3"));
        }
        Ok(DgeMailbox::decode(self.rd(|b| b.dge_mailbox(idx as u64)?.read().map(|v| v.0))?))
    }

    /// Enable PC bounds checking (lo < hi).
    pub fn enable_pc_bounds(&self, lo: u64, hi: u64) -> Result<(), UcodeError> {
        if lo >= hi {
            return Err(err(q7c::ERR_INVALID, "PC bounds lo >= hi"));
        }
        let b = self.block()?;
        b.pc_lo()
            .write(qb::PcLo(lo))
            .and_then(|_| b.pc_hi().write(qb::PcHi(hi)))
            .map_err(|_| err(q7c::ERR_INVALID, "PC bounds write failed"))
    }

    /// Disable PC bounds checking: [0, u64::MAX].
    pub fn disable_pc_bounds(&self) -> Result<(), UcodeError> {
        let b = self.block()?;
        b.pc_lo()
            .write(qb::PcLo(0))
            .and_then(|_| b.pc_hi().write(qb::PcHi(u64::MAX)))
            .map_err(|_| err(q7c::ERR_INVALID, "PC bounds write failed"))
    }

    /// Stage a loadable library on this core (it must be booted): point the core at the
    /// image and let it check it.
    pub fn attach(&self, ll: &LoadableLib) -> Result<(), UcodeError> {
        platform::failpoint::hit("hal.q7.attach").map_err(|_| err(q7c::ERR_INVALID, "injected failure (failpoint)"))?;
        if !self.booted {
            return Err(err(q7c::ERR_INVALID, "core not booted"));
        }
        let b = self.block()?;
        b.ll_addr().write(qb::LlAddr(ll.mem.addr())).map_err(|_| err(q7c::ERR_INVALID, "ll write failed"))?;
        b.ll_size().write(qb::LlSize(ll.size as u32)).map_err(|_| err(q7c::ERR_INVALID, "ll write failed"))?;
        match b.ll_status().read().map(|v| v.code()).unwrap_or(q7c::ERR_INVALID) {
            1 => Ok(()),
            q7c::ERR_TOO_LARGE => Err(err(q7c::ERR_TOO_LARGE, "image larger than the device buffer")),
            _ => Err(err(q7c::ERR_INVALID, "core refused the image")),
        }
    }
}

impl Drop for UcodeCore {
    fn drop(&mut self) {
        if self.booted {
            if let Ok(b) = self.block() {
                let _ = b.claim().write(qb::Claim(q7c::READY));
            }
        }
    }
}

/// A prelinked loadable library (UCPL header + image) staged in device memory.
pub struct LoadableLib {
    mem: DevBuf,
    pub size: u64,
    pub header: UcplHeader,
    pub name: String,
}

impl LoadableLib {
    /// Validate and stage `image` (header included). > 64 KiB → 7; bad header → 8.
    pub fn create(_ctx: &UcodeContext, dev: &Device, nc: usize, name: &str, image: &[u8]) -> Result<Self, HalError> {
        if image.len() as u64 > MAX_IMAGE_BYTES {
            return Err(err(q7c::ERR_TOO_LARGE, "prelinked image larger than the available buffer on device").into());
        }
        let header = UcplHeader::decode(image).map_err(|_| err(q7c::ERR_INVALID, "bad UCPL header"))?;
        if header.image_size() > MAX_IMAGE_BYTES {
            return Err(err(q7c::ERR_TOO_LARGE, "prelinked image larger than the available buffer on device").into());
        }
        if header.image_size() > image.len() as u64 {
            return Err(err(q7c::ERR_INVALID, "UCPL image shorter than its header says").into());
        }
        let mem = dev.alloc_device(dev.hbm_for_nc(nc), q7c::LL_DEVICE_BYTES, 4096)?;
        dev.write_device(nc, mem.addr(), &image[..header.image_size() as usize])?;
        Ok(Self { mem, size: header.image_size(), header, name: name.chars().take(0x20).collect() })
    }
}

/// An opset: 256 opcode slots, each empty or a 256-bit specialisation bitmap.
#[derive(Clone)]
pub struct Opset {
    slots: Vec<Option<[u8; 32]>>,
    pub name: String,
}

impl Opset {
    /// An empty opset.
    pub fn new(_ctx: &UcodeContext, name: &str) -> Self {
        Self { slots: vec![None; 256], name: name.chars().take(0x20).collect() }
    }
    /// Enable (opcode, spec).
    pub fn add(&mut self, opcode: u8, spec: u8) {
        let s = self.slots[opcode as usize].get_or_insert([0u8; 32]);
        s[spec as usize / 8] |= 1 << (spec % 8);
    }
    /// Whether (opcode, spec) is in the set.
    pub fn contains(&self, opcode: u8, spec: u8) -> bool {
        self.slots[opcode as usize].is_some_and(|s| s[spec as usize / 8] & (1 << (spec % 8)) != 0)
    }
}

/// Regs helper for callers that only hold a device.
pub fn regs(dev: &Device) -> Regs<'_> {
    dev.regs()
}
