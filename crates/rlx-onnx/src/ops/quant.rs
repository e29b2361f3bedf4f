//! Linear quantization: `QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear`,
//! `QLinearMatMul`, `MatMulInteger`, as the ONNX reference computes them:
//! integers (2 to 16 bits) round half to even and saturate to their range; float8 targets
//! take a (saturating) cast of `x / scale`, float4 one of `x / scale + zero_point`.

use crate::ctx::{invalid, unsupported, Ctx, Fail, Val, R};
use crate::dtype::to_dtype;
use crate::node::NodeIn;
use rlx_ir::{AInput, BinaryOp, DType, IntMatMul, Op, ReduceOp, UnaryOp};

fn range(d: DType) -> R<(f64, f64)> {
    Ok(match d {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U4 => (0.0, 15.0),
        DType::I4 => (-8.0, 7.0),
        DType::U2 => (0.0, 3.0),
        DType::I2 => (-2.0, 1.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        other => unsupported!("quantized type {other}"),
    })
}

/// Scale or zero point shaped to broadcast against `x`: as is (per-tensor), along `axis`
/// (per-axis), or with each entry repeated `block` times along `axis` (blocked, the last
/// block cut to `x`'s size).
fn per_axis(ctx: &mut Ctx, v: &Val, x: &Val, axis: i64, block: i64) -> R<Val> {
    let s = ctx.shape(v)?;
    let n: usize = s.iter().product();
    if s.is_empty() {
        return Ok(v.clone());
    }
    if n == 1 {
        return ctx.reshape(v, &[]);
    }
    let r = ctx.rank(x);
    let a = ctx.axis(axis, r)?;
    if block != 0 {
        let xs = ctx.shape(x)?;
        let b = usize::try_from(block)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| Fail::Invalid(format!("block_size {block} is not positive")))?;
        let blocks = xs[a].div_ceil(b);
        let mut want = xs.clone();
        want[a] = blocks;
        if s != want {
            invalid!("blocked quantization: parameter shape {s:?} does not match {want:?} (x {xs:?}, axis {a}, block {b})");
        }
        let mut split = s.clone();
        split.insert(a + 1, 1);
        let v = ctx.reshape(v, &split)?;
        split[a + 1] = b;
        let v = ctx.expand(&v, rlx_ir::Shape::of(&split).0)?;
        let mut merged = s;
        merged[a] = blocks * b;
        let v = ctx.reshape(&v, &merged)?;
        return if blocks * b == xs[a] {
            Ok(v)
        } else {
            ctx.slice(&v, a, 0, xs[a] as i64, 1)
        };
    }
    let mut dims = vec![1; r];
    dims[a] = n;
    ctx.reshape(v, &dims)
}

pub(crate) fn saturate_round(ctx: &mut Ctx, y: &Val, to: DType) -> R<Val> {
    let (lo, hi) = range(to)?;
    let y = ctx.unary(UnaryOp::Round, y)?;
    let y = ctx.binary_scalar(BinaryOp::Max, &y, lo)?;
    let y = ctx.binary_scalar(BinaryOp::Min, &y, hi)?;
    ctx.cast(&y, to)
}

/// `QuantizeLinear`.
pub fn quantize(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, scale) = (n.input(0)?, n.input(1)?);
    let axis = n.int("axis", 1)?;
    let saturate = n.int("saturate", 1)? != 0;
    let block = n.int("block_size", 0)?;
    if n.int_opt("precision")?.is_some_and(|p| p != 1) {
        unsupported!("precision other than float32");
    }
    let zp = n.opt(2);
    let out = match (&zp, n.int_opt("output_dtype")?) {
        (Some(z), _) => ctx.dtype(z),
        (None, Some(t)) if t != 0 => to_dtype(t as i32).map_err(crate::ctx::Fail::Unsupported)?,
        (None, _) => DType::U8,
    };
    let xf = ctx.cast(&x, DType::F32)?;
    let s = per_axis(ctx, &scale, &x, axis, block)?;
    let s = ctx.cast(&s, DType::F32)?;
    let q = ctx.div(&xf, &s)?;
    if out.is_float() {
        // The reference ignores a float8 zero point (it must be zero) and adds a float4 one.
        let mut q = q;
        if let (Some(z), DType::F4E2M1) = (&zp, out) {
            let z = per_axis(ctx, z, &x, axis, block)?;
            let z = ctx.cast(&z, DType::F32)?;
            q = ctx.add(&q, &z)?;
        }
        if !out.is_narrow() || out == DType::F8E8M0 {
            unsupported!("quantized type {out}");
        }
        return Ok(vec![crate::ops::elementwise::onnx_cast(
            ctx, &q, out, saturate, "up",
        )?]);
    }
    let mut q = ctx.unary(UnaryOp::Round, &q)?;
    if let Some(z) = &zp {
        let z = per_axis(ctx, z, &x, axis, block)?;
        let z = ctx.cast(&z, DType::F32)?;
        q = ctx.add(&q, &z)?;
    }
    Ok(vec![saturate_round(ctx, &q, out)?])
}

