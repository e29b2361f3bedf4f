//! How each [`DType`] lives in WGSL and one rule per scalar op.
//!
//! Storage: f32 and i32 tensors bind as `array<f32>`/`array<i32>` (and f16 as `array<f16>`
//! where the adapter has SHADER_F16, through [`super::Kb`]); every other dtype binds as raw
//! `array<u32>` words: f16 and bf16 two per word, i8, u8 and bool four per word, i64
//! as two words (low, high). Sub-word elements are stored with `atomicAnd`/`atomicOr` on the
//! word, so neighbouring threads never clobber each other. Arithmetic runs in f32 (floats),
//! i32 (integers) or bool. i64 is emulated in 32 bits (values must fit in i32); i8/u8 wrap
//! after every node as the reference does. f64 is not supported (legalization reports it).

use rlx_ir::{BinaryOp, Composite, DType, ReduceOp, UnaryOp};

/// True for the dtypes this backend stores (not f64, nor the 16-bit, unsigned 32/64-bit and
/// narrow types, which have no rules here; `plan` refuses them with an error naming them).
pub fn storable(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::I8
            | DType::U8
            | DType::I32
            | DType::I64
            | DType::Bool
    )
}

/// The WGSL type arithmetic runs in.
pub fn compute(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => "f32",
        DType::I32 | DType::I64 | DType::I8 | DType::U8 => "i32",
        DType::Bool => "bool",
        // Not storable (see `storable`); the arms keep every function total.
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => "f32",
        DType::I16
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => "i32",
    }
}

/// The element type of a binding holding `dtype`.
pub fn binding_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::I32 => "i32",
        _ => "u32",
    }
}

/// The WGSL type of a binding element when the dtype is its own WGSL type (f32, i32, and
/// f16 on adapters with SHADER_F16); see [`super::Kb::native`].
pub fn native_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "f16",
        other => binding_type(other),
    }
}

/// True when elements are narrower than a 32-bit word (stores need atomics).
pub fn sub_word(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F16 | DType::BF16 | DType::I8 | DType::U8 | DType::Bool
    )
}

/// Element `idx` (an i32 expression) of binding `b`, as its compute value.
pub fn load(dtype: DType, b: &str, idx: &str) -> String {
    match dtype {
        DType::F32 | DType::I32 | DType::F64 => format!("{b}[{idx}]"),
        DType::F16 => format!("rlx_f16_at({b}[({idx}) >> 1u], {idx})"),
        DType::BF16 => format!("rlx_bf16_at({b}[({idx}) >> 1u], {idx})"),
        DType::U8 => format!("rlx_u8_at({b}[({idx}) >> 2u], {idx})"),
        DType::I8 => format!("rlx_i8_at({b}[({idx}) >> 2u], {idx})"),
        DType::Bool => format!("(rlx_u8_at({b}[({idx}) >> 2u], {idx}) != 0)"),
        DType::I64 => format!("bitcast<i32>({b}[({idx}) * 2])"),
        // Not storable (see `storable`): never generated.
        _ => format!("{b}[{idx}]"),
    }
}

/// A statement storing compute value `v` as element `idx` of binding `b` (atomic words for
/// sub-word dtypes).
pub fn store(dtype: DType, b: &str, idx: &str, v: &str) -> String {
    let merge = |per_word: u32, bits: String| {
        let (shift, width_mask, lane) = match per_word {
            2 => ("1u", "0xffffu", "16u"),
            _ => ("2u", "0xffu", "8u"),
        };
        format!(
            "{{ let rlx_i = {idx}; let rlx_w = rlx_i >> {shift}; let rlx_s = u32(rlx_i & {}) * {lane}; \
             atomicAnd(&{b}[rlx_w], ~({width_mask} << rlx_s)); atomicOr(&{b}[rlx_w], (({bits}) & {width_mask}) << rlx_s); }}\n",
            per_word - 1
        )
    };
    match dtype {
        DType::F32 | DType::I32 | DType::F64 => format!("{b}[{idx}] = {v};\n"),
        DType::F16 => merge(2, format!("rlx_f16_bits({v})")),
        DType::BF16 => merge(2, format!("rlx_bf16_bits({v})")),
        DType::U8 | DType::I8 => merge(4, format!("bitcast<u32>({v})")),
        DType::Bool => merge(4, format!("select(0u, 1u, {v})")),
        DType::I64 => format!(
            "{{ let rlx_i = {idx}; let rlx_v = {v}; {b}[rlx_i * 2] = bitcast<u32>(rlx_v); \
             {b}[rlx_i * 2 + 1] = select(0u, 0xffffffffu, rlx_v < 0); }}\n"
        ),
        // Not storable (see `storable`): never generated.
        _ => format!("{b}[{idx}] = {v};\n"),
    }
}

