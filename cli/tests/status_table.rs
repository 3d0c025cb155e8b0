//! The one status table: every variant of every error type that can reach a front end, with
//! the `NRT_STATUS` the CLI and libnrt.so report for it (docs/facts/libnrt.md §5.7).
//!
//! For each type, `variant` is an exhaustive `match` (no wildcard): a new variant does not
//! compile until it is listed here, and the test fails until an instance of it is in the table
//! with its status.

use std::collections::BTreeSet;

use csr_maps::CsrError;
use fabric::FabricError;
use hal::q7::UcodeError;
use hal::HalError;
use neff::{Engine, NeffError, NrtStatus as S, Status};
use runtime::collectives::{CollectiveError, Mismatch, Signature, Site};
use runtime::error::{IoRole, TensorAccess};
use runtime::state::{DlrModelState, StateError};
use runtime::{RtError, RtErrorKind, StageError, StageErrorKind};
use select::{MissingBackend, SelectError, SpecProblem};
use vfio::PciAddress;

/// Check that `table` covers variants `0..count` (as numbered by `variant`) and that each
/// entry's `status()` is the listed one.
fn check<E: Status + std::fmt::Debug>(name: &str, count: usize, variant: fn(&E) -> usize, table: Vec<(E, S)>) {
    let mut seen = BTreeSet::new();
    for (e, want) in &table {
        assert_eq!(e.status(), *want, "{name}: {e:?}");
        seen.insert(variant(e));
    }
    let missing: Vec<usize> = (0..count).filter(|i| !seen.contains(i)).collect();
    assert!(missing.is_empty(), "{name}: variants {missing:?} have no entry in the status table");
}

fn addr() -> PciAddress {
    PciAddress { domain: 0, bus: 0x3b, device: 0, function: 0 }
}

fn io() -> std::io::Error {
    std::io::Error::other("boom")
}

fn csr(e: &CsrError) -> usize {
    match e {
        CsrError::Index { .. } => 0,
        CsrError::NoInstance { .. } => 1,
        CsrError::UnknownName(_) => 2,
        CsrError::BadPath { .. } => 3,
        CsrError::NoRegisterAt { .. } => 4,
        CsrError::UnknownArch(_) => 5,
        CsrError::Mmio(_) => 6,
        CsrError::BadOffset(_) => 7,
        CsrError::EmptyPrefix => 8,
        CsrError::BadPrefix(_) => 9,
        CsrError::NothingUnder(_) => 10,
    }
}

fn csr_table() -> Vec<(CsrError, S)> {
    vec![
        (CsrError::Index { what: "udma", index: 9, count: 2 }, S::Invalid),
        (CsrError::NoInstance { name: "q7".into(), index: 3 }, S::Invalid),
        (CsrError::UnknownName("nope".into()), S::Invalid),
        (CsrError::BadPath { path: "a..b".into(), reason: "empty".into() }, S::Invalid),
        (CsrError::NoRegisterAt { bar: 0, offset: 8 }, S::Invalid),
        (CsrError::UnknownArch("inf1".into()), S::Invalid),
        (CsrError::Mmio(platform::MmioError::Misaligned { offset: 1, width: 4 }), S::Failure),
        (CsrError::BadOffset("0xzz".into()), S::Invalid),
        (CsrError::EmptyPrefix, S::Invalid),
        (CsrError::BadPrefix("udma[x]".into()), S::Invalid),
        (CsrError::NothingUnder("misc_ram.nope".into()), S::Invalid),
    ]
}

#[test]
fn csr_errors() {
    check("CsrError", 11, csr, csr_table());
}

#[test]
fn ucode_errors() {
    use csr_maps::consts::q7;
    let u = |code| UcodeError { code, what: "x" };
    // A struct with a code: every code nrtucode defines, and one it does not.
    for (code, want) in [
        (q7::ERR_BAD_API, S::Failure),
        (q7::ERR_OOM, S::Resource),
        (q7::ERR_TOO_LARGE, S::Resource),
        (q7::ERR_INVALID, S::Invalid),
        (9, S::Failure),
    ] {
        assert_eq!(u(code).status(), want, "nrtucode error {code}");
    }
}

