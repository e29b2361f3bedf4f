//! Decomposition rules for the neural-network ops: softmax family, norms, attention and
//! global pooling, written in reductions, elementwise ops and matmul.

use super::emitter::{Emitter, Failure};
use rlx_ir::{AttnMask, BinaryOp, Dim, NodeId, Op, PoolKind, ReduceOp, Tensor, UnaryOp};

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

/// `softmax(q k^T * scale + mask) v`, the softmax over keys. The causal mask is a constant
/// `[sq, sk]` of 0 and -inf (query `i` sees keys `j <= i + sk - sq`), so it needs static
/// sequence lengths; a query that sees no key at all (sq > sk) gets NaN, as a fully masked
/// softmax does.
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
            let values: Vec<f64> = (0..sq * sk)
                .map(|n| {
                    let (i, j) = (n / sk, n % sk);
                    if j + sq <= i + sk {
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
        }
    }
    let p = e.emit(Op::Softmax { axis: rank - 1 }, &[scores])?;
    e.emit(Op::MatMul, &[p, v])
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
