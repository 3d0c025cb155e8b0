//! Binding a PCI function to vfio-pci (driver_override + drivers_probe) and restoring the
//! driver it had; checks of the environment VFIO needs (modules, device nodes, memlock).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sysfs::{PciAddress, Sysfs};

const VFIO_PCI: &str = "vfio-pci";

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Sysfs { path: path.to_path_buf(), source })
}

/// A function bound to vfio-pci by us; dropping it (or [`Binding::restore`]) gives the function
/// back to the driver it had (or to none) and clears the `driver_override` we set.
#[derive(Debug)]
pub struct Binding {
    sysfs: Sysfs,
    address: PciAddress,
    original_driver: Option<String>,
    original_override: Option<String>,
    restored: bool,
}

impl Binding {
    /// Bind `address` to vfio-pci. A function already on vfio-pci stays there (and is left
    /// there on restore).
    pub fn bind(sysfs: &Sysfs, address: PciAddress) -> Result<Self> {
        let f = sysfs.function(address)?;
        let mut b = Binding {
            sysfs: sysfs.clone(),
            address,
            original_driver: f.driver.clone(),
            original_override: f.driver_override.clone(),
            restored: false,
        };
        if f.driver.as_deref() == Some(VFIO_PCI) {
            return Ok(b);
        }
        if !sysfs.driver_path(VFIO_PCI).exists() {
            b.restored = true;
            return Err(Error::VfioPciMissing);
        }
        let dev = sysfs.device_path(address);
        write(&dev.join("driver_override"), VFIO_PCI)?;
        if let Some(d) = &f.driver {
            write(&sysfs.driver_path(d).join("unbind"), &address.to_string())?;
        }
        // drivers_probe fails with an error when no driver accepts the device; the check
        // below reports that with the state the device ended up in.
        let probe = write(&sysfs.root().join("bus/pci/drivers_probe"), &address.to_string());
        let now = sysfs.function(address)?.driver;
        if now.as_deref() != Some(VFIO_PCI) {
            let now = now.unwrap_or_else(|| "none".into());
            let _ = b.restore_inner();
            probe?;
            return Err(Error::BindFailed { addr: address, now });
        }
        Ok(b)
    }

    /// The function.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// The driver the function had before.
    pub fn original_driver(&self) -> Option<&str> {
        self.original_driver.as_deref()
    }

    /// Give the function back to its original driver and report failures.
    pub fn restore(mut self) -> Result<()> {
        self.restore_inner()
    }

    /// Leave the function on vfio-pci beyond this process (a later [`release`] gives it
    /// back); returns the driver it had.
    pub fn persist(mut self) -> Option<String> {
        self.restored = true;
        self.original_driver.take()
    }

    fn restore_inner(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        if self.original_driver.as_deref() == Some(VFIO_PCI) {
            return Ok(());
        }
        let dev = self.sysfs.device_path(self.address);
        // An empty write clears the override.
        write(&dev.join("driver_override"), self.original_override.as_deref().unwrap_or("\n"))?;
        let current = self.sysfs.function(self.address)?.driver;
        if let Some(cur) = current.as_deref() {
            if Some(cur) != self.original_driver.as_deref() {
                write(&self.sysfs.driver_path(cur).join("unbind"), &self.address.to_string())?;
            }
        }
        if let Some(orig) = &self.original_driver {
            if current.as_deref() != Some(orig) {
                let bind = self.sysfs.driver_path(orig).join("bind");
                write(&bind, &self.address.to_string())
                    .or_else(|_| write(&self.sysfs.root().join("bus/pci/drivers_probe"), &self.address.to_string()))?;
            }
        }
        Ok(())
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        let _ = self.restore_inner();
    }
}

/// How [`release`] left a function.
#[derive(Debug)]
pub enum Released {
    /// Bound to the requested driver.
    Rebound(String),
    /// Handed to the kernel's probe (`drivers_probe`): no driver was requested, it is not
    /// registered, or binding it failed (the error).
    Reprobed(Option<Error>),
}