/// `DequantizeLinear`.
pub fn dequantize(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (x, scale) = (n.input(0)?, n.input(1)?);
    let axis = n.int("axis", 1)?;
    let block = n.int("block_size", 0)?;
    let out = match n.int_opt("output_dtype")? {
        Some(t) if t != 0 => to_dtype(t as i32).map_err(crate::ctx::Fail::Unsupported)?,
        _ => ctx.dtype(&scale),
    };
    let mut xf = ctx.cast(&x, DType::F32)?;
    if let Some(z) = n.opt(2) {
        let z = per_axis(ctx, &z, &x, axis, block)?;
        let z = ctx.cast(&z, DType::F32)?;
        xf = ctx.sub(&xf, &z)?;
    }
    let s = per_axis(ctx, &scale, &x, axis, block)?;
    let s = ctx.cast(&s, DType::F32)?;
    let y = ctx.mul(&xf, &s)?;
    Ok(vec![ctx.cast(&y, out)?])
}

/// `DynamicQuantizeLinear`: u8 with a scale and zero point from the data's range. The u8
/// result is remembered with its source, so an integer product reading it quantizes the
/// source in its own pass and the separate quantization is dead code.
pub fn dynamic_quantize(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let x = n.input(0)?;
    let (y, scale, zp) = dynamic_quantize_values(ctx, &x)?;
    let d = ctx.dtype(&x);
    let zp = ctx.cast(&zp, DType::U8)?;
    if let (Val::Node(id), DType::F32) = (&y, d) {
        let xf = ctx.cast(&x, DType::F32)?;
        ctx.dynamic_quantized
            .insert(*id, (xf, scale.clone(), zp.clone()));
    }
    Ok(vec![y, ctx.cast(&scale, d)?, zp])
}

/// `DynamicQuantizeLinear`'s values: `x` as u8, its f32 scale and its zero point (an
/// integer held in f32).
pub(crate) fn dynamic_quantize_values(ctx: &mut Ctx, x: &Val) -> R<(Val, Val, Val)> {
    let xf = ctx.cast(x, DType::F32)?;
    let (scale, zp) = dynamic_quantize_params(ctx, &xf)?;
    let y = ctx.div(&xf, &scale)?;
    let y = ctx.unary(UnaryOp::Round, &y)?;
    let y = ctx.add(&y, &zp)?;
    let y = saturate_round(ctx, &y, DType::U8)?;
    Ok((y, scale, zp))
}

/// `DynamicQuantizeLinear`'s scale and zero point (an integer held in f32) for f32 `xf`.
pub(crate) fn dynamic_quantize_params(ctx: &mut Ctx, xf: &Val) -> R<(Val, Val)> {
    let all: Vec<usize> = (0..ctx.rank(xf)).collect();
    let mx = ctx.reduce(ReduceOp::Max, xf, &all, false)?;
    let mn = ctx.reduce(ReduceOp::Min, xf, &all, false)?;
    let mx = ctx.binary_scalar(BinaryOp::Max, &mx, 0.0)?;
    let mn = ctx.binary_scalar(BinaryOp::Min, &mn, 0.0)?;
    let same = ctx.binary(BinaryOp::Eq, &mx, &mn)?;
    let span = ctx.sub(&mx, &mn)?;
    let one = ctx.scalar(DType::F32, 1.0);
    let span = ctx.where_(&same, &one, &span)?;
    let scale = ctx.binary_scalar(BinaryOp::Div, &span, 255.0)?;
    let q = ctx.div(&mn, &scale)?;
    let zero = ctx.scalar(DType::F32, 0.0);
    let zp = ctx.sub(&zero, &q)?;
    let zp = ctx.binary_scalar(BinaryOp::Max, &zp, 0.0)?;
    let zp = ctx.binary_scalar(BinaryOp::Min, &zp, 255.0)?;
    let zp = ctx.unary(UnaryOp::Round, &zp)?;
    Ok((scale, zp))
}

