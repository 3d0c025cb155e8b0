//! hal and the runtime over [`vfio::user::VfioUserPlatform`] against the simulator served by
//! [`sim_serve::serve_connection`] in this process: exact outputs on every arch, two clients
//! on one device at once, a client that goes away, the bounds of a connection, and what an
//! execute costs over the protocol (printed).

use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use csr_maps::{Arch, CAYMAN, MARIANA, SUNDA};
use platform::{DmaDir, HostMem, Platform, PlatformError};
use runtime::{ModelHandle, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};
use sim_serve::{serve_connection, ConnOptions, ConnSummary, ServeError};
use vfio::user::wire::{self, Command, Header};
use vfio::user::{UserOptions, VfioUserPlatform};

const HBM: u64 = 1 << 28;

fn sim(arch: &'static Arch) -> SimDevice {
    SimDevice::new(SimConfig::new(arch).timing(Timing::Threaded).hbm_bytes(HBM)).unwrap()
}

/// Client slot `k`'s IOVA window (disjoint per slot, as the broker hands them out).
fn window(k: u64) -> Range<u64> {
    (1 << 36) * (k + 1)..(1 << 36) * (k + 2)
}

type Served = JoinHandle<Result<ConnSummary, ServeError>>;

/// Serve `sim` to a new client bounded to `window` and `ncs`; the client's end of the socket.
fn serve(sim: &SimDevice, window: Range<u64>, ncs: Range<usize>) -> (UnixStream, Served) {
    let (client, server) = UnixStream::pair().unwrap();
    let sim = sim.clone();
    let h = std::thread::spawn(move || serve_connection(sim, server, ConnOptions { iova_window: window, ncs }));
    (client, h)
}

fn client(stream: UnixStream, window: Range<u64>, ncs: Range<usize>) -> Arc<VfioUserPlatform> {
    client_with(stream, window, ncs, false)
}

/// A client, with the fast path (`fast`: register writes on a ring, published registers read
/// from shared memory) or with messages only.
fn client_with(stream: UnixStream, window: Range<u64>, ncs: Range<usize>, fast: bool) -> Arc<VfioUserPlatform> {
    let opts = UserOptions {
        iova_window: window,
        irq_vectors: ncs.map(|n| n as u32).collect(),
        modeled_writes: true,
        location: "sim:shared:0".into(),
        posted_writes: false,
        fast_path: fast,
    };
    let p = VfioUserPlatform::from_stream(stream, opts).unwrap();
    assert_eq!(p.fast_path(), fast, "the server offers the fast path");
    Arc::new(p)
}

fn runtime(p: Arc<VfioUserPlatform>) -> Runtime {
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(HBM), ..Default::default() };
    rt.init(vec![p as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    rt
}

fn example(name: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name)).unwrap()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// One execute of the 1-NC all-reduce (an identity on one rank) with `input`: its output.
fn execute(rt: &Runtime, m: &ModelHandle, input: &[u8]) -> Vec<u8> {
    let nc = m.ncs[0];
    let ti = rt.alloc_tensor("input", input.len() as u64, false, nc).unwrap();
    ti.write(0, input).unwrap();
    let to = rt.alloc_tensor("output", input.len() as u64, false, nc).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to.clone());
    let (s, _) = rt.execute(m, &ins, &outs).unwrap();
    assert_eq!(s, NrtStatus::Success);
    to.to_vec().unwrap()
}

fn input(seed: u32) -> Vec<u8> {
    (0..32u32).flat_map(|i| (seed as f32 + i as f32 * 0.25).to_le_bytes()).collect()
}

