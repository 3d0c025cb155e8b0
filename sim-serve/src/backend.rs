//! The vfio-user device model: configuration space, BARs, DMA mappings, MSI-X and reset over
//! a [`SimDevice`] — what a client's messages do once its connection allowed them
//! ([`crate::conn`] decides that).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use memmap2::{Mmap, MmapMut, MmapOptions};
use platform::{Mmio, Platform};
use sim::{ExternalDma, SimDevice};
use vfio::user::wire;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::config::{self, BarDef, ConfigEffect, ConfigSpace, MsixDef};
use crate::{ServeError, MSIX_BAR, MSIX_BAR_SIZE, MSIX_PBA_OFFSET};

fn io_err(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.into())
}

/// Guest memory the client mapped, mmapped from its descriptor.
enum ClientMem {
    Rw(MmapMut),
    Ro(Mmap),
}

impl ExternalDma for ClientMem {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            ClientMem::Rw(m) => m.as_ptr() as *mut u8,
            ClientMem::Ro(m) => m.as_ptr() as *mut u8,
        }
    }
    fn len(&self) -> usize {
        match self {
            ClientMem::Rw(m) => m.len(),
            ClientMem::Ro(m) => m.len(),
        }
    }
}

/// The vfio-user device model: configuration space and BARs over a [`SimDevice`].
pub struct SimBackend {
    sim: SimDevice,
    config: ConfigSpace,
    bar0: Arc<dyn Mmio>,
    bar4: Arc<dyn Mmio>,
    bar0_index: u8,
    bar4_index: u8,
    bar4_window: u64,
}

impl SimBackend {
    /// The device model of `sim`, with `bar4_window` bytes of BAR4 served.
    pub fn new(sim: SimDevice, bar4_window: u64) -> Result<Self, ServeError> {
        Self::with_bar_wrap(sim, bar4_window, None)
    }

    /// [`Self::new`], with BAR0 and BAR4 passed through `wrap` (e.g. an MMIO trace).
    pub fn with_bar_wrap(sim: SimDevice, bar4_window: u64, wrap: Option<&crate::BarWrap>) -> Result<Self, ServeError> {
        let arch = sim.arch();
        let (mut bar0, mut bar4) = (sim.bar(arch.bars.apb)?, sim.bar(arch.bars.dram)?);
        if let Some(w) = wrap {
            bar0 = w(arch.bars.apb, bar0);
            bar4 = w(arch.bars.dram, bar4);
        }
        if !bar4_window.is_power_of_two() || bar4_window < 4096 {
            return Err(ServeError::Bar4Window(bar4_window));
        }
        let bar4_window = bar4_window.min(bar4.size().next_power_of_two());
        let id = sim.identity();
        let config = ConfigSpace::new(
            id.vendor,
            id.device,
            &[
                BarDef {
                    index: arch.bars.apb,
                    size: bar0.size().next_power_of_two(),
                    bits64: true,
                    prefetchable: false,
                },
                BarDef { index: MSIX_BAR, size: MSIX_BAR_SIZE, bits64: false, prefetchable: false },
                BarDef { index: arch.bars.dram, size: bar4_window, bits64: true, prefetchable: true },
            ],
            MsixDef { vectors: sim.irq_vectors() as u16, bar: MSIX_BAR, table_offset: 0, pba_offset: MSIX_PBA_OFFSET },
        );
        Ok(Self { bar0_index: arch.bars.apb, bar4_index: arch.bars.dram, sim, config, bar0, bar4, bar4_window })
    }

    /// The simulated device.
    pub fn device(&self) -> &SimDevice {
        &self.sim
    }

    /// The configuration space.
    pub fn config(&self) -> &ConfigSpace {
        &self.config
    }

    /// Region sizes by vfio region index (BARs and config; 0 = absent).
    pub fn region_size(&self, index: u32) -> u64 {
        match index {
            i if i == self.bar0_index as u32 => self.bar0.size().next_power_of_two(),
            i if i == self.bar4_index as u32 => self.bar4_window,
            i if i == MSIX_BAR as u32 => MSIX_BAR_SIZE,
            VFIO_PCI_CONFIG_REGION_INDEX => config::CONFIG_SIZE as u64,
            _ => 0,
        }
    }

