//! With the `ofi` feature: embed libfabric's library directory (from pkg-config) as an rpath
//! into this crate's test binaries, so they run without LD_LIBRARY_PATH. Binaries of other
//! crates that link the transport do the same in their own build script.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_OFI");
    if std::env::var_os("CARGO_FEATURE_OFI").is_none() {
        return;
    }
    let out = Command::new("pkg-config").args(["--variable=libdir", "libfabric"]).output();
    match out {
        Ok(o) if o.status.success() => {
            let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if !dir.is_empty() {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
            }
        }
        _ => println!("cargo:warning=pkg-config does not know libfabric: run scripts/fabric/setup.sh first"),
    }
}
