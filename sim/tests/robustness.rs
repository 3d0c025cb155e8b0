//! No panic on any register-write sequence or ring content; idle devices are cheap.

mod common;
use common::*;
use csr_maps::{CAYMAN, MARIANA, SUNDA};
use platform::Platform;
use proptest::prelude::*;
use sim::{SimConfig, SimDevice, Timing};

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

/// CPU ticks used by the simulator's device threads (other tests run in parallel threads of
/// this process, so the process total would not do).
fn sim_thread_ticks() -> (u64, usize) {
    let mut total = 0;
    let mut n = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("sim-nc") {
            continue;
        }
        let s = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let f: Vec<&str> = s.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        if f.len() > 12 {
            total += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            n += 1;
        }
    }
    (total, n)
}

#[test]
fn idle_devices_are_small_and_quiet() {
    let before = rss_kib();
    let one = SimDevice::new(SimConfig::new(&SUNDA)).unwrap();
    let one_kib = rss_kib().saturating_sub(before);
    assert!(one_kib < 64 * 1024, "one idle sunda device: {one_kib} KiB");
    let before = rss_kib();
    let many: Vec<_> = (0..16).map(|_| SimDevice::new(SimConfig::new(&CAYMAN)).unwrap()).collect();
    let many_kib = rss_kib().saturating_sub(before);
    assert!(many_kib < 1024 * 1024, "16 cayman devices: {many_kib} KiB");
    // Wake every NC thread once (a semaphore write), then measure CPU while idle.
    for d in &many {
        let bar = d.bar(0).unwrap();
        for nc in 0..8 {
            let off = csr_maps::Regs::new(&CAYMAN, bar.as_ref()).tpb_sem(nc).unwrap().sem_inc(0).unwrap().offset();
            bar.write32(off, 1).unwrap();
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(many[0].stats().threads, 8);
    let (c0, n) = sim_thread_ticks();
    assert!(n >= 128, "{n} device threads");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let used = sim_thread_ticks().0 - c0;
    assert!(used <= 2, "128 idle NC threads used {used} ticks of CPU in 0.5 s");
    drop(many);
    drop(one);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_register_writes_never_panic(seed in any::<u64>(), writes in proptest::collection::vec((any::<u32>(), any::<u32>()), 1..200)) {
        let arch = [&SUNDA, &CAYMAN, &MARIANA][(seed % 3) as usize];
        let t = T::with(SimConfig::new(arch).timing(Timing::Inline).hbm_bytes(1 << 24));
        let regs = arch.registers();
        // Give engines a chance to run garbage: random slots at a random program address.
        let ring = t.map(4096);
        ring.mem().fill(0, 4096, (seed >> 8) as u8).unwrap();
        for (k, v) in writes {
            let r = &regs[(k as usize) % regs.len()];
            let v = if k % 7 == 0 { t.host(&ring, (v % 4000) as u64) as u32 } else { v };
            if r.def.width == 64 {
                let _ = t.bar.write64(r.offset, v as u64);
            } else {
                let _ = t.bar.write32(r.offset, v);
            }
            let _ = t.bar.read32(r.offset);
        }
        let _ = t.dev.stats();
        let _ = t.dev.reset();
    }
}

#[test]
fn interrupt_eventfd_fires_on_notification() {
    let t = T::new(&SUNDA);
    let fd = t.dev.irq_eventfd(1).unwrap().unwrap();
    assert!(t.dev.irq_eventfd(2).is_err());
    let _ring = t.infer_ring(1, 0, 16);
    let prog = [isa::device_ops::NotifyOp::new(isa::slot::Events::NONE, 6, 1).encode()];
    t.load_program(1, 0, nc_area(&t, 1, 0), &prog, false);
    t.start(1, 0, false);
    let mut v = [0u8; 8];
    let n = nix_read(&fd, &mut v);
    assert_eq!(n, 8);
    assert_eq!(u64::from_le_bytes(v), 1);
}

fn nix_read(fd: &std::os::fd::OwnedFd, buf: &mut [u8]) -> usize {
    use std::io::Read;
    let mut f = std::fs::File::from(fd.try_clone().unwrap());
    f.read(buf).unwrap_or(0)
}
