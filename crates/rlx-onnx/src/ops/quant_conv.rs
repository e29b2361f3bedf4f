//! The integer convolutions, `ConvInteger` and `QLinearConv`, onto the IR's one integer
//! convolution ([`Op::ConvInteger`], requantized for `QLinearConv`); 3-D ones are widened
//! to an exact f64 convolution instead (`QLinearConv` then requantized as ONNX Runtime does).

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::node::NodeIn;
use crate::ops::conv::{as_2d, conv_window};
use crate::ops::quant::{centered, saturate_round};
use rlx_ir::{DType, IntConv, Op, UnaryOp};

/// A zero point as the op takes it: one value (`[]`), or with `per_channel` one per output
/// channel (`[m]`); absent, a zero of `dtype`.
fn zero_point(ctx: &mut Ctx, z: Option<Val>, dtype: DType, m: usize, what: &str) -> R<Val> {
    let Some(z) = z else {
        return Ok(ctx.scalar(dtype, 0.0));
    };
    if ctx.dtype(&z) != dtype {
        invalid!(
            "{what} must be {dtype} as its tensor is, got {}",
            ctx.dtype(&z)
        );
    }
    per_channel(ctx, &z, m, what)
}

/// One value as `[]`, or `m` values (one per output channel) as `[m]`.
fn per_channel(ctx: &mut Ctx, v: &Val, m: usize, what: &str) -> R<Val> {
    let s = ctx.shape(v)?;
    match s.iter().product::<usize>() {
        1 => ctx.reshape(v, &[]),
        c if c == m && s.len() == 1 => Ok(v.clone()),
        _ => {
            invalid!("{what} must hold one value or one per output channel ({m}), got shape {s:?}")
        }
    }
}

/// Checks the operands are 8-bit integers and returns the weight's output channels.
fn operands(ctx: &Ctx, x: &Val, w: &Val) -> R<usize> {
    let (dx, dw) = (ctx.dtype(x), ctx.dtype(w));
    let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
    if !byte(dx) || !byte(dw) {
        invalid!("x and w must be u8 or i8, got {dx} and {dw}");
    }
    let ws = ctx.shape(w)?;
    match ws.first() {
        Some(&m) if m > 0 => Ok(m),
        _ => invalid!("weight shape {ws:?} has no output channels"),
    }
}

/// `ConvInteger`: the i32 convolution of zero-point-centred operands.
pub fn conv_integer(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let m = operands(ctx, &x, &w)?;
    let (dx, dw) = (ctx.dtype(&x), ctx.dtype(&w));
    let Some(conv) = conv_window(ctx, n, &x, &w)? else {
        return conv_integer_3d(ctx, n, &x, &w);
    };
    let xz = zero_point(ctx, n.opt(2), dx, 1, "x_zero_point")?;
    let wz = zero_point(ctx, n.opt(3), dw, m, "w_zero_point")?;
    let p = IntConv {
        conv,
        requantize: false,
    };
    let y = as_2d(ctx, &x, &w, |ctx, x, w| {
        ctx.op(Op::ConvInteger(p), &[&x, &w, &xz, &wz])
    })?;
    Ok(vec![y])
}

/// 3-D `ConvInteger`: centred operands convolved exactly in f64, as i32.
fn conv_integer_3d(ctx: &mut Ctx, n: &NodeIn, x: &Val, w: &Val) -> R<Vec<Val>> {
    if n.opt(3)
        .is_some_and(|z| ctx.shape(&z).is_ok_and(|s| s.iter().product::<usize>() > 1))
    {
        unsupported!("per-channel weight zero points in a 3-D ConvInteger");
    }
    let x = centered(ctx, x, n.opt(2))?;
    let w = centered(ctx, w, n.opt(3))?;
    let xf = ctx.cast(&x, DType::F64)?;
    let wf = ctx.cast(&w, DType::F64)?;
    let y = crate::ops::conv3d::conv3d(ctx, n, &xf, &wf, None)?;
    if y.is_empty() {
        invalid!("no output");
    }
    Ok(vec![ctx.cast(&y[0], DType::I32)?])
}

