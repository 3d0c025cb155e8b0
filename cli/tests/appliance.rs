//! Builds the appliance (`scripts/appliance/build.sh`, docs/appliance.md) and boots it under
//! QEMU (TCG) with a virtual Neuron device: `neuron-vfio sim-serve` serves the simulator over
//! vfio-user (docs/virtual-device.md). The appliance's config names the served arch's PCI ids,
//! so its init starts the device broker, binds the device by those ids with the project's bind
//! code, lists it, runs both example models on it through VFIO and stops the broker. From the
//! serial console the test checks the JSON line of every step: the broker's start (before the
//! runs) and stop, the bind, the `ls` output, each model run's exact output values, and the
//! summary line; it prints the image size and the boot-to-poweroff time.
//!
//! Needs what cli/tests/qemu.rs needs (`scripts/qemu/setup.sh`: busybox-static, cpio, the guest
//! kernel, QEMU with vfio-user-pci) and libnrt.so in the same target dir (`cargo test
//! --workspace` builds it; alone: `cargo build -p capi` first). Without them the test prints a notice and passes, unless
//! NEURON_VFIO_REQUIRE_QEMU=1 (CI).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{find_qemu, wait_or_kill, wait_serving, which};

use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(180);
const ARCH: &str = "sunda";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unavailable(why: &str) {
    if std::env::var("NEURON_VFIO_REQUIRE_QEMU").as_deref() == Ok("1") {
        panic!("appliance QEMU test required (NEURON_VFIO_REQUIRE_QEMU=1) but unavailable: {why}; run scripts/qemu/setup.sh");
    }
    eprintln!("NOTICE: skipping the appliance QEMU test: {why} (run scripts/qemu/setup.sh; set NEURON_VFIO_REQUIRE_QEMU=1 to make this a failure)");
}

/// The appliance's JSON step lines from a serial log (a line may start after console noise).
fn steps(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| l.find("{\"step\":").and_then(|i| serde_json::from_str(l[i..].trim_end()).ok()))
        .collect()
}

#[test]
fn steps_are_found_after_console_noise() {
    let log = "SeaBIOS{\"step\":\"ls\",\"ok\":true}\n[ 1.0] kernel line\n{\"step\":\"summary\",\"ok\":false,\"failed\":1}\r\n{\"step\":broken\n";
    let s = steps(log);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0]["step"], "ls");
    assert_eq!(s[1]["failed"], 1);
}

#[test]
fn build_refuses_a_bad_config_before_building() {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("appliance-bad-config");
    std::fs::create_dir_all(&work).unwrap();
    for (conf, why) in [
        ("AFTER=reboot\n", "AFTER=reboot: expected poweroff or stay"),
        ("DEVICE=gpu0\n", "DEVICE=gpu0: expected vfio or sim"),
        ("HUGEPAGES=lots\n", "HUGEPAGES=lots: expected a number"),
        ("PCI_IDS=\"1d0f:7164 8086\"\n", "PCI_IDS: bad id 8086"),
        ("BROKER_SOCKET=run/b.sock\n", "BROKER_SOCKET=run/b.sock: expected an absolute path"),
        ("BROKER_SOCKET=\"/run/a b.sock\"\n", "BROKER_SOCKET=/run/a b.sock: no spaces or quotes"),
        ("MODEL1=examples/no-such.neff\n", "MODEL1: no file"),
        ("MODEL1=examples/allreduce_1nc.neff\nMODEL1_INPUTS=input\n", "MODEL1_INPUTS: bad NAME=FILE `input`"),
    ] {
        let p = work.join("bad.conf");
        std::fs::write(&p, conf).unwrap();
        let out = Command::new("bash")
            .arg(repo().join("scripts/appliance/build.sh"))
            .arg("-o")
            .arg(work.join("image"))
            .arg("-c")
            .arg(&p)
            .arg("-b")
            .arg(env!("CARGO_BIN_EXE_neuron-vfio"))
            .arg("-l")
            .arg(env!("CARGO_BIN_EXE_neuron-vfio"))
            .output()
            .expect("run build.sh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{conf}: {err}");
        assert!(!work.join("image/initramfs").exists(), "{conf}: built anyway");
    }
}

/// libnrt.so of this build: `cargo test --workspace` builds it into deps/ (a `cargo build`
/// also copies it next to the binary, where an older copy may lie: deps/ first).
fn libnrt() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_neuron-vfio")).parent()?;
    [dir.join("deps/libnrt.so"), dir.join("libnrt.so")].into_iter().find(|p| p.is_file())
}

