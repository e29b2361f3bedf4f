//! Elementwise ops: the IR's unary and binary rows, variadic folds, casts, and activations
//! decomposed into those rows.

use crate::ctx::{invalid, unsupported, Ctx, Val, R};
use crate::dtype::to_dtype;
use crate::node::NodeIn;
use rlx_ir::{BinaryOp, Composite, DType, UnaryOp};

/// A mapper producing one value.
fn one(v: Val) -> R<Vec<Val>> {
    Ok(vec![v])
}

/// An op that is one IR unary row.
pub fn unary(ctx: &mut Ctx, n: &NodeIn, u: UnaryOp) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let d = ctx.dtype(&x);
    if !u.accepts(d) {
        unsupported!("dtype {d} is not supported by {}", u.name());
    }
    one(ctx.unary(u, &x)?)
}

/// Opsets before 7 broadcast the second operand only with `broadcast=1`, aligned at `axis`
/// (trailing dims when no axis is given); the result is `y` reshaped for numpy rules.
pub fn legacy_broadcast(ctx: &mut Ctx, n: &NodeIn, x: &Val, y: Val) -> R<Val> {
    if n.opset >= 7 {
        return Ok(y);
    }
    let b = n.int("broadcast", 0)?;
    let axis = n.int_opt("axis")?;
    let (rx, ry) = (ctx.rank(x), ctx.rank(&y));
    match (b, axis) {
        (0, _) => {
            if ctx.dims(x) != ctx.dims(&y) {
                invalid!(
                    "operands differ in shape without broadcast=1 (opset {})",
                    n.opset
                );
            }
            Ok(y)
        }
        (_, Some(a)) => {
            let a = if a < 0 { a + rx as i64 } else { a } as usize;
            if a + ry > rx {
                invalid!("broadcast axis {a} does not fit rank {ry} into rank {rx}");
            }
            let mut dims = vec![rlx_ir::Dim::Static(1); a];
            dims.extend(ctx.dims(&y));
            dims.resize(rx, rlx_ir::Dim::Static(1));
            ctx.reshape_dims(&y, dims)
        }
        _ => Ok(y),
    }
}

/// An op that is one IR binary row (numpy broadcasting, equal dtypes).
pub fn binary(ctx: &mut Ctx, n: &NodeIn, b: BinaryOp) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let y = legacy_broadcast(ctx, n, &x, n.input(1)?)?;
    let d = ctx.dtype(&x);
    if !b.accepts(d) {
        unsupported!("dtype {d} is not supported by {}", b.name());
    }
    if b == BinaryOp::Mul {
        if let Some(v) = crate::ops::quant::dynamic_rescale(ctx, &x, &y)? {
            return one(v);
        }
    }
    one(ctx.binary(b, &x, &y)?)
}

/// `Max`, `Min`, `Sum`, `Mean`: a left fold over any number of inputs.
pub fn variadic(ctx: &mut Ctx, n: &NodeIn, b: BinaryOp, mean: bool) -> R<Vec<Val>> {
    let mut acc = n.input(0)?;
    for i in 1..n.n_inputs() {
        acc = ctx.binary(b, &acc, &n.input(i)?)?;
    }
    if mean {
        acc = ctx.binary_scalar(BinaryOp::Div, &acc, n.n_inputs() as f64)?;
    }
    one(acc)
}

/// `Mod`: floored for `fmod=0` (integers), truncated for `fmod=1`.
pub fn modulo(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let fmod = n.int("fmod", 0)?;
    let b = if fmod == 1 {
        BinaryOp::FMod
    } else {
        BinaryOp::Mod
    };
    binary(ctx, n, b)
}

/// `Pow`: the exponent may have another dtype; it is converted to the base's.
pub fn pow(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let y = legacy_broadcast(ctx, n, &x, n.input(1)?)?;
    let y = ctx.cast(&y, ctx.dtype(&x))?;
    one(ctx.binary(BinaryOp::Pow, &x, &y)?)
}

