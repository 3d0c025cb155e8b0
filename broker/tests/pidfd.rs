//! A client that dies while a forked child still holds its broker socket (the fork-per-rank
//! pattern: children inherit the parent's descriptors) is noticed through its pidfd, not only
//! through the socket's end: its cores are leasable again although the socket stays open.
//!
//! The test binary is its own client process (`BROKER_PIDFD_CHILD=SOCKET`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use broker::client::{Connect, Session};
use broker::protocol::{DeviceSpec, Role, Want};
use broker::{Broker, BrokerConfig};

const CHILD: &str = "BROKER_PIDFD_CHILD";

fn cayman() -> DeviceSpec {
    DeviceSpec::Sim { arch: "cayman".into(), index: 0 }
}

/// The client: lease core 5, fork a child that keeps every descriptor (the socket too) and
/// sleeps, say so, and wait to be killed.
fn child(socket: &str) {
    let s = Session::connect(&Connect { socket: socket.into(), ..Connect::new(Role::Runtime) }).unwrap();
    let d = s.attach(cayman()).unwrap().device;
    let _lease = s.lease(d, Want::Range { first: 5, count: 1 }).unwrap();
    // SAFETY: the forked child only sleeps and `_exit`s (no lock or allocation another
    // thread of this process could hold), whatever threads the test harness has.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        std::thread::sleep(Duration::from_secs(60));
        // SAFETY: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    println!("ready {pid}");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_dead_client_is_noticed_while_its_forked_child_holds_the_socket() {
    if let Ok(socket) = std::env::var(CHILD) {
        child(&socket);
        return;
    }
    let dir = std::env::temp_dir().join(format!("nv-broker-pidfd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let socket = dir.join("broker.sock");
    let mut cfg = BrokerConfig::new(&socket);
    cfg.idle_exit = None;
    let b = Broker::bind(cfg).unwrap();
    let stop = b.stopper();
    let t = std::thread::spawn(move || b.run().unwrap());

    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_dead_client_is_noticed_while_its_forked_child_holds_the_socket", "--nocapture"])
        .env(CHILD, &socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    let grandchild = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the client ended early");
        if let Some(p) = line.trim().strip_prefix("ready ") {
            break p.parse::<i32>().unwrap();
        }
    };
    let probe = Session::connect(&Connect { socket: socket.clone(), ..Connect::new(Role::Runtime) }).unwrap();
    let d = probe.attach(cayman()).unwrap().device;
    assert!(probe.lease(d, Want::Range { first: 5, count: 1 }).is_err(), "core 5 is held");
    c.kill().unwrap();
    let _ = c.wait();
    let t0 = Instant::now();
    while probe.lease(d, Want::Range { first: 5, count: 1 }).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the dead client's core was never freed");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The grandchild still held the socket all along.
    // SAFETY: kill with a pid this test's child forked.
    let alive = unsafe { libc::kill(grandchild, 0) } == 0;
    // SAFETY: as above.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    assert!(alive, "the forked child was gone: the socket's end, not the pidfd, freed the core");
    drop(probe);
    stop.stop();
    t.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
