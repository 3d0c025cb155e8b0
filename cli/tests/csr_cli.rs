use assert_cmd::Command;

fn cli() -> Command {
    Command::cargo_bin("neuron-vfio").expect("binary")
}

#[test]
fn csr_list_json_has_every_register_with_offsets() {
    for arch in ["sunda", "cayman", "mariana"] {
        let out =
            cli().args(["--json", "csr", "list", "--arch", arch, "--filter", "tpb_sem[0].sem_inc["]).output().unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.len(), 256, "{arch}");
        let base = if arch == "sunda" { 0x270_1800u64 } else { 0xD270_1800 };
        assert_eq!(a[3]["offset"].as_u64(), Some(base + 12));
        assert_eq!(a[3]["name"], "tpb_sem[0].sem_inc[3]");
        assert_eq!(a[3]["bar"], 0);
        assert_eq!(a[3]["width"], 32);
        assert_eq!(a[3]["access"], "wo");
        assert!(a[3]["source"].as_str().unwrap().contains("address_map.h"));
    }
    let out = cli()
        .args(["--json", "csr", "list", "--arch", "sunda", "--filter", "udma[33].m2s.q[0].head"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["offset"].as_u64(), Some(0x30D0_1034));
    assert_eq!(v[0]["fields"][1], serde_json::json!({"name": "ring_id", "lsb": 30, "width": 2}));
}

#[test]
fn csr_list_text_and_errors() {
    let out = cli().args(["csr", "list", "--arch", "v3", "--filter", "misc_ram.trigger"]).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("misc_ram.trigger") && s.contains("0x06c84800") && s.contains("blocked"), "{s}");
    let out = cli().args(["--json", "csr", "list", "--arch", "inf1"]).output().unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "NRT_INVALID");
    assert_eq!(v["code"], 2);
    let out = cli().args(["csr", "list", "--arch", "inf1"]).output().unwrap();
    let e = String::from_utf8(out.stderr).unwrap();
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn csr_decode_by_name_and_offset() {
    let out = cli().args(["--json", "csr", "decode", "--arch", "sunda", "0x30d01034", "0xC0000005"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "udma[33].m2s.q[0].head");
    assert_eq!(v["fields"]["idx"], 5);
    assert_eq!(v["fields"]["ring_id"], 3);
    let out = cli().args(["csr", "decode", "udma[99].m2s.q[0].head", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr).unwrap().contains("no instance 99 of `udma`"));
}

#[test]
fn csr_list_shows_guards() {
    // JSON: the guard class of each guarded register, null elsewhere; a field guard names it.
    for (filter, guard) in [
        ("udma[33].m2s.q[0].ring_base_lo", "dma-address"),
        ("sdma[0].trace_nq.nq[0].base_hi", "dma-address"),
        ("notific[0].nq[3].base_lo", "dma-address"),
        ("misc_ram.reset_request", "reset"),
        ("tpb_sem[0].sem_set[7]", "semaphore"),
        ("q7[0].ll_addr", "dma-address"),
        ("nx[0].log_addr", "dma-address"),
    ] {
        let out = cli().args(["--json", "csr", "list", "--arch", "sunda", "--filter", filter]).output().unwrap();
        assert!(out.status.success(), "{filter}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let a = v.as_array().unwrap();
        let r = a.iter().find(|r| r["name"] == filter);
        assert_eq!(r.map(|r| r["guard"].clone()), Some(serde_json::json!(guard)), "{filter}: {v}");
    }
    let out =
        cli().args(["--json", "csr", "list", "--arch", "sunda", "--filter", "misc_ram.device_id"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["guard"], serde_json::Value::Null);
    // Text: the class after the access, a field guard with its field.
    let out = cli().args(["csr", "list", "--arch", "cayman", "--filter", "misc_ram.reset_"]).output().unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.lines().filter(|l| l.contains("misc_ram.reset_")).all(|l| l.contains(" guard=reset")), "{s}");
    // Help says what the markers mean.
    let out = cli().args(["csr", "list", "--help"]).output().unwrap();
    let h = String::from_utf8(out.stdout).unwrap();
    assert!(h.contains("`blocked`") && h.contains("`guard=CLASS`") && h.contains("sequencer-control"), "{h}");
}
