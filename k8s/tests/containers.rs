//! Issue 44's containers, with a real OCI runtime (crun; `support/oci.rs`) given exactly what
//! the plugin's Allocate returned, as the CRI would, the kubelet's side played by
//! `support/kubelet.rs` and the plugin run as `neuron-vfio k8s-device-plugin`:
//!
//! - the image is scripts/k8s/build-bundle.sh's bundle of this build's binaries, with a libnrt
//!   C program (capi/tests/c/lnc.c, linked against the image's `libnrt.so.1`) and the LNC=2
//!   example;
//! - pod 1 gets 2 of the 4 logical cores of a shared simulated cayman; its init container runs
//!   the C program (both its logical cores, output exact), its main container
//!   `neuron-vfio run` (exact), which then holds its cores;
//! - pod 2 concurrently gets the other 2 and runs exact; the broker shows each container's
//!   process (by its host pid) leasing its own cores;
//! - SIGKILL to pod 1's container process: its cores are free in the broker, and in the
//!   plugin's view (its metrics: no holder, no allocation; ListAndWatch: Healthy, so the
//!   kubelet may hand them out) within 1 s;
//! - pod 3 then gets them and runs the C program and the model exact.

#[path = "support/kubelet.rs"]
mod kubelet;
#[path = "support/oci.rs"]
mod oci;
#[path = "support/pods.rs"]
mod pods;

use k8s::api::HEALTHY;
use kubelet::{lock, Kubelet};
use oci::{Crun, Image};
use pods::{check_exact, finish_exact, leases, profile_dir, root, start_plugin, wait_line, PluginExe, CORES};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = "/opt/aws/neuron/bin";
/// The pod's command for the model, as a pod spec writes it (the kubelet expands `$(…)`).
const MODEL: [&str; 9] = [
    "/opt/aws/neuron/bin/neuron-vfio",
    "--json",
    "--device",
    "$(NEURON_VFIO_DEVICE)",
    "run",
    "/examples/allreduce_lnc2.neff",
    "--input",
    "input=/examples/input_32xf32.bin",
    "--pause-after-exec",
];
/// The C program: both visible logical cores of the device's 4, the LNC=2 NEFF exact on each,
/// the LNC=1 NEFF refused.
const NRT_PROGRAM: [&str; 6] = [
    "/opt/aws/neuron/bin/nrt-lnc",
    "/examples/allreduce_lnc2.neff",
    "/examples/allreduce_1nc.neff",
    "/examples/input_32xf32.bin",
    "4",
    "2",
];

/// capi/tests/c/lnc.c built against this build's libnrt.so, to find `libnrt.so.1` where the
/// image has it; None (a notice, or a failure when containers are required) without a C
/// compiler.
fn build_c_program(out: &Path) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if !Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return oci::unavailable(&format!("no C compiler (`{cc} --version` failed; set CC)"));
    }
    let lib = [profile_dir(), profile_dir().join("deps")]
        .into_iter()
        .find(|d| d.join("libnrt.so").is_file())
        .expect("libnrt.so built (capi is a dev-dependency of k8s)");
    let capi = root().join("capi");
    let o = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(capi.join("include"))
        .arg(capi.join("tests/c/lnc.c"))
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .args(["-lnrt", "-Wl,--no-undefined", "-Wl,-rpath,/opt/aws/neuron/lib"])
        .output()
        .expect("run the compiler");
    assert!(o.status.success(), "{cc}: {}", String::from_utf8_lossy(&o.stderr));
    Some(out.to_path_buf())
}

/// Run the C program in a container of `bundle`: every check passed, exact on both cores.
fn run_c_program(crun: &Crun, id: &str, bundle: &Path) {
    let o = crun.run_to_end(id, bundle);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{id}: exit {:?}\n{out}\n{err}", o.status.code());
    assert_eq!(out.lines().last(), Some("ALL OK"), "{id}:\n{out}\n{err}");
    for vnc in [0, 1] {
        let want = format!("ok   output == 2x input on vnc {vnc} (0 mismatches)");
        assert!(out.contains(&want), "{id}: no `{want}`:\n{out}");
    }
}

/// The plugin's metrics say core `c` is leased by nobody and in no allocation.
fn free_in_metrics(metrics: &Path, c: u32) -> bool {
    let m = std::fs::read_to_string(metrics).unwrap_or_default();
    m.contains(&format!("neuron_vfio_core_holder_pid{{core=\"{c}\",allocated=\"false\"}} 0\n"))
}

