//! Collective element types, reduction operators and the one element-wise reduction.
//!
//! One definition of what a collective reduces, used by every place that reduces: the
//! simulator's collective hub (NCs of one process), the `fabric` crate (ranks across
//! processes and hosts), the ISA's collective encodings (`isa::device_ops::{dtype, alu}` map
//! their codes onto [`DType`] and [`ReduceOp`]; the numbers stay there) and the C API's seam
//! between the two. The crate knows no device and no transport.
//!
//! Reduction order (deterministic, the same for every algorithm): the `count` elements are
//! split into `n` segments, segment `k` holding elements `[k*count/n, (k+1)*count/n)`
//! ([`segment`]). Every element of segment `k` is the left fold over the ranks in ring order
//! starting after `k`: `((x[k+1] ⊕ x[k+2]) ⊕ …) ⊕ x[k]` (indices mod `n`, [`order`]). For
//! `n = 1` the result is the input.
//!
//! Numerics (docs/fabric.md): float ADD rounds after every step in the element type (bf16 and
//! fp16 are computed in fp32 and rounded to nearest-even by the `half` crate's conversions — the
//! one f16/bf16 implementation of the workspace); MAX/MIN keep the earlier operand on ties
//! (+0 vs −0) and unordered comparisons (NaN); integer ADD wraps (int32, and the modeled
//! 8-, 16- and 32-bit integer types: uint8, int8, uint16, int16, uint32); the modeled fp8
//! types (e4m3 and e5m2, IEEE conventions, [`fp8`]) compute every step exactly in f64 and
//! round once to nearest-even, overflowing to infinity.

pub mod fp8;

use std::fmt;
use std::ops::Range;

use half::{bf16, f16};

/// Element type of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    Bf16,
    F16,
    I32,
    /// Modeled (libnrt's instruction documents fp32, bf16, fp16 and int32; nccom-test
    /// benchmarks these too): the integer types below.
    U8,
    I8,
    U16,
    I16,
    U32,
    /// Modeled: 8-bit floats, 4 exponent and 3 mantissa bits ([`fp8::E4M3`]).
    F8E4M3,
    /// Modeled: 8-bit floats, 5 exponent and 2 mantissa bits ([`fp8::E5M2`]).
    F8E5M2,
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::Bf16,
        DType::F16,
        DType::I32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::Bf16 | DType::F16 | DType::U16 | DType::I16 => 2,
            DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => 1,
        }
    }

    /// Parses `fp32|f32|float32`, `bf16|bfloat16`, `fp16|f16|float16`, `int32|i32`, and
    /// `uint8|u8`, `int8|i8`, `uint16|u16`, `int16|i16`, `uint32|u32`, `fp8_e4m3|fp8|f8e4m3`,
    /// `fp8_e5m2|f8e5m2`.
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "f32" | "float32" => Some(DType::F32),
            "bf16" | "bfloat16" => Some(DType::Bf16),
            "fp16" | "f16" | "float16" => Some(DType::F16),
            "int32" | "i32" => Some(DType::I32),
            "uint8" | "u8" => Some(DType::U8),
            "int8" | "i8" => Some(DType::I8),
            "uint16" | "u16" => Some(DType::U16),
            "int16" | "i16" => Some(DType::I16),
            "uint32" | "u32" => Some(DType::U32),
            "fp8_e4m3" | "fp8" | "f8e4m3" => Some(DType::F8E4M3),
            "fp8_e5m2" | "f8e5m2" => Some(DType::F8E5M2),
            _ => None,
        }
    }

    /// The canonical name (`fp32`, `bf16`, `fp16`, `int32`, `uint8`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::Bf16 => "bf16",
            DType::F16 => "fp16",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::F8E4M3 => "fp8_e4m3",
            DType::F8E5M2 => "fp8_e5m2",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Add,
    Max,
    Min,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 3] = [ReduceOp::Add, ReduceOp::Max, ReduceOp::Min];

    /// Parses `add|sum`, `max`, `min`.
    pub fn parse(s: &str) -> Option<ReduceOp> {
        match s.to_ascii_lowercase().as_str() {
            "add" | "sum" => Some(ReduceOp::Add),
            "max" => Some(ReduceOp::Max),
            "min" => Some(ReduceOp::Min),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Add => "add",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Operands a reduction cannot combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    /// The two operands differ in length, or are not whole elements of `dtype`.
    #[error("reduce of {left} and {right} bytes of {dtype}")]
    Length { left: usize, right: usize, dtype: DType },
    /// The earlier operand of a pairwise reduction is not as long as the output.
    #[error("reduce of {earlier} and {out} bytes")]
    Operands { earlier: usize, out: usize },
    /// The per-rank inputs of an ordered reduction differ in length or are not whole elements.
    #[error("reference: inputs of different or unaligned lengths")]
    Inputs,
}

/// Element range of segment `k` of `count` elements split over `n` ranks.
pub fn segment(count: usize, n: usize, k: usize) -> Range<usize> {
    if n == 0 {
        return 0..0;
    }
    // count * k fits: count is a byte length / element size, k < n <= 65536.
    (count * k / n)..(count * (k + 1) / n)
}

/// Ranks in the order segment `k`'s elements are reduced (crate docs).
pub fn order(n: usize, k: usize) -> impl Iterator<Item = usize> {
    (1..=n).map(move |i| (k + i) % n)
}

/// `a ⊕ b` of two fp8 values of format `f`, exact in f64 and rounded once.
fn fold_f8(f: fp8::Format, x: u8, y: u8, swap: bool, op: ReduceOp) -> u8 {
    let (x, y) = (f.to_f64(x), f.to_f64(y));
    let (a, b) = if swap { (y, x) } else { (x, y) };
    let v = match op {
        ReduceOp::Add => a + b,
        // As fold_f32: `a` wins ties and unordered comparisons.
        ReduceOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        ReduceOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
    };
    f.from_f64(v)
}

fn fold_f32(a: f32, b: f32, op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Add => a + b,
        // `a` wins ties and unordered comparisons: deterministic in the fold order.
        ReduceOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        ReduceOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
    }
}

