//! A UDMA queue pair driven by the host: descriptor rings in host memory, the
//! descriptor writer, doorbells, completion detection and recovery from abort
//! (docs/facts/hardware.md §3). Every register sequence is [`crate::udma`]'s; the queue's
//! ownership (and parking when the ring goes away) is [`crate::park::Parking`]'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use csr_maps::consts::udma as udc;
use csr_maps::formats::udma::{meta, DescCtrl, UdmaDesc, DESC_BYTES, MAX_DESC_LEN};
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};
use crate::mem::{HostBuf, HostPool};
use crate::park::Parking;
use crate::regions::{Perm, Region};
use crate::udma::{self, descs_per_packet, engine_aborted};

/// One queue pair driven by the host: descriptor rings in host memory. Dropping it parks
/// the queue on the device's dummy ring before the host rings are freed ([`Parking`]).
pub struct Ring {
    arch: &'static Arch,
    park: Arc<Parking>,
    /// This ring's id for queue ownership ([`Parking`]).
    id: u64,
    pub engine: u64,
    pub queue: u64,
    m2s_ring: HostBuf,
    s2m_ring: HostBuf,
    /// Two words: marker source ([`csr_maps::consts::udma::COMPLETION_MARKER`]) and
    /// completion destination.
    marker: HostBuf,
    ndesc: u32,
    next: u32,
    ring_id: u8,
    /// Slot of the last data pair [`Ring::copy`] wrote since its last completion marker
    /// (it gets the write barrier).
    last_data: Option<u32>,
    /// Timeout per completion wait.
    pub timeout: Duration,
}

/// Offset of the completion marker's destination word in the marker buffer: right after
/// its source word, as the kmod lays out its completion buffer (`ndma_memcpy_add_completion_desc`,
/// `DMA_COMPLETION_MARKER_SIZE`).
const MARKER_DST: usize = 4;

/// One descriptor pair as the ring holds it: (M2S, S2M).
pub type DescPair = (UdmaDesc, UdmaDesc);

/// A copy leg: device address and length.
#[derive(Debug, Clone, Copy)]
pub struct Xfer {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

impl Ring {
    /// Program queue `queue` of engine `engine` onto fresh rings of `ndesc` descriptors (§3.7).
    /// `park` is the device's parking state (the dummy ring the queue goes to on drop).
    pub fn new(park: &Arc<Parking>, pool: &HostPool, engine: u64, queue: u64, ndesc: u32) -> Result<Self> {
        let arch = park.arch();
        if !ndesc.is_power_of_two() || (ndesc as u64) < udc::RING_MIN_DESCS || ndesc as u64 > udc::RING_MAX_DESCS {
            return Err(HalError::RingSize(ndesc as u64));
        }
        park.ensure_dummy(pool)?;
        let bytes = ndesc as usize * DESC_BYTES;
        let m2s_ring = pool.alloc(bytes, udc::RING_ALIGN as usize)?;
        let s2m_ring = pool.alloc(bytes, udc::RING_ALIGN as usize)?;
        let marker = pool.alloc(64, 64)?;
        m2s_ring.fill(0, bytes, 0)?;
        s2m_ring.fill(0, bytes, 0)?;
        marker.write_u32(0, udc::COMPLETION_MARKER)?;
        marker.write_u32(MARKER_DST, 0)?;
        let r = Self {
            arch,
            park: park.clone(),
            id: park.new_id(),
            engine,
            queue,
            m2s_ring,
            s2m_ring,
            marker,
            ndesc,
            next: 0,
            ring_id: udc::INITIAL_RING_ID,
            last_data: None,
            timeout: Duration::from_secs(10),
        };
        r.program(&park.regs())?;
        Ok(r)
    }

