//! Element types and their rounding rules.

use crate::narrow::{
    wrap_bits, MiniFloat, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0,
};
use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit IEEE float.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Boolean (one byte per element).
    Bool,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// 8-bit float, 4 exponent and 3 mantissa bits, NaN but no infinity.
    F8E4M3FN,
    /// 8-bit float, 4 exponent and 3 mantissa bits, one NaN, no infinity, no -0.
    F8E4M3FNUZ,
    /// 8-bit float, 5 exponent and 2 mantissa bits, IEEE-style infinities and NaNs.
    F8E5M2,
    /// 8-bit float, 5 exponent and 2 mantissa bits, one NaN, no infinity, no -0.
    F8E5M2FNUZ,
    /// 8-bit unsigned power of two (a block scale), NaN at 0xff.
    F8E8M0,
    /// 4-bit float, 2 exponent and 1 mantissa bit (stored one per byte).
    F4E2M1,
    /// Signed 4-bit integer (stored one per byte).
    I4,
    /// Unsigned 4-bit integer (stored one per byte).
    U4,
    /// Signed 2-bit integer (stored one per byte).
    I2,
    /// Unsigned 2-bit integer (stored one per byte).
    U2,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 23] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
    ];

    /// Bytes per element in memory (the narrow types take one byte each).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0
            | DType::F4E2M1
            | DType::I4
            | DType::U4
            | DType::I2
            | DType::U2 => 1,
        }
    }

    /// Bits of information per element (what packed file formats store).
    pub fn bits(self) -> usize {
        match self {
            DType::F4E2M1 | DType::I4 | DType::U4 => 4,
            DType::I2 | DType::U2 => 2,
            d => d.size_bytes() * 8,
        }
    }

    /// True for the floating-point types (the narrow floats included).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32
                | DType::F16
                | DType::BF16
                | DType::F64
                | DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F8E8M0
                | DType::F4E2M1
        )
    }

    /// True for the integer types (not bool; the 4- and 2-bit ones included).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
                | DType::I4
                | DType::U4
                | DType::I2
                | DType::U2
        )
    }

    /// True for the unsigned integer types.
    pub fn is_unsigned(self) -> bool {
        matches!(
            self,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::U4 | DType::U2
        )
    }

    /// True for the storage-only narrow types (8-bit and smaller floats, 4- and 2-bit
    /// integers): values are cast in and out, moved and selected, never computed on.
    pub fn is_narrow(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F8E8M0
                | DType::F4E2M1
                | DType::I4
                | DType::U4
                | DType::I2
                | DType::U2
        )
    }

    /// The largest finite value of a narrow float format (the clamp of a saturating cast).
    pub fn max_finite(self) -> Option<f64> {
        match self {
            DType::F8E4M3FN => Some(MiniFloat::E4M3FN.max()),
            DType::F8E4M3FNUZ => Some(MiniFloat::E4M3FNUZ.max()),
            DType::F8E5M2 => Some(MiniFloat::E5M2.max()),
            DType::F8E5M2FNUZ => Some(MiniFloat::E5M2FNUZ.max()),
            DType::F4E2M1 => Some(MiniFloat::E2M1.max()),
            DType::F8E8M0 => Some(2f64.powi(127)),
            DType::F32 => Some(f32::MAX as f64),
            DType::F16 => Some(half::f16::MAX.to_f64()),
            DType::BF16 => Some(half::bf16::MAX.to_f64()),
            DType::F64 => Some(f64::MAX),
            _ => None,
        }
    }

    /// Lowercase name, as in dumps and errors.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
        }
    }

    /// Rounds an exact value to what this dtype can hold: float rounding, integer truncation
    /// with wrap-around, and bool as "non-zero". This is the single conversion rule shared by
    /// casts, constant folding and the validation interpreter. The narrow floats round as
    /// `ml_dtypes` does (see [`crate::narrow`]): not saturating, except `f8e8m0` (ONNX's
    /// default `round_mode="up"`, saturating) and `f4e2m1` (no infinity to overflow to).
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::F64 => v,
            DType::F32 => v as f32 as f64,
            DType::F16 => half::f16::from_f64(v).to_f64(),
            DType::BF16 => half::bf16::from_f64(v).to_f64(),
            DType::Bool => {
                if v != 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            DType::I8 => wrap_int(v) as i8 as f64,
            DType::U8 => wrap_int(v) as u8 as f64,
            DType::I32 => wrap_int(v) as i32 as f64,
            DType::I64 => wrap_int(v) as f64,
            DType::I16 => wrap_int(v) as i16 as f64,
            DType::U16 => wrap_int(v) as u16 as f64,
            DType::U32 => wrap_int(v) as u32 as f64,
            DType::U64 => {
                if v >= 0.0 {
                    v.trunc() as u64 as f64
                } else {
                    wrap_int(v) as u64 as f64
                }
            }
            DType::I4 => wrap_bits(wrap_int(v), 4, true) as f64,
            DType::U4 => wrap_bits(wrap_int(v), 4, false) as f64,
            DType::I2 => wrap_bits(wrap_int(v), 2, true) as f64,
            DType::U2 => wrap_bits(wrap_int(v), 2, false) as f64,
            DType::F8E4M3FN => F8E4M3FN::from_f64(v).to_f64(),
            DType::F8E4M3FNUZ => F8E4M3FNUZ::from_f64(v).to_f64(),
            DType::F8E5M2 => F8E5M2::from_f64(v).to_f64(),
            DType::F8E5M2FNUZ => F8E5M2FNUZ::from_f64(v).to_f64(),
            DType::F8E8M0 => F8E8M0::from_f64(v).to_f64(),
            DType::F4E2M1 => F4E2M1::from_f64(v).to_f64(),
        }
    }
}

