//! Convolutions and pooling: 1-D and 2-D onto the IR's 2-D ops (1-D as height 1),
//! `ConvTranspose` as a dilated input convolved with the flipped kernel, and `LpPool` over
//! average pooling.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, Conv2dParams, DType, Op, PadMode, Pool2dParams, PoolKind, UnaryOp};

/// The spatial attributes every conv/pool shares, resolved to 2-D.
struct Window {
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    /// top, left, bottom, right
    pads: [usize; 4],
}

pub fn pos(v: i64, what: &str) -> R<usize> {
    if v <= 0 {
        invalid!("{what} must be positive, got {v}");
    }
    Ok(v as usize)
}

/// Strides, dilations and (begin, end) pads per spatial dim, with `auto_pad` resolved.
pub struct Spatial {
    /// stride per spatial dim
    pub stride: Vec<usize>,
    /// dilation per spatial dim
    pub dilation: Vec<usize>,
    /// padding before each spatial dim
    pub begin: Vec<usize>,
    /// padding after each spatial dim
    pub end: Vec<usize>,
}

/// Reads strides/dilations/pads/auto_pad for spatial dims of sizes `spatial`.
pub fn spatial_attrs(n: &NodeIn, kernel: &[usize], spatial: &[usize]) -> R<Spatial> {
    let nsp = spatial.len();
    if spatial.contains(&0) || kernel.contains(&0) {
        invalid!("spatial dims {spatial:?} and kernel {kernel:?} must be non-empty");
    }
    let get = |name: &str| -> R<Vec<i64>> { Ok(n.ints_opt(name)?.unwrap_or_else(|| vec![1; nsp])) };
    let strides = get("strides")?;
    let dil = get("dilations")?;
    if strides.len() != nsp || dil.len() != nsp || kernel.len() != nsp {
        invalid!("strides, dilations and kernel must have {nsp} values");
    }
    let stride = strides
        .iter()
        .map(|&v| pos(v, "stride"))
        .collect::<R<Vec<_>>>()?;
    let dilation = dil
        .iter()
        .map(|&v| pos(v, "dilation"))
        .collect::<R<Vec<_>>>()?;
    let mut pads = n.ints_opt("pads")?.unwrap_or_else(|| vec![0; 2 * nsp]);
    if pads.len() != 2 * nsp || pads.iter().any(|&p| p < 0) {
        invalid!("pads {pads:?} must be {} non-negative values", 2 * nsp);
    }
    let auto = n.string("auto_pad", "NOTSET")?;
    match auto.as_str() {
        "NOTSET" => {}
        "VALID" => pads = vec![0; 2 * nsp],
        "SAME_UPPER" | "SAME_LOWER" => {
            for i in 0..nsp {
                let out = spatial[i].div_ceil(stride[i]);
                let span = (kernel[i] - 1) * dilation[i] + 1;
                let total = ((out - 1) * stride[i] + span).saturating_sub(spatial[i]);
                let small = total / 2;
                let (b, e) = if auto == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = b as i64;
                pads[i + nsp] = e as i64;
            }
        }
        other => invalid!("auto_pad `{other}`"),
    }
    Ok(Spatial {
        stride,
        dilation,
        begin: pads[..nsp].iter().map(|&p| p as usize).collect(),
        end: pads[nsp..].iter().map(|&p| p as usize).collect(),
    })
}

/// Reads the window attributes for 1 or 2 spatial dims; 1-D values land in the second
/// (width) slot.
fn window(n: &NodeIn, kernel: &[usize], spatial: &[usize]) -> R<Window> {
    let nsp = spatial.len();
    if nsp > 2 {
        unsupported!("{nsp}-D windows here");
    }
    let sp = spatial_attrs(n, kernel, spatial)?;
    let mut w = Window {
        kernel: [1, 1],
        stride: [1, 1],
        dilation: [1, 1],
        pads: [0; 4],
    };
    let off = 2 - nsp;
    for (i, &k) in kernel.iter().enumerate() {
        w.kernel[off + i] = k;
        w.stride[off + i] = sp.stride[i];
        w.dilation[off + i] = sp.dilation[i];
        w.pads[off + i] = sp.begin[i];
        w.pads[2 + off + i] = sp.end[i];
    }
    Ok(w)
}

/// Number of spatial dims, rejecting what the IR's 2-D ops cannot express.
fn spatial_rank(ctx: &Ctx, x: &Val) -> R<usize> {
    match ctx.rank(x) {
        3 => Ok(1),
        4 => Ok(2),
        5 => Ok(3),
        r if r > 5 => unsupported!("{}-D spatial input (1-D to 3-D are supported)", r - 2),
        r => invalid!("input rank {r} is too small"),
    }
}

