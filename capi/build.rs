//! The library's SONAME is libnrt's, `libnrt.so.1`: programs linked with `-lnrt` record
//! `NEEDED libnrt.so.1`, as those built against the Neuron SDK do (docs/sdk.md).

/// libnrt's SONAME.
const SONAME: &str = "libnrt.so.1";

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    println!("cargo:rerun-if-changed=build.rs");
}
