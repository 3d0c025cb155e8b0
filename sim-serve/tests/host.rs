//! The device host ([`sim_serve::host`]) in this process, on a thread: two clients' data
//! paths to one device (hal over vfio-user), `end` taking one connection's mappings away while
//! the other works on, the exit policy (linger after the last connection, no first connect),
//! control lines, malformed frames, the socket's lifecycle, and the request wire (proptest).

use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csr_maps::{Arch, CAYMAN, SUNDA};
use proptest::prelude::*;
use sim::SimStats;
use sim_serve::host::{self, wire, Host, HostConfig, HostError, Reply, Request};
use sim_serve::{ConnOptions, ServeError};
use vfio::user::{UserOptions, VfioUserPlatform};

const HBM: u64 = 1 << 28;

/// A fresh directory for one test's socket.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nv-sim-host-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(arch: &'static Arch, name: &str) -> HostConfig {
    let mut cfg = HostConfig::new(arch, dir(name).join("host.sock"));
    cfg.hbm_bytes = Some(HBM);
    cfg
}

type Running = JoinHandle<Result<(), ServeError>>;

/// Bind and run a host on a thread: the device (for checks from this side) and the thread.
fn start(cfg: &HostConfig) -> (sim::SimDevice, Running) {
    let h = Host::bind(cfg).unwrap();
    let sim = h.device().clone();
    (sim, std::thread::spawn(move || h.run()))
}

