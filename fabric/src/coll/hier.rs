//! Collectives of a replica group whose ranks are spread over the communicator's ranks
//! (processes) several per process: hierarchical in placement — the local parts of a process
//! meet on its device path (the simulator's hub), and only the process-to-process part runs
//! here — but exact in the one reduction order of [`crate::reduce`].
//!
//! The order folds segment `k` over the *group* ranks `k+1, k+2, …, k`; floating-point
//! reduction is not associative, so a process cannot pre-reduce its local ranks' contributions
//! (that would fold `(a ⊕ b)` where the order needs `((acc ⊕ a) ⊕ b)`). Instead every segment
//! is reduced where it ends — in the process hosting group rank `k` — from the *unreduced*
//! contributions of every group rank: each process sends, for each of its local parts, the
//! segments owned by each other process (packed in segment order, one message per (part,
//! process) pair, cut at the chunk size), and the owner folds them in the order. All-reduce
//! then sends every owned result segment to every other process; reduce-scatter stops after
//! the first phase (a local rank's segment is owned by its own process); all-gather sends the
//! local parts to every other process.
//!
//! Cost: a process hosting `L` of the group's `n` ranks sends `L·len·(n−L')/n` bytes in the
//! reduce phase (`L'` = ranks of the receiving processes' segments) — the same bytes the flat
//! ring would move for those `L` ranks, less the intra-process share — plus `len·L/n` per other
//! process in the all-reduce's output phase. An exact scheme with less traffic exists (the
//! ring's running accumulator of segment `k` visits the processes in the order of the fold and
//! each process extends it with its consecutive local ranks), but it serialises each segment
//! over the processes; the direct scheme keeps one round per phase.

use super::{tag, Communicator, MAX_RANKS};
use crate::reduce::{order, reduce_into, segment, DType, ReduceOp};
use crate::transport::{RecvOp, SendOp, Transport};
use crate::FabricError;

const PHASE_HIER_RS: u64 = 5;
const PHASE_HIER_OUT: u64 = 6;

/// Where the ranks of a replica group live: `procs[g]` is the communicator rank (process)
/// hosting group rank `g`.
struct Plan<'a> {
    procs: &'a [usize],
    me: usize,
    count: usize,
    es: usize,
}

impl Plan<'_> {
    fn n(&self) -> usize {
        self.procs.len()
    }

    fn seg(&self, k: usize) -> std::ops::Range<usize> {
        let s = segment(self.count, self.n(), k);
        s.start * self.es..s.end * self.es
    }

    /// Segments owned (reduced) by process `q`, in segment order.
    fn owned(&self, q: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.n()).filter(move |&k| self.procs[k] == q)
    }

    fn owned_bytes(&self, q: usize) -> usize {
        self.owned(q).map(|k| self.seg(k).len()).sum()
    }

    /// `src`'s segments owned by process `q`, packed in segment order.
    fn pack(&self, src: &[u8], q: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.owned_bytes(q));
        for k in self.owned(q) {
            out.extend_from_slice(&src[self.seg(k)]);
        }
        out
    }
}

impl<T: Transport> Communicator<T> {
    /// Checks a placement and this process's parts; returns the element count.
    fn check_parts<B: AsRef<[u8]>>(
        &self,
        procs: &[usize],
        parts: &[(usize, B)],
        es: usize,
    ) -> Result<usize, FabricError> {
        let (me, size) = (self.rank(), self.size());
        if procs.is_empty() || procs.len() > MAX_RANKS || procs.iter().any(|&p| p >= size) {
            return Err(FabricError::Invalid(format!("placement {procs:?} over {size} processes")));
        }
        if (0..size).any(|q| !procs.contains(&q)) {
            return Err(FabricError::Invalid(format!("placement {procs:?}: every process must host a group rank")));
        }
        let local: Vec<usize> = (0..procs.len()).filter(|&g| procs[g] == me).collect();
        let given: Vec<usize> = parts.iter().map(|(g, _)| *g).collect();
        if local != given {
            return Err(FabricError::Invalid(format!(
                "process {me} hosts group ranks {local:?} of placement {procs:?}, given parts of {given:?}"
            )));
        }
        let len = parts.first().map_or(0, |(_, b)| b.as_ref().len());
        if parts.iter().any(|(_, b)| b.as_ref().len() != len) || !len.is_multiple_of(es) {
            return Err(FabricError::Invalid(format!(
                "parts of different lengths or not whole elements of {es} bytes"
            )));
        }
        Ok(len / es)
    }

