//! systemd socket activation (`LISTEN_FDS`).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// The listener systemd handed over (`LISTEN_PID` is this process, `LISTEN_FDS` ≥ 1: fd 3).
pub fn activated_listener() -> Option<UnixListener> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let n: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    if pid != std::process::id() || n < 1 {
        return None;
    }
    const SD_LISTEN_FDS_START: i32 = 3;
    // SAFETY: under socket activation descriptor 3 is the listening socket systemd passed to
    // this process (LISTEN_PID is ours); nothing else in the process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(SD_LISTEN_FDS_START) };
    let l = UnixListener::from(fd);
    // A descriptor that is not a listening unix socket is refused (and closed).
    l.local_addr().ok()?;
    let _ = nix::fcntl::fcntl(&l, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    Some(l)
}

/// The socket a broker config listens on, for messages.
pub fn describe(p: &Path) -> String {
    p.display().to_string()
}
