//! Narrow element formats: the 8-bit floats (`f8e4m3fn`, `f8e4m3fnuz`, `f8e5m2`,
//! `f8e5m2fnuz`, `f8e8m0`), `f4e2m1`, and the 4- and 2-bit integers. Host storage keeps one
//! element per byte (floats as their bit pattern, integers as their value in an `i8`/`u8`);
//! packing two or four to a byte is a file-format concern (the ONNX importer unpacks).
//!
//! The float conversions follow `ml_dtypes` (what the ONNX reference uses): round to
//! nearest even, and on overflow the format's own rule: infinity for `f8e5m2`, NaN for the
//! `fn`/`fnuz` formats (which have no infinity), the largest value for `f4e2m1` (which has
//! neither). Saturating casts are a clamp before the cast (see the ONNX importer).

/// One of the narrow float formats: how its bits decode and how values round into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MiniFloat {
    /// 4 exponent bits (bias 7), 3 mantissa bits, NaN at S.1111.111, no infinity.
    E4M3FN,
    /// 4 exponent bits (bias 8), 3 mantissa bits, one NaN (0x80), no infinity, no -0.
    E4M3FNUZ,
    /// IEEE-style: 5 exponent bits (bias 15), 2 mantissa bits, infinities and NaNs.
    E5M2,
    /// 5 exponent bits (bias 16), 2 mantissa bits, one NaN (0x80), no infinity, no -0.
    E5M2FNUZ,
    /// 2 exponent bits (bias 1), 1 mantissa bit, no infinity, no NaN.
    E2M1,
}

impl MiniFloat {
    /// (exponent bits, mantissa bits, bias)
    fn layout(self) -> (u32, u32, i32) {
        match self {
            MiniFloat::E4M3FN => (4, 3, 7),
            MiniFloat::E4M3FNUZ => (4, 3, 8),
            MiniFloat::E5M2 => (5, 2, 15),
            MiniFloat::E5M2FNUZ => (5, 2, 16),
            MiniFloat::E2M1 => (2, 1, 1),
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        match self {
            MiniFloat::E4M3FN => 448.0,
            MiniFloat::E4M3FNUZ => 240.0,
            MiniFloat::E5M2 | MiniFloat::E5M2FNUZ => 57344.0,
            MiniFloat::E2M1 => 6.0,
        }
    }

    fn sign_bit(self) -> u8 {
        let (e, m, _) = self.layout();
        1 << (e + m)
    }

    /// The value of a bit pattern.
    pub fn decode(self, bits: u8) -> f64 {
        let (eb, mb, bias) = self.layout();
        let bits = bits & ((self.sign_bit() << 1).wrapping_sub(1));
        let sign = if bits & self.sign_bit() != 0 {
            -1.0
        } else {
            1.0
        };
        let e = ((bits >> mb) & ((1 << eb) - 1)) as i32;
        let m = (bits & ((1 << mb) - 1)) as i32;
        let e_max = (1 << eb) - 1;
        match self {
            MiniFloat::E4M3FN if e == e_max && m == (1 << mb) - 1 => return f64::NAN,
            MiniFloat::E5M2 if e == e_max => {
                return if m == 0 {
                    sign * f64::INFINITY
                } else {
                    f64::NAN
                };
            }
            MiniFloat::E4M3FNUZ | MiniFloat::E5M2FNUZ if bits == 0x80 => return f64::NAN,
            _ => {}
        }
        let frac = m as f64 / (1 << mb) as f64;
        let v = if e == 0 {
            frac * 2f64.powi(1 - bias)
        } else {
            (1.0 + frac) * 2f64.powi(e - bias)
        };
        sign * v
    }

    /// The bit pattern nearest `v` (ties to even), with the format's overflow rule.
    pub fn encode(self, v: f64) -> u8 {
        let (_, mb, bias) = self.layout();
        let uz = matches!(self, MiniFloat::E4M3FNUZ | MiniFloat::E5M2FNUZ);
        let sign = if v.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        let nan = match self {
            MiniFloat::E4M3FN => 0x7f,
            MiniFloat::E5M2 => 0x7e,
            MiniFloat::E4M3FNUZ | MiniFloat::E5M2FNUZ => 0x80,
            // No NaN: ml_dtypes stores a NaN as -0.
            MiniFloat::E2M1 => 0x08,
        };
        if v.is_nan() {
            return nan;
        }
        let a = v.abs();
        let min_normal = 2f64.powi(1 - bias);
        let max = self.max();
        // Quantum (spacing of representable values) around `a`.
        let q = if a < min_normal {
            2f64.powi(1 - bias - mb as i32)
        } else if a.is_infinite() {
            f64::INFINITY
        } else {
            2f64.powi(exponent(a) - mb as i32)
        };
        let r = if a.is_infinite() {
            a
        } else {
            (a / q).round_ties_even() * q
        };
        if r > max {
            return match self {
                MiniFloat::E5M2 => sign | 0x7c,
                MiniFloat::E2M1 => sign | 0x07,
                _ => nan,
            };
        }
        if r == 0.0 {
            // The `fnuz` formats have no -0 (its pattern is their NaN).
            return if uz { 0 } else { sign };
        }
        let mag = if r < min_normal {
            (r / 2f64.powi(1 - bias - mb as i32)) as u8
        } else {
            let e = exponent(r);
            let m = ((r / 2f64.powi(e) - 1.0) * (1 << mb) as f64) as u8;
            (((e + bias) as u8) << mb) | m
        };
        sign | mag
    }
}

/// floor(log2(a)) for a positive normal f64.
fn exponent(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// The value of an `f8e8m0` bit pattern: 2^(bits - 127), NaN at 0xff.
pub(crate) fn e8m0_decode(bits: u8) -> f64 {
    if bits == 0xff {
        f64::NAN
    } else {
        2f64.powi(bits as i32 - 127)
    }
}

/// Rounds into `f8e8m0` as ONNX's `Cast` does by default (`round_mode="up"`, saturate):
/// the f32 exponent, plus one when any fraction bit is set (except at the largest
/// exponent); NaN and infinities become NaN; the sign is ignored. A power of two the format
/// holds is kept as is (f32 holds 2^-127 only as a subnormal, which the bit rule would
/// round up), so the rule is idempotent.
pub(crate) fn e8m0_encode(v: f64) -> u8 {
    if v > 0.0 && v.is_finite() {
        let e = exponent(v);
        if v == 2f64.powi(e) && (-127..=127).contains(&e) {
            return (e + 127) as u8;
        }
    }
    let b = (v as f32).to_bits();
    let e = (b >> 23) & 0xff;
    if e == 0xff {
        return 0xff;
    }
    let up = (b & 0x7f_ffff) != 0 && e != 0xfe;
    (e + up as u32) as u8
}

/// Wraps an integer to `bits` wide two's complement (`signed`) or unsigned.
pub(crate) fn wrap_bits(v: i64, bits: u32, signed: bool) -> i64 {
    let m = v & ((1 << bits) - 1);
    if signed && m >= 1 << (bits - 1) {
        m - (1 << bits)
    } else {
        m
    }
}

macro_rules! minifloat_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u8);
    };
}

