//! The collective fabric: participants of a collective (NCs on one or several devices)
//! meet by (comm id, sequence number); the last arrival computes the result and every
//! participant receives its output.
//!
//! Reduction order and numerics are the `reduce` crate's, the one the `fabric` crate's
//! algorithms use, so that a group reduced here and a group reduced across processes give
//! bit-identical results: the `count` elements are split into `n` segments, segment `k`
//! holding elements `[k*count/n, (k+1)*count/n)`; every element of segment `k` is the left
//! fold over the ranks `k+1, k+2, …, k` (indices mod `n`), rounding after every step in the
//! element type. Reduce-scatter gives rank `r` segment `r` (docs/fabric.md).
//!
//! A group that spans processes (an [`InterHost`] installed and naming the communicator) is
//! met here by its local participants only; their parts go across the seam from a worker
//! thread and the results come back through [`super::Dev::deliver`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::interhost::{CollKind, InterHost, InterHostError, InterHostRequest, Piece};

mod exchange;

use isa::device_ops::{alu, ctype, dtype};
use reduce::{segment, DType, ReduceOp};

use super::Dev;

/// Output for one participant, written by `Dev::deliver`.
pub(crate) struct Delivery {
    pub dev: Weak<Dev>,
    pub nc: usize,
    pub engine: usize,
    pub dst: u64,
    pub data: Vec<u8>,
}

struct Part {
    dev: Weak<Dev>,
    nc: usize,
    engine: usize,
    dst: u64,
    /// Send/receive and permute: the group rank this part goes to (`NO_PEER`: none).
    peer: u8,
    /// All-to-allv: the rank's counts and displacements, and its output's length in bytes.
    meta: Vec<u32>,
    out_len: usize,
    data: Vec<u8>,
}

struct Rendezvous {
    size: usize,
    /// The group ranks hosted here when the group spans processes.
    local: Option<Vec<usize>>,
    op: ReduceOp,
    dtype: DType,
    ctype: u8,
    parts: Vec<Option<Part>>,
}

/// An arrival.
pub(crate) struct Arrival {
    pub comm: u32,
    pub seq: u32,
    pub rank: usize,
    pub size: usize,
    pub op: u8,
    pub dtype: u8,
    pub ctype: u8,
    /// Send/receive and permute: the group rank this participant sends to.
    pub peer: u8,
    /// All-to-allv: this rank's metadata (`isa::device_ops::AllToAllV`: 4 rows of group-size
    /// counts and displacements, in elements) and its output's length in bytes.
    pub meta: Vec<u32>,
    pub out_len: usize,
    pub dev: Weak<Dev>,
    pub nc: usize,
    pub engine: usize,
    pub dst: u64,
    pub data: Vec<u8>,
}

/// Why a collective cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollError {
    BadGroup,
    Mismatch,
    BadType,
}

#[derive(Default)]
pub(crate) struct Hub {
    pending: Mutex<HashMap<(u32, u32), Rendezvous>>,
    inter: RwLock<Option<Arc<dyn InterHost>>>,
    /// Buffers kept between collectives, so a collective in steady state allocates nothing.
    pool: Mutex<Pool>,
    /// The collectives barriers being met ([`super::barrier`]).
    pub barriers: super::barrier::Meets,
}

/// Reusable buffers: collective data, rendezvous part lists and delivery lists.
#[derive(Default)]
struct Pool {
    bytes: Vec<Vec<u8>>,
    parts: Vec<Vec<Option<Part>>>,
    deliveries: Vec<Vec<Delivery>>,
}

/// Buffers kept per kind; data buffers above [`POOL_MAX_BYTES`] are freed, not kept.
const POOL_DEPTH: usize = 64;
const POOL_MAX_BYTES: usize = 16 << 20;

