//! What acts on a device as a whole — reclaiming an NC, the firmware mailbox (NC resets,
//! FW-IO) — through the broker's own driver handle or a simulated device's host.

use std::path::PathBuf;

use broker_client::protocol::{ErrorCode, Reply};

use super::reply::error;

/// What acts on a device as a whole — reclaiming an NC, the firmware mailbox: the broker's own
/// driver handle, or for a hosted simulated device its host (which does it in its process: a
/// reclaim is about a thousand register accesses, each a message over a connection). Used
/// after the tables' lock is released; either serializes the mailbox with every other use.
pub(super) enum DeviceOps {
    Hal(hal::Device),
    Host(PathBuf),
}

impl DeviceOps {
    pub(super) fn reclaim(&self, nc: usize) -> Result<(), String> {
        match self {
            DeviceOps::Hal(h) => h.reclaim_nc(nc).map_err(|e| e.to_string()),
            DeviceOps::Host(s) => sim_serve::host::reclaim(s, nc as u32).map_err(|e| e.to_string()),
        }
    }

    pub(super) fn reset_ncs(&self, mask: u32) -> Reply {
        match self {
            DeviceOps::Hal(h) => h.firmware_reset_ncs(mask).map_or_else(|e| firmware_error(&e), |()| Reply::Ok),
            DeviceOps::Host(s) => sim_serve::host::reset_ncs(s, mask).map_or_else(|e| host_error(&e), |()| Reply::Ok),
        }
    }

    pub(super) fn fwio(&self, cmd: u8, payload: &[u8]) -> Reply {
        match self {
            DeviceOps::Hal(h) => h.fwio(cmd, payload).map_or_else(|e| firmware_error(&e), |data| Reply::Fwio { data }),
            DeviceOps::Host(s) => {
                sim_serve::host::fwio(s, cmd, payload).map_or_else(|e| host_error(&e), |data| Reply::Fwio { data })
            }
        }
    }
}

/// A device host's failure as a reply, keeping a firmware failure's kind.
pub(super) fn host_error(e: &sim_serve::host::HostError) -> Reply {
    use sim_serve::host::{wire::Failure, HostError};
    let code = match e {
        HostError::Failed { kind: Failure::FirmwareTimeout, .. } => ErrorCode::FirmwareTimeout,
        HostError::Failed { kind: Failure::Firmware, .. } => ErrorCode::Firmware,
        HostError::Failed { kind: Failure::Invalid, .. } => ErrorCode::Invalid,
        _ => ErrorCode::Device,
    };
    error(code, 0, e.to_string())
}

/// A firmware failure as a reply: a timeout and the firmware's own error keep their kind.
pub(super) fn firmware_error(e: &hal::HalError) -> Reply {
    let code = match e {
        hal::HalError::FwioTimeout { .. } | hal::HalError::ResetTimeout { .. } => ErrorCode::FirmwareTimeout,
        hal::HalError::Fwio { .. } => ErrorCode::Firmware,
        hal::HalError::FwioPayload(_) => ErrorCode::Invalid,
        _ => ErrorCode::Device,
    };
    error(code, 0, e.to_string())
}
