//! Fuzz target for the NEFF reader. The first byte picks a mode:
//! - even: the rest is a whole NEFF (header gates, digest, gzip, tar, manifests);
//! - odd: the rest is a tar payload, wrapped in a pkg-1 header so that the fuzzer reaches the
//!   tar walk and the manifest chain without having to forge digests or deflate streams.
//!
//! The reader must return Ok or Err, never panic, hang, or allocate past the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neff::{Arch, Neff, NeffHeader, ReadOptions};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let opts = ReadOptions {
        verify: mode & 2 != 0,
        arch: if mode & 4 != 0 { neff::arch_by_name("sunda") } else { None },
        mem_cap: 32 << 20,
        allow_legacy: mode & 8 != 0,
    };
    let result = if mode & 1 == 0 {
        Neff::parse(rest, &opts)
    } else {
        let mut h = NeffHeader::default();
        h.pkg_version = 1;
        h.data_size = rest.len() as u64;
        let mut b = h.encode().to_vec();
        b.extend_from_slice(rest);
        Neff::parse(&b, &ReadOptions { verify: false, ..opts })
    };
    if let Ok(n) = result {
        // Exercise the disassembler and the accessors on whatever parsed.
        let _ = neff::disasm::disassemble(&n);
        for m in &n.members {
            let _ = n.member(&m.name);
        }
    } else if let Err(e) = result {
        let _ = (e.status().code(), e.to_string());
    }
});