fn hal_variant(e: &HalError) -> usize {
    match e {
        HalError::Platform(_) => 0,
        HalError::Csr(_) => 1,
        HalError::Mmio(_) => 2,
        HalError::HostMem(_) => 3,
        HalError::UnknownDevice { .. } => 4,
        HalError::NotReady { .. } => 5,
        HalError::NoSuchNc { .. } => 6,
        HalError::NoSuchEngine(_) => 7,
        HalError::OutOfDeviceMemory { .. } => 8,
        HalError::TooLarge { .. } => 9,
        HalError::BadAlignment(_) => 10,
        HalError::DeviceRange { .. } => 11,
        HalError::DmaTimeout { .. } => 12,
        HalError::DmaAbort { .. } => 13,
        HalError::RingSize(_) => 14,
        HalError::NqSize(_) => 15,
        HalError::Fwio { .. } => 16,
        HalError::FwioTimeout { .. } => 17,
        HalError::FwApiTooOld { .. } => 18,
        HalError::FwioPayload(_) => 19,
        HalError::ResetTimeout { .. } => 20,
        HalError::Ucode(_) => 21,
        HalError::ProgramSize(_) => 22,
        HalError::RegionTableFull { .. } => 23,
        HalError::NotOwned { .. } => 24,
        HalError::Owner { .. } => 25,
    }
}

fn hal_table() -> Vec<(HalError, S)> {
    vec![
        (HalError::Platform(platform::PlatformError::NoSuchBar(4)), S::Failure),
        (HalError::Csr(CsrError::UnknownName("x".into())), S::Invalid),
        (HalError::Csr(CsrError::Mmio(platform::MmioError::Misaligned { offset: 1, width: 4 })), S::Failure),
        (HalError::Mmio(platform::MmioError::OutOfRange { offset: 0, width: 4, size: 0 }), S::Failure),
        (HalError::HostMem(platform::HostMemError::Empty), S::FailHostMemAlloc),
        (HalError::UnknownDevice { vendor: 1, device: 2 }, S::Failure),
        (HalError::NotReady { waited_ms: 1, value: 0 }, S::Timeout),
        (HalError::NoSuchNc { nc: 9, count: 2 }, S::Invalid),
        (HalError::NotOwned { what: "nc3".into(), owned: 2..3 }, S::Invalid),
        (HalError::NoSuchEngine(7), S::Invalid),
        (HalError::OutOfDeviceMemory { chan: 0, size: 2, free: 1 }, S::Resource),
        (HalError::TooLarge { what: "buffer", size: u64::MAX }, S::Resource),
        (HalError::BadAlignment(3), S::Invalid),
        (HalError::DeviceRange { addr: 0, len: 1 }, S::Invalid),
        (HalError::DmaTimeout { engine: 0, queue: 0, waited_ms: 1 }, S::Timeout),
        (HalError::DmaAbort { engine: 0, queue: 0, m2s_cause: 1, s2m_cause: 0 }, S::ExecHwErrDmaAbort),
        (HalError::RingSize(3), S::Invalid),
        (HalError::NqSize(3), S::Invalid),
        (HalError::Fwio { cmd: 1, code: 2 }, S::HwError),
        (HalError::FwioTimeout { cmd: 1, attempts: 3 }, S::Timeout),
        (HalError::FwApiTooOld { version: 1, needed: 2 }, S::Failure),
        (HalError::FwioPayload(200), S::Invalid),
        (HalError::ResetTimeout { kind: "device", waited_ms: 1 }, S::Timeout),
        (HalError::Ucode(UcodeError { code: csr_maps::consts::q7::ERR_TOO_LARGE, what: "x" }), S::Resource),
        (HalError::Ucode(UcodeError { code: csr_maps::consts::q7::ERR_INVALID, what: "x" }), S::Invalid),
        (HalError::ProgramSize(3), S::Invalid),
        (HalError::RegionTableFull { needed: 300, entries: 256 }, S::Resource),
        // Through the broker, the status the broker's refusal maps to.
        (HalError::Owner { status: S::Timeout, message: "reset".into() }, S::Timeout),
        (HalError::Owner { status: S::HwError, message: "fwio".into() }, S::HwError),
    ]
}

