//! A run that times out sleeps on the interrupt past a short spin: a 1-second timeout does
//! not burn a second of CPU. Alone in its test binary: it measures its children's CPU time.

use assert_cmd::cargo::CommandCargoExt;
use std::process::Command;
use std::time::Instant;

fn children_cpu_s() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer it is given, which is sized for it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: getrusage succeeded, so it initialized the struct (and it started zeroed).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn a_timed_out_run_mostly_sleeps() {
    let before = children_cpu_s();
    let t0 = Instant::now();
    let out = Command::cargo_bin("neuron-vfio")
        .expect("binary")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("NEURON_VFIO_COUNTERS", "0")
        .args(["--json", "--device", "sim", "run", "examples/allreduce_1nc.neff"])
        .args(["--input", "input=examples/input_32xf32.bin", "--sim-fault", "hang@nc0:pe", "--timeout", "1"])
        .output()
        .expect("run");
    let wall = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_s() - before;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["status"], "NRT_TIMEOUT", "{v}");
    assert!(wall >= 1.0, "the timeout is honoured ({wall:.2} s)");
    assert!(cpu < 0.15 * wall, "{cpu:.2} s of CPU in {wall:.2} s: the wait spins");
}