    /// Phase 1: every owned segment reduced in the order from the unreduced contributions of
    /// every group rank; returns this process's owned segments packed in segment order.
    fn hier_reduce<B: AsRef<[u8]>>(
        &mut self,
        plan: &Plan<'_>,
        parts: &[(usize, B)],
        dt: DType,
        op: ReduceOp,
        seq: u64,
    ) -> Result<Vec<u8>, FabricError> {
        let (me, size, n) = (plan.me, self.size(), plan.n());
        let chunk = self.chunk();
        let mine = plan.owned_bytes(me);
        let packs: Vec<(usize, usize, Vec<u8>)> = parts
            .iter()
            .flat_map(|(g, b)| (0..size).filter(move |&q| q != me).map(move |q| (*g, q, plan.pack(b.as_ref(), q))))
            .filter(|(_, _, p)| !p.is_empty())
            .collect();
        // Remote group rank j's contributions to this process's segments.
        let mut inbox: Vec<Vec<u8>> =
            (0..n).map(|j| if plan.procs[j] == me || mine == 0 { Vec::new() } else { vec![0u8; mine] }).collect();
        if packs.iter().any(|(_, _, p)| p.len().div_ceil(chunk) > 1 << 16) || mine.div_ceil(chunk) > 1 << 16 {
            return Err(FabricError::Invalid(format!("{mine} bytes per process exceed 65536 chunks of {chunk}")));
        }
        let sends: Vec<SendOp<'_>> = packs
            .iter()
            .flat_map(|(g, q, p)| {
                p.chunks(chunk).enumerate().map(move |(c, buf)| SendOp {
                    peer: *q,
                    tag: tag(seq, PHASE_HIER_RS, *g, c),
                    buf,
                })
            })
            .collect();
        let mut recvs: Vec<RecvOp<'_>> = inbox
            .iter_mut()
            .enumerate()
            .flat_map(|(j, b)| {
                let peer = plan.procs[j];
                b.chunks_mut(chunk).enumerate().map(move |(c, buf)| RecvOp {
                    peer,
                    tag: tag(seq, PHASE_HIER_RS, j, c),
                    buf,
                })
            })
            .collect();
        let mut regions: Vec<(*const u8, usize)> = packs.iter().map(|(_, _, p)| (p.as_ptr(), p.len())).collect();
        regions.extend(recvs.iter().map(|r| (r.buf.as_ptr(), r.buf.len())));
        self.pinned(&regions, |c| c.t.exchange(&sends, &mut recvs, &mut || {}))?;
        drop(recvs);
        // Fold every owned segment in the order; `off` walks the packed layout.
        let local = |g: usize| parts.iter().find(|(x, _)| *x == g).map(|(_, b)| b.as_ref());
        let mut out = vec![0u8; mine];
        let mut off = 0;
        for k in plan.owned(me) {
            let seg = plan.seg(k);
            let at = off..off + seg.len();
            off += seg.len();
            let contrib = |g: usize| -> Result<&[u8], FabricError> {
                match local(g) {
                    Some(b) => Ok(&b[seg.clone()]),
                    None => inbox
                        .get(g)
                        .and_then(|b| b.get(at.clone()))
                        .ok_or_else(|| FabricError::Invalid(format!("no contribution of group rank {g}"))),
                }
            };
            let mut ranks = order(n, k);
            let first = ranks.next().unwrap_or(k);
            out[at.clone()].copy_from_slice(contrib(first)?);
            for g in ranks {
                reduce_into(&mut out[at.clone()], contrib(g)?, dt, op)?;
            }
        }
        Ok(out)
    }