#[test]
fn hal_errors() {
    check("HalError", 26, hal_variant, hal_table());
}

fn neff_variant(e: &NeffError) -> usize {
    match e {
        NeffError::TooShort { .. } => 0,
        NeffError::HeaderSize { .. } => 1,
        NeffError::Version { .. } => 2,
        NeffError::FeatureBits { .. } => 3,
        NeffError::DataSize { .. } => 4,
        NeffError::Packager { .. } => 5,
        NeffError::EmptyData { .. } => 6,
        NeffError::Digest { .. } => 7,
        NeffError::Archive(_) => 8,
        NeffError::MemCap { .. } => 9,
        NeffError::HostAlloc { .. } => 10,
        NeffError::MissingNeffJson => 11,
        NeffError::MissingMember { .. } => 12,
        NeffError::Manifest { .. } => 13,
        NeffError::InvalidTarget { .. } => 14,
        NeffError::ArchIncompat { .. } => 15,
        NeffError::Sink { .. } => 16,
        NeffError::Io(_) => 17,
    }
}

#[test]
fn neff_errors() {
    let s = || String::from("x");
    let table = vec![
        (NeffError::TooShort { size: 3 }, S::Invalid),
        (NeffError::HeaderSize { header_size: 9, file_size: 9 }, S::Invalid),
        (NeffError::Version { major: 3, minor: 0 }, S::UnsupportedNeffVersion),
        (NeffError::FeatureBits { bits: 1 << 62, trapdoor: 1 << 62 }, S::UnsupportedNeffVersion),
        (NeffError::DataSize { data_size: 9, file_size: 9 }, S::Invalid),
        (NeffError::Packager { pkg_version: 7 }, S::UnsupportedNeffVersion),
        (NeffError::EmptyData { pkg_version: 2 }, S::Invalid),
        (NeffError::Digest { algo: "MD5", expected: s(), actual: s() }, S::Invalid),
        (NeffError::Archive(s()), S::Invalid),
        (NeffError::MemCap { cap: 1 }, S::Invalid),
        (NeffError::HostAlloc { bytes: 1 }, S::FailHostMemAlloc),
        (NeffError::MissingNeffJson, S::Invalid),
        (NeffError::MissingMember { name: s(), referrer: s(), field: s() }, S::Invalid),
        (NeffError::Manifest { member: s(), field: s(), reason: s() }, S::Invalid),
        (NeffError::InvalidTarget { target: s(), member: s() }, S::Invalid),
        (NeffError::ArchIncompat { target: s(), member: s(), neff_arch: s(), device_arch: s() }, S::Invalid),
        (NeffError::Sink { member: s(), status: S::Resource, message: s() }, S::Resource),
        (NeffError::Io(io()), S::Failure),
    ];
    check("NeffError", 18, neff_variant, table);
}

fn select_variant(e: &SelectError) -> usize {
    match e {
        SelectError::BadSpec { .. } => 0,
        SelectError::NoSuchDevice { .. } => 1,
        SelectError::NotNeuron { .. } => 2,
        SelectError::BoundToOther { .. } => 3,
        SelectError::Unbound { .. } => 4,
        SelectError::UnknownBackend { .. } => 5,
        SelectError::BackendMissing(_) => 6,
        SelectError::Vfio { .. } => 7,
        SelectError::Simulator(_) => 8,
        SelectError::Trace { .. } => 9,
        SelectError::NoSimulator(_) => 10,
        SelectError::Broker(_) => 11,
        SelectError::SharedCores(_) => 12,
    }
}