/// `acc[i] = acc[i] ⊕ inp[i]` element-wise (`acc` holds the ranks earlier in the order).
pub fn reduce_into(acc: &mut [u8], inp: &[u8], dt: DType, op: ReduceOp) -> Result<(), ReduceError> {
    fold(acc, None, inp, false, dt, op)
}

/// `acc[i] = earlier[i] ⊕ acc[i]` element-wise: `acc` holds a later rank (the ring folds the
/// received partial, `earlier`, with the rank's own data in place).
pub fn reduce_after(acc: &mut [u8], earlier: &[u8], dt: DType, op: ReduceOp) -> Result<(), ReduceError> {
    fold(acc, None, earlier, true, dt, op)
}

/// `out[i] = earlier[i] ⊕ later[i]` element-wise.
pub fn reduce_pair(out: &mut [u8], earlier: &[u8], later: &[u8], dt: DType, op: ReduceOp) -> Result<(), ReduceError> {
    if earlier.len() != out.len() {
        return Err(ReduceError::Operands { earlier: earlier.len(), out: out.len() });
    }
    fold(out, Some(earlier), later, false, dt, op)
}

/// The element-wise fold of an integer type `$t` of `$n` bytes: wrapping ADD, MAX, MIN
/// (commutative, so the operand order does not matter).
macro_rules! fold_int {
    ($t:ty, $n:literal, $out:expr, $left:expr, $right:expr, $op:expr) => {{
        let f = |x: [u8; $n], y: [u8; $n]| (<$t>::from_le_bytes(x), <$t>::from_le_bytes(y));
        match $op {
            ReduceOp::Add => elementwise::<$n>($out, $left, $right, |x, y| {
                let (a, b) = f(x, y);
                a.wrapping_add(b).to_le_bytes()
            }),
            ReduceOp::Max => elementwise::<$n>($out, $left, $right, |x, y| {
                let (a, b) = f(x, y);
                a.max(b).to_le_bytes()
            }),
            ReduceOp::Min => elementwise::<$n>($out, $left, $right, |x, y| {
                let (a, b) = f(x, y);
                a.min(b).to_le_bytes()
            }),
        }
    }};
}