    /// Sends `mine` to every other process and receives every other process's `len(q)` bytes,
    /// in one round (tag step `step` of the output phase).
    fn hier_share(
        &mut self,
        mine: &[u8],
        len: impl Fn(usize) -> usize,
        seq: u64,
        step: usize,
    ) -> Result<Vec<Vec<u8>>, FabricError> {
        let (me, size) = (self.rank(), self.size());
        let chunk = self.chunk();
        let mut got: Vec<Vec<u8>> = (0..size).map(|q| if q == me { Vec::new() } else { vec![0u8; len(q)] }).collect();
        if got.iter().any(|b| b.len().div_ceil(chunk) > 1 << 16) || mine.len().div_ceil(chunk) > 1 << 16 {
            return Err(FabricError::Invalid(format!("more than 65536 chunks of {chunk} bytes")));
        }
        let sends: Vec<SendOp<'_>> = (0..size)
            .filter(|&q| q != me)
            .flat_map(|q| {
                mine.chunks(chunk).enumerate().map(move |(c, buf)| SendOp {
                    peer: q,
                    tag: tag(seq, PHASE_HIER_OUT, step, c),
                    buf,
                })
            })
            .collect();
        let mut recvs: Vec<RecvOp<'_>> = got
            .iter_mut()
            .enumerate()
            .flat_map(|(q, b)| {
                b.chunks_mut(chunk).enumerate().map(move |(c, buf)| RecvOp {
                    peer: q,
                    tag: tag(seq, PHASE_HIER_OUT, step, c),
                    buf,
                })
            })
            .collect();
        let mut regions = vec![(mine.as_ptr(), mine.len())];
        regions.extend(recvs.iter().map(|r| (r.buf.as_ptr(), r.buf.len())));
        self.pinned(&regions, |c| c.t.exchange(&sends, &mut recvs, &mut || {}))?;
        drop(recvs);
        Ok(got)
    }

    /// All-reduce of a replica group placed over this communicator's processes: group rank
    /// `g` lives on process `procs[g]`, and `parts` are this process's group ranks (increasing)
    /// with their inputs, reduced in place. Bit-identical to [`Communicator::all_reduce`] of
    /// the same group with one rank per process (module docs).
    pub fn group_all_reduce(
        &mut self,
        procs: &[usize],
        parts: &mut [(usize, Vec<u8>)],
        dt: DType,
        op: ReduceOp,
    ) -> Result<(), FabricError> {
        let es = dt.size();
        let count = self.check_parts(procs, parts, es)?;
        let seq = self.next_seq();
        let plan = Plan { procs, me: self.rank(), count, es };
        let mine = self.hier_reduce(&plan, parts, dt, op, seq)?;
        let others = self.hier_share(&mine, |q| plan.owned_bytes(q), seq, 0)?;
        let mut result = vec![0u8; count * es];
        let packs = others.iter().enumerate().filter(|(q, _)| *q != plan.me).map(|(q, b)| (q, b.as_slice()));
        for (q, packed) in packs.chain([(plan.me, &mine[..])]) {
            let mut off = 0;
            for k in plan.owned(q) {
                let seg = plan.seg(k);
                let l = seg.len();
                result[seg].copy_from_slice(&packed[off..off + l]);
                off += l;
            }
        }
        for (_, b) in parts.iter_mut() {
            b.copy_from_slice(&result);
        }
        Ok(())
    }

    /// Reduce-scatter of a placed replica group (see [`Communicator::group_all_reduce`]):
    /// returns, for each local part, its group rank's segment.
    pub fn group_reduce_scatter(
        &mut self,
        procs: &[usize],
        parts: &[(usize, Vec<u8>)],
        dt: DType,
        op: ReduceOp,
    ) -> Result<Vec<Vec<u8>>, FabricError> {
        let es = dt.size();
        let count = self.check_parts(procs, parts, es)?;
        let seq = self.next_seq();
        let plan = Plan { procs, me: self.rank(), count, es };
        let mine = self.hier_reduce(&plan, parts, dt, op, seq)?;
        // Owned segments are packed in segment order, and this process owns exactly its parts'.
        let mut off = 0;
        let mut out = Vec::with_capacity(parts.len());
        for k in plan.owned(plan.me) {
            let l = plan.seg(k).len();
            out.push(mine[off..off + l].to_vec());
            off += l;
        }
        Ok(out)
    }