/// Take a function off vfio-pci (one a [`Binding::persist`] left there): clear
/// `driver_override`, unbind it from vfio-pci, then bind `driver` when given and registered,
/// else (or when that bind fails) let the kernel reprobe it.
pub fn release(sysfs: &Sysfs, address: PciAddress, driver: Option<&str>) -> Result<Released> {
    let addr = address.to_string();
    // An empty write clears the override.
    write(&sysfs.device_path(address).join("driver_override"), "\n")?;
    write(&sysfs.driver_path(VFIO_PCI).join("unbind"), &addr)?;
    let probe = || write(&sysfs.root().join("bus/pci/drivers_probe"), &addr);
    let bind_error = match driver.filter(|d| *d != VFIO_PCI) {
        Some(d) if sysfs.driver_path(d).join("bind").exists() => match write(&sysfs.driver_path(d).join("bind"), &addr)
        {
            Ok(()) => return Ok(Released::Rebound(d.to_string())),
            Err(e) => Some(e),
        },
        _ => None,
    };
    probe()?;
    Ok(Released::Reprobed(bind_error))
}

/// Which VFIO interfaces this system offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioSupport {
    /// `/dev/vfio/vfio`: the legacy container.
    pub container: bool,
    /// `/dev/iommu`: iommufd.
    pub iommufd: bool,
    /// The vfio-pci driver is registered.
    pub vfio_pci: bool,
}

/// Look at `dev` (normally `/dev`) and `sysfs` for the VFIO interfaces.
pub fn probe_support(sysfs: &Sysfs, dev: &Path) -> VfioSupport {
    VfioSupport {
        container: dev.join("vfio/vfio").exists(),
        iommufd: dev.join("iommu").exists(),
        vfio_pci: sysfs.driver_path(VFIO_PCI).exists(),
    }
}

/// Fail with what to load when neither VFIO interface or vfio-pci is there.
pub fn check_vfio_available(sysfs: &Sysfs, dev: &Path) -> Result<VfioSupport> {
    let s = probe_support(sysfs, dev);
    if !s.container && !s.iommufd {
        return Err(Error::VfioMissing { path: dev.join("vfio/vfio") });
    }
    if !s.vfio_pci {
        return Err(Error::VfioPciMissing);
    }
    Ok(s)
}

/// The verdict on pinning `requested` more bytes with `locked` already pinned, under a
/// memlock limit (`None` = unlimited) and with or without CAP_IPC_LOCK.
pub fn memlock_verdict(limit: Option<u64>, cap_ipc_lock: bool, locked: u64, requested: u64) -> Result<()> {
    let needed = locked.saturating_add(requested);
    match limit {
        Some(limit) if !cap_ipc_lock && needed > limit => {
            Err(Error::MemlockTooLow { limit, locked, requested, needed })
        }
        _ => Ok(()),
    }
}

/// The process's RLIMIT_MEMLOCK soft limit (`None` = unlimited).
pub fn memlock_limit() -> Result<Option<u64>> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let (soft, _hard) = getrlimit(Resource::RLIMIT_MEMLOCK).map_err(|e| Error::Io(e.into()))?;
    Ok((soft != RLIM_INFINITY).then_some(soft))
}

/// Whether the process has CAP_IPC_LOCK in its effective set (then pins are not limited).
pub fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// Check that pinning `requested` more bytes on top of `locked` fits this process's limits.
pub fn check_memlock(locked: u64, requested: u64) -> Result<()> {
    memlock_verdict(memlock_limit()?, has_cap_ipc_lock(), locked, requested)
}