/// `out[i] = x[i] ⊕ y[i]` with `x = left` (`out` itself when `None`) and `y = right`, or
/// `out[i] = y[i] ⊕ x[i]` when `swap`.
fn fold(
    out: &mut [u8],
    left: Option<&[u8]>,
    right: &[u8],
    swap: bool,
    dt: DType,
    op: ReduceOp,
) -> Result<(), ReduceError> {
    if out.len() != right.len() || !out.len().is_multiple_of(dt.size()) {
        return Err(ReduceError::Length { left: out.len(), right: right.len(), dtype: dt });
    }
    match dt {
        // fp32 and int32: one loop per (operator, operand order), so that nothing but the
        // operation itself is left in the loop.
        DType::F32 => {
            let f = |x: [u8; 4], y: [u8; 4]| (f32::from_le_bytes(x), f32::from_le_bytes(y));
            let max = |a: f32, b: f32| if b > a { b } else { a };
            let min = |a: f32, b: f32| if b < a { b } else { a };
            match (op, swap) {
                (ReduceOp::Add, false) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    (a + b).to_le_bytes()
                }),
                (ReduceOp::Add, true) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    (b + a).to_le_bytes()
                }),
                (ReduceOp::Max, false) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    max(a, b).to_le_bytes()
                }),
                (ReduceOp::Max, true) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    max(b, a).to_le_bytes()
                }),
                (ReduceOp::Min, false) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    min(a, b).to_le_bytes()
                }),
                (ReduceOp::Min, true) => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    min(b, a).to_le_bytes()
                }),
            }
        }
        // Integer operations are commutative: the operand order does not matter.
        DType::I32 => {
            let f = |x: [u8; 4], y: [u8; 4]| (i32::from_le_bytes(x), i32::from_le_bytes(y));
            match op {
                ReduceOp::Add => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    a.wrapping_add(b).to_le_bytes()
                }),
                ReduceOp::Max => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    a.max(b).to_le_bytes()
                }),
                ReduceOp::Min => elementwise::<4>(out, left, right, |x, y| {
                    let (a, b) = f(x, y);
                    a.min(b).to_le_bytes()
                }),
            }
        }
        DType::U8 => fold_int!(u8, 1, out, left, right, op),
        DType::I8 => fold_int!(i8, 1, out, left, right, op),
        DType::U16 => fold_int!(u16, 2, out, left, right, op),
        DType::I16 => fold_int!(i16, 2, out, left, right, op),
        DType::U32 => fold_int!(u32, 4, out, left, right, op),
        DType::F8E4M3 => elementwise::<1>(out, left, right, |x, y| [fold_f8(fp8::E4M3, x[0], y[0], swap, op)]),
        DType::F8E5M2 => elementwise::<1>(out, left, right, |x, y| [fold_f8(fp8::E5M2, x[0], y[0], swap, op)]),
        DType::Bf16 => elementwise::<2>(out, left, right, |x, y| {
            let (x, y) = (bf16::from_le_bytes(x).to_f32(), bf16::from_le_bytes(y).to_f32());
            let (a, b) = if swap { (y, x) } else { (x, y) };
            bf16::from_f32(fold_f32(a, b, op)).to_le_bytes()
        }),
        DType::F16 => elementwise::<2>(out, left, right, |x, y| {
            let (x, y) = (f16::from_le_bytes(x).to_f32(), f16::from_le_bytes(y).to_f32());
            let (a, b) = if swap { (y, x) } else { (x, y) };
            f16::from_f32(fold_f32(a, b, op)).to_le_bytes()
        }),
    }
    Ok(())
}

