use super::*;
use proptest::prelude::*;

/// `body` as a frame: its length in front.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn arb_str() -> impl Strategy<Value = String> {
    "[a-z0-9:. /-]{0,40}"
}

fn arb_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<bool>(), arb_str(), arb_str()).prop_map(|(t, command, runtime_version)| Request::Hello {
            role: if t { Role::Tool } else { Role::Runtime },
            command,
            runtime_version
        }),
        (arb_str(), any::<u32>()).prop_map(|(arch, index)| Request::Attach { spec: DeviceSpec::Sim { arch, index } }),
        arb_str().prop_map(|b| Request::Attach { spec: DeviceSpec::Pci(b) }),
        (any::<u32>(), any::<u32>(), any::<u32>(), 0u8..3, any::<u8>()).prop_map(|(device, a, b, k, lnc)| {
            Request::Lease {
                device,
                want: match k {
                    0 => Want::All,
                    1 => Want::Count(a),
                    _ => Want::Range { first: a, count: b },
                },
                lnc,
            }
        }),
        (
            arb_str(),
            (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()),
            proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>()), 0..4),
            (0u8..3, any::<u32>())
        )
            .prop_map(|(bdf, (iova_start, first, count, path), grants, (h, ioas))| Request::Rejoin {
                spec: DeviceSpec::Pci(bdf),
                iova_start,
                first,
                count,
                path,
                grants: grants.into_iter().map(|(chan, addr, len)| Grant { chan, addr, len }).collect(),
                handoff: match h {
                    0 => Handoff::None,
                    1 => Handoff::Iommufd { ioas },
                    _ => Handoff::NoIommu,
                },
            }),
        any::<u32>().prop_map(|device| Request::Release { device }),
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(device, chan, len)| Request::AllocHbm {
            device,
            chan,
            len
        }),
        (any::<u32>(), any::<u64>()).prop_map(|(device, handle)| Request::FreeHbm { device, handle }),
        any::<u32>().prop_map(|device| Request::Detach { device }),
        Just(Request::Query),
        (any::<u32>(), any::<u32>()).prop_map(|(device, mask)| Request::ResetNcs { device, mask }),
        (any::<u32>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..=MAX_FWIO))
            .prop_map(|(device, cmd, payload)| Request::Fwio { device, cmd, payload }),
    ]
}

