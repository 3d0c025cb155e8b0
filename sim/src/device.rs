//! The simulated device: state, register semantics, device address space, executors.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

use csr_maps::consts::{fwio as fwc, q7 as q7c, seq as seqc, udma as udc};
use csr_maps::{Arch, Regs};
use platform::{DeviceIdentity, DmaDir, DmaMapping, DmaUnmap, HostMem, MemMmio, Mmio, Platform, PlatformError};

use crate::decode::{Decoder, Hit, Kind};
use crate::fault::{FaultKind, FaultSpec};
use crate::hub::{Delivery, Hub};
use crate::iommu::{translate, DmaFault, Iommu, Mapping};
use crate::nq::NqSlot;
use crate::seq::SeqEng;
use crate::udma::Engine;
use crate::SimError;

/// When device work runs relative to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// One device thread per NeuronCore (started on first use) runs DMA and sequencer work
    /// asynchronously; it parks when idle (no CPU burnt).
    Threaded,
    /// Work runs synchronously inside the MMIO write that triggers it (doorbell,
    /// semaphore): deterministic and free of wake-up latency.
    Inline,
    /// Nothing runs until the test calls [`SimDevice::step`] / [`SimDevice::run_until_idle`].
    Step,
}

/// Configuration of one simulated device.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub arch: &'static Arch,
    /// Bytes of HBM per stack (sparse; default: the arch's active size).
    pub hbm_bytes: Option<u64>,
    pub timing: Timing,
    /// Extra latency per executed slot / DMA packet (default 0).
    pub op_latency_ns: u64,
    /// Device index (routing id reported in misc RAM).
    pub device_index: u32,
    /// Firmware API version reported in misc RAM (≥ 7 = new FW-IO protocol).
    pub fw_api_version: u32,
}

impl SimConfig {
    /// Defaults for `arch`: full-size sparse HBM, threaded timing, zero latency.
    pub fn new(arch: &'static Arch) -> Self {
        Self { arch, hbm_bytes: None, timing: Timing::Threaded, op_latency_ns: 0, device_index: 0, fw_api_version: 7 }
    }
    /// Builder: timing.
    pub fn timing(mut self, t: Timing) -> Self {
        self.timing = t;
        self
    }
    /// Builder: HBM bytes per stack.
    pub fn hbm_bytes(mut self, b: u64) -> Self {
        self.hbm_bytes = Some(b);
        self
    }
}

/// Counters and state for tests and tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub iommu_mappings: u64,
    pub iommu_bytes: u64,
    /// Net bytes the driver reports allocated in device memory.
    pub device_bytes: i64,
    pub dma_faults: u64,
    pub dma_aborts: u64,
    pub dma_bytes: u64,
    pub dma_packets: u64,
    pub nq_records: u64,
    pub dropped_records: u64,
    pub slots_executed: u64,
    pub collectives: u64,
    pub unclaimed_accesses: u64,
    pub resets: u64,
    pub fwio_requests: u64,
    /// Bytes moved per DGE channel (DMA engine within the NC), summed over NCs.
    pub dge_channel_bytes: Vec<u64>,
    /// Sequencer engine state per NC and engine (`consts::seq::STATE_*`).
    pub engine_states: Vec<[u32; 5]>,
    /// Device threads alive.
    pub threads: u64,
    /// Nanoseconds of device work run inline inside MMIO writes (Timing::Inline): what a
    /// benchmark subtracts to get host-only overhead.
    pub device_ns: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub dma_faults: AtomicU64,
    pub dma_aborts: AtomicU64,
    pub dma_bytes: AtomicU64,
    pub dma_packets: AtomicU64,
    pub nq_records: AtomicU64,
    pub dropped_records: AtomicU64,
    pub slots: AtomicU64,
    pub collectives: AtomicU64,
    pub unclaimed: AtomicU64,
    pub resets: AtomicU64,
    pub fwio: AtomicU64,
    pub threads: AtomicU64,
    /// Time spent running device work inline (inside MMIO writes), ns.
    pub device_ns: AtomicU64,
}

/// Mutable device state, behind one lock.
pub(crate) struct State {
    pub regs: HashMap<u64, u32>,
    pub sems: Vec<Vec<i32>>,
    pub events: Vec<Vec<u8>>,
    pub topsp_sems: Vec<Vec<i32>>,
    pub topsp_events: Vec<Vec<u8>>,
    pub udma: Vec<Engine>,
    pub nq: HashMap<u64, NqSlot>,
    pub seq: Vec<[SeqEng; 5]>,
    /// Work pending per NC (doorbells, semaphore changes, collective completions).
    pub pending: Vec<bool>,
    /// Per NC and semaphore: bumped on every change, so a waiting engine re-evaluates its
    /// wait only when the semaphore it waits on changed.
    pub sem_gen: Vec<Vec<u32>>,
    pub faults: Vec<FaultSpec>,
    pub coll_seq: HashMap<(u32, u32), u32>,
    pub fw_busy_until: Option<Instant>,
    pub dge_bytes: Vec<u64>,
    pub scratch: Vec<u8>,
    /// Reusable segment lists (device accesses resolve into them without allocating).
    pub seg_pool: ListPool<Seg>,
    /// Reusable descriptor lists (UDMA packets are gathered into them without allocating).
    pub desc_pool: ListPool<csr_maps::formats::udma::UdmaDesc>,
}

