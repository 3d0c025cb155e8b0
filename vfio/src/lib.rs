//! Linux VFIO for userspace PCI drivers. Knows nothing of any particular device.
//!
//! - [`sysfs`]: discovery of PCI functions ([`Sysfs`], [`PciFunction`], [`Filter`]) and
//!   IOMMU group viability;
//! - [`bind`]: [`Binding`] to vfio-pci and back, environment checks (modules, memlock);
//! - [`device`]: [`Device::open`] through the legacy container or iommufd + device cdev
//!   ([`Backend`]), regions, config space, interrupts, reset;
//! - [`dma`]: [`DmaSpace`], pinned host memory mapped at IOVAs from an [`IovaAllocator`];
//! - [`noiommu`]: VFIO no-IOMMU mode, only with [`OpenOptions::allow_noiommu`] (physical
//!   addresses from /proc/self/pagemap, no isolation);
//! - [`VfioPlatform`]: the [`platform::Platform`] implementation;
//! - [`fdpass`]: descriptors over a unix socket (the `wire` crate's); [`shared`]: a device's
//!   descriptors handed to another process, which rebuilds it ([`Device::from_fds`],
//!   [`VfioPlatform::from_fds`]) with its own IOVA window;
//! - [`user`]: [`user::VfioUserPlatform`], the Platform over a vfio-user connection (a device
//!   served by another process), and the protocol's wire format ([`user::wire`]).
//!
//! Built on rust-vmm's `vfio-ioctls` (container, group and device setup) and
//! `vfio-bindings` (the kernel structs); iommufd and what `vfio-ioctls` does not expose
//! (IOVA ranges, region capabilities, IRQ masking, reset status) use the typed ioctl
//! functions in [`uapi`] (generated with `nix`), each call's `unsafe` block with its safety
//! argument. Region mmaps go through `memmap2`; eventfds, poll, pread/pwrite, mlock and
//! getrlimit through `nix`. Kernel flag words are `bitflags` types ([`device::RegionFlags`],
//! [`device::IrqInfoFlags`], [`device::DeviceFlags`], [`uapi::IoasMapFlags`]).

pub mod backend;
pub mod bind;
pub mod device;
pub mod dma;
pub mod error;
pub use wire::fdpass;
pub mod iommu;
pub mod iova;
pub mod noiommu;
pub mod options;
pub mod pci;
pub mod shared;
pub mod sysfs;
pub mod uapi;
pub mod user;
mod vfio_platform;

pub use bind::{check_memlock, check_vfio_available, probe_support, release, Binding, Released, VfioSupport};
pub use device::{Device, EventFd, IrqInfo, OpenOptions, RegionInfo, RegionMmio, IRQ_INTX, IRQ_MSI, IRQ_MSIX};
pub use dma::DmaSpace;
pub use error::{Error, Result};
pub use iommu::{Backend, IommuInfo};
pub use iova::{IovaAllocator, IovaRange};
pub use sysfs::{BarInfo, Filter, PciAddress, PciFunction, Sysfs};
pub use vfio_platform::VfioPlatform;