/// Poll `cond` every 10 ms for up to 10 s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The host exited cleanly and took its socket file with it.
fn exited(h: Running, socket: &Path) {
    wait_until("the host exits", || h.is_finished());
    h.join().unwrap().unwrap();
    assert!(!socket.exists(), "{} removed", socket.display());
    if let Some(d) = socket.parent() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Client slot `k`'s IOVA window (disjoint per slot, as the broker hands them out).
fn window(k: u64) -> Range<u64> {
    (1 << 36) * (k + 1)..(1 << 36) * (k + 2)
}

/// A client's data path: `connect`, then hal on vfio-user over the stream, with NCs `ncs`.
fn client(socket: &Path, k: u64, ncs: Range<usize>) -> (u64, Arc<VfioUserPlatform>, hal::Device) {
    let (id, stream) = host::connect(socket, &ConnOptions { iova_window: window(k), ncs: ncs.clone() }).unwrap();
    let opts = UserOptions {
        iova_window: window(k),
        irq_vectors: ncs.clone().map(|n| n as u32).collect(),
        modeled_writes: true,
        location: format!("sim:shared:test:{k}"),
        posted_writes: true,
        fast_path: false,
    };
    let p = Arc::new(VfioUserPlatform::from_stream(stream, opts).unwrap());
    let dopts = hal::DeviceOptions {
        poll: hal::PollTiming::fast(),
        hbm_limit: Some(HBM),
        owned_ncs: Some(ncs),
        ..Default::default()
    };
    let d = hal::Device::open(p.clone(), dopts).unwrap();
    d.init().unwrap();
    (id, p, d)
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..4096u32).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn two_connections_share_one_device_and_end_takes_only_one_away() {
    let cfg = config(&CAYMAN, "two");
    let (sim, h) = start(&cfg);
    let sock = &cfg.socket;
    // The host's own driver handle's mappings (its dummy ring), at the bottom of the space.
    let own = host::stats(sock).unwrap().iommu_mappings;
    assert!(own > 0, "the host brought the device up and prepared its dummy ring");
    // NC0 and NC2: different HBM channels, so the two clients' allocators do not meet.
    let (ida, pa, da) = client(sock, 0, 0..1);
    let (idb, pb, db) = client(sock, 1, 2..3);
    assert_ne!(ida, idb);

    // One device: what A writes into device memory B reads back, and the other way round.
    let buf = da.alloc_device(0, 4096, 4096).unwrap();
    da.write_device(0, buf.addr(), &pattern(1)).unwrap();
    let mut out = vec![0u8; 4096];
    db.read_device(2, buf.addr(), &mut out).unwrap();
    assert_eq!(out, pattern(1), "B reads what A wrote");
    db.write_device(2, buf.addr(), &pattern(2)).unwrap();
    da.read_device(0, buf.addr(), &mut out).unwrap();
    assert_eq!(out, pattern(2), "A reads what B wrote");

    // The mappings they made are the device's, each in its window.
    let before = host::stats(sock).unwrap();
    assert_eq!(before, sim.stats(), "every field over the wire");
    assert!(before.iommu_mappings >= 2, "{before:?}");
    let (in_a, in_b) = (sim.external_mappings_in(window(0)), sim.external_mappings_in(window(1)));
    assert!(in_a > 0 && in_b > 0, "A {in_a}, B {in_b}");
    assert_eq!(before.iommu_mappings, own + (in_a + in_b) as u64);

    // Each connection is described by its bounds (what a restarted broker checks a client's
    // claim to its connection against); an unknown one is refused.
    assert_eq!(host::describe(sock, ida).unwrap(), (window(0), 0..1));
    assert_eq!(host::describe(sock, idb).unwrap(), (window(1), 2..3));
    assert!(host::describe(sock, 1 << 40).is_err());

    // End A: its mappings are gone when `end` returns; B's are not.
    host::end(sock, ida).unwrap();
    assert!(host::describe(sock, ida).is_err(), "an ended connection is no longer described");
    let after = host::stats(sock).unwrap();
    assert_eq!(after.iommu_mappings, before.iommu_mappings - in_a as u64, "{after:?}");
    assert_eq!(sim.external_mappings_in(window(0)), 0);
    assert_eq!(sim.external_mappings_in(window(1)), in_b);
    // Idempotent: again, and an id that never was.
    host::end(sock, ida).unwrap();
    host::end(sock, 1 << 40).unwrap();
    // B's window is taken while B lives; A's is free again.
    let half = window(1).start + (1 << 20)..window(1).end + (1 << 20);
    match host::connect(sock, &ConnOptions { iova_window: half, ncs: 2..3 }) {
        Err(HostError::Refused { message, .. }) => assert!(message.contains("overlaps"), "{message}"),
        other => panic!("an overlapping window: {other:?}"),
    }
    drop(host::connect(sock, &ConnOptions { iova_window: window(0), ncs: 0..1 }).unwrap());

    // A's device is unreachable now: an error, no panic.
    assert!(!da.reachable());
    assert!(da.read_device(0, buf.addr(), &mut out).is_err());
    // B works on.
    db.write_device(2, buf.addr(), &pattern(3)).unwrap();
    db.read_device(2, buf.addr(), &mut out).unwrap();
    assert_eq!(out, pattern(3));
    drop((buf, da, pa));

    // B leaves: its cleanup empties the IOMMU, and the host (linger 1 s) exits.
    drop((db, pb));
    wait_until("B's mappings go", || sim.stats().iommu_mappings == own);
    exited(h, sock);
}

#[test]
fn the_host_lingers_after_the_last_connection_then_exits_and_removes_its_socket() {
    let mut cfg = config(&SUNDA, "linger");
    cfg.linger = Duration::from_millis(200);
    let (_sim, h) = start(&cfg);
    let sock = &cfg.socket;
    let mode = std::fs::metadata(sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (_, s) = host::connect(sock, &ConnOptions { iova_window: window(0), ncs: 0..1 }).unwrap();
    // Live: however long it idles, the host stays (well past the linger).
    std::thread::sleep(Duration::from_millis(600));
    assert!(!h.is_finished(), "a live data connection holds the host");
    assert!(host::stats(sock).is_ok());
    drop(s);
    exited(h, sock);
    // Gone: a client gets a typed error.
    assert!(matches!(host::stats(sock), Err(HostError::Connect { .. })));
}

#[test]
fn the_host_exits_when_nobody_connects() {
    let mut cfg = config(&SUNDA, "first");
    cfg.first_connect = Duration::from_millis(300);
    let (_sim, h) = start(&cfg);
    // A stats request is not a data connection: it does not keep the host.
    assert!(host::stats(&cfg.socket).is_ok());
    exited(h, &cfg.socket);
}

#[test]
fn control_lines_answer_and_a_bad_fault_spec_is_an_error() {
    let cfg = config(&SUNDA, "control");
    let (sim, h) = start(&cfg);
    let sock = &cfg.socket;
    let r = host::control(sock, "stats").unwrap();
    assert!(r.starts_with("SimStats {"), "{r}");
    let r = host::control(sock, "no-such-fault@nc0").unwrap();
    assert!(r.starts_with("error: "), "{r}");
    let r = host::control(sock, "hbm-ue@nc0").unwrap();
    assert_eq!(r, "ok hbm-ue@nc0");
    drop(sim);
    // End the host: a connection that comes and goes.
    drop(host::connect(sock, &ConnOptions { iova_window: window(0), ncs: 0..1 }).unwrap());
    exited(h, sock);
}

/// Send raw bytes as a request and read the host's reply frame.
fn raw(socket: &Path, bytes: &[u8]) -> Reply {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    Reply::decode(&wire::read_frame(&mut s).unwrap()).unwrap()
}

#[test]
fn a_malformed_frame_gets_an_error_and_the_host_serves_on() {
    let cfg = config(&SUNDA, "malformed");
    let (_sim, h) = start(&cfg);
    let sock = &cfg.socket;
    // The host's own driver handle's mappings (its dummy ring).
    let own = host::stats(sock).unwrap().iommu_mappings;
    // A data connection lives across the garbage.
    let (_, live) = host::connect(sock, &ConnOptions { iova_window: window(0), ncs: 0..1 }).unwrap();
    // A version this build does not speak (one past its own).
    let mut other_version = Request::Stats.encode();
    other_version[4..6].copy_from_slice(&(wire::VERSION + 1).to_le_bytes());
    let mut long = Request::Stats.encode();
    long[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut reversed = Request::End { id: 0 }.encode();
    reversed[6] = 1; // CONNECT with an END's body: too short
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("magic", b"GET / HTTP/1.0\r\n\r\n".to_vec()),
        ("version", other_version),
        ("bytes", long),
        ("ends early", reversed),
        ("is a reply", Reply::Ok.encode()),
    ];
    for (want, bytes) in cases {
        match raw(sock, &bytes) {
            Reply::Error(m) => assert!(m.contains(want), "{want}: {m}"),
            other => panic!("{want}: {other:?}"),
        }
    }
    // A header cut short, then the stream closed: the host just closes too.
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&Request::Stats.encode()[..5]).unwrap();
    drop(s);
    // A Connect with a reversed range.
    let mut b = Request::Connect { iova_window: 0..1, ncs: 0..1 }.encode();
    b[12..20].copy_from_slice(&5u64.to_le_bytes());
    assert!(matches!(raw(sock, &b), Reply::Error(m) if m.contains("reversed")));
    // Still serving.
    assert_eq!(host::stats(sock).unwrap().iommu_mappings, own);
    drop(live);
    exited(h, sock);
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_host_is_refused() {
    let cfg = config(&SUNDA, "stale");
    std::fs::create_dir_all(cfg.socket.parent().unwrap()).unwrap();
    // A socket file nobody listens on (its host died).
    drop(UnixListener::bind(&cfg.socket).unwrap());
    let (_sim, h) = start(&cfg);
    assert!(host::stats(&cfg.socket).is_ok());
    match Host::bind(&cfg) {
        Err(ServeError::HostRunning(p)) => assert_eq!(p, cfg.socket),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second host bound a live socket"),
    }
    // The first is untouched by the refusal.
    assert!(host::stats(&cfg.socket).is_ok());
    drop(host::connect(&cfg.socket, &ConnOptions { iova_window: window(0), ncs: 0..1 }).unwrap());
    exited(h, &cfg.socket);
    // A host bound and never run takes its socket with it too.
    let h = Host::bind(&cfg).unwrap();
    assert!(cfg.socket.exists());
    drop(h);
    assert!(!cfg.socket.exists());
    let _ = std::fs::remove_dir_all(cfg.socket.parent().unwrap());
}

#[test]
fn a_replaced_socket_file_is_left_to_its_new_owner() {
    let mut cfg = config(&SUNDA, "replaced");
    cfg.first_connect = Duration::from_millis(200);
    let h = Host::bind(&cfg).unwrap();
    // Someone else's socket now lives at the path (the inode differs).
    std::fs::remove_file(&cfg.socket).unwrap();
    let _other = UnixListener::bind(&cfg.socket).unwrap();
    h.run().unwrap();
    assert!(cfg.socket.exists(), "not this host's file: left in place");
    let _ = std::fs::remove_dir_all(cfg.socket.parent().unwrap());
}

// The wire.

fn stats_strategy() -> impl Strategy<Value = SimStats> {
    (
        prop::collection::vec(any::<u64>(), 27),
        any::<i64>(),
        any::<u32>(),
        prop::collection::vec(any::<u64>(), 0..8),
        prop::collection::vec(any::<[u32; csr_maps::Engine::COUNT]>(), 0..8),
    )
        .prop_map(|(u, device_bytes, last_reset_map, dge_channel_bytes, engine_states)| SimStats {
            iommu_mappings: u[0],
            iommu_bytes: u[1],
            device_bytes,
            dma_faults: u[2],
            dma_aborts: u[3],
            dma_bytes: u[4],
            dma_packets: u[5],
            nq_records: u[6],
            dropped_records: u[7],
            slots_executed: u[8],
            collectives: u[9],
            unclaimed_accesses: u[10],
            resets: u[11],
            fwio_requests: u[12],
            last_reset_map,
            fwio_legacy_misuse: u[13],
            dangling_unmaps: u[14],
            dangling_fetches: u[15],
            queue_cfg_misuse: u[25],
            enabled_engines: u[16],
            enabled_dma_queues: u[17],
            programmed_nq_slots: u[18],
            dge_channel_bytes,
            engine_states,
            threads: u[19],
            device_ns: u[20],
            oob_refused: u[21],
            hbm_written_bytes: u[22],
            hbm_dropped_bytes: u[23],
            hbm_zero_skipped_bytes: u[24],
            fwio_metrics_posted: u[26],
        })
}

fn ordered<T: Ord + Copy>(a: T, b: T) -> Range<T> {
    a.min(b)..a.max(b)
}

fn request_strategy() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), any::<usize>(), any::<usize>())
            .prop_map(|(a, b, c, d)| Request::Connect { iova_window: ordered(a, b), ncs: ordered(c, d) }),
        any::<u64>().prop_map(|id| Request::End { id }),
        Just(Request::Stats),
        ".*".prop_map(|line| Request::Control { line }),
        any::<u64>().prop_map(|id| Request::Describe { id }),
        any::<u32>().prop_map(|nc| Request::Reclaim { nc }),
        any::<u32>().prop_map(|mask| Request::ResetNcs { mask }),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(cmd, payload)| Request::Fwio { cmd, payload }),
    ]
}