impl Hub {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        platform::sync::lock(&self.pool)
    }

    /// A zeroed data buffer of `len` bytes (pooled).
    pub fn take_bytes(&self, len: usize) -> Vec<u8> {
        let mut b = self.pool().bytes.pop().unwrap_or_default();
        b.clear();
        b.resize(len, 0);
        b
    }

    /// Give a data buffer back to the pool.
    pub fn put_bytes(&self, b: Vec<u8>) {
        if b.capacity() <= POOL_MAX_BYTES {
            let mut p = self.pool();
            if p.bytes.len() < POOL_DEPTH {
                p.bytes.push(b);
            }
        }
    }

    /// The reduction of every delivery's data (a pooled buffer), or `None` when the parts do
    /// not reduce. Unreachable in practice: every part was checked to be as long as the first,
    /// whole elements; the caller then delivers nothing.
    fn reduced(&self, ds: &[Delivery], n: usize, dt: DType, op: ReduceOp) -> Option<Vec<u8>> {
        let len = ds.first().map_or(0, |d| d.data.len());
        let mut acc = self.take_bytes(len);
        if reduce::all_reduce_into(&mut acc, n, |i| ds.get(i).map_or(&[][..], |d| &d.data), dt, op).is_err() {
            self.put_bytes(acc);
            return None;
        }
        Some(acc)
    }

    /// Every delivery's data, concatenated in rank order (a pooled buffer of `len` bytes per
    /// delivery).
    fn concat(&self, ds: &[Delivery], len: usize) -> Vec<u8> {
        let mut all = self.take_bytes(0);
        all.reserve(len * ds.len());
        for d in ds {
            all.extend_from_slice(&d.data);
        }
        all
    }

    /// Give a rendezvous's part list back to the pool.
    fn recycle_parts(&self, mut parts: Vec<Option<Part>>) {
        parts.clear();
        let mut pool = self.pool();
        if pool.parts.len() < POOL_DEPTH {
            pool.parts.push(parts);
        }
    }

    /// An empty delivery list (pooled).
    pub fn take_deliveries(&self) -> Vec<Delivery> {
        self.pool().deliveries.pop().unwrap_or_default()
    }

    /// Give a delivery list back (its data buffers go back too).
    pub fn put_deliveries(&self, mut v: Vec<Delivery>) {
        for d in v.drain(..) {
            self.put_bytes(d.data);
        }
        let mut p = self.pool();
        if p.deliveries.len() < POOL_DEPTH {
            p.deliveries.push(v);
        }
    }

    /// Install (or remove) the transport to other processes.
    pub fn set_inter_host(&self, t: Option<Arc<dyn InterHost>>) {
        *platform::sync::write(&self.inter) = t;
    }

    pub(crate) fn inter(&self) -> Option<Arc<dyn InterHost>> {
        platform::sync::read(&self.inter).clone()
    }

    /// Register an arrival; when the group is complete, push every participant's output to
    /// `out`. Allocates nothing in steady state (buffers come from the pool; the arrival's
    /// data buffer becomes its owner's output where the sizes allow). A group that spans
    /// processes completes here with its local parts and goes across the seam (nothing is
    /// pushed; the results come back through `Dev::deliver`).
    pub fn arrive(&self, a: Arrival, out: &mut Vec<Delivery>) -> Result<(), CollError> {
        if a.size == 0 || a.rank >= a.size {
            return Err(CollError::BadGroup);
        }
        let (Some(dt), Some(op)) = (dtype::of(a.dtype), alu::op(a.op)) else {
            return Err(CollError::BadType);
        };
        let esize = dt.size();
        if !a.data.len().is_multiple_of(esize) {
            return Err(CollError::BadType);
        }
        if !ctype::ALL.contains(&a.ctype) {
            return Err(CollError::BadType);
        }
        if a.ctype == ctype::ALL_TO_ALL && !(a.data.len() / esize).is_multiple_of(a.size) {
            return Err(CollError::Mismatch);
        }
        if a.ctype == ctype::ALL_TO_ALLV && a.meta.len() != 4 * a.size {
            return Err(CollError::Mismatch);
        }
        let inter = self.inter();
        let local = inter.as_ref().and_then(|t| t.local_ranks(a.comm));
        if let Some(l) = &local {
            if !l.contains(&a.rank) || l.iter().any(|&r| r >= a.size) {
                return Err(CollError::BadGroup);
            }
            // The seam carries every kind of `CollKind` (the exchanges as point-to-point plans).
            if kind_of(a.ctype).is_none() {
                return Err(CollError::BadType);
            }
        }
        let mut p = platform::sync::lock(&self.pending);
        let key = (a.comm, a.seq);
        let r = match p.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mut parts = self.pool().parts.pop().unwrap_or_default();
                parts.clear();
                parts.resize_with(a.size, || None);
                v.insert(Rendezvous { size: a.size, local, op, dtype: dt, ctype: a.ctype, parts })
            }
        };
        if r.size != a.size || r.op != op || r.dtype != dt || r.ctype != a.ctype || r.parts[a.rank].is_some() {
            return Err(CollError::Mismatch);
        }
        // Every part as long as the first (all-to-allv: each rank's own input size).
        if let Some(first) = r.parts.iter().flatten().next().filter(|_| a.ctype != ctype::ALL_TO_ALLV) {
            if first.data.len() != a.data.len() {
                return Err(CollError::Mismatch);
            }
        }
        r.parts[a.rank] = Some(Part {
            dev: a.dev,
            nc: a.nc,
            engine: a.engine,
            dst: a.dst,
            peer: a.peer,
            meta: a.meta,
            out_len: a.out_len,
            data: a.data,
        });
        let complete = match &r.local {
            Some(l) => l.iter().all(|&i| r.parts[i].is_some()),
            None => r.parts.iter().all(|x| x.is_some()),
        };
        if !complete {
            return Ok(());
        }
        let Some(mut r) = p.remove(&key) else { return Ok(()) };
        drop(p);
        if let (Some(t), Some(_)) = (inter, &r.local) {
            return spawn_inter_host(t, a.comm, a.seq, r);
        }
        let n = r.parts.len();
        // Send/receive and permute: the source of every rank (each rank receives from at
        // most one; a peer outside the group is a malformed collective).
        let mut source: Vec<Option<usize>> = Vec::new();
        if ctype::has_peer(r.ctype) {
            source.resize(n, None);
            for (s, part) in r.parts.iter().enumerate() {
                let Some(part) = part else { continue };
                if part.peer == isa::device_ops::NO_PEER {
                    continue;
                }
                match source.get_mut(usize::from(part.peer)) {
                    Some(slot @ None) => *slot = Some(s),
                    _ => {
                        self.recycle_parts(r.parts);
                        return Err(CollError::Mismatch);
                    }
                }
            }
        }
        // All-to-allv: every rank's metadata and output length.
        let metas: Vec<(Vec<u32>, usize)> = if r.ctype == ctype::ALL_TO_ALLV {
            r.parts.iter_mut().flatten().map(|p| (std::mem::take(&mut p.meta), p.out_len)).collect()
        } else {
            Vec::new()
        };
        let first = out.len();
        for part in r.parts.drain(..).flatten() {
            out.push(Delivery { dev: part.dev, nc: part.nc, engine: part.engine, dst: part.dst, data: part.data });
        }
        self.recycle_parts(r.parts);
        let ds = &mut out[first..];
        match r.ctype {
            ctype::ALL_GATHER => {
                let len = ds.first().map_or(0, |d| d.data.len());
                let all = self.concat(ds, len);
                for d in ds.iter_mut() {
                    d.data.clear();
                    d.data.extend_from_slice(&all);
                }
                self.put_bytes(all);
            }
            ctype::SEND_RECV | ctype::PERMUTE => {
                let len = ds.first().map_or(0, |d| d.data.len());
                let mut all = self.concat(ds, len);
                for (d, src) in ds.iter_mut().zip(&source) {
                    match src {
                        Some(s) => d.data.copy_from_slice(&all[s * len..(s + 1) * len]),
                        None => d.data.fill(0),
                    }
                }
                all.clear();
                self.put_bytes(all);
            }
            ctype::ALL_TO_ALL => {
                // Checked at arrival: every part is the same whole number of elements, a
                // multiple of `n` of them.
                let len = ds.first().map_or(0, |d| d.data.len());
                let chunk = len / n;
                let all = self.concat(ds, len);
                for (r, d) in ds.iter_mut().enumerate() {
                    for (j, out) in d.data.chunks_exact_mut(chunk.max(1)).enumerate().take(n) {
                        let at = j * len + r * chunk;
                        out.copy_from_slice(&all[at..at + chunk]);
                    }
                }
                self.put_bytes(all);
            }
            ctype::ALL_TO_ALLV => {
                let outs = {
                    let ins: Vec<&[u8]> = ds.iter().map(|d| &d.data[..]).collect();
                    all_to_all_v(&metas, &ins, esize)
                };
                let Some(outs) = outs else {
                    out.truncate(first);
                    return Err(CollError::Mismatch);
                };
                for (d, o) in ds.iter_mut().zip(outs) {
                    let old = std::mem::replace(&mut d.data, o);
                    self.put_bytes(old);
                }
            }
            ctype::REDUCE_SCATTER => {
                let Some(acc) = self.reduced(ds, n, r.dtype, r.op) else {
                    out.truncate(first);
                    return Err(CollError::Mismatch);
                };
                let count = acc.len() / esize;
                for (i, d) in ds.iter_mut().enumerate() {
                    let s = segment(count, n, i);
                    d.data.clear();
                    d.data.extend_from_slice(&acc[s.start * esize..s.end * esize]);
                }
                self.put_bytes(acc);
            }
            _ => {
                let Some(acc) = self.reduced(ds, n, r.dtype, r.op) else {
                    out.truncate(first);
                    return Err(CollError::Mismatch);
                };
                for d in ds.iter_mut() {
                    d.data.copy_from_slice(&acc);
                }
                self.put_bytes(acc);
            }
        }
        Ok(())
    }

    /// Drop any half-formed rendezvous of a device that was reset.
    pub fn forget(&self, dev: &Weak<Dev>) {
        let mut p = platform::sync::lock(&self.pending);
        p.retain(|_, r| !r.parts.iter().flatten().any(|x| x.dev.ptr_eq(dev)));
        drop(p);
        self.barriers.forget(dev);
    }
}

