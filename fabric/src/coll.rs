//! Collective algorithms over any [`Transport`].
//!
//! - Ring reduce-scatter: `n-1` steps; at step `s` rank `r` sends segment `r-s-1` to `r+1`
//!   and receives segment `r-s-2` from `r-1`, reducing it into its own copy (received partial
//!   on the left), so segment `k` is accumulated in the order `k+1, k+2, …, k` and ends on
//!   rank `k` (see [`crate::reduce`]). Every segment is cut into sub-chunks of at most
//!   `chunk_bytes`; a sub-chunk's reduction runs while the next sub-chunk is on the wire
//!   (double-buffered scratch), so transfer and reduction overlap.
//! - Ring all-gather: `n-1` steps; rank `r` sends segment `r-s` and receives `r-s-1`
//!   straight into place, in sub-chunks.
//! - Ring all-reduce = ring reduce-scatter + ring all-gather on the same segments.
//! - Messages of at most `direct_max_bytes`: one round in which every rank sends its data to
//!   every other rank, then reduces locally in the same order (latency-bound sizes: 1 round
//!   trip instead of `2(n-1)`; O(n) messages per rank, fine for the rank counts of one job's
//!   replica group at these sizes).
//! - Replica groups with several ranks per process (`group_all_reduce`, …): see `coll/hier.rs` (exact in the ring's order).
//! - Point-to-point [`Communicator::send`] / [`Communicator::recv`], matched per peer pair in
//!   call order; one round of messages among all ranks: [`Communicator::exchange`] (`coll/exchange.rs`).

use std::ops::Range;

mod exchange;
mod hier;

pub use exchange::MAX_PIECES;

use crate::reduce::{self, order, reduce_after, reduce_into, reduce_pair, segment, DType, ReduceOp};
use crate::transport::{RecvOp, SendOp, Transport, MAX_TAG};
use crate::FabricError;

/// Tuning of the algorithms.
#[derive(Debug, Clone, Copy)]
pub struct CollConfig {
    /// Largest sub-chunk of a ring step (bytes).
    pub chunk_bytes: usize,
    /// Messages up to this many bytes skip the ring: they gather every rank's data and reduce
    /// locally in the documented order (latency-bound sizes).
    pub direct_max_bytes: usize,
    /// Groups of at least this many ranks gather small messages in `ceil(log2 n)` rounds
    /// (Bruck's all-gather, any `n`) instead of the one-round direct exchange (`n-1` messages
    /// per rank at once).
    pub log_min_ranks: usize,
}

impl Default for CollConfig {
    fn default() -> Self {
        Self { chunk_bytes: 512 << 10, direct_max_bytes: 16 << 10, log_min_ranks: 8 }
    }
}

/// Most ranks a communicator supports (the wire tag carries the step in 12 bits).
pub const MAX_RANKS: usize = 4096;

const PHASE_RS: u64 = 0;
const PHASE_AG: u64 = 1;
const PHASE_DIRECT: u64 = 2;
const PHASE_P2P: u64 = 3;
const PHASE_LOG: u64 = 4;

fn tag(seq: u64, phase: u64, step: usize, chunk: usize) -> u64 {
    (((seq & 0xffff) << 32) | (phase << 28) | (((step as u64) & 0xfff) << 16) | (chunk as u64 & 0xffff)) & MAX_TAG
}

