//! Reference implementations of the ONNX ops whose output shape depends on input values
//! (`NonZero`, `Compress`, `Unique`, `TopK`, `NonMaxSuppression`), on concrete tensors.
//!
//! The importer folds them with these when their inputs are known at import; a staged run
//! (`crate::stage`) evaluates them with the same functions between compiled stages, so
//! both agree exactly. Each function checks its operands and returns a message naming the
//! operand and its shape or value on bad input; none panics.

mod nms;
mod select;
mod top_k;
mod unique;

pub use nms::{non_max_suppression, NmsParams};
pub use select::{compress, non_zero};
pub use top_k::top_k;
pub use unique::{unique, UniqueResult};

use rlx_ir::{Tensor, TensorData};
use std::cmp::Ordering;

/// Result of a host evaluation: the value, or what is wrong with the operands.
pub type HostResult<T> = Result<T, String>;

/// The slices `idx` of `x` along `axis`, in that order (an exact copy of their elements,
/// whatever the dtype). Callers give indices below `x.shape()[axis]`.
pub fn take(x: &Tensor, axis: usize, idx: &[usize]) -> HostResult<Tensor> {
    let shape = x.shape();
    let Some(&len) = shape.get(axis) else {
        return Err(format!("axis {axis} out of range for shape {shape:?}"));
    };
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let size = x.dtype().size_bytes();
    let bytes = x.data().as_bytes();
    let row = inner * size;
    let mut out = Vec::with_capacity(outer * idx.len() * row);
    for o in 0..outer {
        for &i in idx {
            if i >= len {
                return Err(format!("index {i} out of range for an axis of {len}"));
            }
            let start = (o * len + i) * row;
            out.extend_from_slice(&bytes[start..start + row]);
        }
    }
    let mut dims = shape.to_vec();
    dims[axis] = idx.len();
    let data = TensorData::from_le_bytes(x.dtype(), &out)
        .ok_or_else(|| format!("cannot copy {} elements", x.dtype()))?;
    Tensor::new(dims, data).map_err(|e| e.to_string())
}

/// An i64 tensor from indices.
pub fn indices(shape: &[usize], v: &[usize]) -> HostResult<Tensor> {
    let v: Vec<f64> = v.iter().map(|&i| i as f64).collect();
    Tensor::from_f64(rlx_ir::DType::I64, shape, &v).map_err(|e| e.to_string())
}

/// Orders numbers with NaN after every other value and equal to itself (and `-0 == 0`),
/// a total preorder for sorting and grouping.
pub fn cmp_nan_last(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// A normalized axis: `axis` in `-rank..rank`.
pub fn axis(axis: i64, rank: usize, what: &str) -> HostResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("{what} {axis} out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}
