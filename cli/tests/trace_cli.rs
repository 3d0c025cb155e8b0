//! `--mmio-trace FILE` / `NEURON_VFIO_MMIO_TRACE=FILE`: every BAR access, named.

use assert_cmd::Command;

fn cli() -> Command {
    let mut c = Command::cargo_bin("neuron-vfio").expect("binary");
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).env("NEURON_VFIO_COUNTERS", "0");
    c
}

#[test]
fn the_trace_names_every_access() {
    let dir = std::env::temp_dir().join(format!("nv-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("read.trace");
    let out = cli()
        .arg("--mmio-trace")
        .arg(&f)
        .args(["--device", "sim", "csr", "read", "misc_ram.fw_api_version"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&f).unwrap();
    // Bring-up reads and writes, then the register asked for, read last.
    assert!(text.lines().count() > 3, "{text}");
    assert!(text.lines().any(|l| l.contains(" W32 ")), "{text}");
    let last = text.lines().rfind(|l| l.contains("misc_ram.fw_api_version")).unwrap_or_default();
    assert!(last.contains("dev0 R32 BAR0+0x"), "{last}");
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert!(w.len() >= 7 && w[0].parse::<f64>().is_ok() && w[4] == "=", "{l}");
    }
    // The environment variable, on a run: the kickoff writes are in it, by name.
    let g = dir.join("run.trace");
    let out = cli()
        .env("NEURON_VFIO_MMIO_TRACE", &g)
        .args(["--device", "sim", "run", "examples/allreduce_1nc.neff", "--input", "input=examples/input_32xf32.bin"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&g).unwrap();
    let named = text.lines().filter(|l| !l.ends_with(" ?")).count();
    assert!(named > 10, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The benchmarks open simulators of their own; the trace covers them too. A spin execute
/// makes one kick write and one fatal-cause read (FINALIZE) — the trace shows as many of each
/// as the benchmark made executes.
#[test]
fn the_trace_covers_the_benchmarks_simulator() {
    let dir = std::env::temp_dir().join(format!("nv-trace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bench.trace");
    let out = Command::cargo_bin("neuron-vfio-bench")
        .expect("binary")
        .env("NEURON_VFIO_COUNTERS", "0")
        .arg("--mmio-trace")
        .arg(&f)
        .args(["--json", "bench", "exec", "--only", "spin-inline", "--iters", "100"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&f).unwrap();
    let kicks = text.lines().filter(|l| l.contains(" W32 ") && l.contains("tpb_sem[0].sem_inc[")).count();
    let causes = text.lines().filter(|l| l.contains(" R32 ") && l.contains("nc_intc[0].g0.cause")).count();
    // Warm-up and measured executes of the headline pass and of the breakdown pass.
    let executes = 2 * (1000 + 100);
    assert!(kicks >= executes && causes >= executes, "{kicks} kicks, {causes} cause reads for {executes} executes");
    let _ = std::fs::remove_dir_all(&dir);
}
