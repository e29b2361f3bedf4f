//! What the CUDA backend runs natively: the answer legalization asks before lowering. Every
//! op is an explicit arm, so a new op makes the compiler ask about it here.

use crate::codegen::attention::MAX_HEAD;
use crate::codegen::dtype;
use rlx_ir::{DType, Op, TensorType};

/// Dtypes cuBLASLt multiplies for us (f32 optionally on TF32 tensor cores, f16/bf16 on
/// tensor cores with f32 accumulation, f64).
pub fn gemm_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}

/// Floating dtypes the float templates (softmax, norms, pooling, attention) compute in f32.
fn single_float(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// True when the backend runs `op` natively for inputs of these types.
pub fn supports(op: &Op, inputs: &[&TensorType]) -> bool {
    // Dtypes without a CUDA rule are left to legalization, which reports them.
    let out_dtype = match op {
        Op::Cast(to) | Op::BitCast(to) => Some(*to),
        Op::Constant(t) => Some(t.dtype()),
        _ => None,
    };
    if inputs
        .iter()
        .map(|t| t.dtype)
        .chain(out_dtype)
        .any(|d| !dtype::supported(d))
    {
        return false;
    }
    let first = inputs.first().map(|t| t.dtype);
    let float = first.is_some_and(|d| d.is_float());
    match op {
        // Bound by the runtime, never compiled into kernels.
        Op::Input { .. } | Op::Param { .. } => false,
        Op::Constant(_) => true,
        // The rule table is the capability list: composites without a rule are expanded.
        Op::Unary(u) => first.is_some_and(|d| crate::codegen::unary::unary(*u, d, "x").is_some()),
        Op::Binary(b) => first.is_some_and(|d| b.accepts(d)),
        Op::Where | Op::Cast(_) | Op::Reduce { .. } | Op::ArgReduce { .. } => true,
        Op::Reshape(_) | Op::Transpose(_) | Op::Slice { .. } | Op::Expand(_) => true,
        Op::Concat { .. } | Op::Gather { .. } | Op::Pad { .. } => true,
        Op::Softmax { .. } | Op::LogSoftmax { .. } => float,
        Op::LayerNorm { .. } | Op::RmsNorm { .. } => float,
        Op::Pool2d(_) | Op::GlobalPool(_) => float,
        Op::MatMul | Op::Conv2d(_) => first.is_some_and(gemm_dtype),
        // No quantized GEMM yet: legalization reports it unsupported.
        Op::QuantMatMul { .. } => false,
        // No integer GEMM yet: legalization widens it (`rules_nn::matmul_integer`).
        Op::MatMulInteger(_) => false,
        // No integer convolution either: legalization widens it (`rules_nn::conv_integer`).
        Op::ConvInteger(_) => false,
        Op::BitCast(_) => false,
        Op::Attention { .. } => {
            let head_ok = inputs.iter().take(3).all(|t| {
                t.shape
                    .dims()
                    .last()
                    .and_then(|d| d.as_static())
                    .is_none_or(|d| d <= MAX_HEAD)
            });
            first.is_some_and(single_float) && head_ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{AttnMask, Shape};

    #[test]
    fn attention_claims_head_sizes_up_to_256_only() {
        let t = |d| TensorType::new(DType::F16, Shape::of(&[2, 8, d]));
        let op = Op::Attention {
            mask: AttnMask::None,
            scale: None,
        };
        assert!(supports(&op, &[&t(256), &t(256), &t(256)]));
        assert!(!supports(&op, &[&t(320), &t(320), &t(320)]));
        assert!(!supports(
            &Op::MatMul,
            &[&TensorType::new(DType::I32, Shape::of(&[2, 2]))]
        ));
    }
}
