//! Normalizations, decomposed into reductions and elementwise ops (the IR's fused
//! `layer_norm` / `rms_norm` when only the normalized output is wanted).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};

/// Reshapes a per-channel vector `[C]` to broadcast against NC... of rank `rank`.
fn per_channel(ctx: &mut Ctx, v: &Val, rank: usize) -> R<Val> {
    let c = ctx.shape(v)?;
    let mut dims = vec![1; rank];
    if rank > 1 {
        dims[1] = c.iter().product();
    }
    ctx.reshape(v, &dims)
}

/// (x - mean) / sqrt(var + eps) over `axes`, population variance; also mean and 1/std.
fn standardize(ctx: &mut Ctx, x: &Val, axes: &[usize], eps: f64) -> R<(Val, Val, Val)> {
    let mean = ctx.reduce(ReduceOp::Mean, x, axes, true)?;
    let d = ctx.sub(x, &mean)?;
    let d2 = ctx.mul(&d, &d)?;
    let var = ctx.reduce(ReduceOp::Mean, &d2, axes, true)?;
    let ve = ctx.binary_scalar(BinaryOp::Add, &var, eps)?;
    let inv = ctx.unary(UnaryOp::Rsqrt, &ve)?;
    Ok((ctx.mul(&d, &inv)?, mean, inv))
}

/// The compute dtype for `stash_type` (1: f32) on low-precision inputs.
fn stash(ctx: &mut Ctx, n: &NodeIn, x: &Val) -> R<(Val, DType)> {
    let d = ctx.dtype(x);
    if !d.is_float() {
        unsupported!("dtype {d} (float only)");
    }
    let stash = n.int("stash_type", 1)?;
    let work = match stash {
        1 if matches!(d, DType::F16 | DType::BF16) => DType::F32,
        1 => d,
        11 => DType::F64,
        10 => DType::F16,
        16 => DType::BF16,
        other => invalid!("stash_type {other}"),
    };
    Ok((ctx.cast(x, work)?, d))
}

/// `BatchNormalization`, inference and training mode (batch statistics plus updated running
/// statistics).
pub fn batch_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let eps = n.float("epsilon", 1e-5)? as f64;
    let momentum = n.float("momentum", 0.9)? as f64;
    if n.opset < 7 && n.int("is_test", 0)? == 0 {
        unsupported!("is_test = 0 (training statistics) before opset 7");
    }
    if n.opset < 9 && n.int("spatial", 1)? != 1 {
        unsupported!("spatial = 0");
    }
    let training = n.opset >= 14 && n.int("training_mode", 0)? != 0;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| n.input(i));
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let sc = per_channel(ctx, &scale, r)?;
    let bi = per_channel(ctx, &bias, r)?;
    if training {
        let axes: Vec<usize> = (0..r).filter(|&a| a != 1).collect();
        let (y, bm, inv) = standardize(ctx, &x, &axes, eps)?;
        let y = ctx.mul(&y, &sc)?;
        let y = ctx.add(&y, &bi)?;
        // batch variance back from 1/sqrt(var + eps)
        let inv2 = ctx.mul(&inv, &inv)?;
        let bv = ctx.unary(UnaryOp::Reciprocal, &inv2)?;
        let bv = ctx.binary_scalar(BinaryOp::Sub, &bv, eps)?;
        let c = ctx.shape(&mean)?;
        let bm = ctx.reshape(&bm, &c)?;
        let bv = ctx.reshape(&bv, &c)?;
        let run = |ctx: &mut Ctx, old: &Val, new: &Val| -> R<Val> {
            let a = ctx.binary_scalar(BinaryOp::Mul, old, momentum)?;
            let b = ctx.binary_scalar(BinaryOp::Mul, new, 1.0 - momentum)?;
            ctx.add(&a, &b)
        };
        let rm = run(ctx, &mean, &bm)?;
        let rv = run(ctx, &var, &bv)?;
        return Ok(vec![y, rm, rv]);
    }
    if n.wants(1) || n.wants(2) {
        unsupported!("statistics outputs outside training mode");
    }
    let m = per_channel(ctx, &mean, r)?;
    let v = per_channel(ctx, &var, r)?;
    let ve = ctx.binary_scalar(BinaryOp::Add, &v, eps)?;
    let inv = ctx.unary(UnaryOp::Rsqrt, &ve)?;
    let k = ctx.mul(&inv, &sc)?;
    let d = ctx.sub(&x, &m)?;
    let y = ctx.mul(&d, &k)?;
    Ok(vec![ctx.add(&y, &bi)?])
}

