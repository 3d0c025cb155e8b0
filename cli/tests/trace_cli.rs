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
