//! The PCI function address (`DDDD:BB:DD.F`): a leaf every other module names (its parser,
//! whose error is the crate's [`crate::Error`], is `FromStr` in [`crate::sysfs`]).

use std::fmt;

/// A PCI function address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}
