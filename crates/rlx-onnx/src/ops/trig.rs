//! Trigonometric and hyperbolic functions the IR has no row for, as closed forms over
//! `exp`, `log`, `sqrt`, `sin`, `cos`, and a polynomial arctangent.

use crate::ctx::{unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, UnaryOp};
use std::f64::consts::{FRAC_PI_2, FRAC_PI_4};

/// `Tan`, `Sinh`, `Cosh`, `Asinh`, `Acosh`, `Atanh`, `Asin`, `Acos`, `Atan`.
pub fn trig(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    if !ctx.dtype(&x).is_float() {
        unsupported!("dtype {} is not supported (float only)", ctx.dtype(&x));
    }
    let y = match n.op_type() {
        "Tan" => {
            let s = ctx.unary(UnaryOp::Sin, &x)?;
            let c = ctx.unary(UnaryOp::Cos, &x)?;
            ctx.div(&s, &c)?
        }
        "Sinh" | "Cosh" => {
            let e = ctx.unary(UnaryOp::Exp, &x)?;
            let nx = ctx.unary(UnaryOp::Neg, &x)?;
            let en = ctx.unary(UnaryOp::Exp, &nx)?;
            let b = if n.op_type() == "Sinh" {
                BinaryOp::Sub
            } else {
                BinaryOp::Add
            };
            let s = ctx.binary(b, &e, &en)?;
            ctx.binary_scalar(BinaryOp::Mul, &s, 0.5)?
        }
        "Asinh" | "Acosh" => {
            let x2 = ctx.mul(&x, &x)?;
            let sign = if n.op_type() == "Asinh" { 1.0 } else { -1.0 };
            let r = ctx.binary_scalar(BinaryOp::Add, &x2, sign)?;
            let r = ctx.unary(UnaryOp::Sqrt, &r)?;
            let s = ctx.add(&x, &r)?;
            ctx.unary(UnaryOp::Log, &s)?
        }
        "Atanh" => {
            let one = ctx.scalar_like(&x, 1.0);
            let a = ctx.add(&one, &x)?;
            let b = ctx.sub(&one, &x)?;
            let q = ctx.div(&a, &b)?;
            let l = ctx.unary(UnaryOp::Log, &q)?;
            ctx.binary_scalar(BinaryOp::Mul, &l, 0.5)?
        }
        "Atan" => atan(ctx, &x)?,
        "Asin" | "Acos" => {
            // asin(x) = atan(x / sqrt(1 - x^2)); acos(x) = pi/2 - asin(x).
            let x2 = ctx.mul(&x, &x)?;
            let one = ctx.scalar_like(&x, 1.0);
            let r = ctx.sub(&one, &x2)?;
            let r = ctx.unary(UnaryOp::Sqrt, &r)?;
            let q = ctx.div(&x, &r)?;
            let a = atan(ctx, &q)?;
            if n.op_type() == "Asin" {
                a
            } else {
                let h = ctx.scalar_like(&x, FRAC_PI_2);
                ctx.sub(&h, &a)?
            }
        }
        other => unsupported!("{other} is not implemented"),
    };
    Ok(vec![y])
}

/// Arctangent: fold |x| into [0, 1] (1/x) and then into [0, tan(pi/8)] ((t-1)/(t+1)), where
/// the odd Taylor series to degree 17 is accurate to about 1e-8.
fn atan(ctx: &mut Ctx, x: &Val) -> R<Val> {
    let a = ctx.unary(UnaryOp::Abs, x)?;
    let big = ctx.binary_scalar(BinaryOp::Gt, &a, 1.0)?;
    let inv = ctx.unary(UnaryOp::Reciprocal, &a)?;
    let t = ctx.where_(&big, &inv, &a)?;
    let mid = ctx.binary_scalar(BinaryOp::Gt, &t, 0.414_213_562_373_095)?;
    let tm1 = ctx.binary_scalar(BinaryOp::Sub, &t, 1.0)?;
    let tp1 = ctx.binary_scalar(BinaryOp::Add, &t, 1.0)?;
    let q = ctx.div(&tm1, &tp1)?;
    let u = ctx.where_(&mid, &q, &t)?;
    let u2 = ctx.mul(&u, &u)?;
    // Horner in u2 = u^2: atan(u) = u * sum_k (-1)^k u2^k / (2k + 1).
    let mut p = ctx.scalar_like(x, 1.0 / 17.0);
    for k in (0..8).rev() {
        let c = if k % 2 == 0 { 1.0 } else { -1.0 } / (2 * k + 1) as f64;
        let pu = ctx.mul(&p, &u2)?;
        p = ctx.binary_scalar(BinaryOp::Add, &pu, c)?;
    }
    let r = ctx.mul(&u, &p)?;
    let rq = ctx.binary_scalar(BinaryOp::Add, &r, FRAC_PI_4)?;
    let r = ctx.where_(&mid, &rq, &r)?;
    let h = ctx.scalar_like(x, FRAC_PI_2);
    let rb = ctx.sub(&h, &r)?;
    let r = ctx.where_(&big, &rb, &r)?;
    let s = ctx.unary(UnaryOp::Sign, x)?;
    ctx.mul(&s, &r)
}