/// `Identity`.
pub fn identity(_ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    one(n.input(0)?)
}

/// `Cast` to the `to` attribute.
pub fn cast(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let to = n.int_opt("to")?.ok_or_else(|| fail_attr("to"))?;
    let to = to_dtype(to as i32).map_err(crate::ctx::Fail::Unsupported)?;
    let y = onnx_cast(
        ctx,
        &x,
        to,
        n.int("saturate", 1)? != 0,
        &n.string("round_mode", "up")?,
    )?;
    one(y)
}

/// `CastLike`: cast to the dtype of the second input.
pub fn cast_like(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, like) = (n.input(0)?, n.input(1)?);
    let d = ctx.dtype(&like);
    let y = onnx_cast(
        ctx,
        &x,
        d,
        n.int("saturate", 1)? != 0,
        &n.string("round_mode", "up")?,
    )?;
    one(y)
}

/// ONNX's cast: the IR cast, which rounds the narrow floats without saturating, after a
/// clamp to the target's finite range when `saturate` is set and the target is a float8
/// with a NaN or infinity to overflow to (the clamp keeps NaN: the IR's max/min propagate
/// it). `round_mode` applies to `f8e8m0`, whose IR rule is ONNX's default ("up",
/// saturating).
pub fn onnx_cast(ctx: &mut Ctx, x: &Val, to: DType, saturate: bool, round_mode: &str) -> R<Val> {
    if to == DType::F8E8M0 && (round_mode != "up" || !saturate) {
        unsupported!("cast to f8e8m0 with round_mode `{round_mode}` and saturate {saturate}");
    }
    if !matches!(round_mode, "up" | "down" | "nearest") {
        invalid!("round_mode `{round_mode}` is not one of up, down, nearest");
    }
    let overflows = matches!(
        to,
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ
    );
    if !saturate || !overflows || ctx.dtype(x) == to {
        return ctx.cast(x, to);
    }
    let max = to.max_finite().expect("float8 types have a largest value");
    let from = ctx.dtype(x);
    let wide = if matches!(from, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        x.clone()
    } else {
        ctx.cast(x, DType::F32)?
    };
    let y = ctx.binary_scalar(BinaryOp::Min, &wide, max)?;
    let y = ctx.binary_scalar(BinaryOp::Max, &y, -max)?;
    ctx.cast(&y, to)
}

fn fail_attr(name: &str) -> crate::ctx::Fail {
    crate::ctx::Fail::Invalid(format!("required attribute `{name}` is missing"))
}

/// `Clip`: bounds as inputs (opset 11+) or attributes (before).
pub fn clip(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let (lo, hi) = if n.opset < 11 {
        let lo = n.float("min", f32::MIN)?;
        let hi = n.float("max", f32::MAX)?;
        (
            Some(ctx.scalar_like(&x, lo as f64)),
            Some(ctx.scalar_like(&x, hi as f64)),
        )
    } else {
        (n.opt(1), n.opt(2))
    };
    let mut y = x;
    if let Some(lo) = lo {
        y = ctx.binary(BinaryOp::Max, &y, &lo)?;
    }
    if let Some(hi) = hi {
        y = ctx.binary(BinaryOp::Min, &y, &hi)?;
    }
    one(y)
}

/// `Where`.
pub fn where_(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    one(ctx.where_(&n.input(0)?, &n.input(1)?, &n.input(2)?)?)
}

/// `IsNaN`: x != x.
pub fn is_nan(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    one(ctx.binary(BinaryOp::Ne, &x, &x)?)
}

/// `IsInf` with `detect_negative` / `detect_positive`.
pub fn is_inf(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let neg = n.int("detect_negative", 1)? != 0;
    let pos = n.int("detect_positive", 1)? != 0;
    let pinf = ctx.binary_scalar(BinaryOp::Eq, &x, f64::INFINITY)?;
    let ninf = ctx.binary_scalar(BinaryOp::Eq, &x, f64::NEG_INFINITY)?;
    one(match (neg, pos) {
        (true, true) => ctx.binary(BinaryOp::Or, &pinf, &ninf)?,
        (false, true) => pinf,
        (true, false) => ninf,
        (false, false) => ctx.binary(BinaryOp::And, &pinf, &ninf)?,
    })
}

