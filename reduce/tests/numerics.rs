//! The one element-wise reduction against a straightforward reference, over many random
//! fp32 / bf16 / fp16 / fp8 / integer operands for every operator, and the three entry points
//! (`reduce_into`, `reduce_after`, `reduce_pair`) against each other.
//!
//! The reference shares no code with the crate: half-precision values are decoded with the
//! textbook formula into f64, the operation is done in f64 and rounded to f32 (exact for these
//! operands, or an innocuous double rounding for fp32 ADD), and the f32 result is rounded to
//! the element type by searching the table of every finite value of that type for the nearest
//! one (fp8: the f64 result rounded directly) (ties to the even encoding; at or beyond the largest finite value plus half its ulp,
//! infinity). MAX/MIN keep the earlier operand unless the later one compares greater / less.

use proptest::prelude::*;
use reduce::{reduce_after, reduce_into, reduce_pair, DType, ReduceOp};

/// A 16- or 8-bit float format with IEEE conventions: exponent and mantissa widths (the sign
/// is the bit above them).
#[derive(Clone, Copy)]
struct Fmt {
    exp_bits: u32,
    man_bits: u32,
}

const F16: Fmt = Fmt { exp_bits: 5, man_bits: 10 };
const BF16: Fmt = Fmt { exp_bits: 8, man_bits: 7 };
const E4M3: Fmt = Fmt { exp_bits: 4, man_bits: 3 };
const E5M2: Fmt = Fmt { exp_bits: 5, man_bits: 2 };

impl Fmt {
    fn max_exp(self) -> u32 {
        (1 << self.exp_bits) - 1
    }
    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }
    fn is_nan(self, h: u16) -> bool {
        let e = (u32::from(h) >> self.man_bits) & self.max_exp();
        e == self.max_exp() && u32::from(h) & ((1 << self.man_bits) - 1) != 0
    }
    /// The value of encoding `h` (sign, biased exponent, mantissa; subnormals without the
    /// hidden bit).
    fn decode(self, h: u16) -> f64 {
        let h = u32::from(h);
        let sign = if h >> (self.exp_bits + self.man_bits) == 1 { -1.0 } else { 1.0 };
        let e = (h >> self.man_bits) & self.max_exp();
        let m = f64::from(h & ((1 << self.man_bits) - 1));
        let frac = m / f64::from(1u32 << self.man_bits);
        if e == self.max_exp() {
            return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if e == 0 {
            sign * frac * 2f64.powi(1 - self.bias())
        } else {
            sign * (1.0 + frac) * 2f64.powi(e as i32 - self.bias())
        }
    }
    /// Every finite non-negative value in encoding order (which is value order).
    fn table(self) -> Vec<f64> {
        let max_finite = ((self.max_exp() - 1) << self.man_bits) | ((1 << self.man_bits) - 1);
        (0..=max_finite).map(|h| self.decode(h as u16)).collect()
    }
    /// `v` rounded to the nearest encoding, ties to even (`None` for NaN).
    fn round(self, table: &[f64], v: f64) -> Option<u16> {
        if v.is_nan() {
            return None;
        }
        let sign: u16 = if v.is_sign_negative() { 1 << (self.exp_bits + self.man_bits) } else { 0 };
        let a = v.abs();
        let inf = (self.max_exp() << self.man_bits) as u16;
        let last = table.len() - 1;
        let ulp = table[last] - table[last - 1];
        if a >= table[last] + ulp / 2.0 {
            return Some(sign | inf);
        }
        // The largest encoding not above `a`, and the one after it.
        let lo = table.partition_point(|&x| x <= a) - 1;
        if lo == last || table[lo] == a {
            return Some(sign | lo as u16);
        }
        let hi = lo + 1;
        let pick = match (a - table[lo]).partial_cmp(&(table[hi] - a)) {
            Some(std::cmp::Ordering::Less) => lo,
            Some(std::cmp::Ordering::Greater) => hi,
            _ if lo % 2 == 0 => lo,
            _ => hi,
        };
        Some(sign | pick as u16)
    }
}

/// `x ⊕ y` in f64 (x the earlier operand).
fn op_f64(op: ReduceOp, x: f64, y: f64) -> f64 {
    match op {
        ReduceOp::Add => x + y,
        ReduceOp::Max => {
            if y > x {
                y
            } else {
                x
            }
        }
        ReduceOp::Min => {
            if y < x {
                y
            } else {
                x
            }
        }
    }
}

/// `x ⊕ y` in f32 (x the earlier operand).
fn op_f32(op: ReduceOp, x: f32, y: f32) -> f32 {
    match op {
        ReduceOp::Add => (f64::from(x) + f64::from(y)) as f32,
        ReduceOp::Max => {
            if y > x {
                y
            } else {
                x
            }
        }
        ReduceOp::Min => {
            if y < x {
                y
            } else {
                x
            }
        }
    }
}