#[test]
fn select_errors() {
    let table = vec![
        (SelectError::BadSpec { spec: "gpu0".into(), problem: SpecProblem::NotAnAddress }, S::Invalid),
        (SelectError::NoSuchDevice { addr: addr(), path: "/sys/x".into() }, S::Invalid),
        (SelectError::NotNeuron { addr: addr(), vendor: 1, device: 2 }, S::Invalid),
        (SelectError::BoundToOther { addr: addr(), driver: "neuron".into() }, S::Failure),
        (SelectError::Unbound { addr: addr() }, S::Failure),
        (SelectError::UnknownBackend { requested: "type1".into() }, S::Invalid),
        (SelectError::BackendMissing(MissingBackend::Any), S::Failure),
        (SelectError::Vfio { addr: Some(addr()), source: vfio::Error::VfioPciMissing }, S::Failure),
        (SelectError::Simulator(sim::SimError::TopologySize(0)), S::Failure),
        (SelectError::Trace { path: "/x".into(), source: io() }, S::Invalid),
        (SelectError::NoSimulator("device `sim`".into()), S::Invalid),
        (
            SelectError::Broker(Box::new(broker::ClientError::Refused {
                code: broker::protocol::ErrorCode::CoresUnavailable,
                owner_pid: 7,
                message: "NeuronCore(s) not available - Requested:nc1-nc1 Available:0".into(),
            })),
            S::Failure,
        ),
        (
            SelectError::Broker(Box::new(broker::ClientError::Refused {
                code: broker::protocol::ErrorCode::Invalid,
                owner_pid: 0,
                message: "nc7-nc8 is beyond the device".into(),
            })),
            S::Invalid,
        ),
        (
            SelectError::Broker(Box::new(broker::ClientError::Refused {
                code: broker::protocol::ErrorCode::OutOfMemory,
                owner_pid: 0,
                message: "x".into(),
            })),
            S::Resource,
        ),
        (SelectError::SharedCores("x".into()), S::Failure),
    ];
    check("SelectError", 13, select_variant, table);
}

fn fabric_variant(e: &FabricError) -> usize {
    match e {
        FabricError::Invalid(_) => 0,
        FabricError::Bootstrap(_) => 1,
        FabricError::Timeout { .. } => 2,
        FabricError::Peer { .. } => 3,
        FabricError::Ofi { .. } => 4,
        FabricError::Broken(_) => 5,
        FabricError::Io { .. } => 6,
        FabricError::Unavailable(_) => 7,
        FabricError::Size { .. } => 8,
    }
}

#[test]
fn fabric_errors() {
    let table = vec![
        (FabricError::Invalid("x".into()), S::Invalid),
        (FabricError::Bootstrap("x".into()), S::NetworkProxyFailure),
        (
            FabricError::Timeout { rank: 0, peers: vec![1], timeout: std::time::Duration::from_secs(1) },
            S::NetworkProxyFailure,
        ),
        (FabricError::Peer { rank: 0, peer: 1, msg: "reset".into() }, S::NetworkProxyFailure),
        (FabricError::Ofi { call: "fi_send", code: -5, msg: "x".into() }, S::ExecHwErrCollectives),
        (FabricError::Broken("x".into()), S::NetworkProxyFailure),
        (FabricError::Io { what: "x".into(), source: io() }, S::NetworkProxyFailure),
        (FabricError::Unavailable("no libfabric".into()), S::Failure),
        (FabricError::Size { rank: 0, peer: 1, expected: 8, got: 4 }, S::NetworkProxyFailure),
    ];
    for (e, _) in &table {
        assert_eq!(e.status_code() as u32, e.status().code());
    }
    check("FabricError", 9, fabric_variant, table);
}

fn state_variant(e: &StateError) -> usize {
    match e {
        StateError::Uninitialized => 0,
        StateError::Closed => 1,
        StateError::ForkedChild { .. } => 2,
        StateError::AlreadyInitialized => 3,
        StateError::IllegalModelTransition { .. } => 4,
        StateError::ModelNotRunning(_) => 5,
    }
}

#[test]
fn state_errors() {
    let table = vec![
        (StateError::Uninitialized, S::Uninitialized),
        (StateError::Closed, S::Closed),
        (StateError::ForkedChild { owner: 1, caller: 2 }, S::Uninitialized),
        (StateError::AlreadyInitialized, S::Failure),
        (StateError::IllegalModelTransition { from: DlrModelState::Invalid, to: DlrModelState::Running }, S::Failure),
        (StateError::ModelNotRunning(DlrModelState::Starting), S::InvalidHandle),
    ];
    check("StateError", 6, state_variant, table);
}

