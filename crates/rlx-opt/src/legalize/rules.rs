//! Decomposition rules for elementwise and layout ops: one function per op family, each
//! rewriting an op into simpler ones through the [`Emitter`] (which legalizes every piece
//! again). The dispatcher matches the op enum exhaustively, so a new op must say whether it
//! has a rule.

use super::emitter::{Emitter, Failure};
use super::{rules_int, rules_nn};
use rlx_ir::{BinaryOp, DType, Dim, NodeId, Op, Tensor, TensorType, UnaryOp};

/// Rewrites `op` over `ins` (result type `ty`) into other ops.
pub(crate) fn decompose(
    e: &mut Emitter<'_>,
    op: &Op,
    ins: &[NodeId],
    ty: &TensorType,
) -> Result<NodeId, Failure> {
    match op {
        Op::Unary(u) => unary(e, *u, ins[0]),
        Op::Binary(b) => binary(e, *b, ins[0], ins[1]),
        Op::Expand(_) => expand(e, ins[0], ty),
        Op::Softmax { axis } => rules_nn::softmax(e, ins[0], *axis, false),
        Op::LogSoftmax { axis } => rules_nn::softmax(e, ins[0], *axis, true),
        Op::LayerNorm { axis, eps } => rules_nn::layer_norm(e, ins, *axis, *eps),
        Op::RmsNorm { axis, eps } => rules_nn::rms_norm(e, ins, *axis, *eps),
        Op::Attention { mask, scale } => rules_nn::attention(e, ins, *mask, *scale),
        Op::GlobalPool(kind) => rules_nn::global_pool(e, ins[0], *kind),
        Op::MatMulInteger(p) => rules_nn::matmul_integer(e, *p, ins),
        Op::ConvInteger(p) => rules_int::conv_integer(e, *p, ins),
        Op::MatMul => rules_int::matmul(e, ins, ty),
        Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant(_)
        | Op::Where
        | Op::Cast(_)
        | Op::BitCast(_)
        | Op::Reduce { .. }
        | Op::ArgReduce { .. }
        | Op::Conv2d(_)
        | Op::Pool2d(_)
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Concat { .. }
        | Op::Gather { .. }
        | Op::Pad { .. }
        | Op::QuantMatMul { .. } => Err(Failure::NoRule),
    }
}

fn unary(e: &mut Emitter<'_>, u: UnaryOp, x: NodeId) -> Result<NodeId, Failure> {
    use BinaryOp::{Add, Div, Gt, Mul};
    let dtype = e.ty(x).dtype;
    match u {
        // Defined once, in `rlx_ir::composite`.
        UnaryOp::Composite(c) => c.expand(e, x),
        // 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving exactly 0.
        UnaryOp::Sigmoid => {
            let t = e.unary(UnaryOp::Neg, x)?;
            let t = e.unary(UnaryOp::Exp, t)?;
            let t = e.binary_scalar(Add, t, 1.0)?;
            e.unary(UnaryOp::Reciprocal, t)
        }
        UnaryOp::Rsqrt => {
            let s = e.unary(UnaryOp::Sqrt, x)?;
            e.unary(UnaryOp::Reciprocal, s)
        }
        UnaryOp::Reciprocal => {
            let one = e.scalar(dtype, 1.0);
            e.binary(Div, one, x)
        }
        // Multiplying by -1 flips the sign exactly (also of zeros and infinities).
        UnaryOp::Neg => e.binary_scalar(Mul, x, -1.0),
        // where(x > 0, x, 0): NaN and -0.0 give +0, as the reference `max(x, 0)` does.
        UnaryOp::Relu => {
            let zero = e.scalar(dtype, 0.0);
            let pos = e.binary(Gt, x, zero)?;
            e.emit(Op::Where, &[pos, x, zero])
        }
        UnaryOp::Abs
        | UnaryOp::Exp
        | UnaryOp::Log
        | UnaryOp::Sqrt
        | UnaryOp::Tanh
        | UnaryOp::Erf
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Sign
        | UnaryOp::Not
        | UnaryOp::BitNot => Err(Failure::NoRule),
    }
}

