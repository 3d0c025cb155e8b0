//! The fast path of a shared device's connection (`vfio::user::wire::Command::FastPath`):
//! executes that send no message (every register write posted on the ring, every read on the
//! execute path served from the published registers), eight clients executing at once on one
//! cayman while one of them is cut off, and a client that abuses its ring or its socket —
//! refused entry by entry, cut off for what breaks the protocol, cleaned up either way.

use std::ops::Range;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use csr_maps::{Regs, CAYMAN};
use platform::{Platform, SharedWords, Subscriber};
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};
use sim_serve::{serve_connection, ConnOptions, ConnSummary, ServeError};
use vfio::user::ring::{self, Entry, Producer, Pushed};
use vfio::user::wire::{self, Command, FastPathInfo, Header};
use vfio::user::{UserOptions, VfioUserPlatform};

const HBM: u64 = 1 << 28;

fn sim() -> SimDevice {
    SimDevice::new(SimConfig::new(&CAYMAN).timing(Timing::Threaded).hbm_bytes(HBM)).unwrap()
}

fn window(k: u64) -> Range<u64> {
    (1 << 36) * (k + 1)..(1 << 36) * (k + 2)
}

type Served = JoinHandle<Result<ConnSummary, ServeError>>;

fn serve(sim: &SimDevice, k: u64, ncs: Range<usize>) -> (UnixStream, Served) {
    let (client, server) = UnixStream::pair().unwrap();
    let sim = sim.clone();
    let h = std::thread::spawn(move || serve_connection(sim, server, ConnOptions { iova_window: window(k), ncs }));
    (client, h)
}

fn client(stream: UnixStream, k: u64, ncs: Range<usize>) -> Arc<VfioUserPlatform> {
    client_with(stream, k, ncs.map(|n| n as u32).collect())
}

/// A client taking eventfds for `irq_vectors` (none: the runtime never asks for one, so a
/// long wait sends no SET_IRQS).
fn client_with(stream: UnixStream, k: u64, irq_vectors: Vec<u32>) -> Arc<VfioUserPlatform> {
    let opts = UserOptions {
        iova_window: window(k),
        irq_vectors,
        modeled_writes: true,
        location: "sim:shared:0".into(),
        posted_writes: true,
        fast_path: true,
    };
    let p = VfioUserPlatform::from_stream(stream, opts).unwrap();
    assert!(p.fast_path());
    Arc::new(p)
}

fn runtime(p: Arc<VfioUserPlatform>) -> Runtime {
    runtime_with(p, hal::DeviceOptions { hbm_limit: Some(HBM), ..Default::default() })
}

/// A runtime on `p` with `opts`; with `owned_ncs`, those NCs are its visible cores (logical NC
/// 0 the first), as a process on a leased device has them.
fn runtime_with(p: Arc<VfioUserPlatform>, opts: hal::DeviceOptions) -> Runtime {
    let rt = Runtime::new();
    let mut cfg = RuntimeConfig::physical();
    cfg.visible_cores = opts.owned_ncs.clone().map(|r| r.collect());
    rt.init(vec![p as Arc<dyn Platform>], cfg, opts).unwrap();
    rt
}

fn neff() -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/allreduce_1nc.neff")).unwrap()
}

fn input(seed: u32) -> Vec<u8> {
    (0..32u32).flat_map(|i| (seed as f32 + i as f32 * 0.5).to_le_bytes()).collect()
}

/// Input and output tensors of NC `nc` (allocated once: an execute then maps nothing).
fn tensors(rt: &Runtime, nc: usize) -> (TensorSet, TensorSet) {
    let ti = rt.alloc_tensor("input", 128, false, nc).unwrap();
    let to = rt.alloc_tensor("output", 128, false, nc).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to);
    (ins, outs)
}

