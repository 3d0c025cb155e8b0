//! The served function's PCI configuration space: a type-0 header with the arch's Neuron
//! vendor/device ids, three memory BARs (registers, the MSI-X table, a device-memory window),
//! an MSI-X capability and a PCI Express endpoint capability that advertises Function Level
//! Reset. Offsets and bits are the PCI Local Bus 3.0 and PCI Express Base specifications'
//! (the same values as Linux's `include/uapi/linux/pci_regs.h`); they describe the standard
//! PCI wrapper, not Neuron hardware.

/// Size of the configuration region: PCI Express extended configuration space (the extended
/// capability list is empty: the dword at 0x100 reads 0).
pub const CONFIG_SIZE: usize = 4096;

const VENDOR_ID: usize = 0x00;
const DEVICE_ID: usize = 0x02;
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const REVISION: usize = 0x08;
const CLASS_PROG: usize = 0x09;
const CACHE_LINE: usize = 0x0c;
const LATENCY: usize = 0x0d;
const BAR_BASE: usize = 0x10;
const SUBSYS_VENDOR: usize = 0x2c;
const SUBSYS_ID: usize = 0x2e;
const CAP_PTR: usize = 0x34;
const INT_LINE: usize = 0x3c;

/// Status: the capability list is valid.
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Command bits a driver may set: I/O, memory, bus master, parity, SERR, INTx disable.
const COMMAND_WRITABLE: u16 = 0x0547;

/// BAR flag bits (low nibble): memory, 64-bit, prefetchable.
const BAR_MEM_64: u32 = 0b100;
const BAR_PREFETCH: u32 = 0b1000;

const CAP_ID_MSIX: u8 = 0x11;
const CAP_ID_EXP: u8 = 0x10;
/// Where the capabilities are placed in this header.
const MSIX_CAP: usize = 0x40;
const EXP_CAP: usize = 0x50;
/// PCI Express capability length (version 2).
const EXP_CAP_LEN: usize = 0x3c;
/// MSI-X message control: enable, function mask.
const MSIX_CTRL_WRITABLE: u16 = 0xc000;
/// PCI Express capabilities register: version 2, endpoint.
const EXP_FLAGS_V2_ENDPOINT: u16 = 0x0002;
/// Device Capabilities: Function Level Reset capable.
const EXP_DEVCAP_FLR: u32 = 1 << 28;
/// Device Control (offset in the capability), its Initiate-FLR bit.
const EXP_DEVCTL: usize = 0x08;
const EXP_DEVCTL_BCR_FLR: u16 = 1 << 15;
const EXP_LNKCTL: usize = 0x10;
const EXP_DEVCTL2: usize = 0x28;
const EXP_LNKCTL2: usize = 0x30;

/// Base class 0x12 (processing accelerators), subclass 0, interface 0 (PCI Code and ID
/// Assignment specification). The class code of the real functions is not in the public
/// sources: this one is modeled.
pub const CLASS_CODE: u32 = 0x12_00_00;

/// One memory BAR of the served function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarDef {
    /// BAR index (0..=5; a 64-bit BAR also takes index + 1).
    pub index: u8,
    /// Size in bytes (a power of two, at least 4 KiB).
    pub size: u64,
    pub bits64: bool,
    pub prefetchable: bool,
}

/// Where the MSI-X table and PBA live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixDef {
    pub vectors: u16,
    pub bar: u8,
    pub table_offset: u32,
    pub pba_offset: u32,
}

/// What a configuration write asked of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigEffect {
    None,
    /// A Function Level Reset was initiated.
    FunctionReset,
}

/// A configuration space: stored bytes and which bits of them a write changes.
pub struct ConfigSpace {
    bytes: Vec<u8>,
    wmask: Vec<u8>,
    initial: Vec<u8>,
}