/// Truncates toward zero; NaN becomes 0 and infinities saturate, as Rust's `as` does.
fn wrap_int(v: f64) -> i64 {
    v.trunc() as i64
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_rules() {
        assert_eq!(DType::I32.round(-2.7), -2.0);
        assert_eq!(DType::U8.round(257.0), 1.0);
        assert_eq!(DType::Bool.round(-0.5), 1.0);
        assert_eq!(DType::F16.round(1.0 + 1e-4), 1.0);
        assert_eq!(DType::F32.round(0.1), 0.1f32 as f64);
        assert_eq!("bf16".parse::<DType>().unwrap(), DType::BF16);
    }

    #[test]
    fn new_integer_and_narrow_rules() {
        assert_eq!(DType::I16.round(40000.0), -25536.0);
        assert_eq!(DType::U16.round(-1.0), 65535.0);
        assert_eq!(DType::U32.round(-1.0), 4294967295.0);
        assert_eq!(DType::U64.round(-1.0), u64::MAX as f64);
        assert_eq!(
            DType::U64.round(2f64.powi(63) + 4096.0),
            2f64.powi(63) + 4096.0
        );
        assert_eq!(DType::I4.round(-9.0), 7.0);
        assert_eq!(DType::U4.round(-9.0), 7.0);
        assert_eq!(DType::I2.round(2.0), -2.0);
        assert_eq!(DType::U2.round(-3.0), 1.0);
        assert_eq!(DType::F8E4M3FN.round(0.478_925_47), 0.46875);
        assert!(DType::F8E4M3FN.round(1e6).is_nan());
        assert_eq!(DType::F8E5M2.round(1e6), f64::INFINITY);
        assert_eq!(DType::F4E2M1.round(1e6), 6.0);
        assert_eq!(DType::F8E8M0.round(1.1), 2.0);
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
            assert!(d.bits() <= d.size_bytes() * 8);
            assert!(!(d.is_int() && d.is_float()));
        }
    }
}
