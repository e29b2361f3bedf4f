//! Element types and their rounding rules.

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
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for the integer types (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::U8 | DType::I32 | DType::I64)
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
        }
    }

    /// Rounds an exact value to what this dtype can hold: float rounding, integer truncation
    /// with wrap-around, and bool as "non-zero". This is the single conversion rule shared by
    /// casts, constant folding and the validation interpreter.
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
}