/// `out[i] = f(x[i], y[i])` over elements of `N` bytes, `x` from `left` or `out` itself.
#[inline(always)]
fn elementwise<const N: usize>(
    out: &mut [u8],
    left: Option<&[u8]>,
    right: &[u8],
    f: impl Fn([u8; N], [u8; N]) -> [u8; N],
) {
    let arr = |c: &[u8]| -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    };
    match left {
        None => {
            for (o, y) in out.chunks_exact_mut(N).zip(right.chunks_exact(N)) {
                let v = f(arr(o), arr(y));
                o.copy_from_slice(&v);
            }
        }
        Some(l) => {
            for ((o, x), y) in out.chunks_exact_mut(N).zip(l.chunks_exact(N)).zip(right.chunks_exact(N)) {
                o.copy_from_slice(&f(arr(x), arr(y)));
            }
        }
    }
}

/// The reduction of the `n` rank inputs `part(0..n)` into `acc` in the crate's order: every
/// element of segment `k` is the left fold over ranks `k+1, k+2, …, k` (mod `n`). Every
/// input must be as long as `acc`, a whole number of elements; `acc`'s prior content is not
/// read. Allocates nothing.
pub fn all_reduce_into<'a>(
    acc: &mut [u8],
    n: usize,
    part: impl Fn(usize) -> &'a [u8],
    dt: DType,
    op: ReduceOp,
) -> Result<(), ReduceError> {
    let es = dt.size();
    let len = acc.len();
    if !len.is_multiple_of(es) || (0..n).any(|r| part(r).len() != len) {
        return Err(ReduceError::Inputs);
    }
    let count = len / es;
    for k in 0..n {
        let seg = segment(count, n, k);
        let bytes = seg.start * es..seg.end * es;
        let mut ranks = order(n, k);
        let Some(first) = ranks.next() else { continue };
        let out = &mut acc[bytes.clone()];
        out.copy_from_slice(&part(first)[bytes.clone()]);
        for r in ranks {
            reduce_into(out, &part(r)[bytes.clone()], dt, op)?;
        }
    }
    Ok(())
}

/// Host reference of all-reduce over `inputs[rank]` (all the same length) in the crate's
/// order.
pub fn reference_all_reduce(inputs: &[&[u8]], dt: DType, op: ReduceOp) -> Result<Vec<u8>, ReduceError> {
    let len = inputs.first().map_or(0, |b| b.len());
    let mut out = vec![0u8; len];
    all_reduce_into(&mut out, inputs.len(), |r| inputs[r], dt, op)?;
    Ok(out)
}

/// Host reference of reduce-scatter: rank `rank`'s segment of [`reference_all_reduce`].
pub fn reference_reduce_scatter(
    inputs: &[&[u8]],
    dt: DType,
    op: ReduceOp,
    rank: usize,
) -> Result<Vec<u8>, ReduceError> {
    let all = reference_all_reduce(inputs, dt, op)?;
    let es = dt.size();
    let seg = segment(all.len() / es, inputs.len(), rank);
    Ok(all[seg.start * es..seg.end * es].to_vec())
}

/// Host reference of all-gather: the inputs concatenated in rank order.
pub fn reference_all_gather(inputs: &[&[u8]]) -> Vec<u8> {
    inputs.concat()
}

