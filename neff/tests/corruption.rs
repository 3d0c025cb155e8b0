//! CI-sized random corruption: whatever the bytes, the reader returns Ok or a typed error
//! (never a panic), and every error carries a libnrt status.

use neff::builder::{self, pack, Body, WriteOptions};
use neff::{Neff, NrtStatus, ReadOptions};
use proptest::prelude::*;

fn small_opts(verify: bool) -> ReadOptions {
    ReadOptions { verify, mem_cap: 8 << 20, ..ReadOptions::default() }
}

fn check(b: &[u8], verify: bool) {
    match Neff::parse(b, &small_opts(verify)) {
        Ok(n) => {
            let _ = neff::disasm::disassemble(&n);
        }
        Err(e) => {
            let s = e.status();
            assert!(matches!(s, NrtStatus::Invalid | NrtStatus::UnsupportedNeffVersion | NrtStatus::FailHostMemAlloc));
            assert!(!e.to_string().is_empty());
        }
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let m1 = builder::single_nc_allreduce();
    let m2 = builder::two_nc_allreduce();
    let tar1 = WriteOptions { pkg_version: 1, ..WriteOptions::default() };
    vec![
        m1.build().unwrap_or_default(),
        m2.build().unwrap_or_default(),
        m1.to_bytes(&tar1).unwrap_or_default(),
        builder::weights_model(vec![3u8; 4096], neff::WeightFormat::Npy).to_bytes(&tar1).unwrap_or_default(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    /// Random byte edits anywhere in a NEFF (header, gzip, tar), verify on and off.
    #[test]
    fn random_byte_edits(seed in 0usize..4, edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12), verify in any::<bool>()) {
        let mut b = seeds().swap_remove(seed);
        for (i, v) in edits {
            let k = i.index(b.len());
            b[k] = v;
        }
        check(&b, verify);
    }

    /// Truncations and splices.
    #[test]
    fn truncate_and_splice(seed in 0usize..4, cut in any::<prop::sample::Index>(), junk in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut b = seeds().swap_remove(seed);
        let k = cut.index(b.len());
        b.truncate(k);
        b.extend_from_slice(&junk);
        check(&b, false);
        check(&b, true);
    }

    /// Corrupt one member's bytes (JSON, programs, npy), repack with valid digests, so that
    /// the corruption reaches the manifest chain.
    #[test]
    fn member_level_corruption(member in any::<prop::sample::Index>(), edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in proptest::option::of(any::<prop::sample::Index>())) {
        let m = builder::weights_model(vec![9u8; 512], neff::WeightFormat::Npy);
        let mut ms: Vec<(String, Vec<u8>)> = m.members().into_iter().map(|(n, b)| (n, b.to_vec())).collect();
        let mi = member.index(ms.len());
        let body = &mut ms[mi].1;
        if !body.is_empty() {
            for (i, v) in edits {
                let k = i.index(body.len());
                body[k] = v;
            }
            if let Some(c) = cut {
                let k = c.index(body.len());
                body.truncate(k);
            }
        }
        let bodies: Vec<(String, Body<'_>)> = ms.iter().map(|(n, b)| (n.clone(), Body::Borrowed(b))).collect();
        let b = pack(&bodies, m.header(), &WriteOptions { level: 1, ..WriteOptions::default() });
        prop_assert!(b.is_ok());
        check(&b.unwrap_or_default(), true);
    }
}