    /// The regions to announce to the client (none offered for mmap: every access is a
    /// message, the registers have side effects).
    pub fn regions(&self) -> Vec<wire::RegionInfo> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = self.region_size(index);
                wire::RegionInfo {
                    argsz: wire::RegionInfo::LEN as u32,
                    index,
                    size,
                    flags: if size > 0 { VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE } else { 0 },
                    ..Default::default()
                }
            })
            .collect()
    }

    /// The interrupts to announce: MSI-X only, one vector per NC.
    pub fn irqs(&self) -> Vec<wire::IrqInfo> {
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    wire::IrqInfo {
                        index,
                        count: self.sim.irq_vectors(),
                        flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                    }
                } else {
                    wire::IrqInfo { index, count: 0, flags: 0 }
                }
            })
            .collect()
    }

    fn bar(&self, region: u32) -> Option<(&dyn Mmio, u64)> {
        if region == self.bar0_index as u32 {
            Some((self.bar0.as_ref(), self.region_size(region)))
        } else if region == self.bar4_index as u32 {
            Some((self.bar4.as_ref(), self.bar4_window))
        } else {
            None
        }
    }

    fn reset_device(&mut self) -> Result<(), std::io::Error> {
        self.sim.reset().map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// A 4-byte word of a BAR; past the model's size (the BAR rounds up to a power of two) reads
/// 0 and drops writes, as unclaimed addresses on a bus do.
fn word_read(m: &dyn Mmio, off: u64) -> Result<u32, std::io::Error> {
    if off + 4 > m.size() {
        return Ok(0);
    }
    m.read32(off).map_err(|e| std::io::Error::other(e.to_string()))
}

fn word_write(m: &dyn Mmio, off: u64, v: u32) -> Result<(), std::io::Error> {
    if off + 4 > m.size() {
        return Ok(());
    }
    m.write32(off, v).map_err(|e| std::io::Error::other(e.to_string()))
}

fn check_range(region: u32, offset: u64, len: usize, size: u64) -> Result<(), std::io::Error> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io_err(format!("region {region}: access of {len} bytes at {offset:#x} beyond {size:#x}"))),
    }
}