/// Deterministic test data of `len` bytes for `rank` (whole elements of `dt`; a trailing
/// partial element is left out): values of mixed magnitude so that float ADD depends on the
/// reduction order. The same on every host, so each rank can compute every rank's input.
pub fn pattern(rank: usize, len: usize, dt: DType, salt: u64) -> Vec<u8> {
    let es = dt.size();
    let mut x = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt ^ 0x5bd1_e995;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len / es {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x % 2001) as f32 - 1000.0) * if x & 1 == 1 { 1e3 } else { 1e-3 };
        match dt {
            DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
            DType::I32 => out.extend_from_slice(&((x >> 16) as i32).wrapping_mul(7919).to_le_bytes()),
            DType::Bf16 => out.extend_from_slice(&bf16::from_f32(v).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(v / 100.0).to_le_bytes()),
            DType::U8 | DType::I8 => out.push((x >> 24) as u8),
            DType::U16 | DType::I16 => out.extend_from_slice(&((x >> 24) as u16).to_le_bytes()),
            DType::U32 => out.extend_from_slice(&((x >> 16) as u32).wrapping_mul(7919).to_le_bytes()),
            // Magnitudes that a sum of a few ranks keeps finite: e4m3 below 16 and 0.25,
            // e5m2 below 1000 and 0.25.
            DType::F8E4M3 => out.push(fp8::E4M3.from_f64(f64::from(v) / if x & 1 == 1 { 64e3 } else { 4.096 })),
            DType::F8E5M2 => out.push(fp8::E5M2.from_f64(f64::from(v) / if x & 1 == 1 { 1e3 } else { 4.096 })),
        }
    }
    out
}

