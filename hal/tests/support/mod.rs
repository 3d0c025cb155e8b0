//! What several hal integration tests share: the simulator with BAR0 writes recorded, and the
//! register state of one UDMA queue.
#![allow(dead_code)] // each test binary uses a part

use std::sync::{Arc, Mutex};

use hal::Device;
use platform::{MmioError, Platform};
use sim::SimDevice;

/// BAR0 writes recorded in order (offset, value).
pub type WriteLog = Arc<Mutex<Vec<(u64, u32)>>>;

/// A BAR that records every write into a [`WriteLog`].
pub struct RecMmio(pub Arc<dyn platform::Mmio>, pub WriteLog);

impl platform::Mmio for RecMmio {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read32(&self, o: u64) -> Result<u32, MmioError> {
        self.0.read32(o)
    }
    fn write32(&self, o: u64, v: u32) -> Result<(), MmioError> {
        platform::sync::lock(&self.1).push((o, v));
        self.0.write32(o, v)
    }
    fn read64(&self, o: u64) -> Result<u64, MmioError> {
        self.0.read64(o)
    }
    fn write64(&self, o: u64, v: u64) -> Result<(), MmioError> {
        // The driver's register writes are 32-bit; a 64-bit one would escape the log.
        platform::sync::lock(&self.1).push((o, u32::MAX));
        self.0.write64(o, v)
    }
}

/// The simulator with BAR0 writes recorded (modeled writes allowed).
pub struct Recording(pub SimDevice, pub WriteLog);

impl Platform for Recording {
    fn identity(&self) -> platform::DeviceIdentity {
        self.0.identity()
    }
    fn bar(&self, i: u8) -> Result<Arc<dyn platform::Mmio>, platform::PlatformError> {
        let b = self.0.bar(i)?;
        Ok(if i == self.0.arch().bars.apb { Arc::new(RecMmio(b, self.1.clone())) } else { b })
    }
    fn dma_map(
        &self,
        m: platform::HostMem,
        d: platform::DmaDir,
    ) -> Result<platform::DmaMapping, platform::PlatformError> {
        self.0.dma_map(m, d)
    }
    fn irq_eventfd(&self, v: u32) -> Result<Option<std::os::fd::OwnedFd>, platform::PlatformError> {
        self.0.irq_eventfd(v)
    }
    fn reset(&self) -> Result<(), platform::PlatformError> {
        self.0.reset()
    }
    fn modeled_writes_allowed(&self) -> bool {
        true
    }
    fn account_device_memory(&self, delta: i64) {
        self.0.account_device_memory(delta)
    }
    fn device_memory_freed(&self, addr: u64, len: u64) {
        self.0.device_memory_freed(addr, len)
    }
}

/// Ring base, ring length and both enables of each half (M2S, S2M) of queue `q` of engine `e`.
pub fn queue_regs(dev: &Device, e: u64, q: u64) -> [(u64, u32, bool); 2] {
    let u = dev.regs().udma(e).unwrap();
    let (m, s) = (u.m2s().q(q).unwrap(), u.s2m().q(q).unwrap());
    let base = |lo: u32, hi: u32| (lo & !0x3F) as u64 | (hi as u64) << 32;
    let mc = m.cfg().read().unwrap();
    let sc = s.cfg().read().unwrap();
    [
        (
            base(m.ring_base_lo().read().unwrap().0, m.ring_base_hi().read().unwrap().0),
            m.ring_len().read().unwrap().count(),
            mc.en_pref() == 1 && mc.en_scheduling() == 1,
        ),
        (
            base(s.ring_base_lo().read().unwrap().0, s.ring_base_hi().read().unwrap().0),
            s.ring_len().read().unwrap().count(),
            sc.en_pref() == 1 && sc.en_stream() == 1,
        ),
    ]
}

/// One BAR access, in order: a 32-bit read (offset, value returned) or write (offset, value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    R(u64, u32),
    W(u64, u32),
}

/// Every BAR0 read and write recorded in order.
pub type AccessLog = Arc<Mutex<Vec<Access>>>;

/// A BAR that records every read and write into an [`AccessLog`].
pub struct AccessMmio(pub Arc<dyn platform::Mmio>, pub AccessLog);

impl AccessMmio {
    fn push(&self, a: Access) {
        platform::sync::lock(&self.1).push(a);
    }
}

impl platform::Mmio for AccessMmio {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read32(&self, o: u64) -> Result<u32, MmioError> {
        let v = self.0.read32(o)?;
        self.push(Access::R(o, v));
        Ok(v)
    }
    fn write32(&self, o: u64, v: u32) -> Result<(), MmioError> {
        self.push(Access::W(o, v));
        self.0.write32(o, v)
    }
    fn read64(&self, o: u64) -> Result<u64, MmioError> {
        let v = self.0.read64(o)?;
        self.push(Access::R(o, v as u32));
        self.push(Access::R(o + 4, (v >> 32) as u32));
        Ok(v)
    }
    fn write64(&self, o: u64, v: u64) -> Result<(), MmioError> {
        self.push(Access::W(o, v as u32));
        self.push(Access::W(o + 4, (v >> 32) as u32));
        self.0.write64(o, v)
    }
}

/// The simulator with every BAR0 access recorded (modeled writes allowed).
pub struct AccessRecording(pub SimDevice, pub AccessLog);

impl Platform for AccessRecording {
    fn identity(&self) -> platform::DeviceIdentity {
        self.0.identity()
    }
    fn bar(&self, i: u8) -> Result<Arc<dyn platform::Mmio>, platform::PlatformError> {
        let b = self.0.bar(i)?;
        Ok(if i == self.0.arch().bars.apb { Arc::new(AccessMmio(b, self.1.clone())) } else { b })
    }
    fn dma_map(
        &self,
        m: platform::HostMem,
        d: platform::DmaDir,
    ) -> Result<platform::DmaMapping, platform::PlatformError> {
        self.0.dma_map(m, d)
    }
    fn irq_eventfd(&self, v: u32) -> Result<Option<std::os::fd::OwnedFd>, platform::PlatformError> {
        self.0.irq_eventfd(v)
    }
    fn reset(&self) -> Result<(), platform::PlatformError> {
        self.0.reset()
    }
    fn modeled_writes_allowed(&self) -> bool {
        true
    }
    fn account_device_memory(&self, delta: i64) {
        self.0.account_device_memory(delta)
    }
    fn device_memory_freed(&self, addr: u64, len: u64) {
        self.0.device_memory_freed(addr, len)
    }
}
