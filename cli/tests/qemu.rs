//! Boots a Linux guest under QEMU whose `edu` PCI device sits behind an emulated Intel IOMMU,
//! and runs `vfio-guest all` in it (the vfio crate's example `vfio/examples/vfio-guest.rs`,
//! built by this test): the vfio crate against a real kernel. One boot covers
//! every check (both VFIO paths the kernel offers) and the DMA benchmark.
//!
//! Needs `scripts/qemu/setup.sh` to have run (busybox-static, the guest kernel it builds from
//! Debian's linux-source-6.12, QEMU; see docs/qemu.md). Without them the test prints a notice
//! and passes, unless NEURON_VFIO_REQUIRE_QEMU=1 (CI). NEURON_VFIO_CACHE overrides the cache
//! dir (default /var/cache/neuron-vfio); NEURON_VFIO_QEMU the QEMU binary (default: setup.sh's
//! QEMU 11 through scripts/qemu/qemu-vfio-user when provisioned, else qemu-system-x86_64 from
//! PATH); NEURON_VFIO_QEMU_ACCEL (default `tcg`) the accelerator.
//!
//! Which paths must pass: with NEURON_VFIO_REQUIRE_QEMU=1, all of them, and any
//! `VFIO-CHECK skip` line from the guest fails the test. Otherwise it follows the booted
//! kernel's config (KERNEL_DIR/config, kept by setup.sh): the legacy container always;
//! iommufd + the VFIO device cdev whenever the kernel has CONFIG_IOMMUFD and
//! CONFIG_VFIO_DEVICE_CDEV=y (setup.sh's kernel), or when NEURON_VFIO_REQUIRE_IOMMUFD=1;
//! for another kernel the guest must say why the iommufd path was skipped.
//!
//! A second edu sits behind a pxb-pcie expander bridge with `bypass_iommu=true`: no IOMMU
//! translates it. vfio gets `enable_unsafe_noiommu_mode=1` (kernel command line, for a vfio
//! built in as in setup.sh's kernel; modprobe.d, for a modular one). The guest
//! must refuse it without `OpenOptions::allow_noiommu` (always), and, when the kernel has
//! no-IOMMU mode (CONFIG_VFIO_NOIOMMU=y in the config, the guest reporting support, or
//! NEURON_VFIO_REQUIRE_NOIOMMU=1), open it in no-IOMMU mode: MMIO, factorial and a DMA round
//! trip at physical addresses. Otherwise it must say why that part was skipped.
//!
//! An e1000e (edu has MSI only) carries the MSI-X check: two vectors to eventfds, a cause
//! routed to vector 1 must fire its eventfd and only it, and nothing while it is masked.
//!
//! A virtual Neuron device: `neuron-vfio sim-serve` serves the simulator over vfio-user
//! (guest RAM is a shareable memfd, the device sits behind the IOMMU; QEMU arguments from
//! scripts/qemu/vdev-args.sh). Before vfio-guest, `tests/guest-neuron.sh` drives it with the
//! real driver path in the guest: `neuron-vfio ls/bind/info/csr read/nq dump/dma bench`, the
//! example models with exact outputs through the container and the iommufd backend, the
//! interrupt poll policy through MSI-X, and a fault the test injects through sim-serve's
//! control socket when the guest's `run --pause-before-exec` says the model is loaded (the
//! serial stream is read live; a line written to QEMU's stdin lets the guest continue).
//!
//! After vfio-guest, `tests/guest-scripts.sh` runs the operator scripts (scripts/vfio-bind.sh,
//! vfio-unbind.sh, hugepages.sh) in the guest: bind/rebind/unbind the e1000e, refusal of the
//! no-IOMMU edu, a hugepage reservation.

