//! One loader semantics: the in-memory reader (`Neff::parse`) and the streaming reader the
//! CLI uses (`Neff::parse_streaming`, here with a sink that takes the weights) accept and refuse
//! the same bytes with the same status — over the builder's fixtures, truncations of the file
//! and of the inner tar at every 512-byte boundary (and inside every member's padding), and
//! seeded random byte flips of the file and of the inner tar behind valid digests.

use neff::builder::{self, tar_bytes, wrap_archive, Body, ModelDesc, WriteOptions};
use neff::header::PKG_VERSION_TAR_SHA256;
use neff::{MemberSink, Neff, NeffHeader, NrtStatus, ReadOptions, SinkError};

/// Takes `.npy` members of at least 1 KiB (the fixtures' weights), as the runtime's device
/// sink takes its weights, and checks the sink protocol: `size` bytes between begin and end.
#[derive(Default)]
struct Weights {
    cur: Option<(String, u64, u64)>,
    got: Vec<(String, u64)>,
}

impl MemberSink for Weights {
    fn wants(&mut self, name: &str, size: u64) -> bool {
        size >= 1024 && name.ends_with(".npy")
    }
    fn begin(&mut self, name: &str, size: u64) -> Result<(), SinkError> {
        assert!(self.cur.is_none(), "begin inside a member");
        self.cur = Some((name.to_string(), size, 0));
        Ok(())
    }
    fn write(&mut self, data: &[u8]) -> Result<(), SinkError> {
        let c = self.cur.as_mut().expect("write outside a member");
        c.2 += data.len() as u64;
        assert!(c.2 <= c.1, "more bytes than the member's size");
        Ok(())
    }
    fn end(&mut self) -> Result<(), SinkError> {
        let (n, size, seen) = self.cur.take().expect("end outside a member");
        assert_eq!(seen, size, "member {n} ended early");
        self.got.push((n, size));
        Ok(())
    }
}

fn opts(verify: bool) -> ReadOptions {
    ReadOptions { verify, mem_cap: 16 << 20, ..ReadOptions::default() }
}

/// What a parse says, for comparing: Ok with the parts of the model both readers must agree on
/// (graphs, their vars and programs), or the status.
fn outcome(r: Result<Neff, neff::NeffError>) -> Result<String, NrtStatus> {
    match r {
        Ok(n) => Ok(n
            .graphs
            .iter()
            .map(|g| {
                let vars: Vec<String> =
                    g.vars.iter().map(|v| format!("{}:{:?}:{:?}", v.name, v.size, v.kind)).collect();
                format!("{} vars [{}] engines {}", g.name, vars.join(","), g.engines.len())
            })
            .collect::<Vec<_>>()
            .join("; ")),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            Err(e.status())
        }
    }
}

/// Both readers' verdicts on `b`; panics (naming `what`) when they differ.
fn agree(b: &[u8], verify: bool, what: &str) -> Result<String, NrtStatus> {
    let o = opts(verify);
    let mem = outcome(Neff::parse(b, &o));
    let mut sink = Weights::default();
    let streamed = outcome(Neff::parse_streaming(b, b.len() as u64, &o, &mut sink));
    assert_eq!(mem, streamed, "{what} (verify {verify}): the in-memory and the streaming reader disagree");
    mem
}

struct Fixture {
    name: &'static str,
    model: ModelDesc,
    opts: WriteOptions,
}

