//! How each [`DType`] lives in CUDA C: its storage type in memory, the type arithmetic runs
//! in, and the conversions between them. Half types are stored as raw 16-bit words and
//! converted with PTX `cvt`, so generated code needs no CUDA headers.

use rlx_ir::DType;

/// True for the dtypes this backend has rules for; `caps` leaves ops on any other dtype to
/// legalization, which reports them. The arms below give the others a C type of their
/// width so that every function stays total, but no kernel is generated for them.
pub fn supported(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::F64
            | DType::I8
            | DType::U8
            | DType::I32
            | DType::I64
            | DType::Bool
    )
}

/// The C type of an element in device memory.
pub fn storage(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F16 => "unsigned short",
        DType::BF16 => "unsigned short",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::Bool => "unsigned char",
        DType::I16 => "short",
        DType::U16 => "unsigned short",
        DType::U32 => "unsigned int",
        DType::U64 => "unsigned long long",
        // Not supported (see `supported`): raw bytes.
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => "unsigned char",
    }
}

/// The C type arithmetic runs in. Half types compute in float; integers keep their own type
/// so that every node wraps as the reference does.
pub fn compute(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::Bool => "bool",
        DType::I16 => "short",
        DType::U16 => "unsigned short",
        DType::U32 => "unsigned int",
        DType::U64 => "unsigned long long",
        // Not supported (see `supported`).
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => "float",
        DType::I4 => "signed char",
        DType::U4 | DType::U2 => "unsigned char",
        DType::I2 => "signed char",
    }
}

/// True when the compute type is `float` (the `f`-suffixed math functions apply).
pub fn is_single(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// A stored element (`ptr[idx]` text) turned into its compute value.
pub fn load(dtype: DType, elem: &str) -> String {
    match dtype {
        DType::F16 => format!("rlx_f16_to_f32({elem})"),
        DType::BF16 => format!("rlx_bf16_to_f32({elem})"),
        DType::Bool => format!("({elem} != 0)"),
        _ => elem.to_string(),
    }
}

/// A compute value turned into its stored form.
pub fn store(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F16 => format!("rlx_f32_to_f16({value})"),
        DType::BF16 => format!("rlx_f32_to_bf16({value})"),
        DType::Bool => format!("(unsigned char)({value})"),
        _ => value.to_string(),
    }
}

/// Converts a compute value of `from` into the compute value of `to`, with the reference
/// rounding rule: floats round to the target precision, floats to integers truncate toward
/// zero (saturating, NaN to 0) and wrap, anything to bool is "non-zero".
pub fn cast(from: DType, to: DType, a: &str) -> String {
    match to {
        DType::Bool => format!("({a} != 0)"),
        DType::F32 => format!("(float)({a})"),
        DType::F64 => format!("(double)({a})"),
        DType::F16 => format!("rlx_f16_to_f32(rlx_f32_to_f16((float)({a})))"),
        DType::BF16 => format!("rlx_bf16_to_f32(rlx_f32_to_bf16((float)({a})))"),
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => format!("(float)({a})"),
        DType::I8
        | DType::U8
        | DType::I32
        | DType::I64
        | DType::I16
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => {
            if from.is_float() {
                format!("({})(long long)({a})", compute(to))
            } else {
                format!("({})({a})", compute(to))
            }
        }
    }
}

/// A constant as a literal of `dtype`'s compute type (after the dtype's rounding rule).
pub fn literal(dtype: DType, v: f64) -> String {
    let v = dtype.round(v);
    match dtype {
        DType::F32
        | DType::F16
        | DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => {
            let f = v as f32;
            if f.is_nan() {
                "__int_as_float(0x7fc00000)".into()
            } else if f.is_infinite() {
                let bits = if f > 0.0 { "0x7f800000" } else { "0xff800000" };
                format!("__int_as_float({bits})")
            } else {
                format!("{f:?}f")
            }
        }
        DType::F64 => {
            if v.is_nan() {
                "__longlong_as_double(0x7ff8000000000000LL)".into()
            } else if v.is_infinite() {
                let bits = if v > 0.0 {
                    "0x7ff0000000000000LL"
                } else {
                    "(long long)0xfff0000000000000ULL"
                };
                format!("__longlong_as_double({bits})")
            } else {
                format!("{v:?}")
            }
        }
        DType::Bool => if v != 0.0 { "true" } else { "false" }.into(),
        DType::I64 => {
            let i = v as i64;
            if i == i64::MIN {
                "(-9223372036854775807LL - 1)".into()
            } else {
                format!("{i}LL")
            }
        }
        DType::I32 => {
            let i = v as i64;
            if i == i32::MIN as i64 {
                "(-2147483647 - 1)".into()
            } else {
                format!("{i}")
            }
        }
        DType::I8
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => {
            format!("({})({})", compute(dtype), v as i64)
        }
        DType::U32 => format!("{}u", v as u32),
        DType::U64 => format!("{}ULL", v as u64),
    }
}

/// The smallest and largest compute values of an integer or bool dtype (as literals).
pub fn int_bounds(dtype: DType) -> (String, String) {
    match dtype {
        DType::I8 => ("(signed char)(-128)".into(), "(signed char)127".into()),
        DType::U8 => ("(unsigned char)0".into(), "(unsigned char)255".into()),
        DType::I32 => ("(-2147483647 - 1)".into(), "2147483647".into()),
        DType::I64 => (
            "(-9223372036854775807LL - 1)".into(),
            "9223372036854775807LL".into(),
        ),
        DType::Bool => ("false".into(), "true".into()),
        DType::I16 => ("(short)(-32768)".into(), "(short)32767".into()),
        DType::U16 => ("(unsigned short)0".into(), "(unsigned short)65535".into()),
        DType::U32 => ("0u".into(), "4294967295u".into()),
        DType::U64 => ("0ULL".into(), "18446744073709551615ULL".into()),
        DType::I4 => ("(signed char)(-8)".into(), "(signed char)7".into()),
        DType::U4 => ("(unsigned char)0".into(), "(unsigned char)15".into()),
        DType::I2 => ("(signed char)(-2)".into(), "(signed char)1".into()),
        DType::U2 => ("(unsigned char)0".into(), "(unsigned char)3".into()),
        DType::F32
        | DType::F16
        | DType::BF16
        | DType::F64
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => (
            literal(dtype, f64::NEG_INFINITY),
            literal(dtype, f64::INFINITY),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_and_spell_specials() {
        assert_eq!(literal(DType::F32, 0.5), "0.5f");
        assert_eq!(literal(DType::F32, 1e-5), "1e-5f");
        assert_eq!(
            literal(DType::F32, f64::NEG_INFINITY),
            "__int_as_float(0xff800000)"
        );
        assert_eq!(literal(DType::I32, -2.7), "-2");
        assert_eq!(literal(DType::Bool, 0.3), "true");
        assert_eq!(literal(DType::F64, 2.0), "2.0");
        assert_eq!(literal(DType::F16, 1.0 + 1e-4), "1.0f");
    }

    #[test]
    fn casts_follow_the_rounding_rule() {
        assert_eq!(cast(DType::F32, DType::I32, "a"), "(int)(long long)(a)");
        assert_eq!(cast(DType::I64, DType::I8, "a"), "(signed char)(a)");
        assert_eq!(cast(DType::F32, DType::Bool, "a"), "(a != 0)");
    }
}
