//! The Platform boundary: what a driver gets from a [`SimDevice`] — BARs, DMA mappings into
//! the simulator's IOMMU, interrupt eventfds, reset, device-memory accounting.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use nix::sys::eventfd::{EfdFlags, EventFd};
use platform::{DeviceIdentity, DmaDir, DmaMapping, DmaUnmap, HostMem, Mmio, Platform, PlatformError};

use crate::device::space::{Bar0, Bar4};
use crate::device::Dev;
use crate::handle::SimDevice;
use crate::iommu::Mapping;

struct Unmapper(Weak<Dev>);

impl DmaUnmap for Unmapper {
    fn unmap(&self, iova: u64, len: u64) {
        if let Some(d) = self.0.upgrade() {
            {
                // Hardware still pointing at the memory is a driver bug: count it.
                let st = d.lock();
                let n = crate::device::udma::dangling_rings(&d, &st, iova, len)
                    + crate::device::nq::dangling_slots(&d, &st, iova, len);
                if n > 0 {
                    d.n.dangling_unmaps.fetch_add(n, Ordering::Relaxed);
                }
                let f = crate::device::seq::dangling_fetches(&d, &st, d.arch.host_dev_addr(iova), len);
                if f > 0 {
                    d.n.dangling_fetches.fetch_add(f, Ordering::Relaxed);
                }
            }
            d.iommu.unmap(iova);
            d.iommu.free_iova(iova, len);
        }
    }
}

impl Platform for SimDevice {
    fn identity(&self) -> DeviceIdentity {
        let a = self.dev.arch;
        DeviceIdentity {
            vendor: a.pci_vendor,
            device: a.pci_devices.first().copied().unwrap_or(0),
            revision: 0,
            location: format!("sim{}", self.dev.cfg.device_index),
        }
    }

    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let a = self.dev.arch;
        if index == a.bars.apb {
            Ok(Arc::new(Bar0(self.dev.clone())))
        } else if index == a.bars.dram {
            Ok(Arc::new(Bar4(self.dev.clone())))
        } else {
            Err(PlatformError::NoSuchBar(index))
        }
    }

    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        let len = mem.len() as u64;
        let iova = self.dev.iommu.alloc_iova(len).ok_or(PlatformError::IovaExhausted { len })?;
        self.dev.iommu.map(
            iova,
            Mapping { len, host: mem.as_ptr() as usize, readable: dir.device_reads(), writable: dir.device_writes() },
        );
        Ok(DmaMapping::new(mem, iova, dir, Arc::new(Unmapper(Arc::downgrade(&self.dev)))))
    }

    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError> {
        if vector as usize >= self.dev.ncs() {
            return Err(PlatformError::Irq {
                vector,
                reason: format!("the simulator raises vectors 0..{} (one per NC)", self.dev.ncs()),
            });
        }
        let ours = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| PlatformError::Io(e.into()))?;
        let theirs = ours.as_fd().try_clone_to_owned()?;
        platform::sync::lock(&self.dev.irq).insert(vector, OwnedFd::from(ours).into());
        Ok(Some(theirs))
    }

    fn reset(&self) -> Result<(), PlatformError> {
        let mut st = self.dev.lock();
        self.dev.reset_all(&mut st);
        Ok(())
    }

    /// The simulator implements the modeled blocks: writing them is what it is for.
    fn modeled_writes_allowed(&self) -> bool {
        true
    }

    fn account_device_memory(&self, delta: i64) {
        self.dev.dev_mem.fetch_add(delta, Ordering::Relaxed);
    }

    fn device_memory_freed(&self, addr: u64, len: u64) {
        let d = &self.dev;
        let f = crate::device::seq::dangling_fetches(d, &d.lock(), addr, len);
        if f > 0 {
            d.n.dangling_fetches.fetch_add(f, Ordering::Relaxed);
        }
    }
}