/// What the client asks of the device, as its vfio-user messages carry it (the connection
/// checks what it may ask first, `crate::conn`).
impl SimBackend {
    /// REGION_READ: configuration space, a BAR's registers or HBM window (in 32-bit words).
    pub fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), std::io::Error> {
        check_range(region, offset, data.len(), self.region_size(region))?;
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config.read(offset, data);
            return Ok(());
        }
        let Some((m, _)) = self.bar(region) else {
            // The MSI-X BAR: QEMU emulates the table and PBA; nothing else lives there.
            data.fill(0);
            return Ok(());
        };
        // Register accesses are 32-bit: wider ones split into words, narrower ones take
        // their bytes of the word.
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let word = at & !3;
            let skip = (at - word) as usize;
            let v = word_read(m, word)?.to_le_bytes();
            let n = (4 - skip).min(data.len() - done);
            data[done..done + n].copy_from_slice(&v[skip..skip + n]);
            done += n;
        }
        Ok(())
    }

    /// REGION_WRITE; a configuration write that initiates a Function Level Reset resets the
    /// device.
    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        check_range(region, offset, data.len(), self.region_size(region))?;
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            if self.config.write(offset, data) == ConfigEffect::FunctionReset {
                // The client's interrupt routing (its eventfds) survives: it virtualizes MSI-X
                // and restores the guest's state around the reset itself.
                tracing::info!("function level reset");
                self.config.reset();
                self.reset_device()?;
            }
            return Ok(());
        }
        let Some((m, _)) = self.bar(region) else { return Ok(()) };
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let word = at & !3;
            let skip = (at - word) as usize;
            let n = (4 - skip).min(data.len() - done);
            let v = if n == 4 {
                u32::from_le_bytes([data[done], data[done + 1], data[done + 2], data[done + 3]])
            } else {
                // A partial word: read-modify-write (registers are written 32 bits wide by
                // the driver; this serves byte-wise tools).
                let mut b = word_read(m, word)?.to_le_bytes();
                b[skip..skip + n].copy_from_slice(&data[done..done + n]);
                u32::from_le_bytes(b)
            };
            word_write(m, word, v)?;
            done += n;
        }
        Ok(())
    }

    /// DMA_MAP of the client's memory at `offset` of `fd` to `address`; `flags` are
    /// [`wire::DMA_READ`] and [`wire::DMA_WRITE`].
    pub fn dma_map(
        &mut self,
        flags: u32,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        let Some(fd) = fd else {
            // Client memory without a descriptor (ROM, VGA memory): the device cannot reach
            // it, and accesses there fault as to any unmapped IOVA. The vfio-user DMA_READ/WRITE
            // messages that would reach it are not used.
            tracing::debug!("dma_map iova {address:#x} size {size:#x}: no descriptor, not reachable by the device");
            return Ok(());
        };
        let len = usize::try_from(size).map_err(|_| io_err("DMA map size"))?;
        // The client could otherwise shrink the file under the mapping, and the next access by
        // the device (this process) would be a SIGBUS that takes every client's device down.
        platform::dma::check_foreign_memory(fd.as_fd(), offset, size).map_err(|e| io_err(e.to_string()))?;
        let readable = flags & wire::DMA_READ != 0;
        let writable = flags & wire::DMA_WRITE != 0;
        let mut opts = MmapOptions::new();
        opts.offset(offset).len(len);
        let mem = if writable {
            // SAFETY: a shared mapping of the client's memory file. The client (the VM) may
            // change it concurrently, as it may change real DMA memory under a device: the
            // simulator only copies bytes in and out of it through raw pointers, never
            // forms references that assume exclusivity.
            ClientMem::Rw(unsafe { opts.map_mut(&fd) }?)
        } else {
            // SAFETY: as above, read-only.
            ClientMem::Ro(unsafe { opts.map(&fd) }?)
        };
        tracing::debug!("dma_map iova {address:#x} size {size:#x} offset {offset:#x} r{readable} w{writable}");
        self.sim.map_external(address, Box::new(mem), readable, writable).map_err(|e| io_err(e.to_string()))?;
        Ok(())
    }

    /// DMA_UNMAP of `[address, address + size)`, or of everything ([`wire::DMA_UNMAP_ALL`]).
    pub fn dma_unmap(&mut self, flags: u32, address: u64, size: u64) -> Result<(), std::io::Error> {
        let n = if flags & wire::DMA_UNMAP_ALL != 0 {
            self.sim.unmap_all_external()
        } else {
            self.sim.unmap_external(address, size)
        };
        tracing::debug!("dma_unmap iova {address:#x} size {size:#x}: {n} mappings");
        Ok(())
    }

    /// DEVICE_RESET: the client's eventfds are forgotten and the simulator reset.
    pub fn reset(&mut self) -> Result<(), std::io::Error> {
        tracing::info!("device reset");
        self.sim.clear_irq_eventfds();
        self.reset_device()
    }

    /// SET_IRQS: MSI-X vectors to the client's eventfds (vector N = NC N).
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return if count == 0 { Ok(()) } else { Err(io_err(format!("IRQ index {index}: only MSI-X is offered"))) };
        }
        if flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            // Masking is QEMU's (it emulates the table); nothing to do here.
            return Ok(());
        }
        let vectors = self.sim.irq_vectors();
        match flags & VFIO_IRQ_SET_DATA_TYPE_MASK {
            VFIO_IRQ_SET_DATA_NONE if count == 0 => self.sim.clear_irq_eventfds(),
            // Descriptors cannot be -1 on the wire: the client releases vectors this way.
            VFIO_IRQ_SET_DATA_NONE => {
                for v in start..start.saturating_add(count).min(vectors) {
                    self.sim.set_irq_eventfd(v, None).map_err(|e| io_err(e.to_string()))?;
                }
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                if fds.len() != count as usize {
                    return Err(io_err(format!(
                        "SET_IRQS: {count} vectors from {start} but {} descriptors",
                        fds.len()
                    )));
                }
                for (i, f) in fds.into_iter().enumerate() {
                    let v = start + i as u32;
                    self.sim.set_irq_eventfd(v, Some(OwnedFd::from(f))).map_err(|e| io_err(e.to_string()))?;
                }
            }
            other => return Err(io_err(format!("SET_IRQS data type {other:#x} not supported"))),
        }
        tracing::debug!("set_irqs MSI-X start {start} count {count}");
        Ok(())
    }
}