/// Wraps an integer compute value to the range of `dtype` (i8, u8), as the reference does
/// after every node.
pub fn wrap(dtype: DType, v: String) -> String {
    match dtype {
        DType::I8 => format!("(({v} << 24u) >> 24u)"),
        DType::U8 => format!("({v} & 255)"),
        _ => v,
    }
}

/// A constant as a WGSL expression of `dtype`'s compute type (after the rounding rule).
pub fn literal(dtype: DType, v: f64) -> String {
    let v = dtype.round(v);
    match compute(dtype) {
        "f32" => {
            let f = v as f32;
            if f.is_nan() {
                "rlx_nan()".into()
            } else if f.is_infinite() {
                if f > 0.0 {
                    "rlx_inf()".into()
                } else {
                    "(-rlx_inf())".into()
                }
            } else if f == 0.0 || f.is_normal() {
                format!("f32({f:?})")
            } else {
                format!("bitcast<f32>({}u)", f.to_bits())
            }
        }
        "i32" => {
            let i = v as i64;
            let i = match dtype {
                DType::I8 => i as i8 as i64,
                DType::U8 => i as u8 as i64,
                _ => i as i32 as i64,
            };
            if i == i32::MIN as i64 {
                "(-2147483647 - 1)".into()
            } else {
                format!("i32({i})")
            }
        }
        _ => if v != 0.0 { "true" } else { "false" }.into(),
    }
}

/// Converts a compute value of `from` into the compute value of `to` with the reference
/// rounding rule.
pub fn cast(from: DType, to: DType, a: &str) -> String {
    let cf = compute(from);
    let as_f32 = || match cf {
        "f32" => a.to_string(),
        "i32" => format!("f32({a})"),
        _ => format!("select(0.0, 1.0, {a})"),
    };
    match to {
        DType::Bool => match cf {
            "f32" => format!("({a} != 0.0)"),
            "i32" => format!("({a} != 0)"),
            _ => a.to_string(),
        },
        DType::F32
        | DType::F64
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => as_f32(),
        DType::F16 => format!("rlx_f16_round({})", as_f32()),
        DType::BF16 => format!("rlx_bf16_round({})", as_f32()),
        DType::I32
        | DType::I64
        | DType::I8
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => {
            let v = match cf {
                "f32" => format!("rlx_f2i({a})"),
                "i32" => a.to_string(),
                _ => format!("select(0, 1, {a})"),
            };
            wrap(to, v)
        }
    }
}

/// The expression for `op(a)`, or None when `dtype` is not one the op accepts here.
pub fn unary(op: UnaryOp, dtype: DType, a: &str) -> Option<String> {
    if !op.accepts(dtype) || !storable(dtype) {
        return None;
    }
    let float = dtype.is_float();
    Some(wrap(
        dtype,
        match op {
            UnaryOp::Neg => format!("(-{a})"),
            UnaryOp::Abs => format!("abs({a})"),
            UnaryOp::Exp => format!("exp({a})"),
            UnaryOp::Log => format!("log({a})"),
            UnaryOp::Sqrt => format!("sqrt({a})"),
            UnaryOp::Rsqrt => format!("(1.0 / sqrt({a}))"),
            UnaryOp::Reciprocal => format!("(1.0 / {a})"),
            UnaryOp::Tanh => format!("rlx_tanh({a})"),
            UnaryOp::Sigmoid => format!("(1.0 / (1.0 + exp(-{a})))"),
            UnaryOp::Relu if float => format!("select(0.0, {a}, {a} > 0.0)"),
            UnaryOp::Relu => format!("select(0, {a}, {a} > 0)"),
            UnaryOp::Composite(c) => composite(c, a)?,
            UnaryOp::Erf => format!("rlx_erf({a})"),
            UnaryOp::Sin => format!("sin({a})"),
            UnaryOp::Cos => format!("cos({a})"),
            UnaryOp::Floor => format!("floor({a})"),
            UnaryOp::Ceil => format!("ceil({a})"),
            UnaryOp::Round => format!("round({a})"),
            UnaryOp::Sign if float => {
                format!("select(select({a}, -1.0, {a} < 0.0), 1.0, {a} > 0.0)")
            }
            UnaryOp::Sign => format!("select(select(0, -1, {a} < 0), 1, {a} > 0)"),
            UnaryOp::Not => format!("(!{a})"),
            UnaryOp::BitNot => format!("(~{a})"),
        },
    ))
}