/// One element of `dt` (the first `dt.size()` bytes of `b`) as f32 (integers converted), or
/// `None` when `b` is shorter than an element.
pub fn to_f32(dt: DType, b: &[u8]) -> Option<f32> {
    Some(match dt {
        DType::F32 => f32::from_le_bytes(b.get(..4)?.try_into().ok()?),
        DType::I32 => i32::from_le_bytes(b.get(..4)?.try_into().ok()?) as f32,
        DType::Bf16 => bf16::from_le_bytes(b.get(..2)?.try_into().ok()?).to_f32(),
        DType::F16 => f16::from_le_bytes(b.get(..2)?.try_into().ok()?).to_f32(),
        DType::U8 => f32::from(*b.first()?),
        DType::I8 => f32::from(*b.first()? as i8),
        DType::U16 => f32::from(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::I16 => f32::from(i16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::U32 => u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as f32,
        DType::F8E4M3 => fp8::E4M3.to_f64(*b.first()?) as f32,
        DType::F8E5M2 => fp8::E5M2.to_f64(*b.first()?) as f32,
    })
}

/// `v` as one little-endian element of `dt` (rounded to nearest-even; integers saturating).
pub fn from_f32(dt: DType, v: f32) -> Vec<u8> {
    match dt {
        DType::F32 => v.to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::Bf16 => bf16::from_f32(v).to_le_bytes().to_vec(),
        DType::F16 => f16::from_f32(v).to_le_bytes().to_vec(),
        DType::U8 => vec![v as u8],
        DType::I8 => vec![v as i8 as u8],
        DType::U16 => (v as u16).to_le_bytes().to_vec(),
        DType::I16 => (v as i16).to_le_bytes().to_vec(),
        DType::U32 => (v as u32).to_le_bytes().to_vec(),
        DType::F8E4M3 => vec![fp8::E4M3.from_f64(f64::from(v))],
        DType::F8E5M2 => vec![fp8::E5M2.from_f64(f64::from(v))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_and_differ_by_at_most_one() {
        for count in [0usize, 1, 5, 7, 64, 1001] {
            for n in 1..6 {
                let segs: Vec<_> = (0..n).map(|k| segment(count, n, k)).collect();
                assert_eq!(segs[0].start, 0);
                assert_eq!(segs[n - 1].end, count);
                for w in segs.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                let lens: Vec<_> = segs.iter().map(|s| s.len()).collect();
                let (mn, mx) = (lens.iter().min().copied(), lens.iter().max().copied());
                assert!(mx.unwrap_or(0) - mn.unwrap_or(0) <= 1);
            }
        }
    }

    #[test]
    fn order_is_rotation_ending_at_k() {
        assert_eq!(order(4, 1).collect::<Vec<_>>(), vec![2, 3, 0, 1]);
        assert_eq!(order(1, 0).collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn float_add_follows_the_order() {
        // Segment 0 of 3 ranks folds ranks 1, 2, 0: (1e8 + -1e8) + 1 = 1, where the plain
        // rank order would give (1 + 1e8) + -1e8 = 0 in fp32.
        // Three elements per rank so that element 0 is segment 0.
        let rank = |v: f32| [v, 0.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let ins = [rank(1.0), rank(1e8), rank(-1e8)];
        let refs: Vec<&[u8]> = ins.iter().map(|b| &b[..]).collect();
        let out = reference_all_reduce(&refs, DType::F32, ReduceOp::Add).unwrap_or_default();
        assert_eq!(out.get(..4), Some(&1.0f32.to_le_bytes()[..]));
    }

    #[test]
    fn half_types_round_and_int_wraps() {
        let x = bf16::from_f32(1.0).to_le_bytes();
        let y = bf16::from_f32(1.0 / 512.0).to_le_bytes();
        let mut acc = x.to_vec();
        reduce_into(&mut acc, &y, DType::Bf16, ReduceOp::Add).unwrap_or(());
        // 1 + 2^-9 is not representable in bf16 (8 bits of mantissa): rounds to even, 1.0.
        assert_eq!(acc, x.to_vec());
        let mut acc = i32::MAX.to_le_bytes().to_vec();
        reduce_into(&mut acc, &1i32.to_le_bytes(), DType::I32, ReduceOp::Add).unwrap_or(());
        assert_eq!(acc, i32::MIN.to_le_bytes().to_vec());
        let mut acc = f16::from_f32(-2.0).to_le_bytes().to_vec();
        reduce_into(&mut acc, &f16::from_f32(3.0).to_le_bytes(), DType::F16, ReduceOp::Max).unwrap_or(());
        assert_eq!(acc, f16::from_f32(3.0).to_le_bytes().to_vec());
        assert!(reduce_into(&mut [0u8; 3], &[0u8; 3], DType::F32, ReduceOp::Min).is_err());
    }

    #[test]
    fn fp8_add_rounds_every_step_so_the_order_counts() {
        let e4 = |v: f64| fp8::E4M3.from_f64(v);
        // 16 + 1 is a tie between 16 and 18: even, 16 — so adding ones stops at 16, where
        // adding 1 + 1 first gives 18.
        let mut acc = vec![e4(16.0)];
        reduce_into(&mut acc, &[e4(1.0)], DType::F8E4M3, ReduceOp::Add).unwrap_or(());
        assert_eq!(acc, vec![e4(16.0)]);
        // Three elements per rank, so that element 0 is segment 0, folded over ranks 1, 2, 0:
        // (1 + 1) + 16 = 18; element 2 is segment 2, folded over 0, 1, 2: (16 + 1) + 1 = 16.
        let ins = [[e4(16.0), 0, e4(16.0)], [e4(1.0), 0, e4(1.0)], [e4(1.0), 0, e4(1.0)]];
        let refs: Vec<&[u8]> = ins.iter().map(|b| &b[..]).collect();
        assert_eq!(reference_all_reduce(&refs, DType::F8E4M3, ReduceOp::Add).ok(), Some(vec![e4(18.0), 0, e4(16.0)]));
        // e5m2 overflows to infinity past 57344; MAX keeps the larger.
        let e5 = |v: f64| fp8::E5M2.from_f64(v);
        let mut acc = vec![e5(57344.0)];
        reduce_into(&mut acc, &[e5(8192.0)], DType::F8E5M2, ReduceOp::Add).unwrap_or(());
        assert_eq!(acc, vec![0x7C]);
        let mut acc = vec![e5(-3.0)];
        reduce_into(&mut acc, &[e5(2.0)], DType::F8E5M2, ReduceOp::Max).unwrap_or(());
        assert_eq!(acc, vec![e5(2.0)]);
        assert_eq!(DType::parse("fp8"), Some(DType::F8E4M3));
        assert_eq!(DType::F8E5M2.size(), 1);
    }
}
