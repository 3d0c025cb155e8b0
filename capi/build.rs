//! The library's SONAME is libnrt's, `libnrt.so.1`: programs linked with `-lnrt` record
//! `NEEDED libnrt.so.1`, as those built against the Neuron SDK do (docs/sdk.md).
//!
//! With the `fabric` feature: embed libfabric's library directory (from pkg-config, pointed at
//! scripts/fabric/setup.sh's prefix by .cargo/config.toml) as an rpath of `libnrt.so` and the test binaries.

use std::process::Command;

/// libnrt's SONAME.
const SONAME: &str = "libnrt.so.1";

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("CARGO_FEATURE_FABRIC").is_none() {
        return;
    }
    if let Ok(o) = Command::new("pkg-config").args(["--variable=libdir", "libfabric"]).output() {
        let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !dir.is_empty() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