fn site() -> Site {
    Site { graph: "g".into(), engine: Engine::Pe, index: 0 }
}

fn collective_variant(e: &CollectiveError) -> usize {
    match e {
        CollectiveError::NoSuchGroup { .. } => 0,
        CollectiveError::RankOutside { .. } => 1,
        CollectiveError::RankTwice { .. } => 2,
        CollectiveError::NotAMember { .. } => 3,
        CollectiveError::Unmatched { .. } => 4,
    }
}

fn collective_table() -> Vec<(CollectiveError, S)> {
    let signature = Signature { ctype: 0, op: 0, dtype: 0, num_elements: 1 };
    vec![
        (CollectiveError::NoSuchGroup { site: site(), group: 3, groups: 1 }, S::Invalid),
        (CollectiveError::RankOutside { site: site(), group: 0, members: vec![0, 5], rank: 5, ranks: 2 }, S::Invalid),
        (CollectiveError::RankTwice { site: site(), group: 0, members: vec![0, 0], rank: 0 }, S::Invalid),
        (CollectiveError::NotAMember { site: site(), group: 0, members: vec![1], rank: 0 }, S::Invalid),
        (
            CollectiveError::Unmatched {
                site: site(),
                nth: 0,
                group: 0,
                members: vec![0, 1],
                signature,
                peer: "g1".into(),
                rank: 1,
                mismatch: Mismatch::Missing,
            },
            S::Invalid,
        ),
    ]
}

#[test]
fn collective_errors() {
    check("CollectiveError", 5, collective_variant, collective_table());
}

fn stage_variant(e: &StageErrorKind) -> usize {
    use StageErrorKind as K;
    match e {
        K::Device(_) => 0,
        K::VarAlloc { .. } => 1,
        K::Csr(_) => 2,
        K::Ucode { .. } => 3,
        K::Claim { .. } => 4,
        K::TooManyQueues { .. } => 5,
        K::TooManyDescriptors { .. } => 6,
        K::StateBufferFull { .. } => 7,
        K::RegionTableFull { .. } => 8,
        K::UnsupportedDmaOp { .. } => 9,
        K::DmaSizeMismatch { .. } => 10,
        K::PatternShape { .. } => 11,
        K::PatternOverflow { .. } => 12,
        K::PatternTooLarge { .. } => 13,
        K::PatternRuns { .. } => 14,
        K::PatternOffset { .. } => 15,
        K::RawCountTrigger { .. } => 16,
        K::NoDmaBlock { .. } => 17,
        K::SharedQueue { .. } => 18,
        K::SemaphoreRange { .. } => 19,
        K::ReservedSemaphore { .. } => 20,
        K::NoStateBuffer { .. } => 21,
        K::SemaphoreWindow { .. } => 22,
        K::NotPrelinked { .. } => 23,
        K::DuplicateVar { .. } => 24,
        K::WrongVarType { .. } => 25,
        K::Unbound { .. } => 26,
        K::VarAlignment { .. } => 27,
        K::NotStreamed { .. } => 28,
        K::StreamedMemberGone { .. } => 29,
        K::NoWeightSink { .. } => 30,
        K::VirtualBacking { .. } => 31,
        K::UnknownVarId { .. } => 32,
        K::UnknownVar { .. } => 33,
        K::OutsideVar { .. } => 34,
        K::AccessOutsideVar { .. } => 35,
        K::RawAddress { .. } => 36,
        K::BeforeVar { .. } => 37,
        K::SpanOverflow { .. } => 38,
        K::ForbiddenWrite { .. } => 39,
        K::UnknownQueue { .. } => 40,
        K::TriggerOrder { .. } => 41,
        K::CollectiveDtype { .. } => 42,
        K::CollectiveSize { .. } => 43,
        K::CollectiveOffset { .. } => 44,
        K::CollectiveType { .. } => 45,
        K::CollectiveOp { .. } => 46,
        K::NoReplicaGroup { .. } => 47,
        K::NotInGroup { .. } => 48,
        K::GroupTooLarge { .. } => 49,
        K::UnsupportedDgeOp { .. } => 50,
        K::UnsupportedOpcode { .. } => 51,
        K::CollectiveShape { .. } => 53,
        K::ForgedNotification { .. } => 52,
    }
}

