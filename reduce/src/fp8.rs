//! The two 8-bit float formats of the collectives (modeled: docs/modeled.md): e4m3 (1 sign, 4
//! exponent, 3 mantissa bits, bias 7) and e5m2 (1, 5, 2, bias 15), both with IEEE 754's
//! conventions — the exponent field of all ones holds ±infinity (mantissa 0) and NaN, zero
//! holds ±0 and the subnormals — so e4m3's largest finite value is 240 (Neuron's F8E4M3 of
//! Trn1/Trn2, not the "FN" variant without infinities) and e5m2's 57344.
//!
//! Conversions are exact from fp8 to f64 and round to nearest, ties to even, from f64 to fp8,
//! a value past the largest finite one by half a step or more becoming infinity. The sum of
//! two fp8 values is exact in f64 (at most 33 significant bits), so an operation computed in
//! f64 and converted once is correctly rounded.

/// One of the two formats: exponent and mantissa widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    exp_bits: u32,
    man_bits: u32,
}

/// 1 sign, 4 exponent, 3 mantissa bits.
pub const E4M3: Format = Format { exp_bits: 4, man_bits: 3 };
/// 1 sign, 5 exponent, 2 mantissa bits.
pub const E5M2: Format = Format { exp_bits: 5, man_bits: 2 };

/// The canonical NaN both formats produce (sign 0, exponent and mantissa all ones).
pub const NAN: u8 = 0x7F;

impl Format {
    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    fn exp_max_field(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    /// The value of `b`, exactly.
    pub fn to_f64(self, b: u8) -> f64 {
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = (u32::from(b) >> self.man_bits) & self.exp_max_field();
        let m = u32::from(b) & ((1 << self.man_bits) - 1);
        let mag = if e == self.exp_max_field() {
            if m == 0 {
                f64::INFINITY
            } else {
                return f64::NAN;
            }
        } else if e == 0 {
            f64::from(m) * pow2(1 - self.bias() - self.man_bits as i32)
        } else {
            f64::from((1 << self.man_bits) | m) * pow2(e as i32 - self.bias() - self.man_bits as i32)
        };
        sign * mag
    }

    /// `v` rounded to nearest, ties to even (module docs).
    pub fn from_f64(self, v: f64) -> u8 {
        if v.is_nan() {
            return NAN;
        }
        let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
        let a = v.abs();
        let inf = (self.exp_max_field() << self.man_bits) as u8;
        if a.is_infinite() {
            return sign | inf;
        }
        let min_normal_exp = 1 - self.bias();
        let bits = if a < pow2(min_normal_exp) {
            // Subnormal: the count of the smallest steps is the encoding (a count of
            // 2^man_bits is the smallest normal value, exponent field 1, mantissa 0).
            (a / pow2(min_normal_exp - self.man_bits as i32)).round_ties_even() as u32
        } else {
            // `a` is a normal f64 here (at least 2^-14): its exponent from its bits.
            let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
            let n = (a / pow2(e - self.man_bits as i32)).round_ties_even() as u32;
            // A mantissa rounded up to 2^(man_bits + 1) carries into the exponent.
            let (e, n) = if n >> (self.man_bits + 1) != 0 { (e + 1, n >> 1) } else { (e, n) };
            let field = (e + self.bias()) as u32;
            if field >= self.exp_max_field() {
                return sign | inf;
            }
            (field << self.man_bits) | (n & ((1 << self.man_bits) - 1))
        };
        sign | bits as u8
    }
}

/// 2^e for the exponents of these formats (well inside f64's normal range).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        for (f, one, max, inf, min_sub) in
            [(E4M3, 0x38, 240.0, 0x78, 2f64.powi(-9)), (E5M2, 0x3C, 57344.0, 0x7C, 2f64.powi(-16))]
        {
            assert_eq!(f.from_f64(1.0), one);
            assert_eq!(f.to_f64(one), 1.0);
            assert_eq!(f.to_f64(inf - 1), max);
            assert_eq!(f.to_f64(inf), f64::INFINITY);
            assert_eq!(f.to_f64(0x80 | inf), f64::NEG_INFINITY);
            assert_eq!(f.to_f64(1), min_sub);
            assert!(f.to_f64(inf + 1).is_nan());
            assert_eq!(f.from_f64(f64::NAN), NAN);
            assert_eq!(f.from_f64(-0.0), 0x80);
            // Half a step past the largest finite value is infinity; just below stays finite.
            let step = max - f.to_f64(inf - 2);
            assert_eq!(f.from_f64(max + step / 2.0), inf);
            assert_eq!(f.from_f64(max + step / 2.0 - 1e-9), inf - 1);
            // Half the smallest subnormal ties to even (zero); a bit more rounds up.
            assert_eq!(f.from_f64(min_sub / 2.0), 0);
            assert_eq!(f.from_f64(min_sub * 0.75), 1);
            assert_eq!(f.from_f64(min_sub * 1.5), 2);
        }
        // e4m3: 17 is between 16 and 18, a tie: to even (16); 19 rounds to 20.
        assert_eq!(E4M3.to_f64(E4M3.from_f64(17.0)), 16.0);
        assert_eq!(E4M3.to_f64(E4M3.from_f64(19.0)), 20.0);
    }

    #[test]
    fn every_finite_encoding_round_trips() {
        for f in [E4M3, E5M2] {
            for b in 0..=u8::MAX {
                let v = f.to_f64(b);
                if v.is_nan() {
                    assert_eq!(f.from_f64(v), NAN);
                } else {
                    assert_eq!(f.from_f64(v), b, "{f:?} {b:#04x} = {v}");
                }
            }
        }
    }

    #[test]
    fn rounding_between_neighbours() {
        // Between every two neighbouring finite values: a quarter of the way rounds down,
        // three quarters up, the midpoint to the even mantissa (the encoding's low bit 0).
        for f in [E4M3, E5M2] {
            let mut finite: Vec<(u8, f64)> =
                (0..0x80u8).map(|b| (b, f.to_f64(b))).filter(|(_, v)| v.is_finite()).collect();
            finite.sort_by(|x, y| x.1.total_cmp(&y.1));
            for w in finite.windows(2) {
                let ((lo, a), (hi, b)) = (w[0], w[1]);
                let even = if lo & 1 == 0 { lo } else { hi };
                for (v, want) in [(a + (b - a) / 4.0, lo), (a + (b - a) * 0.75, hi), ((a + b) / 2.0, even)] {
                    assert_eq!(f.from_f64(v), want, "{f:?} {v}");
                    assert_eq!(f.from_f64(-v), 0x80 | want, "{f:?} -{v}");
                }
            }
        }
    }
}