fn fixtures() -> Vec<Fixture> {
    let pkg1 = WriteOptions { pkg_version: PKG_VERSION_TAR_SHA256, ..WriteOptions::default() };
    let flat = WriteOptions { dot_slash: true, dir_entries: false, ..WriteOptions::default() };
    let weights: Vec<u8> = (0..6000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut kelp = builder::single_nc_allreduce();
    kelp.legacy_manifest_name = true;
    vec![
        Fixture { name: "1nc", model: builder::single_nc_allreduce(), opts: WriteOptions::default() },
        Fixture { name: "2nc", model: builder::two_nc_allreduce(), opts: WriteOptions::default() },
        Fixture { name: "1nc-pkg1", model: builder::single_nc_allreduce(), opts: pkg1.clone() },
        Fixture { name: "1nc-flat", model: builder::single_nc_allreduce(), opts: flat },
        Fixture { name: "kelp", model: kelp, opts: WriteOptions::default() },
        Fixture {
            name: "npy",
            model: builder::weights_model(weights.clone(), neff::WeightFormat::Npy),
            opts: WriteOptions::default(),
        },
        Fixture {
            name: "npy-pkg1",
            model: builder::weights_model(weights.clone(), neff::WeightFormat::Npy),
            opts: pkg1,
        },
        Fixture {
            name: "raw",
            model: builder::weights_model(weights, neff::WeightFormat::Raw),
            opts: WriteOptions::default(),
        },
    ]
}

/// The fixture's inner tar and a function that wraps a (changed) tar behind valid gates.
fn tar_of(f: &Fixture) -> (Vec<u8>, impl Fn(&[u8]) -> Vec<u8> + '_) {
    let members = f.model.members();
    let tar = tar_bytes(&members, &f.opts).expect("tar");
    let header: NeffHeader = f.model.header();
    (tar, move |t: &[u8]| wrap_archive(t, header.clone(), &f.opts).expect("wrap"))
}

/// Deterministic xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn fixtures_load_alike() {
    for f in fixtures() {
        let b = f.model.to_bytes(&f.opts).expect("build");
        for verify in [true, false] {
            let v = agree(&b, verify, f.name);
            assert!(v.is_ok(), "{}: a valid fixture is refused: {v:?}", f.name);
        }
        // The wrapped writer's own tar is the fixture again.
        let (tar, wrap) = tar_of(&f);
        assert!(agree(&wrap(&tar), true, f.name).is_ok());
    }
}

/// The case of issue 33: the 2-NC model's tar cut right after `sg01/pe.json`'s body (inside
/// its padding to 512 bytes) was accepted in memory and refused streamed. A tar must carry the
/// padding of its last member (libarchive: "Truncated tar archive"), so both refuse it.
#[test]
fn tar_cut_after_sg01_pe_json_is_refused_by_both() {
    let f = Fixture { name: "2nc", model: builder::two_nc_allreduce(), opts: WriteOptions::default() };
    let (tar, wrap) = tar_of(&f);
    let (start, size) = member_span(&tar, "sg01/pe.json").expect("sg01/pe.json in the tar");
    let body_end = start + size;
    assert!(!body_end.is_multiple_of(512), "the fixture's pe.json ends inside a block");
    let v = agree(&wrap(&tar[..body_end]), true, "cut after sg01/pe.json");
    assert_eq!(v, Err(NrtStatus::Invalid));
    // Cut at the block boundary after the padding: the archive ends there (an end-of-archive
    // block is optional, as for libarchive), and both readers judge the rest alike.
    let padded = body_end.next_multiple_of(512);
    let _ = agree(&wrap(&tar[..padded]), true, "cut after sg01/pe.json's padding");
}

/// Offset and size of member `name`'s body in a tar.
fn member_span(tar: &[u8], name: &str) -> Option<(usize, usize)> {
    let mut ar = tar::Archive::new(std::io::Cursor::new(tar));
    for e in ar.entries_with_seek().ok()? {
        let e = e.ok()?;
        if e.path_bytes().as_ref() == name.as_bytes() {
            return Some((e.raw_file_position() as usize, e.size() as usize));
        }
    }
    None
}

#[test]
fn tar_truncations_agree() {
    let mut refused = 0;
    let mut cases = 0;
    for f in fixtures() {
        let (tar, wrap) = tar_of(&f);
        // Every 512-byte boundary, and a cut inside every block (the padding of a member
        // ending there, a header, a body).
        let mut cuts: Vec<usize> = (0..=tar.len() / 512).map(|k| k * 512).collect();
        cuts.extend((0..tar.len() / 512).map(|k| k * 512 + 300));
        cuts.push(tar.len() - 1);
        // The writer ends the archive with two zero blocks: the first one ends it.
        let end_block = tar.len() - 1024;
        assert!(tar[end_block..].iter().all(|&b| b == 0));
        for cut in cuts {
            let v = agree(&wrap(&tar[..cut.min(tar.len())]), true, &format!("{} tar cut at {cut}", f.name));
            cases += 1;
            if cut % 512 != 0 && cut < end_block + 512 {
                // Not a block boundary, before the archive's end: a short header, body,
                // padding or end block — refused.
                assert_eq!(v, Err(NrtStatus::Invalid), "{} tar cut at {cut} accepted", f.name);
            }
            refused += usize::from(v.is_err());
        }
    }
    assert!(refused > 0 && refused < cases, "{refused} of {cases} refused");
}

