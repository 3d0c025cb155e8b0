//! Issue 44's acceptance, the kubelet's side played by `support/kubelet.rs`: the plugin (its
//! binary) registers both resources; one shared simulated cayman at its default LNC (2) lists
//! 4 logical cores; Allocate(2) gives contiguous cores, the broker socket's mount and the
//! environment; a process started with exactly that environment (the mount applied) runs the
//! LNC=2 example exact on them; a second allocation gets the other two; killing the first
//! process frees its cores in the broker within 1 s; a process leasing a core outside any
//! allocation shows as Unhealthy in ListAndWatch and Healthy again within 1 s of its death; a
//! third allocation gets the freed cores; a kubelet restart (its socket removed and recreated)
//! is followed by both resources registering again within 5 s.

#[path = "support/kubelet.rs"]
mod kubelet;
#[path = "support/pods.rs"]
mod pods;

use k8s::api::{ContainerAllocateResponse, HEALTHY, UNHEALTHY};
use kubelet::{lock, Kubelet};
use pods::{finish_exact, leases, neuron_vfio, root, start_plugin, wait_line, PluginExe, Reaped, CORES, DEVICES};
use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NEFF: &str = pods::NEFF;
const INPUT: &str = "input=examples/input_32xf32.bin";

/// A container's process as the CRI would start it from an allocation: exactly its
/// environment, its mounts applied (here, without a mount namespace: a container path in the
/// environment is the mount's host path), nothing of this test's environment that the
/// runtime reads. (k8s/tests/containers.rs runs them in real containers.)
fn container(alloc: &ContainerAllocateResponse, args: &[&str]) -> Command {
    let mut c = Command::new(neuron_vfio());
    c.current_dir(root()).env_clear().env("PATH", "/usr/bin:/bin");
    for (k, v) in &alloc.envs {
        let mut v = v.clone();
        for m in &alloc.mounts {
            if let Some(rest) = v.strip_prefix(&m.container_path) {
                v = format!("{}{rest}", m.host_path);
            }
        }
        c.env(k, v);
    }
    c.args(args);
    c
}