/// One execute of the 1-NC all-reduce (an identity on one rank) with `inp`: its output.
fn run(rt: &Runtime, m: &ModelHandle, t: &(TensorSet, TensorSet), inp: &[u8]) -> Result<Vec<u8>, String> {
    t.0.get("input").unwrap().write(0, inp).map_err(|e| e.to_string())?;
    match rt.execute(m, &t.0, &t.1) {
        Ok((NrtStatus::Success, _)) => t.1.get("output").unwrap().to_vec().map_err(|e| e.to_string()),
        Ok((s, _)) => Err(format!("{s:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn an_execute_on_the_fast_path_sends_no_message() {
    let sim = sim();
    let (s, served) = serve(&sim, 0, 0..1);
    // No interrupt vector: an execute that waits long spins on (asking for the eventfd would
    // be a message).
    let p = client_with(s, 0, Vec::new());
    let rt = runtime(p.clone());
    let m = rt.load(&neff(), Some(0), None).unwrap();
    let t = tensors(&rt, 0);
    assert_eq!(run(&rt, &m, &t, &input(0)).unwrap(), input(0));
    const N: u64 = 200;
    let (messages, fast, fallbacks) = (p.messages(), p.fast_accesses(), p.fast_fallbacks());
    for i in 0..N {
        let inp = input(i as u32);
        assert_eq!(run(&rt, &m, &t, &inp).unwrap(), inp, "execute {i}");
    }
    // Every register write of an execute was posted and every read it made of a published
    // register was served from shared memory, except reads that found the host busy (then a
    // message, counted as a fallback): no other message.
    let fell_back = p.fast_fallbacks() - fallbacks;
    assert_eq!(p.messages() - messages, fell_back, "messages besides fallback reads");
    // The kick, and the three interrupt-controller reads of FINALIZE (docs/sharing.md).
    assert!(p.fast_accesses() - fast + fell_back >= 4 * N, "{} fast accesses", p.fast_accesses() - fast);
    drop(t);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
    drop((rt, m));
    drop(p);
    let summary = served.join().unwrap().unwrap();
    assert_eq!((summary.refused, summary.mappings_cleaned), (0, 0), "{summary:?}");
}

#[test]
fn eight_clients_execute_at_once_and_one_cut_off_spares_the_others() {
    let sim = sim();
    let neff = neff();
    // The device's owner, as the host is: brings it up and grants each client its device
    // memory (a sixteenth of an HBM channel; two NCs per channel on cayman).
    let owner = hal::Device::open(
        Arc::new(sim.clone()),
        hal::DeviceOptions { hbm_limit: Some(HBM), poll: hal::PollTiming::fast(), ..Default::default() },
    )
    .unwrap();
    owner.init().unwrap();
    let grants: Vec<_> = (0..8usize)
        .map(|nc| {
            let chan = nc * CAYMAN.counts.hbm_stacks as usize / 8;
            let b = owner.allocator().alloc(chan, HBM / 16, HBM / 16).unwrap();
            let range = hal::HbmRange { chan, addr: b.addr(), len: HBM / 16 };
            (
                b,
                hal::DeviceOptions {
                    hbm_limit: Some(HBM),
                    owned_ncs: Some(nc..nc + 1),
                    hbm_ranges: Some(vec![range]),
                    ..Default::default()
                },
            )
        })
        .collect();
    // Each client on its own NC, with its own window and connection.
    let mut served = Vec::new();
    let mut clients = Vec::new();
    let mut cut = None;
    for nc in 0..8u64 {
        let (s, h) = serve(&sim, nc, nc as usize..nc as usize + 1);
        if nc == 5 {
            cut = Some(s.try_clone().unwrap());
        }
        served.push(h);
        clients.push(client(s, nc, nc as usize..nc as usize + 1));
    }
    // Set up one after another (a failure fails the test rather than stalling a barrier);
    // executed at once.
    let set: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(nc, p)| {
            let rt = runtime_with(p.clone(), grants[nc].1.clone());
            // Logical NC 0 of each runtime is its leased NC.
            let m = rt.load(&neff, Some(0), None).unwrap();
            let t = tensors(&rt, 0);
            (rt, m, t)
        })
        .collect();
    let barrier = Arc::new(std::sync::Barrier::new(9));
    let threads: Vec<_> = set
        .into_iter()
        .enumerate()
        .map(|(nc, (rt, m, t))| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut done = 0;
                for i in 0..60u32 {
                    let inp = input(nc as u32 * 1000 + i);
                    match run(&rt, &m, &t, &inp) {
                        Ok(out) => assert_eq!(out, inp, "NC {nc}, execute {i}"),
                        // Only the client cut off may fail, and from then on it does.
                        Err(e) => {
                            assert_eq!(nc, 5, "NC {nc}, execute {i}: {e}");
                            break;
                        }
                    }
                    done += 1;
                }
                drop(t);
                let _ = rt.unload(&m);
                let _ = rt.close();
                done
            })
        })
        .collect();
    barrier.wait();
    // Cut client 5 off in the middle of its executes (as the host ends a dead client's
    // connection): its server thread ends and cleans up while the others execute.
    let cut = cut.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sim.stats().nq_records < 8 * 40 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    cut.shutdown(std::net::Shutdown::Both).unwrap();
    let done: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (nc, d) in done.iter().enumerate() {
        if nc != 5 {
            assert_eq!(*d, 60, "NC {nc}");
        }
    }
    drop(clients);
    for (nc, h) in served.into_iter().enumerate() {
        let s = h.join().unwrap().unwrap();
        assert_eq!(s.refused, 0, "NC {nc}: {s:?}");
    }
    assert_eq!(sim.external_mappings_in(0..u64::MAX), 0, "every connection's mappings are gone");
    drop(grants);
}

