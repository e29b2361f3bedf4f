//! GEMM steps as plain data: what a matmul or convolution asks cuBLASLt to do, decided at
//! plan time (no GPU needed) and executed by `blas`. All operands are row-major; batched
//! GEMMs use one element stride per operand.

use crate::codegen::ArgRef;
use rlx_ir::kernel::{Expr, LoopKernel};
use rlx_ir::{BinaryOp, DType, UnaryOp};

/// One GEMM operand: where it lives and how batches step through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    /// the buffer or scratch
    pub arg: ArgRef,
    /// element offset of batch 0
    pub offset: usize,
    /// element stride between batches (0 broadcasts)
    pub batch_stride: usize,
}

/// An activation cuBLASLt applies after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// none
    None,
    /// max(x, 0)
    Relu,
    /// GELU, tanh approximation (cuBLASLt's GELU)
    GeluTanh,
}

/// `C[b] = A[b] (m x k) * B[b] (k x n)`, row-major, plus an optional fused bias over `n`
/// and activation.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmSpec {
    /// the kernel it comes from
    pub label: String,
    /// element type of A, B, C
    pub dtype: DType,
    /// rows of A and C
    pub m: usize,
    /// columns of B and C
    pub n: usize,
    /// inner dim
    pub k: usize,
    /// number of batches
    pub batch: usize,
    /// left operand
    pub a: Operand,
    /// right operand
    pub b: Operand,
    /// result
    pub c: Operand,
    /// bias of length `n` added to every row (cuBLASLt epilogue)
    pub bias: Option<ArgRef>,
    /// activation after the bias
    pub activation: Activation,
}

impl GemmSpec {
    /// Shapes and dtype for messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}`: {} batch {} x [{}x{}] * [{}x{}]",
            self.label, self.dtype, self.batch, self.m, self.k, self.k, self.n
        )
    }

    /// Floating-point operations of one run.
    pub fn flops(&self) -> f64 {
        2.0 * (self.batch * self.m * self.n * self.k) as f64
    }
}

/// Recognizes an epilogue cuBLASLt can fuse: `act(result + bias)` with the bias read along
/// the last dim only, all in the result dtype. Returns the bias buffer and activation.
pub fn match_bias_epilogue(e: &LoopKernel, dtype: DType, n: usize) -> Option<(usize, Activation)> {
    if e.inputs.len() != 2
        || e.reduce.is_some()
        || e.out_dtype() != dtype
        || e.shape.last() != Some(&n)
    {
        return None;
    }
    let bias = &e.inputs[1];
    let last = e.shape.len() - 1;
    let along_last = bias.view.offset == 0
        && bias
            .view
            .strides
            .iter()
            .enumerate()
            .all(|(d, &s)| if d == last { s == 1 } else { s == 0 });
    if !along_last || bias.dtype != dtype || e.inputs[0].dtype != dtype {
        return None;
    }
    let ex: Vec<&Expr> = e.body.iter().map(|n| &n.expr).collect();
    let loads = matches!(
        (ex.first(), ex.get(1)),
        (Some(Expr::Load(0)), Some(Expr::Load(1))) | (Some(Expr::Load(1)), Some(Expr::Load(0)))
    );
    let sum = matches!(
        ex.get(2),
        Some(Expr::Binary(BinaryOp::Add, 0, 1)) | Some(Expr::Binary(BinaryOp::Add, 1, 0))
    );
    if !loads || !sum {
        return None;
    }
    match (ex.len(), e.result, ex.get(3)) {
        (3, 2, None) => Some((bias.buffer, Activation::None)),
        (4, 3, Some(Expr::Unary(UnaryOp::Relu, 2))) => Some((bias.buffer, Activation::Relu)),
        (4, 3, Some(Expr::Unary(UnaryOp::GeluTanh, 2))) => {
            Some((bias.buffer, Activation::GeluTanh))
        }
        _ => None,
    }
}