    /// (Re)program both halves: pause, reset, base, length, no completion ring, enable.
    fn program(&self, regs: &Regs<'_>) -> Result<()> {
        platform::failpoint::hit("hal.udma.program")?;
        let mb = self.arch.host_dev_addr(self.m2s_ring.iova());
        let sb = self.arch.host_dev_addr(self.s2m_ring.iova());
        udma::program_queue(regs, self.engine, self.queue, mb, sb, self.ndesc)?;
        self.park.claim_udma(self.engine, self.queue, self.id);
        Ok(())
    }

    /// Descriptor pairs available before the ring must be drained (16 of slack, §3.5).
    fn capacity(&self) -> usize {
        self.ndesc as usize - udc::RING_SLACK as usize - 1
    }

    /// Write a TX/RX pair at the producer index, given as encoded control words without
    /// their ring id, (word1, address) each; returns the slot written.
    fn put_words(&mut self, m: (u32, u32, u64), s: (u32, u32, u64)) -> Result<u32> {
        let rid = DescCtrl { ring_id: self.ring_id, ..Default::default() }.encode();
        let at = self.next as usize * DESC_BYTES;
        self.m2s_ring.write(at, &UdmaDesc::encode_words(m.0 | rid, m.1, m.2))?;
        self.s2m_ring.write(at, &UdmaDesc::encode_words(s.0 | rid, s.1, s.2))?;
        let slot = self.next;
        self.next += 1;
        if self.next == self.ndesc {
            self.next = 0;
            self.ring_id = (self.ring_id + 1) & 3;
        }
        Ok(slot)
    }

    /// Write a host-driven copy as the kmod does (`ndma_memcpy_chunks`,
    /// `udma_m2m_build_descriptor`): one packet per descriptor pair of at most 64 KiB — the
    /// M2S descriptor FIRST|LAST with the default metadata, the S2M descriptor a buffer with
    /// no packet flags (the hardware defines none on S2M). Returns how many pairs were
    /// written; the last one's slot is remembered for the write barrier ([`Ring::finish`]).
    fn push_copy(&mut self, x: &Xfer) -> Result<usize> {
        let mut off = 0u64;
        let mut n = 0usize;
        while off < x.len {
            let len = (x.len - off).min(MAX_DESC_LEN as u64) as u32;
            let m = DescCtrl { len, first: true, last: true, ..Default::default() }.encode();
            let s = DescCtrl { len, ..Default::default() }.encode();
            self.last_data = Some(self.put_words((m, meta::DEFAULT, x.src + off), (s, 0, x.dst + off))?);
            off += len as u64;
            n += 1;
        }
        Ok(n)
    }

    /// Write the descriptor pairs of one staged transfer as libnrt builds its model I/O rings
    /// (docs/facts/libnrt.md §4.5): packets of ≤ 64 descriptors of ≤ 64 KiB chained
    /// FIRST..CONCAT..LAST, the same control word on both halves. Returns how many pairs
    /// were written.
    fn push_staged(&mut self, x: &Xfer) -> Result<usize> {
        let mut off = 0u64;
        let mut n = 0usize;
        while off < x.len {
            let left = x.len - off;
            let descs = (left.div_ceil(MAX_DESC_LEN as u64) as usize).min(descs_per_packet(self.arch));
            for i in 0..descs {
                let len = (left - i as u64 * MAX_DESC_LEN as u64).min(MAX_DESC_LEN as u64) as u32;
                let first = i == 0;
                let last = i + 1 == descs;
                let w0 = DescCtrl { len, first, last, concat: !last, ..Default::default() }.encode();
                self.put_words((w0, meta::DEFAULT, x.src + off), (w0, 0, x.dst + off))?;
                off += len as u64;
                n += 1;
            }
        }
        Ok(n)
    }

