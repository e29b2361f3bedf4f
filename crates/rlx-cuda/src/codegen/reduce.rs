//! One CUDA C rule per [`ReduceOp`]: the accumulator's identity, how a value folds in, and
//! how the accumulator becomes the result.

use super::dtype::{compute, int_bounds, literal};
use rlx_ir::{DType, ReduceOp};

/// The identity the accumulator starts from, as a literal of `dtype`'s compute type.
pub fn identity(op: ReduceOp, dtype: DType) -> String {
    let (lo, hi) = int_bounds(dtype);
    match op {
        ReduceOp::Sum | ReduceOp::Mean => literal(dtype, 0.0),
        ReduceOp::Prod => literal(dtype, 1.0),
        ReduceOp::Max => lo,
        ReduceOp::Min => hi,
    }
}

/// The expression folding `v` into `acc` (NaN propagates through max and min).
pub fn combine(op: ReduceOp, dtype: DType, acc: &str, v: &str) -> String {
    let float = dtype.is_float();
    match op {
        ReduceOp::Sum | ReduceOp::Mean => format!("({acc} + {v})"),
        ReduceOp::Prod => format!("({acc} * {v})"),
        ReduceOp::Max if float => format!("rlx_max({acc}, {v})"),
        ReduceOp::Max => format!("({acc} > {v} ? {acc} : {v})"),
        ReduceOp::Min if float => format!("rlx_min({acc}, {v})"),
        ReduceOp::Min => format!("({acc} < {v} ? {acc} : {v})"),
    }
}

/// The expression turning the accumulator into the result after `count` values.
pub fn finish(op: ReduceOp, dtype: DType, acc: &str, count: usize) -> String {
    match op {
        ReduceOp::Mean if dtype.is_float() => format!("({acc} / {})", literal(dtype, count as f64)),
        ReduceOp::Mean => format!("({})((long long)({acc}) / {count}LL)", compute(dtype)),
        ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod => acc.to_string(),
    }
}
