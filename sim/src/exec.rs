//! Execution and scheduling: when device work runs relative to the host ([`Timing`]):
//! inline inside the MMIO write that triggers it, on one device thread per NC, or when a
//! test steps the device; and the hand-over of collective results between devices.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::hub::Delivery;
use crate::device::{Dev, State, StateGuard, Timing};

/// How long an NC thread works under the device's state lock before it lets the host's
/// register accesses in ([`Timing::Threaded`]). On hardware a register read is answered while
/// the engines move data; here every access takes the state lock, so a queue of many packets
/// (the kmod's HBM scrub: 24 GiB in 64 KiB packets) processed in one hold kept a guest's BAR
/// read waiting past QEMU's vfio-user reply timeout (5 s).
pub(crate) const THREAD_SLICE: Duration = Duration::from_millis(1);
/// The pause between slices, so that a host thread waiting for the lock gets it.
const THREAD_PAUSE: Duration = Duration::from_micros(50);

impl Dev {
    /// Run everything pending on `nc` until no progress; collect deliveries.
    pub fn run_nc(&self, st: &mut State, nc: usize, out: &mut Vec<Delivery>) {
        self.run_nc_until(st, nc, out, None);
    }

    /// [`Self::run_nc`] until `deadline` at most (between two DMA packets or rounds): true
    /// when it stopped there with work left (`st.pending[nc]` set again).
    pub fn run_nc_until(&self, st: &mut State, nc: usize, out: &mut Vec<Delivery>, deadline: Option<Instant>) -> bool {
        let mut rounds = 0u32;
        loop {
            st.pending[nc] = false;
            let mut progress = crate::device::udma::run(self, st, nc, deadline);
            progress |= crate::device::seq::run(self, st, nc, out);
            rounds += 1;
            if !progress && !st.pending[nc] {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                st.pending[nc] = true;
                return true;
            }
            if rounds > 1_000_000 {
                // A program that spins forever without blocking (e.g. a loop of NOPs):
                // leave it pending for the next kick.
                break;
            }
        }
        false
    }

    /// After a host-triggered change: run (inline), wake threads, or do nothing (step).
    pub fn after(&self, mut st: StateGuard<'_>) {
        match self.cfg.timing {
            Timing::Step => {}
            Timing::Inline => {
                if !st.pending.iter().any(|&p| p) {
                    return;
                }
                let t0 = Instant::now();
                let mut out = self.hub.take_deliveries();
                for nc in 0..self.ncs() {
                    if st.pending[nc] {
                        self.run_nc(&mut st, nc, &mut out);
                    }
                }
                drop(st);
                self.deliver(out);
                self.n.device_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            Timing::Threaded => {
                // NCs to wake, without allocating (a device has at most 64 NCs here).
                let mut wake = 0u64;
                for nc in 0..self.ncs().min(64) {
                    if st.pending[nc] {
                        wake |= 1 << nc;
                    }
                }
                drop(st);
                while wake != 0 {
                    let nc = wake.trailing_zeros() as usize;
                    wake &= wake - 1;
                    self.ensure_thread(nc);
                    self.cvs[nc].notify_one();
                }
            }
        }
    }

    /// Hand collective results to their devices (never called with a state lock held).
    pub fn deliver(&self, mut work: Vec<Delivery>) {
        while let Some(d) = work.pop() {
            let Some(dev) = d.dev.upgrade() else {
                self.hub.put_bytes(d.data);
                continue;
            };
            let mut st = dev.lock();
            if let Err(f) = dev.dev_write(&mut st, d.dst, &d.data) {
                dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
                crate::device::records::fault_engine(
                    &dev,
                    &mut st,
                    d.nc,
                    d.engine,
                    crate::device::records::code::MEMORY,
                    Some(f),
                );
            }
            self.hub.put_bytes(d.data);
            if let Some(e) = st.seq.get_mut(d.nc).and_then(|s| s.get_mut(d.engine)) {
                e.coll_done = true;
            }
            st.pending[d.nc] = true;
            match dev.cfg.timing {
                Timing::Inline => {
                    // Further deliveries go straight onto the work list.
                    dev.run_nc(&mut st, d.nc, &mut work);
                    drop(st);
                }
                Timing::Threaded => {
                    drop(st);
                    dev.ensure_thread(d.nc);
                    dev.cvs[d.nc].notify_one();
                }
                Timing::Step => {}
            }
        }
        self.hub.put_deliveries(work);
    }

    fn ensure_thread(&self, nc: usize) {
        let mut t = platform::sync::lock(&self.threads);
        if t[nc].is_some() || self.shutdown.load(Ordering::Acquire) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let h = std::thread::Builder::new().name(format!("sim-nc{nc}")).spawn(move || nc_thread(me, nc));
        if let Ok(h) = h {
            self.n.threads.fetch_add(1, Ordering::Relaxed);
            t[nc] = Some(h);
        }
    }

    /// Post to the interrupt eventfd of `vector` (an NC), if one was requested.
    pub fn raise_irq(&self, vector: u32) {
        let m = platform::sync::lock(&self.irq);
        if let Some(fd) = m.get(&vector) {
            // An eventfd counter increment. A full counter (EAGAIN) already signals the
            // waiter; a descriptor that is not an eventfd is the client's mistake.
            let _ = std::io::Write::write(&mut &*fd, &1u64.to_ne_bytes());
        }
    }
}

fn nc_thread(dev: Arc<Dev>, nc: usize) {
    let mut st = dev.lock();
    loop {
        if dev.shutdown.load(Ordering::Acquire) {
            break;
        }
        if !st.pending[nc] {
            // Wait for work under the bare lock: the wait changes nothing, so it is no change
            // of the published registers (and holds none open while it sleeps).
            drop(st);
            let mut g = dev.lock_raw();
            while !g.pending[nc] && !dev.shutdown.load(Ordering::Acquire) {
                g = platform::sync::wait(&dev.cvs[nc], g);
            }
            drop(g);
            st = dev.lock();
            continue;
        }
        let mut out = dev.hub.take_deliveries();
        let more = dev.run_nc_until(&mut st, nc, &mut out, Some(Instant::now() + THREAD_SLICE));
        if out.is_empty() {
            dev.hub.put_deliveries(out);
            if more {
                drop(st);
                std::thread::sleep(THREAD_PAUSE);
                st = dev.lock();
            }
        } else {
            drop(st);
            dev.deliver(out);
            st = dev.lock();
        }
    }
    dev.n.threads.fetch_sub(1, Ordering::Relaxed);
}