fn reply_strategy() -> impl Strategy<Value = Reply> {
    prop_oneof![
        any::<u64>().prop_map(|id| Reply::Connected { id }),
        Just(Reply::Ok),
        stats_strategy().prop_map(|s| Reply::Stats(Box::new(s))),
        ".*".prop_map(Reply::Control),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Reply::Fwio),
        (0u8..4, ".*").prop_map(|(k, message)| Reply::Failed {
            kind: [
                host::wire::Failure::Device,
                host::wire::Failure::FirmwareTimeout,
                host::wire::Failure::Firmware,
                host::wire::Failure::Invalid
            ][k as usize],
            message
        }),
        (any::<u64>(), any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c, d)| Reply::Described {
            iova_window: a.min(b)..a.max(b),
            ncs: c.min(d) as usize..c.max(d) as usize
        }),
        ".*".prop_map(Reply::Error),
    ]
}

/// Every tag, known or not, with a valid header: what reaches the field decoders.
fn framed(tag: u16, body: &[u8]) -> Vec<u8> {
    let mut f = wire::MAGIC.to_vec();
    f.extend_from_slice(&wire::VERSION.to_le_bytes());
    f.extend_from_slice(&tag.to_le_bytes());
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(body);
    f
}

proptest! {
    #[test]
    fn every_message_round_trips(req in request_strategy(), rep in reply_strategy()) {
        let f = req.encode();
        prop_assert_eq!(Request::decode(&f).unwrap(), req.clone());
        prop_assert_eq!(wire::read_frame(&mut f.as_slice()).unwrap(), f.clone());
        let not_a_reply = matches!(Reply::decode(&f), Err(wire::DecodeError::Kind { want: "reply", .. }));
        prop_assert!(not_a_reply);
        let f = rep.encode();
        prop_assert_eq!(Reply::decode(&f).unwrap(), rep);
        let not_a_request = matches!(Request::decode(&f), Err(wire::DecodeError::Kind { want: "request", .. }));
        prop_assert!(not_a_request);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        tag in prop_oneof![Just(1u16), Just(2), Just(3), Just(4), Just(0x8001), Just(0x8002), Just(0x8003),
            Just(0x8004), Just(0x80ff), any::<u16>()],
        cut in any::<usize>(),
    ) {
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
        let _ = wire::read_frame(&mut bytes.as_slice());
        let f = framed(tag, &bytes);
        let _ = Request::decode(&f);
        let _ = Reply::decode(&f);
        let _ = wire::read_frame(&mut f.as_slice());
        // Truncations of a valid frame: an error, never a panic or a wrong message.
        let stats = SimStats { engine_states: vec![[1; csr_maps::Engine::COUNT]; 3], ..Default::default() };
        let good = Reply::Stats(Box::new(stats)).encode();
        let cut = cut % good.len();
        prop_assert!(Reply::decode(&good[..cut]).is_err());
        prop_assert!(wire::read_frame(&mut &good[..cut]).is_err());
    }
}

