//! What each rank contributes and what each must receive: the shapes of a row, the inputs of
//! the two checks, and the comparison.

use reduce::{segment, DType, ReduceOp};

use crate::args::{Check, Plan};
use crate::ops::{wire, Dtype, Op, Wire};

/// One row of the sweep as each rank runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The row's size(B): all-reduce and reduce-scatter the input, all-gather the output.
    pub size: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub wire: Wire,
}

/// The row for a requested `size`, rounded down to what the operation can split evenly (whole
/// elements; all-gather: a per-rank share of whole elements; all-to-all: `n` equal chunks of
/// whole elements; all-to-allv: `n(n+1)/2` units of whole elements, [`alltoallv_meta`]).
/// `None`: the size rounds to nothing.
pub fn shape(op: Op, d: Dtype, ranks: usize, size: u64) -> Option<Shape> {
    let w = wire(d);
    let n = ranks.max(1) as u64;
    let es = d.size() as u64;
    let (size, in_bytes, out_bytes) = match op {
        Op::AllGather => {
            let share = size / n / es * es;
            (share * n, share, share * n)
        }
        Op::AllToAll => {
            let all = size / n / es * es * n;
            (all, all, all)
        }
        Op::AllToAllV => {
            // Element counts travel as u32 in the metadata.
            let all = (size / es / tri(ranks) * tri(ranks)).min(u64::from(u32::MAX)) * es;
            (all, all, all)
        }
        _ => {
            let s = size / es * es;
            (s, s, s)
        }
    };
    (in_bytes > 0).then_some(Shape { size, in_bytes, out_bytes, wire: w })
}

/// `n(n+1)/2`: the units of an all-to-allv row of `n` ranks.
fn tri(n: usize) -> u64 {
    let n = n.max(1) as u64;
    n * (n + 1) / 2
}

/// Elements rank `s` sends rank `r` in an all-to-allv of `in_elems` elements per rank over
/// `n` ranks (**this tool's choice**, for want of `--alltoallv-metadata`): `unit × (1 + (s + r)
/// mod n)` with `unit = in_elems / (n(n+1)/2)`, so that every pair's count differs from its
/// neighbours' while every rank sends and receives `in_elems`.
pub fn alltoallv_count(n: usize, in_elems: u64, s: usize, r: usize) -> u64 {
    in_elems / tri(n) * (1 + ((s + r) % n.max(1)) as u64)
}

/// Rank `rank`'s metadata tensor (`isa::device_ops::AllToAllV`): send counts, send
/// displacements (in rank order), receive counts, receive displacements (in rank order).
pub fn alltoallv_meta(n: usize, in_elems: u64, rank: usize) -> Vec<u32> {
    let c = |s: usize, r: usize| alltoallv_count(n, in_elems, s, r) as u32;
    let prefix = |f: &dyn Fn(usize) -> u32| -> Vec<u32> {
        (0..n)
            .scan(0u32, |acc, k| {
                let at = *acc;
                *acc += f(k);
                Some(at)
            })
            .collect()
    };
    let mut m: Vec<u32> = (0..n).map(|r| c(rank, r)).collect();
    m.extend(prefix(&|r| c(rank, r)));
    m.extend((0..n).map(|s| c(s, rank)));
    m.extend(prefix(&|s| c(s, rank)));
    m
}

/// One element of value 1 in `d`.
pub fn one(d: Dtype) -> Vec<u8> {
    match d {
        Dtype::U8 | Dtype::I8 => vec![1],
        Dtype::Fp8E4m3 => vec![0x38],
        Dtype::Fp8E5m2 => vec![0x3c],
        Dtype::U16 | Dtype::I16 => 1u16.to_le_bytes().to_vec(),
        Dtype::Fp16 => half::f16::ONE.to_le_bytes().to_vec(),
        Dtype::Bf16 => half::bf16::ONE.to_le_bytes().to_vec(),
        Dtype::U32 | Dtype::I32 => 1u32.to_le_bytes().to_vec(),
        Dtype::Fp32 => 1f32.to_le_bytes().to_vec(),
    }
}

