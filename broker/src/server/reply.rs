//! Refusals as replies.

use broker_client::protocol::{ErrorCode, Reply};

pub(super) fn error(code: ErrorCode, owner_pid: u32, message: impl Into<String>) -> Reply {
    Reply::Error { code, owner_pid, message: message.into() }
}

/// libnrt's core-range notation: `nc1-nc1`.
pub(super) fn nc_range(first: u32, count: u32) -> String {
    format!("nc{first}-nc{}", first + count.saturating_sub(1))
}

pub(super) fn not_attached(device: u32) -> Reply {
    error(ErrorCode::NotAttached, 0, format!("device {device} is not attached by this process"))
}