    /// The `n` descriptor pairs from slot `from` (wrapping) as they are in the rings: what a
    /// debugger or a dump shows of the queue, and what the kmod oracle compares.
    pub fn descriptors(&self, from: u32, n: u32) -> Result<Vec<DescPair>> {
        let mut out = Vec::with_capacity(n.min(self.ndesc) as usize);
        for k in 0..n.min(self.ndesc) {
            let at = ((from + k) % self.ndesc) as usize * DESC_BYTES;
            let (mut m, mut s) = ([0u8; DESC_BYTES], [0u8; DESC_BYTES]);
            self.m2s_ring.read(at, &mut m)?;
            self.s2m_ring.read(at, &mut s)?;
            out.push((UdmaDesc::decode(&m), UdmaDesc::decode(&s)));
        }
        Ok(out)
    }

    /// Device address of the completion marker's source word (its destination follows it).
    pub fn marker_dev_addr(&self) -> u64 {
        self.arch.host_dev_addr(self.marker.iova())
    }

    /// Pairs one transfer needs.
    pub fn pairs_for(len: u64) -> usize {
        len.div_ceil(MAX_DESC_LEN as u64) as usize
    }

    /// Copy every transfer (device addresses), then the completion-marker pair; ring the
    /// doorbells (RX before TX) and wait for the marker. Large batches are split so the
    /// ring never overflows.
    pub fn copy(&mut self, regs: &Regs<'_>, xfers: &[Xfer]) -> Result<()> {
        let mut pending = 0usize;
        for x in xfers {
            let mut off = 0u64;
            while off < x.len {
                let chunk = (x.len - off).min((descs_per_packet(self.arch) as u64) * MAX_DESC_LEN as u64);
                let need = Self::pairs_for(chunk);
                if pending + need + 1 > self.capacity() {
                    self.finish(regs, pending)?;
                    pending = 0;
                }
                pending += self.push_copy(&Xfer { src: x.src + off, dst: x.dst + off, len: chunk })?;
                off += chunk;
            }
        }
        self.finish(regs, pending)
    }

    /// Stage descriptor pairs for transfers without ringing the doorbell (a sequencer's
    /// WRITE to the tail-increment registers will). Returns the pairs written; the caller
    /// must keep the ring from overflowing.
    pub fn stage(&mut self, xfers: &[Xfer]) -> Result<u32> {
        let mut n = 0usize;
        for x in xfers {
            n += self.push_staged(x)?;
        }
        Ok(n as u32)
    }

    /// What an NC's ownership region table must grant this queue: descriptor fetch from its
    /// two rings, and its completion-marker words (read and written by [`Ring::copy`]).
    pub fn regions(&self) -> [Region; 3] {
        let host = |b: &HostBuf| self.arch.host_dev_addr(b.iova());
        [
            Region::new(host(&self.m2s_ring), self.m2s_ring.len() as u64, Perm::DESC),
            Region::new(host(&self.s2m_ring), self.s2m_ring.len() as u64, Perm::DESC),
            Region::new(host(&self.marker), self.marker.len() as u64, Perm::READ | Perm::WRITE),
        ]
    }

    /// Device addresses of the (S2M, M2S) tail-increment registers: WRITE targets of a
    /// lowered PSEUDO_DMA_TRIGGER.
    pub fn doorbell_dev_addrs(&self, regs: &Regs<'_>) -> Result<(u64, u64)> {
        udma::doorbell_dev_addrs(self.arch, regs, self.engine, self.queue)
    }

