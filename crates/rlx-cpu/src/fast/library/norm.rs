//! f32 row kernels: softmax, log-softmax, layer norm, RMS norm and arg reductions. Rows run
//! in parallel; each row is a few vectorizable passes.

use crate::fast::math;
use crate::fast::pool;
use rlx_interp::arg_better;
use rlx_ir::ArgOp;

/// Sum with eight partial accumulators, so the loop vectorizes.
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut p = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for i in 0..8 {
            p[i] += c[i];
        }
    }
    p.iter().sum::<f32>() + rest
}

/// The largest element (NaN-ignoring, -inf for an empty row), eight lanes at a time so the
/// loop vectorises.
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Softmax or log-softmax of one contiguous row, compiled for the widest vectors the CPU
/// has (as [`super::attention`]'s softmax).
pub(crate) fn softmax_row(x: &[f32], out: &mut [f32], log: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::packed_gemm::{avx512, fma};
        if avx512() {
            // SAFETY: `avx512` checked AVX-512F, AVX2 and FMA.
            return unsafe { softmax_row_avx512(x, out, log) };
        }
        if fma() {
            // SAFETY: `fma` checked AVX2 and FMA.
            return unsafe { softmax_row_fma(x, out, log) };
        }
    }
    softmax_row_with::<false>(x, out, log)
}

/// [`softmax_row`] 16 lanes wide.
///
/// # Safety
/// AVX-512F, AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_row_avx512(x: &[f32], out: &mut [f32], log: bool) {
    softmax_row_with::<true>(x, out, log)
}

/// [`softmax_row`] 8 lanes wide.
///
/// # Safety
/// AVX2 and FMA are present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_fma(x: &[f32], out: &mut [f32], log: bool) {
    softmax_row_with::<true>(x, out, log)
}

/// [`softmax_row`]'s passes: the max, then exp (of arguments <= 0) and its sum together
/// with sixteen partial sums so the loop vectorises, then the normalisation.
#[inline(always)]
fn softmax_row_with<const FMA: bool>(x: &[f32], out: &mut [f32], log: bool) {
    let m = max(x);
    let mut acc = [0.0f32; 16];
    let mut total = 0.0f32;
    let n = x.len().min(out.len()) / 16 * 16;
    for (o, x) in out[..n].chunks_exact_mut(16).zip(x[..n].chunks_exact(16)) {
        for ((a, o), &v) in acc.iter_mut().zip(o).zip(x) {
            *o = math::exp_nonpositive::<FMA>(v - m);
            *a += *o;
        }
    }
    for (o, &v) in out[n..].iter_mut().zip(&x[n..]) {
        *o = math::exp_nonpositive::<FMA>(v - m);
        total += *o;
    }
    let s = acc.iter().sum::<f32>() + total;
    if log {
        let ls = m + s.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - ls;
        }
    } else {
        let inv = 1.0 / s;
        out.iter_mut().for_each(|o| *o *= inv);
    }
}

/// Softmax along the middle axis of `[outer, n, inner]`.
pub(crate) fn softmax(x: &[f32], out: &mut [f32], n: usize, inner: usize, log: bool) {
    if n == 0 || inner == 0 {
        return;
    }
    if inner == 1 {
        pool::for_each_chunk_mut(out, n, |i, o| softmax_row(&x[i * n..(i + 1) * n], o, log));
        return;
    }
    pool::for_each_chunk_mut(out, n * inner, |i, o| {
        let x = &x[i * n * inner..(i + 1) * n * inner];
        let mut m = vec![f32::NEG_INFINITY; inner];
        for row in x.chunks(inner) {
            m.iter_mut().zip(row).for_each(|(m, &v)| *m = m.max(v));
        }
        let mut s = vec![0.0f32; inner];
        for (orow, row) in o.chunks_mut(inner).zip(x.chunks(inner)) {
            for ((o, &v), (s, &m)) in orow.iter_mut().zip(row).zip(s.iter_mut().zip(&m)) {
                *o = math::exp::<false>(v - m);
                *s += *o;
            }
        }
        for (orow, row) in o.chunks_mut(inner).zip(x.chunks(inner)) {
            for ((o, &v), (s, &m)) in orow.iter_mut().zip(row).zip(s.iter().zip(&m)) {
                *o = if log { v - m - s.ln() } else { *o / s };
            }
        }
    });
}

/// Layer norm (with `bias`) or RMS norm (without) over rows of `scale.len()` elements;
/// `scale` and `bias` are already expanded to the row length.
pub(crate) fn norm_rows(x: &[f32], out: &mut [f32], scale: &[f32], bias: Option<&[f32]>, eps: f32) {
    let len = scale.len();
    if len == 0 {
        return;
    }
    pool::for_each_chunk_mut(out, len, |i, o| {
        let x = &x[i * len..(i + 1) * len];
        match bias {
            Some(b) => {
                let mean = sum(x) / len as f32;
                for (o, &v) in o.iter_mut().zip(x) {
                    *o = (v - mean) * (v - mean);
                }
                let inv = 1.0 / (sum(o) / len as f32 + eps).sqrt();
                for (((o, &v), &s), &b) in o.iter_mut().zip(x).zip(scale).zip(b) {
                    *o = (v - mean) * inv * s + b;
                }
            }
            None => {
                for (o, &v) in o.iter_mut().zip(x) {
                    *o = v * v;
                }
                let inv = 1.0 / (sum(o) / len as f32 + eps).sqrt();
                for ((o, &v), &s) in o.iter_mut().zip(x).zip(scale) {
                    *o = v * inv * s;
                }
            }
        }
    });
}

/// Index of the max/min along the middle axis of `[outer, n, inner]` (first on ties).
pub(crate) fn arg_reduce(op: ArgOp, x: &[f32], out: &mut [i64], n: usize, inner: usize) {
    if inner == 0 {
        return;
    }
    pool::for_each_chunk_mut(out, inner, |o, dst| {
        let block = &x[o * n * inner..(o + 1) * n * inner];
        for (i, d) in dst.iter_mut().enumerate() {
            let mut best = 0;
            for j in 1..n {
                if arg_better(
                    op,
                    block[j * inner + i] as f64,
                    block[best * inner + i] as f64,
                ) {
                    best = j;
                }
            }
            *d = best as i64;
        }
    });
}
