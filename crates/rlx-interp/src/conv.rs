//! Convolution and pooling over NCHW tensors (OIHW weights).

use super::from_f64;
use rlx_ir::{Conv2dParams, DType, Pool2dParams, PoolKind, Tensor, TensorData};

pub(super) fn conv2d(
    p: &Conv2dParams,
    inputs: &[&Tensor],
    shape: &[usize],
    dtype: DType,
) -> TensorData {
    let (x, w) = (inputs[0], inputs[1]);
    let (n, c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let (oh, ow) = (shape[2], shape[3]);
    let og = o / p.groups;
    let (vx, vw) = (x.to_f64_vec(), w.to_f64_vec());
    let bias = inputs.get(2).map(|b| b.to_f64_vec());
    let mut out = Vec::with_capacity(n * o * oh * ow);
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = bias.as_ref().map_or(0.0, |bv| bv[oc]);
                    for ci in 0..cg {
                        let ic = g * cg + ci;
                        for i in 0..kh {
                            let iy =
                                (y * p.stride[0] + i * p.dilation[0]) as isize - p.pads[0] as isize;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            for j in 0..kw {
                                let ix = (xo * p.stride[1] + j * p.dilation[1]) as isize
                                    - p.pads[1] as isize;
                                if ix < 0 || ix >= wd as isize {
                                    continue;
                                }
                                let xv = vx[((b * c + ic) * h + iy as usize) * wd + ix as usize];
                                acc += xv * vw[((oc * cg + ci) * kh + i) * kw + j];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    from_f64(dtype, out)
}

/// One pooling window along one spatial axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolWindow {
    /// input position of window tap 0 (may be negative, in the padding)
    pub start: isize,
    /// first tap inside the input
    pub lo: usize,
    /// one past the last tap inside the input (`lo` when none is)
    pub hi: usize,
    /// taps inside the padded input (real or padding), the divisor with count_include_pad
    pub padded: usize,
}

/// The window of output position `o` along an axis of input size `n`. With ceil mode a
/// window may run past the padded input; taps there count neither as input nor as padding
/// (PyTorch's rule).
pub(crate) fn pool_window(
    o: usize,
    n: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
) -> PoolWindow {
    let start = (o * stride) as isize - pad_begin as isize;
    let d = dilation as isize;
    let taps_below = |limit: isize| -> usize {
        // number of taps i in 0..kernel with start + i*d < limit
        if limit <= start {
            0
        } else {
            (((limit - start) + d - 1) / d).min(kernel as isize) as usize
        }
    };
    let lo = taps_below(0);
    let hi = taps_below(n as isize).max(lo);
    let padded = taps_below(n as isize + pad_end as isize);
    PoolWindow {
        start,
        lo,
        hi,
        padded,
    }
}

/// The windows of every output position along an axis.
pub fn pool_windows(p: &Pool2dParams, axis: usize, n: usize, out: usize) -> Vec<PoolWindow> {
    (0..out)
        .map(|o| {
            pool_window(
                o,
                n,
                p.kernel[axis],
                p.stride[axis],
                p.dilation[axis],
                p.pads[axis],
                p.pads[axis + 2],
            )
        })
        .collect()
}

/// Max/avg pooling. A window with no tap inside the input gives -inf (max) or 0 (avg).
pub(super) fn pool2d(p: &Pool2dParams, x: &Tensor, shape: &[usize], dtype: DType) -> TensorData {
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (oh, ow) = (shape[2], shape[3]);
    let wy = pool_windows(p, 0, h, oh);
    let wx = pool_windows(p, 1, w, ow);
    let v = x.to_f64_vec();
    let mut out = Vec::with_capacity(n * c * oh * ow);
    for plane in 0..n * c {
        for a in &wy {
            for b in &wx {
                let mut acc = match p.kind {
                    PoolKind::Max => f64::NEG_INFINITY,
                    PoolKind::Avg => 0.0,
                };
                for i in a.lo..a.hi {
                    let iy = (a.start + (i * p.dilation[0]) as isize) as usize;
                    for j in b.lo..b.hi {
                        let ix = (b.start + (j * p.dilation[1]) as isize) as usize;
                        let xv = v[(plane * h + iy) * w + ix];
                        acc = match p.kind {
                            PoolKind::Max => acc.max(xv),
                            PoolKind::Avg => acc + xv,
                        };
                    }
                }
                if p.kind == PoolKind::Avg {
                    let count = if p.count_include_pad {
                        a.padded * b.padded
                    } else {
                        (a.hi - a.lo) * (b.hi - b.lo)
                    };
                    acc = if count == 0 { 0.0 } else { acc / count as f64 };
                }
                out.push(acc);
            }
        }
    }
    from_f64(dtype, out)
}

/// Max/avg over all dims after N and C.
pub(super) fn global_pool(kind: PoolKind, x: &Tensor, dtype: DType) -> TensorData {
    let s = x.shape();
    let len: usize = s[2..].iter().product();
    let v = x.to_f64_vec();
    let out = (0..s[0] * s[1]).map(|row| {
        let vals = &v[row * len..(row + 1) * len];
        match kind {
            PoolKind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            PoolKind::Avg => vals.iter().sum::<f64>() / len as f64,
        }
    });
    from_f64(dtype, out.collect::<Vec<_>>())
}