/// `/dev/vfio/N` for a group.
pub fn group_node(dev: &Path, group: u32) -> PathBuf {
    dev.join("vfio").join(group.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::fake::FakeSysfs;

    #[test]
    fn bind_writes_override_unbinds_and_probes() {
        let t = FakeSysfs::new("bind");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, Some("edu"), Some(3));
        let s = t.sysfs();
        let a: PciAddress = "0000:00:03.0".parse().unwrap();
        // The fake kernel does not rebind: binding must notice and say so.
        let e = Binding::bind(&s, a).unwrap_err();
        assert!(matches!(&e, Error::BindFailed { now, .. } if now == "edu"), "{e}");
        let rd = |p: &str| std::fs::read_to_string(t.dir.join(p)).unwrap();
        assert_eq!(rd("bus/pci/drivers/edu/unbind"), "0000:00:03.0");
        assert_eq!(rd("bus/pci/drivers_probe"), "0000:00:03.0");
        // ...and it restored: override cleared, original driver bound again.
        assert_eq!(rd("devices/pci0000:00/0000:00:03.0/driver_override"), "\n");

        // Simulate the kernel having bound vfio-pci: restore unbinds it and rebinds edu.
        t.set_driver("0000:00:03.0", Some("vfio-pci"));
        let b = Binding {
            sysfs: s.clone(),
            address: a,
            original_driver: Some("edu".into()),
            original_override: None,
            restored: false,
        };
        b.restore().unwrap();
        assert_eq!(rd("bus/pci/drivers/vfio-pci/unbind"), "0000:00:03.0");
        assert_eq!(rd("bus/pci/drivers/edu/bind"), "0000:00:03.0");
    }

    #[test]
    fn persist_keeps_the_binding_and_release_gives_it_back() {
        let t = FakeSysfs::new("release");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), Some(3));
        let s = t.sysfs();
        let a: PciAddress = "0000:00:03.0".parse().unwrap();
        let rd = |p: &str| std::fs::read_to_string(t.dir.join(p)).unwrap();
        // Already on vfio-pci: persisting writes nothing on drop.
        let b = Binding::bind(&s, a).unwrap();
        assert_eq!(b.persist().as_deref(), Some("vfio-pci"));
        assert_eq!(rd("bus/pci/drivers/vfio-pci/unbind"), "");

        // Back to a registered driver.
        t.set_driver("0000:00:03.0", Some("edu"));
        t.set_driver("0000:00:03.0", Some("vfio-pci"));
        assert!(matches!(release(&s, a, Some("edu")).unwrap(), Released::Rebound(d) if d == "edu"));
        assert_eq!(rd("devices/pci0000:00/0000:00:03.0/driver_override"), "\n");
        assert_eq!(rd("bus/pci/drivers/vfio-pci/unbind"), "0000:00:03.0");
        assert_eq!(rd("bus/pci/drivers/edu/bind"), "0000:00:03.0");
        assert_eq!(rd("bus/pci/drivers_probe"), "");

        // No recorded driver, or one that is not registered: the kernel reprobes.
        for driver in [None, Some("gone")] {
            std::fs::write(t.dir.join("bus/pci/drivers_probe"), "").unwrap();
            assert!(matches!(release(&s, a, driver).unwrap(), Released::Reprobed(None)));
            assert_eq!(rd("bus/pci/drivers_probe"), "0000:00:03.0");
        }
        // A bind that fails falls back to the probe and reports the error.
        std::fs::remove_file(t.dir.join("bus/pci/drivers/edu/bind")).unwrap();
        std::fs::create_dir(t.dir.join("bus/pci/drivers/edu/bind")).unwrap();
        std::fs::write(t.dir.join("bus/pci/drivers_probe"), "").unwrap();
        assert!(matches!(release(&s, a, Some("edu")).unwrap(), Released::Reprobed(Some(Error::Sysfs { .. }))));
        assert_eq!(rd("bus/pci/drivers_probe"), "0000:00:03.0");
    }

    #[test]
    fn already_on_vfio_pci_is_left_alone() {
        let t = FakeSysfs::new("already");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), Some(3));
        let b = Binding::bind(&t.sysfs(), "00:03.0".parse().unwrap()).unwrap();
        assert_eq!(b.original_driver(), Some("vfio-pci"));
        b.restore().unwrap();
        assert_eq!(std::fs::read_to_string(t.dir.join("bus/pci/drivers/vfio-pci/unbind")).unwrap(), "");
    }

    #[test]
    fn missing_vfio_is_explained() {
        let t = FakeSysfs::new("novfio");
        let dev = t.dir.join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        let e = check_vfio_available(&t.sysfs(), &dev).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("modprobe vfio-pci") && msg.contains("vfio_iommu_type1"), "{msg}");
        std::fs::create_dir_all(dev.join("vfio")).unwrap();
        std::fs::write(dev.join("vfio/vfio"), "").unwrap();
        let s = check_vfio_available(&t.sysfs(), &dev).unwrap();
        assert!(s.container && !s.iommufd && s.vfio_pci);
        std::fs::remove_dir_all(t.dir.join("bus/pci/drivers/vfio-pci")).unwrap();
        assert!(matches!(check_vfio_available(&t.sysfs(), &dev), Err(Error::VfioPciMissing)));
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, None, Some(3));
        assert!(matches!(Binding::bind(&t.sysfs(), "00:03.0".parse().unwrap()), Err(Error::VfioPciMissing)));
    }

    #[test]
    fn memlock_says_the_numbers() {
        assert!(memlock_verdict(None, false, 1 << 30, 1 << 30).is_ok());
        assert!(memlock_verdict(Some(8 << 20), true, 0, 1 << 30).is_ok());
        assert!(memlock_verdict(Some(8 << 20), false, 4 << 20, 4 << 20).is_ok());
        let e = memlock_verdict(Some(8 << 20), false, 4 << 20, 8 << 20).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("8388608") && msg.contains("12582912") && msg.contains("ulimit -l 12288"), "{msg}");
    }
}
