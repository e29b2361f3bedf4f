//! Decomposition rules of integer products for backends without integer kernels: the
//! integer convolution widened to a float convolution of the zero-point-centred operands
//! (then requantized in f32 as the op defines it), and integer matmuls widened to float.
//!
//! Both widen to f64 where the backend has it (every sum of 8-bit products, and of 32-bit
//! products below 2^53, exact), else to f32 (GPUs without f64: exact while every partial
//! sum stays below 2^24 in magnitude — 8-bit operands over a few hundred terms — and
//! otherwise rounded to f32's 24 bits, a relative 6e-8, far below the 8-bit quantization
//! step the results are then scaled by).

use super::emitter::{Emitter, Failure};
use rlx_ir::int_conv::{BIAS, MULTIPLIER, Y_ZERO};
use rlx_ir::{BinaryOp, DType, IntConv, NodeId, Op, Shape, TensorType, UnaryOp};

/// The float types an integer product is widened to, the exact one first.
const WIDE: [DType; 2] = [DType::F64, DType::F32];

/// Runs `f` with each type of [`WIDE`] until the backend takes one.
fn widened(
    e: &mut Emitter<'_>,
    mut f: impl FnMut(&mut Emitter<'_>, DType) -> Result<NodeId, Failure>,
) -> Result<NodeId, Failure> {
    let mut last = Failure::NoRule;
    for wide in WIDE {
        let mark = e.mark();
        match f(e, wide) {
            Ok(y) => return Ok(y),
            Err(err) => {
                e.rewind(mark);
                last = err;
            }
        }
    }
    Err(last)
}

/// An integer matmul the backend lacks: both operands cast to a float type it multiplies
/// ([`WIDE`]), the product cast back.
pub(crate) fn matmul(
    e: &mut Emitter<'_>,
    ins: &[NodeId],
    ty: &TensorType,
) -> Result<NodeId, Failure> {
    if !ty.dtype.is_int() {
        return Err(Failure::NoRule);
    }
    widened(e, |e, wide| {
        let a = e.emit(Op::Cast(wide), &[ins[0]])?;
        let b = e.emit(Op::Cast(wide), &[ins[1]])?;
        let y = e.emit(Op::MatMul, &[a, b])?;
        e.emit(Op::Cast(ty.dtype), &[y])
    })
}

/// `conv2d(f64(x) - x_zero, f64(w) - w_zero)` (f32 where the backend has no f64), then
/// i32, or for a requantized op `saturate(round(f32(sum + bias) * multiplier) + y_zero)`.
pub(crate) fn conv_integer(
    e: &mut Emitter<'_>,
    p: IntConv,
    ins: &[NodeId],
) -> Result<NodeId, Failure> {
    widened(e, |e, wide| conv_integer_in(e, p, ins, wide))
}

fn conv_integer_in(
    e: &mut Emitter<'_>,
    p: IntConv,
    ins: &[NodeId],
    wide: DType,
) -> Result<NodeId, Failure> {
    use BinaryOp::{Add, Max, Min, Mul, Sub};
    let m = e.ty(ins[1]).shape.0[0].clone();
    // a one-per-channel vector shaped to broadcast along the channel axis of `rank` dims
    let per_channel = |e: &mut Emitter<'_>, v: NodeId, rank: usize| -> Result<NodeId, Failure> {
        if e.ty(v).shape.numel() == Some(1) {
            return e.emit(Op::Reshape(Shape(vec![])), &[v]);
        }
        let mut dims = vec![rlx_ir::Dim::Static(1); rank];
        dims[0] = m.clone();
        e.emit(Op::Reshape(Shape(dims)), &[v])
    };
    let mut centred = |x: NodeId, zero: NodeId| -> Result<NodeId, Failure> {
        let x = e.emit(Op::Cast(wide), &[x])?;
        let z = e.emit(Op::Cast(wide), &[zero])?;
        e.binary(Sub, x, z)
    };
    let x = centred(ins[0], ins[2])?;
    let wz = per_channel(e, ins[3], 4)?;
    let w = {
        let w = e.emit(Op::Cast(wide), &[ins[1]])?;
        let z = e.emit(Op::Cast(wide), &[wz])?;
        e.binary(Sub, w, z)?
    };
    let mut y = e.emit(Op::Conv2d(p.conv), &[x, w])?;
    if !p.requantize {
        return e.emit(Op::Cast(DType::I32), &[y]);
    }
    if let Some(&b) = ins.get(BIAS) {
        let b = per_channel(e, b, 3)?;
        let b = e.emit(Op::Cast(wide), &[b])?;
        y = e.binary(Add, y, b)?;
    }
    let to = e.ty(ins[Y_ZERO]).dtype;
    let (lo, hi) = rlx_ir::int_matmul::range(to);
    // the i32 sum rounded to f32 once, as `sum as f32` does
    let y = e.emit(Op::Cast(DType::F32), &[y])?;
    let mul = per_channel(e, ins[MULTIPLIER], 3)?;
    let y = e.binary(Mul, y, mul)?;
    let y = e.unary(UnaryOp::Round, y)?;
    let z = e.emit(Op::Reshape(Shape(vec![])), &[ins[Y_ZERO]])?;
    let z = e.emit(Op::Cast(DType::F32), &[z])?;
    let y = e.binary(Add, y, z)?;
    let y = e.binary_scalar(Max, y, f64::from(lo))?;
    let y = e.binary_scalar(Min, y, f64::from(hi))?;
    e.emit(Op::Cast(to), &[y])
}