/// `BitShift`: the IR's shifts (unsigned operands in ONNX).
pub fn bit_shift(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let dir = n
        .string_opt("direction")?
        .ok_or_else(|| fail_attr("direction"))?;
    match dir.as_str() {
        "LEFT" => binary(ctx, n, BinaryOp::Shl),
        "RIGHT" => binary(ctx, n, BinaryOp::Shr),
        other => invalid!("direction `{other}` is neither LEFT nor RIGHT"),
    }
}

/// `BitCast`: the same bits read as the `to` dtype.
pub fn bit_cast(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let to = n.int_opt("to")?.ok_or_else(|| fail_attr("to"))?;
    let to = to_dtype(to as i32).map_err(crate::ctx::Fail::Unsupported)?;
    let from = ctx.dtype(&x);
    if from.bits() != to.bits() || from.bits() < 8 {
        invalid!("BitCast from {from} to {to}: the element widths differ");
    }
    if from == to {
        return one(x);
    }
    one(ctx.op(rlx_ir::Op::BitCast(to), &[&x])?)
}

/// `SwiGLU`: `Swish_alpha(a) * b`, the gate `a` times `sigmoid(alpha * a)`, times `b`.
pub fn swiglu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    let d = ctx.dtype(&a);
    if !d.is_float() || d.is_narrow() {
        unsupported!("dtype {d} is not supported (float only)");
    }
    if ctx.dims(&a) != ctx.dims(&b) {
        invalid!("SwiGLU inputs must have the same shape");
    }
    let alpha = float_attr(n, "alpha", 1.0)?;
    let ax = ctx.binary_scalar(BinaryOp::Mul, &a, alpha)?;
    let s = ctx.unary(UnaryOp::Sigmoid, &ax)?;
    let gate = ctx.mul(&a, &s)?;
    one(ctx.mul(&gate, &b)?)
}

fn float_attr(n: &NodeIn, name: &str, default: f32) -> R<f64> {
    Ok(n.float(name, default)? as f64)
}