/// Views a 1-D (NCL) tensor as 2-D (NC1L).
fn to_2d(ctx: &mut Ctx, x: &Val) -> R<Val> {
    if ctx.rank(x) == 3 {
        ctx.unsqueeze(x, &[2])
    } else {
        Ok(x.clone())
    }
}

fn from_2d(ctx: &mut Ctx, y: &Val, nsp: usize) -> R<Val> {
    if nsp == 1 {
        let s = ctx.shape(y)?;
        ctx.reshape(y, &[s[0], s[1], s[3]])
    } else {
        Ok(y.clone())
    }
}

/// `Conv` (1-D and 2-D).
pub fn conv(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    conv_values(ctx, n, &x, &w, n.opt(2))
}

/// A convolution of `x` by `w` (plus `bias`) with the node's window attributes.
pub fn conv_values(ctx: &mut Ctx, n: &NodeIn, x: &Val, w: &Val, bias: Option<Val>) -> R<Vec<Val>> {
    let Some(p) = conv_window(ctx, n, x, w)? else {
        return crate::ops::conv3d::conv3d(ctx, n, x, w, bias);
    };
    let y = as_2d(ctx, x, w, |ctx, x, w| {
        let mut ins = vec![&x, &w];
        ins.extend(bias.as_ref());
        ctx.op(Op::Conv2d(p), &ins)
    })?;
    Ok(vec![y])
}

/// The node's window attributes for `x` convolved by `w` as the IR's 2-D parameters, or
/// None for a 3-D convolution (which has no 2-D form).
pub fn conv_window(ctx: &Ctx, n: &NodeIn, x: &Val, w: &Val) -> R<Option<Conv2dParams>> {
    let nsp = spatial_rank(ctx, x)?;
    check_weight(ctx, x, w)?;
    if nsp == 3 {
        return Ok(None);
    }
    let xs = ctx.shape(x)?;
    let ws = ctx.shape(w)?;
    let kernel = match n.ints_opt("kernel_shape")? {
        Some(k) => k.iter().map(|&v| pos(v, "kernel")).collect::<R<Vec<_>>>()?,
        None => ws[2..].to_vec(),
    };
    let win = window(n, &kernel, &xs[2..])?;
    let groups = pos(n.int("group", 1)?, "group")?;
    Ok(Some(Conv2dParams {
        stride: win.stride,
        pads: win.pads,
        dilation: win.dilation,
        groups,
    }))
}

/// Runs a 2-D op on a 1-D or 2-D convolution's operands: `x` and `w` (NCL/NCHW) viewed as
/// 2-D, the result viewed back.
pub fn as_2d(
    ctx: &mut Ctx,
    x: &Val,
    w: &Val,
    op: impl FnOnce(&mut Ctx, Val, Val) -> R<Val>,
) -> R<Val> {
    let nsp = spatial_rank(ctx, x)?;
    let (x2, w2) = (to_2d(ctx, x)?, to_2d(ctx, w)?);
    let y = op(ctx, x2, w2)?;
    from_2d(ctx, &y, nsp)
}

/// `MaxPool` and `AveragePool` (integer max pooling runs in f32, which is exact).
pub fn pool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let nsp = spatial_rank(ctx, &x)?;
    let xs = ctx.shape(&x)?;
    let Some(kernel) = n.ints_opt("kernel_shape")? else {
        invalid!("kernel_shape is required");
    };
    let kernel = kernel
        .iter()
        .map(|&v| pos(v, "kernel"))
        .collect::<R<Vec<_>>>()?;
    let ceil = n.int("ceil_mode", 0)? != 0;
    let max = n.op_type() == "MaxPool";
    let count_include_pad = if max {
        n.int("storage_order", 0)?;
        false
    } else {
        n.int("count_include_pad", 0)? != 0
    };
    if max && n.wants(1) {
        unsupported!("the Indices output of MaxPool");
    }
    let d = ctx.dtype(&x);
    let xf = if d.is_float() {
        x.clone()
    } else if max && matches!(d, DType::U8 | DType::I8 | DType::I32) {
        ctx.cast(&x, DType::F32)?
    } else {
        unsupported!("dtype {d}");
    };
    if nsp == 3 {
        let y = crate::ops::conv3d::pool3d(ctx, n, &xf, &kernel, ceil, max, count_include_pad)?;
        return Ok(vec![ctx.cast(&y[0], d)?]);
    }
    let win = window(n, &kernel, &xs[2..])?;
    let p = Pool2dParams {
        kind: if max { PoolKind::Max } else { PoolKind::Avg },
        kernel: win.kernel,
        stride: win.stride,
        pads: win.pads,
        dilation: win.dilation,
        count_include_pad,
        ceil_mode: ceil,
    };
    let x2 = to_2d(ctx, &xf)?;
    let y = ctx.op(Op::Pool2d(p), &[&x2])?;
    let y = from_2d(ctx, &y, nsp)?;
    Ok(vec![ctx.cast(&y, d)?])
}