/// `(&data[a], &mut data[b])` for disjoint ranges.
fn split_disjoint(data: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    if b.is_empty() {
        return (&data[a], &mut []);
    }
    if a.end <= b.start {
        let (x, y) = data.split_at_mut(b.start);
        (&x[a], &mut y[..b.len()])
    } else {
        let (x, y) = data.split_at_mut(a.start);
        (&y[..a.len()], &mut x[b])
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

/// A group of ranks running collectives over a transport. Every rank must call the same
/// collectives in the same order with the same sizes, types and operators.
pub struct Communicator<T: Transport> {
    t: T,
    cfg: CollConfig,
    seq: u64,
    p2p_send: Vec<u64>,
    p2p_recv: Vec<u64>,
    scratch: [Vec<u8>; 2],
    work: Vec<u8>,
}

impl<T: Transport> Communicator<T> {
    /// A communicator over `t`.
    pub fn new(t: T, cfg: CollConfig) -> Result<Self, FabricError> {
        let n = t.size();
        if n == 0 || n > MAX_RANKS || t.rank() >= n {
            return Err(FabricError::Invalid(format!("rank {} of {} (at most {MAX_RANKS} ranks)", t.rank(), n)));
        }
        if cfg.chunk_bytes == 0 {
            return Err(FabricError::Invalid("chunk_bytes must be > 0".into()));
        }
        Ok(Self {
            t,
            cfg,
            seq: 0,
            p2p_send: vec![0; n],
            p2p_recv: vec![0; n],
            scratch: [Vec::new(), Vec::new()],
            work: Vec::new(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.t.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.t.size()
    }

    /// The transport.
    pub fn transport(&mut self) -> &mut T {
        &mut self.t
    }

    /// The next collective (or point-to-point tag sequence) uses sequence number `seq` in its
    /// wire tags (the low 16 bits; later ones count up from there). Every rank must set the same
    /// value; callers that run several communicators over one transport keep their tags apart
    /// this way.
    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq.wrapping_sub(1);
    }

    fn next_seq(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn chunk(&self) -> usize {
        self.cfg.chunk_bytes.min(self.t.max_message()).max(1)
    }

    /// Runs `f` with `regions` pinned for the transport; unpins them whatever `f` returns.
    fn pinned<R>(
        &mut self,
        regions: &[(*const u8, usize)],
        f: impl FnOnce(&mut Self) -> Result<R, FabricError>,
    ) -> Result<R, FabricError> {
        let mut done = 0;
        let mut res = Ok(());
        for &(p, l) in regions {
            // SAFETY: every region is a live borrow of the caller (a buffer argument or a
            // scratch vector not resized while pinned); the slice is only passed to
            // pin/unpin, which look at its address and length.
            let s = unsafe { std::slice::from_raw_parts(p, l) };
            if let Err(e) = self.t.pin(s) {
                res = Err(e);
                break;
            }
            done += 1;
        }
        let out = res.and_then(|()| f(self));
        for &(p, l) in &regions[..done] {
            // SAFETY: as above.
            let s = unsafe { std::slice::from_raw_parts(p, l) };
            self.t.unpin(s);
        }
        out
    }

    /// In-place all-reduce of `buf` (elements of `dt`) with `op`.
    pub fn all_reduce(&mut self, buf: &mut [u8], dt: DType, op: ReduceOp) -> Result<(), FabricError> {
        let es = dt.size();
        if !buf.len().is_multiple_of(es) {
            return Err(FabricError::Invalid(format!("{} bytes is not a whole number of {}", buf.len(), dt.name())));
        }
        let seq = self.next_seq();
        let n = self.size();
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        if buf.len() <= self.cfg.direct_max_bytes {
            return self.direct_all_reduce(buf, dt, op, seq);
        }
        let count = buf.len() / es;
        let seg = |k: usize| {
            let s = segment(count, n, k);
            s.start * es..s.end * es
        };
        let m = self.sub_chunks((count.div_ceil(n)) * es, es);
        self.size_scratch(count.div_ceil(n).div_ceil(m) * es);
        let regions = self.regions_with(buf);
        let bp = buf.as_mut_ptr();
        let bl = buf.len();
        self.pinned(&regions, |c| {
            // SAFETY: `bp`/`bl` are `buf`, exclusively borrowed by this call; the closure is the
            // only user while it runs.
            let data = unsafe { std::slice::from_raw_parts_mut(bp, bl) };
            c.ring_reduce_scatter(data, None, dt, op, seq, m, &seg)?;
            c.ring_all_gather(data, seq, m, es, &seg)
        })
    }

    /// Reduce-scatter: `input` (the same length on every rank) is reduced element-wise and
    /// rank `r` receives segment `r` ([`reduce::segment`] of the element count) in `output`.
    pub fn reduce_scatter(
        &mut self,
        input: &[u8],
        output: &mut [u8],
        dt: DType,
        op: ReduceOp,
    ) -> Result<(), FabricError> {
        let es = dt.size();
        let n = self.size();
        let r = self.rank();
        if !input.len().is_multiple_of(es) {
            return Err(FabricError::Invalid(format!("{} bytes is not a whole number of {}", input.len(), dt.name())));
        }
        let count = input.len() / es;
        let mine = segment(count, n, r);
        let mine = mine.start * es..mine.end * es;
        if output.len() != mine.len() {
            return Err(FabricError::Invalid(format!(
                "reduce-scatter output of rank {r} must be {} bytes, got {}",
                mine.len(),
                output.len()
            )));
        }
        let seq = self.next_seq();
        if n == 1 || input.is_empty() {
            output.copy_from_slice(&input[mine]);
            return Ok(());
        }
        if input.len() <= self.cfg.direct_max_bytes {
            return self.direct_reduce_scatter(input, output, dt, op, seq);
        }
        let seg = |k: usize| {
            let s = segment(count, n, k);
            s.start * es..s.end * es
        };
        let m = self.sub_chunks(count.div_ceil(n) * es, es);
        self.size_scratch(count.div_ceil(n).div_ceil(m) * es);
        // The work buffer takes the reduced segments only (each written before it is read):
        // the input itself is never copied.
        let mut work = std::mem::take(&mut self.work);
        work.resize(input.len(), 0);
        let mut regions = self.regions_with(&work);
        regions.push((input.as_ptr(), input.len()));
        let res = self.pinned(&regions, |c| c.ring_reduce_scatter(&mut work, Some(input), dt, op, seq, m, &seg));
        if res.is_ok() {
            output.copy_from_slice(&work[mine]);
        }
        self.work = work;
        res
    }

    /// All-gather: rank `r`'s `input` lands at `output[r*len..(r+1)*len]` on every rank.
    pub fn all_gather(&mut self, input: &[u8], output: &mut [u8]) -> Result<(), FabricError> {
        let n = self.size();
        let r = self.rank();
        let len = input.len();
        if output.len() != n * len {
            return Err(FabricError::Invalid(format!(
                "all-gather output must be {} bytes, got {}",
                n * len,
                output.len()
            )));
        }
        let seq = self.next_seq();
        output[r * len..(r + 1) * len].copy_from_slice(input);
        if n == 1 || len == 0 {
            return Ok(());
        }
        if len * n <= self.cfg.direct_max_bytes {
            return self.direct_all_gather(output, len, seq);
        }
        let seg = |k: usize| k * len..(k + 1) * len;
        let m = self.sub_chunks(len, 1);
        let regions = vec![(output.as_ptr(), output.len())];
        let op = output.as_mut_ptr();
        let ol = output.len();
        self.pinned(&regions, |c| {
            // SAFETY: `output`, exclusively borrowed by this call.
            let data = unsafe { std::slice::from_raw_parts_mut(op, ol) };
            c.ring_all_gather(data, seq, m, 1, &seg)
        })
    }

    /// Sends `buf` to `peer` (matched by the peer's `recv` calls from this rank, in order).
    pub fn send(&mut self, peer: usize, buf: &[u8]) -> Result<(), FabricError> {
        self.check_peer(peer)?;
        let seq = self.p2p_send[peer];
        self.p2p_send[peer] += 1;
        let chunk = self.chunk();
        let regions = vec![(buf.as_ptr(), buf.len())];
        self.pinned(&regions, |c| {
            for (j, piece) in buf.chunks(chunk).enumerate() {
                let s = [SendOp { peer, tag: tag(seq, PHASE_P2P, j >> 16, j), buf: piece }];
                c.t.exchange(&s, &mut [], &mut || {})?;
            }
            Ok(())
        })
    }

    /// Receives into `buf` what `peer` sent with the matching `send` (same length).
    pub fn recv(&mut self, peer: usize, buf: &mut [u8]) -> Result<(), FabricError> {
        self.check_peer(peer)?;
        let seq = self.p2p_recv[peer];
        self.p2p_recv[peer] += 1;
        let chunk = self.chunk();
        let regions = vec![(buf.as_ptr(), buf.len())];
        let bp = buf.as_mut_ptr();
        let bl = buf.len();
        self.pinned(&regions, |c| {
            // SAFETY: `buf`, exclusively borrowed by this call.
            let data = unsafe { std::slice::from_raw_parts_mut(bp, bl) };
            for (j, piece) in data.chunks_mut(chunk).enumerate() {
                let mut r = [RecvOp { peer, tag: tag(seq, PHASE_P2P, j >> 16, j), buf: piece }];
                c.t.exchange(&[], &mut r, &mut || {})?;
            }
            Ok(())
        })
    }

    fn check_peer(&self, peer: usize) -> Result<(), FabricError> {
        if peer >= self.size() || peer == self.rank() {
            return Err(FabricError::Invalid(format!("peer {peer} of rank {} in {} ranks", self.rank(), self.size())));
        }
        Ok(())
    }

    /// Sub-chunks per segment so that none exceeds the chunk size (and the tag's 16 bits).
    fn sub_chunks(&self, max_seg_bytes: usize, es: usize) -> usize {
        let chunk = self.chunk().max(es);
        max_seg_bytes.div_ceil(chunk).clamp(1, 0xffff)
    }

    fn size_scratch(&mut self, bytes: usize) {
        for s in &mut self.scratch {
            if s.len() < bytes {
                s.resize(bytes, 0);
            }
        }
    }

    fn regions_with(&self, buf: &[u8]) -> Vec<(*const u8, usize)> {
        vec![
            (buf.as_ptr(), buf.len()),
            (self.scratch[0].as_ptr(), self.scratch[0].len()),
            (self.scratch[1].as_ptr(), self.scratch[1].len()),
        ]
    }

    /// The ring reduce-scatter over `data`. `own` is this rank's input when it is not `data`
    /// itself: then `data` is a work buffer whose segments are written as they are reduced
    /// (never read before), and segment `r-1`, sent at step 0, is read from `own` — no copy of
    /// the input. Received partials hold the earlier ranks of the order: they are the left
    /// operand of every fold.
    #[allow(clippy::too_many_arguments)]
    fn ring_reduce_scatter(
        &mut self,
        data: &mut [u8],
        own: Option<&[u8]>,
        dt: DType,
        op: ReduceOp,
        seq: u64,
        m: usize,
        seg: &dyn Fn(usize) -> Range<usize>,
    ) -> Result<(), FabricError> {
        let n = self.size();
        let r = self.rank();
        let es = dt.size();
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        let sub = |k: usize, j: usize| {
            let s = seg(k);
            let e = segment(s.len() / es, m, j);
            s.start + e.start * es..s.start + e.end * es
        };
        // `data[range] = received ⊕ own[range]`.
        let fold = |dst: &mut [u8], range: &Range<usize>, received: &[u8]| match own {
            Some(o) => reduce_pair(dst, received, &o[range.clone()], dt, op),
            None => reduce_after(dst, received, dt, op),
        };
        let [s0, s1] = &mut self.scratch;
        let mut pending: Option<(Range<usize>, usize)> = None;
        let mut slot = 0usize;
        let mut red_err: Option<FabricError> = None;
        for s in 0..n - 1 {
            let send_seg = (r + 2 * n - s - 1) % n;
            let recv_seg = (r + 2 * n - s - 2) % n;
            for j in 0..m {
                let sr = sub(send_seg, j);
                let rr = sub(recv_seg, j);
                if let Some((pr, ps)) = pending.take() {
                    if overlaps(&pr, &sr) {
                        let src = if ps == 0 { &s0[..pr.len()] } else { &s1[..pr.len()] };
                        fold(&mut data[pr.clone()], &pr, src)?;
                    } else {
                        pending = Some((pr, ps));
                    }
                }
                let (recv_scr, other_scr): (&mut Vec<u8>, &Vec<u8>) =
                    if slot == 0 { (&mut *s0, &*s1) } else { (&mut *s1, &*s0) };
                let pr = pending.clone().map_or(0..0, |p| p.0);
                let (send_buf, pend_buf): (&[u8], &mut [u8]) = match own {
                    // Step 0 sends this rank's own segment, straight from the input.
                    Some(o) if s == 0 => (&o[sr.clone()], &mut data[pr.clone()]),
                    _ => split_disjoint(data, sr.clone(), pr.clone()),
                };
                let t = tag(seq, PHASE_RS, s, j);
                let sends = [SendOp { peer: next, tag: t, buf: send_buf }];
                let mut recvs = [RecvOp { peer: prev, tag: t, buf: &mut recv_scr[..rr.len()] }];
                let sends = if sr.is_empty() { &sends[..0] } else { &sends[..] };
                let recvs = if rr.is_empty() { &mut recvs[..0] } else { &mut recvs[..] };
                let mut overlap = || {
                    if !pend_buf.is_empty() {
                        if let Err(e) = fold(pend_buf, &pr, &other_scr[..pend_buf.len()]) {
                            red_err = Some(e.into());
                        }
                    }
                };
                self.t.exchange(sends, recvs, &mut overlap)?;
                if let Some(e) = red_err.take() {
                    return Err(e);
                }
                pending = Some((rr, slot));
                slot ^= 1;
            }
        }
        if let Some((pr, ps)) = pending {
            let src = if ps == 0 { &s0[..pr.len()] } else { &s1[..pr.len()] };
            fold(&mut data[pr.clone()], &pr, src)?;
        }
        Ok(())
    }

    fn ring_all_gather(
        &mut self,
        data: &mut [u8],
        seq: u64,
        m: usize,
        es: usize,
        seg: &dyn Fn(usize) -> Range<usize>,
    ) -> Result<(), FabricError> {
        let n = self.size();
        let r = self.rank();
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        let sub = |k: usize, j: usize| {
            let s = seg(k);
            let e = segment(s.len() / es, m, j);
            s.start + e.start * es..s.start + e.end * es
        };
        for s in 0..n - 1 {
            let send_seg = (r + n - s) % n;
            let recv_seg = (r + 2 * n - s - 1) % n;
            for j in 0..m {
                let sr = sub(send_seg, j);
                let rr = sub(recv_seg, j);
                let (send_buf, recv_buf) = split_disjoint(data, sr.clone(), rr.clone());
                let t = tag(seq, PHASE_AG, s, j);
                let sends = [SendOp { peer: next, tag: t, buf: send_buf }];
                let mut recvs = [RecvOp { peer: prev, tag: t, buf: recv_buf }];
                let sends = if sr.is_empty() { &sends[..0] } else { &sends[..] };
                let recvs = if rr.is_empty() { &mut recvs[..0] } else { &mut recvs[..] };
                self.t.exchange(sends, recvs, &mut || {})?;
            }
        }
        Ok(())
    }

    /// Bruck's all-gather: after round `k` (distance `d = 2^k`) a rank holds the blocks of
    /// ranks `r, r+1, …, r+2d-1`; in each round it sends its first `min(d, n-d)` blocks to
    /// `r-d` and receives as many from `r+d`. `ceil(log2 n)` rounds for any `n`. Returns the
    /// blocks in rank order.
    fn log_gather(&mut self, mine: &[u8], seq: u64) -> Result<Vec<u8>, FabricError> {
        let n = self.size();
        let r = self.rank();
        let len = mine.len();
        let mut tmp = vec![0u8; n * len];
        tmp[..len].copy_from_slice(mine);
        let regions = [(tmp.as_ptr(), tmp.len())];
        let tp = tmp.as_mut_ptr();
        let tl = tmp.len();
        self.pinned(&regions, |c| {
            // SAFETY: `tmp`, owned by this function and not resized while pinned; the closure is
            // its only user while it runs.
            let tmp = unsafe { std::slice::from_raw_parts_mut(tp, tl) };
            let mut d = 1;
            let mut step = 0;
            while d < n {
                let k = d.min(n - d);
                let (have, rest) = tmp.split_at_mut(d * len);
                let t = tag(seq, PHASE_LOG, step, 0);
                let sends = [SendOp { peer: (r + n - d) % n, tag: t, buf: &have[..k * len] }];
                let mut recvs = [RecvOp { peer: (r + d) % n, tag: t, buf: &mut rest[..k * len] }];
                c.t.exchange(&sends, &mut recvs, &mut || {})?;
                d *= 2;
                step += 1;
            }
            Ok(())
        })?;
        // tmp[i] is rank (r+i)'s block: rotate into rank order.
        tmp.rotate_right(r * len);
        Ok(tmp)
    }

    /// Every rank's full buffer, in rank order: one round (`n-1` messages per rank) for small
    /// groups, Bruck's `ceil(log2 n)` rounds from `log_min_ranks` ranks.
    fn direct_gather(&mut self, mine: &[u8], seq: u64) -> Result<Vec<u8>, FabricError> {
        let n = self.size();
        if n >= self.cfg.log_min_ranks.max(2) {
            return self.log_gather(mine, seq);
        }
        let r = self.rank();
        let len = mine.len();
        let mut slots = vec![0u8; n * len];
        let regions = [(mine.as_ptr(), mine.len()), (slots.as_ptr(), slots.len())];
        let t = tag(seq, PHASE_DIRECT, 0, 0);
        let sends: Vec<SendOp<'_>> =
            (0..n).filter(|&p| p != r).map(|p| SendOp { peer: p, tag: t, buf: mine }).collect();
        let mut recvs: Vec<RecvOp<'_>> = slots
            .chunks_mut(len)
            .enumerate()
            .filter(|(p, _)| *p != r)
            .map(|(p, buf)| RecvOp { peer: p, tag: t, buf })
            .collect();
        self.pinned(&regions, |c| c.t.exchange(&sends, &mut recvs, &mut || {}))?;
        drop(recvs);
        slots[r * len..(r + 1) * len].copy_from_slice(mine);
        Ok(slots)
    }

    fn direct_all_reduce(&mut self, buf: &mut [u8], dt: DType, op: ReduceOp, seq: u64) -> Result<(), FabricError> {
        let len = buf.len();
        let all = self.direct_gather(buf, seq)?;
        let inputs: Vec<&[u8]> = all.chunks(len).collect();
        let out = reduce::reference_all_reduce(&inputs, dt, op)?;
        buf.copy_from_slice(&out);
        Ok(())
    }

    fn direct_reduce_scatter(
        &mut self,
        input: &[u8],
        output: &mut [u8],
        dt: DType,
        op: ReduceOp,
        seq: u64,
    ) -> Result<(), FabricError> {
        let n = self.size();
        let r = self.rank();
        let es = dt.size();
        let count = input.len() / es;
        let bytes = |k: usize| {
            let s = segment(count, n, k);
            s.start * es..s.end * es
        };
        let mine = bytes(r);
        if n >= self.cfg.log_min_ranks.max(2) {
            // Gather every input in log rounds, reduce this rank's segment in the order.
            let all = self.log_gather(input, seq)?;
            let len = input.len();
            let mut ranks = order(n, r);
            let first = ranks.next().unwrap_or(r);
            output.copy_from_slice(&all[first * len..][mine.clone()]);
            for p in ranks {
                reduce_into(output, &all[p * len..][mine.clone()], dt, op)?;
            }
            return Ok(());
        }
        let mut slots = vec![0u8; n * mine.len()];
        let regions = [(input.as_ptr(), input.len()), (slots.as_ptr(), slots.len())];
        let t = tag(seq, PHASE_DIRECT, 0, 0);
        let sends: Vec<SendOp<'_>> = (0..n)
            .filter(|&p| p != r && !bytes(p).is_empty())
            .map(|p| SendOp { peer: p, tag: t, buf: &input[bytes(p)] })
            .collect();
        if !mine.is_empty() {
            let mut recvs: Vec<RecvOp<'_>> = slots
                .chunks_mut(mine.len())
                .enumerate()
                .filter(|(p, _)| *p != r)
                .map(|(p, buf)| RecvOp { peer: p, tag: t, buf })
                .collect();
            self.pinned(&regions, |c| c.t.exchange(&sends, &mut recvs, &mut || {}))?;
        } else {
            self.pinned(&regions, |c| c.t.exchange(&sends, &mut [], &mut || {}))?;
        }
        if mine.is_empty() {
            return Ok(());
        }
        slots[r * mine.len()..(r + 1) * mine.len()].copy_from_slice(&input[mine.clone()]);
        let mut ranks = order(n, r);
        let first = ranks.next().unwrap_or(r);
        output.copy_from_slice(&slots[first * mine.len()..(first + 1) * mine.len()]);
        for p in ranks {
            reduce_into(output, &slots[p * mine.len()..(p + 1) * mine.len()], dt, op)?;
        }
        Ok(())
    }

    fn direct_all_gather(&mut self, output: &mut [u8], len: usize, seq: u64) -> Result<(), FabricError> {
        let n = self.size();
        let r = self.rank();
        if n >= self.cfg.log_min_ranks.max(2) {
            let mine = output[r * len..(r + 1) * len].to_vec();
            let all = self.log_gather(&mine, seq)?;
            output.copy_from_slice(&all);
            return Ok(());
        }
        let t = tag(seq, PHASE_DIRECT, 0, 0);
        let regions = [(output.as_ptr(), output.len())];
        let op = output.as_mut_ptr();
        let ol = output.len();
        self.pinned(&regions, |c| {
            // SAFETY: `output`, exclusively borrowed by this call.
            let output = unsafe { std::slice::from_raw_parts_mut(op, ol) };
            let (before, rest) = output.split_at_mut(r * len);
            let (mine, after) = rest.split_at_mut(len);
            let sends: Vec<SendOp<'_>> =
                (0..n).filter(|&p| p != r).map(|p| SendOp { peer: p, tag: t, buf: &*mine }).collect();
            let mut recvs: Vec<RecvOp<'_>> = before
                .chunks_mut(len)
                .enumerate()
                .chain(after.chunks_mut(len).enumerate().map(|(i, b)| (r + 1 + i, b)))
                .map(|(p, buf)| RecvOp { peer: p, tag: t, buf })
                .collect();
            c.t.exchange(&sends, &mut recvs, &mut || {})
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem as loopback;
    use crate::reduce::{reference_all_gather, reference_all_reduce, reference_reduce_scatter};
    use crate::transport::Subgroup;
    use std::time::Duration;

    /// All-reduce, reduce-scatter and all-gather outputs of one rank.
    type Outputs = (Vec<u8>, Vec<u8>, Vec<u8>);

    fn run(n: usize, cfg: CollConfig, len: usize, dt: DType, op: ReduceOp) {
        run_inputs((0..n).map(|r| reduce::pattern(r, len, dt, len as u64)).collect(), cfg, dt, op);
    }

    fn run_inputs(inputs: Vec<Vec<u8>>, cfg: CollConfig, dt: DType, op: ReduceOp) {
        let n = inputs.len();
        let len = inputs.first().map_or(0, |v| v.len());
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let want_ar = reference_all_reduce(&refs, dt, op).unwrap_or_default();
        let want_ag = reference_all_gather(&refs);
        let handles: Vec<_> = loopback::group(n, Duration::from_secs(10))
            .into_iter()
            .map(|t| {
                let mine = inputs[t.rank()].clone();
                std::thread::spawn(move || -> Result<Outputs, FabricError> {
                    let mut c = Communicator::new(t, cfg)?;
                    let r = c.rank();
                    let mut ar = mine.clone();
                    c.all_reduce(&mut ar, dt, op)?;
                    let seg = segment(mine.len() / dt.size(), c.size(), r);
                    let mut rs = vec![0u8; seg.len() * dt.size()];
                    c.reduce_scatter(&mine, &mut rs, dt, op)?;
                    let mut ag = vec![0u8; mine.len() * c.size()];
                    c.all_gather(&mine, &mut ag)?;
                    Ok((ar, rs, ag))
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let got = h.join().map_err(|_| "panic".to_string()).and_then(|x| x.map_err(|e| e.to_string()));
            let want_rs = reference_reduce_scatter(&refs, dt, op, r).unwrap_or_default();
            assert_eq!(got, Ok((want_ar.clone(), want_rs, want_ag.clone())), "n={n} len={len} {dt:?} {op:?} rank {r}");
        }
    }

    #[test]
    fn subgroups_reduce_in_group_order_with_their_own_tags() {
        // Ranks 2 and 0 of a 3-rank job form a group (group rank 0 = job rank 2); rank 1 sits
        // out. Two collectives with caller-chosen tag sequences.
        let len = 40 * 4;
        let (dt, op) = (DType::F32, ReduceOp::Add);
        let group = vec![2usize, 0];
        let inputs: Vec<Vec<u8>> = (0..2).map(|g| reduce::pattern(g, len, dt, 7)).collect();
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let want = reference_all_reduce(&refs, dt, op).unwrap_or_default();
        let handles: Vec<_> = loopback::group(3, Duration::from_secs(10))
            .into_iter()
            .map(|mut t| {
                let group = group.clone();
                let inputs = inputs.clone();
                std::thread::spawn(move || -> Result<Option<Vec<u8>>, FabricError> {
                    let Some(g) = group.iter().position(|&r| r == t.rank()) else { return Ok(None) };
                    let mut out = Vec::new();
                    for (seq, cfg) in [
                        (40u64, CollConfig { chunk_bytes: 24, direct_max_bytes: 0, log_min_ranks: 8 }),
                        (41, CollConfig::default()),
                    ] {
                        let mut c = Communicator::new(Subgroup::new(&mut t, group.clone())?, cfg)?;
                        c.set_seq(seq);
                        let mut buf = inputs[g].clone();
                        c.all_reduce(&mut buf, dt, op)?;
                        out.push(buf);
                    }
                    if out[0] != out[1] {
                        return Err(FabricError::Invalid("ring and direct differ".into()));
                    }
                    Ok(out.pop())
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let got = h.join().map_err(|_| "panic".to_string()).and_then(|x| x.map_err(|e| e.to_string()));
            let expect = if r == 1 { None } else { Some(want.clone()) };
            assert_eq!(got, Ok(expect), "job rank {r}");
        }
        let mut ts = loopback::group(2, Duration::from_secs(1));
        assert!(Subgroup::new(&mut ts[0], vec![1, 1]).is_err());
        assert!(Subgroup::new(&mut ts[0], vec![1]).is_err());
    }

    #[test]
    fn ring_and_direct_match_the_reference() {
        let ring = CollConfig { chunk_bytes: 96, direct_max_bytes: 0, log_min_ranks: 8 };
        let direct = CollConfig { chunk_bytes: 96, direct_max_bytes: usize::MAX, log_min_ranks: usize::MAX };
        let log = CollConfig { chunk_bytes: 96, direct_max_bytes: usize::MAX, log_min_ranks: 0 };
        for n in [1, 2, 3, 4, 5, 7] {
            for dt in DType::ALL {
                for op in ReduceOp::ALL {
                    for elems in [1usize, 3, 17, 250] {
                        run(n, ring, elems * dt.size(), dt, op);
                        run(n, direct, elems * dt.size(), dt, op);
                        run(n, log, elems * dt.size(), dt, op);
                    }
                }
            }
        }
    }

    #[test]
    fn ties_between_signed_zeros_and_nans_keep_the_earlier_rank() {
        // MAX/MIN keep the earlier operand of the order on ties (+0 vs -0) and NaNs: the ring
        // must fold the received partial on the left, as the reference and the hub do.
        let ring = CollConfig { chunk_bytes: 8, direct_max_bytes: 0, log_min_ranks: 8 };
        let direct = CollConfig { chunk_bytes: 8, direct_max_bytes: usize::MAX, log_min_ranks: usize::MAX };
        let vals: [u32; 4] = [0x0000_0000, 0x8000_0000, 0x7fc0_0001, 0xffc0_0002];
        for n in [2usize, 3, 4] {
            for op in [ReduceOp::Max, ReduceOp::Min] {
                let f32s: Vec<Vec<u8>> =
                    (0..n).map(|r| (0..24).flat_map(|i| vals[(r + i) % 4].to_le_bytes()).collect()).collect();
                let halves: Vec<Vec<u8>> = (0..n)
                    .map(|r| {
                        (0..24).flat_map(|i| [0x0000u16, 0x8000, 0x7e01, 0xfe02][(r + i) % 4].to_le_bytes()).collect()
                    })
                    .collect();
                for cfg in [ring, direct] {
                    run_inputs(f32s.clone(), cfg, DType::F32, op);
                    run_inputs(halves.clone(), cfg, DType::Bf16, op);
                }
            }
        }
    }

    #[test]
    fn send_recv_and_bad_arguments() {
        let mut ts = loopback::group(2, Duration::from_millis(200)).into_iter();
        let (Some(a), Some(b)) = (ts.next(), ts.next()) else { panic!("group of 2") };
        let cfg = CollConfig { chunk_bytes: 7, direct_max_bytes: 0, log_min_ranks: 8 };
        let h = std::thread::spawn(move || -> Result<Vec<u8>, FabricError> {
            let mut c = Communicator::new(b, cfg)?;
            let mut buf = vec![0u8; 50];
            c.recv(0, &mut buf)?;
            Ok(buf)
        });
        let mut c = Communicator::new(a, cfg).map_err(|e| e.to_string());
        let data: Vec<u8> = (0..50).collect();
        if let Ok(c) = c.as_mut() {
            assert!(c.send(1, &data).is_ok());
            assert!(matches!(c.send(0, &data), Err(FabricError::Invalid(_))));
            assert!(matches!(c.all_reduce(&mut [0u8; 3], DType::F32, ReduceOp::Add), Err(FabricError::Invalid(_))));
            assert!(matches!(c.all_gather(&[0u8; 4], &mut [0u8; 4]), Err(FabricError::Invalid(_))));
        }
        assert_eq!(h.join().map_err(|_| ()).and_then(|r| r.map_err(|_| ())), Ok(data));
        // The peer is gone: a receive times out with a network-path status.
        if let Ok(c) = c.as_mut() {
            let e = c.recv(1, &mut [0u8; 4]).err();
            assert_eq!(e.map(|e| e.status_code()), Some(crate::NRT_NETWORK_PROXY_FAILURE));
        }
    }
}
