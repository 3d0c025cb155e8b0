//! The libnrt.so this build made, as C programs link and load it.

use std::path::{Path, PathBuf};

/// A directory holding the built libnrt.so under its link name and its SONAME,
/// `libnrt.so.1` (cargo makes only the first; a program linked with `-lnrt` records the
/// second). Made once per test process; None when no libnrt.so sits next to the test binary.
pub fn lib_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let deps = exe.parent()?.to_path_buf();
        let built = [deps.clone(), deps.parent().map(Path::to_path_buf).unwrap_or_default()]
            .into_iter()
            .map(|d| d.join("libnrt.so"))
            .find(|l| l.is_file())?;
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nrt-lib-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).ok()?;
        for name in ["libnrt.so", "libnrt.so.1"] {
            std::os::unix::fs::symlink(&built, d.join(name)).ok()?;
        }
        Some(d)
    })
    .clone()
}
