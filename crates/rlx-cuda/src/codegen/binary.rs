//! One CUDA C rule per [`BinaryOp`]: the expression computing `a op b` for operands of
//! `dtype` (the result is bool for comparisons). Exhaustive, no catch-all arm.

use super::dtype::{compute, is_single, literal};
use rlx_ir::{BinaryOp, DType};

/// The expression for `a op b`, or None when `dtype` is not one the op accepts.
pub fn binary(op: BinaryOp, dtype: DType, a: &str, b: &str) -> Option<String> {
    if !op.accepts(dtype) {
        return None;
    }
    let float = dtype.is_float();
    let suffix = if is_single(dtype) { "f" } else { "" };
    let zero = literal(dtype, 0.0);
    let t = compute(dtype);
    Some(match op {
        BinaryOp::Add => format!("({a} + {b})"),
        BinaryOp::Sub => format!("({a} - {b})"),
        BinaryOp::Mul => format!("({a} * {b})"),
        BinaryOp::Div if float => format!("({a} / {b})"),
        BinaryOp::Div => format!("({b} == {zero} ? {zero} : ({t})({a} / {b}))"),
        BinaryOp::Pow if float => format!("pow{suffix}({a}, {b})"),
        BinaryOp::Pow => format!("({t})(long long)pow((double)({a}), (double)({b}))"),
        BinaryOp::Max if float => format!("rlx_max({a}, {b})"),
        BinaryOp::Max => format!("({a} > {b} ? {a} : {b})"),
        BinaryOp::Min if float => format!("rlx_min({a}, {b})"),
        BinaryOp::Min => format!("({a} < {b} ? {a} : {b})"),
        BinaryOp::Mod if float => format!("rlx_fmod_floor({a}, {b})"),
        BinaryOp::Mod => format!("({t})rlx_imod_floor<long long>({a}, {b})"),
        BinaryOp::FMod if float => format!("fmod{suffix}({a}, {b})"),
        BinaryOp::FMod => format!("({b} == {zero} ? {zero} : ({t})({a} % {b}))"),
        BinaryOp::Eq => format!("({a} == {b})"),
        BinaryOp::Ne => format!("({a} != {b})"),
        BinaryOp::Lt => format!("({a} < {b})"),
        BinaryOp::Le => format!("({a} <= {b})"),
        BinaryOp::Gt => format!("({a} > {b})"),
        BinaryOp::Ge => format!("({a} >= {b})"),
        BinaryOp::And => format!("({a} && {b})"),
        BinaryOp::Or => format!("({a} || {b})"),
        BinaryOp::Xor => format!("({a} != {b})"),
        BinaryOp::BitAnd => format!("({a} & {b})"),
        BinaryOp::BitOr => format!("({a} | {b})"),
        BinaryOp::BitXor => format!("({a} ^ {b})"),
        // Shifts past the width give 0 (or -1 for negative right shifts), as the reference.
        BinaryOp::Shl => format!(
            "(({b}) < 0 || ({b}) >= {w} ? {zero} : ({t})({a} << {b}))",
            w = dtype.bits()
        ),
        BinaryOp::Shr => format!(
            "(({b}) < 0 || ({b}) >= {w} ? ({a} < 0 ? ({t})(-1) : {zero}) : ({t})({a} >> {b}))",
            w = dtype.bits()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_rule_for_what_it_accepts() {
        for op in BinaryOp::ALL {
            for dt in DType::ALL {
                assert_eq!(
                    binary(op, dt, "a", "b").is_some(),
                    op.accepts(dt),
                    "{op:?} {dt}"
                );
            }
        }
    }

    #[test]
    fn integer_division_guards_zero() {
        assert_eq!(
            binary(BinaryOp::Div, DType::I32, "a", "b").unwrap(),
            "(b == 0 ? 0 : (int)(a / b))"
        );
    }
}
