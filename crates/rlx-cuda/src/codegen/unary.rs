//! One CUDA C rule per [`UnaryOp`]: the expression computing `op(a)` in the compute type of
//! `dtype`. The match is exhaustive, so a new op makes the compiler ask for its rule here.

use super::dtype::{is_single, literal};
use rlx_ir::{DType, UnaryOp};

/// `name` for double, `namef` for float.
fn math(dtype: DType, name: &str) -> String {
    if is_single(dtype) {
        format!("{name}f")
    } else {
        name.to_string()
    }
}

/// The expression for `op(a)`, or None when `dtype` is not one the op accepts.
pub fn unary(op: UnaryOp, dtype: DType, a: &str) -> Option<String> {
    if !op.accepts(dtype) {
        return None;
    }
    let one = literal(dtype, 1.0);
    let zero = literal(dtype, 0.0);
    let half = literal(dtype, 0.5);
    // irrational constants at the compute type's precision: 16-bit values compute in f32,
    // so 1/sqrt(2) must not be rounded to 16 bits first
    let constant = |v: f64| literal(if is_single(dtype) { DType::F32 } else { dtype }, v);
    let f = |name: &str| format!("{}({a})", math(dtype, name));
    Some(match op {
        UnaryOp::Neg => format!("(-{a})"),
        UnaryOp::Abs if dtype.is_float() => f("fabs"),
        UnaryOp::Abs => format!("({a} < {zero} ? -{a} : {a})"),
        UnaryOp::Exp => f("exp"),
        UnaryOp::Log => f("log"),
        UnaryOp::Sqrt => f("sqrt"),
        UnaryOp::Rsqrt => format!("({one} / {})", f("sqrt")),
        UnaryOp::Reciprocal => format!("({one} / {a})"),
        UnaryOp::Tanh => f("tanh"),
        UnaryOp::Sigmoid => format!("({one} / ({one} + {}(-{a})))", math(dtype, "exp")),
        UnaryOp::Relu => format!("({a} > {zero} ? {a} : {zero})"),
        UnaryOp::Gelu => format!(
            "({half} * {a} * ({one} + {}({a} * {})))",
            // 16-bit results: an erf within 5e-7 of the true one in f32 (far below their
            // rounding) that costs a reciprocal and an exp instead of erff's polynomials
            if matches!(dtype, DType::F16 | DType::BF16) {
                "rlx_erf_fast".to_string()
            } else {
                math(dtype, "erf")
            },
            constant(std::f64::consts::FRAC_1_SQRT_2)
        ),
        UnaryOp::GeluTanh => format!(
            "({half} * {a} * ({one} + {}({} * ({a} + {} * {a} * {a} * {a}))))",
            math(dtype, "tanh"),
            constant((2.0 / std::f64::consts::PI).sqrt()),
            constant(0.044715)
        ),
        UnaryOp::Silu => format!("({a} / ({one} + {}(-{a})))", math(dtype, "exp")),
        UnaryOp::Erf => f("erf"),
        UnaryOp::Sin => f("sin"),
        UnaryOp::Cos => f("cos"),
        UnaryOp::Floor => f("floor"),
        UnaryOp::Ceil => f("ceil"),
        UnaryOp::Round => f("rint"),
        UnaryOp::Sign if dtype.is_float() => {
            format!("({a} > {zero} ? {one} : ({a} < {zero} ? -{one} : {a}))")
        }
        UnaryOp::Sign => format!(
            "(({})(({a} > {zero}) - ({a} < {zero})))",
            super::dtype::compute(dtype)
        ),
        UnaryOp::Not => format!("(!{a})"),
        UnaryOp::BitNot => format!("({})(~{a})", super::dtype::compute(dtype)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_rule_for_what_it_accepts() {
        for op in UnaryOp::ALL {
            for dt in DType::ALL {
                assert_eq!(unary(op, dt, "x").is_some(), op.accepts(dt), "{op:?} {dt}");
            }
        }
    }

    /// The prelude's `rlx_erf_fast`, step for step in f32 (exact division and exp, which
    /// the device's approximate ones track to a few ulp).
    #[allow(clippy::excessive_precision)] // the constants as the prelude spells them
    fn erf_fast(x: f32) -> f32 {
        let ax = x.abs();
        let t = 1.0 / 0.3275911f32.mul_add(ax, 1.0);
        let p = 1.061405429f32
            .mul_add(t, -1.453152027)
            .mul_add(t, 1.421413741)
            .mul_add(t, -0.284496736)
            .mul_add(t, 0.254829592)
            * t;
        (1.0 - p * (-ax * ax).exp()).copysign(x)
    }

    #[test]
    fn the_fast_erf_of_half_gelu_is_within_its_bound() {
        assert!(unary(UnaryOp::Gelu, DType::F16, "x")
            .unwrap()
            .contains("rlx_erf_fast("));
        assert!(unary(UnaryOp::Gelu, DType::F32, "x")
            .unwrap()
            .contains("erff("));
        let mut worst = 0.0f64;
        for i in -8000..=8000 {
            let x = i as f64 / 1000.0;
            worst = worst.max((erf_fast(x as f32) as f64 - rlx_ir::scalar::erf(x)).abs());
        }
        // 1.5e-7 for the formula plus f32 rounding in `1 - p e` (measured 3.9e-7)
        assert!(worst < 5e-7, "max |error| {worst:e}");
    }

    #[test]
    fn float_rules_use_single_precision_math() {
        assert_eq!(unary(UnaryOp::Exp, DType::F16, "x").unwrap(), "expf(x)");
        assert_eq!(unary(UnaryOp::Exp, DType::F64, "x").unwrap(), "exp(x)");
        assert_eq!(
            unary(UnaryOp::Relu, DType::I32, "x").unwrap(),
            "(x > 0 ? x : 0)"
        );
    }

    #[test]
    fn gelu_constants_keep_the_compute_precision() {
        let f32_rule = unary(UnaryOp::Gelu, DType::F32, "x").unwrap();
        for dtype in [DType::F16, DType::BF16] {
            let rule = unary(UnaryOp::Gelu, dtype, "x").unwrap();
            let f32_constant = literal(DType::F32, std::f64::consts::FRAC_1_SQRT_2);
            assert!(rule.contains(&f32_constant), "{dtype:?}: {rule}");
            assert!(f32_rule.contains(&f32_constant));
            let tanh = unary(UnaryOp::GeluTanh, dtype, "x").unwrap();
            assert!(tanh.contains(&literal(DType::F32, 0.044715)), "{tanh}");
        }
    }
}