impl ConfigSpace {
    /// The header of a function `vendor:device` with `bars` and MSI-X as `msix`.
    pub fn new(vendor: u16, device: u16, bars: &[BarDef], msix: MsixDef) -> Self {
        let mut c = Self { bytes: vec![0; CONFIG_SIZE], wmask: vec![0; CONFIG_SIZE], initial: Vec::new() };
        c.put16(VENDOR_ID, vendor);
        c.put16(DEVICE_ID, device);
        c.put16(STATUS, STATUS_CAP_LIST);
        c.bytes[REVISION] = 0;
        c.put_le(CLASS_PROG, &CLASS_CODE.to_le_bytes()[..3]);
        c.put16(SUBSYS_VENDOR, vendor);
        c.put16(SUBSYS_ID, device);
        c.bytes[CAP_PTR] = MSIX_CAP as u8;
        c.mask16(COMMAND, COMMAND_WRITABLE);
        c.wmask[CACHE_LINE] = 0xff;
        c.wmask[LATENCY] = 0xff;
        c.wmask[INT_LINE] = 0xff;
        for b in bars {
            let off = BAR_BASE + 4 * b.index as usize;
            let flags = if b.bits64 { BAR_MEM_64 } else { 0 } | if b.prefetchable { BAR_PREFETCH } else { 0 };
            let mask = !(b.size - 1);
            c.put32(off, flags);
            c.mask32(off, (mask as u32) & !0xf);
            if b.bits64 {
                c.mask32(off + 4, (mask >> 32) as u32);
            }
        }
        // MSI-X: table size N-1, table and PBA offsets with their BIR.
        c.bytes[MSIX_CAP] = CAP_ID_MSIX;
        c.bytes[MSIX_CAP + 1] = EXP_CAP as u8;
        c.put16(MSIX_CAP + 2, msix.vectors.saturating_sub(1) & 0x7ff);
        c.mask16(MSIX_CAP + 2, MSIX_CTRL_WRITABLE);
        c.put32(MSIX_CAP + 4, msix.table_offset | msix.bar as u32);
        c.put32(MSIX_CAP + 8, msix.pba_offset | msix.bar as u32);
        // PCI Express endpoint with FLR; no link registers worth modelling.
        c.bytes[EXP_CAP] = CAP_ID_EXP;
        c.bytes[EXP_CAP + 1] = 0;
        c.put16(EXP_CAP + 2, EXP_FLAGS_V2_ENDPOINT);
        c.put32(EXP_CAP + 4, EXP_DEVCAP_FLR);
        c.mask16(EXP_CAP + EXP_DEVCTL, 0xffff);
        c.mask16(EXP_CAP + EXP_LNKCTL, 0xffff);
        c.mask16(EXP_CAP + EXP_DEVCTL2, 0xffff);
        c.mask16(EXP_CAP + EXP_LNKCTL2, 0xffff);
        const { assert!(EXP_CAP + EXP_CAP_LEN <= 0x100) };
        c.initial = c.bytes.clone();
        c
    }

