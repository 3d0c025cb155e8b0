//! PCI discovery through sysfs (`/sys/bus/pci/devices/*`). The root is configurable so
//! that tests can run against a fabricated tree.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};
pub use crate::pci::PciAddress;

impl FromStr for PciAddress {
    type Err = Error;
    /// `DDDD:BB:DD.F` or `BB:DD.F` (domain 0).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::BadAddress(s.to_string());
        let (rest, function) = s.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return Err(bad()),
        };
        let domain = u16::from_str_radix(domain, 16).map_err(|_| bad())?;
        let bus = u8::from_str_radix(bus, 16).map_err(|_| bad())?;
        let device = u8::from_str_radix(device, 16).map_err(|_| bad())?;
        let function = u8::from_str_radix(function, 16).map_err(|_| bad())?;
        if device > 0x1f || function > 7 {
            return Err(bad());
        }
        Ok(Self { domain, bus, device, function })
    }
}

/// One BAR as sysfs `resource` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarInfo {
    pub index: u8,
    /// Physical start address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// I/O-port BAR rather than memory.
    pub io: bool,
    pub prefetchable: bool,
    pub mem64: bool,
}

/// A PCI function as found in sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    pub address: PciAddress,
    pub vendor: u16,
    pub device: u16,
    pub subsystem_vendor: Option<u16>,
    pub subsystem_device: Option<u16>,
    pub revision: Option<u8>,
    /// 24-bit class code (class, subclass, prog-if).
    pub class: u32,
    /// Bound driver name, if any.
    pub driver: Option<String>,
    /// The `driver_override` in force, if any.
    pub driver_override: Option<String>,
    /// IOMMU group number; `None` when the kernel has no IOMMU for it.
    pub iommu_group: Option<u32>,
    /// NUMA node; `None` when unknown (-1).
    pub numa_node: Option<u32>,
    /// Present BARs (size > 0).
    pub bars: Vec<BarInfo>,
}

/// Vendor/device/class filter for discovery. `None` fields match anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    /// Match `class >> 8` (class and subclass) when set.
    pub class: Option<u16>,
}

impl Filter {
    /// Match a vendor and, optionally, a device ID.
    pub fn ids(vendor: u16, device: Option<u16>) -> Self {
        Self { vendor: Some(vendor), device, class: None }
    }
    /// Whether `f` passes.
    pub fn matches(&self, f: &PciFunction) -> bool {
        self.vendor.is_none_or(|v| v == f.vendor)
            && self.device.is_none_or(|d| d == f.device)
            && self.class.is_none_or(|c| u32::from(c) == f.class >> 8)
    }
}

/// A sysfs tree (normally `/sys`).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new("/sys")
    }
}

fn read_trim(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| Error::Sysfs { path: path.to_path_buf(), source })
}

fn parse_hex(path: &Path, what: &'static str, text: &str) -> Result<u64> {
    let t = text.trim();
    u64::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).map_err(|_| Error::Parse {
        path: path.to_path_buf(),
        what,
        text: text.to_string(),
    })
}

fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path).ok()?.file_name().map(|n| n.to_string_lossy().into_owned())
}

bitflags::bitflags! {
    /// The IORESOURCE flag bits (`include/linux/ioport.h`) used in sysfs `resource` lines.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct IoResource: u64 {
        const IO = 0x100;
        const PREFETCH = 0x2000;
        const MEM_64 = 0x0010_0000;
    }
}

/// Parse the sysfs `resource` file: one `start end flags` line per resource; lines 0–5 are BARs.
pub fn parse_resource(path: &Path, text: &str) -> Result<Vec<BarInfo>> {
    let mut bars = Vec::new();
    for (i, line) in text.lines().enumerate().take(6) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            return Err(Error::Parse { path: path.to_path_buf(), what: "resource line", text: line.to_string() });
        }
        let start = parse_hex(path, "resource start", f[0])?;
        let end = parse_hex(path, "resource end", f[1])?;
        let flags = IoResource::from_bits_retain(parse_hex(path, "resource flags", f[2])?);
        if end == 0 && start == 0 {
            continue;
        }
        bars.push(BarInfo {
            index: i as u8,
            start,
            size: end.saturating_sub(start) + 1,
            io: flags.contains(IoResource::IO),
            prefetchable: flags.contains(IoResource::PREFETCH),
            mem64: flags.contains(IoResource::MEM_64),
        });
    }
    Ok(bars)
}