/// `x - zp` in i32 (zp optional).
pub(crate) fn centered(ctx: &mut Ctx, x: &Val, zp: Option<Val>) -> R<Val> {
    let xi = ctx.cast(x, DType::I32)?;
    match zp {
        Some(z) => {
            let z = ctx.cast(&z, DType::I32)?;
            ctx.sub(&xi, &z)
        }
        None => Ok(xi),
    }
}

/// The product of `a` (u8/i8) and a 2-D `b` (u8/i8) on [`Op::MatMulInteger`], times `scale`
/// (f32, one value or one per column) when given; None when the operands are outside
/// what the op takes (a batched `b`, per-row zero points of `a`), for the caller's widened
/// form. An `a` that `DynamicQuantizeLinear` produced is quantized by the op itself.
pub(crate) fn integer_product(
    ctx: &mut Ctx,
    a: &Val,
    b: &Val,
    a_zero: Option<Val>,
    b_zero: Option<Val>,
    scale: Option<Val>,
) -> R<Option<Val>> {
    let (da, db) = (ctx.dtype(a), ctx.dtype(b));
    let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
    if !byte(da) || !byte(db) {
        invalid!("operands must be u8 or i8, got {da} and {db}");
    }
    let b_shape = ctx.ty(b).shape;
    let (Some(bs), true) = (b_shape.as_static(), ctx.rank(a) >= 1) else {
        return Ok(None);
    };
    if bs.len() != 2 {
        return Ok(None);
    }
    let n_cols = bs[1];
    let one_or_columns = |ctx: &Ctx, v: &Val| -> Option<Vec<usize>> {
        let s = ctx.ty(v).shape.as_static()?;
        let numel: usize = s.iter().product();
        match numel {
            1 => Some(vec![]),
            c if c == n_cols && s.len() == 1 => Some(vec![c]),
            _ => None,
        }
    };
    let a_zero = match a_zero {
        Some(z) if one_or_columns(ctx, &z) != Some(vec![]) => return Ok(None),
        Some(z) => ctx.reshape(&z, &[])?,
        None => ctx.scalar(da, 0.0),
    };
    let b_zero = match b_zero {
        Some(z) => match one_or_columns(ctx, &z) {
            Some(s) => ctx.reshape(&z, &s)?,
            None => return Ok(None),
        },
        None => ctx.scalar(db, 0.0),
    };
    let scale = match scale {
        Some(s) => match one_or_columns(ctx, &s) {
            Some(dims) => {
                let s = ctx.cast(&s, DType::F32)?;
                Some(ctx.reshape(&s, &dims)?)
            }
            None => return Ok(None),
        },
        None => None,
    };
    // the source of a `DynamicQuantizeLinear` result, quantized with its own zero point
    let fused = match a {
        Val::Node(id) => ctx
            .dynamic_quantized
            .get(id)
            .filter(|(_, _, z)| same_value(z, &a_zero))
            .map(|(x, s, _)| (x.clone(), s.clone())),
        Val::Const { .. } => None,
    };
    let p = IntMatMul {
        a: if fused.is_some() {
            AInput::Quantize
        } else {
            AInput::Integer
        },
        scaled: scale.is_some(),
    };
    let unscaled_dynamic = fused.clone().filter(|_| scale.is_none());
    let (a, a_scale) = match fused {
        Some((x, s)) => (x, Some(ctx.reshape(&s, &[])?)),
        None => (a.clone(), None),
    };
    let mut ins = vec![&a, b, &a_zero, &b_zero];
    ins.extend(a_scale.as_ref());
    ins.extend(scale.as_ref());
    let y = ctx.op(Op::MatMulInteger(p), &ins)?;
    if let (Some((x, s)), Val::Node(id)) = (unscaled_dynamic, &y) {
        ctx.dynamic_products
            .insert(*id, [x, b.clone(), b_zero.clone(), s]);
    }
    Ok(Some(y))
}

