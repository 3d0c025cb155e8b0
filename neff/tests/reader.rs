//! Reader tests: every gate, member rule, manifest rule and both def.json shapes, on NEFFs made
//! by the writer and on hand-corrupted bytes.

use isa::slot::{Instruction, WaitMode};
use neff::builder::{self, pack, Body, ModelDesc, WriteOptions};
use neff::header::NeffHeader;
use neff::*;
use serde_json::{json, Value};

fn opts() -> ReadOptions {
    ReadOptions::default()
}

fn parse(b: &[u8]) -> Result<Neff, NeffError> {
    Neff::parse(b, &opts())
}

fn expect_err(b: &[u8], o: &ReadOptions, status: NrtStatus, needle: &str) -> NeffError {
    match Neff::parse(b, o) {
        Ok(_) => panic!("expected {status} ({needle}), parse succeeded"),
        Err(e) => {
            assert_eq!(e.status(), status, "{e}");
            assert!(e.to_string().contains(needle), "message {:?} lacks {needle:?}", e.to_string());
            e
        }
    }
}

/// Members of a model as owned (name, bytes) pairs, for editing.
fn members(m: &ModelDesc) -> Vec<(String, Vec<u8>)> {
    m.members().into_iter().map(|(n, b)| (n, b.to_vec())).collect()
}

fn repack(ms: &[(String, Vec<u8>)], m: &ModelDesc) -> Vec<u8> {
    let bodies: Vec<(String, Body<'_>)> = ms.iter().map(|(n, b)| (n.clone(), Body::Borrowed(b))).collect();
    pack(&bodies, m.header(), &WriteOptions::default()).expect("pack")
}

/// Rewrites one JSON member of the single-NC model and repacks.
fn with_json(name: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let m = builder::single_nc_allreduce();
    let mut ms = members(&m);
    let e = ms.iter_mut().find(|(n, _)| n == name).expect("member");
    let mut v: Value = serde_json::from_slice(&e.1).expect("json");
    f(&mut v);
    e.1 = serde_json::to_vec(&v).expect("ser");
    repack(&ms, &m)
}

fn without(name: &str) -> Vec<u8> {
    let m = builder::single_nc_allreduce();
    let ms: Vec<_> = members(&m).into_iter().filter(|(n, _)| n != name).collect();
    repack(&ms, &m)
}

fn with_header(f: impl FnOnce(&mut NeffHeader)) -> Vec<u8> {
    let mut b = builder::single_nc_allreduce().build().expect("build");
    let mut h = NeffHeader::decode(&b).expect("hdr");
    f(&mut h);
    b[..1024].copy_from_slice(&h.encode());
    b
}

// ---------------------------------------------------------------- round trip

#[test]
fn single_nc_round_trip() {
    let m = builder::single_nc_allreduce();
    let b = m.build().expect("build");
    let n = parse(&b).expect("parse");
    assert_eq!(n.header.pkg_version, 2);
    assert_eq!(n.header.name_str(), m.name);
    assert_eq!(n.manifest_member, "neff.json");
    assert_eq!(n.kelf.target, Target::Arch(&csr_maps::SUNDA));
    assert_eq!(n.inputs.len(), 1);
    assert_eq!(n.inputs[0].name, "input");
    assert_eq!((n.inputs[0].nrt_dtype, n.inputs[0].size), (10, 128));
    assert_eq!(n.outputs[0].name, "output");
    assert_eq!(n.outputs[0].shape, vec![1, 32]);
    assert_eq!(n.graphs.len(), 1);
    let g = &n.graphs[0];
    assert_eq!(g.var_shape, DefShape::Object);
    let names: Vec<_> = g.vars.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["input", "output", "gradient_in", "gradient_out"]);
    assert_eq!(g.vars[0].kind, VarKind::Input);
    assert_eq!(g.vars[0].shape, vec![1, 1, 1, 32]);
    assert_eq!(g.num_outputs(), 1);
    let q = g.queue("q_gradient_out").expect("queue");
    assert_eq!((q.role, q.owner, q.semaphore), (QueueRole::Out, Some(Engine::Pool), Some(11)));
    assert_eq!(q.role.ring_type(), 8);
    assert_eq!(g.replica_groups, vec![Vec::<u32>::new()]);
    let pool = g.engine(Engine::Pool).expect("pool");
    assert_eq!(pool.dma_blocks.len(), 2);
    assert_eq!(pool.dma_blocks[0].descs[0].from, "input");
    assert_eq!(pool.dma_blocks[0].descs[0].from_sizes, vec![128, 1]);
    assert_eq!(pool.dma_blocks[0].descs[0].from_steps, vec![1, 128]);
    match &pool.program {
        Program::Tpb(slots) => {
            assert_eq!(slots.len(), 3);
            assert!(
                matches!(slots[1], Instruction::DmaTrigger(t) if t.queue() == "q_gradient_out" && t.events.wait_mode == WaitMode::GtImm)
            );
        }
        Program::Sp(_) => panic!("pool is not SP"),
    }
    // SP has no engine json: empty placeholder.
    let sp = g.engine(Engine::Sp).expect("sp");
    assert!(sp.json_member.is_none() && sp.program.is_empty());
    // Directory entries and the wavegraph reference are not members.
    assert!(n.members.iter().all(|m| !m.name.ends_with('/')));
    let asm = neff::disasm::disassemble(&n);
    assert!(asm.contains("PSEUDO_DMA_TRIGGER $S[22]>0 q_gradient_out block_id=0;"), "{asm}");
    assert!(
        asm.contains(
            "PSEUDO_TRIGGER_COLLECTIVE $S[10]>0 $S[22]+=1 all_reduce op=add dtype=fp32 group=0 in=%2 out=%3 n=32;"
        ),
        "{asm}"
    );
    assert!(asm.contains("EVENT_SEMAPHORE $S[11]>0;"), "{asm}");
}

