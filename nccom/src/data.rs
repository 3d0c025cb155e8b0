//! What each rank contributes and what each must receive: the shapes of a row, the inputs of
//! the two checks, and the comparison.

use reduce::{segment, DType, ReduceOp};

use crate::args::Check;
use crate::ops::{wire, Dtype, Op, Unsupported, Wire};

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
/// elements; all-gather: a per-rank share of whole elements). `Ok(None)`: the size rounds to
/// nothing.
pub fn shape(op: Op, d: Dtype, ranks: usize, size: u64) -> Result<Option<Shape>, Unsupported> {
    let n = ranks.max(1) as u64;
    let es = d.size() as u64;
    match op {
        Op::AllGather => {
            let share = size / n / es * es;
            if share == 0 {
                return Ok(None);
            }
            let w = wire(op, d, share)?;
            Ok(Some(Shape { size: share * n, in_bytes: share, out_bytes: share * n, wire: w }))
        }
        _ => {
            let w = wire(op, d, size)?;
            let unit = es.max(w.dtype.size() as u64);
            let s = size / unit * unit;
            if s == 0 {
                return Ok(None);
            }
            Ok(Some(Shape { size: s, in_bytes: s, out_bytes: s, wire: w }))
        }
    }
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

/// The element `n` ones add up to in the engine's type: floats exact for the group sizes the
/// engine takes (at most 255 ranks); integers wrap (n modulo 2^bits, two's complement).
fn sum_of_ones(dt: DType, n: usize) -> Vec<u8> {
    match dt {
        DType::F32 | DType::Bf16 | DType::F16 => reduce::from_f32(dt, n as f32),
        _ => (n as u64).to_le_bytes()[..dt.size()].to_vec(),
    }
}

/// The bytes rank `rank` must receive (reduce-scatter: its segment only); `Err` when the host
/// reference cannot be computed.
pub fn expected(
    op: Op,
    check: Check,
    d: Dtype,
    s: &Shape,
    ranks: usize,
    rank: usize,
    seed: u64,
) -> Result<Vec<u8>, reduce::ReduceError> {
    let es = s.wire.dtype.size();
    let count = s.in_bytes as usize / es;
    let seg = segment(count, ranks, rank);
    let full = match (op, check) {
        (Op::AllGather, Check::AllOnes) => return Ok(one(d).repeat(s.out_bytes as usize / d.size())),
        (Op::AllGather, Check::Random) => {
            let parts: Vec<Vec<u8>> =
                (0..ranks).map(|r| reduce::pattern(r, s.in_bytes as usize, s.wire.dtype, seed)).collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            return Ok(reduce::reference_all_gather(&refs));
        }
        (_, Check::AllOnes) => sum_of_ones(s.wire.dtype, ranks).repeat(count),
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

    #[test]
    fn shapes_round_to_what_splits_evenly() {
        let s = shape(Op::AllReduce, Dtype::Fp32, 8, 10).unwrap().unwrap();
        assert_eq!((s.size, s.in_bytes, s.out_bytes), (8, 8, 8));
        let s = shape(Op::AllGather, Dtype::Fp32, 8, 70).unwrap().unwrap();
        assert_eq!((s.size, s.in_bytes, s.out_bytes), (64, 8, 64));
        assert_eq!(shape(Op::AllGather, Dtype::Fp32, 8, 16).unwrap(), None);
        let s = shape(Op::AllGather, Dtype::Fp8E4m3, 4, 8).unwrap().unwrap();
        assert_eq!((s.in_bytes, s.wire.dtype), (2, DType::I16));
        assert_eq!(shape(Op::AllReduce, Dtype::U8, 4, 8).unwrap().map(|s| s.wire.dtype), Some(DType::U8));
        assert!(shape(Op::AllReduce, Dtype::Fp8E5m2, 4, 8).is_err());
    }

    #[test]
    fn all_ones_sums_to_the_rank_count() {
        let s = shape(Op::AllReduce, Dtype::Bf16, 8, 16).unwrap().unwrap();
        let want = expected(Op::AllReduce, Check::AllOnes, Dtype::Bf16, &s, 8, 0, 0).unwrap();
        assert_eq!(want, half::bf16::from_f32(8.0).to_le_bytes().repeat(8));
        let s = shape(Op::ReduceScatter, Dtype::I32, 3, 40).unwrap().unwrap();
        let want = expected(Op::ReduceScatter, Check::AllOnes, Dtype::I32, &s, 3, 2, 0).unwrap();
        assert_eq!(want, 3i32.to_le_bytes().repeat(4));
        // 200 int8 ones wrap to -56.
        let s = shape(Op::AllReduce, Dtype::I8, 200, 4).unwrap().unwrap();
        let want = expected(Op::AllReduce, Check::AllOnes, Dtype::I8, &s, 200, 0, 0).unwrap();
        assert_eq!(want, vec![(-56i8) as u8; 4]);
    }

    #[test]
    fn a_difference_is_named_with_its_element() {
        let w = wire(Op::AllReduce, Dtype::Fp32, 8).unwrap();
        let want = [2f32.to_le_bytes(), 2f32.to_le_bytes()].concat();
        let got = [2f32.to_le_bytes(), 3f32.to_le_bytes()].concat();
        assert_eq!(compare(&want, &want, &w), None);
        let m = compare(&got, &want, &w).unwrap();
        assert!(m.starts_with("element 1 is 3"), "{m}");
    }
}
