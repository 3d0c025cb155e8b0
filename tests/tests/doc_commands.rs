//! Every command the README and docs/*.md show runs as written, with this build's binaries on
//! `PATH` (what `cargo install --path cli` installs), and prints what the docs say it prints.
//!
//! Each ```` ```sh ```` block of a doc is one bash session (a command's `export` holds for the
//! next, `&` and `wait` work), run in a scratch tree whose top-level entries link to the
//! repository's (`examples/…`, `scripts/…` resolve; files a command writes land in the
//! scratch tree) and whose `target/debug` and `target/release` link to this build's profile
//! folder, with a private `HOME`, `XDG_RUNTIME_DIR` (so its own broker) and state folder.
//! A command runs unless [`CLASSES`] says otherwise, with a reason: it builds or installs
//! what the test already has, needs hardware, root or another host, takes minutes (then a
//! short form runs, or it is only checked), or is a service (run for a few seconds). A
//! command that is not run still has to parse (`bash -n`) and name files that exist.
//! Expected output is the docs' own: `# → TEXT` after a command and `#   TEXT` lines below
//! it (tests/support/doc_blocks.rs), matched with snapbox (`…` is `[..]`).
//!
//! Needs the workspace's binaries built (`cargo build -p cli -p k8s -p capi`, or `cargo test
//! --workspace`, which builds them first).

#[path = "../support/doc_blocks.rs"]
mod doc_blocks;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use doc_blocks::{blocks, commands, is_shell, looks_like_commands, DocCommand};