    /// All-gather of a placed replica group: every group rank's part concatenated in group
    /// order (the same output for every local part).
    pub fn group_all_gather(&mut self, procs: &[usize], parts: &[(usize, Vec<u8>)]) -> Result<Vec<u8>, FabricError> {
        self.check_parts(procs, parts, 1)?;
        let seq = self.next_seq();
        let me = self.rank();
        let len = parts.first().map_or(0, |(_, b)| b.len());
        let hosted = |q: usize| procs.iter().filter(|&&p| p == q).count();
        let mine: Vec<u8> = parts.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        let others = self.hier_share(&mine, |q| hosted(q) * len, seq, 1)?;
        let mut out = vec![0u8; procs.len() * len];
        let mut next = vec![0usize; self.size()];
        for (g, &q) in procs.iter().enumerate() {
            let src = if q == me { &mine } else { &others[q] };
            let i = next[q];
            next[q] += 1;
            out[g * len..(g + 1) * len].copy_from_slice(&src[i * len..(i + 1) * len]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::CollConfig;
    use super::*;
    use crate::mem as loopback;
    use crate::reduce::{pattern, reference_all_gather, reference_all_reduce, reference_reduce_scatter};
    use std::time::Duration;

    type Out = Vec<(usize, Vec<u8>, Vec<u8>, Vec<u8>)>;

    /// One placement: every process runs the three collectives on its parts; the outputs are
    /// compared with the flat host reference of the group.
    fn run(procs: &[usize], elems: usize, dt: DType, op: ReduceOp, chunk: usize) {
        let n = procs.len();
        let np = procs.iter().max().map_or(0, |m| m + 1);
        let len = elems * dt.size();
        let inputs: Vec<Vec<u8>> = (0..n).map(|g| pattern(g, len, dt, 0x4c)).collect();
        let refs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let want_ar = reference_all_reduce(&refs, dt, op).unwrap_or_default();
        let want_ag = reference_all_gather(&refs);
        let cfg = CollConfig { chunk_bytes: chunk, ..CollConfig::default() };
        let handles: Vec<_> = loopback::group(np, Duration::from_secs(10))
            .into_iter()
            .map(|t| {
                let procs = procs.to_vec();
                let inputs = inputs.clone();
                std::thread::spawn(move || -> Result<Out, FabricError> {
                    let mut c = Communicator::new(t, cfg)?;
                    let me = c.rank();
                    let parts: Vec<(usize, Vec<u8>)> =
                        (0..procs.len()).filter(|&g| procs[g] == me).map(|g| (g, inputs[g].clone())).collect();
                    let mut ar = parts.clone();
                    c.group_all_reduce(&procs, &mut ar, dt, op)?;
                    let rs = c.group_reduce_scatter(&procs, &parts, dt, op)?;
                    let ag = c.group_all_gather(&procs, &parts)?;
                    Ok(ar.into_iter().zip(rs).map(|((g, a), r)| (g, a, r, ag.clone())).collect())
                })
            })
            .collect();
        for h in handles {
            let got = h.join().map_err(|_| "panic".to_string()).and_then(|x| x.map_err(|e| e.to_string()));
            let Ok(got) = got else { panic!("{procs:?} {elems} {dt:?} {op:?}: {got:?}") };
            for (g, ar, rs, ag) in got {
                let want_rs = reference_reduce_scatter(&refs, dt, op, g).unwrap_or_default();
                assert_eq!((&ar, &rs, &ag), (&want_ar, &want_rs, &want_ag), "{procs:?} {elems} {dt:?} {op:?} g{g}");
            }
        }
    }

    #[test]
    fn placed_groups_match_the_flat_reference() {
        // 2 processes × 2 ranks (contiguous and interleaved), 3 + 1, 1 + 3 (the owner of
        // segment k alone), 2 + 1 + 2, and one rank per process.
        let placements: [&[usize]; 6] =
            [&[0, 0, 1, 1], &[0, 1, 0, 1], &[0, 0, 0, 1], &[1, 0, 0, 0], &[0, 1, 2, 0, 2], &[0, 1, 2]];
        for procs in placements {
            for dt in DType::ALL {
                for op in ReduceOp::ALL {
                    for elems in [1usize, 3, 17, 250] {
                        run(procs, elems, dt, op, 20);
                    }
                }
            }
        }
        run(&[0, 0, 1, 1], 70_000, DType::F32, ReduceOp::Add, 64 << 10);
    }

    #[test]
    fn bad_placements_are_refused() {
        let mut ts = loopback::group(2, Duration::from_millis(100)).into_iter();
        let Some(t) = ts.next() else { panic!("group of 2") };
        let mut c = Communicator::new(t, CollConfig::default()).map_err(|e| e.to_string());
        let Ok(c) = c.as_mut() else { panic!("communicator") };
        let p = |g: usize| (g, vec![0u8; 8]);
        let bad = [
            (vec![0usize, 0], vec![p(0), p(1)]),   // process 1 hosts nothing
            (vec![0, 2], vec![p(0)]),              // no process 2
            (vec![0, 1, 0], vec![p(0)]),           // part of group rank 2 missing
            (vec![0, 1], vec![(0, vec![0u8; 6])]), // not whole fp32 elements
        ];
        for (procs, mut parts) in bad {
            let e = c.group_all_reduce(&procs, &mut parts, DType::F32, ReduceOp::Add).err();
            assert!(matches!(e, Some(FabricError::Invalid(_))), "{procs:?}: {e:?}");
        }
    }
}
