//! [`platform::Platform`] over a VFIO device.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use platform::{DeviceIdentity, DmaDir, DmaMapping, HostMem, Mmio, Platform, PlatformError};

use crate::bind::Binding;
use crate::device::{Device, EventFd, OpenOptions, IRQ_INTX, IRQ_MSI, IRQ_MSIX};
use crate::error::Error;
use crate::sysfs::PciAddress;

struct Irqs {
    index: Option<u32>,
    fds: Vec<EventFd>,
}

/// A VFIO device as a [`Platform`]: BARs are [`crate::RegionMmio`]s (volatile access to the
/// mmap), DMA goes through the device's IOMMU space, interrupts are MSI-X (else MSI, else
/// INTx) vectors delivered to eventfds.
pub struct VfioPlatform {
    identity: DeviceIdentity,
    bars: Mutex<Vec<Option<Arc<dyn Mmio>>>>,
    irqs: Mutex<Irqs>,
    device: Device,
    /// Writes to modeled registers allowed (the operator's opt-in).
    allow_modeled: bool,
    /// Rebuilt from another process's descriptors ([`VfioPlatform::from_fds`]): the function
    /// is shared, so no reset and no interrupt routing from here.
    shared: bool,
    // Dropped last: the device must be closed before the function is given back.
    binding: Option<Binding>,
}

fn perr(e: Error) -> PlatformError {
    match e {
        Error::HostMem(h) => PlatformError::HostMem(h),
        Error::IovaExhausted { len, .. } => PlatformError::IovaExhausted { len },
        Error::Io(io) => PlatformError::Io(io),
        other => PlatformError::Other(other.to_string()),
    }
}

impl VfioPlatform {
    /// Wrap an open device.
    pub fn new(device: Device) -> Result<Self, Error> {
        let vendor = device.config_read16(0)?;
        let dev_id = device.config_read16(2)?;
        let revision = (device.config_read32(8)? & 0xff) as u8;
        let identity = DeviceIdentity { vendor, device: dev_id, revision, location: device.address().to_string() };
        Ok(Self {
            identity,
            bars: Mutex::new(vec![None; 6]),
            irqs: Mutex::new(Irqs { index: None, fds: Vec::new() }),
            device,
            allow_modeled: platform::allow_modeled_from_env(),
            shared: false,
            binding: None,
        })
    }

    /// The device another process (the broker) opened and passed over a unix socket
    /// ([`crate::shared::recv_device`]), driven from this process: BARs mapped here, DMA mapped
    /// into the shared address space at IOVAs inside `window` only (the windows of the
    /// processes sharing a device must not overlap). The function is shared: [`Platform::reset`]
    /// is refused (resetting is the owner's job) and interrupts are not routed
    /// (`irq_eventfd` gives `None`: the driver polls), since one process's MSI-X setup would
    /// replace the others'.
    pub fn from_fds(fds: crate::shared::DeviceFds, window: crate::IovaRange) -> Result<Self, Error> {
        let mut p = Self::new(Device::from_fds(fds, window)?)?;
        p.shared = true;
        Ok(p)
    }

    /// Allow or refuse writes to registers whose placement is modeled, overriding
    /// [`platform::ALLOW_MODELED_ENV`].
    pub fn set_modeled_writes_allowed(&mut self, allow: bool) {
        self.allow_modeled = allow;
    }

    /// Bind `addr` to vfio-pci (restored when the platform drops), open it and enable bus
    /// mastering.
    pub fn open(addr: PciAddress, opts: &OpenOptions) -> Result<Self, Error> {
        let binding = Binding::bind(&opts.sysfs, addr)?;
        let device = Device::open(addr, opts)?;
        device.set_bus_master(true)?;
        let mut p = Self::new(device)?;
        p.binding = Some(binding);
        Ok(p)
    }

    /// The underlying device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    fn irq_index(&self) -> Result<(u32, u32), Error> {
        for index in [IRQ_MSIX, IRQ_MSI, IRQ_INTX] {
            let i = self.device.irq_info(index)?;
            if i.count > 0 {
                return Ok((index, i.count));
            }
        }
        Err(Error::Irq { index: IRQ_INTX, reason: "the device has no interrupts".into() })
    }
}

impl Platform for VfioPlatform {
    fn modeled_writes_allowed(&self) -> bool {
        self.allow_modeled
    }

    fn max_dma_mapping(&self) -> Option<usize> {
        (self.device.backend() == crate::Backend::NoIommu).then(|| platform::PageSize::Huge2M.bytes())
    }

    fn identity(&self) -> DeviceIdentity {
        self.identity.clone()
    }

    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let mut bars = platform::sync::lock(&self.bars);
        let slot = bars.get_mut(index as usize).ok_or(PlatformError::NoSuchBar(index))?;
        if let Some(b) = slot {
            return Ok(b.clone());
        }
        let m: Arc<dyn Mmio> = self.device.map_region(index as u32).map_err(|_| PlatformError::NoSuchBar(index))?;
        *slot = Some(m.clone());
        Ok(m)
    }

    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        self.device.dma().map(mem, dir).map_err(perr)
    }

    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError> {
        if self.shared {
            return Ok(None);
        }
        let irq_err = |e: Error| PlatformError::Irq { vector, reason: e.to_string() };
        let (index, count) = self.irq_index().map_err(irq_err)?;
        if vector >= count {
            return Ok(None);
        }
        let mut irqs = platform::sync::lock(&self.irqs);
        if irqs.index != Some(index) || irqs.fds.len() <= vector as usize {
            while irqs.fds.len() <= vector as usize {
                irqs.fds.push(EventFd::new().map_err(irq_err)?);
            }
            if irqs.index.is_some() {
                self.device.disable_irq(index).map_err(irq_err)?;
            }
            let fds: Vec<_> = irqs.fds.iter().map(|f| f.as_fd()).collect();
            self.device.enable_irq(index, 0, &fds).map_err(irq_err)?;
            irqs.index = Some(index);
        }
        irqs.fds[vector as usize].try_clone().map(Some).map_err(irq_err)
    }

    fn reset(&self) -> Result<(), PlatformError> {
        if self.shared {
            return Err(PlatformError::Reset("the device is shared: its owner (the broker) resets it".into()));
        }
        self.device.reset().map_err(|e| PlatformError::Reset(e.to_string()))
    }
}

impl Drop for VfioPlatform {
    fn drop(&mut self) {
        let irqs = platform::sync::get_mut(&mut self.irqs);
        if let Some(index) = irqs.index {
            let _ = self.device.disable_irq(index);
        }
    }
}