/// Emptied lists kept for reuse, so the device's hot paths do not allocate.
pub(crate) struct ListPool<T>(Vec<Vec<T>>);

impl<T> Default for ListPool<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T> ListPool<T> {
    /// An empty list (a pooled one when available).
    pub fn take(&mut self) -> Vec<T> {
        let mut v = self.0.pop().unwrap_or_default();
        v.clear();
        v
    }
    /// Return a list for reuse (a few are kept).
    pub fn give(&mut self, v: Vec<T>) {
        if self.0.len() < 8 {
            self.0.push(v);
        }
    }
}

/// One piece of a device access.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg {
    /// Raw memory (host through the IOMMU, HBM, or state buffer).
    Mem(usize, usize),
    /// BAR0 register space at this offset.
    Csr(u64, usize),
}

pub(crate) struct Dev {
    pub arch: &'static Arch,
    pub cfg: SimConfig,
    pub dec: Decoder,
    pub hbm: Vec<HostMem>,
    pub hbm_bytes: u64,
    pub sbuf: Vec<HostMem>,
    pub iommu: Iommu,
    pub st: Mutex<State>,
    pub cvs: Vec<Condvar>,
    threads: Mutex<Vec<Option<JoinHandle<()>>>>,
    pub hub: Arc<Hub>,
    pub n: Counters,
    pub dev_mem: AtomicI64,
    pub epoch: Instant,
    pub shutdown: AtomicBool,
    irq: Mutex<HashMap<u32, OwnedFd>>,
    pub me: Weak<Dev>,
    /// A zero-sized MMIO used only to compute typed register offsets.
    pub null: MemMmio,
}