/// What the test does with a documented command.
#[derive(Debug, Clone, Copy)]
enum Class {
    /// Runs as written and must exit non-zero: the doc shows it failing.
    Fails,
    /// Not run: it builds or installs what the test already has (this build's binaries on
    /// PATH and at target/debug, target/release).
    Build(&'static str),
    /// Not run: it needs a real Neuron device, root on the host, a VM or another host.
    Hardware(&'static str),
    /// Not run: it takes minutes; the reason says what runs it instead.
    Long(&'static str),
    /// Runs in the short form `with` instead (the reason says why).
    Short { with: &'static str, why: &'static str },
    /// `cargo run [--release] -p cli -- ARGS`: runs `neuron-vfio ARGS` (this build's, what
    /// cargo would run).
    CargoRun,
    /// A service or live view: runs for `secs` seconds and must still be running then (or
    /// have exited 0), its output as the doc says.
    Service { secs: u64, why: &'static str },
}

/// The commands that do not simply run, by doc file and the start of the command (written on
/// one line, spaces collapsed). Every entry must match a command of its file.
const CLASSES: &[(&str, &str, Class)] = &[
    // README.md
    ("README.md", "cargo run --release -p cli --", Class::CargoRun),
    (
        "README.md",
        "scripts/test-all.sh",
        Class::Long("CI itself (.ci/run runs it); tests/tests/readme.rs checks it is"),
    ),
    ("README.md", "cargo install --path cli", Class::Build("installs the binaries this test puts on PATH")),
    ("README.md", "neuron-vfio bind 0000:10:1c.0", Class::Hardware("a Neuron device at that PCI address, as root")),
    (
        "README.md",
        "neuron-vfio bench neff-load --sizes 64M,256M,1G",
        Class::Short {
            with: "neuron-vfio bench neff-load --sizes 1M,2M",
            why: "1 GiB of weights takes minutes in a debug build",
        },
    ),
    (
        "README.md",
        "neuron-vfio bench large-var --size 8G",
        Class::Short {
            with: "neuron-vfio bench large-var --size 16M",
            why: "8 GiB of device memory is the point, and minutes",
        },
    ),
    (
        "README.md",
        "neuron-vfio bench exec",
        Class::Short {
            with: "neuron-vfio bench exec --iters 200",
            why: "20000 executes per path take a minute in a debug build",
        },
    ),
    (
        "README.md",
        "neuron-vfio bench scale",
        Class::Short {
            with: "neuron-vfio bench scale --devices 2 --seconds 0.2 --threads 1",
            why: "16 devices × 2 s per thread count",
        },
    ),
    (
        "README.md",
        "neuron-vfio run examples/allreduce_1nc.neff --input input=examples/input_32xf32.bin --sim-fault",
        Class::Fails,
    ),
    ("README.md", "neuron-vfio monitor --period-ms 1000", Class::Service { secs: 3, why: "reports until interrupted" }),
    (
        "README.md",
        "neuron-monitor -c examples/monitor.conf --prometheus",
        Class::Service { secs: 3, why: "reports and serves :8000 until interrupted" },
    ),
    ("README.md", "neuron-vfio top", Class::Service { secs: 2, why: "a live view until interrupted" }),
    (
        "README.md",
        "neuron-vfio --device 0000:10:1c.0 k8s-device-plugin",
        Class::Hardware(
            "a Neuron device at that PCI address and a kubelet (docs/kubernetes.md's test runs the plugin)",
        ),
    ),
    (
        "README.md",
        "scripts/k8s/build-bundle.sh --out /tmp/bundle",
        Class::Build("a release build of the binaries (k8s/tests builds bundles from this build)"),
    ),
    (
        "README.md",
        "cargo build --release -p capi",
        Class::Build("target/release here is this build's profile folder, which has libnrt.so"),
    ),
    (
        "README.md",
        "scripts/install.sh --prefix /opt/aws/neuron",
        Class::Build("a release build installed as root; tests/tests/sdk_install.rs installs into a scratch prefix"),
    ),
    (
        "README.md",
        "python3 -m venv ~/nrtpy-venv",
        Class::Build("builds the nrtpy wheel (maturin, minutes); scripts/test-all.sh runs nrtpy's tests in a venv"),
    ),
    ("README.md", "~/nrtpy-venv/bin/python", Class::Build("needs the venv above; nrtpy/tests run the same load")),
    (
        "README.md",
        "neuron-vfio bench collectives --ranks 4 --sizes 64K,4M",
        Class::Long("needs libfabric; fabric's and cli's collectives tests run it (NEURON_VFIO_REQUIRE_FABRIC in CI)"),
    ),
    ("README.md", "scripts/appliance/build.sh", Class::Long("builds a kernel and initramfs; the appliance test does")),
    ("README.md", "scripts/appliance/boot.sh", Class::Hardware("QEMU with KVM; the appliance test boots it")),
    ("README.md", "scripts/dev/clean-room-ci.sh", Class::Long("CI in a fresh Debian root, 15–25 minutes, as root")),
    ("README.md", "RUSTDOCFLAGS=\"-D warnings\" cargo doc", Class::Build("the workspace's docs: minutes")),
    // docs/kmod-guest.md
    ("docs/kmod-guest.md", "scripts/qemu/setup.sh", Class::Build("CI's setup runs it (scripts/test-all.sh)")),
    (
        "docs/kmod-guest.md",
        "KMOD_DIR=/path/to/aws-neuron-driver",
        Class::Hardware(
            "the vendor kmod's GPL checkouts (never in the repository) and a QEMU guest per arch: a dev-time check",
        ),
    ),
    (
        "docs/kmod-guest.md",
        "scripts/dev/kmod-guest/regen-fixtures.sh",
        Class::Hardware("the traces of a kmod-guest run (KMOD_DIR)"),
    ),
    ("docs/kmod-guest.md", "cargo test -p hal --test kmod_guest", Class::Build("the workspace's tests, which CI runs")),
    // docs/hardware-safety.md
    ("docs/hardware-safety.md", "export NEURON_VFIO_ALLOW_MODELED=1", Class::Hardware("the opt-in for real hardware")),
    // docs/appliance.md
    (
        "docs/appliance.md",
        "scripts/appliance/build.sh",
        Class::Long("builds a kernel and initramfs; the appliance test does"),
    ),
    ("docs/appliance.md", "scripts/appliance/boot.sh", Class::Hardware("QEMU with KVM; the appliance test boots it")),
    // docs/collectives.md
    ("docs/collectives.md", "cargo install --path cli", Class::Build("installs the binaries this test puts on PATH")),
    (
        "docs/collectives.md",
        "NEURON_LOGICAL_NC_CONFIG=1 nccom-test allr -r 8 -b 8 -e 64M",
        Class::Short {
            with: "NEURON_LOGICAL_NC_CONFIG=1 nccom-test allr -r 8 -b 8 -e 64K -f 8 -c all_ones -d fp32",
            why: "64 MiB × 8 ranks takes a minute; the same command to 64 KiB",
        },
    ),
    (
        "docs/collectives.md",
        "nccom-test allr -r 4 -b 1M -e 64M",
        Class::Short {
            with: "nccom-test allr -r 4 -b 1M -e 2M -f 2 -c all_ones -d fp32 -t avg p90",
            why: "to 64 MiB takes a minute; the same command to 2 MiB",
        },
    ),
    (
        "docs/collectives.md",
        "NEURON_RT_ROOT_COMM_ID=10.0.0.1:44444 nccom-test allr -r 8 -N 2",
        Class::Hardware("two hosts at those addresses (nccom's multi-node tests run it on loopback)"),
    ),
    // docs/fabric.md
    ("docs/fabric.md", "cargo test -p fabric", Class::Build("the workspace's tests, which CI runs")),
    ("docs/fabric.md", "cargo test -p capi", Class::Build("the workspace's tests, which CI runs")),
    ("docs/fabric.md", "cargo build --release -p cli", Class::Build("this build's binaries are on PATH")),
    (
        "docs/fabric.md",
        "cargo run --release -p cli -- bench collectives",
        Class::Long(
            "libfabric rank processes; cli's and fabric's collectives tests run it (NEURON_VFIO_REQUIRE_FABRIC)",
        ),
    ),
    (
        "docs/fabric.md",
        "scripts/fabric/bench.sh",
        Class::Long("builds libfabric's fabtests and benchmarks for minutes"),
    ),
    (
        "docs/fabric.md",
        "neuron-vfio bench collectives",
        Class::Long(
            "libfabric rank processes; cli's and fabric's collectives tests run it (NEURON_VFIO_REQUIRE_FABRIC)",
        ),
    ),
    (
        "docs/fabric.md",
        "NEURON_RT_EXEC_TIMEOUT=5 neuron-vfio bench collectives",
        Class::Long("a killed rank and a 5 s timeout; cli's collectives tests run it"),
    ),
    (
        "docs/fabric.md",
        "for op in all-reduce all-gather reduce-scatter",
        Class::Long("the benchmark of the table below: minutes"),
    ),
    ("docs/fabric.md", "export NEURON_RT_ROOT_COMM_ID=10.0.0.1:44444", Class::Hardware("hosts h1 and h2")),
    ("docs/fabric.md", "mpirun -np 8 -H h1:4,h2:4", Class::Hardware("hosts h1 and h2 and the user's program")),
    ("docs/fabric.md", "mpirun -np 4", Class::Hardware("with the line above: capi's launchers test runs mpirun")),
    (
        "docs/fabric.md",
        "torchrun",
        Class::Hardware("two hosts and the user's program; capi's launchers test runs torchrun"),
    ),
    ("docs/fabric.md", "export NEURON_RT_ROOT_COMM_ID=$(scontrol", Class::Hardware("a Slurm allocation")),
    ("docs/fabric.md", "srun", Class::Hardware("a Slurm allocation")),
    (
        "docs/fabric.md",
        "ip ",
        Class::Hardware("root and network namespaces; capi's two-host test runs it (NEURON_VFIO_REQUIRE_NETNS)"),
    ),
    ("docs/fabric.md", "for n in a b", Class::Hardware("root and network namespaces (the lines above)")),
    ("docs/fabric.md", "export NEURON_RT_ROOT_COMM_ID=198.18.0.1", Class::Hardware("with the namespaces above")),
    // docs/kubernetes.md
    (
        "docs/kubernetes.md",
        "neuron-vfio --device 0000:00:1e.0 k8s-device-plugin",
        Class::Hardware(
            "a Neuron device at that address and a kubelet; k8s/tests run the plugin against a fake kubelet",
        ),
    ),
    ("docs/kubernetes.md", "neuron-vfio-k8s-device-plugin --device 0000:00:1e.0", Class::Hardware("as the line above")),
    (
        "docs/kubernetes.md",
        "scripts/k8s/build-bundle.sh --out /tmp/b --from-target target/release",
        Class::Build("a bundle of release binaries; k8s's container tests build one (NEURON_VFIO_REQUIRE_CONTAINERS)"),
    ),
    (
        "docs/kubernetes.md",
        "crun",
        Class::Hardware("crun, root and the edited bundle above; k8s's container tests run it"),
    ),
    // docs/lifecycle.md
    ("docs/lifecycle.md", "neuron-vfio --device sim:cayman run examples/allreduce_1nc.neff", Class::Fails),
    // docs/monitoring.md
    (
        "docs/monitoring.md",
        "neuron-vfio monitor --format native --json --count 10",
        Class::Service { secs: 4, why: "ten reports at 1 s: the first ones suffice" },
    ),
    ("docs/monitoring.md", "neuron-vfio monitor", Class::Service { secs: 3, why: "reports until interrupted" }),
    ("docs/monitoring.md", "neuron-vfio top", Class::Service { secs: 2, why: "a live view until interrupted" }),
    ("docs/monitoring.md", "neuron-vfio nq watch --pid", Class::Service { secs: 2, why: "watches until interrupted" }),
    ("docs/monitoring.md", "neuron-vfio csr watch --pid", Class::Service { secs: 2, why: "watches until interrupted" }),
    // docs/performance.md: the benchmarks behind the tables, each a minute or more.
    (
        "docs/performance.md",
        "neuron-vfio-bench --json bench neff-load",
        Class::Short {
            with: "neuron-vfio-bench --json bench neff-load --sizes 1M --runs 1",
            why: "1 GiB of weights, twice",
        },
    ),
    (
        "docs/performance.md",
        "neuron-vfio --json bench large-var --size 8G --runs 3 --in-memory",
        Class::Short {
            with: "neuron-vfio --json bench large-var --size 16M --runs 1 --in-memory",
            why: "8 GiB three times",
        },
    ),
    (
        "docs/performance.md",
        "neuron-vfio --json bench large-var --size 8G",
        Class::Short { with: "neuron-vfio --json bench large-var --size 16M --runs 1", why: "8 GiB three times" },
    ),
    (
        "docs/performance.md",
        "neuron-vfio-bench --json bench exec --only spin-inline --iters 30000",
        Class::Short {
            with: "neuron-vfio-bench --json bench exec --only spin-inline --iters 300",
            why: "30000 executes",
        },
    ),
    (
        "docs/performance.md",
        "neuron-vfio-bench --json bench exec --only spin-inline",
        Class::Short {
            with: "neuron-vfio-bench --json bench exec --only spin-inline --iters 300",
            why: "20000 executes",
        },
    ),
    (
        "docs/performance.md",
        "neuron-vfio-bench --json bench exec",
        Class::Short { with: "neuron-vfio-bench --json bench exec --iters 300", why: "20000 executes per path" },
    ),
    (
        "docs/performance.md",
        "neuron-vfio-bench --json bench scale",
        Class::Short {
            with: "neuron-vfio-bench --json bench scale --devices 2 --seconds 0.2 --threads 1",
            why: "16 devices, 3 s per step",
        },
    ),
    // docs/python.md
    (
        "docs/python.md",
        "python3 -m venv",
        Class::Build("builds the nrtpy wheel (maturin, minutes); scripts/test-all.sh runs nrtpy's tests"),
    ),
    ("docs/python.md", "pip install ./nrtpy", Class::Build("as the line above")),
    ("docs/python.md", "python3 -c", Class::Build("needs the venv above; nrtpy/tests run the same")),
    ("docs/python.md", "target/nrtpy-venv/bin/", Class::Build("what scripts/test-all.sh runs for nrtpy, minutes")),
    // docs/sdk.md
    (
        "docs/sdk.md",
        "scripts/install.sh --prefix /opt/aws/neuron",
        Class::Build("a release build as root; tests/tests/sdk_install.rs installs into a scratch prefix"),
    ),
    (
        "docs/sdk.md",
        "PKG_CONFIG_PATH=/opt/aws/neuron",
        Class::Build("needs the install above and the user's app.c; sdk_install.rs builds a program so"),
    ),
    // docs/sharing.md
    (
        "docs/sharing.md",
        "sudo ",
        Class::Hardware("a Neuron device at 0000:00:1e.0 on vfio-pci, as root; cli/tests/qemu.rs runs this in a guest"),
    ),
    ("docs/sharing.md", "for rank in 0 1; do sudo", Class::Hardware("as the line above")),
    // docs/trust.md
    ("docs/trust.md", "EXEC_FUZZ_CASES=1000000", Class::Long("a million fuzz cases; CI runs the test's default count")),
    // docs/virtual-device.md: a VM on the virtual device, and commands inside it.
    (
        "docs/virtual-device.md",
        "cargo build --release -p cli",
        Class::Build("this build's binaries are at target/release"),
    ),
    (
        "docs/virtual-device.md",
        "scripts/qemu/qemu-vfio-user",
        Class::Hardware("the QEMU of scripts/qemu/setup.sh and a guest image; cli/tests/qemu.rs boots it"),
    ),
    ("docs/virtual-device.md", "neuron-vfio ls", Class::Hardware("in the guest (cli/tests/qemu.rs)")),
    ("docs/virtual-device.md", "neuron-vfio bind 0000:00:02.0", Class::Hardware("in the guest (cli/tests/qemu.rs)")),
    (
        "docs/virtual-device.md",
        "export NEURON_VFIO_ALLOW_MODELED=1",
        Class::Hardware("in the guest (cli/tests/qemu.rs)"),
    ),
    (
        "docs/virtual-device.md",
        "neuron-vfio --device 0000:00:02.0",
        Class::Hardware("in the guest (cli/tests/qemu.rs)"),
    ),
    ("docs/virtual-device.md", "NEURON_VFIO_BACKEND=iommufd", Class::Hardware("in the guest (cli/tests/qemu.rs)")),
    (
        "docs/virtual-device.md",
        "python3 -c 'import socket",
        Class::Hardware("a served device's control socket (the sim-serve lines above); sim-serve's tests inject so"),
    ),
];

/// What the docs say in words about a command's output, checked as a count: (file, command
/// start, text, lines of the output that contain it).
const COUNTS: &[(&str, &str, &str, usize)] = &[
    // "while they run: each process, its pid and cores": the eight ranks, each its row.
    ("docs/sharing.md", "neuron-vfio --device sim:shared:cayman ls", "run examples/allreduce_1nc.neff", 8),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root")
}

/// This build's profile folder (target/<profile>, the parent of deps/).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent().and_then(|d| d.parent()).expect("target dir").to_path_buf()
}

/// The binaries the docs run, as `cargo install --path cli` names them.
const BINARIES: &[&str] = &[
    "neuron-vfio",
    "neuron-vfio-bench",
    "neuron-ls",
    "neuron-monitor",
    "neuron-top",
    "nccom-test",
    "neuron-vfio-k8s-device-plugin",
    "libnrt.so",
];

/// Where this build's `libnrt.so` is: the profile folder after `cargo build -p capi`, its
/// `deps/` after `cargo test --workspace` alone (a fresh machine's CI: the test build does not
/// copy the cdylib up).
fn built_libnrt() -> PathBuf {
    let dir = profile_dir();
    let up = dir.join("libnrt.so");
    if up.exists() {
        up
    } else {
        dir.join("deps").join("libnrt.so")
    }
}

/// A folder of the scratch tree standing for `target/debug` or `target/release`: a link to
/// each entry of this build's profile folder, and `libnrt.so` where [`built_libnrt`] found it.
/// A command that writes there (`ln -sf libnrt.so target/release/libnrt.so.1`) writes into the
/// scratch tree, not the build.
fn link_profile(into: &std::path::Path) {
    std::fs::create_dir_all(into).expect("scratch profile folder");
    for e in std::fs::read_dir(profile_dir()).expect("profile folder").flatten() {
        std::os::unix::fs::symlink(e.path(), into.join(e.file_name())).expect("link profile entry");
    }
    let lib = into.join("libnrt.so");
    if !lib.exists() {
        std::os::unix::fs::symlink(built_libnrt(), lib).expect("link libnrt.so");
    }
}

/// Fails unless every binary is built (whether it is current is cargo's: build first).
fn check_binaries() {
    let dir = profile_dir();
    for b in BINARIES {
        let p = if *b == "libnrt.so" { built_libnrt() } else { dir.join(b) };
        assert!(
            p.exists(),
            "{} is not built: `cargo build -p cli -p k8s -p capi` (cargo test --workspace does)",
            p.display()
        );
    }
}

/// The scratch tree a doc's commands run in: links to the repo's top-level entries, its own
/// target/{debug,release} (this build), home, runtime and state folders.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("doc-commands-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        for e in std::fs::read_dir(root()).expect("repo").flatten() {
            let n = e.file_name();
            if n != "target" && n != ".git" {
                std::os::unix::fs::symlink(e.path(), dir.join(&n)).expect("link");
            }
        }
        for p in ["debug", "release"] {
            link_profile(&dir.join("target").join(p));
        }
        for d in ["home", "run", "state", "shm", "out"] {
            std::fs::create_dir_all(dir.join(d)).expect("scratch subdir");
        }
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.join("run"), std::fs::Permissions::from_mode(0o700));
        Scratch { dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `s` quoted for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The class of a command of `file`, with the table entry's index.
fn class_of(file: &str, c: &DocCommand) -> Option<(usize, Class)> {
    let flat = c.flat();
    CLASSES.iter().enumerate().find(|(_, (f, p, _))| *f == file && flat.starts_with(p)).map(|(i, (_, _, k))| (i, *k))
}

/// The result of one command in its block's session.
struct Ran {
    rc: Option<i32>,
    output: String,
}

/// Runs one block's commands (their forms per [`CLASSES`]) in one bash session; the
/// outcome of each command that ran.
fn run_block(scratch: &Scratch, cmds: &[(DocCommand, Option<Class>)], timeout: Duration) -> Vec<Option<Ran>> {
    let out = scratch.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let mut script = String::from("set +e\n");
    for (i, (c, class)) in cmds.iter().enumerate() {
        let body = match class {
            None | Some(Class::Fails) => c.text.clone(),
            Some(Class::Short { with, .. }) => with.to_string(),
            Some(Class::Service { secs, .. }) => format!("timeout -k 5 -s INT {secs} env {}", c.text),
            Some(Class::CargoRun) => match c.text.split_once(" -- ") {
                Some((_, args)) => format!("neuron-vfio {args}"),
                None => "false # `cargo run` without `--`".to_string(),
            },
            Some(Class::Build(_) | Class::Hardware(_) | Class::Long(_)) => continue,
        };
        script.push_str(&format!(
            "{{ {body}\n}} >{o} 2>&1 </dev/null; echo $? >{r}\n",
            o = quote(&out.join(format!("{i}.out")).display().to_string()),
            r = quote(&out.join(format!("{i}.rc")).display().to_string()),
        ));
    }
    let path = format!("{}:{}", profile_dir().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(&scratch.dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", scratch.dir.join("home"))
        .env("XDG_RUNTIME_DIR", scratch.dir.join("run"))
        .env("NEURON_VFIO_STATE_DIR", scratch.dir.join("state"))
        .env("NEURON_VFIO_SHM_DIR", scratch.dir.join("shm"))
        .env("TMPDIR", std::env::temp_dir())
        .env("LANG", "C.UTF-8")
        .env("NO_COLOR", "1")
        // The scratch tree links to the repository's folders: no bytecode caches written into it.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("bash");
    let start = Instant::now();
    let timed_out = loop {
        if child.try_wait().expect("wait").is_some() {
            break false;
        }
        if start.elapsed() > timeout {
            break true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The block's leftovers (a job still in the background) go with its process group.
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).stderr(Stdio::null()).status();
    let _ = child.wait();
    let _ = timed_out; // a command that did not finish has no status: reported by the caller
    (0..cmds.len())
        .map(|i| {
            let output = std::fs::read_to_string(out.join(format!("{i}.out"))).ok()?;
            let rc = std::fs::read_to_string(out.join(format!("{i}.rc"))).ok().and_then(|s| s.trim().parse().ok());
            Some(Ran { rc, output })
        })
        .collect()
}

/// Whether `output` has a line containing `want` (its `…` standing for anything within the
/// line), by snapbox's matcher.
fn output_has(output: &str, want: &str) -> bool {
    let pattern = format!("...\n[..]{}[..]\n...\n", want.replace('…', "[..]"));
    let actual = format!("{}\n", output.trim_end());
    use snapbox::IntoData;
    snapbox::Assert::new().try_eq(None, actual.into_data(), pattern.into_data()).is_ok()
}

/// Words of a command that name files of the repository (a path under one of its folders
/// that the docs' commands use): they must exist. A bare name (`model.neff`) is the user's.
fn missing_files(c: &DocCommand) -> Vec<String> {
    let mut missing = Vec::new();
    for word in c.text.split_whitespace() {
        let w = word.trim_matches(['\'', '"', '(', ')', ';']);
        let w = w.split_once('=').map(|(_, v)| v).unwrap_or(w);
        let top = w.split('/').next().unwrap_or("");
        let is_repo = w.contains('/')
            && !w.starts_with('/')
            && !w.contains('$')
            && !w.contains('*')
            && ["examples", "scripts", "capi", "nrtpy", "docs"].contains(&top);
        if is_repo && !root().join(w).exists() {
            missing.push(w.to_string());
        }
    }
    missing
}

/// Runs every shell block of `file`; the failures, one line each.
fn check_file(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).expect("read doc");
    let scratch = Scratch::new(&file.replace('/', "_"));
    let mut failures = Vec::new();
    for b in blocks(&text) {
        if !is_shell(&b.lang) {
            if matches!(b.lang.as_str(), "" | "text") {
                if let Some(l) = looks_like_commands(&b.body) {
                    failures
                        .push(format!("{file}:{}: a `{}` block of commands (`{l}`): fence it ```sh", b.line, b.lang));
                }
            }
            continue;
        }
        let syntax = Command::new("bash").args(["-n", "-c", &b.body.join("\n")]).output().expect("bash -n");
        if !syntax.status.success() {
            failures.push(format!("{file}:{}: bash -n: {}", b.line, String::from_utf8_lossy(&syntax.stderr).trim()));
            continue;
        }
        let cmds: Vec<(DocCommand, Option<Class>)> =
            commands(&b.body, b.line).into_iter().map(|c| (c.clone(), class_of(file, &c).map(|(_, k)| k))).collect();
        for (c, _) in &cmds {
            for m in missing_files(c) {
                failures.push(format!("{file}:{}: `{m}` does not exist", c.line));
            }
        }
        for (c, class) in &cmds {
            let first = c.flat().split_whitespace().next().unwrap_or("").to_string();
            if class.is_none() && ["cargo", "sudo", "pip", "rustup"].contains(&first.as_str()) {
                failures.push(format!(
                    "{file}:{}: `{}` builds, installs or needs root: classify it in CLASSES with its reason",
                    c.line,
                    c.flat()
                ));
            }
        }
        if failures.iter().any(|f| f.ends_with("with its reason")) {
            continue;
        }
        let started = Instant::now();
        let ran = run_block(&scratch, &cmds, Duration::from_secs(120));
        for ((c, class), r) in cmds.iter().zip(ran) {
            let Some(r) = r else {
                if class.is_none_or(|k| {
                    matches!(k, Class::Fails | Class::Short { .. } | Class::Service { .. } | Class::CargoRun)
                }) {
                    failures.push(format!("{file}:{}: `{}` did not run", c.line, c.flat()));
                }
                continue;
            };
            let ok = match class {
                Some(Class::Fails) => r.rc.is_some_and(|rc| rc != 0),
                Some(Class::Service { .. }) => matches!(r.rc, Some(0 | 124)),
                _ => r.rc == Some(0),
            };
            let tail: String = {
                let lines: Vec<&str> = r.output.lines().collect();
                lines[lines.len().saturating_sub(12)..].join("\n    ")
            };
            if r.rc.is_none() {
                failures.push(format!("{file}:{}: `{}` did not finish in time:\n    {tail}", c.line, c.flat()));
            } else if !ok {
                failures.push(format!("{file}:{}: `{}` exited {:?}:\n    {tail}", c.line, c.flat(), r.rc));
            }
            for (_, _, text, n) in COUNTS.iter().filter(|(f, p, _, _)| *f == file && c.flat().starts_with(p)) {
                let got = r.output.lines().filter(|l| l.contains(text)).count();
                if got != *n {
                    failures.push(format!(
                        "{file}:{}: `{}` printed {got} lines with `{text}`, the doc says {n}:\n    {tail}",
                        c.line,
                        c.flat()
                    ));
                }
            }
            for want in &c.expect {
                if !output_has(&r.output, want) {
                    failures.push(format!("{file}:{}: `{}` did not print `{want}`:\n    {tail}", c.line, c.flat()));
                }
            }
        }
        eprintln!("{file}:{}: {} commands in {:.1?}", b.line, cmds.len(), started.elapsed());
    }
    failures
}

/// Docs whose services listen on the same fixed port (neuron-monitor's :8000) run one at a
/// time.
const PORT_8000: &[&str] = &["README.md", "docs/monitoring.md"];
static PORT_8000_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn assert_file(file: &str) {
    check_binaries();
    let _port = PORT_8000.contains(&file).then(|| PORT_8000_LOCK.lock().unwrap_or_else(|e| e.into_inner()));
    let failures = check_file(file);
    assert!(failures.is_empty(), "documented commands that fail as written:\n{}", failures.join("\n"));
}

/// The docs with shell blocks, each its own test (they run in parallel, each with its own
/// broker).
macro_rules! doc_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(#[test] fn $name() { assert_file($file) })*
        const FILES: &[&str] = &[$($file),*];
    };
}

doc_tests! {
    readme => "README.md",
    appliance => "docs/appliance.md",
    hardware_safety => "docs/hardware-safety.md",
    kmod_guest => "docs/kmod-guest.md",
    collectives => "docs/collectives.md",
    fabric => "docs/fabric.md",
    kubernetes => "docs/kubernetes.md",
    lifecycle => "docs/lifecycle.md",
    monitoring => "docs/monitoring.md",
    performance => "docs/performance.md",
    profiling => "docs/profiling.md",
    python => "docs/python.md",
    sdk => "docs/sdk.md",
    sharing => "docs/sharing.md",
    trust => "docs/trust.md",
    virtual_device => "docs/virtual-device.md",
}

/// Every doc with a shell block has its test above, and every entry of [`CLASSES`] matches a
/// command of its file (a reworded command must be classified again).
#[test]
fn every_doc_is_tested_and_every_class_is_used() {
    let mut docs = vec!["README.md".to_string()];
    let mut names: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    docs.extend(names);
    let mut used: BTreeMap<usize, usize> = BTreeMap::new();
    for doc in &docs {
        let text = std::fs::read_to_string(root().join(doc)).expect("doc");
        let shell: Vec<_> = blocks(&text).into_iter().filter(|b| is_shell(&b.lang)).collect();
        if !shell.is_empty() {
            assert!(FILES.contains(&doc.as_str()), "{doc} has shell blocks but no test in doc_tests!");
        }
        for b in shell {
            for c in commands(&b.body, b.line) {
                if let Some((i, _)) = class_of(doc, &c) {
                    *used.entry(i).or_default() += 1;
                }
            }
        }
    }
    let unused: Vec<String> = CLASSES
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains_key(i))
        .map(|(_, (f, p, _))| format!("{f}: `{p}`"))
        .collect();
    assert!(unused.is_empty(), "CLASSES entries that match no documented command:\n{}", unused.join("\n"));
    for (f, p, _, _) in COUNTS {
        let text = std::fs::read_to_string(root().join(f)).expect("doc");
        let found = blocks(&text)
            .into_iter()
            .filter(|b| is_shell(&b.lang))
            .any(|b| commands(&b.body, b.line).iter().any(|c| c.flat().starts_with(p)));
        assert!(found, "COUNTS entry {f}: `{p}` matches no documented command");
    }
    for (f, p, k) in CLASSES {
        let why = match k {
            Class::Fails => "fails",
            Class::CargoRun => "runs",
            Class::Build(w) | Class::Hardware(w) | Class::Long(w) => w,
            Class::Short { why, .. } | Class::Service { why, .. } => why,
        };
        assert!(!why.trim().is_empty(), "{f}: `{p}` has no reason");
    }
}

/// The matcher finds a line by its text and wildcards, and nothing else.
#[test]
fn output_matching_takes_a_line_with_wildcards() {
    let out = "notice: x\nerror: NRT_INVALID: the NEFF was compiled for 1 core(s) (vnc_size)\nbye";
    assert!(output_has(out, "NRT_INVALID: the NEFF was compiled for … (vnc_size)"));
    assert!(output_has(out, "bye"));
    assert!(!output_has(out, "NRT_SUCCESS"));
    assert!(!output_has(out, "notice: x error"), "within one line");
}