#[test]
fn pods_run_in_real_containers_on_their_cores_and_a_killed_one_gives_them_back() {
    pods::watchdog(Duration::from_secs(300), "the container test");
    let dir = pods::fresh_dir("nv-k8s-oci");
    let Some(crun) = Crun::find(&dir.join("crun")) else { return };
    let Some(prog) = build_c_program(&dir.join("nrt-lnc")) else { return };
    let ex = root().join("examples");
    let image = Image::build(
        &dir.join("image"),
        &profile_dir(),
        &[
            (prog, "/opt/aws/neuron/bin/nrt-lnc"),
            (ex.join("allreduce_lnc2.neff"), "/examples/allreduce_lnc2.neff"),
            (ex.join("allreduce_1nc.neff"), "/examples/allreduce_1nc.neff"),
            (ex.join("input_32xf32.bin"), "/examples/input_32xf32.bin"),
        ],
    );
    assert!(
        image.dir.join(format!("rootfs{BIN}/neuron-vfio-k8s-device-plugin")).is_file(),
        "the plugin is in the image"
    );

    let broker_sock = dir.join("run/broker.sock");
    let metrics = dir.join("neuron.prom");
    let k = Kubelet::start(&dir.join("device-plugins"));
    let plugin = start_plugin(PluginExe::Cli, &dir, &broker_sock, &metrics);
    let report = || std::fs::read_to_string(dir.join("plugin.log")).unwrap_or_default();
    k.wait(Duration::from_secs(60), "4 healthy cores listed", |st| {
        let p = st.plugins.get(CORES)?;
        (p.devices.len() == 4 && p.devices.iter().all(|d| d.health == HEALTHY)).then_some(())
    });

    // Pod 1: its init container runs the C program on its 2 cores.
    let (devs1, a1) = k.admit("pod1", CORES, 2);
    assert_eq!(devs1, ["nc0", "nc1"], "{}", report());
    assert_eq!(a1.envs["NEURON_RT_VISIBLE_CORES"], "0-1");
    let b = image.bundle(&dir.join("pod1-init"), &a1, &NRT_PROGRAM);
    run_c_program(&crun, "pod1-init", &b);
    // Its main container (Allocate again with the pod's devices): the model, holding its cores.
    let a1 = k.allocate_container("pod1");
    let b = image.bundle(&dir.join("pod1-main"), &a1, &MODEL);
    let mut c1 = crun.start("pod1-main", &b);
    let mut err1 = BufReader::new(c1.child.as_mut().and_then(|c| c.stderr.take()).expect("stderr"));
    wait_line(&mut err1, "executed");
    let pid1 = c1.pid();

    // Pod 2, concurrently: the other two cores.
    let (devs2, a2) = k.admit("pod2", CORES, 2);
    assert_eq!(devs2, ["nc2", "nc3"]);
    assert_eq!(a2.envs["NEURON_RT_VISIBLE_CORES"], "2-3");
    let b = image.bundle(&dir.join("pod2-main"), &a2, &MODEL);
    let mut c2 = crun.start("pod2-main", &b);
    let mut err2 = BufReader::new(c2.child.as_mut().and_then(|c| c.stderr.take()).expect("stderr"));
    wait_line(&mut err2, "executed");
    let tool = pods::tool(&broker_sock);
    let l = leases(&tool);
    assert!(l.contains(&(pid1, 0..4)), "pod 1's container process (host pid {pid1}) leases physical 0-3: {l:?}");
    assert!(l.contains(&(c2.pid(), 4..8)), "pod 2's leases physical 4-7: {l:?}");
    finish_exact(c2.child.as_mut().expect("child"), "pod 2");
    drop(c2);
    k.remove_pod("pod2");

    // SIGKILL to pod 1's container process.
    let t0 = Instant::now();
    // SAFETY: kill(2) on the pid crun wrote for the container it runs for this test.
    assert_eq!(unsafe { libc::kill(pid1 as i32, libc::SIGKILL) }, 0, "kill {pid1}");
    let mut in_broker = None;
    let mut in_plugin = None;
    while in_broker.is_none() || in_plugin.is_none() {
        let now = t0.elapsed();
        assert!(
            now < Duration::from_secs(1),
            "pod 1's cores not free within 1 s: broker {in_broker:?}, plugin {in_plugin:?}"
        );
        if in_broker.is_none() && !leases(&tool).iter().any(|(p, _)| *p == pid1) {
            in_broker = Some(now);
        }
        if in_plugin.is_none() && free_in_metrics(&metrics, 0) && free_in_metrics(&metrics, 1) {
            in_plugin = Some(now);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // The container is over (crun reaps it); the kubelet gives the pod's devices back, which
    // ListAndWatch lists Healthy: available again.
    let st = c1.child.take().expect("child").wait_with_output().expect("crun");
    assert!(!st.status.success(), "a killed container does not exit 0");
    drop(c1);
    k.remove_pod("pod1");
    let avail = k.available(CORES);
    assert!(avail.contains(&"nc0".to_string()) && avail.contains(&"nc1".to_string()), "{avail:?}");
    {
        let st = lock(&k.state);
        let listed = &st.plugins[CORES].devices;
        assert!(listed.iter().all(|d| d.health == HEALTHY), "{listed:?}");
    }
    eprintln!("SIGKILL to the cores free: in the broker {in_broker:?}, in the plugin {in_plugin:?}");

    // Pod 3 gets them: the C program and the model, exact.
    let (devs3, a3) = k.admit("pod3", CORES, 2);
    assert_eq!(devs3, ["nc0", "nc1"]);
    let b = image.bundle(&dir.join("pod3-init"), &a3, &NRT_PROGRAM);
    run_c_program(&crun, "pod3-init", &b);
    let a3 = k.allocate_container("pod3");
    let b = image.bundle(&dir.join("pod3-main"), &a3, &MODEL[..MODEL.len() - 1]);
    let o = crun.run_to_end("pod3-main", &b);
    assert!(o.status.success(), "pod 3: {}", String::from_utf8_lossy(&o.stderr));
    check_exact(&String::from_utf8_lossy(&o.stdout), "pod 3");
    // No core was ever reported held outside an allocation.
    assert!(!report().contains("outside any allocation"), "{}", report());
    // The plugin writes its metrics until it stops.
    drop(plugin);
    let _ = std::fs::remove_dir_all(&dir);
}
