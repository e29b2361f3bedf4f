//! 3-D convolution and pooling over the IR's 2-D ops: the depth window is unrolled, each
//! kernel depth tap is a 2-D convolution (or pooling) of a strided depth slice, and the
//! taps are summed (or max-combined). Averages divide by the taps counted along depth,
//! since the 2-D divisor is the same for every tap of one output position.

use crate::ctx::{invalid, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::conv::{pos, spatial_attrs};
use rlx_ir::{BinaryOp, Conv2dParams, Op, PadMode, Pool2dParams, PoolKind};

/// Pads the depth dim (2) of an NCDHW value.
fn pad_depth(ctx: &mut Ctx, x: &Val, b: usize, e: usize, fill: f64) -> R<Val> {
    if b == 0 && e == 0 {
        return Ok(x.clone());
    }
    let pads = vec![(0, 0), (0, 0), (b, e), (0, 0), (0, 0)];
    ctx.op(
        Op::Pad {
            pads,
            mode: PadMode::Constant(fill),
        },
        &[x],
    )
}

/// Depth taps `[start, start + (out - 1) * stride]` as an `[N, C*out, H, W]` view when
/// `fold_channels`, or `[N*out, C, H, W]` otherwise.
fn depth_tap(
    ctx: &mut Ctx,
    x: &Val,
    start: usize,
    stride: usize,
    out: usize,
    fold_channels: bool,
) -> R<Val> {
    let s = ctx.shape(x)?;
    let end = start + (out - 1) * stride + 1;
    let t = ctx.slice(x, 2, start as i64, end as i64, stride as i64)?; // [N, C, out, H, W]
    if fold_channels {
        ctx.reshape(&t, &[s[0], s[1] * out, s[3], s[4]])
    } else {
        let t = ctx.transpose(&t, &[0, 2, 1, 3, 4])?;
        ctx.reshape(&t, &[s[0] * out, s[1], s[3], s[4]])
    }
}

/// Output length of a window along one dim (ceil mode drops a last window that would start
/// in the end padding).
pub fn out_len(
    n: usize,
    k: usize,
    s: usize,
    pb: usize,
    pe: usize,
    d: usize,
    ceil: bool,
) -> R<usize> {
    let span = d * (k - 1) + 1;
    if n + pb + pe < span {
        invalid!("window {span} larger than the padded input {}", n + pb + pe);
    }
    let num = n + pb + pe - span;
    let mut out = if ceil { num.div_ceil(s) } else { num / s } + 1;
    if ceil && (out - 1) * s >= n + pb {
        out -= 1;
    }
    Ok(out)
}

/// A 3-D window's parameters per spatial dim (depth, height, width).
#[derive(Clone, Copy, Debug)]
pub struct Window3 {
    /// stride per dim
    pub stride: [usize; 3],
    /// dilation per dim
    pub dilation: [usize; 3],
    /// padding before each dim
    pub begin: [usize; 3],
    /// padding after each dim
    pub end: [usize; 3],
}

impl Window3 {
    /// The node's resolved spatial attributes as a 3-D window.
    fn of(n: &NodeIn, kernel: &[usize], spatial: &[usize]) -> R<Window3> {
        let sp = spatial_attrs(n, kernel, spatial)?;
        let arr = |v: &[usize]| -> R<[usize; 3]> {
            match v {
                [a, b, c] => Ok([*a, *b, *c]),
                _ => invalid!("3-D window attributes must have 3 values, got {v:?}"),
            }
        };
        Ok(Window3 {
            stride: arr(&sp.stride)?,
            dilation: arr(&sp.dilation)?,
            begin: arr(&sp.begin)?,
            end: arr(&sp.end)?,
        })
    }
}

/// 3-D `Conv`.
pub fn conv3d(ctx: &mut Ctx, n: &NodeIn, x: &Val, w: &Val, bias: Option<Val>) -> R<Vec<Val>> {
    let xs = ctx.shape(x)?;
    let ws = ctx.shape(w)?;
    let kernel = match n.ints_opt("kernel_shape")? {
        Some(k) => k.iter().map(|&v| pos(v, "kernel")).collect::<R<Vec<_>>>()?,
        None => ws[2..].to_vec(),
    };
    if kernel != ws[2..] {
        invalid!("kernel_shape {kernel:?} does not match the weight {ws:?}");
    }
    let win = Window3::of(n, &kernel, &xs[2..])?;
    let groups = pos(n.int("group", 1)?, "group")?;
    Ok(vec![conv3d_window(ctx, x, w, bias, win, groups)?])
}

/// A 3-D convolution (NCDHW input, `[Co, Ci/groups, kd, kh, kw]` weight) with explicit
/// window parameters: one 2-D convolution per kernel depth tap, summed.
pub fn conv3d_window(
    ctx: &mut Ctx,
    x: &Val,
    w: &Val,
    bias: Option<Val>,
    win: Window3,
    groups: usize,
) -> R<Val> {
    let xs = ctx.shape(x)?;
    let ws = ctx.shape(w)?;
    if xs.len() != 5 || ws.len() != 5 {
        invalid!("3-D convolution of {xs:?} by {ws:?} (both must be rank 5)");
    }
    let (kd, sd, dd) = (ws[2], win.stride[0], win.dilation[0]);
    let xp = pad_depth(ctx, x, win.begin[0], win.end[0], 0.0)?;
    let od = out_len(xs[2], kd, sd, win.begin[0], win.end[0], dd, false)?;
    let p = Conv2dParams {
        stride: [win.stride[1], win.stride[2]],
        pads: [win.begin[1], win.begin[2], win.end[1], win.end[2]],
        dilation: [win.dilation[1], win.dilation[2]],
        groups,
    };
    let mut acc: Option<Val> = None;
    for t in 0..kd {
        let xt = depth_tap(ctx, &xp, t * dd, sd, od, false)?;
        let wt = ctx.slice(w, 2, t as i64, t as i64 + 1, 1)?;
        let wt = ctx.reshape(&wt, &[ws[0], ws[1], ws[3], ws[4]])?;
        let y = ctx.op(Op::Conv2d(p), &[&xt, &wt])?;
        acc = Some(match acc {
            Some(a) => ctx.add(&a, &y)?,
            None => y,
        });
    }
    let y = acc.ok_or_else(|| crate::ctx::Fail::Invalid("empty kernel".into()))?;
    let ys = ctx.shape(&y)?;
    let y = ctx.reshape(&y, &[xs[0], od, ys[1], ys[2], ys[3]])?;
    let mut y = ctx.transpose(&y, &[0, 2, 1, 3, 4])?;
    if let Some(b) = bias {
        let b = ctx.reshape(&b, &[1, ws[0], 1, 1, 1])?;
        y = ctx.add(&y, &b)?;
    }
    Ok(y)
}

/// 3-D `MaxPool` / `AveragePool`.
pub fn pool3d(
    ctx: &mut Ctx,
    n: &NodeIn,
    x: &Val,
    kernel: &[usize],
    ceil: bool,
    max: bool,
    include_pad: bool,
) -> R<Vec<Val>> {
    let xs = ctx.shape(x)?;
    let win = Window3::of(n, kernel, &xs[2..])?;
    let k = match kernel {
        [a, b, c] => [*a, *b, *c],
        _ => invalid!("kernel_shape {kernel:?} must have 3 values"),
    };
    Ok(vec![pool3d_window(ctx, x, k, win, ceil, max, include_pad)?])
}

/// A 3-D max or average pooling with explicit window parameters: one 2-D pooling per kernel
/// depth tap, max-combined or summed.
pub fn pool3d_window(
    ctx: &mut Ctx,
    x: &Val,
    kernel: [usize; 3],
    win: Window3,
    ceil: bool,
    max: bool,
    include_pad: bool,
) -> R<Val> {
    let xs = ctx.shape(x)?;
    if xs.len() != 5 {
        invalid!("3-D pooling of a rank-{} value", xs.len());
    }
    let (kd, sd, dd) = (kernel[0], win.stride[0], win.dilation[0]);
    let (pb, pe) = (win.begin[0], win.end[0]);
    let od = out_len(xs[2], kd, sd, pb, pe, dd, ceil)?;
    // Extend the end so the last (ceil-mode) window fits; those positions count nowhere.
    let need = (od - 1) * sd + (kd - 1) * dd + 1;
    let extra = need.saturating_sub(xs[2] + pb + pe);
    let fill = if max { f64::NEG_INFINITY } else { 0.0 };
    let xp = pad_depth(ctx, x, pb, pe + extra, fill)?;
    let p = Pool2dParams {
        kind: if max { PoolKind::Max } else { PoolKind::Avg },
        kernel: [kernel[1], kernel[2]],
        stride: [win.stride[1], win.stride[2]],
        pads: [win.begin[1], win.begin[2], win.end[1], win.end[2]],
        dilation: [win.dilation[1], win.dilation[2]],
        count_include_pad: include_pad,
        ceil_mode: ceil,
    };
    let mut acc: Option<Val> = None;
    for t in 0..kd {
        let xt = depth_tap(ctx, &xp, t * dd, sd, od, true)?;
        let y = ctx.op(Op::Pool2d(p), &[&xt])?;
        acc = Some(match acc {
            Some(a) if max => ctx.binary(BinaryOp::Max, &a, &y)?,
            Some(a) => ctx.add(&a, &y)?,
            None => y,
        });
    }
    let y = acc.ok_or_else(|| crate::ctx::Fail::Invalid("empty kernel".into()))?;
    let ys = ctx.shape(&y)?;
    let mut y = ctx.reshape(&y, &[xs[0], xs[1], od, ys[2], ys[3]])?;
    if !max {
        // Depth taps counted per output depth: real positions, plus declared pads when
        // count_include_pad.
        let counts: Vec<f64> = (0..od)
            .map(|o| {
                (0..kd)
                    .filter(|&t| {
                        let p = (o * sd + t * dd) as i64 - pb as i64;
                        let hi = xs[2] as i64 + if include_pad { pe as i64 } else { 0 };
                        let lo = if include_pad { -(pb as i64) } else { 0 };
                        p >= lo && p < hi
                    })
                    .count()
                    .max(1) as f64
            })
            .collect();
        let d = ctx.dtype(&y);
        let c = ctx.tensor(d, &[1, 1, od, 1, 1], &counts)?;
        y = ctx.div(&y, &c)?;
    }
    Ok(y)
}
