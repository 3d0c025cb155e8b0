//! Every lock of the workspace's library and binary code is taken through the one
//! poison-tolerant helper (`platform/src/sync.rs`), or a ranked lock built on it
//! (`runtime/src/locks.rs`): no inline `.unwrap_or_else(|e| e.into_inner())`, no
//! `PoisonError` or `TryLockError` handled anywhere else. Tests are not checked (the loom
//! model substitutes loom's primitives with its own shim of the helper). And every member
//! inherits the workspace's lint table.

use std::path::{Path, PathBuf};

#[path = "../support/workspace.rs"]
mod workspace;
use workspace::{members, root};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for p in rd.flatten().map(|e| e.path()) {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if p.is_dir() {
            if !matches!(name.as_str(), "tests" | "benches" | "examples" | "target") {
                walk(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// The lines of `text` that handle lock poisoning inline.
fn inline_poison(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_tests = false;
    for (i, line) in text.lines().enumerate() {
        // A `#[cfg(test)]` module's code is a test's.
        if line.trim_start().starts_with("#[cfg(test)]") {
            in_tests = true;
        }
        if in_tests {
            continue;
        }
        let l = line.split("//").next().unwrap_or("");
        let lockish =
            [".lock()", ".read()", ".write()", ".get_mut()", ".try_lock()", ".wait("].iter().any(|k| l.contains(k));
        if l.contains("PoisonError")
            || l.contains("TryLockError")
            || (lockish && (l.contains("into_inner") || l.contains(".unwrap()") || l.contains(".expect(")))
        {
            out.push((i + 1, line.trim().to_string()));
        }
    }
    out
}

#[test]
fn every_lock_goes_through_the_one_helper() {
    let helper = root().join("platform/src/sync.rs");
    let mut files = Vec::new();
    for m in members() {
        walk(&root().join(&m), &mut files);
    }
    assert!(files.len() > 100, "too few sources found: {}", files.len());
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| **f != helper) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, l) in inline_poison(&text) {
            bad.push(format!("{}:{n}: {l}", f.strip_prefix(root()).unwrap_or(f).display()));
        }
    }
    assert!(bad.is_empty(), "locks taken outside platform::sync:\n{}", bad.join("\n"));
}

#[test]
fn the_scanner_sees_inline_poison_handling_and_leaves_the_helper_alone() {
    let planted = "fn f(m: &Mutex<u8>) {\n    let g = m.lock().unwrap_or_else(|e| e.into_inner());\n}\n";
    assert_eq!(inline_poison(planted).len(), 1);
    assert_eq!(inline_poison("let g = m.lock().unwrap();").len(), 1);
    assert_eq!(inline_poison("Err(TryLockError::Poisoned(e)) => e,").len(), 1);
    assert!(inline_poison("let g = platform::sync::lock(&m);\nlet v = out.into_inner();").is_empty());
    assert!(inline_poison("#[cfg(test)]\nmod tests {\n    let g = m.lock().unwrap();\n}").is_empty());
}

/// Every member inherits the workspace's lint table (`undocumented_unsafe_blocks`,
/// `unsafe_op_in_unsafe_fn`): a crate without `[lints] workspace = true` would have its unsafe
/// blocks outside the SAFETY-comment rule.
#[test]
fn every_member_inherits_the_workspace_lints() {
    let mut missing = Vec::new();
    for m in members() {
        let manifest = std::fs::read_to_string(root().join(&m).join("Cargo.toml")).expect("member Cargo.toml");
        let inherits = manifest
            .split("\n[")
            .find(|s| s.starts_with("lints]"))
            .is_some_and(|s| s.lines().any(|l| l.replace(' ', "") == "workspace=true"));
        if !inherits {
            missing.push(m);
        }
    }
    assert!(missing.is_empty(), "members without `[lints] workspace = true`: {missing:?}");
    let root_manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    assert!(root_manifest.contains("undocumented_unsafe_blocks = \"deny\""), "the workspace lint table");
}
