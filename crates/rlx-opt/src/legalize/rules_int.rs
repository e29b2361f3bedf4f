//! Decomposition rule for the integer convolution: widened to an exact f64 convolution of
//! the zero-point-centred operands, then requantized in f32 as the op defines it.

use super::emitter::{Emitter, Failure};
use rlx_ir::int_conv::{BIAS, MULTIPLIER, Y_ZERO};
use rlx_ir::{BinaryOp, DType, IntConv, NodeId, Op, Shape, UnaryOp};

/// `conv2d(f64(x) - x_zero, f64(w) - w_zero)` (every 8-bit sum is exact in f64), then i32,
/// or for a requantized op `saturate(round(f32(sum + bias) * multiplier) + y_zero)`.
pub(crate) fn conv_integer(
    e: &mut Emitter<'_>,
    p: IntConv,
    ins: &[NodeId],
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
        let x = e.emit(Op::Cast(DType::F64), &[x])?;
        let z = e.emit(Op::Cast(DType::F64), &[zero])?;
        e.binary(Sub, x, z)
    };
    let x = centred(ins[0], ins[2])?;
    let wz = per_channel(e, ins[3], 4)?;
    let w = {
        let w = e.emit(Op::Cast(DType::F64), &[ins[1]])?;
        let z = e.emit(Op::Cast(DType::F64), &[wz])?;
        e.binary(Sub, w, z)?
    };
    let mut y = e.emit(Op::Conv2d(p.conv), &[x, w])?;
    if !p.requantize {
        return e.emit(Op::Cast(DType::I32), &[y]);
    }
    if let Some(&b) = ins.get(BIAS) {
        let b = per_channel(e, b, 3)?;
        let b = e.emit(Op::Cast(DType::F64), &[b])?;
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