/// All-to-allv's outputs: rank `r`'s output (`metas[r].1` bytes, zero where nothing lands)
/// holds, for every rank `s`, the `count` elements rank `s` sends it — from `send_displ` in
/// `ins[s]` to `recv_displ` in the output — where `count` is both rank `s`'s send count to `r`
/// and rank `r`'s receive count from `s`. `None` when the counts disagree or a segment falls
/// outside its buffer (checked arithmetic; a malformed collective).
fn all_to_all_v(metas: &[(Vec<u32>, usize)], ins: &[&[u8]], es: usize) -> Option<Vec<Vec<u8>>> {
    let n = metas.len();
    if ins.len() != n {
        return None;
    }
    let plans: Vec<(Vec<Piece>, Vec<Piece>)> = metas
        .iter()
        .zip(ins)
        .map(|((m, out_len), inp)| exchange::all_to_allv_plan(m, n, es, inp.len(), *out_len).ok())
        .collect::<Option<_>>()?;
    let mut outs = Vec::with_capacity(n);
    for (r, (_, out_len)) in metas.iter().enumerate() {
        let mut o = vec![0u8; *out_len];
        for (s, inp) in ins.iter().enumerate() {
            // Sender and receiver agree on the pair's count (both leave out an empty one).
            let send = plans[s].0.iter().find(|p| p.peer == r);
            let recv = plans[r].1.iter().find(|p| p.peer == s);
            match (send, recv) {
                (None, None) => {}
                (Some(from), Some(to)) if from.len == to.len => {
                    // Both ranges checked against their buffers by the plans.
                    o.get_mut(to.at..to.at + to.len)?.copy_from_slice(inp.get(from.at..from.at + from.len)?);
                }
                _ => return None,
            }
        }
        outs.push(o);
    }
    Some(outs)
}

