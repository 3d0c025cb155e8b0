//! The workspace as the repository-wide tests read it: its root and its member folders.

use std::path::PathBuf;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member folders, from the root `Cargo.toml`'s `members = [...]` (a new crate
/// is covered without touching the tests).
pub fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let start = manifest.find("members").expect("Cargo.toml has no `members`");
    let list = &manifest[start..];
    let open = list.find('[').expect("`members = [`");
    let close = list.find(']').expect("`members = [...]`");
    list[open + 1..close].split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}