#[test]
fn two_nc_round_trip() {
    let b = builder::two_nc_allreduce().build().expect("build");
    let n = parse(&b).expect("parse");
    assert_eq!(n.header.requested_tpb_count, 2);
    assert_eq!(n.graphs.len(), 2);
    assert_eq!(n.graphs[1].definition, "sg01/def.json");
    for g in &n.graphs {
        assert_eq!(g.replica_groups, vec![vec![0, 1]]);
    }
}

#[test]
fn array_shape_and_owner_convention() {
    let mut m = builder::single_nc_allreduce();
    m.def_shape = DefShape::Array;
    m.queue_convention = QueueConvention::OwnerIsRole;
    let n = parse(&m.build().expect("build")).expect("parse");
    let g = &n.graphs[0];
    assert_eq!(g.var_shape, DefShape::Array);
    assert_eq!(g.vars[3].name, "gradient_out");
    let q = g.queue("q_gradient_in").expect("queue");
    assert_eq!((q.role, q.owner, q.convention), (QueueRole::In, Some(Engine::Pool), QueueConvention::OwnerIsRole));
}

#[test]
fn pkg1_sha256_dot_slash_and_kelp_fallback() {
    let mut m = builder::single_nc_allreduce();
    m.legacy_manifest_name = true;
    let o = WriteOptions { pkg_version: 1, dot_slash: true, ..WriteOptions::default() };
    let b = m.to_bytes(&o).expect("build");
    let n = parse(&b).expect("parse");
    assert_eq!(n.header.pkg_version, 1);
    assert_eq!(n.manifest_member, "kelp.json");
    assert!(n.members.iter().all(|m| !m.name.starts_with("./")));
    // Corrupt one payload byte: SHA256 mismatch with verify, and the tar still parses without.
    let mut bad = b.clone();
    let last = bad.len() - 600;
    bad[last] ^= 0x01;
    expect_err(&bad, &opts(), NrtStatus::Invalid, "SHA256 mismatch");
}

