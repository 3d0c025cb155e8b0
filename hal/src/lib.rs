//! hal: the Neuron device driver over the Platform boundary — the same code drives the
//! simulator and a real device bound to vfio-pci.
//!
//! [`Device`] = a [`platform::Platform`] + its arch (from the PCI ID): firmware-ready
//! wait, UDMA engine bring-up, host and device memory ([`mem`]), host↔device and
//! device↔device copies on the arch's host-facing engines, notification rings, semaphores
//! and events, sequencer streams ([`seq`]), FW-IO and resets ([`fwio`]), Q7 / DGE ([`q7`]).
//! Arch differences come from csr-maps data. Its methods are grouped by concern in
//! [`device`]'s files.
//!
//! Hardware blocks and the objects on them:
//! - [`udma`]: every UDMA engine and queue register sequence (bring-up, queue program and
//!   pause, abort state and recovery, doorbells); [`ring`]: a host-driven queue pair on it.
//! - [`nq`]: the NOTIFIC slot sequences (program, halt); [`nq_ring`]: a host ring on a slot.
//! - [`park`]: who owns which queue and slot; parks them (through `udma` / `nq`) when the
//!   owner goes away.
//! - [`regions`]: the NC ownership region table; [`guard`]: refusal of modeled writes on
//!   real hardware.
//!
//! Safe Rust only: the unsafe edges (MMIO, DMA memory, interrupt eventfds) are the
//! platform's.

#![forbid(unsafe_code)]

pub mod device;
pub mod error;
pub mod fwio;
pub mod guard;
pub mod mem;
pub mod nq;
pub mod nq_ring;
pub mod park;
pub mod q7;
pub mod regions;
pub mod ring;
pub mod seq;
pub mod udma;

pub use device::{BarrierState, BarrierStatus, Device, DeviceOptions, FatalCauses, FirmwareGate, HbmRange, KickSlot};
pub use error::{HalError, Result};
pub use fwio::{PollTiming, ResetKind};
pub use mem::{DevAllocator, DevBuf, HostBuf, HostPool};
pub use nq::NqOwner;
pub use nq_ring::NqRing;
pub use park::Parking;
pub use platform::Irq;
pub use regions::{Perm, Region, RegionFault};
pub use ring::{Ring, Xfer};
pub use seq::{EngineStatus, Stream};