use std::io::{BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{find_qemu, wait_or_kill, wait_serving, which};

const TIMEOUT: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds the guest's check harness, the vfio crate's example `vfio-guest` (same profile as
/// this test, same target dir), and returns the path of its executable.
fn build_vfio_guest() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo()).args(["build", "-p", "vfio", "--example", "vfio-guest", "--message-format=json"]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.stderr(Stdio::inherit()).output().expect("run cargo build -p vfio --example vfio-guest");
    assert!(out.status.success(), "cargo build -p vfio --example vfio-guest failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "vfio-guest")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no vfio-guest executable")
}

fn env_is_1(name: &str) -> bool {
    std::env::var(name).as_deref() == Ok("1")
}

fn unavailable(why: &str) {
    if env_is_1("NEURON_VFIO_REQUIRE_QEMU") {
        panic!(
            "QEMU VFIO test required (NEURON_VFIO_REQUIRE_QEMU=1) but unavailable: {why}; run scripts/qemu/setup.sh"
        );
    }
    eprintln!("NOTICE: skipping the QEMU VFIO test: {why} (run scripts/qemu/setup.sh; set NEURON_VFIO_REQUIRE_QEMU=1 to make this a failure)");
}

/// Whether a kernel config enables iommufd (built in or module) and the VFIO device cdev.
fn config_has_iommufd(config: &str) -> bool {
    let set = |key: &str, vals: &[&str]| {
        config.lines().any(|l| l.split_once('=').is_some_and(|(k, v)| k == key && vals.contains(&v.trim())))
    };
    set("CONFIG_IOMMUFD", &["y", "m"]) && set("CONFIG_VFIO_DEVICE_CDEV", &["y"])
}

/// Whether a kernel config has VFIO no-IOMMU mode.
fn config_has_noiommu(config: &str) -> bool {
    config.lines().any(|l| l.trim() == "CONFIG_VFIO_NOIOMMU=y")
}

/// The no-IOMMU checks that must pass when the kernel has no-IOMMU mode.
const NOIOMMU_CHECKS: &[&str] = &[
    "noiommu.discover",
    "noiommu.refused",
    "noiommu.bind",
    "noiommu.refused_bound",
    "noiommu.open",
    "noiommu.bar0",
    "noiommu.id",
    "noiommu.factorial",
    "noiommu.dma.roundtrip",
    "noiommu.platform",
    "noiommu.unbind",
];

/// The MSI-X checks (e1000e), always required.
const MSIX_CHECKS: &[&str] =
    &["msix.discover", "msix.bind", "msix.open", "msix.delivered", "msix.disable", "msix.unbind"];

/// The operator scripts copied into the guest.
const SCRIPTS: &[&str] = &["vfio-bind.sh", "vfio-unbind.sh", "hugepages.sh"];

/// The operator-script checks (`cli/tests/guest-scripts.sh`), always required.
const SCRIPT_CHECKS: &[&str] =
    &["script.bind", "script.rebind", "script.unbind", "script.refuse_noiommu", "script.hugepages"];

/// The per-backend checks that must pass (prefixed with `container.` / `iommufd.`).
const BACKEND_CHECKS: &[&str] = &[
    "open",
    "bar0.mmap",
    "id",
    "liveness",
    "factorial",
    "bus_master",
    "msi.enable",
    "dma.roundtrip",
    "msi.delivered",
    "msi.disable",
    "dma.blocked",
    "reset",
];

/// The virtual Neuron device checks (`tests/guest-neuron.sh`), always required.
const NEURON_CHECKS: &[&str] = &[
    "neuron.ls",
    "neuron.bind",
    "neuron.info",
    "neuron.csr_read",
    "neuron.nq_dump",
    "neuron.dma_bench",
    "neuron.container.run_1nc",
    "neuron.container.run_2nc",
    "neuron.iommufd.run_1nc",
    "neuron.iommufd.run_2nc",
    "neuron.irq_poll",
    "neuron.fault",
    "neuron.shared.two_processes",
    "neuron.shared.ls_lists_processes",
    "neuron.shared.held_core_refused",
    "neuron.shared.killed_core_taken",
    "neuron.shared.syscalls_per_execute",
    "neuron.shared.broker_restart_adopted",
    "neuron.shared.broker_restart_held",
    "neuron.shared.broker_restart_free_core",
    "neuron.shared.broker_restart_client_exact",
    "neuron.shared.broker_restart_serves",
];

/// The served arch and the fault the host injects while the guest's model is loaded, with
/// the status the guest must report (`run --sim-fault fp-nan@nc0:act` in-process gives the same).
const VDEV_ARCH: &str = "sunda";
const VDEV_FAULT: &str = "fp-nan@nc0:act";
/// What the guest prints once its model is loaded (`run --pause-before-exec`).
const PAUSE_MARKER: &str = "run: loaded, waiting for a line on stdin";

/// Send one line to sim-serve's control socket; its reply.
fn control(path: &Path, line: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    writeln!(s, "{line}")?;
    let mut reply = String::new();
    std::io::BufReader::new(s).read_line(&mut reply)?;
    Ok(reply.trim_end().to_string())
}

/// One line per guest check, `ok|FAIL|skip name[: detail]` (details cut to `width` characters).
fn check_table(log: &str, width: usize) -> String {
    let mut out = String::new();
    for l in log.lines() {
        let Some(rest) = l.strip_prefix("VFIO-CHECK ") else { continue };
        let (status, rest) = rest.split_once(' ').unwrap_or((rest, ""));
        let (name, detail) = rest.split_once(": ").unwrap_or((rest, ""));
        let detail: String = detail.trim().chars().take(width).collect();
        out.push_str(&format!("  {status:<4} {name:<24} {detail}\n"));
    }
    out
}

#[test]
fn check_table_lists_every_check() {
    let log = "noise\nVFIO-CHECK ok env: Support { a }\nVFIO-CHECK skip noiommu: off\nVFIO-CHECK FAIL x.y: bad: worse\nVFIO-RESULT FAIL\n";
    let t = check_table(log, 5);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("  ok   env") && lines[0].ends_with("Suppo"), "{t}");
    assert!(lines[1].starts_with("  skip noiommu") && lines[1].ends_with("off"), "{t}");
    assert!(lines[2].starts_with("  FAIL x.y") && lines[2].ends_with("bad: "), "{t}");
}