minifloat_type!(
    /// An `f8e4m3fn` element (its bits).
    F8E4M3FN
);
minifloat_type!(
    /// An `f8e4m3fnuz` element (its bits).
    F8E4M3FNUZ
);
minifloat_type!(
    /// An `f8e5m2` element (its bits).
    F8E5M2
);
minifloat_type!(
    /// An `f8e5m2fnuz` element (its bits).
    F8E5M2FNUZ
);
minifloat_type!(
    /// An `f8e8m0` element (its bits): an unsigned power of two.
    F8E8M0
);
minifloat_type!(
    /// An `f4e2m1` element (its bits in the low nibble).
    F4E2M1
);

macro_rules! minifloat_impl {
    ($name:ident, $fmt:expr) => {
        impl $name {
            /// The element's value.
            pub fn to_f64(self) -> f64 {
                $fmt.decode(self.0)
            }

            /// The element nearest `v` (ties to even; the format's overflow rule).
            pub fn from_f64(v: f64) -> Self {
                $name($fmt.encode(v))
            }
        }
    };
}

minifloat_impl!(F8E4M3FN, MiniFloat::E4M3FN);
minifloat_impl!(F8E4M3FNUZ, MiniFloat::E4M3FNUZ);
minifloat_impl!(F8E5M2, MiniFloat::E5M2);
minifloat_impl!(F8E5M2FNUZ, MiniFloat::E5M2FNUZ);
minifloat_impl!(F4E2M1, MiniFloat::E2M1);

impl F8E8M0 {
    /// The element's value.
    pub fn to_f64(self) -> f64 {
        e8m0_decode(self.0)
    }