#[test]
fn file_truncations_agree() {
    for f in fixtures() {
        let b = f.model.to_bytes(&f.opts).expect("build");
        for k in 0..=b.len() / 512 {
            let cut = &b[..k * 512];
            for verify in [true, false] {
                let _ = agree(cut, verify, &format!("{} file cut at {}", f.name, k * 512));
            }
            // The header patched to the cut length: the cut reaches inflate (verify off) or
            // the digest (verify on).
            if cut.len() > 1024 && cut.len() < b.len() {
                if let Ok(mut h) = NeffHeader::decode(cut) {
                    h.data_size = (cut.len() - 1024) as u64;
                    let mut p = cut.to_vec();
                    p[..1024].copy_from_slice(&h.encode());
                    for verify in [true, false] {
                        let v = agree(&p, verify, &format!("{} file cut at {}, data_size patched", f.name, k * 512));
                        // Refused by the digest, or by the gzip trailer; a plain tar (pkg 1)
                        // read unverified is a tar cut, judged by the tar rules.
                        if verify || f.opts.pkg_version != PKG_VERSION_TAR_SHA256 {
                            assert!(v.is_err(), "{} cut at {} accepted", f.name, k * 512);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn byte_flips_agree() {
    let mut rng = Rng(0x335E_ED0F_1055);
    let (mut ok, mut total) = (0, 0);
    for f in fixtures() {
        let b = f.model.to_bytes(&f.opts).expect("build");
        let (tar, wrap) = tar_of(&f);
        for case in 0..150 {
            // Flips in the inner tar (headers, JSON, programs, weights, padding, end blocks),
            // behind a valid digest: they reach the walk and the manifest.
            let mut t = tar.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(t.len());
                t[i] ^= 1 << rng.below(8);
            }
            let v = agree(&wrap(&t), true, &format!("{} tar flip case {case}", f.name));
            ok += usize::from(v.is_ok());
            // Flips in the file as it is (header, compressed window), verify on and off.
            let mut p = b.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(p.len());
                p[i] = rng.next() as u8;
            }
            for verify in [true, false] {
                let _ = agree(&p, verify, &format!("{} file flip case {case}", f.name));
            }
            total += 1;
        }
    }
    // Both outcomes occur (a flip in a name or padding byte can be harmless).
    assert!(ok > 0 && ok < total, "{ok} of {total} tar flips accepted");
}

#[test]
fn members_with_bodies_at_the_end_of_the_tar_agree() {
    // A member whose body is the last thing in the archive, with and without padding and
    // end-of-archive blocks; and trailing data after the end-of-archive blocks.
    let f = Fixture {
        name: "npy",
        model: builder::weights_model(vec![5u8; 3000], neff::WeightFormat::Npy),
        opts: WriteOptions::default(),
    };
    let members: Vec<(String, Body<'_>)> = f.model.members();
    let (tar, wrap) = tar_of(&f);
    let end = tar.len();
    let last = members.iter().rev().find(|(n, _)| !n.ends_with('/')).map(|(n, _)| n.clone()).expect("a member");
    let (start, size) = member_span(&tar, &last).expect("last member");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("without end blocks", tar[..(start + size).next_multiple_of(512)].to_vec()),
        ("one end block", tar[..(start + size).next_multiple_of(512) + 512].to_vec()),
        ("body without padding", tar[..start + size].to_vec()),
        ("trailing bytes after the end blocks", [tar.as_slice(), &[0xAB; 700]].concat()),
        ("end blocks cut short", tar[..end - 100].to_vec()),
    ];
    for (what, t) in cases {
        let v = agree(&wrap(&t), true, what);
        let padded = t.len().is_multiple_of(512) || what.starts_with("trailing") || what == "end blocks cut short";
        if !padded {
            assert_eq!(v, Err(NrtStatus::Invalid), "{what}");
        }
    }
}
