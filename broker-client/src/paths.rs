//! Where the broker listens.
//!
//! `NEURON_VFIO_BROKER_SOCKET` when set; else `$XDG_RUNTIME_DIR/neuron-vfio/broker.sock`; else
//! `/run/user/$UID/neuron-vfio/broker.sock` when `/run/user/$UID` exists; else
//! `/tmp/neuron-vfio-$UID/broker.sock`. The directory is made owner-only (0700) and the socket
//! 0600, so only the owner (and root) can connect; the broker also checks each peer's uid.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The socket-path override.
pub const SOCKET_VAR: &str = "NEURON_VFIO_BROKER_SOCKET";

/// The effective uid of this process.
pub fn uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The socket path (module docs).
pub fn socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os(SOCKET_VAR).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        return PathBuf::from(d).join("neuron-vfio/broker.sock");
    }
    let run = PathBuf::from(format!("/run/user/{}", uid()));
    if run.is_dir() {
        return run.join("neuron-vfio/broker.sock");
    }
    PathBuf::from(format!("/tmp/neuron-vfio-{}/broker.sock", uid()))
}

/// Create the socket's directory owner-only (0700) if missing; an existing directory must be
/// owned by this user and not writable by others.
pub fn prepare_dir(socket: &Path) -> std::io::Result<()> {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let m = std::fs::metadata(dir)?;
    if m.uid() != uid() && uid() != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} belongs to uid {}, not {}", dir.display(), m.uid(), uid()),
        ));
    }
    if m.permissions().mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is writable by others (mode {:o})", dir.display(), m.permissions().mode() & 0o777),
        ));
    }
    Ok(())
}

/// Make the socket owner-only (0600).
pub fn restrict_socket(socket: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepares_an_owner_only_directory() {
        let t = std::env::temp_dir().join(format!("nv-broker-paths-{}", std::process::id()));
        let sock = t.join("a/b/broker.sock");
        prepare_dir(&sock).unwrap();
        let mode = std::fs::metadata(t.join("a/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(t.join("a/b"), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(prepare_dir(&sock).unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