/// `LpPool`: (sum over the window of |x|^p)^(1/p), the sum as average times window size.
pub fn lp_pool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let nsp = spatial_rank(ctx, &x)?;
    if nsp == 3 {
        unsupported!("3-D LpPool");
    }
    let xs = ctx.shape(&x)?;
    let Some(kernel) = n.ints_opt("kernel_shape")? else {
        invalid!("kernel_shape is required");
    };
    let kernel = kernel
        .iter()
        .map(|&v| pos(v, "kernel"))
        .collect::<R<Vec<_>>>()?;
    let ceil = n.int("ceil_mode", 0)? != 0;
    let win = window(n, &kernel, &xs[2..])?;
    let p = n.int("p", 2)? as f64;
    let a = ctx.unary(UnaryOp::Abs, &x)?;
    let ap = ctx.binary_scalar(BinaryOp::Pow, &a, p)?;
    let params = Pool2dParams {
        kind: PoolKind::Avg,
        kernel: win.kernel,
        stride: win.stride,
        pads: win.pads,
        dilation: win.dilation,
        count_include_pad: true,
        ceil_mode: ceil,
    };
    let x2 = to_2d(ctx, &ap)?;
    let avg = ctx.op(Op::Pool2d(params), &[&x2])?;
    let k = (win.kernel[0] * win.kernel[1]) as f64;
    let sum = ctx.binary_scalar(BinaryOp::Mul, &avg, k)?;
    let y = ctx.binary_scalar(BinaryOp::Pow, &sum, 1.0 / p)?;
    Ok(vec![from_2d(ctx, &y, nsp)?])
}

/// `GlobalAveragePool` / `GlobalMaxPool`.
pub fn global_pool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let kind = if n.op_type() == "GlobalMaxPool" {
        PoolKind::Max
    } else {
        PoolKind::Avg
    };
    Ok(vec![ctx.op(Op::GlobalPool(kind), &[&x])?])
}