/// The reference result bytes of `x ⊕ y` for one element, or `None` when it is a NaN (any
/// NaN encoding is accepted then).
fn reference(dt: DType, op: ReduceOp, x: &[u8], y: &[u8], t: &Tables) -> Option<Vec<u8>> {
    let h = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    let w = |b: &[u8]| [b[0], b[1], b[2], b[3]];
    match dt {
        DType::I32 => {
            let (a, b) = (i32::from_le_bytes(w(x)), i32::from_le_bytes(w(y)));
            let r = match op {
                ReduceOp::Add => a.wrapping_add(b),
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
            };
            Some(r.to_le_bytes().to_vec())
        }
        DType::U8 => Some(vec![int_op(op, i128::from(x[0]), i128::from(y[0]), 8, false) as u8]),
        DType::I8 => Some(vec![int_op(op, i128::from(x[0] as i8), i128::from(y[0] as i8), 8, true) as u8]),
        DType::U16 => {
            let r = int_op(op, i128::from(h(x)), i128::from(h(y)), 16, false) as u16;
            Some(r.to_le_bytes().to_vec())
        }
        DType::I16 => {
            let r = int_op(op, i128::from(h(x) as i16), i128::from(h(y) as i16), 16, true) as u16;
            Some(r.to_le_bytes().to_vec())
        }
        DType::U32 => {
            let r = int_op(op, i128::from(u32::from_le_bytes(w(x))), i128::from(u32::from_le_bytes(w(y))), 32, false);
            Some((r as u32).to_le_bytes().to_vec())
        }
        DType::F32 => {
            let r = op_f32(op, f32::from_le_bytes(w(x)), f32::from_le_bytes(w(y)));
            (!r.is_nan()).then(|| r.to_le_bytes().to_vec())
        }
        DType::F16 | DType::Bf16 => {
            let (fmt, table) = if dt == DType::F16 { (F16, &t.f16) } else { (BF16, &t.bf16) };
            let (a, b) = (h(x), h(y));
            let (fa, fb) = (fmt.decode(a) as f32, fmt.decode(b) as f32);
            if fmt.is_nan(a) || fmt.is_nan(b) {
                // ADD of a NaN is a NaN; MAX/MIN keep the earlier operand when unordered.
                return match op {
                    ReduceOp::Add => None,
                    _ if fmt.is_nan(a) => None,
                    _ => Some(x.to_vec()),
                };
            }
            fmt.round(table, f64::from(op_f32(op, fa, fb))).map(|r| r.to_le_bytes().to_vec())
        }
        DType::F8E4M3 | DType::F8E5M2 => {
            let (fmt, table) = if dt == DType::F8E4M3 { (E4M3, &t.e4m3) } else { (E5M2, &t.e5m2) };
            let (a, b) = (u16::from(x[0]), u16::from(y[0]));
            if fmt.is_nan(a) || fmt.is_nan(b) {
                return match op {
                    ReduceOp::Add => None,
                    _ if fmt.is_nan(a) => None,
                    _ => Some(x.to_vec()),
                };
            }
            // Exact in f64, rounded once.
            fmt.round(table, op_f64(op, fmt.decode(a), fmt.decode(b))).map(|r| vec![r as u8])
        }
    }
}

/// Every finite value of each rounded float type.
struct Tables {
    f16: Vec<f64>,
    bf16: Vec<f64>,
    e4m3: Vec<f64>,
    e5m2: Vec<f64>,
}