/// Every staging kind with its status, each wrapped the way a load reports it.
fn stage_table() -> Vec<(StageErrorKind, S)> {
    use StageErrorKind as K;
    let w = || String::from("ACT slot 3");
    let q = || String::from("q0");
    let v = || String::from("v");
    let claimed = UcodeError { code: csr_maps::consts::q7::ERR_INVALID, what: "core already claimed" };
    vec![
        (K::Device(HalError::DmaTimeout { engine: 0, queue: 0, waited_ms: 1 }), S::Timeout),
        (K::VarAlloc { var: v(), source: HalError::OutOfDeviceMemory { chan: 0, size: 2, free: 1 } }, S::Resource),
        (K::Csr(CsrError::Index { what: "tpb_sem", index: 9, count: 2 }), S::Invalid),
        (
            K::Ucode {
                what: "ucode library l".into(),
                source: UcodeError { code: csr_maps::consts::q7::ERR_TOO_LARGE, what: "x" },
            },
            S::Resource,
        ),
        (K::Ucode { what: "ucode library l".into(), source: claimed }, S::Invalid),
        (K::Claim { core: "NC 0".into(), source: claimed }, S::Resource),
        (K::TooManyQueues { queues: 40, engines: 16 }, S::Resource),
        (K::TooManyDescriptors { queue: q(), total: 1 << 30 }, S::Resource),
        (K::StateBufferFull { var: v(), size: 1 << 40, capacity: 1 << 20 }, S::Resource),
        (K::RegionTableFull { need: 300, have: 256 }, S::Resource),
        (K::UnsupportedDmaOp { queue: q(), block: 0, op: "transpose" }, S::Invalid),
        (K::DmaSizeMismatch { what: w(), src: 1, dst: 2 }, S::Invalid),
        (K::PatternShape { what: w(), sizes: vec![0], steps: vec![] }, S::Invalid),
        (K::PatternOverflow { what: w(), sizes: vec![u64::MAX, 2] }, S::Invalid),
        (K::PatternTooLarge { what: w(), total: 1 << 40 }, S::Invalid),
        (K::PatternRuns { what: w(), count: 1 << 30 }, S::Invalid),
        (K::PatternOffset { what: w() }, S::Invalid),
        (K::RawCountTrigger { queue: q() }, S::Invalid),
        (K::NoDmaBlock { queue: q(), block: 9 }, S::Invalid),
        (K::SharedQueue { queue: q() }, S::Invalid),
        (K::SemaphoreRange { queue: q(), sem: 300 }, S::Invalid),
        (K::ReservedSemaphore { sem: 250 }, S::Invalid),
        (K::NoStateBuffer { nc: 0 }, S::Invalid),
        (K::SemaphoreWindow { offset: 0x1000 }, S::Invalid),
        (K::NotPrelinked { library: "l".into() }, S::Invalid),
        (K::DuplicateVar { graph: "g".into(), name: v() }, S::Invalid),
        (K::WrongVarType { name: v(), found: "input", expected: "output" }, S::Invalid),
        (K::Unbound { role: IoRole::Output, name: v() }, S::Invalid),
        (K::VarAlignment { var: v(), align: 3 }, S::Invalid),
        (K::NotStreamed { var: v() }, S::Invalid),
        (K::StreamedMemberGone { var: v(), member: "m".into() }, S::Invalid),
        (K::NoWeightSink { var: v() }, S::Invalid),
        (K::VirtualBacking { var: v() }, S::Invalid),
        (K::UnknownVarId { what: w(), id: 77 }, S::Invalid),
        (K::UnknownVar { what: w(), name: v() }, S::Invalid),
        (K::OutsideVar { what: w(), var: v(), off: 8, len: 8, size: 8 }, S::Invalid),
        (K::AccessOutsideVar { what: w(), var: v(), off: -4, len: 8, size: 8 }, S::Invalid),
        (K::RawAddress { what: w(), side: "source".into(), addr: 0x10_0000 }, S::Invalid),
        (K::BeforeVar { what: w(), side: "source".into(), bytes: 60, var_id: 1 }, S::Invalid),
        (K::SpanOverflow { what: w(), side: "destination".into() }, S::Invalid),
        (K::ForbiddenWrite { what: w(), addr: 0x2000 }, S::Invalid),
        (K::ForgedNotification { what: w(), opcode: 0xA6, sub_id: 0 }, S::Invalid),
        (K::UnknownQueue { what: w(), queue: q() }, S::Invalid),
        (K::TriggerOrder { what: w() }, S::Invalid),
        (K::CollectiveDtype { what: w(), dtype: 0x7f }, S::Invalid),
        (K::CollectiveSize { what: w() }, S::Invalid),
        (K::CollectiveOffset { what: w(), offset: u64::MAX }, S::Invalid),
        (K::CollectiveType { what: w(), ctype: 0x7f }, S::Invalid),
        (K::CollectiveOp { what: w(), op: 0x7f }, S::Invalid),
        (K::NoReplicaGroup { what: w(), group: 7, groups: 1 }, S::Invalid),
        (K::NotInGroup { what: w(), rank: 2, members: vec![0, 1] }, S::Invalid),
        (K::GroupTooLarge { what: w(), size: 300 }, S::Invalid),
        (K::UnsupportedDgeOp { what: w(), op: 3 }, S::Invalid),
        (K::UnsupportedOpcode { what: w(), opcode: 0x7e }, S::Invalid),
        (K::CollectiveShape { what: w(), why: "x".into() }, S::Invalid),
    ]
}