/// Element-wise reduction of `parts` (one per rank, the same length) in the module's order.
#[cfg(test)]
pub(crate) fn reduce(parts: &[&[u8]], op: u8, dt: u8) -> Vec<u8> {
    let mut acc = vec![0u8; parts.first().map_or(0, |p| p.len())];
    let (Some(dt), Some(op)) = (dtype::of(dt), alu::op(op)) else { return acc };
    if reduce::all_reduce_into(&mut acc, parts.len(), |i| parts[i], dt, op).is_err() {
        acc.clear();
    }
    acc
}

/// The seam's kind of collective kind `ct`, or `None` for a kind the seam does not carry.
fn kind_of(ct: u8) -> Option<CollKind> {
    match ct {
        ctype::ALL_REDUCE => Some(CollKind::AllReduce),
        ctype::ALL_GATHER => Some(CollKind::AllGather),
        ctype::REDUCE_SCATTER => Some(CollKind::ReduceScatter),
        ctype::SEND_RECV | ctype::PERMUTE | ctype::ALL_TO_ALL | ctype::ALL_TO_ALLV => Some(CollKind::Exchange),
        _ => None,
    }
}

/// Hands a spanning group's local parts to `t` on a worker thread (an exchange's as the local
/// ranks' point-to-point plans, [`exchange::part`]); delivers the results, or
/// fails every local participant: a network failure raises the NC's INTC `net_proxy_fail` (the
/// line the `net-proxy` fault kind raises; NRT_NETWORK_PROXY_FAILURE), a malformed collective
/// `cc_error` with the engine faulted (NRT_EXEC_HW_ERR_COLLECTIVES).
fn spawn_inter_host(t: Arc<dyn InterHost>, comm: u32, seq: u32, r: Rendezvous) -> Result<(), CollError> {
    let kind = kind_of(r.ctype).ok_or(CollError::BadType)?;
    let parts: Vec<(usize, Part)> = r.parts.into_iter().enumerate().filter_map(|(i, p)| p.map(|p| (i, p))).collect();
    let mut req = InterHostRequest {
        comm,
        seq,
        size: r.size,
        kind,
        elem: r.dtype,
        op: r.op,
        parts: Vec::with_capacity(parts.len()),
        exchange: Vec::new(),
    };
    let mut sinks = Vec::with_capacity(parts.len());
    for (i, mut p) in parts {
        if kind == CollKind::Exchange {
            req.exchange.push(exchange::part(r.ctype, r.size, r.dtype.size(), i, &mut p)?);
        } else {
            req.parts.push((i, std::mem::take(&mut p.data)));
        }
        sinks.push((p.dev, p.nc, p.engine, p.dst));
    }
    std::thread::Builder::new()
        .name(format!("sim-interhost-{comm:x}-{seq}"))
        .spawn(move || {
            // An NC whose network-proxy line is latched (an earlier failure not yet cleared)
            // does not take part: its peers see a dead rank. (The `net-proxy` fault kind acts
            // earlier, as the collective starts: the NC never arrives here, with the same
            // effect on the peers.)
            let down = sinks.iter().find(|(dev, nc, _, _)| {
                dev.upgrade().is_some_and(|d| {
                    let mut st = d.lock();
                    d.intc_latched(&mut st, *nc, super::intc::Line::NetProxyFail)
                })
            });
            let res = match down {
                Some((_, nc, _, _)) => Err(InterHostError::Network(format!("nc {nc}: network proxy failed"))),
                None => t.collective(req),
            };
            let res = res.and_then(|out| {
                if out.len() == sinks.len() {
                    Ok(out)
                } else {
                    Err(InterHostError::Collective(format!("{} outputs for {} parts", out.len(), sinks.len())))
                }
            });
            match res {
                Ok(out) => {
                    let work: Vec<Delivery> = sinks
                        .iter()
                        .zip(out)
                        .map(|((dev, nc, engine, dst), data)| Delivery {
                            dev: dev.clone(),
                            nc: *nc,
                            engine: *engine,
                            dst: *dst,
                            data,
                        })
                        .collect();
                    if let Some(d) = sinks.first().and_then(|s| s.0.upgrade()) {
                        d.deliver(work);
                    }
                }
                Err(e) => {
                    tracing::error!(comm, seq, "collective across processes failed: {e}");
                    for (dev, nc, engine, _) in &sinks {
                        let Some(d) = dev.upgrade() else { continue };
                        let mut st = d.lock();
                        match e {
                            // The network proxy's failure line, as the `net-proxy` fault kind
                            // raises it: the runtime ends the execution with 1206.
                            InterHostError::Network(_) => d.intc(&mut st, *nc, super::intc::Line::NetProxyFail),
                            InterHostError::Collective(_) => {
                                d.intc(&mut st, *nc, super::intc::Line::CcError);
                                super::records::fault_engine(
                                    &d,
                                    &mut st,
                                    *nc,
                                    *engine,
                                    super::records::code::COLLECTIVE,
                                    None,
                                );
                            }
                        }
                        st.pending[*nc] = true;
                        d.after(st);
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|_| CollError::BadGroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reduction_follows_the_segment_order() {
        // Three ranks, three elements: element k is segment k, folded k+1, k+2, …, k.
        let a = f32s(&[1.0, 1e8, -1e8]);
        let b = f32s(&[1e8, -1e8, 1.0]);
        let c = f32s(&[-1e8, 1.0, 1e8]);
        let out = reduce(&[&a, &b, &c], alu::ADD, dtype::FP32);
        // Segment 0: (b + c) + a = (1e8 - 1e8) + 1 = 1; plain rank order would give 0.
        // Segment 1: (c + a) + b = (1 + 1e8) - 1e8 = 0 in fp32.
        // Segment 2: (a + b) + c = (-1e8 + 1) + 1e8 = 0 in fp32.
        assert_eq!(out, f32s(&[1.0, 0.0, 0.0]));
        let seg: Vec<_> = (0..3).map(|k| segment(7, 3, k)).collect();
        assert_eq!(seg, vec![0..2, 2..4, 4..7]);
    }

    /// Host reference in the documented order, with the `half` crate's conversions (independent
    /// of the hub's own): segment `k` folded over ranks `k+1, …, k`, rounding every step.
    fn reference(parts: &[Vec<u8>], dt: u8) -> Vec<u8> {
        let n = parts.len();
        let es = dtype::size(dt).unwrap_or(4);
        let count = parts[0].len() / es;
        let get = |p: &[u8], i: usize| -> f32 {
            let b = &p[i * es..(i + 1) * es];
            match dt {
                dtype::FP32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                dtype::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
                _ => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            }
        };
        let put = |v: f32| -> Vec<u8> {
            match dt {
                dtype::FP32 => v.to_le_bytes().to_vec(),
                dtype::BF16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                _ => half::f16::from_f32(v).to_le_bytes().to_vec(),
            }
        };
        let round = |v: f32| -> f32 {
            let b = put(v);
            get(&b, 0)
        };
        let mut out = Vec::new();
        for i in 0..count {
            let k = (0..n).find(|&k| segment(count, n, k).contains(&i)).unwrap_or(0);
            let mut acc = get(&parts[(k + 1) % n], i);
            for j in 2..=n {
                acc = round(acc + get(&parts[(k + j) % n], i));
            }
            out.extend(put(acc));
        }
        out
    }

    #[test]
    fn float_add_matches_the_ordered_reference_bit_for_bit() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for dt in [dtype::FP32, dtype::BF16, dtype::FP16] {
            for n in 1..=5usize {
                for count in [1usize, 4, 7, 33] {
                    let parts: Vec<Vec<u8>> = (0..n)
                        .map(|_| {
                            (0..count)
                                .flat_map(|_| {
                                    x ^= x << 13;
                                    x ^= x >> 7;
                                    x ^= x << 17;
                                    // Mixed magnitudes: the sum depends on the order.
                                    let v = ((x % 2001) as f32 - 1000.0) * if x & 1 == 1 { 64.0 } else { 1.0 / 64.0 };
                                    reduce::from_f32(dtype::of(dt).unwrap_or(DType::F32), v)
                                })
                                .collect()
                        })
                        .collect();
                    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
                    let got = reduce(&refs, alu::ADD, dt);
                    assert_eq!(got, reference(&parts, dt), "dtype {dt:#x} n={n} count={count}");
                }
            }
        }
    }

    struct Fake {
        calls: std::sync::atomic::AtomicUsize,
    }

    impl InterHost for Fake {
        fn local_ranks(&self, comm: u32) -> Option<Vec<usize>> {
            (comm == 7).then(|| vec![0])
        }
        fn collective(&self, req: InterHostRequest) -> Result<Vec<Vec<u8>>, InterHostError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(req.parts.into_iter().map(|p| p.1).chain(req.exchange.into_iter().map(|x| x.input)).collect())
        }
        fn barrier(&self, _comm: u32, _seq: u32, _size: usize, _local: &[usize]) -> Result<(), InterHostError> {
            Ok(())
        }
    }

    fn arrival(d: &crate::SimDevice) -> Arrival {
        Arrival {
            comm: 7,
            seq: 0,
            rank: 0,
            size: 2,
            op: alu::ADD,
            dtype: dtype::FP32,
            ctype: ctype::ALL_REDUCE,
            peer: isa::device_ops::NO_PEER,
            meta: Vec::new(),
            out_len: 0,
            dev: Arc::downgrade(&d.dev),
            nc: 0,
            engine: 0,
            dst: 0,
            data: vec![0u8; 8],
        }
    }

    /// Runs one group of `parts` (rank order) of kind `ct` with each rank's `peers` through a
    /// hub with no seam; the outputs in rank order, or the error of the last arrival.
    fn meet(ct: u8, dt: u8, parts: &[Vec<u8>], peers: &[u8]) -> Result<Vec<Vec<u8>>, CollError> {
        let Ok(d) = crate::SimDevice::new(crate::SimConfig::new(&csr_maps::SUNDA).timing(crate::Timing::Step)) else {
            panic!("sim device");
        };
        let mut out = Vec::new();
        for (r, data) in parts.iter().enumerate() {
            let a = Arrival {
                rank: r,
                size: parts.len(),
                dtype: dt,
                ctype: ct,
                peer: peers.get(r).copied().unwrap_or(isa::device_ops::NO_PEER),
                data: data.clone(),
                ..arrival(&d)
            };
            d.dev.hub.arrive(a, &mut out)?;
        }
        Ok(out.into_iter().map(|d| d.data).collect())
    }

    #[test]
    fn send_receive_and_permute_deliver_to_the_peer() {
        let parts = vec![vec![1u8, 2], vec![3, 4], vec![5, 6]];
        // Send/receive: each rank sends to the next; rank 0 receives rank 2's buffer.
        let got = meet(ctype::SEND_RECV, dtype::UINT8, &parts, &[1, 2, 0]);
        assert_eq!(got, Ok(vec![vec![5, 6], vec![1, 2], vec![3, 4]]));
        // Permute 0 <-> 1, rank 2 sends nowhere and nobody sends to it: zeros.
        let got = meet(ctype::PERMUTE, dtype::UINT8, &parts, &[1, 0, isa::device_ops::NO_PEER]);
        assert_eq!(got, Ok(vec![vec![3, 4], vec![1, 2], vec![0, 0]]));
        // Two sources for one target, or a peer outside the group: malformed.
        assert_eq!(meet(ctype::PERMUTE, dtype::UINT8, &parts, &[1, 1, 0]), Err(CollError::Mismatch));
        assert_eq!(meet(ctype::PERMUTE, dtype::UINT8, &parts, &[1, 3, 0]), Err(CollError::Mismatch));
    }

    #[test]
    fn all_to_all_v_places_each_pairs_count() {
        // Two ranks of uint8. Rank 0 sends 1 element to itself (from 0) and 3 to rank 1 (from
        // 1); rank 1 sends 2 to rank 0 (from 2) and 1 to itself (from 0).
        let ins: [&[u8]; 2] = [&[10, 11, 12, 13], &[20, 21, 22, 23]];
        let metas = vec![
            // send counts, send displs, recv counts, recv displs
            (vec![1, 3, 0, 1, 1, 2, 3, 0], 5),
            (vec![2, 1, 2, 0, 3, 1, 0, 4], 5),
        ];
        let got = all_to_all_v(&metas, &ins, 1);
        // Rank 0: its own element at 3, rank 1's two at 0..2, nothing at 2 and 4.
        // Rank 1: rank 0's three at 0..3, its own at 4.
        assert_eq!(got, Some(vec![vec![22, 23, 0, 10, 0], vec![11, 12, 13, 0, 20]]));
        // Counts that disagree, or a segment past a buffer: malformed.
        let mut bad = metas.clone();
        bad[0].0[1] = 2;
        assert_eq!(all_to_all_v(&bad, &ins, 1), None);
        let mut bad = metas.clone();
        bad[1].0[2] = 3;
        assert_eq!(all_to_all_v(&bad, &ins, 1), None);
        let mut bad = metas.clone();
        bad[1].0[7] = 5;
        assert_eq!(all_to_all_v(&bad, &ins, 1), None);
        let mut bad = metas;
        bad[0].0[3] = u32::MAX;
        assert_eq!(all_to_all_v(&bad, &ins, 1), None);
    }

    #[test]
    fn all_to_all_transposes_the_chunks() {
        // Two ranks of four fp16 elements: chunk j of rank r goes to rank j, at position r.
        let parts: Vec<Vec<u8>> = (0..2u8).map(|r| (0..8).map(|b| r * 16 + b).collect()).collect();
        let got = meet(ctype::ALL_TO_ALL, dtype::FP16, &parts, &[]);
        assert_eq!(got, Ok(vec![vec![0, 1, 2, 3, 16, 17, 18, 19], vec![4, 5, 6, 7, 20, 21, 22, 23]]));
        // Three ranks of the same: four elements do not split in three.
        let three = vec![parts[0].clone(), parts[1].clone(), parts[0].clone()];
        assert_eq!(meet(ctype::ALL_TO_ALL, dtype::FP16, &three, &[]), Err(CollError::Mismatch));
        // An unknown kind is refused.
        assert_eq!(meet(0x7F, dtype::FP16, &parts, &[]), Err(CollError::BadType));
    }

    #[test]
    fn spanning_groups_cross_the_seam_unless_the_network_proxy_is_down() {
        use std::sync::atomic::Ordering;
        let cfg = crate::SimConfig::new(&csr_maps::SUNDA).timing(crate::Timing::Step);
        let (Ok(up), Ok(down)) = (crate::SimDevice::new(cfg.clone()), crate::SimDevice::new(cfg)) else {
            panic!("sim devices");
        };
        let t_up = Arc::new(Fake { calls: Default::default() });
        let t_down = Arc::new(Fake { calls: Default::default() });
        up.set_inter_host(Some(t_up.clone()));
        down.set_inter_host(Some(t_down.clone()));
        // The NC's network-proxy line is latched (an earlier failure not yet cleared).
        {
            let mut st = down.dev.lock();
            down.dev.intc(&mut st, 0, crate::device::intc::Line::NetProxyFail);
        }
        // A group spanning processes: the only local participant completes the local part at
        // once and nothing is delivered synchronously.
        let mut out = Vec::new();
        assert_eq!(down.dev.hub.arrive(arrival(&down), &mut out), Ok(()));
        assert!(out.is_empty());
        assert_eq!(up.dev.hub.arrive(arrival(&up), &mut out), Ok(()));
        assert!(out.is_empty());
        let t0 = std::time::Instant::now();
        while t_up.calls.load(Ordering::SeqCst) == 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(t_up.calls.load(Ordering::SeqCst), 1);
        assert_eq!(t_down.calls.load(Ordering::SeqCst), 0, "a rank with its network proxy down must not take part");
        // A rank outside the local set is refused.
        let mut a = arrival(&up);
        a.rank = 1;
        assert_eq!(up.dev.hub.arrive(a, &mut out).err(), Some(CollError::BadGroup));
        // A kind the seam does not carry cannot span processes; the exchanges cross it.
        let a = Arrival { ctype: 0x7F, seq: 1, ..arrival(&up) };
        assert_eq!(up.dev.hub.arrive(a, &mut out).err(), Some(CollError::BadType));
        let a = Arrival { ctype: ctype::PERMUTE, peer: 1, seq: 2, ..arrival(&up) };
        assert_eq!(up.dev.hub.arrive(a, &mut out), Ok(()));
        let t0 = std::time::Instant::now();
        while t_up.calls.load(Ordering::SeqCst) < 2 && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(t_up.calls.load(Ordering::SeqCst), 2, "a permute spanning processes must cross the seam");
    }
}
