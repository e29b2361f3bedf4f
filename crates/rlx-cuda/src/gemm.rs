//! GEMM steps as plain data: what a matmul or convolution asks cuBLASLt to do, decided at
//! plan time (no GPU needed) and executed by `blas`. All operands are row-major (rows may be
//! padded: a row stride); batched GEMMs use one element stride per operand, and an optional
//! outer batch level a second one (attention over `[batch, seq, heads, dim]` operands).

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
    /// element stride between outer batches (see [`GemmSpec::outer`])
    pub outer_stride: usize,
    /// element stride between rows, when rows are not packed
    pub row_stride: Option<usize>,
}

impl Operand {
    /// The largest power-of-two byte alignment (at most 256, the arena's) that every
    /// matrix of this operand starts on and every row keeps, for elements of `size` bytes.
    pub fn alignment(&self, size: usize) -> u32 {
        let parts = [
            self.offset,
            self.batch_stride,
            self.outer_stride,
            self.row_stride.unwrap_or(0),
        ];
        let mut align = 256usize;
        for p in parts.into_iter().filter(|&p| p != 0) {
            align = align.min(1 << (p * size).trailing_zeros().min(8));
        }
        align as u32
    }

    /// Element offset of batch `i` of outer batch `o`.
    pub fn at(&self, o: usize, i: usize) -> usize {
        self.offset + o * self.outer_stride + i * self.batch_stride
    }
}

/// An activation cuBLASLt applies after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Activation {
    /// none
    #[default]
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
    /// number of outer batches (1 for a plain GEMM): batch `(o, i)` of an operand starts at
    /// `offset + o * outer_stride + i * batch_stride`
    pub outer: usize,
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
    /// a result-shaped tensor added before the activation (cuBLASLt's `C`, beta = 1)
    pub residual: Option<ArgRef>,
    /// B is stored as `[n x k]` row-major and used transposed (`A * B^T`)
    pub trans_b: bool,
    /// scale applied to the product (`alpha * A * B`)
    pub alpha: f64,
}

impl GemmSpec {
    /// Shapes and dtype for messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}`: {} batch {}{} x [{}x{}] * [{}x{}]{}",
            self.label,
            self.dtype,
            self.batch,
            if self.outer > 1 {
                format!(" x {}", self.outer)
            } else {
                String::new()
            },
            self.m,
            self.k,
            self.k,
            self.n,
            if self.trans_b { " (B transposed)" } else { "" }
        )
    }

    /// Floating-point operations of one run.
    pub fn flops(&self) -> f64 {
        2.0 * (self.outer * self.batch * self.m * self.n * self.k) as f64
    }
}

/// An epilogue cuBLASLt fuses: `act(result + bias + residual)`, each term optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmEpilogue {
    /// buffer of the bias along the last dim
    pub bias: Option<usize>,
    /// buffer of a result-shaped tensor added as cuBLASLt's `C` (beta = 1)
    pub residual: Option<usize>,
    /// activation applied last
    pub activation: Activation,
}

/// Recognizes an epilogue cuBLASLt can fuse: `act(result + bias + residual)` where the sum
/// is any tree of adds over distinct loads, the bias is read along the last dim only, the
/// residual is read contiguously over the whole result, everything is in the result dtype,
/// and the activation (if any) is relu or tanh-GELU at the root.
pub fn match_gemm_epilogue(e: &LoopKernel, dtype: DType, n: usize) -> Option<GemmEpilogue> {
    if e.reduce.is_some()
        || e.out_dtype() != dtype
        || e.shape.last() != Some(&n)
        || e.inputs.iter().any(|i| i.dtype != dtype)
        || e.body.iter().any(|b| b.dtype != dtype)
    {
        return None;
    }
    // Which loads each node sums (a bit per input), or None when it is not a pure sum.
    let mut sums: Vec<Option<u64>> = Vec::with_capacity(e.body.len());
    for node in &e.body {
        let v = match &node.expr {
            Expr::Load(i) if *i < 64 => Some(1u64 << i),
            Expr::Binary(BinaryOp::Add, a, b) => match (sums[*a], sums[*b]) {
                (Some(x), Some(y)) if x & y == 0 => Some(x | y),
                _ => None,
            },
            _ => None,
        };
        sums.push(v);
    }
    let (root, activation) = match &e.body[e.result].expr {
        Expr::Unary(UnaryOp::Relu, a) => (*a, Activation::Relu),
        Expr::Unary(UnaryOp::GELU_TANH, a) => (*a, Activation::GeluTanh),
        _ => (e.result, Activation::None),
    };
    let terms = sums[root]?;
    if terms != (1u64 << e.inputs.len()) - 1 || e.inputs[0].view.offset != 0 {
        return None;
    }
    let last = e.shape.len() - 1;
    let contiguous = rlx_ir::kernel::row_major(&e.shape);
    let mut out = GemmEpilogue {
        bias: None,
        residual: None,
        activation,
    };
    if e.inputs[0].view.strides != contiguous {
        return None;
    }
    for input in &e.inputs[1..] {
        let v = &input.view;
        let along_last = v.offset == 0
            && v.strides
                .iter()
                .enumerate()
                .all(|(d, &s)| if d == last { s == 1 } else { s == 0 });
        if along_last && out.bias.is_none() {
            out.bias = Some(input.buffer);
        } else if v.offset == 0 && v.strides == contiguous && out.residual.is_none() {
            out.residual = Some(input.buffer);
        } else {
            return None;
        }
    }
    Some(out)
}
