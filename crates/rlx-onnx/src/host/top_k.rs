//! `TopK` on the host, for a `k` known only at run time: the `k` largest (or smallest)
//! elements along an axis and their indices.

use super::{cmp_nan_last, indices, HostResult};
use rlx_ir::{Tensor, TensorData};
use std::cmp::Ordering;

/// `TopK(x, k, axis, largest)`: values and i64 indices, `x`'s shape with `k` along `axis`,
/// always sorted (best first; ties by lower index; NaN ranks above every number, as ONNX
/// Runtime does). `k` must be in `0..=x.shape()[axis]`.
pub fn top_k(x: &Tensor, k: i64, axis: usize, largest: bool) -> HostResult<(Tensor, Tensor)> {
    let shape = x.shape();
    let Some(&len) = shape.get(axis) else {
        return Err(format!(
            "axis {axis} out of range for input shape {shape:?}"
        ));
    };
    if k < 0 || k as usize > len {
        return Err(format!(
            "K = {k} out of range for axis {axis} of input shape {shape:?} (0..={len})"
        ));
    }
    let k = k as usize;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let v = x.to_f64_vec();
    let size = x.dtype().size_bytes();
    let bytes = x.data().as_bytes();
    let mut out_bytes = vec![0u8; outer * k * inner * size];
    let mut out_idx = vec![0usize; outer * k * inner];
    let mut order: Vec<usize> = Vec::with_capacity(len);
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| (o * len + i) * inner + j;
            order.clear();
            order.extend(0..len);
            let by = |a: &usize, b: &usize| {
                let c = cmp_nan_last(v[at(*a)], v[at(*b)]);
                let c = if largest { c.reverse() } else { c };
                match c {
                    Ordering::Equal => a.cmp(b),
                    c => c,
                }
            };
            if k < len && k > 0 {
                order.select_nth_unstable_by(k - 1, by);
            }
            order[..k].sort_by(by);
            for (r, &i) in order[..k].iter().enumerate() {
                let dst = (o * k + r) * inner + j;
                out_idx[dst] = i;
                let src = at(i) * size;
                out_bytes[dst * size..(dst + 1) * size].copy_from_slice(&bytes[src..src + size]);
            }
        }
    }
    let mut dims = shape.to_vec();
    dims[axis] = k;
    let data = TensorData::from_le_bytes(x.dtype(), &out_bytes)
        .ok_or_else(|| format!("cannot copy {} elements", x.dtype()))?;
    let values = Tensor::new(dims.clone(), data).map_err(|e| e.to_string())?;
    Ok((values, indices(&dims, &out_idx)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    #[test]
    fn top_k_largest_smallest_ties_and_nan() {
        let x = Tensor::from_f64(DType::F32, &[5], &[1.0, f64::NAN, 3.0, 3.0, 2.0]).unwrap();
        let (v, i) = top_k(&x, 3, 0, true).unwrap();
        assert!(v.get_f64(0).is_nan());
        assert_eq!(&v.to_f64_vec()[1..], &[3.0, 3.0]);
        assert_eq!(i.to_f64_vec(), vec![1.0, 2.0, 3.0]);
        let (v, i) = top_k(&x, 2, 0, false).unwrap();
        assert_eq!(v.to_f64_vec(), vec![1.0, 2.0]);
        assert_eq!(i.to_f64_vec(), vec![0.0, 4.0]);
        assert!(top_k(&x, 6, 0, true).is_err());
        assert!(top_k(&x, -1, 0, true).is_err());
    }

    #[test]
    fn top_k_along_the_first_axis() {
        let x = Tensor::from_f64(DType::I64, &[3, 2], &[1.0, 9.0, 5.0, 2.0, 3.0, 7.0]).unwrap();
        let (v, i) = top_k(&x, 2, 0, true).unwrap();
        assert_eq!(v.shape(), &[2, 2]);
        assert_eq!(v.to_f64_vec(), vec![5.0, 9.0, 3.0, 7.0]);
        assert_eq!(i.to_f64_vec(), vec![1.0, 0.0, 2.0, 2.0]);
    }
}