/// `a ⊕ b` of `bits`-bit integers computed exactly, ADD reduced modulo 2^bits (its low bits;
/// the caller truncates), MAX/MIN as the integers compare; `signed` only documents the range
/// the operands were read in.
fn int_op(op: ReduceOp, a: i128, b: i128, bits: u32, signed: bool) -> i128 {
    debug_assert!(bits < 64 && (signed || (a >= 0 && b >= 0)));
    match op {
        ReduceOp::Add => (a + b).rem_euclid(1i128 << bits),
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

fn is_nan(dt: DType, b: &[u8]) -> bool {
    match dt {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_nan(),
        DType::F16 => F16.is_nan(u16::from_le_bytes([b[0], b[1]])),
        DType::Bf16 => BF16.is_nan(u16::from_le_bytes([b[0], b[1]])),
        DType::F8E4M3 => E4M3.is_nan(u16::from(b[0])),
        DType::F8E5M2 => E5M2.is_nan(u16::from(b[0])),
        DType::I32 | DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::U32 => false,
    }
}

/// Checks every entry point on `xs ⊕ ys` (whole elements of `dt`) against the reference.
fn check(dt: DType, op: ReduceOp, xs: &[u8], ys: &[u8]) -> Result<(), TestCaseError> {
    thread_local! {
        static TABLES: Tables = Tables { f16: F16.table(), bf16: BF16.table(), e4m3: E4M3.table(), e5m2: E5M2.table() };
    }
    let mut into = xs.to_vec();
    reduce_into(&mut into, ys, dt, op).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut after = ys.to_vec();
    reduce_after(&mut after, xs, dt, op).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut pair = vec![0u8; xs.len()];
    reduce_pair(&mut pair, xs, ys, dt, op).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let es = dt.size();
    // The entry points agree bit for bit, except in the payload of a NaN (the arithmetic
    // leaves which operand's payload an ADD of two NaNs keeps to the compiler).
    let same = |a: &[u8], b: &[u8]| a == b || (is_nan(dt, a) && is_nan(dt, b));
    for ((i, a), p) in into.chunks_exact(es).zip(after.chunks_exact(es)).zip(pair.chunks_exact(es)) {
        prop_assert!(same(i, a) && same(i, p), "{} {}: into {:02x?}, after {:02x?}, pair {:02x?}", dt, op, i, a, p);
    }
    TABLES.with(|t| {
        for ((x, y), got) in xs.chunks_exact(es).zip(ys.chunks_exact(es)).zip(into.chunks_exact(es)) {
            match reference(dt, op, x, y, t) {
                Some(want) => prop_assert_eq!(got, &want[..], "{} {} of {:02x?} and {:02x?}", dt, op, x, y),
                None => {
                    prop_assert!(is_nan(dt, got), "{} {} of {:02x?} and {:02x?}: {:02x?} is not NaN", dt, op, x, y, got)
                }
            }
        }
        Ok(())
    })
}

fn elems(dt: DType) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let es = dt.size();
    (1usize..200).prop_flat_map(move |n| {
        (proptest::collection::vec(any::<u8>(), n * es), proptest::collection::vec(any::<u8>(), n * es))
    })
}

/// Operands of mixed magnitude, so that ADD rounds, overflows and cancels: each byte pattern
/// is steered towards a small exponent window around 1 half the time.
fn close(dt: DType) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let es = dt.size();
    let near = move |v: Vec<u16>| -> Vec<u8> {
        v.iter()
            .flat_map(|&r| {
                let x = f32::from(r as i16) / 64.0;
                reduce::from_f32(dt, x)[..es].to_vec()
            })
            .collect()
    };
    (1usize..200).prop_flat_map(move |n| {
        (proptest::collection::vec(any::<u16>(), n), proptest::collection::vec(any::<u16>(), n))
            .prop_map(move |(a, b)| (near(a), near(b)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_op_on_random_encodings(dt in prop::sample::select(DType::ALL.to_vec()), op in prop::sample::select(ReduceOp::ALL.to_vec()), (xs, ys) in elems(DType::F32)) {
        // Whole fp32 elements, reinterpreted per type (a multiple of every element size).
        check(dt, op, &xs, &ys)?;
    }

    #[test]
    fn every_op_on_values_that_round(dt in prop::sample::select(DType::ALL.to_vec()), op in prop::sample::select(ReduceOp::ALL.to_vec()), (xs, ys) in close(DType::F32)) {
        // `close` made fp32 elements; re-encode them in `dt`.
        let vals = |b: &[u8]| -> Vec<u8> {
            b.chunks_exact(4).flat_map(|c| reduce::from_f32(dt, f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        };
        check(dt, op, &vals(&xs), &vals(&ys))?;
    }
}

#[test]
fn every_half_encoding_decodes_as_the_formula_says() {
    for h in 0..=u16::MAX {
        let b = h.to_le_bytes();
        for (dt, fmt) in [(DType::F16, F16), (DType::Bf16, BF16)] {
            let got = reduce::to_f32(dt, &b).unwrap_or(0.0);
            if fmt.is_nan(h) {
                assert!(got.is_nan(), "{dt} {h:#06x}");
            } else {
                assert_eq!(f64::from(got), fmt.decode(h), "{dt} {h:#06x}");
            }
        }
    }
    // The same for both fp8 types, and every non-NaN fp8 encodes back to itself.
    for b in 0..=u8::MAX {
        for (dt, fmt) in [(DType::F8E4M3, E4M3), (DType::F8E5M2, E5M2)] {
            let got = reduce::to_f32(dt, &[b]).unwrap_or(0.0);
            if fmt.is_nan(u16::from(b)) {
                assert!(got.is_nan(), "{dt} {b:#04x}");
            } else {
                assert_eq!(f64::from(got), fmt.decode(u16::from(b)), "{dt} {b:#04x}");
                assert_eq!(reduce::from_f32(dt, got), vec![b], "{dt} {b:#04x}");
            }
        }
    }
}

#[test]
fn reference_rounds_ties_to_even_and_overflows_to_infinity() {
    let t = F16.table();
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even encoding, 1.0 (0x3C00).
    assert_eq!(F16.round(&t, 1.0 + 2f64.powi(-11)), Some(0x3C00));
    // 1 + 3·2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up to 0x3C02.
    assert_eq!(F16.round(&t, 1.0 + 3.0 * 2f64.powi(-11)), Some(0x3C02));
    assert_eq!(F16.round(&t, 65504.0), Some(0x7BFF));
    assert_eq!(F16.round(&t, 65520.0), Some(0x7C00));
    assert_eq!(F16.round(&t, -65519.0), Some(0xFBFF));
    assert_eq!(F16.round(&t, -0.0), Some(0x8000));
}

/// The simulator's hub converted fp16 and bf16 by hand before it used this crate. These are
/// those conversions, kept as a witness that moving the hub onto the crate changed no result
/// it can produce: every non-NaN fp16 decodes the same, and the sum of any two fp16 or bf16
/// values (rounded once to f32, the hub's arithmetic) encodes the same.
mod former_hub {
    pub fn f16_to_f32(h: u16) -> f32 {
        let s = ((h >> 15) as u32) << 31;
        let e = ((h >> 10) & 0x1F) as u32;
        let m = (h & 0x3FF) as u32;
        let bits = if e == 0 {
            if m == 0 {
                s
            } else {
                let mut e2 = 127 - 15 + 1;
                let mut m2 = m;
                while m2 & 0x400 == 0 {
                    m2 <<= 1;
                    e2 -= 1;
                }
                s | ((e2 as u32) << 23) | ((m2 & 0x3FF) << 13)
            }
        } else if e == 0x1F {
            s | 0x7F80_0000 | (m << 13)
        } else {
            s | ((e + 127 - 15) << 23) | (m << 13)
        };
        f32::from_bits(bits)
    }

    pub fn f32_to_f16(v: f32) -> u16 {
        let b = v.to_bits();
        let s = ((b >> 16) & 0x8000) as u16;
        let e = ((b >> 23) & 0xFF) as i32;
        let m = b & 0x7F_FFFF;
        if e == 0xFF {
            return s | 0x7C00 | if m != 0 { 0x200 } else { 0 };
        }
        let e2 = e - 127 + 15;
        if e2 >= 0x1F {
            return s | 0x7C00;
        }
        if e2 <= 0 {
            if e2 < -10 {
                return s;
            }
            let m2 = (m | 0x80_0000) >> (1 - e2);
            let r = (m2 + 0x1000 + ((m2 >> 13) & 1)) >> 13;
            return s | r as u16;
        }
        let r = m + 0xFFF + ((m >> 13) & 1);
        if r & 0x80_0000 != 0 {
            return s | (((e2 + 1) as u16) << 10);
        }
        s | ((e2 as u16) << 10) | (r >> 13) as u16
    }

    pub fn f32_to_bf16(v: f32) -> u16 {
        let bits = v.to_bits();
        let r = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
        (r >> 16) as u16
    }
}

#[test]
fn the_former_hub_conversions_agree_on_every_result_they_could_produce() {
    for h in 0..=u16::MAX {
        if !F16.is_nan(h) {
            let want = reduce::to_f32(DType::F16, &h.to_le_bytes()).unwrap_or(f32::NAN);
            assert_eq!(former_hub::f16_to_f32(h).to_bits(), want.to_bits(), "{h:#06x}");
        }
    }
    // Sums of fp16 / bf16 pairs: a deterministic sweep of 2^22 pairs.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..(1 << 22) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (a, b) = ((x & 0xFFFF) as u16, ((x >> 16) & 0xFFFF) as u16);
        for (dt, fmt) in [(DType::F16, F16), (DType::Bf16, BF16)] {
            if fmt.is_nan(a) || fmt.is_nan(b) {
                continue;
            }
            let mut acc = a.to_le_bytes().to_vec();
            if reduce_into(&mut acc, &b.to_le_bytes(), dt, ReduceOp::Add).is_err() {
                panic!("reduce_into of one element failed");
            }
            let sum = reduce::to_f32(dt, &a.to_le_bytes()).unwrap_or(0.0)
                + reduce::to_f32(dt, &b.to_le_bytes()).unwrap_or(0.0);
            if sum.is_nan() {
                continue;
            }
            let former = if dt == DType::F16 { former_hub::f32_to_f16(sum) } else { former_hub::f32_to_bf16(sum) };
            assert_eq!(u16::from_le_bytes([acc[0], acc[1]]), former, "{dt} {a:#06x} + {b:#06x}");
        }
    }
}