impl Dev {
    pub fn regs(&self) -> Regs<'_> {
        Regs::new(self.arch, &self.null)
    }

    pub fn ncs(&self) -> usize {
        self.arch.counts.ncs as usize
    }

    /// NC served by DMA engine `e`.
    pub fn nc_of_engine(&self, e: usize) -> usize {
        let c = &self.arch.counts;
        let per = c.dma_engines_per_nc as usize;
        if e < per * self.ncs() {
            e / per
        } else {
            let k = e.saturating_sub(self.arch.consts.h2t_engine_base as usize);
            (k * self.arch.consts.h2t_ncs_per_engine as usize).min(self.ncs() - 1)
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The state lock. Contended acquisitions spin briefly before blocking: device work
    /// holds the lock for microseconds, and parking the host thread in the kernel would add
    /// a wake-up to its next register access.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        for i in 0..4096u32 {
            match self.st.try_lock() {
                Ok(g) => return g,
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if i < 4000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---------------------------------------------------------------- address space

    /// Resolve `[addr, addr+len)` of the device address space into pieces.
    /// Host pieces are translated under `maps` (a held IOMMU read guard).
    pub fn resolve(
        &self,
        maps: &std::collections::BTreeMap<u64, Mapping>,
        addr: u64,
        len: u64,
        write: bool,
        out: &mut Vec<Seg>,
    ) -> Result<(), DmaFault> {
        if len == 0 {
            return Ok(());
        }
        if let Some(iova) = self.arch.dev_to_host_iova(addr) {
            // On a fault the caller discards `out` (the access aborts).
            return translate(maps, iova, len, write, &mut |h, l| out.push(Seg::Mem(h, l)));
        }
        if let Some((k, off)) = self.arch.dev_to_hbm(addr) {
            let end = off.checked_add(len).ok_or(DmaFault::Decode { addr })?;
            let mem = self.hbm.get(k as usize).ok_or(DmaFault::Decode { addr })?;
            if end > self.hbm_bytes {
                return Err(DmaFault::Decode { addr: addr + (self.hbm_bytes.saturating_sub(off)) });
            }
            out.push(Seg::Mem(mem.as_ptr() as usize + off as usize, len as usize));
            return Ok(());
        }
        if let Some(bar) = self.arch.dev_to_bar0(addr) {
            if let Some((nc, rel)) = self.sbuf_of(bar) {
                if rel + len > self.sbuf[nc].len() as u64 {
                    return Err(DmaFault::Decode { addr });
                }
                out.push(Seg::Mem(self.sbuf[nc].as_ptr() as usize + rel as usize, len as usize));
                return Ok(());
            }
            if self.arch.dev_to_bar0(addr + len - 1) != Some(bar + len - 1) {
                return Err(DmaFault::Decode { addr });
            }
            out.push(Seg::Csr(bar, len as usize));
            return Ok(());
        }
        Err(DmaFault::Decode { addr })
    }

    /// NC and offset of a BAR0 offset inside a state buffer.
    pub fn sbuf_of(&self, bar_off: u64) -> Option<(usize, u64)> {
        let r = self.arch.region("sbuf")?;
        (0..r.count()).find_map(|i| {
            let b = r.base(i)?;
            (bar_off >= b && bar_off - b < r.size).then(|| (i as usize, bar_off - b))
        })
    }

    /// Resolve `[addr, addr+len)` into a pooled segment list and run `f` on it while the
    /// IOMMU read guard is held (host pieces stay mapped for the whole access).
    fn with_segs<R>(
        &self,
        st: &mut State,
        addr: u64,
        len: u64,
        write: bool,
        f: impl FnOnce(&mut State, &[Seg]) -> R,
    ) -> Result<R, DmaFault> {
        let maps = self.iommu.maps.read().unwrap_or_else(|e| e.into_inner());
        let mut segs = st.seg_pool.take();
        let r = self.resolve(&maps, addr, len, write, &mut segs).map(|()| f(st, &segs));
        st.seg_pool.give(segs);
        r
    }

    /// Read device memory (not CSRs) at a device address.
    pub fn dev_read(&self, st: &mut State, addr: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        self.with_segs(st, addr, buf.len() as u64, false, |st, segs| {
            let mut o = 0;
            for &s in segs {
                match s {
                    Seg::Mem(p, l) => {
                        // SAFETY: `p..p+l` lies inside a live HostMem (HBM, state buffer, or a
                        // host buffer kept mapped by the IOMMU read guard `with_segs` holds);
                        // `buf` is distinct.
                        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, buf[o..o + l].as_mut_ptr(), l) };
                        o += l;
                    }
                    Seg::Csr(off, l) => {
                        for w in 0..l.div_ceil(4) {
                            let v = self.reg_read(st, off + 4 * w as u64).to_le_bytes();
                            let n = (l - 4 * w).min(4);
                            buf[o + 4 * w..o + 4 * w + n].copy_from_slice(&v[..n]);
                        }
                        o += l;
                    }
                }
            }
        })?;
        std::sync::atomic::fence(Ordering::Acquire);
        Ok(())
    }

    /// Write at a device address (memory or CSRs).
    pub fn dev_write(&self, st: &mut State, addr: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.with_segs(st, addr, data.len() as u64, true, |st, segs| {
            let mut o = 0;
            for &s in segs {
                match s {
                    Seg::Mem(p, l) => {
                        // SAFETY: as in `dev_read`; the destination is device-writable memory.
                        unsafe { std::ptr::copy_nonoverlapping(data[o..o + l].as_ptr(), p as *mut u8, l) };
                        o += l;
                    }
                    Seg::Csr(off, l) => {
                        write_csr_bytes(self, st, off, &data[o..o + l]);
                        o += l;
                    }
                }
            }
        })?;
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    // ---------------------------------------------------------------- registers

    /// Generic stored value (or the reset value).
    pub fn stored(&self, st: &State, off: u64, reset: u64) -> u32 {
        st.regs.get(&off).copied().unwrap_or(reset as u32)
    }

    /// Stored value of a plain register, falling back to its described reset value.
    pub fn reg_value(&self, st: &State, off: u64) -> u32 {
        let reset = self.dec.decode(off).map(|h| h.reg.def.reset).unwrap_or(0);
        self.stored(st, off, reset)
    }

    /// Register read with side effects and computed values.
    pub fn reg_read(&self, st: &mut State, off: u64) -> u32 {
        let Some(hit) = self.dec.decode(off) else {
            self.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        let name = hit.reg.name();
        match hit.kind {
            Kind::TpbSem | Kind::TopspSem => {
                let i = hit.reg.elem as usize;
                let nc = hit.index as usize;
                let (sems, events) =
                    if hit.kind == Kind::TpbSem { (&st.sems, &st.events) } else { (&st.topsp_sems, &st.topsp_events) };
                match name {
                    "event" => events.get(nc).and_then(|e| e.get(i)).copied().unwrap_or(0) as u32,
                    "sem_read" => sems.get(nc).and_then(|s| s.get(i)).copied().unwrap_or(0) as u32,
                    _ => 0,
                }
            }
            Kind::Udma => crate::udma::reg_read(self, st, &hit, off),
            Kind::Notific | Kind::NotificTopsp => crate::nq::reg_read(self, st, &hit, off),
            Kind::Sdma if hit.reg.sub("trace_nq").is_some() => crate::nq::reg_read(self, st, &hit, off),
            Kind::Seq => crate::seq::reg_read(self, st, &hit, off),
            Kind::MiscRam => crate::fwio::reg_read(self, st, &hit, off),
            _ => self.generic_read(st, &hit, off),
        }
    }

    pub fn generic_read(&self, st: &State, hit: &Hit<'_>, off: u64) -> u32 {
        let def = hit.reg.def;
        if !def.access.readable() {
            return 0;
        }
        if hit.reg.name() == "status" && is_iofic(hit) {
            let (Some(c), Some(m)) = (sibling(hit, off, "cause"), sibling(hit, off, "mask")) else { return 0 };
            return self.stored(st, c, 0) & !self.stored(st, m, u32::MAX as u64);
        }
        self.stored(st, off, def.reset)
    }

    /// Register write with side effects. Returns nothing; work is flagged in `st.pending`.
    pub fn reg_write(&self, st: &mut State, off: u64, val: u32) {
        let Some(hit) = self.dec.decode(off) else {
            self.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match hit.kind {
            Kind::TpbSem | Kind::TopspSem => {
                let i = hit.reg.elem as usize;
                let nc = hit.index as usize;
                let (sems, events) = if hit.kind == Kind::TpbSem {
                    (&mut st.sems, &mut st.events)
                } else {
                    (&mut st.topsp_sems, &mut st.topsp_events)
                };
                let (Some(s), Some(e)) = (sems.get_mut(nc), events.get_mut(nc)) else { return };
                match hit.reg.name() {
                    "event" => e[i] = (val & 1) as u8,
                    "sem_set" => s[i] = val as i32,
                    "sem_inc" => s[i] = s[i].wrapping_add(val as i32),
                    "sem_dec" => s[i] = s[i].wrapping_sub(val as i32),
                    _ => {}
                }
                if hit.kind == Kind::TpbSem {
                    st.pending[nc] = true;
                    if let Some(g) = st.sem_gen.get_mut(nc).and_then(|g| g.get_mut(i)) {
                        *g = g.wrapping_add(1);
                    }
                }
            }
            Kind::Udma => crate::udma::reg_write(self, st, &hit, off, val),
            Kind::Notific | Kind::NotificTopsp => crate::nq::reg_write(self, st, &hit, off, val),
            Kind::Sdma if hit.reg.sub("trace_nq").is_some() => crate::nq::reg_write(self, st, &hit, off, val),
            Kind::Seq => crate::seq::reg_write(self, st, &hit, off, val),
            Kind::MiscRam => crate::fwio::reg_write(self, st, &hit, off, val),
            Kind::Q7 => crate::seq::q7_write(self, st, &hit, off, val),
            _ => self.generic_write(st, &hit, off, val),
        }
    }

    pub fn generic_write(&self, st: &mut State, hit: &Hit<'_>, off: u64, val: u32) {
        use csr_maps::meta::Access;
        let def = hit.reg.def;
        if is_iofic(hit) {
            match hit.reg.name() {
                "cause" => {
                    let c = self.stored(st, off, 0);
                    st.regs.insert(off, c & !val);
                    return;
                }
                "cause_set" => {
                    if let Some(c) = sibling(hit, off, "cause") {
                        let v = self.stored(st, c, 0);
                        st.regs.insert(c, v | val);
                    }
                    return;
                }
                "mask_clear" => {
                    if let Some(m) = sibling(hit, off, "mask") {
                        let v = self.stored(st, m, u32::MAX as u64);
                        st.regs.insert(m, v & val);
                    }
                    return;
                }
                _ => {}
            }
        }
        match def.access {
            Access::ReadOnly => {}
            Access::WriteOneToClear => {
                let c = self.stored(st, off, def.reset);
                st.regs.insert(off, c & !val);
            }
            Access::WriteOneToSet => {
                let c = self.stored(st, off, def.reset);
                st.regs.insert(off, c | val);
            }
            _ => {
                st.regs.insert(off, val);
            }
        }
    }

    /// Latch cause bits at the register `off` (an IOFIC `cause`).
    pub fn latch(&self, st: &mut State, off: u64, bits: u32) {
        let c = self.stored(st, off, 0);
        st.regs.insert(off, c | bits);
    }

    /// Latch an NC INTC line: group 0 by field name, or group 1.
    pub fn intc(&self, st: &mut State, nc: usize, group: u8, field: &str) {
        let r = self.regs();
        let Ok(b) = r.nc_intc(nc as u64) else { return };
        let (off, def) = if group == 0 {
            (b.g0().cause().offset(), csr_maps::meta::block("nc_intc_g0"))
        } else {
            (b.g1().cause().offset(), csr_maps::meta::block("nc_intc_g1"))
        };
        let bit = def
            .and_then(|d| d.regs.iter().find(|r| r.name == "cause"))
            .and_then(|r| r.fields.iter().find(|f| f.name == field))
            .map(|f| 1u32 << f.lsb);
        if let Some(bit) = bit {
            self.latch(st, off, bit);
        }
    }

    // ---------------------------------------------------------------- execution

    /// Run everything pending on `nc` until no progress; collect deliveries.
    pub fn run_nc(&self, st: &mut State, nc: usize, out: &mut Vec<Delivery>) {
        let mut rounds = 0u32;
        loop {
            st.pending[nc] = false;
            let mut progress = crate::udma::run(self, st, nc);
            progress |= crate::seq::run(self, st, nc, out);
            rounds += 1;
            if !progress && !st.pending[nc] {
                break;
            }
            if rounds > 1_000_000 {
                // A program that spins forever without blocking (e.g. a loop of NOPs):
                // leave it pending for the next kick.
                break;
            }
        }
    }

    /// After a host-triggered change: run (inline), wake threads, or do nothing (step).
    pub fn after(&self, mut st: MutexGuard<'_, State>) {
        match self.cfg.timing {
            Timing::Step => {}
            Timing::Inline => {
                if !st.pending.iter().any(|&p| p) {
                    return;
                }
                let t0 = Instant::now();
                let mut out = Vec::new();
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
            let Some(dev) = d.dev.upgrade() else { continue };
            let mut st = dev.lock();
            if let Err(f) = dev.dev_write(&mut st, d.dst, &d.data) {
                dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
                crate::seq::fault_engine(&dev, &mut st, d.nc, d.engine, crate::seq::code::MEMORY, Some(f));
            }
            if let Some(e) = st.seq.get_mut(d.nc).and_then(|s| s.get_mut(d.engine)) {
                e.coll_done = true;
            }
            st.pending[d.nc] = true;
            match dev.cfg.timing {
                Timing::Inline => {
                    let mut more = Vec::new();
                    dev.run_nc(&mut st, d.nc, &mut more);
                    drop(st);
                    work.extend(more);
                }
                Timing::Threaded => {
                    drop(st);
                    dev.ensure_thread(d.nc);
                    dev.cvs[d.nc].notify_one();
                }
                Timing::Step => {}
            }
        }
    }

    fn ensure_thread(&self, nc: usize) {
        let mut t = self.threads.lock().unwrap_or_else(|e| e.into_inner());
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
        let m = self.irq.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = m.get(&vector) {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
            unsafe { libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
        }
    }

    /// Restore reset values everywhere (FLR / device reset) and drop in-flight work.
    pub fn reset_all(&self, st: &mut State) {
        let n = self.ncs();
        st.regs.clear();
        for nc in 0..n {
            self.reset_nc_state(st, nc);
        }
        for e in st.udma.iter_mut() {
            *e = Engine::default();
        }
        for s in st.topsp_sems.iter_mut() {
            s.fill(0);
        }
        for s in st.topsp_events.iter_mut() {
            s.fill(0);
        }
        st.nq.clear();
        st.faults.clear();
        st.coll_seq.clear();
        self.init_regs(st);
        self.n.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// Reset one NC: semaphores, events, sequencers, its DMA engines' queues, NQs, INTC.
    pub fn reset_nc_state(&self, st: &mut State, nc: usize) {
        st.sems[nc].fill(0);
        for g in st.sem_gen[nc].iter_mut() {
            *g = g.wrapping_add(1);
        }
        st.events[nc].fill(0);
        for e in st.seq[nc].iter_mut() {
            *e = SeqEng::default();
        }
        let r = self.regs();
        let mut clear: Vec<(u64, u64)> = Vec::new();
        for (kind, idx) in [(Kind::Seq, nc as u32), (Kind::NcIntc, nc as u32), (Kind::Notific, nc as u32)] {
            if let Some(b) = self.dec.base(kind, idx) {
                let size = self.dec.instances().find(|s| s.start == b).map(|s| s.end - s.start).unwrap_or(0);
                clear.push((b, b + size));
            }
        }
        let per = self.arch.counts.dma_engines_per_nc as usize;
        for e in (0..st.udma.len()).filter(|&e| e / per == nc && e < per * self.ncs()) {
            st.udma[e] = Engine::default();
        }
        st.regs.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        st.nq.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        for c in 0..q7c::POOL_CORES {
            if let Ok(q) = r.q7(nc as u64 * q7c::POOL_CORES + c) {
                st.regs.retain(|k, _| *k < q.base() || *k >= q.base() + csr_maps::blocks::q7::SIZE);
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        let nx = seqc::ENGINES.len() as u64;
        for c in 0..nx {
            if let Ok(q) = r.nx(nc as u64 * nx + c) {
                st.regs.retain(|k, _| *k < q.base() || *k >= q.base() + csr_maps::blocks::q7::SIZE);
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        st.faults.retain(|f| f.nc != nc);
        st.pending[nc] = false;
    }

    /// Power-on register contents that differ from the description's reset values.
    pub fn init_regs(&self, st: &mut State) {
        let r = self.regs();
        if let Ok(m) = r.misc_ram(0) {
            st.regs.insert(m.device_id().offset(), self.cfg.device_index);
            st.regs.insert(m.fw_api_version().offset(), self.cfg.fw_api_version);
            st.regs.insert(m.serial_lo().offset(), self.cfg.device_index);
        }
        for i in 0..(self.ncs() as u64 * q7c::POOL_CORES) {
            if let Ok(q) = r.q7(i) {
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        for i in 0..(self.ncs() as u64 * seqc::ENGINES.len() as u64) {
            if let Ok(q) = r.nx(i) {
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
    }
}

/// BAR0 offset of register `name` in the same block instance as the hit.
fn sibling(hit: &Hit<'_>, off: u64, name: &str) -> Option<u64> {
    let base = off - hit.reg.def.offset - hit.reg.elem as u64 * hit.reg.def.stride;
    hit.reg.block.regs.iter().find(|r| r.name == name).map(|r| base + r.offset)
}

fn is_iofic(hit: &Hit<'_>) -> bool {
    matches!(hit.kind, Kind::NcIntc | Kind::UserErrtrig)
        || (hit.kind == Kind::Udma && hit.reg.sub("gen").is_some() && hit.reg.path.len() >= 2)
}

/// Register writes coming from the device side (DMA to a CSR, WRITE instruction): 4 bytes at a
/// time, a partial last word zero-padded.
fn write_csr_bytes(dev: &Dev, st: &mut State, off: u64, data: &[u8]) {
    for (w, chunk) in data.chunks(4).enumerate() {
        let mut b = [0u8; 4];
        b[..chunk.len()].copy_from_slice(chunk);
        dev.reg_write(st, off + 4 * w as u64, u32::from_le_bytes(b));
    }
}

fn nc_thread(dev: Arc<Dev>, nc: usize) {
    let mut st = dev.lock();
    loop {
        if dev.shutdown.load(Ordering::Acquire) {
            break;
        }
        if !st.pending[nc] {
            st = dev.cvs[nc].wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let mut out = Vec::new();
        dev.run_nc(&mut st, nc, &mut out);
        if !out.is_empty() {
            drop(st);
            dev.deliver(out);
            st = dev.lock();
        }
    }
    dev.n.threads.fetch_sub(1, Ordering::Relaxed);
}

// ==================================================================== public handles

/// One simulated Neuron device. Cloning shares the device; device threads stop when
/// the last handle is dropped.
#[derive(Clone)]
pub struct SimDevice {
    pub(crate) dev: Arc<Dev>,
    _handle: Arc<Handle>,
}

struct Handle(Arc<Dev>);

impl Drop for Handle {
    fn drop(&mut self) {
        let d = &self.0;
        d.shutdown.store(true, Ordering::Release);
        for cv in &d.cvs {
            // Take the lock so a thread between its pending check and its wait cannot miss this.
            drop(d.lock());
            cv.notify_all();
        }
        let hs: Vec<_> = {
            let mut t = d.threads.lock().unwrap_or_else(|e| e.into_inner());
            t.iter_mut().filter_map(|h| h.take()).collect()
        };
        for h in hs {
            let _ = h.join();
        }
    }
}

impl SimDevice {
    /// A device of `cfg.arch`, with its own collective hub.
    pub fn new(cfg: SimConfig) -> Result<Self, SimError> {
        Self::with_hub(cfg, Arc::new(Hub::default()))
    }

    pub(crate) fn with_hub(cfg: SimConfig, hub: Arc<Hub>) -> Result<Self, SimError> {
        let arch = cfg.arch;
        let ncs = arch.counts.ncs as usize;
        let hbm_bytes = cfg.hbm_bytes.unwrap_or(arch.consts.hbm_active_size).min(arch.consts.hbm_active_size);
        let mut hbm = Vec::new();
        for _ in 0..arch.counts.hbm_stacks {
            hbm.push(HostMem::alloc_with(hbm_bytes as usize, platform::PageSize::Base4K)?);
        }
        let sbuf_size = arch.region("sbuf").map(|r| r.size).unwrap_or(1 << 20);
        let mut sbuf = Vec::new();
        for _ in 0..ncs {
            sbuf.push(HostMem::alloc_with(sbuf_size as usize, platform::PageSize::Base4K)?);
        }
        // IOVAs below the PCIe route bits (the host window ORs them in).
        let route_lo = arch.consts.host_route_mask.trailing_zeros().min(47);
        let iommu = Iommu::new(1 << 20, 1u64 << route_lo);
        let sems = arch.counts.semaphores as usize;
        let evs = arch.counts.events as usize;
        let st = State {
            regs: HashMap::new(),
            sems: vec![vec![0; sems]; ncs],
            events: vec![vec![0; evs]; ncs],
            topsp_sems: vec![vec![0; sems]; arch.counts.top_sps as usize],
            topsp_events: vec![vec![0; evs]; arch.counts.top_sps as usize],
            udma: (0..arch.counts.dma_engines).map(|_| Engine::default()).collect(),
            nq: HashMap::new(),
            seq: (0..ncs).map(|_| Default::default()).collect(),
            pending: vec![false; ncs],
            sem_gen: vec![vec![0; sems]; ncs],
            faults: Vec::new(),
            coll_seq: HashMap::new(),
            fw_busy_until: None,
            dge_bytes: vec![0; arch.counts.dma_engines_per_nc as usize],
            scratch: Vec::new(),
            seg_pool: ListPool::default(),
            desc_pool: ListPool::default(),
        };
        let dev = Arc::new_cyclic(|me| Dev {
            arch,
            dec: Decoder::new(arch),
            hbm,
            hbm_bytes,
            sbuf,
            iommu,
            st: Mutex::new(st),
            cvs: (0..ncs).map(|_| Condvar::new()).collect(),
            threads: Mutex::new((0..ncs).map(|_| None).collect()),
            hub,
            n: Counters::default(),
            dev_mem: AtomicI64::new(0),
            epoch: Instant::now(),
            shutdown: AtomicBool::new(false),
            irq: Mutex::new(HashMap::new()),
            me: me.clone(),
            null: MemMmio::new(0),
            cfg,
        });
        {
            let mut st = dev.lock();
            dev.init_regs(&mut st);
        }
        Ok(Self { _handle: Arc::new(Handle(dev.clone())), dev })
    }

    /// A device from a spec `sim`, `sim:ARCH` (sunda/cayman/mariana).
    pub fn from_spec(spec: &str, timing: Timing) -> Result<Self, SimError> {
        let mut it = spec.split(':');
        if it.next() != Some("sim") {
            return Err(SimError::Spec(spec.to_string()));
        }
        let arch = match it.next() {
            None | Some("") => &csr_maps::SUNDA,
            Some(a) => Arch::by_name(a)?,
        };
        Self::new(SimConfig::new(arch).timing(timing))
    }

    /// Nanoseconds of device work run inline so far (cheap: one atomic load).
    pub fn device_ns(&self) -> u64 {
        self.dev.n.device_ns.load(Ordering::Relaxed)
    }

    /// The instant device timestamps count from (timestamp = ns since then × ts_per_ns).
    pub fn epoch(&self) -> Instant {
        self.dev.epoch
    }

    /// The simulated arch.
    pub fn arch(&self) -> &'static Arch {
        self.dev.arch
    }

    /// Arm a fault (see [`FaultSpec`]).
    pub fn inject(&self, f: FaultSpec) {
        let mut st = self.dev.lock();
        crate::fault::arm(&self.dev, &mut st, f);
        self.dev.after(st);
    }

    /// Step mode: run every pending NC once to quiescence. Returns whether anything ran.
    pub fn step(&self) -> bool {
        let mut st = self.dev.lock();
        let mut out = Vec::new();
        let mut any = false;
        for nc in 0..self.dev.ncs() {
            if st.pending[nc] {
                any = true;
                self.dev.run_nc(&mut st, nc, &mut out);
            }
        }
        drop(st);
        self.dev.deliver(out);
        any
    }

    /// Step mode: step until nothing is pending.
    pub fn run_until_idle(&self) {
        while self.step() {}
    }

    /// Counters, engine states and accounting.
    pub fn stats(&self) -> SimStats {
        let d = &self.dev;
        let (maps, bytes) = d.iommu.usage();
        let st = d.lock();
        SimStats {
            iommu_mappings: maps,
            iommu_bytes: bytes,
            device_bytes: d.dev_mem.load(Ordering::Relaxed),
            dma_faults: d.n.dma_faults.load(Ordering::Relaxed),
            dma_aborts: d.n.dma_aborts.load(Ordering::Relaxed),
            dma_bytes: d.n.dma_bytes.load(Ordering::Relaxed),
            dma_packets: d.n.dma_packets.load(Ordering::Relaxed),
            nq_records: d.n.nq_records.load(Ordering::Relaxed),
            dropped_records: d.n.dropped_records.load(Ordering::Relaxed),
            slots_executed: d.n.slots.load(Ordering::Relaxed),
            collectives: d.n.collectives.load(Ordering::Relaxed),
            unclaimed_accesses: d.n.unclaimed.load(Ordering::Relaxed),
            resets: d.n.resets.load(Ordering::Relaxed),
            fwio_requests: d.n.fwio.load(Ordering::Relaxed),
            dge_channel_bytes: st.dge_bytes.clone(),
            engine_states: st.seq.iter().map(|e| std::array::from_fn(|i| e[i].state)).collect(),
            threads: d.n.threads.load(Ordering::Relaxed),
            device_ns: d.n.device_ns.load(Ordering::Relaxed),
        }
    }
}

struct Bar0(Arc<Dev>);
struct Bar4(Arc<Dev>);

impl Mmio for Bar0 {
    fn size(&self) -> u64 {
        self.0.dec.bar0_size
    }
    fn read32(&self, off: u64) -> Result<u32, platform::MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        let d = &self.0;
        if let Some((nc, rel)) = d.sbuf_of(off) {
            return Ok(d.sbuf[nc].read_u32(rel as usize).unwrap_or(0));
        }
        let mut st = d.lock();
        Ok(d.reg_read(&mut st, off))
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), platform::MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        let d = &self.0;
        if let Some((nc, rel)) = d.sbuf_of(off) {
            let _ = d.sbuf[nc].write_u32(rel as usize, v);
            return Ok(());
        }
        let mut st = d.lock();
        d.reg_write(&mut st, off, v);
        d.after(st);
        Ok(())
    }
}

impl Bar4 {
    fn at(&self, off: u64, len: u64) -> Option<(usize, usize)> {
        let d = &self.0;
        let r = d.arch.region("hbm")?;
        (0..r.count()).find_map(|k| {
            let b = r.base(k)?;
            (off >= b && off + len <= b + d.hbm_bytes).then(|| (k as usize, (off - b) as usize))
        })
    }
}

impl Mmio for Bar4 {
    fn size(&self) -> u64 {
        let r = self.0.arch.region("hbm");
        r.map(|r| r.groups.iter().map(|g| g.base + g.count * g.stride.max(r.size)).max().unwrap_or(0)).unwrap_or(0)
    }
    fn read32(&self, off: u64) -> Result<u32, platform::MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        match self.at(off, 4) {
            Some((k, o)) => Ok(self.0.hbm[k].read_u32(o).unwrap_or(0)),
            None => {
                self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
                Ok(0)
            }
        }
    }
    fn write32(&self, off: u64, v: u32) -> Result<(), platform::MmioError> {
        platform::mmio::check(off, 4, self.size())?;
        match self.at(off, 4) {
            Some((k, o)) => {
                let _ = self.0.hbm[k].write_u32(o, v);
            }
            None => {
                self.0.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
    fn read64(&self, off: u64) -> Result<u64, platform::MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        Ok(self.at(off, 8).map(|(k, o)| self.0.hbm[k].read_u64(o).unwrap_or(0)).unwrap_or(0))
    }
    fn write64(&self, off: u64, v: u64) -> Result<(), platform::MmioError> {
        platform::mmio::check(off, 8, self.size())?;
        if let Some((k, o)) = self.at(off, 8) {
            let _ = self.0.hbm[k].write_u64(o, v);
        }
        Ok(())
    }
}

struct Unmapper(Weak<Dev>);

impl DmaUnmap for Unmapper {
    fn unmap(&self, iova: u64, len: u64) {
        if let Some(d) = self.0.upgrade() {
            d.iommu.unmap(iova);
            d.iommu.free_iova(iova, len);
        }
    }
}

impl Platform for SimDevice {
    fn identity(&self) -> DeviceIdentity {
        let a = self.dev.arch;
        DeviceIdentity {
            vendor: a.pci_vendor,
            device: a.pci_devices.first().copied().unwrap_or(0),
            revision: 0,
            location: format!("sim{}", self.dev.cfg.device_index),
        }
    }

    fn bar(&self, index: u8) -> Result<Arc<dyn Mmio>, PlatformError> {
        let a = self.dev.arch;
        if index == a.bars.apb {
            Ok(Arc::new(Bar0(self.dev.clone())))
        } else if index == a.bars.dram {
            Ok(Arc::new(Bar4(self.dev.clone())))
        } else {
            Err(PlatformError::NoSuchBar(index))
        }
    }

    fn dma_map(&self, mem: HostMem, dir: DmaDir) -> Result<DmaMapping, PlatformError> {
        let len = mem.len() as u64;
        let iova = self.dev.iommu.alloc_iova(len).ok_or(PlatformError::IovaExhausted { len })?;
        self.dev.iommu.map(
            iova,
            Mapping { len, host: mem.as_ptr() as usize, readable: dir.device_reads(), writable: dir.device_writes() },
        );
        Ok(DmaMapping::new(mem, iova, dir, Arc::new(Unmapper(Arc::downgrade(&self.dev)))))
    }

    fn irq_eventfd(&self, vector: u32) -> Result<Option<OwnedFd>, PlatformError> {
        if vector as usize >= self.dev.ncs() {
            return Err(PlatformError::Irq {
                vector,
                reason: format!("the simulator raises vectors 0..{} (one per NC)", self.dev.ncs()),
            });
        }
        // SAFETY: eventfd(2) with valid flags; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(PlatformError::Io(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let ours = unsafe { OwnedFd::from_raw_fd(fd) };
        let theirs = ours.try_clone()?;
        self.dev.irq.lock().unwrap_or_else(|e| e.into_inner()).insert(vector, ours);
        Ok(Some(theirs))
    }

    fn reset(&self) -> Result<(), PlatformError> {
        let mut st = self.dev.lock();
        self.dev.reset_all(&mut st);
        Ok(())
    }

    fn account_device_memory(&self, delta: i64) {
        self.dev.dev_mem.fetch_add(delta, Ordering::Relaxed);
    }
}

/// N simulated devices (1..16) sharing one collective fabric.
pub struct SimTopology {
    pub devices: Vec<SimDevice>,
}

impl SimTopology {
    /// `n` devices of `cfg.arch`, with device indices 0..n.
    pub fn new(cfg: SimConfig, n: usize) -> Result<Self, SimError> {
        if n == 0 || n > 16 {
            return Err(SimError::TopologySize(n));
        }
        let hub = Arc::new(Hub::default());
        let mut devices = Vec::new();
        for i in 0..n {
            let mut c = cfg.clone();
            c.device_index = i as u32;
            devices.push(SimDevice::with_hub(c, hub.clone())?);
        }
        Ok(Self { devices })
    }
}

// Silence unused-constant lints for re-exported consts used only in some configurations.
const _: (u32, u32, u32) = (udc::COMPLETION_MARKER, seqc::STATE_IDLE, fwc::NOT_READY);
const _: fn(FaultKind) = |_| {};
