//! What a segment names: its devices (identity and what this process owns) and its NCs.

use std::ops::Range;

/// How a process holds a device (device table word [`dev::HOLDING`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// The whole device is this process's: a VFIO device it opened, or a simulated device
    /// private to it.
    Whole = 1,
    /// Some NCs of a device shared through the broker (docs/sharing.md), leased by this
    /// process; other processes may own the others.
    Leased = 2,
}

/// A device as the segment names it: its identity and what this process owns of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    /// The device, the same in every process that uses it: the PCI address (BDF) of a VFIO
    /// device, the broker's name of a shared simulated device (`sim:shared:ARCH:K`), and for
    /// a simulated device private to the process `sim:PID/INDEX` (it is that process's alone).
    pub identity: String,
    pub holding: Holding,
    /// The NCs (device-local) this process owns on it.
    pub owned: Range<usize>,
}

/// Whether a platform location is a simulator private to this process (`sim0`, `sim1`, …,
/// as `sim::SimDevice` names its devices).
pub(super) fn private_sim(location: &str) -> bool {
    location.strip_prefix("sim").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a published identity names a simulated device private to one process
/// (`sim:PID/INDEX`, as [`DeviceId::of`] names it), not a shared one (`sim:shared:…`) or a PCI
/// device.
pub fn is_private_sim_identity(identity: &str) -> bool {
    identity.starts_with("sim:") && !identity.starts_with("sim:shared:")
}

impl DeviceId {
    /// The identity of device `index` of a runtime, and what this process owns of it: a
    /// shared device's leased NCs (`hal::Device::owned_ncs`), else all of them.
    pub fn of(dev: &hal::Device, index: usize) -> Self {
        let location = dev.platform().identity().location;
        match dev.owned_ncs() {
            Some(owned) => Self { identity: location, holding: Holding::Leased, owned },
            None => {
                let identity =
                    if private_sim(&location) { format!("sim:{}/{index}", std::process::id()) } else { location };
                Self { identity, holding: Holding::Whole, owned: 0..dev.nc_count() }
            }
        }
    }

    /// Whether the process owns device-local NC `nc`.
    pub fn owns(&self, nc: usize) -> bool {
        self.owned.contains(&nc)
    }
}

/// One NC the segment describes: (device index, NC within the device, NC version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcId {
    pub device: usize,
    pub nc: usize,
    pub nc_version: u32,
}