    fn put_le(&mut self, off: usize, v: &[u8]) {
        self.bytes[off..off + v.len()].copy_from_slice(v);
    }
    fn put16(&mut self, off: usize, v: u16) {
        self.put_le(off, &v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.put_le(off, &v.to_le_bytes());
    }
    fn mask16(&mut self, off: usize, m: u16) {
        self.wmask[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, m: u32) {
        self.wmask[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }

    /// Read `data.len()` bytes at `off` (bytes past the space read as 0).
    pub fn read(&self, off: u64, data: &mut [u8]) {
        for (i, d) in data.iter_mut().enumerate() {
            *d = usize::try_from(off)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| self.bytes.get(o))
                .copied()
                .unwrap_or(0);
        }
    }

    /// Write `data` at `off`: only writable bits change; BARs keep their size alignment.
    pub fn write(&mut self, off: u64, data: &[u8]) -> ConfigEffect {
        let mut effect = ConfigEffect::None;
        let flr = EXP_CAP + EXP_DEVCTL + 1;
        for (i, &d) in data.iter().enumerate() {
            let Some(o) = usize::try_from(off).ok().and_then(|o| o.checked_add(i)) else { break };
            let Some(m) = self.wmask.get(o).copied() else { break };
            if o == flr && d & (EXP_DEVCTL_BCR_FLR >> 8) as u8 != 0 {
                effect = ConfigEffect::FunctionReset;
            }
            self.bytes[o] = (self.bytes[o] & !m) | (d & m);
        }
        // Initiate-FLR always reads 0.
        self.bytes[flr] &= !((EXP_DEVCTL_BCR_FLR >> 8) as u8);
        effect
    }

    /// The power-on state (after a Function Level Reset).
    pub fn reset(&mut self) {
        self.bytes.copy_from_slice(&self.initial);
    }

    /// A little-endian dword (for tests and tools).
    pub fn dword(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(off as u64, &mut b);
        u32::from_le_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ConfigSpace {
        ConfigSpace::new(
            0x1d0f,
            0x7164,
            &[
                BarDef { index: 0, size: 1 << 30, bits64: true, prefetchable: false },
                BarDef { index: 2, size: 8192, bits64: false, prefetchable: false },
                BarDef { index: 4, size: 64 << 20, bits64: true, prefetchable: true },
            ],
            MsixDef { vectors: 2, bar: 2, table_offset: 0, pba_offset: 4096 },
        )
    }

    #[test]
    fn header_ids_class_and_capabilities() {
        let c = space();
        assert_eq!(c.dword(0), 0x7164_1d0f);
        assert_eq!(c.dword(8) >> 8, CLASS_CODE);
        assert_eq!(c.dword(4) >> 16, STATUS_CAP_LIST as u32);
        assert_eq!(c.dword(0x34) & 0xff, 0x40);
        let msix = c.dword(0x40);
        assert_eq!(msix & 0xff, 0x11);
        assert_eq!((msix >> 8) & 0xff, 0x50);
        assert_eq!(msix >> 16, 1, "table size N-1");
        assert_eq!(c.dword(0x44), 2);
        assert_eq!(c.dword(0x48), 4096 | 2);
        assert_eq!(c.dword(0x50) & 0xff, 0x10);
        assert_ne!(c.dword(0x54) & EXP_DEVCAP_FLR, 0);
        assert_eq!(c.dword(0x100), 0, "no extended capabilities");
    }

    #[test]
    fn bar_sizing_reads_back_the_size_mask() {
        let mut c = space();
        assert_eq!(c.dword(0x10), BAR_MEM_64);
        assert_eq!(c.dword(0x20), BAR_MEM_64 | BAR_PREFETCH);
        for off in [0x10u64, 0x14, 0x18, 0x20, 0x24] {
            c.write(off, &u32::MAX.to_le_bytes());
        }
        assert_eq!(c.dword(0x10), 0xc000_0000 | BAR_MEM_64);
        assert_eq!(c.dword(0x14), u32::MAX);
        assert_eq!(c.dword(0x18), 0xffff_e000);
        assert_eq!(c.dword(0x20), 0xfc00_0000 | BAR_MEM_64 | BAR_PREFETCH);
        c.write(0x10, &0x8000_0000u32.to_le_bytes());
        assert_eq!(c.dword(0x10), 0x8000_0000 | BAR_MEM_64);
        // Vendor id is read-only.
        c.write(0, &[0, 0]);
        assert_eq!(c.dword(0) & 0xffff, 0x1d0f);
    }

    #[test]
    fn command_msix_enable_and_flr() {
        let mut c = space();
        assert_eq!(c.write(4, &[0xff, 0xff]), ConfigEffect::None);
        assert_eq!(c.dword(4) & 0xffff, COMMAND_WRITABLE as u32);
        c.write(0x42, &0x8001u16.to_le_bytes());
        assert_eq!(c.dword(0x40) >> 16, 0x8001, "enable set, table size kept");
        assert_eq!(c.write(0x58, &0x8000u16.to_le_bytes()), ConfigEffect::FunctionReset);
        assert_eq!(c.dword(0x58) & 0x8000, 0, "initiate-FLR reads 0");
        c.reset();
        assert_eq!(c.dword(4) & 0xffff, 0);
        assert_eq!(c.dword(0x40) >> 16, 1);
    }
}
