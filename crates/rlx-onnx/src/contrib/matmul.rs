//! Products: `FusedMatMul` (transposes and a scale folded into a MatMul),
//! `DynamicQuantizeMatMul` (A quantized to u8 at run time as `DynamicQuantizeLinear` does,
//! times an int8 weight) and `MatMulIntegerToFloat` (int8 by int8, scaled to float).
//! The integer products run on the integer product op (`crate::ops::quant::integer_product`)
//! where its operands fit it (a 2-D weight); otherwise as f32 products of
//! zero-point-centered integers, exact while their sums stay below 2^24.

use super::activation::float_input;
use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::linalg::matmul_np;
use rlx_ir::{AInput, BinaryOp, DType, IntMatMul, Op, UnaryOp};

/// Swaps the last two dims (vectors stay as they are).
fn swap_last(ctx: &mut Ctx, x: &Val) -> R<Val> {
    let r = ctx.rank(x);
    if r < 2 {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    ctx.transpose(x, &perm)
}

/// `FusedMatMul`: `alpha * op(A) · op(B)` with `transA`/`transB`.
pub fn fused_matmul(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let mut a = float_input(ctx, n, 0)?;
    let mut b = n.input(1)?;
    for attr in ["transBatchA", "transBatchB"] {
        if n.int(attr, 0)? != 0 {
            unsupported!("{attr} = 1");
        }
    }
    if n.int("transA", 0)? != 0 {
        a = swap_last(ctx, &a)?;
    }
    if n.int("transB", 0)? != 0 {
        b = swap_last(ctx, &b)?;
    }
    let alpha = n.float("alpha", 1.0)? as f64;
    let y = matmul_np(ctx, &a, &b)?;
    Ok(vec![if alpha == 1.0 {
        y
    } else {
        ctx.binary_scalar(BinaryOp::Mul, &y, alpha)?
    }])
}

/// `x - zp` as f32 (zp optional; a 1-D zp of B applies per column).
fn centered_f32(ctx: &mut Ctx, x: &Val, zp: Option<Val>, per_column: bool) -> R<Val> {
    let d = ctx.dtype(x);
    if !matches!(d, DType::U8 | DType::I8) {
        invalid!("quantized operand must be u8 or i8, got {d}");
    }
    let xf = ctx.cast(x, DType::F32)?;
    let Some(z) = zp else {
        return Ok(xf);
    };
    let z = ctx.cast(&z, DType::F32)?;
    let z = if per_column && ctx.rank(&z) == 1 && ctx.shape(&z)?[0] > 1 {
        let c = ctx.shape(&z)?[0];
        ctx.reshape(&z, &[1, c])?
    } else {
        z
    };
    ctx.sub(&xf, &z)
}

/// A scale of B: scalar, or one per column.
fn column_scale(ctx: &mut Ctx, s: &Val) -> R<Val> {
    let s = ctx.cast(s, DType::F32)?;
    if ctx.shape(&s)?.iter().product::<usize>() == 1 {
        return ctx.reshape(&s, &[]);
    }
    Ok(s)
}

/// `product * a_scale * b_scale + bias`.
fn rescale(ctx: &mut Ctx, y: &Val, a_scale: &Val, b_scale: &Val, bias: Option<Val>) -> R<Val> {
    let k = ctx.mul(a_scale, b_scale)?;
    let y = ctx.mul(y, &k)?;
    match bias {
        Some(b) => ctx.add(&y, &b),
        None => Ok(y),
    }
}

/// `DynamicQuantizeMatMul`: inputs A (f32), B (int8), b_scale, b_zero_point?, bias?.
pub fn dynamic_quantize_matmul(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let a = float_input(ctx, n, 0)?;
    let af = ctx.cast(&a, DType::F32)?;
    let b = n.input(1)?;
    if matches!(ctx.dtype(&b), DType::U8 | DType::I8) {
        // A quantized by the product itself from its own range, as DynamicQuantizeLinear
        // does, and that scale times b_scale applied to the sums
        let b_scale = column_scale(ctx, &n.input(2)?)?;
        if let Some(y) = fused_dynamic(ctx, &af, &b, n.opt(3), &b_scale)? {
            let y = match n.opt(4) {
                Some(bias) => ctx.add(&y, &bias)?,
                None => y,
            };
            let d = ctx.dtype(&a);
            return Ok(vec![ctx.cast(&y, d)?]);
        }
    }
    let (a_scale, a_zp) = crate::ops::quant::dynamic_quantize_params(ctx, &af)?;
    // saturate(round(a / scale) + zp) - zp, all in f32: clamp(round(a / scale), -zp, 255 - zp)
    let q = ctx.div(&af, &a_scale)?;
    let q = ctx.unary(UnaryOp::Round, &q)?;
    let lo = ctx.unary(UnaryOp::Neg, &a_zp)?;
    let hi = ctx.binary_scalar(BinaryOp::Sub, &lo, -255.0)?;
    let q = ctx.binary(BinaryOp::Max, &q, &lo)?;
    let ac = ctx.binary(BinaryOp::Min, &q, &hi)?;
    let bc = centered_f32(ctx, &n.input(1)?, n.opt(3), true)?;
    let y = matmul_np(ctx, &ac, &bc)?;
    let b_scale = column_scale(ctx, &n.input(2)?)?;
    let y = rescale(ctx, &y, &a_scale, &b_scale, n.opt(4))?;
    let d = ctx.dtype(&a);
    Ok(vec![ctx.cast(&y, d)?])
}

/// `x` (f32) quantized dynamically by [`Op::MatMulInteger`] itself, times `b`, the sums
/// scaled by the activation's scale and `b_scale`; None when `b` or the scale are outside
/// what the op takes.
pub(crate) fn fused_dynamic(
    ctx: &mut Ctx,
    x: &Val,
    b: &Val,
    b_zero: Option<Val>,
    b_scale: &Val,
) -> R<Option<Val>> {
    let Some(bs) = ctx.ty(b).shape.as_static() else {
        return Ok(None);
    };
    let n_cols = bs.last().copied().unwrap_or(0);
    let fit = |ctx: &mut Ctx, v: &Val| -> R<Option<Val>> {
        let numel: usize = ctx.shape(v)?.iter().product();
        Ok(match numel {
            1 => Some(ctx.reshape(v, &[])?),
            c if c == n_cols => Some(ctx.reshape(v, &[c])?),
            _ => None,
        })
    };
    let b_zero = match b_zero {
        None => Some(ctx.scalar(ctx.dtype(b), 0.0)),
        Some(z) => fit(ctx, &z)?,
    };
    let scale = fit(ctx, b_scale)?;
    let (Some(b_zero), Some(scale), 2, true) = (b_zero, scale, bs.len(), ctx.rank(x) >= 1) else {
        return Ok(None);
    };
    let p = IntMatMul {
        a: AInput::Dynamic,
        scaled: true,
    };
    Ok(Some(
        ctx.op(Op::MatMulInteger(p), &[x, b, &b_zero, &scale])?,
    ))
}

/// `MatMulIntegerToFloat`: inputs A, B (int8), a_scale, b_scale, a_zero_point?,
/// b_zero_point?, bias?.
pub fn matmul_integer_to_float(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let a_scale = n.input(2)?;
    if ctx.shape(&a_scale)?.iter().product::<usize>() != 1 {
        unsupported!("a_scale with more than one value (per-row scales of A)");
    }
    let out = ctx.dtype(&a_scale);
    let a_scale = ctx.cast(&a_scale, DType::F32)?;
    let a_scale = ctx.reshape(&a_scale, &[])?;
    // A from `DynamicQuantizeLinear` with its own scale and zero point: the product
    // quantizes the source from its range itself, as `DynamicQuantizeMatMul`
    if let Some(y) = dynamic_source(ctx, n, &a_scale)? {
        let y = match n.opt(6) {
            Some(bias) => ctx.add(&y, &bias)?,
            None => y,
        };
        return Ok(vec![ctx.cast(&y, out)?]);
    }
    {
        let b_scale = column_scale(ctx, &n.input(3)?)?;
        let k = ctx.mul(&a_scale, &b_scale)?;
        let (a, b) = (n.input(0)?, n.input(1)?);
        let product = crate::ops::quant::integer_product(ctx, &a, &b, n.opt(4), n.opt(5), Some(k))?;
        if let Some(y) = product {
            let y = match n.opt(6) {
                Some(bias) => ctx.add(&y, &bias)?,
                None => y,
            };
            return Ok(vec![ctx.cast(&y, out)?]);
        }
    }
    let ac = centered_f32(ctx, &n.input(0)?, n.opt(4), false)?;
    let bc = centered_f32(ctx, &n.input(1)?, n.opt(5), true)?;
    let y = matmul_np(ctx, &ac, &bc)?;
    let b_scale = column_scale(ctx, &n.input(3)?)?;
    let y = rescale(ctx, &y, &a_scale, &b_scale, n.opt(6))?;
    Ok(vec![ctx.cast(&y, out)?])
}

/// `MatMulIntegerToFloat` of a `DynamicQuantizeLinear` result `A` with that quantization's
/// own scale (`a_scale`) and zero point, as [`Op::MatMulInteger`] with [`AInput::Dynamic`]:
/// the same scale, zero point and `f32(sum) * (a_scale * b_scale)`, without the separate
/// range reductions. None for any other `A`.
fn dynamic_source(ctx: &mut Ctx, n: &NodeIn, a_scale: &Val) -> R<Option<Val>> {
    let a = n.input(0)?;
    let Val::Node(id) = &a else {
        return Ok(None);
    };
    let Some((x, s, z)) = ctx.dynamic_quantized.get(id).cloned() else {
        return Ok(None);
    };
    let same_zero = n.opt(4).is_some_and(|az| match (&az, &z) {
        (Val::Node(p), Val::Node(q)) => p == q,
        _ => false,
    });
    let same_scale = matches!((a_scale, &s), (Val::Node(p), Val::Node(q)) if p == q);
    let b = n.input(1)?;
    if !same_zero || !same_scale || !matches!(ctx.dtype(&b), DType::U8 | DType::I8) {
        return Ok(None);
    }
    let b_scale = column_scale(ctx, &n.input(3)?)?;
    fused_dynamic(ctx, &x, &b, n.opt(5), &b_scale)
}