/// 3-D `QLinearConv` (`rest`: x and w zero points, the combined scale `[]` or `[m]`, y's
/// zero point, the bias): the exact convolution of the centred operands in f64, plus the
/// bias, times the scale in f32, rounded half to even, plus y's zero point, saturated.
fn qlinear_conv_3d(
    ctx: &mut Ctx,
    n: &NodeIn,
    x: &Val,
    w: &Val,
    m: usize,
    rest: &[Val],
) -> R<Vec<Val>> {
    if n.opt(5)
        .is_some_and(|z| ctx.shape(&z).is_ok_and(|s| s.iter().product::<usize>() > 1))
    {
        unsupported!("per-channel weight zero points in a 3-D QLinearConv");
    }
    let x = centered(ctx, x, n.opt(2))?;
    let w = centered(ctx, w, n.opt(5))?;
    let xf = ctx.cast(&x, DType::F64)?;
    let wf = ctx.cast(&w, DType::F64)?;
    let Some(mut acc) = crate::ops::conv3d::conv3d(ctx, n, &xf, &wf, None)?
        .into_iter()
        .next()
    else {
        invalid!("no output");
    };
    let per_channel = |ctx: &mut Ctx, v: &Val| -> R<Val> {
        if ctx.rank(v) == 1 {
            ctx.reshape(v, &[1, m, 1, 1, 1])
        } else {
            Ok(v.clone())
        }
    };
    if let Some(b) = rest.get(4) {
        let b = ctx.cast(b, DType::F64)?;
        let b = per_channel(ctx, &b)?;
        acc = ctx.add(&acc, &b)?;
    }
    let acc = ctx.cast(&acc, DType::F32)?;
    let scale = per_channel(ctx, &rest[2])?;
    let y = ctx.mul(&acc, &scale)?;
    let y = ctx.unary(UnaryOp::Round, &y)?;
    let to = ctx.dtype(&rest[3]);
    let yz = ctx.cast(&rest[3], DType::F32)?;
    let y = ctx.add(&y, &yz)?;
    Ok(vec![saturate_round(ctx, &y, to)?])
}

/// `QLinearConv`: the integer convolution plus the i32 bias, requantized with
/// `x_scale * w_scale / y_scale` (in f32, one value or one per output channel) to
/// `y_zero_point`'s dtype (`x`'s when absent).
pub fn qlinear_conv(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, w) = (n.input(0)?, n.input(3)?);
    let m = operands(ctx, &x, &w)?;
    let (dx, dw) = (ctx.dtype(&x), ctx.dtype(&w));
    let conv = conv_window(ctx, n, &x, &w)?;
    let xz = zero_point(ctx, n.opt(2), dx, 1, "x_zero_point")?;
    let wz = zero_point(ctx, n.opt(5), dw, m, "w_zero_point")?;
    let yz = match n.opt(7) {
        Some(z) => {
            let d = ctx.dtype(&z);
            if !matches!(d, DType::U8 | DType::I8) {
                invalid!("y_zero_point must be u8 or i8, got {d}");
            }
            zero_point(ctx, Some(z), d, 1, "y_zero_point")?
        }
        None => ctx.scalar(dx, 0.0),
    };
    let mut scales = Vec::new();
    for (i, what) in [(1, "x_scale"), (4, "w_scale"), (6, "y_scale")] {
        let s = n.input(i)?;
        let d = ctx.dtype(&s);
        if !d.is_float() {
            invalid!("{what} must be a float tensor, got {d}");
        }
        let s = ctx.cast(&s, DType::F32)?;
        let width = if i == 4 { m } else { 1 };
        scales.push(per_channel(ctx, &s, width, what)?);
    }
    let mul = ctx.mul(&scales[0], &scales[1])?;
    let mul = ctx.div(&mul, &scales[2])?;
    let mut rest = vec![xz, wz, mul, yz];
    if let Some(b) = n.opt(8) {
        if ctx.dtype(&b) != DType::I32 || ctx.shape(&b)? != [m] {
            invalid!(
                "B must be i32[{m}], got {}{:?}",
                ctx.dtype(&b),
                ctx.shape(&b)?
            );
        }
        rest.push(b);
    }
    let Some(conv) = conv else {
        return qlinear_conv_3d(ctx, n, &x, &w, m, &rest);
    };
    let p = IntConv {
        conv,
        requantize: true,
    };
    let y = as_2d(ctx, &x, &w, |ctx, x, w| {
        let mut ins = vec![&x, &w];
        ins.extend(rest.iter());
        ctx.op(Op::ConvInteger(p), &ins)
    })?;
    Ok(vec![y])
}