/// Activations with closed forms over IR rows.
pub fn activation(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    if !ctx.dtype(&x).is_float() {
        unsupported!("dtype {} is not supported (float only)", ctx.dtype(&x));
    }
    let zero = ctx.scalar_like(&x, 0.0);
    let y = match n.op_type() {
        "LeakyRelu" => {
            let a = float_attr(n, "alpha", 0.01)?;
            let ax = ctx.binary_scalar(BinaryOp::Mul, &x, a)?;
            let c = ctx.binary(BinaryOp::Ge, &x, &zero)?;
            ctx.where_(&c, &x, &ax)?
        }
        "Elu" | "Celu" => {
            let a = float_attr(n, "alpha", 1.0)?;
            let xs = if n.op_type() == "Celu" {
                ctx.binary_scalar(BinaryOp::Div, &x, a)?
            } else {
                x.clone()
            };
            let e = ctx.unary(UnaryOp::Exp, &xs)?;
            let em1 = ctx.binary_scalar(BinaryOp::Sub, &e, 1.0)?;
            let neg = ctx.binary_scalar(BinaryOp::Mul, &em1, a)?;
            let c = ctx.binary(BinaryOp::Gt, &x, &zero)?;
            ctx.where_(&c, &x, &neg)?
        }
        "Selu" => {
            let a = float_attr(n, "alpha", 1.673_263_2)?;
            let g = float_attr(n, "gamma", 1.050_701)?;
            let e = ctx.unary(UnaryOp::Exp, &x)?;
            let em1 = ctx.binary_scalar(BinaryOp::Sub, &e, 1.0)?;
            let neg = ctx.binary_scalar(BinaryOp::Mul, &em1, a)?;
            let c = ctx.binary(BinaryOp::Gt, &x, &zero)?;
            let y = ctx.where_(&c, &x, &neg)?;
            ctx.binary_scalar(BinaryOp::Mul, &y, g)?
        }
        "HardSigmoid" => {
            let a = float_attr(n, "alpha", 0.2)?;
            let b = float_attr(n, "beta", 0.5)?;
            if a as f32 == 1.0 / 6.0 && b == 0.5 {
                ctx.unary(UnaryOp::Composite(Composite::HardSigmoid), &x)?
            } else {
                hard_sigmoid(ctx, &x, a, b)?
            }
        }
        "HardSwish" => ctx.unary(UnaryOp::Composite(Composite::HardSwish), &x)?,
        "Softplus" => ctx.unary(UnaryOp::Composite(Composite::Softplus), &x)?,
        "Softsign" => ctx.unary(UnaryOp::Composite(Composite::Softsign), &x)?,
        "ThresholdedRelu" => {
            let a = float_attr(n, "alpha", 1.0)?;
            let c = ctx.binary_scalar(BinaryOp::Gt, &x, a)?;
            ctx.where_(&c, &x, &zero)?
        }
        "Shrink" => {
            let bias = float_attr(n, "bias", 0.0)?;
            let l = float_attr(n, "lambd", 0.5)?;
            let lo = ctx.binary_scalar(BinaryOp::Lt, &x, -l)?;
            let hi = ctx.binary_scalar(BinaryOp::Gt, &x, l)?;
            let xb = ctx.binary_scalar(BinaryOp::Add, &x, bias)?;
            let xs = ctx.binary_scalar(BinaryOp::Sub, &x, bias)?;
            let y = ctx.where_(&hi, &xs, &zero)?;
            ctx.where_(&lo, &xb, &y)?
        }
        "Mish" => ctx.unary(UnaryOp::Composite(Composite::Mish), &x)?,
        "Swish" => {
            let a = float_attr(n, "alpha", 1.0)?;
            let ax = ctx.binary_scalar(BinaryOp::Mul, &x, a)?;
            let s = ctx.unary(UnaryOp::Sigmoid, &ax)?;
            ctx.mul(&x, &s)?
        }
        "Gelu" => match n.string("approximate", "none")?.as_str() {
            "none" => ctx.unary(UnaryOp::GELU, &x)?,
            "tanh" => ctx.unary(UnaryOp::GELU_TANH, &x)?,
            other => invalid!("approximate `{other}` is neither none nor tanh"),
        },
        other => unsupported!("activation {other} is not implemented"),
    };
    one(y)
}

fn hard_sigmoid(ctx: &mut Ctx, x: &Val, a: f64, b: f64) -> R<Val> {
    let ax = ctx.binary_scalar(BinaryOp::Mul, x, a)?;
    let y = ctx.binary_scalar(BinaryOp::Add, &ax, b)?;
    let y = ctx.binary_scalar(BinaryOp::Max, &y, 0.0)?;
    ctx.binary_scalar(BinaryOp::Min, &y, 1.0)
}

/// `PRelu`: slope broadcast to x.
pub fn prelu(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, mut slope) = (n.input(0)?, n.input(1)?);
    // Before opset 7 a 1-D slope of C values is per channel (dim 1).
    let xd = ctx.dims(&x);
    if n.opset < 7 && ctx.rank(&slope) == 1 && xd.len() > 2 && ctx.dims(&slope)[0] == xd[1] {
        let mut dims = vec![rlx_ir::Dim::Static(1); xd.len() - 1];
        dims[0] = xd[1].clone();
        slope = ctx.reshape_dims(&slope, dims)?;
    }
    let zero = ctx.scalar_like(&x, 0.0);
    let c = ctx.binary(BinaryOp::Lt, &x, &zero)?;
    let sx = ctx.mul(&x, &slope)?;
    one(ctx.where_(&c, &sx, &x)?)
}