/// What acts on the device as a whole is the host's own driver's: a reclaim of an NC a
/// connection drove (the broker's cleanup of a process that went), a firmware reset and a
/// FW-IO request through the mailbox; an NC the device does not have is an invalid request,
/// with its kind.
#[test]
fn the_host_reclaims_and_serves_the_mailbox_in_its_own_process() {
    let cfg = config(&CAYMAN, "ops");
    let (sim, h) = start(&cfg);
    let sock = &cfg.socket;
    let (id, pa, da) = client(sock, 0, 1..2);
    let buf = da.alloc_device(0, 4096, 4096).unwrap();
    da.write_device(1, buf.addr(), &pattern(7)).unwrap();
    let resets = sim.stats().resets;
    host::reclaim(sock, 1).unwrap();
    assert!(sim.stats().resets > resets, "the NC was reset by the firmware");
    host::reset_ncs(sock, 0b10).unwrap();
    let fw = sim.stats().fwio_requests;
    let _ = host::fwio(sock, 1, &[]);
    assert!(sim.stats().fwio_requests > fw, "the request reached the firmware");
    match host::reclaim(sock, 99) {
        Err(HostError::Failed { kind: host::wire::Failure::Invalid, .. }) => {}
        other => panic!("NC 99: {other:?}"),
    }
    drop((buf, da, pa));
    host::end(sock, id).unwrap();
    exited(h, sock);
}