/// A raw fast-path connection: its ring, bell and published registers.
struct Raw {
    s: UnixStream,
    ring: SharedWords,
    bell: OwnedFd,
    published: Subscriber,
    info: FastPathInfo,
    producer: Producer,
    id: u16,
}

impl Raw {
    fn new(s: UnixStream) -> Self {
        wire::write_message(&s, Header { id: 1, command: Command::FastPath.into(), ..Default::default() }, &[], &[])
            .unwrap();
        let m = wire::read_message(&s).unwrap().unwrap();
        assert!(m.header.is_reply() && !m.header.is_error());
        let info = FastPathInfo::decode(&m.body).unwrap();
        let [ring_fd, bell, published]: [OwnedFd; 3] = m.fds.try_into().unwrap();
        let ring = SharedWords::open(ring_fd, ring::words_for(info.ring_entries), true).unwrap();
        let published = Subscriber::open(published, info.offsets.len()).unwrap();
        Self { s, ring, bell, published, producer: Producer::new(info.ring_entries), info, id: 2 }
    }

    fn words(&self) -> &[std::sync::atomic::AtomicU64] {
        self.ring.u64s().unwrap()
    }

    fn push_words(&mut self, e: [u64; 2]) {
        let w = self.ring.u64s().unwrap();
        match self.producer.push(w, e) {
            Pushed::Posted { wake: true } => {
                nix::unistd::write(&self.bell, &1u64.to_ne_bytes()).unwrap();
            }
            Pushed::Posted { wake: false } => {}
            Pushed::Full => panic!("the ring is full"),
        }
    }

    fn write(&mut self, offset: u64, value: u32) {
        self.push_words(Entry::Write { region: 0, offset, width: 4, value: value as u64 }.encode().unwrap());
    }

    /// A message after its marker: the reply's header.
    fn request(&mut self, cmd: Command, body: &[u8]) -> Header {
        self.push_words(Entry::Message.encode().unwrap());
        self.id += 1;
        wire::write_message(&self.s, Header { id: self.id, command: cmd.into(), ..Default::default() }, body, &[])
            .unwrap();
        wire::read_message(&self.s).unwrap().unwrap().header
    }

    /// Wait (bounded) until the server took every entry posted.
    fn drained(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.producer.drained(self.words()) {
            assert!(Instant::now() < deadline, "the server never took the ring's entries");
            std::thread::yield_now();
        }
    }

    fn published(&self, off: u64) -> u32 {
        let i = self.info.offsets.binary_search(&off).unwrap();
        self.published.read(i, 1 << 20).unwrap()
    }
}