#[test]
fn kernel_config_detection() {
    assert!(config_has_iommufd("CONFIG_VFIO=m\nCONFIG_VFIO_DEVICE_CDEV=y\nCONFIG_IOMMUFD=m\n"));
    assert!(config_has_iommufd("CONFIG_IOMMUFD=y\nCONFIG_VFIO_DEVICE_CDEV=y\n"));
    assert!(!config_has_iommufd("CONFIG_IOMMUFD_DRIVER=y\nCONFIG_VFIO_DEVICE_CDEV=y\n"));
    assert!(!config_has_iommufd("# CONFIG_IOMMUFD is not set\nCONFIG_VFIO_CONTAINER=y\n"));
    assert!(!config_has_iommufd("CONFIG_IOMMUFD=m\n# CONFIG_VFIO_DEVICE_CDEV is not set\n"));
    assert!(!config_has_iommufd(""));
    assert!(config_has_noiommu("CONFIG_VFIO=m\nCONFIG_VFIO_NOIOMMU=y\n"));
    assert!(!config_has_noiommu("# CONFIG_VFIO_NOIOMMU is not set\n"));
    assert!(!config_has_noiommu(""));
}

#[test]
fn vfio_and_the_virtual_neuron_device_in_qemu() {
    let cache = std::env::var_os("NEURON_VFIO_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/neuron-vfio"));
    let kdir = cache.join("kernel");
    let Some(qemu) = find_qemu(&cache) else { return unavailable("no QEMU (qemu-system-x86_64) found") };
    if which("busybox").is_none() {
        return unavailable("busybox not found");
    }
    let kernel = [kdir.join("vmlinux"), kdir.join("vmlinuz")].into_iter().find(|p| p.is_file());
    let Some(kernel) = kernel else { return unavailable(&format!("no kernel in {}", kdir.display())) };

    let config = std::fs::read_to_string(kdir.join("config")).unwrap_or_default();
    // CI: every path must run; no check may be skipped.
    let require_all = env_is_1("NEURON_VFIO_REQUIRE_QEMU");
    let require_iommufd = require_all || config_has_iommufd(&config) || env_is_1("NEURON_VFIO_REQUIRE_IOMMUFD");
    let config_noiommu = require_all || config_has_noiommu(&config) || env_is_1("NEURON_VFIO_REQUIRE_NOIOMMU");
    let source = std::fs::read_to_string(kdir.join("source")).unwrap_or_default();
    let source = source.lines().map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "));
    let head = format!(
        "QEMU VFIO test: {}; kernel {} ({}); iommufd path {}; no-IOMMU mode {}{}\n",
        qemu.display(),
        std::fs::read_to_string(kdir.join("version")).unwrap_or_default().trim(),
        source.collect::<Vec<_>>().join(", "),
        if require_iommufd { "required" } else { "optional (kernel without CONFIG_IOMMUFD/VFIO_DEVICE_CDEV)" },
        if config_noiommu { "required" } else { "required if the guest reports it" },
        if require_all { "; no check may be skipped (NEURON_VFIO_REQUIRE_QEMU=1)" } else { "" }
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), head.as_bytes());

    let vfio_guest = build_vfio_guest();
    let started = Instant::now();
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu-vfio");
    std::fs::create_dir_all(&work).unwrap();
    let boot = work.join("50-vfio-guest");
    std::fs::write(
        &boot,
        "#!/bin/sh\n\
         echo 128 > /proc/sys/vm/nr_hugepages\n\
         echo \"VFIO-INFO hugepages $(cat /proc/sys/vm/nr_hugepages) memlock $(ulimit -l)\"\n\
         /bin/vfio-guest all\n\
         echo \"VFIO-EXIT $?\"\n",
    )
    .unwrap();
    // The no-IOMMU edu: vfio must create noiommu groups when vfio-pci binds it.
    let modconf = work.join("vfio.conf");
    std::fs::write(&modconf, "options vfio enable_unsafe_noiommu_mode=1\n").unwrap();
    let Some(bash) = which("bash") else { return unavailable("bash not found") };
    let Some(strace) = which("strace") else { return unavailable("strace not found") };
    let scripts_boot = work.join("60-scripts");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-scripts.sh"), &scripts_boot).unwrap();
    // The virtual Neuron device: its boot script, the example models and their expected outputs.
    let neuron_boot = work.join("40-neuron");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-neuron.sh"), &neuron_boot).unwrap();
    let vdev_env = work.join("neuron-vdev.env");
    std::fs::write(&vdev_env, format!("ARCH={VDEV_ARCH}\n")).unwrap();
    let examples = repo().join("examples");
    let input = std::fs::read(examples.join("input_32xf32.bin")).unwrap();
    let expected_2nc: Vec<u8> = input
        .chunks_exact(4)
        .flat_map(|c| (2.0 * f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
        .collect();
    let expected_2nc_path = work.join("expected_2nc.bin");
    std::fs::write(&expected_2nc_path, expected_2nc).unwrap();
    let guest_examples = [
        (examples.join("allreduce_1nc.neff"), "allreduce_1nc.neff"),
        (examples.join("allreduce_2nc.neff"), "allreduce_2nc.neff"),
        (examples.join("input_32xf32.bin"), "input_32xf32.bin"),
        (expected_2nc_path.clone(), "expected_2nc.bin"),
    ];
    // Debug info is most of the binary's size; the guest loads its initramfs slower per MiB
    // than anything else it does, so pack a copy without it (when binutils' strip is here).
    let neuron_bin = work.join("neuron-vfio");
    std::fs::copy(env!("CARGO_BIN_EXE_neuron-vfio"), &neuron_bin).unwrap();
    if let Some(strip) = which("strip") {
        let st = Command::new(strip).arg("--strip-debug").arg(&neuron_bin).status().expect("run strip");
        assert!(st.success(), "strip --strip-debug {} failed", neuron_bin.display());
    }
    let vdev_sock = work.join("neuron0.sock");
    let vdev_ctl = work.join("neuron0-control.sock");
    for p in [&vdev_sock, &vdev_ctl] {
        let _ = std::fs::remove_file(p);
    }
    let mut server = Command::new(env!("CARGO_BIN_EXE_neuron-vfio"))
        .args(["sim-serve", "--arch", VDEV_ARCH, "--socket"])
        .arg(&vdev_sock)
        .arg("--control")
        .arg(&vdev_ctl)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start neuron-vfio sim-serve");
    wait_serving(&mut server, "sim-serve", || vdev_sock.exists() && vdev_ctl.exists());
    let vdev_args = Command::new("sh")
        .arg(repo().join("scripts/qemu/vdev-args.sh"))
        .args(["-m", "1024", "-n"])
        .arg(&vdev_sock)
        .output()
        .expect("run vdev-args.sh");
    assert!(vdev_args.status.success(), "vdev-args.sh: {}", String::from_utf8_lossy(&vdev_args.stderr));
    let vdev_args: Vec<String> = String::from_utf8_lossy(&vdev_args.stdout).lines().map(str::to_string).collect();

    let initrd = work.join("initramfs.cpio");
    let mk =
        Command::new("bash")
            .arg(repo().join("scripts/image/mkinitramfs.sh"))
            .args(["-k", kdir.to_str().unwrap(), "-o", initrd.to_str().unwrap()])
            .args(["-m", "irqbypass", "-m", "vfio", "-m", "vfio_iommu_type1", "-m", "vfio-pci", "-m", "iommufd"])
            .args(["-b", vfio_guest.to_str().unwrap(), "-s", boot.to_str().unwrap()])
            .args(["-b", neuron_bin.to_str().unwrap(), "-s", neuron_boot.to_str().unwrap()])
            // Syscalls per execute of a process sharing the device (guest-neuron.sh).
            .args(["-b", &strace.display().to_string()])
            .args(["-f", &format!("{}:/etc/neuron-vdev.env", vdev_env.display())])
            .args(guest_examples.iter().flat_map(|(src, name)| {
                ["-f".to_string(), format!("{}:/opt/neuron-vfio/examples/{name}", src.display())]
            }))
            .args(["-f", &format!("{}:/etc/modprobe.d/vfio.conf", modconf.display())])
            // The operator scripts, run by a second boot script after vfio-guest.
            .args(["-b", &bash.display().to_string(), "-s", scripts_boot.to_str().unwrap()])
            .args(SCRIPTS.iter().flat_map(|n| {
                ["-f".to_string(), format!("{}:/opt/neuron-vfio/scripts/{n}", repo().join("scripts").join(n).display())]
            }))
            .output()
            .expect("run mkinitramfs.sh");
    assert!(mk.status.success(), "mkinitramfs failed:\n{}", String::from_utf8_lossy(&mk.stderr));

    let accel = std::env::var("NEURON_VFIO_QEMU_ACCEL").unwrap_or_else(|_| "tcg".into());
    let mut child = Command::new(&qemu)
        .env("NEURON_VFIO_CACHE", &cache)
        .args([
            "-machine",
            &format!("q35,accel={accel},kernel-irqchip=split"),
            "-cpu",
            "max",
            "-m",
            "1024",
            "-smp",
            "2",
        ])
        // edu alone behind a PCIe root port: a secondary bus reset then gives it a reset method.
        .args(["-device", "intel-iommu,intremap=on,caching-mode=on"])
        .args(["-device", "pcie-root-port,id=rp0,chassis=1,slot=1", "-device", "edu,bus=rp0"])
        // A second edu that no IOMMU translates: an expander root bus that bypasses the
        // IOMMU (the DMAR tables then leave it out of every scope), a root port, and an edu
        // whose DMA mask covers all guest RAM (it is given physical addresses).
        .args(["-device", "pxb-pcie,id=pxb1,bus_nr=0x80,bus=pcie.0,bypass_iommu=true"])
        .args(["-device", "pcie-root-port,id=rp1,bus=pxb1,chassis=2,slot=2"])
        .args(["-device", "edu,bus=rp1,dma_mask=0xffffffff"])
        // An MSI-X capable function (no driver for it in the initramfs): the MSI-X check.
        .args(["-device", "pcie-root-port,id=rp2,bus=pcie.0,chassis=3,slot=3", "-device", "e1000e,bus=rp2"])
        // The virtual Neuron device (shareable guest RAM + vfio-user-pci; the IOMMU is above).
        .args(&vdev_args)
        .args(["-kernel", kernel.to_str().unwrap(), "-initrd", initrd.to_str().unwrap()])
        .args([
            "-append",
            "console=ttyS0 intel_iommu=on iommu=nopt vfio.enable_unsafe_noiommu_mode=1 panic=-1 quiet loglevel=4",
        ])
        .args(["-nographic", "-no-reboot", "-nic", "none", "-serial", "stdio", "-monitor", "none"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu");
    let out = child.stdout.take().unwrap();
    let mut serial_in = child.stdin.take().unwrap();
    let ctl = vdev_ctl.clone();
    // The serial stream, read live: when the guest's model is loaded, inject the fault through
    // the control socket, then let the guest continue with a line on its console.
    let reader = std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(out);
        let mut buf = Vec::new();
        let mut line = Vec::new();
        let mut injected = String::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            buf.extend_from_slice(&line);
            if injected.is_empty() && String::from_utf8_lossy(&line).contains(PAUSE_MARKER) {
                injected = match control(&ctl, VDEV_FAULT) {
                    Ok(r) => r,
                    Err(e) => format!("error: {e}"),
                };
                let _ = serial_in.write_all(b"\n").and_then(|()| serial_in.flush());
            }
        }
        (String::from_utf8_lossy(&buf).into_owned(), injected)
    });
    let status = wait_or_kill(&mut child, Instant::now() + TIMEOUT, Duration::from_millis(100));
    let (raw, injected) = reader.join().unwrap_or_default();
    // sim-serve ends when QEMU disconnects.
    let server_status = wait_or_kill(&mut server, Instant::now() + Duration::from_secs(10), Duration::from_millis(50));
    let mut server_err = String::new();
    if let Some(mut e) = server.stderr.take() {
        let _ = e.read_to_string(&mut server_err);
    }
    // The first guest line may follow firmware output without a newline: start each line at
    // its marker.
    let log: String = raw.lines().map(|l| format!("{}\n", l.find("VFIO-").map_or(l, |i| &l[i..]))).collect();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let wall = started.elapsed();
    // Kept for reading after the run (the panic message carries it too on failure).
    let _ = std::fs::write(work.join("serial.log"), &raw);
    let fail = |why: &str| -> ! {
        panic!("{why}\n----- guest serial log -----\n{log}\n----- qemu stderr -----\n{err}\n----- sim-serve stderr -----\n{server_err}")
    };
    if status.is_none() {
        fail(&format!("QEMU timed out after {TIMEOUT:?} and was killed"));
    }
    // Written to stderr directly (not eprintln!) so the figures show even when the test
    // harness captures output: every check with its result, then the figures.
    let mut summary = format!(
        "QEMU VFIO test: guest checks ({} lines):\n",
        log.lines().filter(|l| l.starts_with("VFIO-CHECK ")).count()
    );
    summary.push_str(&check_table(&log, 100));
    for l in log
        .lines()
        .filter(|l| l.starts_with("VFIO-BENCH") || l.starts_with("VFIO-INFO") || l.starts_with("VFIO-RESULT"))
    {
        summary.push_str(l.trim_end());
        summary.push('\n');
    }
    let _ = std::io::Write::write_all(&mut std::io::stderr(), summary.as_bytes());
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("VFIO-CHECK FAIL")).collect();
    if !failed.is_empty() {
        fail(&format!("guest checks failed:\n{}", failed.join("\n")));
    }
    if !log.lines().any(|l| l.trim() == "VFIO-RESULT PASS") {
        fail("the guest did not report VFIO-RESULT PASS");
    }
    let skipped: Vec<&str> = log.lines().filter(|l| l.starts_with("VFIO-CHECK skip")).collect();
    if require_all && !skipped.is_empty() {
        fail(&format!("NEURON_VFIO_REQUIRE_QEMU=1: no check may be skipped, but:\n{}", skipped.join("\n")));
    }
    let ok = |name: &str| log.lines().any(|l| l.starts_with(&format!("VFIO-CHECK ok {name}:")));
    if !injected.starts_with("ok ") {
        fail(&format!("the fault was not injected through the control socket: `{injected}`"));
    }
    if server_status.is_none_or(|s| !s.success()) {
        fail(&format!("sim-serve did not end cleanly when QEMU disconnected: {server_status:?}"));
    }
    for name in ["env", "discover", "bind", "group_viable", "unbind", "bench.unbind"]
        .iter()
        .chain(MSIX_CHECKS)
        .chain(SCRIPT_CHECKS)
        .chain(NEURON_CHECKS)
    {
        if !ok(name) {
            fail(&format!("check {name} did not pass"));
        }
    }
    let mut backends = vec!["container"];
    if require_iommufd {
        backends.push("iommufd");
        if let Some(l) = log.lines().find(|l| l.starts_with("VFIO-CHECK skip iommufd")) {
            fail(&format!("the iommufd path is required (kernel config or NEURON_VFIO_REQUIRE_IOMMUFD=1) but the guest skipped it: {l}"));
        }
    } else if !ok("iommufd.dma.roundtrip") && !log.lines().any(|l| l.starts_with("VFIO-CHECK skip iommufd.open")) {
        // The iommufd path runs when the kernel has it; otherwise it must say why it was skipped.
        fail("the iommufd path neither passed nor reported why it is unavailable");
    }
    for b in &backends {
        for c in BACKEND_CHECKS {
            if !ok(&format!("{b}.{c}")) {
                fail(&format!("check {b}.{c} did not pass"));
            }
        }
        if !log.lines().any(|l| l.starts_with(&format!("VFIO-CHECK ok {b}.reset: VFIO_DEVICE_RESET done"))) {
            fail(&format!("VFIO_DEVICE_RESET was not exercised through {b}"));
        }
        if !log.lines().any(|l| l.starts_with(&format!("VFIO-BENCH backend={b} "))) {
            fail(&format!("no benchmark figures for {b}"));
        }
    }
    if !log.lines().any(|l| l.starts_with("VFIO-BENCH")) {
        fail("no benchmark figures");
    }
    // No-IOMMU: the refusal always; the rest whenever the kernel has the mode.
    let noiommu_reported = log.lines().any(|l| l.trim() == "VFIO-INFO noiommu supported");
    let require_noiommu = config_noiommu || noiommu_reported;
    for name in ["noiommu.discover", "noiommu.refused"] {
        if !ok(name) {
            fail(&format!("check {name} did not pass"));
        }
    }
    if require_noiommu {
        if let Some(l) = log.lines().find(|l| l.starts_with("VFIO-CHECK skip noiommu")) {
            fail(&format!("no-IOMMU mode is required (kernel config, guest report or NEURON_VFIO_REQUIRE_NOIOMMU=1) but the guest skipped it: {l}"));
        }
        for name in NOIOMMU_CHECKS {
            if !ok(name) {
                fail(&format!("check {name} did not pass"));
            }
        }
    } else if !ok("noiommu.unavailable") || !log.lines().any(|l| l.starts_with("VFIO-CHECK skip noiommu:")) {
        fail("no-IOMMU mode neither passed nor reported why it is unavailable");
    }
    let done = format!(
        "QEMU VFIO test: every guest check passed ({} ok, {} skipped; backends: {}; MSI-X; operator scripts; virtual Neuron device ({VDEV_ARCH}, fault {VDEV_FAULT} injected from the host); no-IOMMU mode {}); boot-to-poweroff wall {:.1}s\n",
        log.lines().filter(|l| l.starts_with("VFIO-CHECK ok ")).count(),
        skipped.len(),
        backends.join(", "),
        if require_noiommu { "checked" } else { "skipped: kernel without it" },
        wall.as_secs_f64()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), done.as_bytes());
}