/// `InstanceNormalization`: per (n, c) over the spatial dims.
pub fn instance_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let eps = n.float("epsilon", 1e-5)? as f64;
    let axes: Vec<usize> = (2..r).collect();
    let (y, _, _) = standardize(ctx, &x, &axes, eps)?;
    let sc = per_channel(ctx, &n.input(1)?, r)?;
    let bi = per_channel(ctx, &n.input(2)?, r)?;
    let y = ctx.mul(&y, &sc)?;
    Ok(vec![ctx.add(&y, &bi)?])
}

/// `GroupNormalization`: scale and bias per group (opset 18) or per channel (21+).
pub fn group_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    let eps = n.float("epsilon", 1e-5)? as f64;
    let Some(g) = n.int_opt("num_groups")? else {
        invalid!("num_groups is required");
    };
    let (xw, d) = stash(ctx, n, &x)?;
    let g = g as usize;
    if s.len() < 2 || g == 0 || s[1] % g != 0 {
        invalid!("channels {:?} not divisible into {g} groups", s.get(1));
    }
    let rest: usize = s[1..].iter().product::<usize>() / g;
    let xg = ctx.reshape(&xw, &[s[0], g, rest])?;
    let (y, _, _) = standardize(ctx, &xg, &[2], eps)?;
    let y = ctx.cast(&y, d)?;
    let y = ctx.reshape(&y, &s)?;
    let (sc, bi) = (n.input(1)?, n.input(2)?);
    let per_group = ctx.shape(&sc)?.iter().product::<usize>() == g && g != s[1];
    let expand = |ctx: &mut Ctx, v: &Val| -> R<Val> {
        let v = if per_group {
            let c = s[1] / g;
            let v = ctx.reshape(v, &[g, 1])?;
            let v = ctx.expand(&v, rlx_ir::Shape::of(&[g, c]).0)?;
            ctx.reshape(&v, &[g * c])?
        } else {
            v.clone()
        };
        per_channel(ctx, &v, s.len())
    };
    let sc = expand(ctx, &sc)?;
    let bi = expand(ctx, &bi)?;
    let y = ctx.mul(&y, &sc)?;
    Ok(vec![ctx.add(&y, &bi)?])
}

/// `LayerNormalization` (outputs Y, Mean, InvStdDev) and `RMSNormalization`.
pub fn layer_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let axis = ctx.axis(n.int("axis", -1)?, r)?;
    let eps = n.float("epsilon", 1e-5)? as f64;
    let (xw, d) = stash(ctx, n, &x)?;
    let rms = n.op_type() == "RMSNormalization";
    let scale = n.input(1)?;
    let bias = if rms { None } else { n.opt(2) };
    let axes: Vec<usize> = (axis..r).collect();
    let extra = n.wants(1) || n.wants(2);
    if rms && extra {
        invalid!("RMSNormalization has one output");
    }
    let fused_ok = !extra && ctx.dtype(&xw) == d && ctx.dtype(&scale) == d;
    let scale_fits = {
        let norm = rlx_ir::Shape(ctx.dims(&x)[axis..].to_vec());
        rlx_ir::broadcast_shapes(&ctx.ty(&scale).shape, &norm).as_ref() == Some(&norm)
    };
    if fused_ok && scale_fits {
        if rms {
            return Ok(vec![ctx.op(Op::RmsNorm { axis, eps }, &[&x, &scale])?]);
        }
        let b = match &bias {
            Some(b) => b.clone(),
            None => ctx.scalar_like(&x, 0.0),
        };
        let b = if ctx.rank(&b) == 0 {
            ctx.reshape(&b, &[1])?
        } else {
            b
        };
        return Ok(vec![ctx.op(Op::LayerNorm { axis, eps }, &[&x, &scale, &b])?]);
    }
    let (y, mean, inv) = if rms {
        let sq = ctx.mul(&xw, &xw)?;
        let ms = ctx.reduce(ReduceOp::Mean, &sq, &axes, true)?;
        let ve = ctx.binary_scalar(BinaryOp::Add, &ms, eps)?;
        let inv = ctx.unary(UnaryOp::Rsqrt, &ve)?;
        (ctx.mul(&xw, &inv)?, ms, inv)
    } else {
        standardize(ctx, &xw, &axes, eps)?
    };
    let y = ctx.cast(&y, d)?;
    let y = ctx.mul(&y, &scale)?;
    let y = match bias {
        Some(b) => ctx.add(&y, &b)?,
        None => y,
    };
    Ok(vec![y, mean, inv])
}