/// `Cast(product) * k` where `product` is an integer product of a `DynamicQuantizeLinear`
/// result and `k = scale * s` (either order) multiplies that quantization's scale by `s`
/// (one value or one per column): the product quantizing the f32 source from its own
/// range and scaling its sums by `scale * s` ([`AInput::Dynamic`], as ONNX Runtime's
/// `DynamicQuantizeMatMul`), so the separate range reductions are dead code. The same
/// values: the scale, zero point and rounding are `DynamicQuantizeLinear`'s, and the sums
/// are cast to f32 and multiplied by the f32 `scale * s` as before. None when `x · y` is
/// not that pattern.
pub(crate) fn dynamic_rescale(ctx: &mut Ctx, x: &Val, y: &Val) -> R<Option<Val>> {
    let node = |ctx: &Ctx, v: &Val| match v {
        Val::Node(id) => Some((
            ctx.graph.node(*id).op.clone(),
            ctx.graph.node(*id).inputs.clone(),
        )),
        Val::Const { .. } => None,
    };
    for (c, k) in [(x, y), (y, x)] {
        let Some((Op::Cast(DType::F32), ci)) = node(ctx, c) else {
            continue;
        };
        let Some([src, b, b_zero, Val::Node(sid)]) = ctx.dynamic_products.get(&ci[0]).cloned()
        else {
            continue;
        };
        let Some((Op::Binary(BinaryOp::Mul), ki)) = node(ctx, k) else {
            continue;
        };
        let s = match ki[..] {
            [a, o] | [o, a] if a == sid => Val::Node(o),
            _ => continue,
        };
        if ctx.dtype(&s) != DType::F32 || ctx.ty(k).shape != ctx.ty(&s).shape {
            continue;
        }
        let zero = (ctx.dtype(&b_zero) == ctx.dtype(&b)).then_some(b_zero);
        if let Some(y) = crate::contrib::matmul::fused_dynamic(ctx, &src, &b, zero, &s)? {
            return Ok(Some(y));
        }
    }
    Ok(None)
}

/// True when two values are the same node or equal constants.
fn same_value(x: &Val, y: &Val) -> bool {
    match (x, y) {
        (Val::Node(a), Val::Node(b)) => a == b,
        (Val::Const { t: a, .. }, Val::Const { t: b, .. }) => {
            a.to_f64_vec() == b.to_f64_vec() && a.dtype() == b.dtype()
        }
        _ => false,
    }
}

/// `MatMulInteger`: i32 product of zero-point-centered operands, on the integer product op
/// where it takes them, widened to i32 otherwise.
pub fn matmul_integer(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    if let Some(y) = integer_product(ctx, &n.input(0)?, &n.input(1)?, n.opt(2), n.opt(3), None)? {
        return Ok(vec![y]);
    }
    let a = centered(ctx, &n.input(0)?, n.opt(2))?;
    let b = n.input(1)?;
    // A per-column zero point of B applies along its last dim.
    let bz = match n.opt(3) {
        Some(z) if ctx.rank(&z) == 1 && ctx.shape(&z)?[0] > 1 => {
            let c = ctx.shape(&z)?[0];
            Some(ctx.reshape(&z, &[1, c])?)
        }
        other => other,
    };
    let b = centered(ctx, &b, bz)?;
    Ok(vec![crate::ops::linalg::matmul_np(ctx, &a, &b)?])
}

/// The product of two centered integer operands in f64 (exact: every sum of 8-bit products
/// stays far below 2^53), where the result is wanted in floating point anyway.
fn exact_product(ctx: &mut Ctx, a: &Val, b: &Val) -> R<Val> {
    let af = ctx.cast(a, DType::F64)?;
    let bf = ctx.cast(b, DType::F64)?;
    crate::ops::linalg::matmul_np(ctx, &af, &bf)
}

/// `QLinearMatMul`: the integer product, then requantized in f64 (as the reference does).
pub fn qlinear_matmul(ctx: &mut Ctx, n: &NodeIn) -> R<Vec<Val>> {
    let (a, b) = (n.input(0)?, n.input(3)?);
    let c = match integer_product(ctx, &a, &b, n.opt(2), n.opt(5), None)? {
        Some(c) => ctx.cast(&c, DType::F64)?,
        None => {
            let a = centered(ctx, &a, n.opt(2))?;
            let b = centered(ctx, &b, n.opt(5))?;
            exact_product(ctx, &a, &b)?
        }
    };
    let sa = ctx.cast(&n.input(1)?, DType::F64)?;
    let sb = ctx.cast(&n.input(4)?, DType::F64)?;
    let sy = ctx.cast(&n.input(6)?, DType::F64)?;
    let k = ctx.mul(&sa, &sb)?;
    let k = ctx.div(&k, &sy)?;
    let mut d = ctx.mul(&c, &k)?;
    let out = match n.opt(7) {
        Some(z) => {
            let t = ctx.dtype(&z);
            let zf = ctx.cast(&z, DType::F64)?;
            d = ctx.add(&d, &zf)?;
            t
        }
        None => ctx.dtype(&n.input(0)?),
    };
    Ok(vec![saturate_round(ctx, &d, out)?])
}
