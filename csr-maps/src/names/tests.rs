use super::*;
use crate::{CAYMAN, SUNDA};

#[test]
fn prefixes_match_by_component() {
    let p = components("udma[33].m2s.q[0]").unwrap_or_default();
    assert!(is_under(&p, "udma[33].m2s.q[0].head"));
    assert!(!is_under(&p, "udma[33].m2s.q[1].head"));
    assert!(!is_under(&p, "udma[3].m2s.q[0].head"));
    assert!(!is_under(&p, "udma[33].m2s"));
    let all = components("udma[0x21].m2s.q").unwrap_or_default();
    assert!(is_under(&all, "udma[33].m2s.q[15].tail"));
    let single = components("misc_ram[0]").unwrap_or_default();
    assert!(is_under(&single, "misc_ram.device_id"));
    assert!(components("udma[x]").is_none());
    assert_eq!(SUNDA.registers_under("").err(), Some(CsrError::EmptyPrefix));
    assert_eq!(SUNDA.registers_under("misc_ram.device_id").map(|v| v.len()).ok(), Some(1));
}

#[test]
fn a_prefix_lists_its_registers_in_order_or_says_why_there_are_none() {
    let q = SUNDA.registers_under("udma[33].m2s.q[0].").unwrap_or_default();
    assert!(q.len() > 3, "{}", q.len());
    assert!(q.iter().all(|r| r.name.starts_with("udma[33].m2s.q[0].")), "{q:?}");
    assert!(q.windows(2).all(|w| w[0].offset < w[1].offset), "description order is offset order here");
    let every_q = SUNDA.registers_under("udma[33].m2s.q").unwrap_or_default();
    assert_eq!(every_q.len() % q.len(), 0);
    assert!(every_q.len() > q.len());
    // An offset: that one register.
    let r = SUNDA.resolve("misc_ram.device_id").expect("device_id");
    let by_off = SUNDA.registers_under(&format!("{:#x}", r.offset)).expect("by offset");
    assert_eq!(by_off, vec![r]);
    assert_eq!(SUNDA.registers_under("udma[x]").err(), Some(CsrError::BadPrefix("udma[x]".into())));
    assert!(matches!(SUNDA.registers_under("no_such_block"), Err(CsrError::UnknownName(_))));
    assert!(matches!(SUNDA.registers_under("udma[9999].m2s"), Err(CsrError::NoInstance { .. })));
    // A name the block does not have: nothing under it; a path the resolver refuses for
    // another reason: that reason.
    assert_eq!(SUNDA.registers_under("misc_ram.nope").err(), Some(CsrError::NothingUnder("misc_ram.nope".into())));
    let e = SUNDA.registers_under("misc_ram.device_id.x").err();
    assert!(matches!(&e, Some(CsrError::BadPath { reason, .. }) if reason.contains("has no members")), "{e:?}");
}

#[test]
fn a_register_is_found_by_path_or_by_offset() {
    let r = CAYMAN.register("udma[5].m2s.q[3].rlimit_mask").expect("path");
    assert_eq!(r.name, "udma[5].m2s.q[3].rlimit_mask");
    assert_eq!(CAYMAN.register(&format!("{:#x}", r.offset)).as_ref(), Ok(&r));
    assert_eq!(CAYMAN.register(&r.offset.to_string()).as_ref(), Ok(&r), "decimal");
    assert_eq!(CAYMAN.register("0xzz").err(), Some(CsrError::BadOffset("0xzz".into())));
    assert!(matches!(CAYMAN.register("0x3"), Err(CsrError::NoRegisterAt { offset: 3, .. })));
}

#[test]
fn paths_resolve_to_their_canonical_names_and_back() {
    for r in SUNDA.registers().iter().step_by(97) {
        let back = SUNDA.resolve(&r.name).expect("canonical name resolves");
        assert_eq!(&back, r);
        assert_eq!(SUNDA.lookup(r.bar, r.offset).as_ref(), Ok(r), "{}", r.name);
    }
    // The index of a single instance may be left out or given as 0.
    let a = SUNDA.resolve("misc_ram.device_id").expect("no index");
    assert_eq!(SUNDA.resolve("misc_ram[0].device_id").as_ref(), Ok(&a));
}

#[test]
fn bad_paths_are_refused_with_the_reason() {
    for (path, reason) in [
        ("udma[33]..head", "empty component"),
        ("udma[33.m2s", "missing `]`"),
        ("udma[x].m2s", "index is not a number"),
        ("[3].m2s", "index without a name"),
    ] {
        match SUNDA.resolve(path) {
            Err(CsrError::BadPath { reason: r, .. }) => assert_eq!(r, reason, "{path}"),
            other => panic!("{path}: {other:?}"),
        }
    }
    let e = SUNDA.resolve("udma.m2s.q[0].head").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("give an index"), "{e}");
    let e = SUNDA.resolve("udma[33].m2s").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("is a block, not a register"), "{e}");
}

#[test]
fn numbers_are_decimal_or_hex() {
    assert_eq!(parse_u64("42"), Some(42));
    assert_eq!(parse_u64(" 0x2A "), Some(42));
    assert_eq!(parse_u64("0X1_0000"), Some(0x10000));
    assert_eq!(parse_u64("x"), None);
    assert_eq!(parse_u64(""), None);
}
