//! What the wgpu backend runs natively: the answer legalization asks before lowering.
//! f64 has no WGSL type, so any op touching it is left to legalization, which reports it
//! (with every other unsupported node) in one error.

use crate::codegen::library::MAX_HEAD;
use rlx_ir::{DType, Op, TensorType};

/// True when the backend runs `op` natively on `flavor` for inputs of these types. The
/// fused attention kernel does not complete on wgpu's GL backend over Mesa llvmpipe (seen
/// hanging in its first dispatch), so on `opengl` attention is left to legalization, which
/// decomposes it into matmuls and a softmax.
pub fn supports_on(flavor: crate::Flavor, op: &Op, inputs: &[&TensorType]) -> bool {
    if flavor == crate::Flavor::OpenGl && matches!(op, Op::Attention { .. }) {
        return false;
    }
    supports(op, inputs)
}

/// True when the backend runs `op` natively (on any flavour) for inputs of these types.
pub fn supports(op: &Op, inputs: &[&TensorType]) -> bool {
    if inputs.iter().any(|t| t.dtype == DType::F64) {
        return false;
    }
    let first = inputs.first().map(|t| t.dtype);
    let float = first.is_some_and(|d| d.is_float());
    match op {
        Op::Input { .. } | Op::Param { .. } => false,
        Op::Constant(t) => t.dtype() != DType::F64,
        Op::Cast(to) => *to != DType::F64,
        // Composites without a rule in the scalar table are expanded by legalization.
        Op::Unary(u) => first.is_some_and(|d| u.accepts(d)) && crate::codegen::scalar::native(*u),
        Op::Binary(b) => first.is_some_and(|d| b.accepts(d)),
        Op::Where | Op::Reduce { .. } | Op::ArgReduce { .. } => true,
        Op::Reshape(_) | Op::Transpose(_) | Op::Slice { .. } | Op::Expand(_) => true,
        Op::Concat { .. } | Op::Gather { .. } | Op::Pad { .. } => true,
        Op::Softmax { .. } | Op::LogSoftmax { .. } => float,
        Op::LayerNorm { .. } | Op::RmsNorm { .. } => float,
        Op::Pool2d(_) | Op::GlobalPool(_) => float,
        Op::MatMul | Op::Conv2d(_) => float,
        Op::Attention { .. } => {
            float
                && inputs.iter().take(3).all(|t| {
                    t.shape
                        .dims()
                        .last()
                        .and_then(|d| d.as_static())
                        .is_none_or(|d| d <= MAX_HEAD)
                })
        }
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Shape;

    #[test]
    fn f64_is_left_to_legalization() {
        let t = TensorType::new(DType::F64, Shape::of(&[2, 2]));
        assert!(!supports(&Op::MatMul, &[&t, &t]));
        let f = TensorType::new(DType::F32, Shape::of(&[2, 2]));
        assert!(supports(&Op::MatMul, &[&f, &f]));
        assert!(!supports(&Op::Cast(DType::F64), &[&f]));
    }
}
