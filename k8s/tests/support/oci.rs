//! A real OCI runtime driven as the CRI drives it for a pod's container: crun (Debian's `crun`
//! package) runs a bundle whose config.json is the image's (scripts/k8s/build-bundle.sh) with
//! the command, and exactly the environment and mounts the device plugin's Allocate returned.
//!
//! crun runs as root with its cgroup manager disabled (`--cgroup-manager=disabled`: the
//! container's resource limits are not what is tested, and nothing is created in the host's
//! cgroup tree). On a host with hybrid cgroups (cgroup v1 controllers, and a cgroup2 hierarchy
//! with controllers at /sys/fs/cgroup/unified) crun refuses any container ("cgroups in hybrid
//! mode not supported"), even with the manager disabled; there it runs in a private mount
//! namespace (`unshare --mount`) where that hierarchy is unmounted, so crun sees cgroup v1 and
//! creates none.
//!
//! Without crun (or root, or `unshare` where needed) the tests print a notice and pass, unless
//! `NEURON_VFIO_REQUIRE_CONTAINERS=1` (CI): then they fail.
#![allow(dead_code)]

use k8s::api::ContainerAllocateResponse;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The variable that makes missing container tools a failure.
pub const REQUIRE_VAR: &str = "NEURON_VFIO_REQUIRE_CONTAINERS";

/// The tests cannot run containers here: a notice and None, or a failure under
/// `NEURON_VFIO_REQUIRE_CONTAINERS=1`.
pub fn unavailable<T>(why: &str) -> Option<T> {
    if std::env::var(REQUIRE_VAR).as_deref() == Ok("1") {
        panic!("{why}, and {REQUIRE_VAR}=1");
    }
    eprintln!("notice: {why}: the container test is skipped (set {REQUIRE_VAR}=1 to make this a failure)");
    None
}

fn runs(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// Whether cgroups are hybrid: /sys/fs/cgroup a tmpfs of v1 hierarchies, and a cgroup2 one
/// mounted at /sys/fs/cgroup/unified (crun's own test).
fn hybrid_cgroups() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let fstype = |mountpoint: &str| {
        info.lines().rev().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (pre.split(' ').nth(4)? == mountpoint).then(|| post.split(' ').next().unwrap_or("").to_string())
        })
    };
    fstype("/sys/fs/cgroup").as_deref() == Some("tmpfs")
        && fstype("/sys/fs/cgroup/unified").as_deref() == Some("cgroup2")
}

/// crun with its state under a directory of the test's.
pub struct Crun {
    state: PathBuf,
    hybrid: bool,
}

impl Crun {
    /// crun, if it can run containers here (see the module's notes).
    pub fn find(state: &Path) -> Option<Self> {
        if !runs("crun", "--version") {
            return unavailable("no crun (Debian: apt-get install crun)");
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return unavailable("crun runs these containers as root, and this is not root");
        }
        let hybrid = hybrid_cgroups();
        if hybrid && !runs("unshare", "--version") {
            return unavailable("hybrid cgroups need crun in a private mount namespace, and there is no unshare");
        }
        std::fs::create_dir_all(state).expect("crun state dir");
        Some(Self { state: state.to_path_buf(), hybrid })
    }

    /// `crun ARGS` as it runs here.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = if self.hybrid {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg("umount -l /sys/fs/cgroup/unified && exec crun \"$@\"")
                .arg("sh");
            c
        } else {
            Command::new("crun")
        };
        c.arg("--root").arg(&self.state).arg("--cgroup-manager=disabled").args(args);
        c
    }

    /// `crun run` a bundle as container `id`, its stdio piped to the test (the container's
    /// process has them: no terminal).
    pub fn start(&self, id: &str, bundle: &Path) -> Container<'_> {
        let pid_file = bundle.join("pid");
        let _ = std::fs::remove_file(&pid_file);
        let child = self
            .command(&[
                "run",
                "--bundle",
                &bundle.display().to_string(),
                "--pid-file",
                &pid_file.display().to_string(),
                id,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("crun run");
        Container { crun: self, id: id.to_string(), child: Some(child), pid_file }
    }

    /// Run a bundle to its end: the container's output.
    pub fn run_to_end(&self, id: &str, bundle: &Path) -> Output {
        let mut c = self.start(id, bundle);
        // Its stdin closed at once; the container deleted when `c` drops.
        c.child.take().expect("child").wait_with_output().expect("crun run")
    }
}

