//! Decomposition rules for the neural-network ops: softmax family, norms, attention and
//! global pooling, the integer product, written in reductions, elementwise ops and matmul.

use super::emitter::{Emitter, Failure};
use rlx_ir::{
    AInput, AttnMask, BinaryOp, DType, Dim, IntMatMul, NodeId, Op, PoolKind, ReduceOp, Shape,
    Tensor, UnaryOp,
};

/// `softmax = exp(x - max) / sum(exp(x - max))`;
/// `log_softmax = (x - max) - log(sum(exp(x - max)))`. Subtracting the max keeps `exp` from
/// overflowing.
pub(crate) fn softmax(
    e: &mut Emitter<'_>,
    x: NodeId,
    axis: usize,
    log: bool,
) -> Result<NodeId, Failure> {
    let m = e.reduce(ReduceOp::Max, x, vec![axis], true)?;
    let z = e.binary(BinaryOp::Sub, x, m)?;
    let ez = e.unary(UnaryOp::Exp, z)?;
    let s = e.reduce(ReduceOp::Sum, ez, vec![axis], true)?;
    if log {
        let ls = e.unary(UnaryOp::Log, s)?;
        e.binary(BinaryOp::Sub, z, ls)
    } else {
        e.binary(BinaryOp::Div, ez, s)
    }
}

/// `(x - mean) * rsqrt(var + eps) * scale + bias` over dims `axis..`, with the variance
/// computed from the centred values (two passes, as the reference does).
pub(crate) fn layer_norm(
    e: &mut Emitter<'_>,
    ins: &[NodeId],
    axis: usize,
    eps: f64,
) -> Result<NodeId, Failure> {
    let (x, scale, bias) = (ins[0], ins[1], ins[2]);
    let axes: Vec<usize> = (axis..e.ty(x).shape.rank()).collect();
    let mu = e.reduce(ReduceOp::Mean, x, axes.clone(), true)?;
    let d = e.binary(BinaryOp::Sub, x, mu)?;
    let d2 = e.binary(BinaryOp::Mul, d, d)?;
    let var = e.reduce(ReduceOp::Mean, d2, axes, true)?;
    let var = e.binary_scalar(BinaryOp::Add, var, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, var)?;
    let y = e.binary(BinaryOp::Mul, d, r)?;
    let y = e.binary(BinaryOp::Mul, y, scale)?;
    e.binary(BinaryOp::Add, y, bias)
}

/// `x * rsqrt(mean(x^2) + eps) * scale` over dims `axis..`.
pub(crate) fn rms_norm(
    e: &mut Emitter<'_>,
    ins: &[NodeId],
    axis: usize,
    eps: f64,
) -> Result<NodeId, Failure> {
    let (x, scale) = (ins[0], ins[1]);
    let axes: Vec<usize> = (axis..e.ty(x).shape.rank()).collect();
    let x2 = e.binary(BinaryOp::Mul, x, x)?;
    let ms = e.reduce(ReduceOp::Mean, x2, axes, true)?;
    let ms = e.binary_scalar(BinaryOp::Add, ms, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, ms)?;
    let y = e.binary(BinaryOp::Mul, x, r)?;
    e.binary(BinaryOp::Mul, y, scale)
}