impl Sysfs {
    /// A sysfs tree rooted at `root` (`/sys` on a live system).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root of this tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ROOT/bus/pci/devices/ADDR`.
    pub fn device_path(&self, addr: PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr.to_string())
    }

    /// `ROOT/bus/pci/drivers/NAME`.
    pub fn driver_path(&self, name: &str) -> PathBuf {
        self.root.join("bus/pci/drivers").join(name)
    }

    /// `ROOT/kernel/iommu_groups/N/devices`.
    pub fn group_devices_path(&self, group: u32) -> PathBuf {
        self.root.join("kernel/iommu_groups").join(group.to_string()).join("devices")
    }

    /// Every PCI function, sorted by address.
    pub fn list(&self) -> Result<Vec<PciFunction>> {
        self.find(&Filter::default())
    }

    /// The PCI functions that pass `filter`, sorted by address.
    pub fn find(&self, filter: &Filter) -> Result<Vec<PciFunction>> {
        let dir = self.root.join("bus/pci/devices");
        let rd = std::fs::read_dir(&dir).map_err(|source| Error::Sysfs { path: dir.clone(), source })?;
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|source| Error::Sysfs { path: dir.clone(), source })?;
            let Ok(addr) = entry.file_name().to_string_lossy().parse::<PciAddress>() else { continue };
            let f = self.function(addr)?;
            if filter.matches(&f) {
                out.push(f);
            }
        }
        out.sort_by_key(|f| f.address);
        Ok(out)
    }

    /// Read one PCI function.
    pub fn function(&self, address: PciAddress) -> Result<PciFunction> {
        let d = self.device_path(address);
        if !d.exists() {
            return Err(Error::NoSuchDevice(address));
        }
        let hex = |name: &'static str| -> Result<u64> {
            let p = d.join(name);
            let t = read_trim(&p)?;
            parse_hex(&p, name, &t)
        };
        let opt_hex = |name: &'static str| -> Option<u64> { hex(name).ok() };
        let resource_path = d.join("resource");
        let bars = match std::fs::read_to_string(&resource_path) {
            Ok(t) => parse_resource(&resource_path, &t)?,
            Err(_) => Vec::new(),
        };
        let numa_node = read_trim(&d.join("numa_node")).ok().and_then(|t| t.parse::<i64>().ok());
        let driver_override = read_trim(&d.join("driver_override")).ok().filter(|s| !s.is_empty() && s != "(null)");
        Ok(PciFunction {
            address,
            vendor: hex("vendor")? as u16,
            device: hex("device")? as u16,
            subsystem_vendor: opt_hex("subsystem_vendor").map(|v| v as u16),
            subsystem_device: opt_hex("subsystem_device").map(|v| v as u16),
            revision: opt_hex("revision").map(|v| v as u8),
            class: hex("class")? as u32,
            driver: link_name(&d.join("driver")),
            driver_override,
            iommu_group: link_name(&d.join("iommu_group")).and_then(|n| n.parse().ok()),
            numa_node: numa_node.and_then(|n| u32::try_from(n).ok()),
            bars,
        })
    }

    /// The members of IOMMU group `group`, sorted.
    pub fn group_members(&self, group: u32) -> Result<Vec<PciAddress>> {
        let dir = self.group_devices_path(group);
        let rd = std::fs::read_dir(&dir).map_err(|source| Error::Sysfs { path: dir.clone(), source })?;
        let mut out: Vec<PciAddress> = rd.filter_map(|e| e.ok()?.file_name().to_string_lossy().parse().ok()).collect();
        out.sort();
        Ok(out)
    }

    /// Check that the IOMMU group of `addr` is viable for VFIO: every other member is bound
    /// to vfio-pci or to no driver (PCIe bridges bound to `pcieport` are tolerated, as the
    /// kernel does). Returns the group number.
    pub fn check_group_viable(&self, addr: PciAddress) -> Result<u32> {
        let f = self.function(addr)?;
        let group = f.iommu_group.ok_or(Error::NoIommu(addr))?;
        let mut others = Vec::new();
        for m in self.group_members(group)? {
            if m == addr {
                continue;
            }
            let mf = self.function(m)?;
            match mf.driver.as_deref() {
                None | Some("vfio-pci") | Some("pcieport") => {}
                Some(d) => others.push((m, d.to_string())),
            }
        }
        if others.is_empty() {
            Ok(group)
        } else {
            Err(Error::GroupNotViable { addr, group, others })
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fabricated sysfs tree for tests.
    use super::*;
    use std::os::unix::fs::symlink;

    pub struct FakeSysfs {
        pub dir: PathBuf,
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    impl FakeSysfs {
        pub fn new(tag: &str) -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("vfio-fake-sysfs-{}-{tag}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for d in ["bus/pci/devices", "bus/pci/drivers/vfio-pci", "kernel/iommu_groups", "devices/pci0000:00"] {
                std::fs::create_dir_all(dir.join(d)).unwrap();
            }
            std::fs::write(dir.join("bus/pci/drivers_probe"), "").unwrap();
            Self { dir }
        }

        pub fn sysfs(&self) -> Sysfs {
            Sysfs::new(&self.dir)
        }

        /// Add a function with IDs, class, optional driver and IOMMU group.
        pub fn add(&self, addr: &str, vendor: u16, device: u16, class: u32, driver: Option<&str>, group: Option<u32>) {
            let real = self.dir.join("devices/pci0000:00").join(addr);
            std::fs::create_dir_all(&real).unwrap();
            let w = |n: &str, v: String| std::fs::write(real.join(n), v + "\n").unwrap();
            w("vendor", format!("0x{vendor:04x}"));
            w("device", format!("0x{device:04x}"));
            w("class", format!("0x{class:06x}"));
            w("revision", "0x02".into());
            w("numa_node", "-1".into());
            w("driver_override", "(null)".into());
            let mut res = String::from("0x00000000fe000000 0x00000000fe0fffff 0x0000000000040200\n");
            res += "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
            res += "0x0000008000000000 0x00000080001fffff 0x000000000014220c\n";
            for _ in 3..13 {
                res += "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
            }
            std::fs::write(real.join("resource"), res).unwrap();
            symlink(&real, self.dir.join("bus/pci/devices").join(addr)).unwrap();
            if let Some(d) = driver {
                self.set_driver(addr, Some(d));
            }
            if let Some(g) = group {
                let gd = self.dir.join("kernel/iommu_groups").join(g.to_string());
                std::fs::create_dir_all(gd.join("devices")).unwrap();
                symlink(&gd, real.join("iommu_group")).unwrap();
                symlink(&real, gd.join("devices").join(addr)).unwrap();
            }
        }

        /// Point the function's `driver` link at `driver` (creating the driver dir), or remove it.
        pub fn set_driver(&self, addr: &str, driver: Option<&str>) {
            let real = self.dir.join("devices/pci0000:00").join(addr);
            let _ = std::fs::remove_file(real.join("driver"));
            if let Some(d) = driver {
                let dd = self.dir.join("bus/pci/drivers").join(d);
                std::fs::create_dir_all(&dd).unwrap();
                for f in ["bind", "unbind"] {
                    if !dd.join(f).exists() {
                        std::fs::write(dd.join(f), "").unwrap();
                    }
                }
                symlink(&dd, real.join("driver")).unwrap();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSysfs;
    use super::*;

    #[test]
    fn parses_addresses() {
        let a: PciAddress = "0000:00:1e.0".parse().unwrap();
        assert_eq!(a, PciAddress { domain: 0, bus: 0, device: 0x1e, function: 0 });
        assert_eq!(a.to_string(), "0000:00:1e.0");
        assert_eq!("3b:00.1".parse::<PciAddress>().unwrap().to_string(), "0000:3b:00.1");
        for bad in ["", "00:1e", "0000:00:20.0", "0000:00:1f.8", "zz:00.0", "1:2:3:4.0"] {
            assert!(bad.parse::<PciAddress>().is_err(), "{bad}");
        }
    }

    #[test]
    fn discovers_and_filters() {
        let t = FakeSysfs::new("discover");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0x00ff00, None, Some(3));
        t.add("0000:00:02.0", 0x8086, 0x10d3, 0x020000, Some("e1000e"), Some(2));
        t.add("0000:10:1e.0", 0x1d0f, 0x7164, 0x120000, Some("vfio-pci"), Some(7));
        let s = t.sysfs();
        let all = s.list().unwrap();
        assert_eq!(
            all.iter().map(|f| f.address.to_string()).collect::<Vec<_>>(),
            ["0000:00:02.0", "0000:00:03.0", "0000:10:1e.0"]
        );
        let edu = s.find(&Filter::ids(0x1234, Some(0x11e8))).unwrap();
        assert_eq!(edu.len(), 1);
        let f = &edu[0];
        assert_eq!((f.vendor, f.device, f.class), (0x1234, 0x11e8, 0x00ff00));
        assert_eq!(f.driver, None);
        assert_eq!(f.driver_override, None);
        assert_eq!(f.iommu_group, Some(3));
        assert_eq!(f.numa_node, None);
        assert_eq!(f.revision, Some(2));
        assert_eq!(f.bars.len(), 2);
        assert_eq!(
            f.bars[0],
            BarInfo { index: 0, start: 0xfe00_0000, size: 1 << 20, io: false, prefetchable: false, mem64: false }
        );
        assert_eq!(f.bars[1].index, 2);
        assert_eq!(f.bars[1].size, 2 << 20);
        assert!(f.bars[1].prefetchable && f.bars[1].mem64);
        let by_class = s.find(&Filter { class: Some(0x0200), ..Default::default() }).unwrap();
        assert_eq!(by_class.len(), 1);
        assert_eq!(by_class[0].driver.as_deref(), Some("e1000e"));
        assert!(s.find(&Filter::ids(0xabcd, None)).unwrap().is_empty());
        assert!(matches!(s.function("0000:00:09.0".parse().unwrap()), Err(Error::NoSuchDevice(_))));
    }

    #[test]
    fn malformed_files_are_errors_not_panics() {
        let t = FakeSysfs::new("malformed");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, None, Some(3));
        let d = t.dir.join("devices/pci0000:00/0000:00:03.0");
        std::fs::write(d.join("vendor"), "garbage\n").unwrap();
        let e = t.sysfs().list().unwrap_err();
        assert!(e.to_string().contains("cannot parse vendor"), "{e}");
        std::fs::write(d.join("vendor"), "0x1234\n").unwrap();
        std::fs::write(d.join("resource"), "0x1 0x2\n").unwrap();
        assert!(matches!(t.sysfs().list(), Err(Error::Parse { what: "resource line", .. })));
    }

    #[test]
    fn group_viability() {
        let t = FakeSysfs::new("viable");
        t.add("0000:00:03.0", 0x1234, 0x11e8, 0, Some("vfio-pci"), Some(5));
        t.add("0000:00:03.1", 0x1234, 0x11e9, 0, None, Some(5));
        t.add("0000:00:04.0", 0x1234, 0x11ea, 0, None, None);
        let s = t.sysfs();
        let a: PciAddress = "0000:00:03.0".parse().unwrap();
        assert_eq!(s.check_group_viable(a).unwrap(), 5);
        t.set_driver("0000:00:03.1", Some("snd_hda_intel"));
        match s.check_group_viable(a) {
            Err(e @ Error::GroupNotViable { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("0000:00:03.1 (driver snd_hda_intel)"), "{msg}");
                assert!(msg.contains("group 5"), "{msg}");
            }
            other => panic!("expected GroupNotViable, got {other:?}"),
        }
        t.set_driver("0000:00:03.1", Some("vfio-pci"));
        assert!(s.check_group_viable(a).is_ok());
        let e = s.check_group_viable("0000:00:04.0".parse().unwrap()).unwrap_err();
        assert!(matches!(e, Error::NoIommu(_)));
        assert!(e.to_string().contains("intel_iommu=on"));
        assert_eq!(s.group_members(5).unwrap().len(), 2);
    }
}