/// Rank `rank`'s input.
pub fn input(check: Option<Check>, d: Dtype, s: &Shape, rank: usize, seed: u64) -> Vec<u8> {
    match check {
        None => vec![0; s.in_bytes as usize],
        Some(Check::AllOnes) => one(d).repeat(s.in_bytes as usize / d.size()),
        Some(Check::Random) => reduce::pattern(rank, s.in_bytes as usize, s.wire.dtype, seed),
    }
}

/// The element `n` ones of `d` add up to in the engine's type `dt`, folded one rank at a
/// time as the engine adds them: integers wrap (n modulo 2^bits); a float stops growing once
/// 1 is below half its step (fp8 e4m3 at 16).
fn sum_of_ones(d: Dtype, dt: DType, n: usize) -> Result<Vec<u8>, reduce::ReduceError> {
    let one = one(d);
    let mut acc = one.clone();
    for _ in 1..n {
        reduce::reduce_into(&mut acc, &one, dt, ReduceOp::Add)?;
    }
    Ok(acc)
}

/// The rank whose buffer rank `rank` receives in a send/receive or permute of `pairs`.
fn source(op: Op, pairs: &[(usize, usize)], ranks: usize, rank: usize) -> Option<usize> {
    match op {
        Op::SendRecv => Some((rank + ranks - 1) % ranks.max(1)),
        _ => pairs.iter().find(|p| p.1 == rank).map(|p| p.0),
    }
}

/// The bytes rank `rank` must receive (reduce-scatter: its segment only); `Err` when the host
/// reference cannot be computed.
pub fn expected(plan: &Plan, check: Check, s: &Shape, rank: usize) -> Result<Vec<u8>, reduce::ReduceError> {
    let (op, d, ranks, seed, pairs) = (plan.op, plan.dtype, plan.ranks, plan.seed, &plan.pairs[..]);
    let es = s.wire.dtype.size();
    let count = s.in_bytes as usize / es;
    let seg = segment(count, ranks, rank);
    let of = |r: usize| input(Some(check), d, s, r, seed);
    match op {
        Op::SendRecv | Op::Permute => {
            return Ok(match source(op, pairs, ranks, rank) {
                Some(src) => of(src),
                None => vec![0; s.out_bytes as usize],
            })
        }
        Op::AllToAll => {
            let chunk = s.in_bytes as usize / ranks.max(1);
            let mut out = Vec::with_capacity(s.out_bytes as usize);
            for j in 0..ranks {
                let theirs = of(j);
                out.extend_from_slice(theirs.get(rank * chunk..(rank + 1) * chunk).ok_or(reduce::ReduceError::Inputs)?);
            }
            return Ok(out);
        }
        Op::AllToAllV => {
            // Rank `s`'s segment for this rank, in rank order (the receive displacements).
            let ine = s.in_bytes / d.size() as u64;
            let mut out = Vec::with_capacity(s.out_bytes as usize);
            for src in 0..ranks {
                let from = (0..rank).map(|r| alltoallv_count(ranks, ine, src, r)).sum::<u64>() as usize * d.size();
                let len = alltoallv_count(ranks, ine, src, rank) as usize * d.size();
                out.extend_from_slice(of(src).get(from..from + len).ok_or(reduce::ReduceError::Inputs)?);
            }
            out.resize(s.out_bytes as usize, 0);
            return Ok(out);
        }
        _ => {}
    }
    let full = match (op, check) {
        (Op::AllGather, Check::AllOnes) => return Ok(one(d).repeat(s.out_bytes as usize / d.size())),
        (Op::AllGather, Check::Random) => {
            let parts: Vec<Vec<u8>> =
                (0..ranks).map(|r| reduce::pattern(r, s.in_bytes as usize, s.wire.dtype, seed)).collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            return Ok(reduce::reference_all_gather(&refs));
        }
        (_, Check::AllOnes) => sum_of_ones(d, s.wire.dtype, ranks)?.repeat(count),
        (_, Check::Random) => {
            let parts: Vec<Vec<u8>> =
                (0..ranks).map(|r| reduce::pattern(r, s.in_bytes as usize, s.wire.dtype, seed)).collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            reduce::reference_all_reduce(&refs, s.wire.dtype, ReduceOp::Add)?
        }
    };
    match op {
        Op::ReduceScatter => {
            full.get(seg.start * es..seg.end * es).map(<[u8]>::to_vec).ok_or(reduce::ReduceError::Inputs)
        }
        _ => Ok(full),
    }
}

