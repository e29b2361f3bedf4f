//! Normalizations: softmax, log-softmax, layer norm and RMS norm.

use super::from_f64;
use super::index::{broadcast_map, split_axis};
use rlx_ir::{Tensor, TensorData};

/// Softmax (or log-softmax) along `axis`, stable: the row max is subtracted first.
pub(super) fn softmax(axis: usize, x: &Tensor, log: bool) -> TensorData {
    let (outer, n, inner) = split_axis(x.shape(), axis);
    let v = x.to_f64_vec();
    let mut out = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let pos = |j: usize| (o * n + j) * inner + i;
            let max = (0..n).map(|j| v[pos(j)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..n).map(|j| (v[pos(j)] - max).exp()).sum();
            for j in 0..n {
                out[pos(j)] = if log {
                    v[pos(j)] - max - sum.ln()
                } else {
                    (v[pos(j)] - max).exp() / sum
                };
            }
        }
    }
    from_f64(x.dtype(), out)
}

/// Layer norm over dims `axis..` (biased variance, eps inside the square root) when `bias`
/// is given; RMS norm (`x / sqrt(mean(x^2) + eps) * scale`) when it is not.
pub(super) fn layer_norm(
    axis: usize,
    eps: f64,
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
) -> TensorData {
    let norm_shape = &x.shape()[axis..];
    let len: usize = norm_shape.iter().product();
    let v = x.to_f64_vec();
    let s = scale.to_f64_vec();
    let sm = broadcast_map(scale.shape(), norm_shape);
    let b = bias.map(|b| (b.to_f64_vec(), broadcast_map(b.shape(), norm_shape)));
    let mut out = Vec::with_capacity(v.len());
    for row in v.chunks(len.max(1)) {
        let n = row.len() as f64;
        match &b {
            Some((bv, bm)) => {
                let mean = row.iter().sum::<f64>() / n;
                let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                let inv = 1.0 / (var + eps).sqrt();
                for (j, x) in row.iter().enumerate() {
                    out.push((x - mean) * inv * s[sm[j]] + bv[bm[j]]);
                }
            }
            None => {
                let ms = row.iter().map(|x| x * x).sum::<f64>() / n;
                let inv = 1.0 / (ms + eps).sqrt();
                for (j, x) in row.iter().enumerate() {
                    out.push(x * inv * s[sm[j]]);
                }
            }
        }
    }
    from_f64(x.dtype(), out)
}