fn binary(e: &mut Emitter<'_>, b: BinaryOp, x: NodeId, y: NodeId) -> Result<NodeId, Failure> {
    match b {
        // a - b == a + (-b) exactly in IEEE arithmetic.
        BinaryOp::Sub => {
            let n = e.unary(UnaryOp::Neg, y)?;
            e.binary(BinaryOp::Add, x, n)
        }
        BinaryOp::Mod | BinaryOp::FMod => modulo(e, b == BinaryOp::Mod, x, y),
        BinaryOp::Add
        | BinaryOp::Mul
        | BinaryOp::Div
        | BinaryOp::Pow
        | BinaryOp::Max
        | BinaryOp::Min
        | BinaryOp::Eq
        | BinaryOp::Ne
        | BinaryOp::Lt
        | BinaryOp::Le
        | BinaryOp::Gt
        | BinaryOp::Ge
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor
        | BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::Shl
        | BinaryOp::Shr => Err(Failure::NoRule),
    }
}

/// `mod` (floored, sign of b) and `fmod` (truncated, sign of a).
///
/// Floats: `a - b * floor(a / b)` and `a - b * trunc(a / b)` with
/// `trunc(q) = where(q < 0, ceil(q), floor(q))`. These round `a / b`, so they can differ
/// from the exact reference by an ulp of the quotient times `b`.
/// Integers: `a - b * (a / b)` with truncating division is exact; `mod` then adds `b` when
/// the remainder is non-zero and its sign differs from `b`'s, and `b == 0` gives 0 as the
/// reference does.
fn modulo(e: &mut Emitter<'_>, floored: bool, a: NodeId, b: NodeId) -> Result<NodeId, Failure> {
    use BinaryOp::{And, Div, Eq, Lt, Mul, Ne, Sub};
    let dtype = e.ty(a).dtype;
    let q = e.binary(Div, a, b)?;
    if dtype.is_float() {
        let whole = if floored {
            e.unary(UnaryOp::Floor, q)?
        } else {
            let zero = e.scalar(dtype, 0.0);
            let neg = e.binary(Lt, q, zero)?;
            let up = e.unary(UnaryOp::Ceil, q)?;
            let down = e.unary(UnaryOp::Floor, q)?;
            e.emit(Op::Where, &[neg, up, down])?
        };
        let t = e.binary(Mul, b, whole)?;
        return e.binary(Sub, a, t);
    }
    let t = e.binary(Mul, b, q)?;
    let r = e.binary(Sub, a, t)?;
    let zero = e.scalar(dtype, 0.0);
    let b_zero = e.binary(Eq, b, zero)?;
    let r = e.emit(Op::Where, &[b_zero, zero, r])?;
    if !floored {
        return Ok(r);
    }
    let nonzero = e.binary(Ne, r, zero)?;
    let r_neg = e.binary(Lt, r, zero)?;
    let b_neg = e.binary(Lt, b, zero)?;
    let signs_differ = e.binary(Ne, r_neg, b_neg)?;
    let fix = e.binary(And, nonzero, signs_differ)?;
    let r_plus_b = e.binary(BinaryOp::Add, r, b)?;
    e.emit(Op::Where, &[fix, r_plus_b, r])
}

/// Broadcast by multiplying with ones (exact), or for bool by `where(x, true, false)`. The
/// ones constant only spans the dims that actually grow, so it stays small.
fn expand(e: &mut Emitter<'_>, x: NodeId, out: &TensorType) -> Result<NodeId, Failure> {
    let x_ty = e.ty(x).clone();
    let (rank, x_rank) = (out.shape.rank(), x_ty.shape.rank());
    let mut dims = Vec::with_capacity(rank);
    for (i, d) in out.shape.dims().iter().enumerate() {
        let same = i >= rank - x_rank && &x_ty.shape.dims()[i - (rank - x_rank)] == d;
        dims.push(match (same, d) {
            (true, _) => 1,
            (false, Dim::Static(n)) => *n,
            (false, Dim::Sym(s)) => {
                return Err(Failure::Needs(format!(
                    "expanding to symbolic dim `{s}` needs it bound"
                )))
            }
        });
    }
    if x_ty.dtype == DType::Bool {
        let trues = e.constant(Tensor::full(DType::Bool, &dims, 1.0));
        let f = e.scalar(DType::Bool, 0.0);
        e.emit(Op::Where, &[x, trues, f])
    } else {
        let ones = e.constant(Tensor::full(x_ty.dtype, &dims, 1.0));
        e.binary(BinaryOp::Mul, x, ones)
    }
}
