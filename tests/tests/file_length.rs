//! No source file of the workspace is over 800 lines, outside generated code and tests.
//!
//! Checked: every `.rs` file under a workspace member's folder (the members are read from the
//! root `Cargo.toml`, so a new crate is covered without touching this file). Not checked:
//! tests — files under a `tests/` folder, files named `tests.rs`, and files under a folder
//! named `tests` inside `src/` (a test module's own folder); `benches/` and `examples/`;
//! generated code — files under `target/` or `OUT_DIR` (never in the tree) and files whose
//! first line says `@generated`. Nothing else is exempt: the failure lists every file over the
//! limit with its length.

use std::path::{Path, PathBuf};

#[path = "../support/workspace.rs"]
mod workspace;
use workspace::{members, root};

const MAX_LINES: usize = 800;

/// Whether a path (relative to its crate folder) is test, bench, example or build output.
fn exempt_dir(name: &str) -> bool {
    matches!(name, "tests" | "benches" | "examples" | "target")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !exempt_dir(name) && !name.starts_with('.') {
                walk(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// Every checked file with its line count, over the limit or not.
fn checked_files() -> Vec<(String, usize)> {
    let mut files = Vec::new();
    for member in members() {
        walk(&root().join(&member), &mut files);
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if text.lines().next().is_some_and(|l| l.contains("@generated")) {
            continue;
        }
        let rel = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
        out.push((rel, text.lines().count()));
    }
    out
}

#[test]
fn no_source_file_is_over_800_lines() {
    let files = checked_files();
    assert!(files.len() >= 100, "only {} source files found: the walk is broken", files.len());
    for must in ["hal/src/lib.rs", "sim/src/device.rs", "runtime/src/lib.rs"] {
        assert!(files.iter().any(|(f, _)| f == must), "{must} was not checked");
    }
    assert!(!files.iter().any(|(f, _)| f.contains("/tests/") || f.ends_with("/tests.rs")), "a test file was checked");
    let over: Vec<String> =
        files.iter().filter(|(_, n)| *n > MAX_LINES).map(|(f, n)| format!("{f}: {n} lines")).collect();
    assert!(
        over.is_empty(),
        "{} source files over {MAX_LINES} lines (split each along its concerns; tests go to a tests.rs or tests/):\n{}",
        over.len(),
        over.join("\n")
    );
}

/// The walk's exemptions on a made-up tree: tests, benches, examples and `tests.rs` are left
/// out, everything else is taken.
#[test]
fn the_walk_skips_tests_and_only_tests() {
    let dir = std::env::temp_dir().join(format!("file-length-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["src/a/tests", "src/b", "tests", "benches", "examples"] {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    for f in [
        "src/lib.rs",
        "src/a/mod.rs",
        "src/a/tests.rs",
        "src/a/tests/x.rs",
        "src/b/c.rs",
        "tests/t.rs",
        "benches/b.rs",
        "examples/e.rs",
    ] {
        std::fs::write(dir.join(f), "fn f() {}\n").expect("write");
    }
    let mut got = Vec::new();
    walk(&dir, &mut got);
    let got: Vec<String> = got.iter().map(|p| p.strip_prefix(&dir).expect("inside").display().to_string()).collect();
    assert_eq!(got, ["src/a/mod.rs", "src/b/c.rs", "src/lib.rs"]);
    let _ = std::fs::remove_dir_all(&dir);
}