/// Run the LNC=2 example, executing once and then holding its cores until told on stdin.
fn start_model(alloc: &ContainerAllocateResponse) -> (Reaped, BufReader<std::process::ChildStderr>) {
    // As a pod's command would: `neuron-vfio --device "$(NEURON_VFIO_DEVICE)" run …` (libnrt
    // reads the variable itself; the CLI takes the flag).
    let device = alloc.envs["NEURON_VFIO_DEVICE"].as_str();
    let mut child =
        container(alloc, &["--json", "--device", device, "run", NEFF, "--input", INPUT, "--pause-after-exec"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
    let err = BufReader::new(child.stderr.take().expect("stderr"));
    (Reaped(child), err)
}

fn health_in(st: &kubelet::State, id: &str) -> Option<String> {
    st.plugins.get(CORES)?.devices.iter().find(|d| d.id == id).map(|d| d.health.clone())
}

fn health(k: &Kubelet, id: &str) -> Option<String> {
    health_in(&lock(&k.state), id)
}

#[test]
fn the_kubelet_allocates_cores_through_the_plugin_and_they_come_back_with_the_process() {
    pods::watchdog(Duration::from_secs(180), "the kubelet test");
    let dir = pods::fresh_dir("nv-k8s");
    let broker_sock = dir.join("run/broker.sock");
    let metrics = dir.join("neuron.prom");
    let mut k = Kubelet::start(&dir.join("device-plugins"));
    let plugin = start_plugin(PluginExe::Binary, &dir, &broker_sock, &metrics);

    // Registration: both resources, with preferred allocations offered; 4 logical cores, 1 device.
    let report = || std::fs::read_to_string(dir.join("plugin.log")).unwrap_or_default();
    k.wait(Duration::from_secs(60), "both registrations", |st| (st.registrations.len() >= 2).then_some(()));
    k.wait(Duration::from_secs(30), "4 healthy cores listed", |st| {
        let p = st.plugins.get(CORES)?;
        let d = st.plugins.get(DEVICES)?;
        (p.devices.len() == 4
            && p.devices.iter().chain(&d.devices).all(|d| d.health == HEALTHY)
            && !d.devices.is_empty())
        .then_some(())
    });
    {
        let st = lock(&k.state);
        let p = &st.plugins[CORES];
        assert!(p.options.get_preferred_allocation_available);
        assert_eq!(p.endpoint, "neuron-vfio-neuroncore.sock");
        let ids: Vec<&str> = p.devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["nc0", "nc1", "nc2", "nc3"], "{}", report());
        assert_eq!(st.plugins[DEVICES].devices.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["nd0"]);
    }
    // Preferred allocations: contiguous within the device, including the must-include id.
    let all: Vec<String> = (0..4).map(|i| format!("nc{i}")).collect();
    assert_eq!(k.preferred(CORES, &all, &[], 2), ["nc0", "nc1"]);
    assert_eq!(k.preferred(CORES, &all, &["nc2".into()], 2), ["nc1", "nc2"]);
    assert_eq!(k.preferred(CORES, &["nc0".into(), "nc2".into(), "nc3".into()], &[], 2), ["nc2", "nc3"]);

    // Pod 1: 2 cores, contiguous; the mount and the environment.
    let (devs1, a1) = k.admit("pod1", CORES, 2);
    assert_eq!(devs1, ["nc0", "nc1"]);
    assert_eq!(a1.envs["NEURON_RT_VISIBLE_CORES"], "0-1");
    assert_eq!(a1.envs["NEURON_VFIO_DEVICE"], "sim:shared:cayman");
    assert_eq!(a1.envs["NEURON_VFIO_BROKER_SOCKET"], "/run/neuron-vfio/broker.sock");
    assert_eq!(a1.mounts.len(), 1);
    assert_eq!(a1.mounts[0].container_path, "/run/neuron-vfio");
    assert_eq!(Path::new(&a1.mounts[0].host_path), broker_sock.parent().expect("dir"));
    assert!(a1.devices.is_empty(), "a shared device needs no device node: the broker passes the descriptors");
    let (run1, mut err1) = start_model(&a1);
    wait_line(&mut err1, "executed");
    let pid1 = run1.0.id();

    // Pod 2 concurrently: the other two.
    let (devs2, a2) = k.admit("pod2", CORES, 2);
    assert_eq!(devs2, ["nc2", "nc3"]);
    assert_eq!(a2.envs["NEURON_RT_VISIBLE_CORES"], "2-3");
    let (mut run2, mut err2) = start_model(&a2);
    wait_line(&mut err2, "executed");

    let tool = pods::tool(&broker_sock);
    let l = leases(&tool);
    assert!(l.contains(&(pid1, 0..4)), "{l:?}");
    assert!(l.contains(&(run2.0.id(), 4..8)), "{l:?}");
    // Both processes are inside their allocations: every core stays healthy.
    std::thread::sleep(Duration::from_millis(300));
    assert!((0..4).all(|i| health(&k, &format!("nc{i}")).as_deref() == Some(HEALTHY)), "{}", report());
    finish_exact(&mut run2.0, "pod 2");

    // Kill pod 1's process: its cores are free in the broker within 1 s.
    let mut run1 = run1;
    let t0 = Instant::now();
    run1.0.kill().expect("kill");
    let _ = run1.0.wait();
    while leases(&tool).iter().any(|(p, _)| *p == pid1) {
        assert!(t0.elapsed() < Duration::from_secs(1), "pod 1's cores still leased after 1 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    let freed = t0.elapsed();
    k.remove_pod("pod1");
    k.remove_pod("pod2");
    eprintln!("SIGKILL to the cores free in the broker: {freed:?}");

    // A process outside any allocation leasing core 0: reported unhealthy (and in the metric),
    // healthy again within 1 s of its death.
    let mut rogue_env = a1.clone();
    rogue_env.envs.insert("NEURON_RT_VISIBLE_CORES".into(), "0".into());
    let (rogue, mut err_r) = start_model(&rogue_env);
    wait_line(&mut err_r, "executed");
    k.wait(Duration::from_secs(2), "nc0 unhealthy", |st| {
        (health_in(st, "nc0").as_deref() == Some(UNHEALTHY)).then_some(())
    });
    assert_eq!(health(&k, "nc1").as_deref(), Some(HEALTHY));
    assert!(report().contains(&format!("leased by pid {}", rogue.0.id())), "{}", report());
    let m = std::fs::read_to_string(&metrics).expect("metrics");
    assert!(m.contains("neuron_vfio_cores_held_outside_allocation 1"), "{m}");
    let mut rogue = rogue;
    let t1 = Instant::now();
    rogue.0.kill().expect("kill");
    let _ = rogue.0.wait();
    k.wait(Duration::from_secs(1), "nc0 healthy again", |st| {
        (health_in(st, "nc0").as_deref() == Some(HEALTHY)).then_some(())
    });
    eprintln!("SIGKILL to ListAndWatch showing the core free: {:?}", t1.elapsed());

    // Pod 3 gets the freed cores and runs exact.
    let (devs3, a3) = k.admit("pod3", CORES, 2);
    assert_eq!(devs3, ["nc0", "nc1"]);
    let (mut run3, mut err3) = start_model(&a3);
    wait_line(&mut err3, "executed");
    finish_exact(&mut run3.0, "pod 3");

    // A kubelet restart: both resources register again within 5 s.
    let t2 = Instant::now();
    k.restart();
    k.wait(Duration::from_secs(5), "re-registration after the kubelet's restart", |st| {
        let listed = |r: &str, n: usize| {
            st.plugins.get(r).is_some_and(|p| p.devices.len() == n && p.devices.iter().all(|d| d.health == HEALTHY))
        };
        (st.registrations.len() >= 2 && listed(CORES, 4) && listed(DEVICES, 1)).then_some(())
    });
    eprintln!("kubelet restart to both re-registered and listed: {:?}", t2.elapsed());
    let (devs4, _) = k.admit("pod4", DEVICES, 1);
    assert_eq!(devs4, ["nd0"]);
    // The plugin writes its metrics until it stops.
    drop(plugin);
    let _ = std::fs::remove_dir_all(&dir);
}