#[test]
fn the_example_runs_exactly_over_vfio_user_on_every_arch() {
    let neff = example("allreduce_1nc.neff");
    let want = f32s(&example("input_32xf32.bin"));
    for (arch, fast) in [&SUNDA, &CAYMAN, &MARIANA].into_iter().flat_map(|a| [(a, false), (a, true)]) {
        let sim = sim(arch);
        let ncs = 0..arch.counts.ncs as usize;
        let (stream, served) = serve(&sim, window(0), ncs.clone());
        let p = client_with(stream, window(0), ncs, fast);
        let id = p.identity();
        assert_eq!(
            (id.vendor, id.device, id.location.as_str()),
            (arch.pci_vendor, arch.pci_devices[0], "sim:shared:0")
        );
        let rt = runtime(p.clone());
        let m = rt.load(&neff, None, None).unwrap();
        let out = execute(&rt, &m, &example("input_32xf32.bin"));
        assert_eq!(f32s(&out), want, "{arch}");
        assert!(p.mapped_bytes() > 0);
        assert!(sim.external_mappings_in(window(0)) > 0);
        rt.unload(&m).unwrap();
        rt.close().unwrap();
        drop(rt);
        assert_eq!(p.mapped_bytes(), 0, "{arch}: every mapping given back");
        // The model handle holds the device (and with it the platform) until it goes.
        drop(m);
        drop(p);
        let summary = served.join().unwrap().unwrap();
        assert_eq!((summary.refused, summary.mappings_cleaned), (0, 0), "{arch}: {summary:?}");
        assert_eq!(sim.external_mappings_in(0..u64::MAX), 0);
        assert_eq!(sim.stats().iommu_mappings, 0);
    }
}

#[test]
fn two_clients_share_one_cayman_and_one_leaving_spares_the_other() {
    two_clients(false);
}

#[test]
fn two_clients_on_the_fast_path_share_one_cayman_and_one_leaving_spares_the_other() {
    two_clients(true);
}

fn two_clients(fast: bool) {
    let neff = example("allreduce_1nc.neff");
    let sim = sim(&CAYMAN);
    // NC0 and NC2: different HBM channels (NCs 2h and 2h+1 share HBM h), so the two runtimes'
    // device allocators do not meet.
    let (sa, served_a) = serve(&sim, window(0), 0..1);
    let (sb, served_b) = serve(&sim, window(1), 2..3);
    let kill_a = sa.try_clone().unwrap();
    let (pa, pb) = (client_with(sa, window(0), 0..1, fast), client_with(sb, window(1), 2..3, fast));
    let (rta, rtb) = (runtime(pa.clone()), runtime(pb.clone()));
    let (ma, mb) = (rta.load(&neff, Some(0), None).unwrap(), rtb.load(&neff, Some(2), None).unwrap());
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let b2 = barrier.clone();
    let b_thread = std::thread::spawn(move || {
        b2.wait();
        for i in 0..24 {
            let inp = input(1000 + i);
            assert_eq!(execute(&rtb, &mb, &inp), inp, "client B, execute {i}");
        }
        (rtb, mb)
    });
    barrier.wait();
    for i in 0..6 {
        let inp = input(i);
        assert_eq!(execute(&rta, &ma, &inp), inp, "client A, execute {i}");
    }
    // A goes away abruptly (as a killed process's socket does): the server cleans up its
    // mappings and vectors while B keeps executing.
    kill_a.shutdown(std::net::Shutdown::Both).unwrap();
    let summary = served_a.join().unwrap().unwrap();
    assert!(summary.mappings_cleaned > 0 && summary.vectors_cleaned <= 1, "{summary:?}");
    assert_eq!(sim.external_mappings_in(window(0)), 0, "A's mappings are gone");
    assert!(sim.external_mappings_in(window(1)) > 0, "B's are not");
    // A's runtime finds its device unreachable: an error, no panic; dropping it is quiet.
    let (ins, outs) = tensors(&rta, &ma, &input(0));
    assert!(rta.execute(&ma, &ins, &outs).is_err_or_failed());
    drop((ins, outs));
    drop((rta, ma));
    drop(pa);
    let (rtb, mb) = b_thread.join().unwrap();
    // B still runs after A is gone.
    let inp = input(77);
    assert_eq!(execute(&rtb, &mb, &inp), inp);
    rtb.unload(&mb).unwrap();
    rtb.close().unwrap();
    drop((rtb, mb));
    drop(pb);
    assert_eq!(served_b.join().unwrap().unwrap().mappings_cleaned, 0);
    assert_eq!(sim.external_mappings_in(0..u64::MAX), 0);
}

