//! Turns the declarative register descriptions (blocks/*.toml, arch/*.toml) into typed Rust
//! with the `csr-gen` generator: one module per block with register value types and block
//! handles, static metadata tables, and per-arch data.

use std::path::Path;

fn main() {
    // At run time, not compile time: a build-script binary reused from another checkout (a
    // shared or copied target directory) must still read this checkout's descriptions.
    let Some(manifest) = std::env::var_os("CARGO_MANIFEST_DIR") else {
        panic!("csr-maps description error: CARGO_MANIFEST_DIR not set")
    };
    let root = Path::new(&manifest);
    println!("cargo:rerun-if-changed=blocks");
    println!("cargo:rerun-if-changed=arch");
    let desc = csr_gen::Descriptions::load(root).unwrap_or_else(|e| panic!("csr-maps description error: {e}"));
    for p in desc.files() {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let Some(out_dir) = std::env::var_os("OUT_DIR") else { panic!("OUT_DIR not set") };
    let dst = Path::new(&out_dir).join("generated.rs");
    if let Err(e) = std::fs::write(&dst, csr_gen::generate(&desc)) {
        panic!("{}: {e}", dst.display());
    }
}
