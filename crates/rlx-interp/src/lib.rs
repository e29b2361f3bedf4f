//! The validation interpreter: reference semantics of graph ops ([`eval_op`], [`run_graph`])
//! and kernel IR ([`run_loop_kernel`], [`run_program_reference`]), on plain host tensors.
//!
//! Everything computes in f64 and rounds each result with [`DType::round`] (through
//! [`TensorData::from_f64`]); data movement (reshape, slice, gather, ...) copies elements
//! exactly. Shapes come from [`rlx_ir::infer`], which also validates the operands, so each
//! op family below may assume well-formed inputs. It is the reference every emitter is
//! tested against and the constant folder of every device, so it stays obviously correct
//! rather than fast.
//!
//! This crate knows no device: importers and the runtime fold constants with it without
//! pulling in a backend. The CPU fast path (`rlx-cpu`) shares its index arithmetic
//! ([`index`]) and program checks ([`check`]) so both agree on semantics and messages.

#![warn(missing_docs)]

pub mod check;
mod conv;
mod elementwise;
mod error;
mod graph;
pub mod index;
mod kernel;
mod linalg;
mod movement;
mod norm;
mod program;
mod reduce;

pub use error::InterpError;
pub(crate) use graph::check_bound as graph_check_bound;
pub use graph::run_graph;
pub use kernel::run_loop_kernel;
pub use program::run_program_reference;

pub use conv::{pool_windows, PoolWindow};
pub use movement::pad_source;
pub use reduce::arg_better;

use crate::error::fmt_types;
use rlx_ir::{DType, Op, Shape, Tensor, TensorData, TensorType};

/// Evaluates one graph op on host tensors. `Constant` returns its tensor; `Input` and
/// `Param` are bound by name and cannot be evaluated.
///
/// # Errors
/// Operands the op does not accept (arity, dtype, shape: the message of
/// [`rlx_ir::infer`]), or a gather index out of range.
pub fn eval_op(op: &Op, inputs: &[&Tensor]) -> Result<Tensor, InterpError> {
    let err = |message: String| InterpError::Op {
        op: op.name(),
        inputs: fmt_types(inputs),
        message,
    };
    if matches!(op, Op::Input { .. } | Op::Param { .. }) {
        return Err(err(
            "inputs and params are bound by name, not evaluated".into()
        ));
    }
    let out = result_type(op, inputs)?;
    let shape = out.shape.as_static().expect("operands have static shapes");
    let dtype = out.dtype;
    let data: TensorData = match op {
        Op::Input { .. } | Op::Param { .. } => unreachable!("rejected above"),
        Op::Constant(t) => return Ok((**t).clone()),
        Op::Unary(u) => elementwise::unary(*u, inputs[0]),
        Op::Binary(b) => elementwise::binary(*b, inputs[0], inputs[1], &shape, dtype),
        Op::Where => elementwise::where_(inputs, &shape, dtype),
        Op::Cast(to) => elementwise::cast(inputs[0], *to),
        Op::BitCast(to) => elementwise::bitcast(inputs[0], *to),
        Op::Reduce { op, axes, .. } => reduce::reduce(*op, axes, inputs[0], dtype),
        Op::ArgReduce { op, axis, .. } => reduce::arg_reduce(*op, *axis, inputs[0]),
        Op::Softmax { axis } => norm::softmax(*axis, inputs[0], false),
        Op::LogSoftmax { axis } => norm::softmax(*axis, inputs[0], true),
        Op::LayerNorm { axis, eps } => {
            norm::layer_norm(*axis, *eps, inputs[0], inputs[1], Some(inputs[2]))
        }
        Op::RmsNorm { axis, eps } => norm::layer_norm(*axis, *eps, inputs[0], inputs[1], None),
        Op::MatMul => linalg::matmul(inputs[0], inputs[1], &shape, dtype),
        Op::Conv2d(p) => conv::conv2d(p, inputs, &shape, dtype),
        Op::Pool2d(p) => conv::pool2d(p, inputs[0], &shape, dtype),
        Op::GlobalPool(kind) => conv::global_pool(*kind, inputs[0], dtype),
        Op::Reshape(_) => inputs[0].data().clone(),
        Op::Transpose(perm) => movement::transpose(perm, inputs[0], &shape),
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => movement::slice(axes, starts, ends, steps, inputs[0], &shape),
        Op::Concat { axis } => movement::concat(*axis, inputs, &shape),
        Op::Gather { axis } => movement::gather(*axis, inputs[0], inputs[1], &shape)?,
        Op::Expand(_) => movement::expand(inputs[0], &shape),
        Op::Pad { pads, mode } => movement::pad(pads, *mode, inputs[0], &shape),
        Op::Attention { mask, scale } => linalg::attention(*mask, *scale, inputs, &shape, dtype),
        Op::QuantMatMul { format, n, k, .. } => {
            linalg::quant_matmul(*format, *n, *k, inputs[0], inputs[1])
        }
        Op::MatMulInteger(p) => p.reference(inputs),
        Op::ConvInteger(p) => p.reference(inputs, &shape),
    };
    Ok(Tensor::new(shape, data).expect("result size follows the inferred shape"))
}

/// The inferred result type of `op` on `inputs`, as an [`InterpError::Op`] when rejected.
pub(crate) fn result_type(op: &Op, inputs: &[&Tensor]) -> Result<TensorType, InterpError> {
    let tys: Vec<TensorType> = inputs.iter().map(|t| type_of(t)).collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    rlx_ir::infer(op, &refs).map_err(|message| InterpError::Op {
        op: op.name(),
        inputs: fmt_types(inputs),
        message,
    })
}

/// The dtype and static shape of a tensor.
pub(crate) fn type_of(t: &Tensor) -> TensorType {
    TensorType::new(t.dtype(), Shape::of(t.shape()))
}

/// Builds storage of `dtype` from f64 values, rounding each.
fn from_f64(dtype: DType, values: impl IntoIterator<Item = f64>) -> TensorData {
    TensorData::from_f64(dtype, values)
}

#[cfg(test)]
mod tests;
