//! GELU variants and bias fusions: `Gelu` (erf), `BiasGelu` (x + bias, erf GELU),
//! `FastGelu` (optional bias, tanh GELU), `QuickGelu` (x * sigmoid(alpha * x)),
//! `BiasAdd` (x + bias + skip) and `BiasSplitGelu` (x + bias cut in two halves along the
//! channels, left * gelu(right)).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, UnaryOp};

/// Input `i`, refused unless it is a float tensor.
pub(crate) fn float_input(ctx: &Ctx, n: &NodeIn, i: usize) -> R<Val> {
    let x = n.input(i)?;
    let d = ctx.dtype(&x);
    if !d.is_float() {
        unsupported!("input {i} has dtype {d} (float only)");
    }
    Ok(x)
}

/// `x + bias` when the optional input `i` is given.
fn plus_opt(ctx: &mut Ctx, n: &NodeIn, x: Val, i: usize) -> R<Val> {
    match n.opt(i) {
        Some(b) => ctx.add(&x, &b),
        None => Ok(x),
    }
}

/// `Gelu`: the exact (erf) form.
pub fn gelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    Ok(vec![ctx.unary(UnaryOp::GELU, &x)?])
}

/// `BiasGelu`: erf GELU of `x + bias`.
pub fn bias_gelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let y = ctx.add(&x, &n.input(1)?)?;
    Ok(vec![ctx.unary(UnaryOp::GELU, &y)?])
}

/// `FastGelu`: tanh GELU of `x` (+ an optional bias).
pub fn fast_gelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let y = plus_opt(ctx, n, x, 1)?;
    Ok(vec![ctx.unary(UnaryOp::GELU_TANH, &y)?])
}

/// `QuickGelu`: `x * sigmoid(alpha * x)`, alpha 1.702 by default.
pub fn quick_gelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let alpha = n.float("alpha", 1.702)? as f64;
    let ax = ctx.binary_scalar(BinaryOp::Mul, &x, alpha)?;
    let s = ctx.unary(UnaryOp::Sigmoid, &ax)?;
    Ok(vec![ctx.mul(&x, &s)?])
}

/// `BiasAdd`: `x + bias + skip`.
pub fn bias_add(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let y = ctx.add(&x, &n.input(1)?)?;
    Ok(vec![ctx.add(&y, &n.input(2)?)?])
}

/// `BiasSplitGelu`: `x + bias` cut into halves along the last dim; left * gelu(right).
pub fn bias_split_gelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = float_input(ctx, n, 0)?;
    let y = ctx.add(&x, &n.input(1)?)?;
    let r = ctx.rank(&y);
    let c = match ctx.dims(&y).last().and_then(|d| d.as_static()) {
        Some(c) if c % 2 == 0 => c as i64,
        other => invalid!("the channel count {other:?} must be static and even"),
    };
    let left = ctx.slice(&y, r - 1, 0, c / 2, 1)?;
    let right = ctx.slice(&y, r - 1, c / 2, c, 1)?;
    let g = ctx.unary(UnaryOp::GELU, &right)?;
    Ok(vec![ctx.mul(&left, &g)?])
}