/// `LpNormalization` as the reference computes it: (sum x^p)^(1/p) along `axis`, and 0
/// where that norm is 0.
pub fn lp_norm(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let axis = ctx.axis(n.int("axis", -1)?, ctx.rank(&x))?;
    let p = n.int("p", 2)?;
    if p != 1 && p != 2 {
        invalid!("p = {p}; only 1 and 2 are defined");
    }
    let xp = if p == 2 { ctx.mul(&x, &x)? } else { x.clone() };
    let s = ctx.reduce(ReduceOp::Sum, &xp, &[axis], true)?;
    let norm = if p == 2 {
        ctx.unary(UnaryOp::Sqrt, &s)?
    } else {
        s
    };
    let zero = ctx.scalar_like(&x, 0.0);
    let is_zero = ctx.binary(BinaryOp::Eq, &norm, &zero)?;
    let q = ctx.div(&x, &norm)?;
    Ok(vec![ctx.where_(&is_zero, &zero, &q)?])
}

/// `MeanVarianceNormalization`: `(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`.
pub fn mvn(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let r = ctx.rank(&x);
    let axes = n.ints_opt("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = ctx.axes(&axes, r)?;
    let mean = ctx.reduce(ReduceOp::Mean, &x, &axes, true)?;
    let sq = ctx.mul(&x, &x)?;
    let ex2 = ctx.reduce(ReduceOp::Mean, &sq, &axes, true)?;
    let m2 = ctx.mul(&mean, &mean)?;
    let var = ctx.sub(&ex2, &m2)?;
    let std = ctx.unary(UnaryOp::Sqrt, &var)?;
    let std = ctx.binary_scalar(BinaryOp::Add, &std, 1e-9)?;
    let d = ctx.sub(&x, &mean)?;
    Ok(vec![ctx.div(&d, &std)?])
}

/// `LRN`: x / (bias + alpha / size * sum of squares over a channel window)^beta.
pub fn lrn(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let s = ctx.shape(&x)?;
    let alpha = n.float("alpha", 1e-4)? as f64;
    let beta = n.float("beta", 0.75)? as f64;
    let bias = n.float("bias", 1.0)? as f64;
    let Some(size) = n.int_opt("size")? else {
        invalid!("size is required");
    };
    if size <= 0 || s.len() < 2 {
        invalid!("size must be positive and the input at least 2-D");
    }
    let size = size as usize;
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let sq = ctx.mul(&x, &x)?;
    let mut pads = vec![(0, 0); s.len()];
    pads[1] = (before, after);
    let p = ctx.op(
        Op::Pad {
            pads,
            mode: rlx_ir::PadMode::Constant(0.0),
        },
        &[&sq],
    )?;
    let c = s[1] as i64;
    let mut sum = ctx.slice(&p, 1, 0, c, 1)?;
    for k in 1..size as i64 {
        let part = ctx.slice(&p, 1, k, k + c, 1)?;
        sum = ctx.add(&sum, &part)?;
    }
    let t = ctx.binary_scalar(BinaryOp::Mul, &sum, alpha / size as f64)?;
    let t = ctx.binary_scalar(BinaryOp::Add, &t, bias)?;
    let t = ctx.binary_scalar(BinaryOp::Pow, &t, beta)?;
    Ok(vec![ctx.div(&x, &t)?])
}