#[test]
fn a_client_abusing_its_ring_or_socket_is_refused_and_cut_off_and_cleaned_up() {
    let sim = sim();
    let bar = sim.bar(CAYMAN.bars.apb).unwrap();
    let regs = Regs::new(&CAYMAN, bar.as_ref());
    let g0 = regs.nc_intc(1).unwrap().g0();
    let (cause, set) = (g0.cause().offset(), g0.cause_set().offset());

    // Posted writes apply in order, and the published copy follows them.
    let (s, served) = serve(&sim, 0, 1..2);
    let mut raw = Raw::new(s);
    assert_eq!(raw.info.region, 0);
    assert!(raw.info.offsets.contains(&cause));
    raw.write(set, 0x5);
    raw.write(cause, !0x1); // write-0-to-clear bit 0
    raw.drained();
    assert_eq!(bar.read32(cause).unwrap(), 0x4);
    assert_eq!(raw.published(cause), 0x4);
    // Garbage entries are refused one by one and the connection goes on.
    raw.push_words([0xdead, 0]);
    raw.push_words([0, 0]);
    raw.write(set, 0x8);
    raw.drained();
    assert_eq!(raw.published(cause), 0xc);
    // A message after its marker is served in order after the writes before it.
    raw.write(set, 0x10);
    let read = wire::RegionAccess { offset: cause, region: 0, count: 4 };
    let h = raw.request(Command::RegionRead, &read.encode(&[]));
    assert!(!h.is_error());
    assert_eq!(bar.read32(cause).unwrap(), 0x1c);
    // A second FAST_PATH on the same connection is refused.
    assert!(raw.request(Command::FastPath, &[]).is_error());
    // Mapping memory through the socket (so the cleanup has something to undo).
    let mem = platform::HostMem::alloc_shared(8192).unwrap();
    let map = wire::DmaMap { flags: wire::DMA_READ | wire::DMA_WRITE, offset: 0, address: window(0).start, size: 8192 };
    raw.push_words(Entry::Message.encode().unwrap());
    wire::write_message(
        &raw.s,
        Header { id: 99, command: Command::DmaMap.into(), ..Default::default() },
        &map.encode(),
        &[mem.shared_fd().unwrap()],
    )
    .unwrap();
    assert!(!wire::read_message(&raw.s).unwrap().unwrap().header.is_error());
    assert_eq!(sim.external_mappings_in(window(0)), 1);
    // An overrun tail: the connection ends with an error, its mapping undone.
    raw.words()[ring::TAIL].fetch_add(1000, Ordering::Release);
    nix::unistd::write(&raw.bell, &1u64.to_ne_bytes()).unwrap();
    assert!(served.join().unwrap().is_err(), "an overrun ring ends the connection");
    assert_eq!(sim.external_mappings_in(0..u64::MAX), 0);

    // A message the ring announced no marker for ends the connection too.
    let (s, served) = serve(&sim, 1, 1..2);
    let raw = Raw::new(s);
    wire::write_message(
        &raw.s,
        Header { id: 7, command: Command::RegionRead.into(), ..Default::default() },
        &read.encode(&[]),
        &[],
    )
    .unwrap();
    assert!(served.join().unwrap().is_err(), "a message without a marker ends the connection");

    // A client that just goes away while its server sleeps: a clean end.
    let (s, served) = serve(&sim, 2, 1..2);
    let raw = Raw::new(s);
    drop(raw);
    let summary = served.join().unwrap().unwrap();
    assert_eq!(summary.refused, 0);
}

#[test]
fn a_vm_connection_is_not_offered_the_fast_path_and_the_client_uses_messages() {
    let dir = std::env::temp_dir().join(format!("sim-serve-fast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("vm.sock");
    let server = sim_serve::SimServer::new(&sim_serve::ServeConfig::new(&CAYMAN, &sock)).unwrap();
    let h = std::thread::spawn(move || server.run());
    let opts = UserOptions { fast_path: true, ..Default::default() };
    let p = VfioUserPlatform::connect(&sock, opts).unwrap();
    assert!(!p.fast_path(), "the whole function's client gets messages");
    let bar = p.bar(CAYMAN.bars.apb).unwrap();
    let cause = Regs::new(&CAYMAN, bar.as_ref()).nc_intc(0).unwrap().g0().cause().offset();
    let before = p.messages();
    assert_eq!(bar.read32(cause).unwrap(), 0);
    assert_eq!(p.messages(), before + 1, "a read is a message");
    assert_eq!(p.fast_accesses(), 0);
    drop(bar);
    drop(p);
    h.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