    /// The element for `v` under ONNX's default rounding (see the module).
    pub fn from_f64(v: f64) -> Self {
        F8E8M0(e8m0_encode(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(f: MiniFloat, v: f64) -> f64 {
        f.decode(f.encode(v))
    }

    #[test]
    fn e4m3fn_values_and_overflow() {
        let f = MiniFloat::E4M3FN;
        assert_eq!(f.decode(0x7e), 448.0);
        assert!(f.decode(0x7f).is_nan());
        assert_eq!(f.decode(0x01), 2f64.powi(-9));
        assert_eq!(f.encode(0.478_925_47), 47);
        assert_eq!(round(f, 0.478_925_47), 0.46875);
        // 464 is halfway between 448 and 480 (not representable): ties to even, 448.
        assert_eq!(round(f, 464.0), 448.0);
        assert!(round(f, 465.0).is_nan());
        assert!(round(f, f64::INFINITY).is_nan());
        assert_eq!(f.encode(-1e-7), 0x80);
        assert_eq!(f.encode(-1e6), 0x7f);
    }

    #[test]
    fn fnuz_formats_have_one_nan_and_no_negative_zero() {
        let f = MiniFloat::E4M3FNUZ;
        assert_eq!(f.encode(-1e-7), 0);
        assert_eq!(f.encode(0.478_925_47), 55);
        assert_eq!(f.encode(f64::NAN), 0x80);
        assert_eq!(f.decode(0x7f), 240.0);
        assert_eq!(f.encode(-240.0), 0xff);
        assert_eq!(round(f, -2.0), -2.0);
        assert!(round(f, 250.0).is_nan());
        let g = MiniFloat::E5M2FNUZ;
        assert_eq!(g.encode(0.478_925_47), 60);
        assert_eq!(g.encode(470.0), 99);
        assert_eq!(g.encode(1e6), 0x80);
    }

    #[test]
    fn e5m2_overflows_to_infinity() {
        let f = MiniFloat::E5M2;
        assert_eq!(f.encode(0.478_925_47), 56);
        assert_eq!(f.encode(470.0), 95);
        assert_eq!(f.encode(480.0), 96);
        assert_eq!(f.encode(1e6), 0x7c);
        assert_eq!(f.encode(-1e6), 0xfc);
        assert_eq!(f.encode(f64::NAN), 0x7e);
        assert_eq!(round(f, 57344.0), 57344.0);
        // Halfway between 57344 and 65536 rounds to the even side, which overflows.
        assert_eq!(round(f, 61440.0), f64::INFINITY);
        assert_eq!(round(f, 61439.0), 57344.0);
    }

    #[test]
    fn e2m1_saturates_and_has_no_nan() {
        let f = MiniFloat::E2M1;
        let cases = [
            (0.48, 0.5),
            (0.25, 0.0),
            (1.05, 1.0),
            (-3.5, -4.0),
            (9.0, 6.0),
            (f64::NEG_INFINITY, -6.0),
            (2.5, 2.0),
            (5.0, 4.0),
            (0.75, 1.0),
        ];
        for (v, want) in cases {
            assert_eq!(round(f, v), want, "{v}");
        }
        assert_eq!(f.encode(f64::NAN), 0x08);
        assert_eq!(f.decode(0x08), 0.0);
    }

    #[test]
    fn every_pattern_round_trips() {
        for f in [
            MiniFloat::E4M3FN,
            MiniFloat::E4M3FNUZ,
            MiniFloat::E5M2,
            MiniFloat::E5M2FNUZ,
        ] {
            for b in 0..=255u8 {
                let v = f.decode(b);
                if !v.is_nan() {
                    assert_eq!(f.encode(v), b, "{f:?} {b:#x}");
                }
            }
        }
        for b in 0..16u8 {
            assert_eq!(MiniFloat::E2M1.encode(MiniFloat::E2M1.decode(b)), b);
        }
    }

    #[test]
    fn e8m0_rounds_up() {
        assert_eq!(e8m0_encode(0.0), 0);
        assert_eq!(e8m0_decode(e8m0_encode(0.124)), 0.125);
        assert_eq!(e8m0_decode(e8m0_encode(1.1)), 2.0);
        assert_eq!(e8m0_decode(e8m0_encode(-4.0)), 4.0);
        assert_eq!(e8m0_encode(f64::INFINITY), 0xff);
        assert!(e8m0_decode(0xff).is_nan());
        for b in 0..255u8 {
            assert_eq!(e8m0_encode(e8m0_decode(b)), b);
        }
    }

    #[test]
    fn int_wrapping() {
        assert_eq!(wrap_bits(-9, 4, true), 7);
        assert_eq!(wrap_bits(8, 4, true), -8);
        assert_eq!(wrap_bits(-9, 4, false), 7);
        assert_eq!(wrap_bits(3, 2, true), -1);
        assert_eq!(wrap_bits(-3, 2, false), 1);
    }
}