/// A running container (killed and deleted when dropped).
pub struct Container<'a> {
    crun: &'a Crun,
    pub id: String,
    pub child: Option<Child>,
    pid_file: PathBuf,
}

impl Container<'_> {
    /// The container process's pid on the host (crun's `--pid-file`).
    pub fn pid(&self) -> u32 {
        let t0 = Instant::now();
        loop {
            if let Some(p) = std::fs::read_to_string(&self.pid_file).ok().and_then(|s| s.trim().parse().ok()) {
                return p;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "container {}: no pid file", self.id);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self.crun.command(&["kill", &self.id, "KILL"]).output();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.crun.command(&["delete", "--force", &self.id]).output();
    }
}

/// The container image: the bundle scripts/k8s/build-bundle.sh made (rootfs + the config
/// template).
pub struct Image {
    pub dir: PathBuf,
}

impl Image {
    /// Build it from this build's binaries (`--from-target`), with `adds` (host file, path in
    /// the image).
    pub fn build(dir: &Path, from_target: &Path, adds: &[(PathBuf, &str)]) -> Self {
        let mut c = Command::new(super::pods::root().join("scripts/k8s/build-bundle.sh"));
        c.arg("--out").arg(dir).arg("--from-target").arg(from_target);
        for (src, dest) in adds {
            c.arg("--add").arg(format!("{}:{dest}", src.display()));
        }
        let o = c.output().expect("run scripts/k8s/build-bundle.sh");
        assert!(
            o.status.success(),
            "build-bundle.sh failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Self { dir: dir.to_path_buf() }
    }

    /// One container's bundle in `dir`: the image's config with the command `args` (`$(VAR)`
    /// expanded from the container's environment, as the kubelet expands a pod's command), the
    /// image's environment overridden by Allocate's, and Allocate's mounts as bind mounts.
    pub fn bundle(&self, dir: &Path, alloc: &ContainerAllocateResponse, args: &[&str]) -> PathBuf {
        assert!(alloc.devices.is_empty() && alloc.cdi_devices.is_empty(), "device nodes are not modeled here");
        let text = std::fs::read_to_string(self.dir.join("config.json")).expect("the image's config.json");
        let mut cfg: serde_json::Value = serde_json::from_str(&text).expect("config.json");
        let mut env: BTreeMap<String, String> = cfg["process"]["env"]
            .as_array()
            .expect("process.env")
            .iter()
            .filter_map(|e| e.as_str()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        env.extend(alloc.envs.iter().map(|(k, v)| (k.clone(), v.clone())));
        cfg["process"]["args"] = args.iter().map(|a| expand(a, &env)).collect();
        cfg["process"]["env"] = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        cfg["root"]["path"] = self.dir.join("rootfs").display().to_string().into();
        let mounts = cfg["mounts"].as_array_mut().expect("mounts");
        for m in &alloc.mounts {
            mounts.push(serde_json::json!({
                "destination": m.container_path,
                "type": "bind",
                "source": m.host_path,
                "options": ["rbind", if m.read_only { "ro" } else { "rw" }],
            }));
        }
        std::fs::create_dir_all(dir).expect("bundle dir");
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&cfg).expect("json")).expect("config.json");
        dir.to_path_buf()
    }
}

/// The kubelet's expansion of a container's command: `$(NAME)` is the variable's value when
/// the environment has it (else left as written), `$$` is `$`.
pub fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        if let Some(t) = tail.strip_prefix('$') {
            out.push('$');
            rest = t;
        } else if let Some((name, after)) = tail.strip_prefix('(').and_then(|t| t.split_once(')')) {
            match env.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = after;
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn commands_expand_as_the_kubelet_expands_them() {
    let env = BTreeMap::from([("D".to_string(), "sim:shared:cayman".to_string())]);
    assert_eq!(expand("--device=$(D)", &env), "--device=sim:shared:cayman");
    assert_eq!(expand("$(X)", &env), "$(X)");
    assert_eq!(expand("$$(D) $", &env), "$(D) $");
}