#[test]
fn stage_errors() {
    let table = stage_table();
    for (k, want) in stage_table() {
        // The error built from the kind carries the kind's status, as does the load failure
        // that wraps it.
        let e = StageError::from(k);
        assert_eq!(e.status, want, "{e:?}");
        let r = RtError::from(RtErrorKind::Stage { graph: "g".into(), source: Box::new(e) });
        assert_eq!(r.status, want, "{r}");
    }
    check("StageErrorKind", 54, stage_variant, table);
}

fn rt_variant(e: &RtErrorKind) -> usize {
    use RtErrorKind as K;
    match e {
        K::Neff(_) => 0,
        K::Device(_) => 1,
        K::State(_) => 2,
        K::Env(_) => 3,
        K::Collective(_) => 4,
        K::Stage { .. } => 5,
        K::Bindings(_) => 6,
        K::NotEnoughNc { .. } => 7,
        K::NoLogicalNc { .. } => 8,
        K::NoDeviceForNc { .. } => 9,
        K::NoXuId { .. } => 10,
        K::Xu(_) => 11,
        K::XuRefused { .. } => 12,
        K::Tracker(_) => 13,
        K::NoDevices => 14,
        K::ModelWithoutNc => 15,
        K::ModelUnloaded => 16,
        K::TensorTooLarge { .. } => 17,
        K::TensorRange { .. } => 18,
        K::AttachedRange { .. } => 19,
        K::NoStorage { .. } => 20,
        K::DifferentNcs { .. } => 21,
        K::NotDmaCapable { .. } => 22,
        K::InputUnbound { .. } => 23,
        K::WrongSize { .. } => 24,
        K::Frontend(_) => 25,
        K::Caller { .. } => 26,
        K::LncUnsupported { .. } => 27,
        K::LncMismatch { .. } => 28,
        K::LncGraphs { .. } => 29,
    }
}