/// False for a composite without a native form here, which legalization expands.
pub fn native(op: UnaryOp) -> bool {
    match op {
        UnaryOp::Composite(c) => composite(c, "x").is_some(),
        _ => true,
    }
}

/// WGSL's native forms of composites. A composite without one is None here, so the
/// backend's `supports` declines it and legalization expands it into primitives.
fn composite(c: Composite, a: &str) -> Option<String> {
    Some(match c {
        Composite::Gelu => format!("(0.5 * {a} * (1.0 + rlx_erf({a} * 0.70710678118654752)))"),
        Composite::GeluTanh => format!(
            "(0.5 * {a} * (1.0 + rlx_tanh(0.79788456080286536 * ({a} + 0.044715 * {a} * {a} * {a}))))"
        ),
        Composite::Silu => format!("({a} / (1.0 + exp(-{a})))"),
        // No native form: legalization writes the expansion of `rlx_ir::composite` instead.
        _ => return None,
    })
}

/// The expression for `a op b` for operands of `dtype`, or None when not accepted here.
pub fn binary(op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String> {
    if !op.accepts(dtype) || !storable(dtype) {
        return None;
    }
    let float = dtype.is_float();
    let ord = |o: &str| {
        if dtype == DType::Bool {
            format!("(i32({a}) {o} i32({b}))")
        } else {
            format!("({a} {o} {b})")
        }
    };
    let w = |s: String| wrap(dtype, s);
    Some(match op {
        BinaryOp::Add => w(format!("({a} + {b})")),
        BinaryOp::Sub => w(format!("({a} - {b})")),
        BinaryOp::Mul => w(format!("({a} * {b})")),
        BinaryOp::Div if float => format!("({a} / {b})"),
        BinaryOp::Div => w(format!("select({a} / {b}, 0, {b} == 0)")),
        BinaryOp::Pow if float => format!("rlx_pow({a}, {b})"),
        BinaryOp::Pow => w(format!("rlx_f2i(rlx_pow(f32({a}), f32({b})))")),
        BinaryOp::Max if float => format!("rlx_max({a}, {b})"),
        BinaryOp::Max => format!("max({a}, {b})"),
        BinaryOp::Min if float => format!("rlx_min({a}, {b})"),
        BinaryOp::Min => format!("min({a}, {b})"),
        BinaryOp::Mod if float => format!("rlx_fmod_floor({a}, {b})"),
        BinaryOp::Mod => w(format!("rlx_imod_floor({a}, {b})")),
        BinaryOp::FMod if float => format!("rlx_fmod({a}, {b})"),
        BinaryOp::FMod => w(format!("rlx_imod_trunc({a}, {b})")),
        BinaryOp::Eq => format!("({a} == {b})"),
        BinaryOp::Ne => format!("({a} != {b})"),
        BinaryOp::Lt => ord("<"),
        BinaryOp::Le => ord("<="),
        BinaryOp::Gt => ord(">"),
        BinaryOp::Ge => ord(">="),
        BinaryOp::And => format!("({a} && {b})"),
        BinaryOp::Or => format!("({a} || {b})"),
        BinaryOp::Xor => format!("({a} != {b})"),
        BinaryOp::BitAnd => w(format!("({a} & {b})")),
        BinaryOp::BitOr => w(format!("({a} | {b})")),
        BinaryOp::BitXor => w(format!("({a} ^ {b})")),
        // Shifts past the width give 0 (or -1 for negative right shifts), as the reference.
        BinaryOp::Shl => w(format!(
            "select({a} << u32({b}), 0, {b} < 0 || {b} >= {})",
            dtype.bits()
        )),
        BinaryOp::Shr => w(format!(
            "select({a} >> u32({b}), select(0, -1, {a} < 0), {b} < 0 || {b} >= {})",
            dtype.bits()
        )),
    })
}

/// The smallest and largest compute values of `dtype` (as literals).
fn bounds(dtype: DType) -> (String, String) {
    match dtype {
        DType::I8 => ("i32(-128)".into(), "i32(127)".into()),
        DType::U8 => ("i32(0)".into(), "i32(255)".into()),
        DType::I32 | DType::I64 => ("(-2147483647 - 1)".into(), "i32(2147483647)".into()),
        DType::Bool => ("false".into(), "true".into()),
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => {
            ("(-rlx_inf())".into(), "rlx_inf()".into())
        }
        // Not storable (see `storable`): never generated.
        _ => ("(-2147483647 - 1)".into(), "i32(2147483647)".into()),
    }
}

/// The identity a reduction's accumulator starts from.
pub fn identity(op: ReduceOp, dtype: DType) -> String {
    let (lo, hi) = bounds(dtype);
    match op {
        ReduceOp::Sum | ReduceOp::Mean => literal(dtype, 0.0),
        ReduceOp::Prod => literal(dtype, 1.0),
        ReduceOp::Max => lo,
        ReduceOp::Min => hi,
    }
}

/// The expression folding `v` into `acc`.
pub fn combine(op: ReduceOp, dtype: DType, acc: &str, v: &str) -> String {
    let float = dtype.is_float();
    let w = |s: String| wrap(dtype, s);
    match (op, compute(dtype)) {
        (ReduceOp::Sum | ReduceOp::Mean, "bool") => format!("({acc} || {v})"),
        (ReduceOp::Prod, "bool") => format!("({acc} && {v})"),
        (ReduceOp::Max, "bool") => format!("({acc} || {v})"),
        (ReduceOp::Min, "bool") => format!("({acc} && {v})"),
        (ReduceOp::Sum | ReduceOp::Mean, _) => w(format!("({acc} + {v})")),
        (ReduceOp::Prod, _) => w(format!("({acc} * {v})")),
        (ReduceOp::Max, _) if float => format!("rlx_max({acc}, {v})"),
        (ReduceOp::Max, _) => format!("max({acc}, {v})"),
        (ReduceOp::Min, _) if float => format!("rlx_min({acc}, {v})"),
        (ReduceOp::Min, _) => format!("min({acc}, {v})"),
    }
}

/// The expression turning the accumulator into the result after `count` values.
pub fn finish(op: ReduceOp, dtype: DType, acc: &str, count: usize) -> String {
    match op {
        ReduceOp::Mean if dtype.is_float() => format!("({acc} / {})", literal(dtype, count as f64)),
        ReduceOp::Mean if compute(dtype) == "i32" => format!("({acc} / {count})"),
        _ => acc.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_op_has_a_rule() {
        for dt in DType::ALL {
            for op in UnaryOp::ALL {
                let want = op.accepts(dt) && storable(dt) && native(op);
                assert_eq!(unary(op, dt, "x").is_some(), want, "{op:?} {dt}");
            }
            for op in BinaryOp::ALL {
                let want = op.accepts(dt) && storable(dt);
                assert_eq!(binary(op, dt, "a", "b").is_some(), want, "{op:?} {dt}");
            }
        }
    }

    #[test]
    fn literals_spell_specials_at_run_time() {
        assert_eq!(literal(DType::F32, 0.5), "f32(0.5)");
        assert_eq!(literal(DType::F32, f64::NEG_INFINITY), "(-rlx_inf())");
        assert_eq!(literal(DType::I32, -2.7), "i32(-2)");
        assert_eq!(literal(DType::Bool, 0.3), "true");
    }
}
