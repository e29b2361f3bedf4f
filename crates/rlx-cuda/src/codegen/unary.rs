//! One CUDA C rule per [`UnaryOp`]: the expression computing `op(a)` in the compute type of
//! `dtype`. The match is exhaustive, so a new op makes the compiler ask for its rule here.

use super::dtype::{is_single, literal};
use rlx_ir::{Composite, DType, UnaryOp};

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
        UnaryOp::Composite(c) => return composite(c, dtype, a),
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

/// CUDA's native forms of composites. A composite without one is None here, so
/// [`crate::caps::supports`] declines it and legalization expands it into primitives.
fn composite(c: Composite, dtype: DType, a: &str) -> Option<String> {
    let one = literal(dtype, 1.0);
    let half = literal(dtype, 0.5);
    // irrational constants at the compute type's precision: 16-bit values compute in f32,
    // so 1/sqrt(2) must not be rounded to 16 bits first
    let constant = |v: f64| literal(if is_single(dtype) { DType::F32 } else { dtype }, v);
    Some(match c {
        // 16-bit results: the prelude's GELU within 6e-7 in f32 (far below their rounding),
        // a reciprocal and an exp2 instead of erff's polynomials
        Composite::Gelu if matches!(dtype, DType::F16 | DType::BF16) => {
            format!("rlx_gelu_fast({a})")
        }
        Composite::Gelu => format!(
            "({half} * {a} * ({one} + {}({a} * {})))",
            math(dtype, "erf"),
            constant(std::f64::consts::FRAC_1_SQRT_2)
        ),
        Composite::GeluTanh => format!(
            "({half} * {a} * ({one} + {}({} * ({a} + {} * {a} * {a} * {a}))))",
            math(dtype, "tanh"),
            constant((2.0 / std::f64::consts::PI).sqrt()),
            constant(0.044715)
        ),
        Composite::Silu => format!("({a} / ({one} + {}(-{a})))", math(dtype, "exp")),
        // No native form: legalization writes the expansion of `rlx_ir::composite` instead.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_rule_for_what_it_accepts() {
        for op in UnaryOp::ALL {
            let expanded =
                matches!(op, UnaryOp::Composite(c) if composite(c, DType::F32, "x").is_none());
            for dt in DType::ALL {
                let want = op.accepts(dt) && !expanded;
                assert_eq!(unary(op, dt, "x").is_some(), want, "{op:?} {dt}");
            }
        }
    }

    /// The prelude's `rlx_gelu_fast`, step for step in f32 (exact reciprocal and exp2, which
    /// the device's approximate ones track to a few ulp).
    #[allow(clippy::excessive_precision)] // the constants as the prelude spells them
    fn gelu_fast(x: f32) -> f32 {
        let ax = x.abs();
        let t = 1.0 / 0.23164189f32.mul_add(ax, 1.0);
        let p = 0.5307027145f32
            .mul_add(t, -0.7265760135)
            .mul_add(t, 0.7107068705)
            .mul_add(t, -0.142248368)
            .mul_add(t, 0.127414796)
            * t;
        let e = (ax * -0.72134752 * ax).exp2();
        (-ax.min(3.0e38)).mul_add(p * e, x.max(0.0))
    }

    #[test]
    fn the_fast_gelu_of_half_results_is_within_its_bound() {
        assert_eq!(
            unary(UnaryOp::GELU, DType::F16, "x").unwrap(),
            "rlx_gelu_fast(x)"
        );
        assert!(unary(UnaryOp::GELU, DType::F32, "x")
            .unwrap()
            .contains("erff("));
        let mut worst = 0.0f64;
        for i in -10000..=10000 {
            let x = i as f64 / 1000.0;
            let exact = 0.5 * x * (1.0 + rlx_ir::scalar::erf(x * std::f64::consts::FRAC_1_SQRT_2));
            worst = worst.max((gelu_fast(x as f32) as f64 - exact).abs());
        }
        // the formula's 1.5e-7 on erf, times |x| / 2, plus f32 rounding (measured 5.2e-7;
        // the erf form it replaced: 4.6e-7; an f16 result near 1 rounds by up to 4.9e-4)
        assert!(worst < 1e-6, "max |error| {worst:e}");
        assert_eq!(gelu_fast(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu_fast(f32::NEG_INFINITY), 0.0);
        assert!(gelu_fast(f32::NAN).is_nan());
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
        let f32_rule = unary(UnaryOp::GELU, DType::F32, "x").unwrap();
        for dtype in [DType::F16, DType::BF16] {
            let f32_constant = literal(DType::F32, std::f64::consts::FRAC_1_SQRT_2);
            assert!(f32_rule.contains(&f32_constant));
            let tanh = unary(UnaryOp::GELU_TANH, dtype, "x").unwrap();
            assert!(tanh.contains(&literal(DType::F32, 0.044715)), "{tanh}");
        }
    }
}
