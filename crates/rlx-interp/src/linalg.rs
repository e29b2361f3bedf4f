//! Matrix products: batched matmul and scaled dot-product attention.

use super::from_f64;
use super::index::{broadcast_map, for_each_index};
use rlx_ir::{AttnMask, DType, Tensor, TensorData};

/// Offsets (in elements) of each broadcast batch matrix of `t` within the output batch.
fn batch_offsets(t: &Tensor, out_batch: &[usize]) -> Vec<usize> {
    let r = t.shape().len();
    let mat: usize = t.shape()[r - 2..].iter().product();
    broadcast_map(&t.shape()[..r - 2], out_batch)
        .into_iter()
        .map(|b| b * mat)
        .collect()
}

pub(super) fn matmul(a: &Tensor, b: &Tensor, shape: &[usize], dtype: DType) -> TensorData {
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = a.shape()[a.shape().len() - 1];
    let batch = &shape[..r - 2];
    let (oa, ob) = (batch_offsets(a, batch), batch_offsets(b, batch));
    let (va, vb) = (a.to_f64_vec(), b.to_f64_vec());
    let mut out = Vec::with_capacity(shape.iter().product());
    for (pa, pb) in oa.iter().zip(&ob) {
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|l| va[pa + i * k + l] * vb[pb + l * n + j])
                    .sum();
                out.push(dot);
            }
        }
    }
    from_f64(dtype, out)
}

/// Scaled dot-product attention. A query row whose keys are all masked out (every score
/// -inf) yields zeros rather than NaN.
pub(super) fn attention(
    mask: AttnMask,
    scale: Option<f64>,
    inputs: &[&Tensor],
    shape: &[usize],
    dtype: DType,
) -> TensorData {
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let r = shape.len();
    let batch = &shape[..r - 2];
    let (sq, dv) = (shape[r - 2], shape[r - 1]);
    let d = q.shape()[r - 1];
    let sk = k.shape()[r - 2];
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let (oq, ok, ov) = (
        batch_offsets(q, batch),
        batch_offsets(k, batch),
        batch_offsets(v, batch),
    );
    let (vq, vk, vv) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let mut scores_shape = batch.to_vec();
    scores_shape.extend([sq, sk]);
    let additive = inputs
        .get(3)
        .map(|m| (m.to_f64_vec(), broadcast_map(m.shape(), &scores_shape)));
    let mut out = Vec::with_capacity(shape.iter().product());
    let mut bi = 0;
    for_each_index(batch, |_, _| {
        for i in 0..sq {
            let mut s: Vec<f64> = (0..sk)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|l| vq[oq[bi] + i * d + l] * vk[ok[bi] + j * d + l])
                        .sum();
                    let mut x = dot * scale;
                    if mask == AttnMask::Causal && j + sq > i + sk {
                        x = f64::NEG_INFINITY;
                    }
                    if let Some((mv, mm)) = &additive {
                        x += mv[mm[(bi * sq + i) * sk + j]];
                    }
                    x
                })
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                out.extend(std::iter::repeat_n(0.0, dv));
                continue;
            }
            let mut sum = 0.0;
            for x in &mut s {
                *x = (*x - max).exp();
                sum += *x;
            }
            for c in 0..dv {
                let o: f64 = (0..sk).map(|j| s[j] * vv[ov[bi] + j * dv + c]).sum();
                out.push(o / sum);
            }
        }
        bi += 1;
    });
    from_f64(dtype, out)
}

/// `x · dequantize(w)ᵀ`: dequantizes every row of `w` (n rows of k values) to f32 exactly
/// as [`rlx_ir::QuantFormat::dequantize`] defines, then multiplies in f64.
pub(super) fn quant_matmul(
    format: rlx_ir::QuantFormat,
    n: usize,
    k: usize,
    x: &Tensor,
    w: &Tensor,
) -> TensorData {
    let TensorData::U8(bytes) = w.data() else {
        unreachable!("inference checked u8 weights")
    };
    let mut wf = vec![0f32; n * k];
    format.dequantize(bytes, &mut wf);
    let vx = x.to_f64_vec();
    let rows = vx.len() / k;
    let mut out = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xr = &vx[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &wf[j * k..(j + 1) * k];
            out.push(xr.iter().zip(wr).map(|(a, &b)| a * b as f64).sum::<f64>());
        }
    }
    from_f64(DType::F32, out)
}