#[test]
fn weights_npy_are_zero_copy_and_raw_bin_loads() {
    let data: Vec<u8> = (0..4096u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    for format in [WeightFormat::Npy, WeightFormat::Raw] {
        let b = builder::weights_model(data.clone(), format).build().expect("build");
        let n = parse(&b).expect("parse");
        let v = n.graphs[0].var("weights").expect("var");
        assert_eq!(v.kind, VarKind::File);
        assert_eq!(v.weight_format, Some(format));
        let d = v.data.as_ref().expect("data");
        assert_eq!(&d[..], &data[..]);
        assert!(d.same_buffer(&n.payload), "weights must be a slice of the payload");
    }
}

#[test]
fn ucode_lib_sb_fp8_streams_parse() {
    let mut m = builder::single_nc_allreduce();
    let g = &mut m.graphs[0];
    g.ucode_libs.push(builder::UcodeLibDesc {
        name: "mylib".into(),
        library: "lib/mylib.elf".into(),
        version: "1.21.1.0".into(),
        opcode: -123,
        cpu_id: 0,
        total_cpus: 8,
        functions: vec![("f".into(), 0xF0, Some(1))],
        content: vec![0x7F, b'E', b'L', b'F'],
    });
    g.sb_reservations = Some(vec![SbReservation { offset: 64, size: 8, base_partition: 0, partitions: 128 }]);
    g.fp8 = Some(Fp8Config { emax_fp8_e4m3: 240, ocp_sat: 1, ..Fp8Config::default() });
    g.num_streams = Some(2);
    let n = parse(&m.build().expect("build")).expect("parse");
    let g = &n.graphs[0];
    assert_eq!(g.ucode_libs[0].flags, 0);
    assert_eq!(g.ucode_libs[0].functions[0].sub_opcode, Some(1));
    assert_eq!(g.ucode_libs[0].content.as_deref(), Some(&[0x7F, b'E', b'L', b'F'][..]));
    assert_eq!(g.sb_reservations[0].partitions, 128);
    assert_eq!(g.fp8.map(|f| f.to_bytes()[4]), Some(240));
    assert_eq!(g.num_streams, Some(2));
}

#[test]
fn parse_reader_streams_a_file() {
    let b = builder::two_nc_allreduce().build().expect("build");
    let n = Neff::parse_reader(std::io::Cursor::new(&b), b.len() as u64, &opts()).expect("parse");
    assert_eq!(n.graphs.len(), 2);
}

// ---------------------------------------------------------------- header gates (§1.3, in order)

#[test]
fn gate2_too_short() {
    expect_err(&[0u8; 1023], &opts(), NrtStatus::Invalid, "1023 bytes");
    expect_err(&[], &opts(), NrtStatus::Invalid, "needs 1024");
}

#[test]
fn gate3_header_size() {
    let b = with_header(|h| h.header_size = 1 << 40);
    expect_err(&b, &opts(), NrtStatus::Invalid, "header_size 1099511627776");
}

#[test]
fn gate4_version_ceiling() {
    let b = with_header(|h| h.neff_version_major = 3);
    expect_err(&b, &opts(), NrtStatus::UnsupportedNeffVersion, "neff_version_major 3");
    // 0 and 1 are accepted.
    let b = with_header(|h| h.neff_version_major = 1);
    assert!(parse(&b).is_ok());
}

#[test]
fn gate5_feature_bits_trapdoor() {
    let b = with_header(|h| h.feature_bits = 1 << 27);
    let e = expect_err(&b, &opts(), NrtStatus::UnsupportedNeffVersion, "0x8000000");
    assert!(e.to_string().contains("0x7FFFFFF"));
    // Supported window and bit 63 pass; majors 0/1 skip the test.
    assert!(parse(&with_header(|h| h.feature_bits = 0x7FF_FFFF | 1 << 63)).is_ok());
    assert!(parse(&with_header(|h| {
        h.feature_bits = 1 << 40;
        h.neff_version_major = 1;
    }))
    .is_ok());
}

#[test]
fn gate6_data_size() {
    let b = with_header(|h| h.data_size += 1);
    expect_err(&b, &opts(), NrtStatus::Invalid, "Invalid NEFF data size");
}

#[test]
fn gate7_packager() {
    let b = with_header(|h| h.pkg_version = 3);
    expect_err(&b, &opts(), NrtStatus::UnsupportedNeffVersion, "pkg_version 3");
    // Gate order: version (4) is checked before the packager (7).
    let b = with_header(|h| {
        h.pkg_version = 3;
        h.neff_version_major = 9;
    });
    expect_err(&b, &opts(), NrtStatus::UnsupportedNeffVersion, "neff_version_major 9");
}

#[test]
fn zero_data_size_is_rejected() {
    let b = with_header(|h| h.data_size = 0);
    expect_err(&b, &opts(), NrtStatus::Invalid, "data_size is 0");
}

#[test]
fn gate8_md5_only_when_verifying() {
    let b = with_header(|h| h.hash[3] ^= 0xFF);
    expect_err(&b, &opts(), NrtStatus::Invalid, "MD5 mismatch");
    assert!(Neff::parse(&b, &ReadOptions { verify: false, ..opts() }).is_ok());
    // Bytes 16..32 of the hash are filler for pkg 2.
    assert!(parse(&with_header(|h| h.hash[20] ^= 0xFF)).is_ok());
}

#[test]
fn corrupted_payload_reports_md5_before_inflate_errors() {
    let mut b = builder::single_nc_allreduce().build().expect("build");
    let mid = 1024 + (b.len() - 1024) / 2;
    b[mid] ^= 0x55;
    expect_err(&b, &opts(), NrtStatus::Invalid, "MD5 mismatch");
    let e = Neff::parse(&b, &ReadOptions { verify: false, ..opts() });
    assert!(matches!(e, Err(ref e) if e.status() == NrtStatus::Invalid), "{e:?}");
}

#[test]
fn trailing_bytes_after_data_are_ignored() {
    let mut b = builder::single_nc_allreduce().build().expect("build");
    b.extend_from_slice(&[0xAB; 100]);
    assert!(parse(&b).is_ok());
}

// ---------------------------------------------------------------- archive / member rules (§1.4)

#[test]
fn gzip_bomb_hits_the_cap_without_allocating() {
    let m = builder::weights_model(vec![0u8; 8 << 20], WeightFormat::Raw);
    let b = m.build().expect("build");
    assert!(b.len() < 200_000, "8 MiB of zeros compresses");
    let o = ReadOptions { mem_cap: 1 << 20, ..opts() };
    expect_err(&b, &o, NrtStatus::Invalid, "memory cap of 1048576");
}

/// A NEFF (valid gates and MD5) whose tar is the model's members followed by a hand-made
/// header claiming `claim` bytes and 512 bytes of body.
fn with_claiming_member(claim: u64) -> Vec<u8> {
    let m = builder::single_nc_allreduce();
    let ms = members(&m);
    let mut tar = Vec::new();
    {
        let mut t = tar::Builder::new(&mut tar);
        for (n, b) in &ms {
            if n.ends_with('/') {
                continue;
            }
            let mut h = tar::Header::new_gnu();
            h.set_size(b.len() as u64);
            h.set_mode(0o644);
            t.append_data(&mut h, n, b.as_slice()).expect("append");
        }
        let mut h = tar::Header::new_gnu();
        h.set_path("huge.bin").expect("path");
        h.set_size(claim);
        h.set_cksum();
        t.get_mut().extend_from_slice(h.as_bytes());
        t.get_mut().extend_from_slice(&[1u8; 512]);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).expect("gz");
    let data = gz.finish().expect("gz");
    let mut h = m.header();
    h.data_size = data.len() as u64;
    let digest = <md5::Md5 as md5::Digest>::digest(&data);
    h.hash[..16].copy_from_slice(&digest);
    let mut b = h.encode().to_vec();
    b.extend_from_slice(&data);
    b
}

#[test]
fn tar_member_claiming_huge_size_is_rejected() {
    // Over the inflate cap: refused before anything that large is read or allocated.
    expect_err(&with_claiming_member(1 << 40), &opts(), NrtStatus::Invalid, "memory cap of 4294967296");
    // Under the cap but past the end of the archive.
    expect_err(&with_claiming_member(1 << 20), &opts(), NrtStatus::Invalid, "claims size 1048576");
}

#[test]
fn truncated_gzip_is_rejected() {
    let b = builder::single_nc_allreduce().build().expect("build");
    let mut h = NeffHeader::decode(&b).expect("hdr");
    let cut = b.len() - 40;
    h.data_size = (cut - 1024) as u64;
    let mut t = b[..cut].to_vec();
    t[..1024].copy_from_slice(&h.encode());
    let e = expect_err(&t, &ReadOptions { verify: false, ..opts() }, NrtStatus::Invalid, "");
    assert!(matches!(e, NeffError::Archive(_)), "{e}");
}

#[test]
fn wavegraph_members_are_skipped_and_duplicates_overwrite() {
    let m = builder::single_nc_allreduce();
    let mut ms = members(&m);
    ms.push(("sg00/wavegraph-bin.json".into(), b"not json at all".to_vec()));
    ms.push(("deep/dir/x-wavegraph-bin.json".into(), vec![1, 2, 3]));
    let kelf = ms.iter().find(|(n, _)| n == "kelf-a.json").map(|(_, b)| b.clone()).expect("kelf");
    ms.insert(1, ("kelf-a.json".into(), b"{broken".to_vec()));
    let _ = kelf;
    let n = parse(&repack(&ms, &m)).expect("parse");
    assert!(n.members.iter().all(|x| !x.name.ends_with("wavegraph-bin.json")));
    assert_eq!(n.members.iter().filter(|x| x.name == "kelf-a.json").count(), 1);
}

#[test]
fn dangling_optional_references_are_tolerated() {
    let b = with_json("sg00/def.json", |v| {
        v["var"]["input"]["#file-name"] = json!("input-simout.npy");
        v["act"] = json!("act.json");
    });
    let b2 = {
        let m = builder::single_nc_allreduce();
        let mut ms = members(&m);
        for (n, body) in ms.iter_mut() {
            if n == "sg00/act.json" {
                *body = serde_json::to_vec(&json!({"dma": [], "instr": "act.bin", "act_info": "act_info.json"}))
                    .expect("j");
            }
        }
        let ms: Vec<_> = ms.into_iter().filter(|(n, _)| n != "sg00/act.bin").collect();
        repack(&ms, &m)
    };
    assert!(parse(&b).is_ok());
    let n = parse(&b2).expect("parse");
    let act = n.graphs[0].engine(Engine::Act).expect("act");
    assert_eq!(act.act_info.as_deref(), Some("act_info.json"));
    assert!(act.program.is_empty());
}

#[test]
fn missing_engine_json_is_an_empty_placeholder() {
    let n = parse(&without("sg00/dve.json")).expect("parse");
    assert!(n.graphs[0].engine(Engine::Dve).is_some_and(|e| e.json_member.is_none()));
}

// ---------------------------------------------------------------- manifest chain (§1.5-§1.7)

#[test]
fn gate10_neff_json_missing() {
    expect_err(&without("neff.json"), &opts(), NrtStatus::Invalid, "neff.json is missing");
}

#[test]
fn kelf_node_and_member_rules() {
    let b = with_json("neff.json", |v| v["nodes"][1]["attrs"]["func_name"] = json!("other"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "__kelf");
    expect_err(&without("kelf-a.json"), &opts(), NrtStatus::Invalid, "\"kelf-a.json\"");
    expect_err(&without("sg00/def.json"), &opts(), NrtStatus::Invalid, "sg00/def.json");
    let b = with_json("kelf-a.json", |v| v["graphs"] = json!([]));
    expect_err(&b, &opts(), NrtStatus::Invalid, "no graph");
    let b = with_json("neff.json", |v| v["heads"] = json!([[7, 0, 0]]));
    expect_err(&b, &opts(), NrtStatus::Invalid, "node id 7 out of range");
}

#[test]
fn gate11_arch_target() {
    let b = builder::single_nc_allreduce().build().expect("build");
    let cayman = ReadOptions { arch: Some(&csr_maps::CAYMAN), ..opts() };
    expect_err(&b, &cayman, NrtStatus::Invalid, "NEFF_ARCH_INCOMPAT");
    assert!(Neff::parse(&b, &ReadOptions { allow_legacy: true, ..cayman.clone() }).is_ok());
    assert!(Neff::parse(&b, &ReadOptions { arch: Some(&csr_maps::SUNDA), ..opts() }).is_ok());
    for (t, ok_on_sunda) in [("v2", true), ("", true), ("*", true), ("mariana", false), ("v3", false)] {
        let b = with_json("kelf-a.json", |v| v["target"] = json!(t));
        let r = Neff::parse(&b, &ReadOptions { arch: Some(&csr_maps::SUNDA), ..opts() });
        assert_eq!(r.is_ok(), ok_on_sunda, "target {t:?}: {r:?}");
    }
    let b = with_json("kelf-a.json", |v| v["target"] = json!("tonga"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "Invalid target \"tonga\"");
}

#[test]
fn gate11_unknown_generation_is_invalid_not_the_newest_arch() {
    // A generation csr-maps does not describe is refused with the target gate's status on
    // every device, never read as mariana (or any other known arch).
    for t in ["v1", "v5", "v9"] {
        let b = with_json("kelf-a.json", |v| v["target"] = json!(t));
        expect_err(&b, &opts(), NrtStatus::Invalid, &format!("Invalid target {t:?}"));
        for arch in csr_maps::ARCHES {
            let o = ReadOptions { arch: Some(arch), allow_legacy: true, ..opts() };
            expect_err(&b, &o, NrtStatus::Invalid, &format!("Invalid target {t:?}"));
        }
    }
    let b = with_json("kelf-a.json", |v| v["target"] = json!("v4"));
    let n = Neff::parse(&b, &opts()).expect("v4 is mariana");
    assert_eq!(n.kelf.target, Target::Arch(&csr_maps::MARIANA));
}

#[test]
fn gate12_var_table() {
    let b = with_json("sg00/def.json", |v| {
        v.as_object_mut().map(|o| o.remove("var"));
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "var: missing");
    let b = with_json("sg00/def.json", |v| v["var"]["gradient_out"]["var_id"] = json!(7));
    expect_err(&b, &opts(), NrtStatus::Invalid, "Unexpected var_ids set!");
    let b = with_json("sg00/def.json", |v| v["var"]["gradient_out"]["var_id"] = json!(2));
    expect_err(&b, &opts(), NrtStatus::Invalid, "Unexpected var_ids set!");
    let b = with_json("sg00/def.json", |v| v["var"]["output"]["#transfer-type"] = json!("tmp-buf"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "no Outputs");
    let b = with_json("sg00/def.json", |v| v["var"]["output"]["#transfer-type"] = json!("bogus"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "unknown var type \"bogus\"");
    let b = with_json("sg00/def.json", |v| {
        v["var"]["input"].as_object_mut().map(|o| o.remove("size"));
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "var.input.size");
    let b = with_json("sg00/def.json", |v| v["var"]["input"]["alignment"] = json!(3));
    expect_err(&b, &opts(), NrtStatus::Invalid, "3 is not a power of 2");
    let b = with_json("sg00/def.json", |v| {
        v["var"]["p"] = json!({"type": "pointer", "var_id": 4, "size": 4});
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "size 8");
    // "type" and "#transfer-type", "file_name" and "#file-name" are synonyms; all kinds parse.
    let b = with_json("sg00/def.json", |v| {
        v["var"]["sb"] = json!({"type": "state-buffer", "var_id": 4});
        v["var"]["l"] = json!({"type": "list", "var_id": 5, "list": [0, 1]});
        v["var"]["r"] = json!({"type": "remote", "var_id": 6});
        v["var"]["p"] = json!({"type": "pointer", "var_id": 7, "size": 8, "referenced_var_id": 0});
        v["var"]["vt"] = json!({"type": "virtual", "var_id": 8, "size": 16, "backing_variable_off": 0});
    });
    let n = parse(&b).expect("parse");
    let kinds: Vec<u32> = n.graphs[0].vars.iter().map(|v| v.kind.mr_type()).collect();
    assert_eq!(kinds, [5, 6, 4, 4, 1, 9, 11, 7, 8]);
}

#[test]
fn weight_member_rules() {
    let data = vec![7u8; 256];
    let m = builder::weights_model(data, WeightFormat::Npy);
    let ms: Vec<_> = members(&m).into_iter().filter(|(n, _)| n != "sg00/weights.npy").collect();
    expect_err(&repack(&ms, &m), &opts(), NrtStatus::Invalid, "\"weights.npy\"");
    let mut ms = members(&m);
    for (n, b) in ms.iter_mut() {
        if n == "sg00/weights.npy" {
            b[0] = b'X';
        }
    }
    expect_err(&repack(&ms, &m), &opts(), NrtStatus::Invalid, "npy magic");
    let mut ms = members(&m);
    for (n, b) in ms.iter_mut() {
        if n == "sg00/weights.npy" {
            b.truncate(b.len() - 1);
        }
    }
    expect_err(&repack(&ms, &m), &opts(), NrtStatus::Invalid, "size 256 but the weight payload holds 255");
}

#[test]
fn dma_queue_rules() {
    let b = with_json("sg00/def.json", |v| {
        v["dma_queue"]["q_gradient_in"].as_object_mut().map(|o| o.remove("type"));
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "missing role");
    let b = with_json("sg00/def.json", |v| v["dma_queue"]["q_gradient_in"]["owner"] = json!(5));
    expect_err(&b, &opts(), NrtStatus::Invalid, "owner 5");
    let b = with_json("sg00/def.json", |v| {
        v["dma_queue"]["a1"] = json!({"type": "act_load", "owner": "act", "num_queues": 2});
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "num_queues 1");
    let b = with_json("sg00/def.json", |v| {
        v["dma_queue"]["a1"] = json!({"type": "act_load", "owner": "act"});
        v["dma_queue"]["a2"] = json!({"type": "act_load", "owner": "act"});
    });
    expect_err(&b, &opts(), NrtStatus::Invalid, "more than one act_load");
    let b = with_json("sg00/def.json", |v| {
        v["dma_queue"]["d"] = json!({"type": "data", "owner": "pe", "indirect_memcpy": true});
        v["dma_queue"]["e"] = json!({"type": "embedding_update", "owner": "dve"});
    });
    let n = parse(&b).expect("parse");
    assert_eq!(n.graphs[0].queue("d").map(|q| q.role.ring_type()), Some(9));
    assert_eq!(n.graphs[0].queue("e").map(|q| q.role.ring_type()), Some(15));
}

#[test]
fn dma_block_rules() {
    let b = with_json("sg00/pool.json", |v| v["dma"][0]["desc"][0]["from_steps"] = json!([1]));
    expect_err(&b, &opts(), NrtStatus::Invalid, "2 sizes but 1 steps");
    let b = with_json("sg00/pool.json", |v| v["dma"][0]["desc"][0]["to_sizes"] = json!([128, 0]));
    expect_err(&b, &opts(), NrtStatus::Invalid, "size of dim 1 is 0");
    let b = with_json("sg00/pool.json", |v| v["dma"][0]["desc"][0]["from"] = json!("nope"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "\"nope\" is not a var");
    let b = with_json("sg00/pool.json", |v| v["dma"][0]["queue"] = json!("q_x"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "\"q_x\" is not a dma_queue");
    let b = with_json("sg00/pool.json", |v| v["dma"][0]["desc"][0]["op"] = json!("xor"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "unknown op \"xor\"");
    let b = with_json("sg00/pool.json", |v| v["dma"][1]["queue"] = json!("q_gradient_in"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "duplicate block id 0");
    // The trigger names block 0 of q_gradient_out; renumber the block and it dangles.
    let b = with_json("sg00/pool.json", |v| v["dma"][1]["id"] = json!(5));
    expect_err(&b, &opts(), NrtStatus::Invalid, "block_id 0 is not a DMA block of queue \"q_gradient_out\"");
}

#[test]
fn program_rules() {
    let m = builder::single_nc_allreduce();
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut ms = members(&m);
        for (n, b) in ms.iter_mut() {
            if n == "sg00/pool.bin" {
                f(b);
            }
        }
        repack(&ms, &m)
    };
    expect_err(&edit(&|b| b.push(0)), &opts(), NrtStatus::Invalid, "not a multiple of the 64-byte slot");
    expect_err(&edit(&|b| b[1] = 8), &opts(), NrtStatus::Invalid, "slot[0].inst_word_len");
    expect_err(&edit(&|b| b[0x0C] = b'x'), &opts(), NrtStatus::Invalid, "unknown queue");
    // Unknown opcodes are kept raw.
    let b = edit(&|b| {
        b.extend_from_slice(&{
            let mut s = [0u8; 64];
            s[0] = 0x03;
            s[1] = 0x10;
            s
        })
    });
    let n = parse(&b).expect("parse");
    let pool = n.graphs[0].engine(Engine::Pool).expect("pool");
    assert!(matches!(pool.program, Program::Tpb(ref s) if matches!(s[3], Instruction::Raw { .. })));
}

#[test]
fn gate13_ucode_lib_rules() {
    let base = |lib: Value| {
        let m = builder::single_nc_allreduce();
        let mut ms = members(&m);
        ms.push(("sg00/lib.elf".into(), vec![1, 2, 3]));
        for (n, b) in ms.iter_mut() {
            if n == "sg00/def.json" {
                let mut v: Value = serde_json::from_slice(b).expect("json");
                v["ucode_lib"] = lib.clone();
                *b = serde_json::to_vec(&v).expect("ser");
            }
        }
        repack(&ms, &m)
    };
    let good = json!({"library": "lib.elf", "ulib_to_ucode_version": "1.2.3.4", "opcode": 5, "cpu_id": 0, "total_cpus": 1,
                      "functions": [{"name": "f", "opcode": 240}]});
    let n = parse(&base(json!([good.clone()]))).expect("parse");
    assert_eq!(n.graphs[0].ucode_libs[0].flags, 6);
    let mut v = good.clone();
    v["ulib_to_ucode_version"] = json!("2.0.0.0");
    expect_err(&base(json!([v])), &opts(), NrtStatus::Invalid, "Mismatch between GPSIMD lib version and NRT version");
    let mut v = good.clone();
    v["cpu_id"] = json!(1);
    expect_err(&base(json!([v])), &opts(), NrtStatus::Invalid, "cpu_id: must be 0");
    let mut v = good.clone();
    v["total_cpus"] = json!(4);
    expect_err(&base(json!([v])), &opts(), NrtStatus::Invalid, "must be 0, 1 or 8, found 4");
    expect_err(&base(json!([good.clone(), good.clone()])), &opts(), NrtStatus::Invalid, "has already been added");
    let mut v = good.clone();
    v["library"] = json!("absent.elf");
    expect_err(&base(json!([v])), &opts(), NrtStatus::Invalid, "\"absent.elf\"");
    let mut v = good.clone();
    v["functions"] = json!([{"name": "f"}]);
    expect_err(&base(json!([v])), &opts(), NrtStatus::Invalid, "functions[0].opcode: missing");
}

#[test]
fn gates14_15_statebuffer_reservation() {
    let b =
        with_json("sg00/def.json", |v| v["runtime_statebuffer_reservation"] = json!([{"type": "other", "size": 8}]));
    expect_err(&b, &opts(), NrtStatus::Invalid, "Invalid runtime_statebuffer_reservation type");
    let cayman_no_sb = {
        let m = builder::single_nc_allreduce();
        let mut ms = members(&m);
        for (n, b) in ms.iter_mut() {
            let mut v: Value = match serde_json::from_slice(b) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if n == "kelf-a.json" {
                v["target"] = json!("cayman");
            } else if n == "sg00/def.json" {
                v.as_object_mut().map(|o| o.remove("runtime_statebuffer_reservation"));
            } else {
                continue;
            }
            *b = serde_json::to_vec(&v).expect("ser");
        }
        repack(&ms, &m)
    };
    expect_err(&cayman_no_sb, &opts(), NrtStatus::Invalid, "missing for a CAYMAN target");
    assert!(Neff::parse(&cayman_no_sb, &ReadOptions { allow_legacy: true, ..opts() }).is_ok());
}

#[test]
fn bad_json_and_wrong_types_name_the_member() {
    let m = builder::single_nc_allreduce();
    let mut ms = members(&m);
    for (n, b) in ms.iter_mut() {
        if n == "sg00/def.json" {
            *b = b"{\"var\": [".to_vec();
        }
    }
    expect_err(&repack(&ms, &m), &opts(), NrtStatus::Invalid, "sg00/def.json");
    let b = with_json("sg00/def.json", |v| v["var"]["input"]["var_id"] = json!("zero"));
    expect_err(&b, &opts(), NrtStatus::Invalid, "var.input.var_id");
    let b = with_json("sg00/def.json", |v| v["var"] = json!(3));
    expect_err(&b, &opts(), NrtStatus::Invalid, "expected an object or an array");
}
