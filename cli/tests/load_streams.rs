//! `neuron-vfio run` streams the model file into the device: the inflated weights are never
//! held in host memory, so the process's peak RSS stays well below what holding them would
//! take (the simulated device's memory, which holds the weights, lives in the process too).

use std::path::PathBuf;
use std::process::{Command as StdCommand, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use neff::{builder, WeightFormat};

const WEIGHTS: usize = 128 << 20;

/// Runs `cmd` to its end; its exit status and peak RSS (KiB, from `wait4`).
// The child is reaped by `wait4` (which `Child::wait` cannot do: it gives no rusage).
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut StdCommand) -> (i32, u64) {
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 writes the exit status and one rusage into the buffers it is given, which
    // are sized for them; `pid` is our own unwaited child.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, ru.as_mut_ptr()) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    // SAFETY: wait4 succeeded, so it initialized the struct (which also started zeroed).
    let ru = unsafe { ru.assume_init() };
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    (code, ru.ru_maxrss as u64)
}

#[test]
fn run_streams_the_model_file() {
    let dir = std::env::temp_dir().join(format!("nv-stream-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut d = builder::weights_model((0..WEIGHTS).map(|i| (i % 251) as u8).collect(), WeightFormat::Npy);
    d.target = "cayman".into();
    let neff: PathBuf = dir.join("big.neff");
    std::fs::write(&neff, d.build().expect("build")).expect("write neff");
    let input = dir.join("input.bin");
    std::fs::write(&input, vec![0u8; 128]).expect("write input");
    let mut cmd = StdCommand::cargo_bin("neuron-vfio").expect("binary");
    cmd.env_remove("NEURON_RT_LOG_LEVEL")
        // A one-graph model: LNC=1 (cayman's default is 2).
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .env("NEURON_VFIO_SHM_DIR", &dir)
        .args(["--device", "sim:cayman", "run"])
        .arg(&neff)
        .arg("--input")
        .arg(format!("input={}", input.display()));
    let (code, peak_kib) = run_measured(&mut cmd);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "run failed");
    // The weights are resident once, in the simulated device's memory; holding the inflated
    // payload as well (the whole-buffer load) would take at least twice their size.
    let weights_kib = (WEIGHTS >> 10) as u64;
    eprintln!("peak RSS {} MiB for {} MiB of weights", peak_kib >> 10, weights_kib >> 10);
    assert!(peak_kib < weights_kib + weights_kib / 2, "peak RSS {peak_kib} KiB: the weights were held in host memory");
}