/// `ConvTranspose`: zeros between input pixels (stride), padding of `dilation*(k-1)` minus
/// the given pads, then a stride-1 convolution with the flipped, regrouped kernel.
pub fn conv_transpose(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let nsp = spatial_rank(ctx, &x)?;
    if nsp == 3 {
        unsupported!("3-D ConvTranspose");
    }
    let xs = ctx.shape(&x)?;
    let ws = check_weight(ctx, &x, &w)?;
    if xs[2..].contains(&0) {
        invalid!("empty spatial dims {xs:?}");
    }
    let g = pos(n.int("group", 1)?, "group")?;
    let kernel: Vec<usize> = match n.ints_opt("kernel_shape")? {
        Some(k) => k.iter().map(|&v| pos(v, "kernel")).collect::<R<_>>()?,
        None => ws[2..].to_vec(),
    };
    let ones = vec![1i64; nsp];
    let strides = n.ints_opt("strides")?.unwrap_or_else(|| ones.clone());
    let dil = n.ints_opt("dilations")?.unwrap_or_else(|| ones.clone());
    let out_pad = n
        .ints_opt("output_padding")?
        .unwrap_or_else(|| vec![0; nsp]);
    let mut pads = n.ints_opt("pads")?.unwrap_or_else(|| vec![0; 2 * nsp]);
    let auto = n.string("auto_pad", "NOTSET")?;
    let out_shape = n.ints_opt("output_shape")?;
    if strides.len() != nsp || dil.len() != nsp || out_pad.len() != nsp || pads.len() != 2 * nsp {
        invalid!("strides, dilations, output_padding and pads must match {nsp} spatial dims");
    }
    if kernel.len() != nsp
        || kernel.contains(&0)
        || out_shape.as_ref().is_some_and(|o| o.len() < nsp)
    {
        invalid!("kernel_shape and output_shape must cover {nsp} spatial dims");
    }
    let same = matches!(auto.as_str(), "SAME_UPPER" | "SAME_LOWER");
    if !matches!(auto.as_str(), "NOTSET" | "VALID") && !same {
        invalid!("auto_pad `{auto}`");
    }
    let natural = |i: usize| {
        strides[i] * (xs[2 + i] as i64 - 1) + out_pad[i] + (kernel[i] as i64 - 1) * dil[i] + 1
    };
    let want: Option<Vec<i64>> = match &out_shape {
        Some(o) => Some(o[o.len().saturating_sub(nsp)..].to_vec()),
        None if same => Some((0..nsp).map(|i| xs[2 + i] as i64 * strides[i]).collect()),
        None => None,
    };
    if let Some(o) = want {
        // As the reference: SAME splits the total padding; otherwise the given (or zero)
        // leading pads stay and the end absorbs the difference to the requested size.
        for i in 0..nsp {
            let total = natural(i) - o[i];
            if same {
                let half = total.div_euclid(2);
                if auto == "SAME_UPPER" {
                    pads[i] = half;
                    pads[i + nsp] = total - half;
                } else {
                    pads[i] = total - half;
                    pads[i + nsp] = half;
                }
            } else {
                pads[i + nsp] = total - pads[i];
            }
        }
    }
    // Input dilation by the stride.
    let x2 = to_2d(ctx, &x)?;
    let w2 = to_2d(ctx, &w)?;
    let s2: Vec<usize> = ctx.shape(&x2)?;
    let off = 2 - nsp;
    let mut st = [1usize; 2];
    let mut di = [1usize; 2];
    let mut k2 = [1usize; 2];
    let mut pb = [0i64; 2];
    let mut pe = [0i64; 2];
    for i in 0..nsp {
        st[off + i] = pos(strides[i], "stride")?;
        di[off + i] = pos(dil[i], "dilation")?;
        k2[off + i] = kernel[i];
        pb[off + i] = pads[i];
        pe[off + i] = pads[i + nsp];
    }
    let (nb, c, h, wd) = (s2[0], s2[1], s2[2], s2[3]);
    let mut y = ctx.reshape(&x2, &[nb, c, h, 1, wd, 1])?;
    if st != [1, 1] {
        let pp = vec![
            (0, 0),
            (0, 0),
            (0, 0),
            (0, st[0] - 1),
            (0, 0),
            (0, st[1] - 1),
        ];
        y = ctx.op(
            Op::Pad {
                pads: pp,
                mode: PadMode::Constant(0.0),
            },
            &[&y],
        )?;
    }
    y = ctx.reshape(&y, &[nb, c, h * st[0], wd * st[1]])?;
    y = ctx.slice(&y, 2, 0, ((h - 1) * st[0] + 1) as i64, 1)?;
    y = ctx.slice(&y, 3, 0, ((wd - 1) * st[1] + 1) as i64, 1)?;
    // Full padding minus the requested pads (negative: crop), plus output_padding at the end.
    let mut outp = [0i64; 2];
    outp[off..off + nsp].copy_from_slice(&out_pad[..nsp]);
    let mut pads2 = vec![(0usize, 0usize); 4];
    for a in 0..2 {
        let full = (di[a] * (k2[a] - 1)) as i64;
        let b = full - pb[a];
        let e = full - pe[a] + outp[a];
        let len = ctx.shape(&y)?[2 + a] as i64;
        if b < 0 || e < 0 {
            y = ctx.slice(&y, 2 + a, (-b).max(0), len - (-e).max(0), 1)?;
        }
        pads2[2 + a] = (b.max(0) as usize, e.max(0) as usize);
    }
    if pads2.iter().any(|&(b, e)| b > 0 || e > 0) {
        y = ctx.op(
            Op::Pad {
                pads: pads2,
                mode: PadMode::Constant(0.0),
            },
            &[&y],
        )?;
    }
    // Kernel [Ci, Co/g, kh, kw] -> [Co, Ci/g, kh, kw], flipped spatially.
    let ci = ws[0];
    let cog = ws[1];
    if ci % g != 0 {
        invalid!("{ci} input channels not divisible by {g} groups");
    }
    let (kh, kw) = (k2[0], k2[1]);
    let wk = ctx.reshape(&w2, &[g, ci / g, cog, kh, kw])?;
    let wk = ctx.transpose(&wk, &[0, 2, 1, 3, 4])?;
    let wk = ctx.reshape(&wk, &[g * cog, ci / g, kh, kw])?;
    let wk = ctx.slice(&wk, 2, -1, i64::MIN, -1)?;
    let wk = ctx.slice(&wk, 3, -1, i64::MIN, -1)?;
    let p = Conv2dParams {
        stride: [1, 1],
        pads: [0; 4],
        dilation: di,
        groups: g,
    };
    let mut ins = vec![y, wk];
    ins.extend(n.opt(2));
    let refs: Vec<&Val> = ins.iter().collect();
    let out = ctx.op(Op::Conv2d(p), &refs)?;
    Ok(vec![from_2d(ctx, &out, nsp)?])
}

/// Checks that a weight has the input's rank and non-empty kernel dims.
pub fn check_weight(ctx: &Ctx, x: &Val, w: &Val) -> R<Vec<usize>> {
    let ws = ctx.shape(w)?;
    if ws.len() != ctx.rank(x) || ws.len() < 3 || ws[2..].contains(&0) || ws[..2].contains(&0) {
        invalid!(
            "weight shape {ws:?} does not fit input rank {}",
            ctx.rank(x)
        );
    }
    Ok(ws)
}
