//! ONNX Runtime's int8 elementwise ops, pooling and concatenation: `QLinearAdd`,
//! `QLinearMul`, `QLinearSigmoid`, `QLinearLeakyRelu`, `QLinearGlobalAveragePool` and
//! `QLinearConcat`. Each dequantizes its operands (`(q - zero_point) * scale`), computes in
//! f32 and requantizes (round half to even, saturate) with the output's scale and zero
//! point, which is how ONNX Runtime defines them (its kernels may differ by one step).

use crate::ctx::{invalid, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::quant::saturate_round;
use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// `(q - zp) * scale` in f32 (zp optional).
fn dequant(ctx: &mut Ctx, q: &Val, scale: &Val, zp: Option<Val>) -> R<Val> {
    let d = ctx.dtype(q);
    if !matches!(d, DType::U8 | DType::I8) {
        invalid!("quantized input must be u8 or i8, got {d}");
    }
    let mut x = ctx.cast(q, DType::F32)?;
    if let Some(z) = zp {
        let z = ctx.cast(&z, DType::F32)?;
        x = ctx.sub(&x, &z)?;
    }
    let s = ctx.cast(scale, DType::F32)?;
    ctx.mul(&x, &s)
}

/// `saturate(round(x / scale) + zp)` as `to`.
fn requant(ctx: &mut Ctx, x: &Val, scale: &Val, zp: Option<Val>, to: DType) -> R<Val> {
    let s = ctx.cast(scale, DType::F32)?;
    let y = ctx.div(x, &s)?;
    let mut y = ctx.unary(UnaryOp::Round, &y)?;
    if let Some(z) = zp {
        let z = ctx.cast(&z, DType::F32)?;
        y = ctx.add(&y, &z)?;
    }
    saturate_round(ctx, &y, to)
}

/// Operand `i` dequantized from inputs `i`, `i + 1` (scale), `i + 2` (zero point).
fn operand(ctx: &mut Ctx, n: &NodeIn, i: usize) -> R<Val> {
    dequant(ctx, &n.input(i)?, &n.input(i + 1)?, n.opt(i + 2))
}

/// The result requantized with inputs `i` (scale) and `i + 1` (zero point), in the dtype
/// of input 0.
fn result(ctx: &mut Ctx, n: &NodeIn, y: &Val, i: usize) -> R<Val> {
    let to = ctx.dtype(&n.input(0)?);
    requant(ctx, y, &n.input(i)?, n.opt(i + 1), to)
}

/// `QLinearAdd` / `QLinearMul`: inputs A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?.
pub fn binary(ctx: &mut Ctx, n: &NodeIn, op: BinaryOp) -> R<Vec<Val>> {
    let a = operand(ctx, n, 0)?;
    let b = operand(ctx, n, 3)?;
    let y = ctx.binary(op, &a, &b)?;
    Ok(vec![result(ctx, n, &y, 6)?])
}

/// `QLinearSigmoid`: inputs X, X_scale, X_zp?, Y_scale, Y_zp?.
pub fn sigmoid(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = operand(ctx, n, 0)?;
    let y = ctx.unary(UnaryOp::Sigmoid, &x)?;
    Ok(vec![result(ctx, n, &y, 3)?])
}

/// `QLinearLeakyRelu`: inputs X, X_scale, X_zp?, Y_scale, Y_zp?; `alpha` (0.01).
pub fn leaky_relu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let alpha = n.float("alpha", 0.01)? as f64;
    let x = operand(ctx, n, 0)?;
    let ax = ctx.binary_scalar(BinaryOp::Mul, &x, alpha)?;
    let zero = ctx.scalar(DType::F32, 0.0);
    let pos = ctx.binary(BinaryOp::Ge, &x, &zero)?;
    let y = ctx.where_(&pos, &x, &ax)?;
    Ok(vec![result(ctx, n, &y, 3)?])
}

/// `QLinearGlobalAveragePool`: the mean over the spatial dims (NCHW..., or NHWC... with
/// `channels_last`), kept as size 1.
pub fn global_average_pool(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let channels_last = n.int("channels_last", 0)? != 0;
    let x = operand(ctx, n, 0)?;
    let r = ctx.rank(&x);
    if r < 3 {
        invalid!("input must have rank >= 3, got {r}");
    }
    let axes: Vec<usize> = if channels_last {
        (1..r - 1).collect()
    } else {
        (2..r).collect()
    };
    let y = ctx.reduce(ReduceOp::Mean, &x, &axes, true)?;
    Ok(vec![result(ctx, n, &y, 3)?])
}

/// `QLinearConcat`: inputs Y_scale, Y_zp, then (X, X_scale, X_zp) per operand; `axis`.
pub fn concat(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let Some(axis) = n.int_opt("axis")? else {
        invalid!("axis is required");
    };
    if n.n_inputs() < 5 || !(n.n_inputs() - 2).is_multiple_of(3) {
        invalid!(
            "inputs must be Y_scale, Y_zp and triples (X, scale, zero point), got {} inputs",
            n.n_inputs()
        );
    }
    let first = n.input(2)?;
    let to = ctx.dtype(&first);
    let axis = ctx.axis(axis, ctx.rank(&first))?;
    let mut parts = Vec::new();
    for i in (2..n.n_inputs()).step_by(3) {
        parts.push(operand(ctx, n, i)?);
    }
    let y = ctx.concat(&parts, axis)?;
    Ok(vec![requant(ctx, &y, &n.input(0)?, n.opt(1), to)?])
}
