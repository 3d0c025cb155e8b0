//! Progress bars appear only on a terminal: with stderr a pipe, a load of large weights and
//! `dma bench` print nothing on stderr.

use std::path::PathBuf;
use std::process::Command as StdCommand;

use assert_cmd::cargo::CommandCargoExt;
use neff::{builder, WeightFormat};

fn cli() -> StdCommand {
    let mut c = StdCommand::cargo_bin("neuron-vfio").expect("binary");
    c.env_remove("NEURON_RT_LOG_LEVEL");
    c
}

#[test]
fn no_progress_output_when_stderr_is_not_a_terminal() {
    let dir = std::env::temp_dir().join(format!("nv-prog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    // Weights above the progress threshold (PROGRESS_MIN_BYTES in cli/src/cmd_run.rs: 64 MiB).
    let bytes = 66usize << 20;
    let mut d = builder::weights_model((0..bytes).map(|i| (i % 253) as u8).collect(), WeightFormat::Raw);
    d.target = "cayman".into();
    let neff: PathBuf = dir.join("big.neff");
    std::fs::write(&neff, d.build().expect("build")).expect("write neff");
    let o = cli()
        .env("NEURON_VFIO_SHM_DIR", &dir)
        // A one-graph model: LNC=1 (cayman's default is 2).
        .env("NEURON_LOGICAL_NC_CONFIG", "1")
        .args(["--device", "sim:cayman", "load"])
        .arg(&neff)
        .output()
        .expect("load");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "stderr: {:?}", String::from_utf8_lossy(&o.stderr));
    assert!(!o.stdout.is_empty());
    let o = cli()
        .env("NEURON_VFIO_SHM_DIR", &dir)
        .args(["--device", "sim:cayman", "dma", "bench", "--size", "64M", "--iters", "1"])
        .output()
        .expect("dma bench");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "stderr: {:?}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
