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
    let storage_order = if max { n.int("storage_order", 0)? } else { 0 };
    if !matches!(storage_order, 0 | 1) {
        invalid!("storage_order must be 0 or 1, got {storage_order}");
    }
    let count_include_pad = !max && n.int("count_include_pad", 0)? != 0;
    let d = ctx.dtype(&x);
    let xf = if d.is_float() {
        x.clone()
    } else if max && matches!(d, DType::U8 | DType::I8 | DType::I32) {
        ctx.cast(&x, DType::F32)?
    } else {
        unsupported!("dtype {d}");
    };
    let y = if nsp == 3 {
        crate::ops::conv3d::pool3d(ctx, n, &xf, &kernel, ceil, max, count_include_pad)?
            .swap_remove(0)
    } else {
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
        from_2d(ctx, &y, nsp)?
    };
    let mut outs = vec![ctx.cast(&y, d)?];
    if max && n.wants(1) {
        let sp = spatial_attrs(n, &kernel, &xs[2..])?;
        let column_major = storage_order == 1;
        let idx =
            crate::ops::pool_index::max_pool_indices(ctx, &xf, &y, &kernel, &sp, column_major)?;
        outs.push(idx);
    }
    Ok(outs)
}

/// `LpPool`: (sum over the window of |x|^p)^(1/p) for 1 to 3 spatial dims. The input is
/// zero-padded explicitly (pads, plus what ceil-mode windows reach past them) and
/// average-pooled without padding, so every window divides by the kernel size and the sum is
/// the average times that size.
pub fn lp_pool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
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
    let sp = spatial_attrs(n, &kernel, &xs[2..])?;
    let p = n.int("p", 2)?;
    if p <= 0 {
        invalid!("p must be positive, got {p}");
    }
    let p = p as f64;
    let d = ctx.dtype(&x);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} (float only)");
    }
    let mut pads = vec![(0usize, 0usize); 2 + nsp];
    let mut outs = Vec::with_capacity(nsp);
    for i in 0..nsp {
        let (k, s, dl) = (kernel[i], sp.stride[i], sp.dilation[i]);
        let (b, e) = (sp.begin[i], sp.end[i]);
        let o = crate::ops::conv3d::out_len(xs[2 + i], k, s, b, e, dl, ceil)?;
        let need = (o - 1) * s + (k - 1) * dl + 1;
        pads[2 + i] = (b, e + need.saturating_sub(xs[2 + i] + b + e));
        outs.push(o);
    }
    let a = ctx.unary(UnaryOp::Abs, &x)?;
    let ap = ctx.binary_scalar(BinaryOp::Pow, &a, p)?;
    let ap = if pads.iter().any(|&(b, e)| b > 0 || e > 0) {
        ctx.op(
            Op::Pad {
                pads,
                mode: PadMode::Constant(0.0),
            },
            &[&ap],
        )?
    } else {
        ap
    };
    let mut avg = if nsp == 3 {
        let win = crate::ops::conv3d::Window3 {
            stride: [sp.stride[0], sp.stride[1], sp.stride[2]],
            dilation: [sp.dilation[0], sp.dilation[1], sp.dilation[2]],
            begin: [0; 3],
            end: [0; 3],
        };
        let k3 = [kernel[0], kernel[1], kernel[2]];
        crate::ops::conv3d::pool3d_window(ctx, &ap, k3, win, false, false, true)?
    } else {
        let off = 2 - nsp;
        let mut params = Pool2dParams {
            kind: PoolKind::Avg,
            kernel: [1, 1],
            stride: [1, 1],
            pads: [0; 4],
            dilation: [1, 1],
            count_include_pad: true,
            ceil_mode: false,
        };
        params.kernel[off..].copy_from_slice(&kernel);
        params.stride[off..].copy_from_slice(&sp.stride);
        params.dilation[off..].copy_from_slice(&sp.dilation);
        let x2 = to_2d(ctx, &ap)?;
        let avg = ctx.op(Op::Pool2d(params), &[&x2])?;
        from_2d(ctx, &avg, nsp)?
    };
    // the padded length can hold one more window than ceil mode keeps
    let got = ctx.shape(&avg)?;
    for (i, &o) in outs.iter().enumerate() {
        if got[2 + i] != o {
            avg = ctx.slice(&avg, 2 + i, 0, o as i64, 1)?;
        }
    }
    let k: usize = kernel.iter().product();
    let sum = ctx.binary_scalar(BinaryOp::Mul, &avg, k as f64)?;
    Ok(vec![ctx.binary_scalar(BinaryOp::Pow, &sum, 1.0 / p)?])
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
    const BIG: i64 = 1 << 30;
    let in_range = |v: &[i64], lo: i64| v.iter().all(|&x| (lo..=BIG).contains(&x));
    if !in_range(&strides, 1)
        || !in_range(&dil, 1)
        || !in_range(&out_pad, 0)
        || !in_range(&pads, 0)
        || !in_range(out_shape.as_deref().unwrap_or(&[]), 1)
    {
        invalid!(
            "strides {strides:?} and dilations {dil:?} must be positive, pads {pads:?} and \
             output_padding {out_pad:?} non-negative, output_shape {out_shape:?} positive \
             (all at most 2^30)"
        );
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
    let mut st = vec![0usize; nsp];
    let mut di = vec![0usize; nsp];
    for i in 0..nsp {
        st[i] = pos(strides[i], "stride")?;
        di[i] = pos(dil[i], "dilation")?;
    }
    // Input dilation by the stride: [N, C, d0, 1, d1, 1, ...], the size-1 dims padded to
    // the stride, merged back and the trailing zeros cut.
    let (nb, c) = (xs[0], xs[1]);
    let mut y = x.clone();
    if st.iter().any(|&s| s != 1) {
        let mut dims = vec![nb, c];
        let mut pp = vec![(0usize, 0usize); 2];
        for i in 0..nsp {
            dims.extend([xs[2 + i], 1]);
            pp.extend([(0, 0), (0, st[i] - 1)]);
        }
        y = ctx.reshape(&y, &dims)?;
        y = ctx.op(
            Op::Pad {
                pads: pp,
                mode: PadMode::Constant(0.0),
            },
            &[&y],
        )?;
        let mut merged = vec![nb, c];
        merged.extend((0..nsp).map(|i| xs[2 + i] * st[i]));
        y = ctx.reshape(&y, &merged)?;
        for i in 0..nsp {
            y = ctx.slice(&y, 2 + i, 0, ((xs[2 + i] - 1) * st[i] + 1) as i64, 1)?;
        }
    }
    // Full padding minus the requested pads (negative: crop), plus output_padding at the end.
    let mut pads2 = vec![(0usize, 0usize); 2 + nsp];
    for i in 0..nsp {
        let full = (di[i] * (kernel[i] - 1)) as i64;
        let b = full - pads[i];
        let e = full - pads[i + nsp] + out_pad[i];
        let len = ctx.shape(&y)?[2 + i] as i64;
        if b < 0 || e < 0 {
            if (-b).max(0) + (-e).max(0) >= len {
                invalid!("pads {pads:?} leave an empty output");
            }
            y = ctx.slice(&y, 2 + i, (-b).max(0), len - (-e).max(0), 1)?;
        }
        pads2[2 + i] = (b.max(0) as usize, e.max(0) as usize);
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
    // Kernel [Ci, Co/g, k...] -> [Co, Ci/g, k...], flipped spatially.
    let ci = ws[0];
    let cog = ws[1];
    if ci % g != 0 || ci != c {
        invalid!("weight {ws:?} does not fit {c} input channels in {g} groups");
    }
    if kernel != ws[2..] {
        invalid!("kernel_shape {kernel:?} does not match the weight {ws:?}");
    }
    let mut dims = vec![g, ci / g, cog];
    dims.extend(&kernel);
    let wk = ctx.reshape(&w, &dims)?;
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + nsp);
    let wk = ctx.transpose(&wk, &perm)?;
    let mut dims = vec![g * cog, ci / g];
    dims.extend(&kernel);
    let mut wk = ctx.reshape(&wk, &dims)?;
    for i in 0..nsp {
        wk = ctx.slice(&wk, 2 + i, -1, i64::MIN, -1)?;
    }
    let out = if nsp == 3 {
        let win = crate::ops::conv3d::Window3 {
            stride: [1; 3],
            dilation: [di[0], di[1], di[2]],
            begin: [0; 3],
            end: [0; 3],
        };
        crate::ops::conv3d::conv3d_window(ctx, &y, &wk, n.opt(2), win, g)?
    } else {
        let mut d2 = [1usize; 2];
        d2[2 - nsp..].copy_from_slice(&di);
        let p = Conv2dParams {
            stride: [1, 1],
            pads: [0; 4],
            dilation: d2,
            groups: g,
        };
        let bias = n.opt(2);
        as_2d(ctx, &y, &wk, |ctx, y, wk| {
            let mut ins = vec![&y, &wk];
            ins.extend(bias.as_ref());
            ctx.op(Op::Conv2d(p), &ins)
        })?
    };
    Ok(vec![out])
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
