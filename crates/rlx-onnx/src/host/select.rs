//! `NonZero` and `Compress`: the positions of non-zero elements, and the slices a condition
//! selects.

use super::{indices, take, HostResult};
use rlx_ir::Tensor;

/// `NonZero(x)`: an i64 `[rank, n]` tensor of the indices of the `n` non-zero elements
/// (NaN counts as non-zero) in row-major order; a scalar counts as rank 1.
pub fn non_zero(x: &Tensor) -> HostResult<Tensor> {
    let shape: Vec<usize> = if x.shape().is_empty() {
        vec![1]
    } else {
        x.shape().to_vec()
    };
    let hits: Vec<usize> = (0..x.numel()).filter(|&i| x.get_f64(i) != 0.0).collect();
    let n = hits.len();
    let mut v = vec![0usize; shape.len() * n];
    for (k, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for a in (0..shape.len()).rev() {
            v[a * n + k] = rest % shape[a];
            rest /= shape[a];
        }
    }
    indices(&[shape.len(), n], &v)
}

/// `Compress(x, condition, axis)`: the slices of `x` along `axis` (of the flattened `x`
/// when `None`) whose condition element is non-zero; condition elements past the end of
/// the axis are ignored, as ONNX Runtime does.
pub fn compress(x: &Tensor, condition: &Tensor, axis: Option<usize>) -> HostResult<Tensor> {
    let flat;
    let (x, axis) = match axis {
        Some(a) => (x, a),
        None => {
            flat = x
                .clone()
                .reshaped(&[x.numel()])
                .map_err(|e| e.to_string())?;
            (&flat, 0)
        }
    };
    let Some(&len) = x.shape().get(axis) else {
        return Err(format!(
            "axis {axis} out of range for input shape {:?}",
            x.shape()
        ));
    };
    let sel: Vec<usize> = (0..condition.numel().min(len))
        .filter(|&i| condition.get_f64(i) != 0.0)
        .collect();
    take(x, axis, &sel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn t(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::from_f64(dtype, shape, v).unwrap()
    }

    #[test]
    fn non_zero_lists_indices_by_dimension() {
        let x = t(DType::F32, &[2, 3], &[0.0, 1.0, 0.0, f64::NAN, 0.0, 2.0]);
        let y = non_zero(&x).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_f64_vec(), vec![0.0, 1.0, 1.0, 1.0, 0.0, 2.0]);
        let s = non_zero(&Tensor::scalar(DType::F32, 0.0)).unwrap();
        assert_eq!(s.shape(), &[1, 0]);
    }

    #[test]
    fn compress_selects_slices_and_ignores_extra_condition() {
        let x = t(DType::I64, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let c = t(DType::Bool, &[4], &[1.0, 0.0, 1.0, 1.0]);
        let y = compress(&x, &c, Some(0)).unwrap();
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_f64_vec(), vec![1.0, 2.0, 5.0, 6.0]);
        let y = compress(&x, &c, None).unwrap();
        assert_eq!(y.to_f64_vec(), vec![1.0, 3.0, 4.0]);
    }
}