fn arb_reply() -> impl Strategy<Value = Reply> {
    let client = (any::<u32>(), arb_str(), arb_str(), any::<u32>(), any::<u32>(), any::<u64>()).prop_map(
        |(pid, command, runtime_version, first, count, hbm_bytes)| ClientInfo {
            pid,
            command,
            runtime_version,
            first,
            count,
            hbm_bytes,
        },
    );
    let dev = (
        any::<u32>(),
        arb_str(),
        arb_str(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<bool>(),
        proptest::collection::vec(client, 0..4),
    )
        .prop_map(|(device, name, arch, ncs, hbm_granted, iova_windows, adopting, clients)| DeviceInfo {
            device,
            name,
            arch,
            ncs,
            hbm_granted,
            iova_windows,
            iommu_mappings: hbm_granted ^ 0x5a,
            collectives: ncs as u64 * 3,
            adopting,
            clients,
        });
    prop_oneof![
        any::<u32>().prop_map(|broker_pid| Reply::Hello { broker_pid }),
        (any::<u32>(), arb_str(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(device, arch, ncs, iova_start, iova_len)| Reply::Attached { device, arch, ncs, iova_start, iova_len }
        ),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u8>(), any::<u64>())
            .prop_map(|(device, first, count, fds, path)| Reply::Leased { device, first, count, fds, path }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(handle, addr, len)| Reply::Hbm { handle, addr, len }),
        Just(Reply::Ok),
        proptest::collection::vec(dev, 0..3).prop_map(Reply::Query),
        proptest::collection::vec(any::<u8>(), 0..=MAX_FWIO).prop_map(|data| Reply::Fwio { data }),
        (1u16..=16, any::<u32>(), arb_str()).prop_map(|(c, owner_pid, message)| Reply::Error {
            code: ErrorCode::from_u16(c).unwrap(),
            owner_pid,
            message
        }),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(m in arb_request()) {
        let f = m.encode();
        prop_assert_eq!(Request::decode(&f).unwrap(), m);
    }

    #[test]
    fn replies_round_trip(m in arb_reply()) {
        let f = m.encode();
        prop_assert_eq!(Reply::decode(&f).unwrap(), m);
    }

    /// Arbitrary bytes never panic the decoders.
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Request::decode(&b);
        let _ = Reply::decode(&b);
        let _ = FORMAT.read_frame(&mut b.as_slice());
        let mut with_version = VERSION.to_le_bytes().to_vec();
        with_version.extend_from_slice(&b);
        let _ = Request::decode(&framed(&with_version));
        let _ = Reply::decode(&framed(&with_version));
    }

    /// Every truncation of a valid message is an error, never a panic or another message.
    #[test]
    fn truncations_are_errors(m in arb_request(), cut in 0usize..64) {
        let f = m.encode();
        let b = &f[4..];
        if cut < b.len() {
            prop_assert!(Request::decode(&framed(&b[..cut])).is_err());
            prop_assert!(Request::decode(&f[..cut]).is_err());
        }
        let mut longer = b.to_vec();
        longer.push(0);
        prop_assert_eq!(Request::decode(&framed(&longer)), Err(ProtoError::Trailing(1)));
    }
}

#[test]
fn versions_tags_and_sizes_are_checked() {
    let mut f = Request::Query.encode();
    f[4] = 9;
    assert_eq!(Request::decode(&f), Err(ProtoError::Version { got: 9, want: VERSION }));
    let mut f = Request::Query.encode();
    f[6] = 200;
    assert_eq!(Request::decode(&f), Err(ProtoError::Tag { what: "request", tag: 200 }));
    assert_eq!(
        FORMAT.frame_len(&((MAX_FRAME + 1) as u32).to_le_bytes()),
        Err(ProtoError::FrameTooLong { len: MAX_FRAME + 1, max: MAX_FRAME })
    );
    // The layout: length, version, tag, fields.
    let f = Request::Release { device: 5 }.encode();
    assert_eq!(f, [7, 0, 0, 0, VERSION as u8, 0, 5, 5, 0, 0, 0]);
    // A string announcing more bytes than the frame holds.
    let mut f = Request::Attach { spec: DeviceSpec::Pci("0000:00:1e.0".into()) }.encode();
    f[8] = 0xff;
    assert!(matches!(Request::decode(&f), Err(ProtoError::Truncated { .. })));
    // Non-UTF-8 in a string.
    let mut f = Request::Attach { spec: DeviceSpec::Pci("ab".into()) }.encode();
    let n = f.len();
    f[n - 1] = 0xff;
    assert_eq!(Request::decode(&f), Err(ProtoError::Utf8 { what: "string" }));
    // A long name is cut at a character boundary, not refused.
    let long = "é".repeat(MAX_STR);
    let f = Request::Hello { role: Role::Tool, command: long, runtime_version: String::new() }.encode();
    match Request::decode(&f).unwrap() {
        Request::Hello { command, .. } => assert!(command.len() <= MAX_STR && command.chars().all(|c| c == 'é')),
        m => panic!("{m:?}"),
    }
}

/// Every code decodes to itself and only the codes decode: the wire numbers are the enum's
/// discriminants, 1..=16 without a gap.
#[test]
fn error_codes_are_their_discriminants() {
    let known: Vec<u16> = (0..=u16::MAX).filter(|&v| ErrorCode::from_u16(v).is_some()).collect();
    assert_eq!(known, (1..=16).collect::<Vec<u16>>());
    for v in known {
        assert_eq!(ErrorCode::from_u16(v).map(u16::from), Some(v));
    }
    assert_eq!(ErrorCode::from_u16(12), Some(ErrorCode::Device));
    assert_eq!(ErrorCode::from_u16(16), Some(ErrorCode::Stopped));
}