#[test]
fn the_appliance_boots_binds_lists_and_runs_its_models() {
    let cache = std::env::var_os("NEURON_VFIO_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/neuron-vfio"));
    let kdir = cache.join("kernel");
    let Some(qemu) = find_qemu(&cache) else { return unavailable("no QEMU (qemu-system-x86_64) found") };
    for tool in ["busybox", "cpio", "bash"] {
        if which(tool).is_none() {
            return unavailable(&format!("{tool} not found"));
        }
    }
    if !kdir.join("version").is_file() {
        return unavailable(&format!("no kernel in {}", kdir.display()));
    }
    let Some(lib) = libnrt() else { return unavailable("no libnrt.so next to neuron-vfio (cargo build -p capi)") };

    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("appliance");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    // The served device's ids (csr-maps' sunda) select it; the second model's exact output is
    // twice its input (an all-reduce over two NCs that each hold the input).
    let examples = repo().join("examples");
    let input = std::fs::read(examples.join("input_32xf32.bin")).unwrap();
    let floats =
        |b: &[u8]| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let in_vals = floats(&input);
    let twice: Vec<f32> = in_vals.iter().map(|v| 2.0 * v).collect();
    let twice_path = work.join("expected_2nc.bin");
    std::fs::write(&twice_path, twice.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let arch = &csr_maps::SUNDA;
    let ids: Vec<String> = arch.pci_devices.iter().map(|d| format!("{:04x}:{d:04x}", arch.pci_vendor)).collect();
    let conf = work.join("appliance.conf");
    std::fs::write(
        &conf,
        format!(
            "PCI_IDS=\"{}\"\nHUGEPAGES=16\nDEVICE=vfio\nALLOW_MODELED=1\nEXEC_TIMEOUT=60\nAFTER=poweroff\n\
             MODEL1={ex}/allreduce_1nc.neff\nMODEL1_INPUTS=\"input={ex}/input_32xf32.bin\"\nMODEL1_EXPECT=\"output={ex}/input_32xf32.bin\"\n\
             MODEL2={ex}/allreduce_2nc.neff\nMODEL2_INPUTS=\"input={ex}/input_32xf32.bin\"\nMODEL2_EXPECT=\"output={}\"\n\
             KERNEL_DIR={}\n",
            ids.join(" "),
            twice_path.display(),
            kdir.display(),
            ex = examples.display(),
        ),
    )
    .unwrap();
    let image = work.join("image");
    let built = Instant::now();
    let b = Command::new("bash")
        .arg(repo().join("scripts/appliance/build.sh"))
        .arg("-o")
        .arg(&image)
        .arg("-c")
        .arg(&conf)
        .arg("-b")
        .arg(env!("CARGO_BIN_EXE_neuron-vfio"))
        .arg("-l")
        .arg(&lib)
        .output()
        .expect("run build.sh");
    let build_err = String::from_utf8_lossy(&b.stderr).into_owned();
    assert!(b.status.success(), "build.sh failed:\n{build_err}");
    let build_time = built.elapsed();
    let size = |n: &str| std::fs::metadata(image.join(n)).map(|m| m.len()).unwrap_or(0);
    let kernel = if image.join("vmlinux").is_file() { image.join("vmlinux") } else { image.join("kernel") };
    let cmdline = std::fs::read_to_string(image.join("cmdline")).unwrap();

    let sock = work.join("neuron0.sock");
    let mut server = Command::new(env!("CARGO_BIN_EXE_neuron-vfio"))
        .args(["sim-serve", "--arch", ARCH, "--socket"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start neuron-vfio sim-serve");
    wait_serving(&mut server, "sim-serve", || sock.exists());
    let vdev = Command::new("sh")
        .arg(repo().join("scripts/qemu/vdev-args.sh"))
        .args(["-m", "512"])
        .arg(&sock)
        .output()
        .expect("run vdev-args.sh");
    assert!(vdev.status.success(), "vdev-args.sh: {}", String::from_utf8_lossy(&vdev.stderr));
    let vdev: Vec<String> = String::from_utf8_lossy(&vdev.stdout).lines().map(str::to_string).collect();

    let started = Instant::now();
    let accel = std::env::var("NEURON_VFIO_QEMU_ACCEL").unwrap_or_else(|_| "tcg".into());
    let mut child = Command::new(&qemu)
        .env("NEURON_VFIO_CACHE", &cache)
        .args(["-machine", &format!("q35,accel={accel},kernel-irqchip=split"), "-cpu", "max", "-m", "512", "-smp", "2"])
        .args(&vdev)
        .arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(image.join("initramfs"))
        .args(["-append", cmdline.trim()])
        .args(["-nographic", "-no-reboot", "-nic", "none", "-serial", "stdio", "-monitor", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    let status = wait_or_kill(&mut child, Instant::now() + TIMEOUT, Duration::from_millis(50));
    let wall = started.elapsed();
    let log = reader.join().unwrap_or_default();
    wait_or_kill(&mut server, Instant::now() + Duration::from_secs(10), Duration::from_millis(50));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = std::fs::write(work.join("serial.log"), &log);
    let fail = |why: &str| -> ! { panic!("{why}\n----- serial log -----\n{log}\n----- qemu stderr -----\n{err}") };
    if status.is_none() {
        fail(&format!("QEMU timed out after {TIMEOUT:?} and was killed"));
    }
    let s = steps(&log);
    let by = |name: &str| s.iter().filter(|v| v["step"] == name).collect::<Vec<_>>();
    let one = |name: &str| -> &Value {
        match by(name).as_slice() {
            [v] => v,
            other => fail(&format!("expected one `{name}` step line, found {}", other.len())),
        }
    };
    for v in &s {
        if v["ok"] != true {
            fail(&format!("step failed: {v}"));
        }
    }
    // The bind: the served device, by the configured ids, onto vfio-pci.
    let bind = one("bind");
    let bound = bind["devices"].as_array().cloned().unwrap_or_default();
    if bound.len() != 1 || bound[0]["driver"] != "vfio-pci" || bound[0]["changed"] != true {
        fail(&format!("bind did not move exactly the served device to vfio-pci: {bind}"));
    }
    let bdf = bound[0]["bdf"].as_str().unwrap_or_default().to_string();
    // ls: that device, its arch and id, on vfio-pci.
    let ls = one("ls");
    let listed = ls["devices"].as_array().cloned().unwrap_or_default();
    let want_id = format!("{:04x}:{:04x}", arch.pci_vendor, arch.pci_devices[0]);
    if !(listed.len() == 1
        && listed[0]["bdf"] == bdf.as_str()
        && listed[0]["arch"] == ARCH
        && listed[0]["pci_id"] == want_id.as_str()
        && listed[0]["driver"] == "vfio-pci"
        && listed[0]["nc_count"] == arch.counts.ncs)
    {
        fail(&format!("ls does not show {bdf} as {ARCH} ({want_id}) on vfio-pci: {ls}"));
    }
    // Both models on that device, with their exact output values.
    let runs = by("run");
    let want: [(&str, &[f32]); 2] = [("allreduce_1nc.neff", &in_vals), ("allreduce_2nc.neff", &twice)];
    if runs.len() != want.len() {
        fail(&format!("expected {} run lines, found {}", want.len(), runs.len()));
    }
    for (r, (model, vals)) in runs.iter().zip(want) {
        let got: Option<Vec<f32>> = r["result"]["outputs"]["output"]["values"]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_f64().map(|f| f as f32)).collect());
        if r["model"] != model
            || r["device"] != bdf.as_str()
            || r["result"]["status"] != "NRT_SUCCESS"
            || r["expected"]["output"] != true
            || got.as_deref() != Some(vals)
        {
            fail(&format!("run of {model} on {bdf}: wrong status or output: {r}"));
        }
    }
    // The device broker: started before the workload on root's default socket (the config
    // sets none), persistent, and stopped cleanly before the power-off.
    let broker = one("broker");
    if broker["socket"] != "/tmp/neuron-vfio-0/broker.sock"
        || broker["pid"].as_u64().is_none_or(|p| p <= 1)
        || broker["persist"] != true
    {
        fail(&format!("broker line: {broker}"));
    }
    let at = |name: &str| s.iter().position(|v| v["step"] == name).unwrap_or(usize::MAX);
    if at("broker") > at("run") {
        fail("the broker started after the first run");
    }
    let stop = one("broker_stop");
    if stop["pid"] != broker["pid"] || stop["socket_removed"] != true || at("broker_stop") < at("run") {
        fail(&format!("broker_stop line: {stop}"));
    }
    let sum = one("summary");
    let n_steps = s.iter().filter(|v| v["step"] != "summary").count();
    if sum["ok"] != true
        || sum["failed"] != 0
        || sum["steps"] != n_steps
        || sum["runs"] != 2
        || sum["exact"] != 2
        || sum["devices"] != 1
        || sum["after"] != "poweroff"
    {
        fail(&format!("summary line: {sum} ({n_steps} step lines)"));
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let report = format!(
        "appliance QEMU test: {} steps ok on {bdf} ({ARCH}); image: kernel {:.1} MiB (vmlinux {:.1} MiB), initramfs {:.1} MiB; build {:.1}s, boot-to-poweroff wall {:.1}s (guest steps {}s)\n{}",
        n_steps,
        mib(size("kernel")),
        mib(size("vmlinux")),
        mib(size("initramfs")),
        build_time.as_secs_f64(),
        wall.as_secs_f64(),
        sum["seconds"],
        build_err.lines().filter(|l| l.starts_with("appliance: ")).collect::<Vec<_>>().join("\n"),
    ) + "\n";
    let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
}