#[test]
fn runtime_errors() {
    use RtErrorKind as K;
    let t = || String::from("t");
    let stage = |k| Box::new(StageError::from(k));
    let table = vec![
        (K::Neff(NeffError::Version { major: 3, minor: 0 }), S::UnsupportedNeffVersion),
        (K::Device(HalError::DmaAbort { engine: 0, queue: 0, m2s_cause: 1, s2m_cause: 0 }), S::ExecHwErrDmaAbort),
        (K::State(StateError::Closed), S::Closed),
        (K::Env(runtime::env::EnvError::NotUnicode { var: "NEURON_RT_EXEC_TIMEOUT" }), S::Invalid),
        (K::Collective(Box::new(collective_table().remove(0).0)), S::Invalid),
        (
            K::Stage { graph: "g".into(), source: stage(StageErrorKind::RegionTableFull { need: 2, have: 1 }) },
            S::Resource,
        ),
        (K::Bindings(stage(StageErrorKind::Unbound { role: IoRole::Input, name: t() })), S::Invalid),
        (K::NotEnoughNc { required: 4, available: 2 }, S::LoadNotEnoughNc),
        (K::NoLogicalNc { nc: 9, visible: 2 }, S::Invalid),
        (K::LncUnsupported { var: "NEURON_LOGICAL_NC_CONFIG", size: 2, arch: "sunda", max: 1 }, S::Invalid),
        (K::LncMismatch { neff: 1, runtime: 2, arch: "cayman", default: 2 }, S::Invalid),
        (K::LncGraphs { graphs: 3, lnc: 2 }, S::Invalid),
        (K::NoDeviceForNc { nc: 9 }, S::Invalid),
        (K::NoXuId { nc: 300 }, S::Invalid),
        (K::Xu(runtime::xu::XuError::ZeroCapacity), S::Failure),
        (K::XuRefused { status: S::QueueFull }, S::QueueFull),
        (K::Tracker(runtime::completion::TrackerError::NoNc), S::Failure),
        (K::NoDevices, S::Failure),
        (K::ModelWithoutNc, S::InvalidHandle),
        (K::ModelUnloaded, S::InvalidHandle),
        (K::TensorTooLarge { name: t(), size: u64::MAX }, S::Resource),
        (K::TensorRange { access: TensorAccess::Write, tensor: t(), off: 8, len: 8, size: 8 }, S::Invalid),
        (K::AttachedRange { off: 8, len: 8, size: 8 }, S::Invalid),
        (K::NoStorage { tensor: t() }, S::Invalid),
        (K::DifferentNcs { src: t(), dst: t() }, S::Invalid),
        (K::NotDmaCapable { tensor: t() }, S::ExecBadInput),
        (K::InputUnbound { name: t() }, S::ExecBadInput),
        (K::WrongSize { role: IoRole::Input, name: t(), got: 4, want: 8 }, S::ExecBadInput),
        (K::Frontend(Box::new(SelectError::Unbound { addr: addr() })), S::Failure),
        (K::Frontend(Box::new(SelectError::UnknownBackend { requested: "x".into() })), S::Invalid),
        (K::Caller { status: S::InvalidHandle, message: "bad handle".into() }, S::InvalidHandle),
    ];
    let table: Vec<(RtError, S)> = table.into_iter().map(|(k, s)| (RtError::from(k), s)).collect();
    for (e, want) in &table {
        assert_eq!(e.status, *want, "{e}");
        assert_eq!(e.kind.status(), *want, "{e}");
    }
    check("RtErrorKind", 30, |e: &RtError| rt_variant(&e.kind), table);
}

/// The CLI's `CliError` takes the status of the error it reports (no mapping of its own),
/// and so does the runtime's `RtError` that libnrt.so returns.
#[test]
fn the_cli_and_the_runtime_report_each_errors_own_status() {
    use cli::report::CliError;
    for (e, want) in hal_table() {
        let msg = e.to_string();
        let c = CliError::from(e);
        assert_eq!((c.status, c.message.as_str()), (want, msg.as_str()));
    }
    for (e, want) in hal_table() {
        assert_eq!(RtError::from(e).status, want);
    }
    for (e, want) in csr_table() {
        assert_eq!(CliError::from(e).status, want);
    }
    let e = SelectError::BadSpec { spec: "gpu0".into(), problem: SpecProblem::NotAnAddress };
    assert_eq!(CliError::from(e).status, S::Invalid);
    assert_eq!(CliError::from(NeffError::Version { major: 3, minor: 0 }).status, S::UnsupportedNeffVersion);
    let r = RtError::from(RtErrorKind::NotEnoughNc { required: 4, available: 2 });
    assert_eq!(CliError::from(r).status, S::LoadNotEnoughNc);
}