    fn finish(&mut self, regs: &Regs<'_>, pending: usize) -> Result<()> {
        if pending == 0 {
            return Ok(());
        }
        // The kmod's order (`ndma_memcpy_chunks`, `ndma_memcpy_add_completion_desc`): the
        // batch's last data packet carries the write barrier, then the completion-marker pair
        // (host word → host word, FIRST|LAST on M2S, no barrier) follows (§3.4, §3.8).
        if let Some(slot) = self.last_data.take() {
            let at = slot as usize * DESC_BYTES + 4;
            self.m2s_ring.write(at, &(meta::DEFAULT | meta::WRITE_BARRIER).to_le_bytes())?;
        }
        self.marker.atomic_u32(MARKER_DST)?.store(0, Ordering::Release);
        let src = self.arch.host_dev_addr(self.marker.iova());
        let dst = self.arch.host_dev_addr(self.marker.iova() + MARKER_DST as u64);
        let m = DescCtrl { len: 4, first: true, last: true, ..Default::default() }.encode();
        let s = DescCtrl { len: 4, ..Default::default() }.encode();
        self.put_words((m, meta::DEFAULT, src), (s, 0, dst))?;
        let n = pending as u32 + 1;
        std::sync::atomic::fence(Ordering::SeqCst);
        udma::ring_doorbells(regs, self.engine, self.queue, n)?;
        self.wait(regs)
    }

    fn wait(&mut self, regs: &Regs<'_>) -> Result<()> {
        let word = self.marker.atomic_u32(MARKER_DST)?;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if word.load(Ordering::Acquire) == udc::COMPLETION_MARKER {
                return Ok(());
            }
            spins += 1;
            if spins.is_multiple_of(256) {
                if let Some(e) = self.aborted(regs)? {
                    return Err(e);
                }
                if start.elapsed() > self.timeout {
                    return Err(HalError::DmaTimeout {
                        engine: self.engine,
                        queue: self.queue,
                        waited_ms: start.elapsed().as_millis() as u64,
                    });
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The abort error if the queue pair's engine is aborted: any unit of the M2S or S2M
    /// `state` register reads ABORT (the kmod's engine-state rule, `udma_main.c`; the
    /// per-queue `status` register is undocumented).
    pub fn aborted(&self, regs: &Regs<'_>) -> Result<Option<HalError>> {
        if !engine_aborted(regs, self.engine)? {
            return Ok(None);
        }
        let (m2s_cause, s2m_cause) = udma::error_causes(regs, self.engine)?;
        Ok(Some(HalError::DmaAbort { engine: self.engine, queue: self.queue, m2s_cause, s2m_cause }))
    }

    /// Recover from an abort: clear the latched causes (write 0 to clear), re-initialise the
    /// queue onto its (cleared) rings and, only if the engine is in ABORT, return it to
    /// NORMAL. An engine that is not aborted (a timeout, or a queue shared with another NC
    /// on V3/V4 whose owner already recovered it) is left running.
    pub fn recover(&mut self, regs: &Regs<'_>) -> Result<()> {
        let was_aborted = engine_aborted(regs, self.engine)?;
        udma::clear_error_causes(regs, self.engine)?;
        // Reset the queue pair first (drops the descriptors of the failed batch), then
        // return the engine to NORMAL.
        let bytes = self.ndesc as usize * DESC_BYTES;
        self.m2s_ring.fill(0, bytes, 0)?;
        self.s2m_ring.fill(0, bytes, 0)?;
        self.next = 0;
        self.ring_id = udc::INITIAL_RING_ID;
        self.last_data = None;
        self.program(regs)?;
        if was_aborted {
            udma::set_normal(regs, self.engine)?;
        }
        Ok(())
    }

    /// Pause both halves (clear the enable bits) and let in-flight work settle (§3.7).
    pub fn quiesce(&self, regs: &Regs<'_>) -> Result<()> {
        udma::pause_queue(regs, self.engine, self.queue)?;
        std::thread::sleep(udma::QUIESCE_WAIT);
        Ok(())
    }
}

impl Drop for Ring {
    /// Park the queue on the dummy ring before the host rings are freed (the kmod's
    /// `ndmar_handle_process_exit`), if this ring still owns it: a queue since programmed
    /// onto another ring is left alone.
    fn drop(&mut self) {
        if let Err(err) = self.park.release_udma(self.engine, self.queue, self.id) {
            tracing::warn!(engine = self.engine, queue = self.queue, %err, "could not park a DMA queue on the dummy ring");
        }
    }
}
