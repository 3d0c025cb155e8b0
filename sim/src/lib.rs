//! sim: a functional, register-accurate model of AWS Neuron devices (sunda, cayman,
//! mariana) behind the Platform boundary.
//!
//! The driver talks to a [`SimDevice`] exactly as it talks to hardware on VFIO: BAR
//! reads and writes ([`platform::Mmio`]), DMA mappings of host memory (which feed the
//! simulator's IOMMU), interrupt eventfds and reset. Registers are decoded with
//! `csr-maps`; the simulator never calls into hal or runtime.
//!
//! Blocks modelled: UDMA engines and queues (descriptor rings in host or device
//! memory, FIRST/LAST packets, ring ids, aborts latched in the IOFIC groups),
//! notification queues (phase bit, overflow → NC INTC line 61), semaphores and events,
//! five sequencer engines per NC executing 64-byte slots, collectives across NCs and
//! devices ([`SimTopology`]), Q7 control blocks with the DGE mailbox gate, the FW-IO
//! mailbox (CRC-32C) and reset, and fault injection ([`FaultSpec`]).

mod decode;
mod device;
mod exec;
mod external;
mod fwio;
mod handle;
mod hbm;
mod interhost;
mod iommu;
mod mirror;
mod platform_impl;
mod regfile;
mod regs;
mod reset;
mod topology;

pub use device::fault::{FaultKind, FaultSpec, FaultSpecError};
pub use device::{SimConfig, SimStats, Timing};
pub use external::{ExternalDma, ExternalError};
pub use handle::SimDevice;
pub use interhost::{CollKind, ExchangePart, InterHost, InterHostError, InterHostRequest, Piece, Receive};
pub use iommu::DmaFault;
pub use mirror::RegisterMirror;
pub use topology::SimTopology;

/// Errors creating a simulated device.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("device memory: {0}")]
    Memory(#[from] platform::HostMemError),
    #[error("{0} bytes of HBM per stack do not fit this host's address space")]
    HbmSize(u64),
    #[error("a topology holds 1 to 16 devices, not {0}")]
    TopologySize(usize),
    #[error(transparent)]
    Arch(#[from] csr_maps::CsrError),
    #[error("the `{arch}` description has no `{name}` region, which the simulator models")]
    MissingRegion { arch: &'static str, name: &'static str },
    /// The memory the device publishes registers into ([`SimDevice::publish_registers`]).
    #[error("published registers: {0}")]
    SharedMem(#[from] platform::SharedMemError),
    #[error("published registers: {0}")]
    Mirror(std::io::Error),
    #[error("the `{arch}` description places no {instance:?} block in BAR0, which the simulator models")]
    MissingInstance { arch: &'static str, instance: csr_maps::InstanceId },
}
