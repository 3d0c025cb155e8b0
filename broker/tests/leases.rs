//! The broker's tables through its socket: leases (exclusive, contiguous, libnrt's refusal
//! line with the owner's pid), 16 processes per device, device memory and handles, forged
//! and malformed requests (an error, nothing changed), cleanup when a client goes away.
//! Each test runs its own broker on its own socket.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use broker::client::{Connect, Loss, Rejoin, Session};
use broker::protocol::{DeviceInfo, DeviceSpec, ErrorCode, Handoff, Reply, Request, Role, Want};
use broker::{Broker, BrokerConfig, ClientError};
use proptest::prelude::*;

struct Running {
    socket: PathBuf,
    stop: broker::server::Stopper,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(name: &str) -> Running {
    let dir = std::env::temp_dir().join(format!("nv-broker-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut cfg = BrokerConfig::new(&socket);
    cfg.idle_exit = None;
    cfg.frame_timeout = Duration::from_secs(2);
    let b = Broker::bind(cfg).unwrap();
    let stop = b.stopper();
    let thread = std::thread::spawn(move || b.run().unwrap());
    Running { socket, stop, thread: Some(thread), dir }
}

fn session(r: &Running, role: Role) -> Session {
    let c = Connect { socket: r.socket.clone(), ..Connect::new(role) };
    Session::connect(&c).unwrap()
}

fn cayman(index: u32) -> DeviceSpec {
    DeviceSpec::Sim { arch: "cayman".into(), index }
}

fn refused(e: ClientError) -> (ErrorCode, u32, String) {
    match e {
        ClientError::Refused { code, owner_pid, message } => (code, owner_pid, message),
        e => panic!("not a refusal: {e:?}"),
    }
}

/// Retry `f` until it gives a value (the broker handles a closed connection on its own
/// thread); bounded so a broken cleanup fails the test.
fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the broker never got there");
}

/// The device's accounting, without the fields a query itself does not change.
fn snapshot(s: &Session) -> Vec<DeviceInfo> {
    s.query().unwrap()
}

#[test]
fn eight_one_core_leases_then_the_ninth_is_refused_with_libnrts_line() {
    let r = start("eight");
    let me = std::process::id();
    let clients: Vec<Session> = (0..8)
        .map(|k| {
            let s = session(&r, Role::Runtime);
            let a = s.attach(cayman(0)).unwrap();
            assert_eq!((a.arch.as_str(), a.ncs), ("cayman", 8));
            let l = s.lease(a.device, Want::Range { first: k, count: 1 }).unwrap();
            assert_eq!((l.first, l.count), (k, 1));
            assert!(l.data_path.is_some(), "a lease comes with its data path");
            s
        })
        .collect();
    let ninth = session(&r, Role::Runtime);
    let a = ninth.attach(cayman(0)).unwrap();
    let (code, owner, msg) = refused(ninth.lease(a.device, Want::Range { first: 1, count: 1 }).unwrap_err());
    assert_eq!(code, ErrorCode::CoresUnavailable);
    assert_eq!(msg, "NeuronCore(s) not available - Requested:nc1-nc1 Available:0");
    assert_eq!(owner, me, "the owner's pid is named");
    let (code, _, msg) = refused(ninth.lease(a.device, Want::Count(1)).unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (ErrorCode::CoresUnavailable, "NeuronCore(s) not available - Requested:1 cores Available:0")
    );
    let (code, ..) = refused(ninth.lease(a.device, Want::All).unwrap_err());
    assert_eq!(code, ErrorCode::CoresUnavailable);
    // Out of range and empty requests are invalid, not "unavailable".
    assert_eq!(refused(ninth.lease(a.device, Want::Range { first: 7, count: 2 }).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(refused(ninth.lease(a.device, Want::Count(0)).unwrap_err()).0, ErrorCode::Invalid);
    let q = snapshot(&ninth);
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].clients.len(), 9);
    let mut cores: Vec<(u32, u32)> = q[0].clients.iter().filter(|c| c.count > 0).map(|c| (c.first, c.count)).collect();
    cores.sort_unstable();
    assert_eq!(cores, (0..8).map(|k| (k, 1)).collect::<Vec<_>>());
    // They leave: the core goes to the ninth once the broker has seen the owner go.
    drop(clients);
    let l = eventually(|| ninth.lease(a.device, Want::Range { first: 1, count: 1 }).ok());
    assert_eq!((l.first, l.count), (1, 1));
}

#[test]
fn sixteen_processes_per_device_the_seventeenth_refused() {
    let r = start("sixteen");
    let runtime = session(&r, Role::Runtime);
    let a = runtime.attach(cayman(0)).unwrap();
    runtime.lease(a.device, Want::Count(2)).unwrap();
    let tools: Vec<Session> = (0..15)
        .map(|_| {
            let s = session(&r, Role::Tool);
            s.attach(cayman(0)).unwrap();
            s
        })
        .collect();
    let extra = session(&r, Role::Tool);
    let (code, _, msg) = refused(extra.attach(cayman(0)).unwrap_err());
    assert_eq!(code, ErrorCode::TooManyClients);
    assert!(msg.contains("16 processes"), "{msg}");
    // A tool leases nothing.
    assert_eq!(refused(tools[0].lease(a.device, Want::Count(1)).unwrap_err()).0, ErrorCode::Invalid);
    // Another device of the set is another 16.
    extra.attach(cayman(1)).unwrap();
    let windows: Vec<u32> = snapshot(&extra).iter().map(|d| d.iova_windows).collect();
    assert_eq!(windows, vec![16, 1]);
    drop(tools);
    // The windows are free again once the tools are gone (the broker notices each close).
    let again = session(&r, Role::Tool);
    eventually(|| again.attach(cayman(0)).ok());
}

#[test]
fn memory_and_handles_are_per_client() {
    let r = start("memory");
    let a = session(&r, Role::Runtime);
    let b = session(&r, Role::Runtime);
    let da = a.attach(cayman(0)).unwrap().device;
    let db = b.attach(cayman(0)).unwrap().device;
    // Memory goes with a lease.
    assert_eq!(refused(a.alloc_hbm(da, 0, 1 << 20).unwrap_err()).0, ErrorCode::Invalid);
    a.lease(da, Want::Range { first: 0, count: 1 }).unwrap();
    b.lease(db, Want::Range { first: 2, count: 1 }).unwrap();
    let ga = a.alloc_hbm(da, 0, 3 << 20).unwrap();
    assert_eq!(ga.len, 4 << 20, "granted as a power of two");
    let gb = b.alloc_hbm(db, 1, 1 << 20).unwrap();
    assert!(ga.addr + ga.len <= gb.addr || gb.addr + gb.len <= ga.addr);
    let before = snapshot(&a);
    assert_eq!(before[0].hbm_granted, (4 << 20) + (1 << 20));
    // B cannot free A's memory, nor a handle that does not exist; nothing changes.
    assert_eq!(refused(b.free_hbm(db, ga.handle).unwrap_err()).0, ErrorCode::NoSuchHandle);
    assert_eq!(refused(b.free_hbm(db, 999_999).unwrap_err()).0, ErrorCode::NoSuchHandle);
    // B cannot take A's core, release on a device it did not attach, or lease twice.
    let (code, owner, _) = refused(b.lease(db, Want::Range { first: 0, count: 1 }).unwrap_err());
    assert_eq!((code, owner), (ErrorCode::AlreadyLeased, 0));
    assert_eq!(refused(b.release(db + 7).unwrap_err()).0, ErrorCode::NotAttached);
    assert_eq!(refused(b.alloc_hbm(db, 99, 1 << 20).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(snapshot(&a), before);
    a.free_hbm(da, ga.handle).unwrap();
    assert_eq!(snapshot(&a)[0].hbm_granted, 1 << 20);
    // Released and detached: back to nothing.
    b.release(db).unwrap();
    b.detach(db).unwrap();
    let q = snapshot(&a);
    assert_eq!((q[0].hbm_granted, q[0].iova_windows), (0, 1));
}

#[test]
fn a_closed_client_is_cleaned_up_and_accounting_returns_to_baseline() {
    let r = start("cleanup");
    let watcher = session(&r, Role::Tool);
    watcher.attach(cayman(0)).unwrap();
    let base = snapshot(&watcher);
    for round in 0..3 {
        let c = session(&r, Role::Runtime);
        let d = c.attach(cayman(0)).unwrap().device;
        c.lease(d, Want::Range { first: 3, count: 2 }).unwrap();
        c.alloc_hbm(d, 1, 1 << 24).unwrap();
        assert_eq!(snapshot(&watcher)[0].clients.len(), 2, "round {round}");
        drop(c);
        let q = eventually(|| Some(snapshot(&watcher)).filter(|q| q[0].clients.len() == 1));
        assert_eq!(q, base, "round {round}: accounting back to baseline");
    }
}

/// Raw frames on a connection, and the reply.
fn raw(r: &Running, frames: &[Vec<u8>]) -> Vec<Reply> {
    let s = UnixStream::connect(&r.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    for f in frames {
        if broker::protocol::send(&s, f, &[]).is_err() {
            break;
        }
        match broker::protocol::recv(&s) {
            Ok((body, _)) => out.push(Reply::decode(&body).unwrap()),
            Err(_) => break,
        }
    }
    out
}

#[test]
fn requests_before_hello_and_bad_versions_are_refused() {
    let r = start("sequence");
    let replies = raw(&r, &[Request::Query.encode()]);
    assert!(matches!(replies.as_slice(), [Reply::Error { code: ErrorCode::Sequence, .. }]), "{replies:?}");
    let mut f = Request::Query.encode();
    f[4] = 7;
    let replies = raw(&r, &[f]);
    assert!(matches!(replies.as_slice(), [Reply::Error { code: ErrorCode::Version, .. }]), "{replies:?}");
    let hello = Request::Hello { role: Role::Tool, command: "t".into(), runtime_version: "0".into() }.encode();
    let replies = raw(&r, &[hello.clone(), hello]);
    assert!(matches!(replies.as_slice(), [Reply::Hello { .. }, Reply::Error { code: ErrorCode::Sequence, .. }]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Arbitrary bytes after a Hello, on a live broker with a client holding cores and
    /// memory: an error or a closed connection, never a crash, and the holder's state is
    /// unchanged.
    #[test]
    fn arbitrary_bytes_change_nothing(junk in proptest::collection::vec(any::<u8>(), 1..200), forged in any::<u64>()) {
        let r = start(&format!("fuzz{}", forged % 1000));
        let holder = session(&r, Role::Runtime);
        let d = holder.attach(cayman(0)).unwrap().device;
        holder.lease(d, Want::Range { first: 0, count: 4 }).unwrap();
        let g = holder.alloc_hbm(d, 0, 1 << 20).unwrap();
        let before = snapshot(&holder);
        {
            let mut s = UnixStream::connect(&r.socket).unwrap();
            let hello = Request::Hello { role: Role::Runtime, command: "fuzz".into(), runtime_version: "0".into() }.encode();
            broker::protocol::send(&s, &hello, &[]).unwrap();
            let _ = broker::protocol::recv(&s).unwrap();
            let _ = s.write_all(&junk);
        }
        // Forged requests from another client: someone else's handle, cores, device.
        let other = session(&r, Role::Runtime);
        let od = other.attach(cayman(0)).unwrap().device;
        prop_assert!(other.free_hbm(od, g.handle).is_err());
        prop_assert!(other.free_hbm(od, forged).is_err());
        let taken = Want::Range { first: (forged % 4) as u32, count: 1 };
        prop_assert!(other.lease(od, taken).is_err());
        prop_assert!(other.release(od).is_err());
        prop_assert!(other.release(forged as u32 | 1 << 31).is_err());
        let held = Rejoin { iova_start: forged, first: 0, count: 4, path: forged, grants: vec![] };
        prop_assert!(other.rejoin(cayman(0), &held, Handoff::None, &[]).is_err());
        drop(other);
        // Let the broker notice the closed connections, then compare.
        let mut tries = 0;
        loop {
            let q = snapshot(&holder);
            if q == before {
                break;
            }
            tries += 1;
            prop_assert!(tries < 500, "state changed: {:?} vs {:?}", q, before);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A re-registration is for devices a broker found live; on a device this broker opened
/// itself, or one it cannot find, or a VFIO device without its descriptors, it is refused and
/// changes nothing.
#[test]
fn a_rejoin_of_what_this_broker_never_lost_is_refused() {
    let r = start("rejoin");
    let a = session(&r, Role::Runtime);
    let att = a.attach(cayman(0)).unwrap();
    a.lease(att.device, Want::Range { first: 0, count: 2 }).unwrap();
    let before = snapshot(&a);
    let b = session(&r, Role::Runtime);
    let held = Rejoin { iova_start: att.iova.start, first: 2, count: 2, path: 0, grants: vec![] };
    let (code, _, msg) = refused(b.rejoin(cayman(0), &held, Handoff::None, &[]).unwrap_err());
    assert_eq!(code, ErrorCode::Invalid, "{msg}");
    assert!(msg.contains("opened by this broker"), "{msg}");
    let (code, _, msg) = refused(b.rejoin(cayman(3), &held, Handoff::None, &[]).unwrap_err());
    assert_eq!(code, ErrorCode::NoSuchDevice, "{msg}");
    let pci = DeviceSpec::Pci("0000:00:05.0".into());
    let (code, _, msg) = refused(b.rejoin(pci, &held, Handoff::None, &[]).unwrap_err());
    assert_eq!(code, ErrorCode::Invalid, "{msg}");
    assert!(msg.contains("descriptors"), "{msg}");
    let tool = session(&r, Role::Tool);
    assert_eq!(refused(tool.rejoin(cayman(0), &held, Handoff::None, &[]).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(snapshot(&a), before);
    assert!(!before[0].adopting, "a device this broker opened waits for nobody");
}

/// A broker that stops tells its clients (their leases are revoked: nothing to re-register),
/// and a client's watch is not fooled by the replies to its own requests.
#[test]
fn a_stopping_broker_revokes_and_replies_are_not_losses() {
    let r = start("revoke");
    let a = std::sync::Arc::new(session(&r, Role::Runtime));
    let d = a.attach(cayman(0)).unwrap().device;
    a.lease(d, Want::Count(1)).unwrap();
    let (stop, theirs) = UnixStream::pair().unwrap();
    let w = {
        let a = a.clone();
        std::thread::spawn(move || a.wait_for_loss(std::os::fd::AsFd::as_fd(&theirs)))
    };
    // Requests and replies while the watch waits: none of them is a loss.
    for _ in 0..300 {
        a.query().unwrap();
    }
    drop(stop);
    assert_eq!(w.join().unwrap(), Loss::Stopped);
    let (_keep, theirs) = UnixStream::pair().unwrap();
    let w = {
        let a = a.clone();
        std::thread::spawn(move || a.wait_for_loss(std::os::fd::AsFd::as_fd(&theirs)))
    };
    drop(r);
    match w.join().unwrap() {
        Loss::Revoked(m) => assert!(m.contains("revoked"), "{m}"),
        l => panic!("{l:?}"),
    }
}

/// A broker that dies without a word (here: a listener that answers Hello and closes) is a
/// death, not a revocation: what the client holds is still its own.
#[test]
fn a_broker_that_dies_is_a_loss_to_rejoin_from() {
    let dir = std::env::temp_dir().join(format!("nv-broker-dies-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("broker.sock");
    let l = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let fake = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let _ = broker::protocol::recv(&s).unwrap();
        broker::protocol::send(&s, &Reply::Hello { broker_pid: 4242 }.encode(), &[]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    });
    let c = Connect { socket: socket.clone(), ..Connect::new(Role::Runtime) };
    let s = Session::connect(&c).unwrap();
    assert_eq!(s.broker_pid(), 4242);
    let (_keep, theirs) = UnixStream::pair().unwrap();
    assert_eq!(s.wait_for_loss(std::os::fd::AsFd::as_fd(&theirs)), Loss::Died);
    fake.join().unwrap();
    // Nobody listens any more: reconnecting fails and leaves the session as it was.
    drop(std::fs::remove_file(&socket));
    assert!(s.reconnect().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The device's one firmware mailbox through the broker: a client resets only NCs it leases
/// (another's: refused with the owner; none, or without a lease: invalid), FW-IO requests
/// answer, and two clients resetting their NCs at the same time all succeed (the broker
/// serializes the mailbox).
#[test]
fn the_firmware_mailbox_serves_leased_ncs_only() {
    let r = start("mailbox");
    let a = session(&r, Role::Runtime);
    let b = session(&r, Role::Runtime);
    let tool = session(&r, Role::Tool);
    let d = a.attach(cayman(0)).unwrap().device;
    b.attach(cayman(0)).unwrap();
    tool.attach(cayman(0)).unwrap();
    a.lease(d, Want::Range { first: 0, count: 2 }).unwrap();
    b.lease(d, Want::Range { first: 2, count: 1 }).unwrap();
    a.reset_ncs(d, 0b11).unwrap();
    let (code, owner, msg) = refused(a.reset_ncs(d, 0b101).unwrap_err());
    assert_eq!((code, owner), (ErrorCode::CoresUnavailable, std::process::id()), "{msg}");
    assert!(msg.contains("nc0-nc1"), "{msg}");
    assert_eq!(refused(a.reset_ncs(d, 0).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(refused(tool.reset_ncs(d, 1).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(refused(tool.fwio(d, csr_maps::consts::fwio::CMD_GET_DATA, &[2]).unwrap_err()).0, ErrorCode::Invalid);
    assert_eq!(refused(a.reset_ncs(d + 1, 1).unwrap_err()).0, ErrorCode::NotAttached);
    let data = a.fwio(d, csr_maps::consts::fwio::CMD_GET_DATA, &[2]).unwrap();
    assert!(!data.is_empty());
    // An unknown command: the firmware's own error, with its kind.
    let (code, _, msg) = refused(a.fwio(d, 0x55, &[]).unwrap_err());
    assert_eq!(code, ErrorCode::Firmware, "{msg}");
    std::thread::scope(|s| {
        s.spawn(|| (0..20).for_each(|_| a.reset_ncs(d, 0b01).unwrap()));
        s.spawn(|| (0..20).for_each(|_| b.reset_ncs(d, 0b100).unwrap()));
    });
}
