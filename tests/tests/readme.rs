//! The README's first command (the main job) runs on the simulator and succeeds, and its
//! second command is the script CI runs.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `neuron-vfio` binary of this build (target/<profile>/neuron-vfio next to deps/).
fn bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("neuron-vfio")
}

fn readme_commands() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let block = text.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("first sh block");
    block.lines().map(|l| l.split('#').next().unwrap_or("").trim().to_string()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn readme_has_exactly_two_setup_commands() {
    let c = readme_commands();
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c[1], "scripts/test-all.sh");
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(ci.contains("scripts/test-all.sh"), ".ci/run runs the README's test command");
}

#[test]
fn readme_main_job_runs_on_the_simulator() {
    let c = readme_commands();
    let args: Vec<&str> = c[0].split_whitespace().collect();
    let pos = args.iter().position(|a| *a == "--").expect("cargo run … -- ARGS");
    let b = bin();
    if !b.exists() {
        panic!("{} not built (cargo test --workspace builds it)", b.display());
    }
    let out = Command::new(&b).current_dir(root()).arg("--json").args(&args[pos + 1..]).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("\"status\":\"NRT_SUCCESS\""), "{stdout}");
    let input = std::fs::read(root().join("examples/input_32xf32.bin")).unwrap();
    let first = f32::from_le_bytes([input[0], input[1], input[2], input[3]]);
    assert!(
        stdout.contains(&format!("[{first:?}")) || stdout.contains(&format!("[{first}")),
        "identity output: {stdout}"
    );
}

/// Every repository file the README's shell blocks name exists (`cc prog.c` once named a
/// file that did not), and the README says how to install the tool and use `libnrt.so`.
#[test]
fn readme_commands_name_files_that_exist_and_say_how_to_install() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut named = 0;
    for block in text.split("```sh").skip(1).filter_map(|b| b.split("```").next()) {
        for line in block.lines() {
            let cmd = line.split(" #").next().unwrap_or("");
            for word in cmd.split_whitespace() {
                let path = word.split_once('=').map(|(_, p)| p).unwrap_or(word);
                let looks_like_file = [".c", ".neff", ".bin", ".sh", ".h"].iter().any(|e| path.ends_with(e))
                    || path.starts_with("scripts/")
                    || path.starts_with("capi/");
                if looks_like_file && !path.starts_with("./") && !path.starts_with('-') {
                    assert!(root().join(path).exists(), "README names `{path}`, which does not exist");
                    named += 1;
                }
            }
        }
    }
    assert!(named >= 5, "the README's commands name the example files ({named})");
    for want in ["cargo install --path cli", "cargo build --release -p capi", "LD_LIBRARY_PATH=target/release", "-lnrt"]
    {
        assert!(text.contains(want), "README lacks `{want}`");
    }
}