/// A raw request on a connection: the reply's header.
fn raw(s: &UnixStream, id: u16, cmd: Command, body: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> Header {
    wire::write_message(s, Header { id, command: cmd as u16, ..Default::default() }, body, fds).unwrap();
    wire::read_message(s).unwrap().unwrap().header
}

#[test]
fn a_connection_stays_inside_its_window_vectors_and_rights() {
    let sim = sim(&CAYMAN);
    let (s, served) = serve(&sim, window(0), 2..4);
    let mem = HostMem::alloc_shared(8192).unwrap();
    let fd = mem.shared_fd().unwrap();
    let map = |addr: u64, size: u64| {
        wire::DmaMap { flags: wire::DMA_READ | wire::DMA_WRITE, offset: 0, address: addr, size }.encode()
    };
    let w = window(0);
    // Outside, straddling the end, wrapping: refused, nothing mapped.
    for (i, body) in [map(w.start - 8192, 8192), map(w.end - 4096, 8192), map(u64::MAX - 4095, 8192), map(w.start, 0)]
        .iter()
        .enumerate()
    {
        let h = raw(&s, i as u16, Command::DmaMap, body, &[fd]);
        assert!(h.is_error(), "map {i} refused");
    }
    assert_eq!(sim.external_mappings_in(0..u64::MAX), 0);
    // Inside: mapped; an unmap outside the window is refused and removes nothing.
    assert!(!raw(&s, 10, Command::DmaMap, &map(w.start, 8192), &[fd]).is_error());
    assert_eq!(sim.external_mappings_in(w.clone()), 1);
    let un = |a: u64| wire::DmaUnmap { flags: 0, address: a, size: 8192 }.encode();
    assert!(raw(&s, 11, Command::DmaUnmap, &un(window(1).start), &[]).is_error());
    // Vectors of other NCs, a reset, a config write: refused.
    let efd = vfio::EventFd::new().unwrap();
    let irq = |start: u32| {
        wire::SetIrqs {
            flags: vfio_bindings::bindings::vfio::VFIO_IRQ_SET_DATA_EVENTFD
                | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_TRIGGER,
            index: vfio_bindings::bindings::vfio::VFIO_PCI_MSIX_IRQ_INDEX,
            start,
            count: 1,
        }
        .encode()
    };
    assert!(raw(&s, 12, Command::SetIrqs, &irq(0), &[efd.as_fd()]).is_error());
    assert!(!raw(&s, 13, Command::SetIrqs, &irq(3), &[efd.as_fd()]).is_error());
    assert!(raw(&s, 14, Command::DeviceReset, &[], &[]).is_error());
    let cfg =
        wire::RegionAccess { offset: 4, region: vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX, count: 4 };
    assert!(raw(&s, 15, Command::RegionWrite, &cfg.encode(&[0, 0, 0, 0]), &[]).is_error());
    // A malformed request is refused and the connection goes on.
    assert!(raw(&s, 16, Command::DmaMap, &[1, 2, 3], &[fd]).is_error());
    assert!(!raw(&s, 17, Command::RegionRead, &wire::RegionAccess { region: 7, offset: 0, count: 4 }.encode(&[]), &[])
        .is_error());
    // Ending the connection undoes the mapping and the vector.
    drop(s);
    let summary = served.join().unwrap().unwrap();
    assert_eq!((summary.mappings_cleaned, summary.vectors_cleaned), (1, 1), "{summary:?}");
    assert_eq!(summary.refused, 9);
    assert_eq!(sim.external_mappings_in(0..u64::MAX), 0);

    // Through the platform: a window larger than the server's → the map is refused, typed.
    let (s, served) = serve(&sim, window(0), 0..1);
    let opts = UserOptions { iova_window: window(0).start - (1 << 30)..window(0).end, ..Default::default() };
    let p = VfioUserPlatform::from_stream(s, opts).unwrap();
    let e = p.dma_map(HostMem::alloc(4096).unwrap(), DmaDir::Bidirectional).unwrap_err();
    assert!(matches!(e, PlatformError::DmaMap(_)), "{e}");
    assert!(e.to_string().contains("Operation not permitted"), "{e}");
    assert_eq!(p.mapped_bytes(), 0, "the refused IOVA is free again");
    assert!(matches!(p.reset(), Err(PlatformError::Reset(_))));
    assert!(p.irq_eventfd(5).unwrap().is_none(), "a vector not asked for: the driver polls");
    drop(p);
    assert_eq!(served.join().unwrap().unwrap().refused, 2);
    // A malformed stream ends the connection with an error, cleaned up all the same.
    let (s, served) = serve(&sim, window(0), 0..1);
    std::io::Write::write_all(&mut &s, &Header { size: 2, ..Default::default() }.encode()).unwrap();
    assert!(served.join().unwrap().is_err());
}

trait Failed {
    fn is_err_or_failed(&self) -> bool;
}

impl<T> Failed for Result<(NrtStatus, T), runtime::RtError> {
    fn is_err_or_failed(&self) -> bool {
        !matches!(self, Ok((NrtStatus::Success, _)))
    }
}

#[test]
fn execute_cost_over_vfio_user_against_in_process() {
    // Both paths open at once and measured in interleaved rounds (ABBA), so load on the
    // machine falls on both alike; the figures are printed, not asserted.
    let neff = example("allreduce_1nc.neff");
    const N: u32 = 20;
    const ROUNDS: usize = 8;
    let inp = input(5);
    let local = sim(&CAYMAN);
    let rt_local = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(HBM), ..Default::default() };
    rt_local.init(vec![Arc::new(local.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    let served_sim = sim(&CAYMAN);
    let (s, served) = serve(&served_sim, window(0), 0..8);
    let p = client(s, window(0), 0..8);
    let rt_remote = runtime(p.clone());
    let paths: Vec<(&Runtime, ModelHandle)> =
        [&rt_local, &rt_remote].into_iter().map(|rt| (rt, rt.load(&neff, None, None).unwrap())).collect();
    let sets: Vec<(TensorSet, TensorSet)> = paths.iter().map(|(rt, m)| tensors(rt, m, &inp)).collect();
    let run = |i: usize| {
        let ((rt, m), (ins, outs)) = (&paths[i], &sets[i]);
        let t = Instant::now();
        for _ in 0..N {
            assert_eq!(rt.execute(m, ins, outs).unwrap().0, NrtStatus::Success);
        }
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    };
    run(0);
    run(1);
    let (mut us, mut messages) = ([Vec::new(), Vec::new()], 0);
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let before = p.messages();
            us[i].push(run(i));
            if i == 1 {
                messages += p.messages() - before;
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (local_us, remote_us) = (median(&mut us[0]), median(&mut us[1]));
    let per_exec = messages as f64 / (N as usize * ROUNDS) as f64;
    assert!(per_exec > 0.0, "an execute over vfio-user takes register messages");
    println!(
        "execute (allreduce_1nc, cayman, {ROUNDS} interleaved rounds of {N}, medians): in-process {local_us:.1} us, \
         over vfio-user {remote_us:.1} us; {per_exec:.1} messages per execute, {:.1} us per message",
        (remote_us - local_us) / per_exec
    );
    for (i, (_, outs)) in sets.iter().enumerate() {
        assert_eq!(outs_vec(outs), inp, "path {i}");
    }
    // The tensors' host memory holds mappings on the connection: gone before it ends.
    drop(sets);
    for (rt, m) in &paths {
        rt.unload(m).unwrap();
        rt.close().unwrap();
    }
    // The model handles hold the devices (and with them the platform) until they go.
    drop(paths);
    drop((rt_local, rt_remote));
    assert_eq!(p.mapped_bytes(), 0);
    drop(p);
    served.join().unwrap().unwrap();
}

fn tensors(rt: &Runtime, m: &ModelHandle, inp: &[u8]) -> (TensorSet, TensorSet) {
    let nc = m.ncs[0];
    let ti = rt.alloc_tensor("input", inp.len() as u64, false, nc).unwrap();
    ti.write(0, inp).unwrap();
    let to = rt.alloc_tensor("output", inp.len() as u64, false, nc).unwrap();
    let mut ins = TensorSet::new();
    ins.add("input", ti);
    let mut outs = TensorSet::new();
    outs.add("output", to);
    (ins, outs)
}

fn outs_vec(outs: &TensorSet) -> Vec<u8> {
    outs.get("output").unwrap().to_vec().unwrap()
}
