//! Typed errors of the driver.

use nrt_status::{NrtStatus, Status};
use platform::{HostMemError, MmioError, PlatformError};

/// Everything the driver can fail with.
#[derive(Debug, thiserror::Error)]
pub enum HalError {
    #[error("platform: {0}")]
    Platform(#[from] PlatformError),
    #[error("register map: {0}")]
    Csr(#[from] csr_maps::CsrError),
    #[error("MMIO: {0}")]
    Mmio(#[from] MmioError),
    #[error("host memory: {0}")]
    HostMem(#[from] HostMemError),
    #[error("PCI device {vendor:04x}:{device:04x} is not a Neuron device this driver knows")]
    UnknownDevice { vendor: u16, device: u16 },
    #[error("firmware not ready after {waited_ms} ms (misc RAM device id still reads {value:#x})")]
    NotReady { waited_ms: u64, value: u32 },
    #[error("NeuronCore {nc} does not exist (this device has {count})")]
    NoSuchNc { nc: usize, count: usize },
    /// A shared device (opened with [`crate::DeviceOptions::owned_ncs`]): NeuronCore `nc` is
    /// another process's, or the request (a whole-device reset) would touch other processes' NCs.
    #[error("NeuronCore(s) {what} not owned by this process on a shared device (owned: {owned:?})")]
    NotOwned { what: String, owned: std::ops::Range<usize> },
    #[error("TPB engine {0} does not exist (0 PE, 1 ACT, 2 POOL, 3 DVE, 4 SP)")]
    NoSuchEngine(usize),
    #[error("device memory exhausted on HBM channel {chan}: {size} bytes requested, {free} free")]
    OutOfDeviceMemory { chan: usize, size: u64, free: u64 },
    #[error("{what} of {size} bytes is larger than any memory can hold")]
    TooLarge { what: &'static str, size: u64 },
    #[error("alignment {0} is not a power of two")]
    BadAlignment(u64),
    #[error("device address range {addr:#x}+{len:#x} is outside device memory")]
    DeviceRange { addr: u64, len: u64 },
    #[error("DMA on engine {engine} queue {queue} did not complete within {waited_ms} ms")]
    DmaTimeout { engine: u64, queue: u64, waited_ms: u64 },
    #[error("DMA engine {engine} queue {queue} aborted (M2S cause {m2s_cause:#x}, S2M cause {s2m_cause:#x})")]
    DmaAbort { engine: u64, queue: u64, m2s_cause: u32, s2m_cause: u32 },
    #[error("ring of {0} descriptors is invalid (power of two, 32..=2^24-16)")]
    RingSize(u64),
    #[error("notification ring of {0} bytes is invalid (power of two, at least one 16-byte record)")]
    NqSize(u64),
    #[error("FW-IO command {cmd} failed with firmware error {code}")]
    Fwio { cmd: u8, code: u8 },
    #[error("FW-IO command {cmd} timed out after {attempts} attempts")]
    FwioTimeout { cmd: u8, attempts: u32 },
    #[error(
        "firmware API version {version} predates the FW-IO mailbox protocol (needs {needed}); \
         the legacy protocol's host-buffer exchange is not implemented, so the request was not sent"
    )]
    FwApiTooOld { version: u32, needed: u32 },
    #[error("FW-IO payload of {0} bytes exceeds 128")]
    FwioPayload(usize),
    #[error("{kind} reset not completed after {waited_ms} ms")]
    ResetTimeout { kind: &'static str, waited_ms: u64 },
    #[error("nrtucode: {0}")]
    Ucode(#[from] UcodeError),
    #[error("program of {0} bytes is not a whole number of 64-byte slots")]
    ProgramSize(usize),
    #[error("the ownership region table holds {entries} entries; {needed} are needed (after coalescing)")]
    RegionTableFull { needed: usize, entries: usize },
    /// A shared device's owner (the broker) failed a firmware request made through it
    /// ([`crate::FirmwareGate`]), with the status it maps to.
    #[error("firmware mailbox through the device's owner: {message}")]
    Owner { status: NrtStatus, message: String },
}

/// An nrtucode error code (4 bad API level, 5 out of memory, 7 too large, 8 invalid /
/// not booted / already claimed / gate violation, 9 prelink failed). Staging Q7 ucode
/// (the `q7` module) fails with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("nrtucode error {code}: {what}")]
pub struct UcodeError {
    pub code: u32,
    pub what: &'static str,
}

/// Result alias.
pub type Result<T, E = HalError> = std::result::Result<T, E>;

impl HalError {
    /// The `NRT_STATUS` every front end reports for this driver failure — the one mapping
    /// (docs/facts/libnrt.md, "Which status each error maps to"), with libnrt's semantics:
    /// device memory → NRT_RESOURCE, host DMA memory → NRT_FAIL_HOST_MEM_ALLOC, a wait that
    /// ran out → NRT_TIMEOUT, an aborted DMA engine → NRT_EXEC_HW_ERR_DMA_ABORT, firmware
    /// reporting an error → NRT_HW_ERROR, an argument naming something that does not exist or
    /// is malformed → NRT_INVALID, anything else NRT_FAILURE. Exhaustive: a new variant must
    /// choose.
    pub fn status(&self) -> NrtStatus {
        match self {
            HalError::Csr(c) => c.status(),
            HalError::Owner { status, .. } => *status,
            HalError::Ucode(u) => u.status(),
            HalError::HostMem(_) => NrtStatus::FailHostMemAlloc,
            HalError::OutOfDeviceMemory { .. } | HalError::TooLarge { .. } | HalError::RegionTableFull { .. } => {
                NrtStatus::Resource
            }
            HalError::NotReady { .. }
            | HalError::DmaTimeout { .. }
            | HalError::FwioTimeout { .. }
            | HalError::ResetTimeout { .. } => NrtStatus::Timeout,
            HalError::DmaAbort { .. } => NrtStatus::ExecHwErrDmaAbort,
            HalError::Fwio { .. } => NrtStatus::HwError,
            HalError::NoSuchNc { .. }
            | HalError::NotOwned { .. }
            | HalError::NoSuchEngine(_)
            | HalError::BadAlignment(_)
            | HalError::DeviceRange { .. }
            | HalError::RingSize(_)
            | HalError::NqSize(_)
            | HalError::FwioPayload(_)
            | HalError::ProgramSize(_) => NrtStatus::Invalid,
            HalError::Platform(_)
            | HalError::Mmio(_)
            | HalError::UnknownDevice { .. }
            | HalError::FwApiTooOld { .. } => NrtStatus::Failure,
        }
    }
}

impl Status for HalError {
    fn status(&self) -> NrtStatus {
        HalError::status(self)
    }
}
