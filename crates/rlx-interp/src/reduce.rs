//! Reductions over axes and index reductions (argmax/argmin).

use super::from_f64;
use super::index::{for_each_index, split_axis, strides};
use rlx_ir::{ArgOp, DType, ReduceOp, Tensor, TensorData};

pub(super) fn reduce(op: ReduceOp, axes: &[usize], x: &Tensor, dtype: DType) -> TensorData {
    let shape = x.shape();
    // The output keeps the non-reduced dims in order; reduced dims contribute nothing to the
    // flat output position whether or not they are kept as size 1.
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let kept_strides = strides(&kept_shape);
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let mut acc = vec![op.identity(); kept_shape.iter().product()];
    let values = x.to_f64_vec();
    for_each_index(shape, |flat, idx| {
        let o: usize = kept
            .iter()
            .zip(&kept_strides)
            .map(|(&d, s)| idx[d] * s)
            .sum();
        acc[o] = op.combine(acc[o], values[flat]);
    });
    from_f64(dtype, acc.into_iter().map(|a| op.finish(a, count)))
}

/// True when `v` should replace `best` in an index reduction: strictly better, or the first
/// NaN (numpy returns the first NaN's position).
pub fn arg_better(op: ArgOp, v: f64, best: f64) -> bool {
    if best.is_nan() {
        return false;
    }
    if v.is_nan() {
        return true;
    }
    match op {
        ArgOp::ArgMax => v > best,
        ArgOp::ArgMin => v < best,
    }
}

pub(super) fn arg_reduce(op: ArgOp, axis: usize, x: &Tensor) -> TensorData {
    let (outer, n, inner) = split_axis(x.shape(), axis);
    let values = x.to_f64_vec();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| values[(o * n + j) * inner + i];
            let mut best = 0;
            for j in 1..n {
                if arg_better(op, at(j), at(best)) {
                    best = j;
                }
            }
            out.push(best as i64);
        }
    }
    TensorData::I64(out.into())
}