/// The first difference of `got` from `want` (compared over `want`'s length), as a sentence.
pub fn compare(got: &[u8], want: &[u8], w: &Wire) -> Option<String> {
    if got.len() < want.len() {
        return Some(format!("output has {} bytes, expected {}", got.len(), want.len()));
    }
    let es = w.dtype.size();
    let i = got.iter().zip(want).position(|(a, b)| a != b)? / es;
    let at = |b: &[u8]| {
        let e = &b[i * es..(i + 1) * es];
        let v = reduce::to_f32(w.dtype, e).map(|v| v.to_string()).unwrap_or_default();
        format!("{v} ({})", e.iter().map(|x| format!("{x:02x}")).collect::<String>())
    };
    let bad = got[..want.len()].chunks(es).zip(want.chunks(es)).filter(|(a, b)| a != b).count();
    Some(format!(
        "element {i} is {}, expected {} ({bad} of {} {} elements differ)",
        at(got),
        at(want),
        want.len() / es,
        w.dtype.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(op: Op, dtype: Dtype, ranks: usize, seed: u64, pairs: &[(usize, usize)]) -> Plan {
        Plan {
            op,
            dtype,
            ranks,
            sizes: vec![],
            iters: 1,
            warmup: 0,
            check: None,
            seed,
            stats: vec![],
            json: None,
            show_algorithm: false,
            pairs: pairs.to_vec(),
            nnodes: 1,
            multi: None,
        }
    }

    #[test]
    fn shapes_round_to_what_splits_evenly() {
        let s = shape(Op::AllReduce, Dtype::Fp32, 8, 10).unwrap();
        assert_eq!((s.size, s.in_bytes, s.out_bytes), (8, 8, 8));
        let s = shape(Op::AllGather, Dtype::Fp32, 8, 70).unwrap();
        assert_eq!((s.size, s.in_bytes, s.out_bytes), (64, 8, 64));
        assert_eq!(shape(Op::AllGather, Dtype::Fp32, 8, 16), None);
        let s = shape(Op::AllGather, Dtype::Fp8E4m3, 4, 8).unwrap();
        assert_eq!((s.in_bytes, s.wire.dtype), (2, DType::F8E4M3));
        assert_eq!(shape(Op::AllReduce, Dtype::U8, 4, 8).map(|s| s.wire.dtype), Some(DType::U8));
        assert_eq!(shape(Op::AllReduce, Dtype::Fp8E5m2, 4, 7).map(|s| s.in_bytes), Some(7));
        // All-to-allv of 4 ranks: units of 10 elements.
        assert_eq!(shape(Op::AllToAllV, Dtype::Fp32, 4, 170).map(|s| s.in_bytes), Some(160));
        assert_eq!(shape(Op::AllToAllV, Dtype::Fp32, 4, 39), None);
    }

    #[test]
    fn all_ones_sums_to_the_rank_count() {
        let s = shape(Op::AllReduce, Dtype::Bf16, 8, 16).unwrap();
        let want = expected(&plan(Op::AllReduce, Dtype::Bf16, 8, 0, &[]), Check::AllOnes, &s, 0).unwrap();
        assert_eq!(want, half::bf16::from_f32(8.0).to_le_bytes().repeat(8));
        let s = shape(Op::ReduceScatter, Dtype::I32, 3, 40).unwrap();
        let want = expected(&plan(Op::ReduceScatter, Dtype::I32, 3, 0, &[]), Check::AllOnes, &s, 2).unwrap();
        assert_eq!(want, 3i32.to_le_bytes().repeat(4));
        // 200 int8 ones wrap to -56.
        let s = shape(Op::AllReduce, Dtype::I8, 200, 4).unwrap();
        let want = expected(&plan(Op::AllReduce, Dtype::I8, 200, 0, &[]), Check::AllOnes, &s, 0).unwrap();
        assert_eq!(want, vec![(-56i8) as u8; 4]);
        // fp8 e4m3 ones stop at 16 (16 + 1 ties to even, 16); e5m2 at 8 (8 + 1 ties to 8).
        for (d, ranks, v) in [(Dtype::Fp8E4m3, 8, 8.0), (Dtype::Fp8E4m3, 40, 16.0), (Dtype::Fp8E5m2, 40, 8.0)] {
            let s = shape(Op::AllReduce, d, ranks, 4).unwrap();
            let want = expected(&plan(Op::AllReduce, d, ranks, 0, &[]), Check::AllOnes, &s, 0).unwrap();
            assert_eq!(want, reduce::from_f32(s.wire.dtype, v).repeat(4), "{d:?} {ranks}");
        }
    }

    #[test]
    fn exchanges_receive_the_right_rank() {
        let inp = |r: usize, s: &Shape| input(Some(Check::Random), Dtype::Fp32, s, r, 5);
        // Send/receive: rank 0 of 4 receives rank 3's buffer.
        let s = shape(Op::SendRecv, Dtype::Fp32, 4, 64).unwrap();
        assert_eq!(expected(&plan(Op::SendRecv, Dtype::Fp32, 4, 5, &[]), Check::Random, &s, 0).unwrap(), inp(3, &s));
        // Permute: the pair's source, zeros for a rank no pair targets.
        let pairs = [(0, 2), (2, 0)];
        assert_eq!(expected(&plan(Op::Permute, Dtype::Fp32, 4, 5, &pairs), Check::Random, &s, 2).unwrap(), inp(0, &s));
        assert_eq!(expected(&plan(Op::Permute, Dtype::Fp32, 4, 5, &pairs), Check::Random, &s, 1).unwrap(), vec![0; 64]);
        // All-to-all: 4 ranks, 70 bytes round to 64 (4 chunks of 4 fp32); rank 1 gets chunk 1
        // of every rank.
        let s = shape(Op::AllToAll, Dtype::Fp32, 4, 70).unwrap();
        assert_eq!((s.size, s.in_bytes, s.out_bytes), (64, 64, 64));
        let want: Vec<u8> = (0..4).flat_map(|j| inp(j, &s)[16..32].to_vec()).collect();
        assert_eq!(expected(&plan(Op::AllToAll, Dtype::Fp32, 4, 5, &[]), Check::Random, &s, 1).unwrap(), want);
        assert_eq!(shape(Op::AllToAll, Dtype::Fp32, 4, 15), None);
        // All-to-allv: counts unit × (1 + (s + r) mod n), every rank sending and receiving all
        // of its elements; rank 1 of 3 over 12 elements (unit 2) receives 4 of rank 0's from
        // 2, 6 of its own from 4, 2 of rank 2's from 6, placed in rank order.
        assert_eq!(alltoallv_meta(3, 12, 1), vec![4, 6, 2, 0, 4, 10, 4, 6, 2, 0, 4, 10]);
        let s = shape(Op::AllToAllV, Dtype::U8, 3, 12).unwrap();
        let p = plan(Op::AllToAllV, Dtype::U8, 3, 5, &[]);
        let inp = |r: usize| input(Some(Check::Random), Dtype::U8, &s, r, 5);
        let want = [&inp(0)[2..6], &inp(1)[4..10], &inp(2)[6..8]].concat();
        assert_eq!(expected(&p, Check::Random, &s, 1).unwrap(), want);
    }

    #[test]
    fn a_difference_is_named_with_its_element() {
        let w = wire(Dtype::Fp32);
        let want = [2f32.to_le_bytes(), 2f32.to_le_bytes()].concat();
        let got = [2f32.to_le_bytes(), 3f32.to_le_bytes()].concat();
        assert_eq!(compare(&want, &want, &w), None);
        let m = compare(&got, &want, &w).unwrap();
        assert!(m.starts_with("element 1 is 3"), "{m}");
    }
}
