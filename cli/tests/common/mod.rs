//! Helpers shared by the CLI tests: the binary, JSON parsing, a fabricated sysfs tree.
#![allow(dead_code)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

pub fn cli() -> Command {
    let mut c = Command::cargo_bin("neuron-vfio").expect("binary");
    c.env_remove("NEURON_RT_LOG_LEVEL");
    c
}

/// Run with `args`, expect success, parse stdout as one JSON value.
pub fn json_ok(args: &[&str]) -> Value {
    let out = cli().args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Run with `args`, expect failure, return the single stderr line.
pub fn err_line(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(!out.status.success(), "expected failure: {}", String::from_utf8_lossy(&out.stdout));
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(e.lines().count(), 1, "one error line expected: {e}");
    e
}

/// A sysfs tree in a temporary directory: PCI functions with IDs, drivers and IOMMU
/// groups, the driver directories' bind/unbind files and drivers_probe.
pub struct FakeTree {
    pub root: PathBuf,
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl FakeTree {
    pub fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!("neuron-cli-sysfs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in [
            "sys/bus/pci/devices",
            "sys/bus/pci/drivers/vfio-pci",
            "sys/kernel/iommu_groups",
            "sys/devices/pci0000:00",
            "dev",
            "state",
        ] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("sys/bus/pci/drivers_probe"), "").expect("probe");
        for f in ["bind", "unbind"] {
            std::fs::write(root.join("sys/bus/pci/drivers/vfio-pci").join(f), "").expect("vfio files");
        }
        Self { root }
    }

    pub fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    /// Make /dev/vfio/vfio exist.
    pub fn with_vfio_node(&self) {
        std::fs::create_dir_all(self.root.join("dev/vfio")).expect("mkdir");
        std::fs::write(self.root.join("dev/vfio/vfio"), "").expect("node");
    }

    fn dev_dir(&self, bdf: &str) -> PathBuf {
        self.sys().join("devices/pci0000:00").join(bdf)
    }

    pub fn add(&self, bdf: &str, vendor: u16, device: u16, driver: Option<&str>, group: Option<u32>) {
        let d = self.dev_dir(bdf);
        std::fs::create_dir_all(&d).expect("mkdir");
        for (name, v) in [
            ("vendor", format!("{vendor:#06x}")),
            ("device", format!("{device:#06x}")),
            ("class", "0x088000".to_string()),
            ("numa_node", "0".to_string()),
            ("driver_override", "(null)".to_string()),
        ] {
            std::fs::write(d.join(name), v + "\n").expect("attr");
        }
        symlink(&d, self.sys().join("bus/pci/devices").join(bdf)).expect("link");
        self.set_driver(bdf, driver);
        if let Some(g) = group {
            let gd = self.sys().join("kernel/iommu_groups").join(g.to_string());
            std::fs::create_dir_all(gd.join("devices")).expect("group");
            symlink(&gd, d.join("iommu_group")).expect("link");
            symlink(&d, gd.join("devices").join(bdf)).expect("link");
        }
    }

    pub fn set_driver(&self, bdf: &str, driver: Option<&str>) {
        let d = self.dev_dir(bdf);
        let _ = std::fs::remove_file(d.join("driver"));
        if let Some(drv) = driver {
            let dd = self.sys().join("bus/pci/drivers").join(drv);
            std::fs::create_dir_all(&dd).expect("driver dir");
            for f in ["bind", "unbind"] {
                if !dd.join(f).exists() {
                    std::fs::write(dd.join(f), "").expect("driver files");
                }
            }
            symlink(&dd, d.join("driver")).expect("link");
        }
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap_or_default()
    }

    /// The binary with this tree as sysfs, /dev and state dir.
    pub fn cmd(&self) -> Command {
        let mut c = cli();
        // The host this tree stands for has no broker and no other runtime publishing
        // counters: `ls` with no device lists what those show too.
        c.env("NEURON_VFIO_SYSFS", self.sys())
            .env("NEURON_VFIO_DEVDIR", self.root.join("dev"))
            .env("NEURON_VFIO_STATE_DIR", self.root.join("state"))
            .env("NEURON_VFIO_SHM_DIR", self.root.join("shm"))
            .env("NEURON_VFIO_BROKER_SOCKET", self.root.join("broker.sock"));
        c
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// The repository root (the CLI tests run the binary from there: examples/ paths).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The binary as a std command, run from the repository root with its shared-memory segments
/// (counters, debug endpoints) in `shm` and both publications at their defaults.
pub fn cli_in(shm: &Path) -> std::process::Command {
    use assert_cmd::cargo::CommandCargoExt;
    let mut c = std::process::Command::cargo_bin("neuron-vfio").expect("binary");
    c.current_dir(root())
        .env("NEURON_VFIO_SHM_DIR", shm)
        .env_remove("NEURON_VFIO_COUNTERS")
        .env_remove("NEURON_VFIO_DEBUG_ENDPOINT");
    c
}

/// A fresh, empty directory for one test's shared-memory segments.
pub fn shm_dir(prefix: &str, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nv-{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("shm dir");
    d
}

/// Another process executing the 2-NC example model on sim:cayman for a long while (killed on
/// drop): started, then awaited until `ready(shm)` holds (what it publishes), then given
/// `settle` to load and start executing.
pub struct Runner(pub std::process::Child);

impl Runner {
    pub fn start(shm: &Path, what: &str, ready: impl Fn(&Path) -> bool, settle: std::time::Duration) -> Self {
        Self::start_on(shm, "sim:cayman", what, ready, settle)
    }

    /// [`Runner::start`] on `device` (the model needs 2 NCs: any arch has them).
    pub fn start_on(
        shm: &Path,
        device: &str,
        what: &str,
        ready: impl Fn(&Path) -> bool,
        settle: std::time::Duration,
    ) -> Self {
        use std::time::{Duration, Instant};
        // The example is compiled for LNC=1 (cayman's default is 2).
        let child = cli_in(shm)
            .env("NEURON_LOGICAL_NC_CONFIG", "1")
            .args([
                "--device",
                device,
                "run",
                "examples/allreduce_2nc.neff",
                "--input",
                "input=examples/input_32xf32.bin",
                "--repeat",
                "2000000",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the runner");
        let runner = Runner(child);
        let t0 = Instant::now();
        while !ready(shm) {
            assert!(t0.elapsed() < Duration::from_secs(60), "the runner published no {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(settle);
        runner
    }

    pub fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cmd` on PATH.
pub fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(cmd)).find(|p| p.is_file())
}

/// The QEMU to boot: NEURON_VFIO_QEMU; else the QEMU 11 that scripts/qemu/setup.sh unpacked
/// into CACHE/qemu-11/root, through its wrapper; else qemu-system-x86_64 from PATH.
pub fn find_qemu(cache: &Path) -> Option<PathBuf> {
    if let Some(q) = std::env::var_os("NEURON_VFIO_QEMU") {
        return Some(PathBuf::from(q));
    }
    if cache.join("qemu-11/root/usr/bin/qemu-system-x86_64").is_file() {
        return Some(root().join("scripts/qemu/qemu-vfio-user"));
    }
    which("qemu-system-x86_64")
}

/// Waits for `child` until `deadline`, polling every `poll`; past the deadline it is killed
/// and reaped and the result is `None`.
pub fn wait_or_kill(
    child: &mut std::process::Child,
    deadline: std::time::Instant,
    poll: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if std::time::Instant::now() <= deadline => std::thread::sleep(poll),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Waits until `ready()` holds for a server `child` just started: panics with its stderr if it
/// exits first, or if `ready` does not hold within 30 s.
pub fn wait_serving(child: &mut std::process::Child, what: &str, ready: impl Fn() -> bool) {
    use std::io::Read;
    let started = std::time::Instant::now();
    while !ready() {
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut e));
            panic!("{what} exited ({st}) before serving: {e}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "{what} was not serving after 30 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