/// `softmax(q k^T * scale + mask) v`, the softmax over keys.
///
/// A query that sees no key gives zeros, as in the reference. The causal mask is a constant
/// `[sq, sk]` of 0 and -inf (query `i` sees keys `j <= i + sk - sq`), so it needs static
/// sequence lengths; rows that see no key (`sq > sk`) get a finite row in the constant and
/// are zeroed by a 0/1 row factor. With an additive mask a fully masked row is only known
/// at run time: the result is guarded by `where(max(scores) > -inf, out, 0)` when the
/// backend runs `where` and `gt`, and is NaN otherwise.
pub(crate) fn attention(
    e: &mut Emitter<'_>,
    ins: &[NodeId],
    mask: AttnMask,
    scale: Option<f64>,
) -> Result<NodeId, Failure> {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    let q_ty = e.ty(q).clone();
    let rank = q_ty.shape.rank();
    let scale = match (scale, &q_ty.shape.dims()[rank - 1]) {
        (Some(s), _) => s,
        (None, Dim::Static(d)) => 1.0 / (*d as f64).sqrt(),
        (None, Dim::Sym(s)) => {
            return Err(Failure::Needs(format!(
                "the default scale needs head size `{s}` bound"
            )))
        }
    };
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 1, rank - 2);
    let kt = e.emit(Op::Transpose(perm), &[k])?;
    let scores = e.emit(Op::MatMul, &[q, kt])?;
    let mut scores = e.binary_scalar(BinaryOp::Mul, scores, scale)?;
    let mut row_factor = None;
    match mask {
        AttnMask::None => {}
        AttnMask::Additive => scores = e.binary(BinaryOp::Add, scores, ins[3])?,
        AttnMask::Causal => {
            let s_ty = e.ty(scores).clone();
            let dims = s_ty.shape.dims();
            let (Some(sq), Some(sk)) = (dims[rank - 2].as_static(), dims[rank - 1].as_static())
            else {
                return Err(Failure::Needs(
                    "a causal mask needs static sequence lengths".into(),
                ));
            };
            let sees_none = |i: usize| i + sk < sq;
            let values: Vec<f64> = (0..sq * sk)
                .map(|n| {
                    let (i, j) = (n / sk, n % sk);
                    if j + sq <= i + sk || sees_none(i) {
                        0.0
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let m = Tensor::from_f64(s_ty.dtype, &[sq, sk], &values)
                .expect("sq * sk values for an [sq, sk] mask");
            let m = e.constant(m);
            scores = e.binary(BinaryOp::Add, scores, m)?;
            if sees_none(0) {
                let rows: Vec<f64> = (0..sq).map(|i| (!sees_none(i)) as u8 as f64).collect();
                let rows = Tensor::from_f64(s_ty.dtype, &[sq, 1], &rows)
                    .expect("sq values for an [sq, 1] factor");
                row_factor = Some(e.constant(rows));
            }
        }
    }
    let p = e.emit(Op::Softmax { axis: rank - 1 }, &[scores])?;
    let out = e.emit(Op::MatMul, &[p, v])?;
    if let Some(rows) = row_factor {
        return e.binary(BinaryOp::Mul, out, rows);
    }
    if mask == AttnMask::Additive {
        let guarded = e.attempt(|e| {
            let m = e.reduce(ReduceOp::Max, scores, vec![rank - 1], true)?;
            let seen = e.binary_scalar(BinaryOp::Gt, m, f64::NEG_INFINITY)?;
            let zero = e.scalar(q_ty.dtype, 0.0);
            e.emit(Op::Where, &[seen, out, zero])
        });
        return Ok(guarded.unwrap_or(out));
    }
    Ok(out)
}

/// Global pooling is a max or mean over every spatial dim, keeping them as size 1.
pub(crate) fn global_pool(
    e: &mut Emitter<'_>,
    x: NodeId,
    kind: PoolKind,
) -> Result<NodeId, Failure> {
    let axes: Vec<usize> = (2..e.ty(x).shape.rank()).collect();
    let op = match kind {
        PoolKind::Max => ReduceOp::Max,
        PoolKind::Avg => ReduceOp::Mean,
    };
    e.reduce(op, x, axes, true)
}

/// The integer product widened to i32: `a` quantized first when the op does it
/// (`saturate(round(a / a_scale) + a_zero)`, the scale and zero point found from `a`'s range
/// for a dynamic one), both operands centred on their zero points, an i32 matmul, then the
/// scales in f32.
pub(crate) fn matmul_integer(
    e: &mut Emitter<'_>,
    p: IntMatMul,
    ins: &[NodeId],
) -> Result<NodeId, Failure> {
    use BinaryOp::{Div, Eq, Max, Min, Mul, Sub};
    let (a, b, b_zero) = (ins[0], ins[1], ins[p.b_zero_input()]);
    let (a, a_zero, a_scale) = match p.a {
        AInput::Integer => (a, ins[2], None),
        AInput::Quantize => (quantize(e, a, ins[4], ins[2])?, ins[2], None),
        AInput::Dynamic => {
            let all: Vec<usize> = (0..e.ty(a).shape.rank()).collect();
            let mx = e.reduce(ReduceOp::Max, a, all.clone(), false)?;
            let mx = e.binary_scalar(Max, mx, 0.0)?;
            let mn = e.reduce(ReduceOp::Min, a, all, false)?;
            let mn = e.binary_scalar(Min, mn, 0.0)?;
            let same = e.binary(Eq, mx, mn)?;
            let one = e.scalar(DType::F32, 1.0);
            let span = e.binary(Sub, mx, mn)?;
            let span = e.emit(Op::Where, &[same, one, span])?;
            let scale = e.binary_scalar(Div, span, 255.0)?;
            let q = e.binary(Div, mn, scale)?;
            let zero = e.scalar(DType::F32, 0.0);
            let zp = e.binary(Sub, zero, q)?;
            let zp = e.binary_scalar(Max, zp, 0.0)?;
            let zp = e.binary_scalar(Min, zp, 255.0)?;
            let zp = e.unary(UnaryOp::Round, zp)?;
            let zp = e.emit(Op::Cast(DType::U8), &[zp])?;
            (quantize(e, a, scale, zp)?, zp, Some(scale))
        }
    };
    let mut centred = |x: NodeId, zero: NodeId| -> Result<NodeId, Failure> {
        let x = e.emit(Op::Cast(DType::I32), &[x])?;
        let z = e.emit(Op::Cast(DType::I32), &[zero])?;
        e.binary(Sub, x, z)
    };
    let a = centred(a, a_zero)?;
    let b = centred(b, b_zero)?;
    let a_shape = e.ty(a).shape.clone();
    let vector = a_shape.rank() == 1;
    let a = if vector {
        let row = Shape(vec![Dim::Static(1), a_shape.0[0].clone()]);
        e.emit(Op::Reshape(row), &[a])?
    } else {
        a
    };
    let mut y = e.emit(Op::MatMul, &[a, b])?;
    if vector {
        let n = e.ty(b).shape.0[1].clone();
        y = e.emit(Op::Reshape(Shape(vec![n])), &[y])?;
    }
    let multiplier = match (a_scale, p.scale_input()) {
        (Some(a), Some(i)) => Some(e.binary(Mul, a, ins[i])?),
        (Some(a), None) => Some(a),
        (None, Some(i)) => Some(ins[i]),
        (None, None) => None,
    };
    match multiplier {
        Some(m) => {
            let y = e.emit(Op::Cast(DType::F32), &[y])?;
            e.binary(Mul, y, m)
        }
        None => Ok(y),
    }
}

/// `saturate(round(x / scale) + zero)` in `zero`'s dtype (u8 or i8).
fn quantize(
    e: &mut Emitter<'_>,
    x: NodeId,
    scale: NodeId,
    zero: NodeId,
) -> Result<NodeId, Failure> {
    use BinaryOp::{Add, Div, Max, Min};
    let to = e.ty(zero).dtype;
    let (lo, hi) = rlx_ir::int_matmul::range(to);
    let q = e.binary(Div, x, scale)?;
    let q = e.unary(UnaryOp::Round, q)?;
    let z = e.emit(Op::Cast(DType::F32), &[zero])?;
    let q = e.binary(Add, q, z)?;
    let q = e.binary_scalar(Max, q, f64::from(lo))?;
    let q = e.binary_scalar(Min, q, f64::from(hi))?;
    e.emit(Op::Cast(to), &[q])
}
