//! The repository explains itself: no code comment, TOML source field, script or document
//! cites a file outside the repository (the check is `scripts/dev/rewrite-refs.py --check`).

use std::path::Path;
use std::process::Command;

#[test]
fn no_references_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/dev/rewrite-refs.py"))
        .arg("--check")
        .current_dir(&root)
        .output()
        .expect("python3 runs (it is on every supported machine)");
    assert!(
        out.status.success(),
        "references outside the repository:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
