//! The op set: one enum of graph ops plus the scalar op tables (unary, binary, reduce) with
//! their names, algebraic flags and reference semantics. Adding an elementwise op is one row
//! here; every emitter then matches it exhaustively.

use crate::composite::Composite;
use crate::quant::QuantFormat;
use crate::scalar;
use crate::{DType, Shape, Tensor};
use std::sync::Arc;

/// Elementwise one-input ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnaryOp {
    /// -x
    Neg,
    /// |x|
    Abs,
    /// e^x
    Exp,
    /// natural log
    Log,
    /// square root
    Sqrt,
    /// 1/sqrt(x)
    Rsqrt,
    /// 1/x
    Reciprocal,
    /// hyperbolic tangent
    Tanh,
    /// logistic sigmoid
    Sigmoid,
    /// max(x, 0)
    Relu,
    /// an activation defined by its expansion into the ops here (GELU, SiLU, Softplus, ...);
    /// it sits where GELU stood so the ops keep their order
    Composite(Composite),
    /// error function
    Erf,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// round down
    Floor,
    /// round up
    Ceil,
    /// round half to even
    Round,
    /// -1, 0 or 1
    Sign,
    /// logical not (bool)
    Not,
    /// bitwise not (integers, two's complement)
    BitNot,
}

impl UnaryOp {
    /// Exact GELU (erf).
    pub const GELU: UnaryOp = UnaryOp::Composite(Composite::Gelu);
    /// GELU, tanh approximation.
    pub const GELU_TANH: UnaryOp = UnaryOp::Composite(Composite::GeluTanh);
    /// `x * sigmoid(x)`.
    pub const SILU: UnaryOp = UnaryOp::Composite(Composite::Silu);

    /// The ops listed before the later composites in [`UnaryOp::ALL`]: every primitive,
    /// with GELU, GELU-tanh and SiLU where they stood before composites were a table.
    const LISTED: [UnaryOp; 22] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::GELU,
        UnaryOp::GELU_TANH,
        UnaryOp::SILU,
        UnaryOp::Erf,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
        UnaryOp::Not,
        UnaryOp::BitNot,
    ];

    /// Every unary op: the primitives in their order, then the rest of [`Composite::ALL`], so a new
    /// composite joins without an edit here.
    pub const ALL: [UnaryOp; 19 + Composite::ALL.len()] = {
        let mut all = [UnaryOp::Neg; 19 + Composite::ALL.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = if i < Self::LISTED.len() {
                Self::LISTED[i]
            } else {
                UnaryOp::Composite(Composite::ALL[i - 19])
            };
            i += 1;
        }
        all
    };

    /// The op's name in dumps, reports and errors.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Reciprocal => "reciprocal",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Composite(c) => c.name(),
            UnaryOp::Erf => "erf",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Sign => "sign",
            UnaryOp::Not => "not",
            UnaryOp::BitNot => "bitwise_not",
        }
    }

    /// Reference semantics in f64.
    pub fn eval(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Reciprocal => 1.0 / x,
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => scalar::sigmoid(x),
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Composite(c) => c.eval(x),
            UnaryOp::Erf => scalar::erf(x),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
            UnaryOp::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }
            UnaryOp::Not => (x == 0.0) as u8 as f64,
            // ~x == -x - 1 in two's complement; the dtype's wrap-around makes it unsigned.
            UnaryOp::BitNot => -x - 1.0,
        }
    }

    /// Which input dtypes the op accepts (never the storage-only narrow types).
    pub fn accepts(self, dtype: DType) -> bool {
        if dtype.is_narrow() {
            return false;
        }
        match self {
            UnaryOp::Not => dtype == DType::Bool,
            UnaryOp::BitNot => dtype.is_int(),
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu => dtype != DType::Bool,
            _ => dtype.is_float(),
        }
    }
}

/// Elementwise two-input ops with numpy broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b (integers truncate toward zero)
    Div,
    /// a ^ b
    Pow,
    /// max(a, b)
    Max,
    /// min(a, b)
    Min,
    /// floored modulo: the result has the sign of b (numpy `mod`)
    Mod,
    /// truncated modulo: the result has the sign of a (C `fmod`)
    FMod,
    /// a == b
    Eq,
    /// a != b
    Ne,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
    /// logical and (bool)
    And,
    /// logical or (bool)
    Or,
    /// logical xor (bool)
    Xor,
    /// bitwise and (integers)
    BitAnd,
    /// bitwise or (integers)
    BitOr,
    /// bitwise xor (integers)
    BitXor,
    /// `a << b` (integers; shifts past the width give 0)
    Shl,
    /// `a >> b` (integers; arithmetic for signed types, shifts past the width give 0 or -1)
    Shr,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 23] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Mod,
        BinaryOp::FMod,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];

    /// The op's name in dumps, reports and errors.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Mod => "mod",
            BinaryOp::FMod => "fmod",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::BitAnd => "bitwise_and",
            BinaryOp::BitOr => "bitwise_or",
            BinaryOp::BitXor => "bitwise_xor",
            BinaryOp::Shl => "shift_left",
            BinaryOp::Shr => "shift_right",
        }
    }

    /// True when `a op b == b op a`.
    pub fn is_commutative(self) -> bool {
        matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Mul
                | BinaryOp::Max
                | BinaryOp::Min
                | BinaryOp::Eq
                | BinaryOp::Ne
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
        )
    }

    /// True when `(a op b) op c == a op (b op c)` exactly (so not float add).
    pub fn is_associative(self) -> bool {
        matches!(
            self,
            BinaryOp::Max
                | BinaryOp::Min
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
        )
    }

    /// True when `a op a == a`.
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            BinaryOp::Max
                | BinaryOp::Min
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::BitAnd
                | BinaryOp::BitOr
        )
    }

    /// True for the bitwise ops and shifts, which take and give integers.
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr
        )
    }

    /// True for comparisons, whose result is bool.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// True for the logical ops, which take and give bool.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }

    /// Result dtype for operands of `dtype`.
    pub fn result_dtype(self, dtype: DType) -> DType {
        if self.is_comparison() {
            DType::Bool
        } else {
            dtype
        }
    }

    /// Which operand dtypes the op accepts (never the storage-only narrow types).
    pub fn accepts(self, dtype: DType) -> bool {
        if dtype.is_narrow() {
            false
        } else if self.is_bitwise() {
            dtype.is_int()
        } else if self.is_logical() {
            dtype == DType::Bool
        } else if self.is_comparison() {
            true
        } else {
            dtype != DType::Bool
        }
    }

    /// Reference semantics in f64 for operands of `dtype`.
    pub fn eval(self, a: f64, b: f64, dtype: DType) -> f64 {
        let t = |v: bool| v as u8 as f64;
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => {
                if dtype.is_int() {
                    if b == 0.0 {
                        0.0
                    } else {
                        (a / b).trunc()
                    }
                } else {
                    a / b
                }
            }
            BinaryOp::Pow => a.powf(b),
            BinaryOp::Max => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            }
            BinaryOp::Min => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            }
            BinaryOp::Mod => {
                if dtype.is_int() && b == 0.0 {
                    0.0
                } else {
                    let r = a % b;
                    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                        r + b
                    } else {
                        r
                    }
                }
            }
            BinaryOp::FMod => {
                if dtype.is_int() && b == 0.0 {
                    0.0
                } else {
                    a % b
                }
            }
            BinaryOp::Eq => t(a == b),
            BinaryOp::Ne => t(a != b),
            BinaryOp::Lt => t(a < b),
            BinaryOp::Le => t(a <= b),
            BinaryOp::Gt => t(a > b),
            BinaryOp::Ge => t(a >= b),
            BinaryOp::And => t(a != 0.0 && b != 0.0),
            BinaryOp::Or => t(a != 0.0 || b != 0.0),
            BinaryOp::Xor => t((a != 0.0) != (b != 0.0)),
            // Integers are exact in f64 here; i128 keeps two's complement for negatives and
            // the whole u64 range, and the caller's rounding wraps to the dtype.
            BinaryOp::BitAnd => ((a as i128) & (b as i128)) as f64,
            BinaryOp::BitOr => ((a as i128) | (b as i128)) as f64,
            BinaryOp::BitXor => ((a as i128) ^ (b as i128)) as f64,
            BinaryOp::Shl | BinaryOp::Shr => {
                let (x, n) = (a as i128, b as i128);
                let width = dtype.bits() as i128;
                if !(0..width).contains(&n) {
                    match self {
                        BinaryOp::Shr if x < 0 => -1.0,
                        _ => 0.0,
                    }
                } else if self == BinaryOp::Shl {
                    (x << n) as f64
                } else {
                    (x >> n) as f64
                }
            }
        }
    }
}

/// Reductions over axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    /// sum
    Sum,
    /// arithmetic mean
    Mean,
    /// maximum
    Max,
    /// minimum
    Min,
    /// product
    Prod,
}

impl ReduceOp {
    /// Every reduce op.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ];

    /// The op's name in dumps, reports and errors.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
        }
    }

    /// The identity element the accumulator starts from.
    pub fn identity(self) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        }
    }

    /// Folds one value into the accumulator.
    pub fn combine(self, acc: f64, v: f64) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean => acc + v,
            ReduceOp::Prod => acc * v,
            ReduceOp::Max => {
                if v.is_nan() || acc.is_nan() {
                    f64::NAN
                } else {
                    acc.max(v)
                }
            }
            ReduceOp::Min => {
                if v.is_nan() || acc.is_nan() {
                    f64::NAN
                } else {
                    acc.min(v)
                }
            }
        }
    }

    /// Turns the accumulator into the result, given how many values were folded.
    pub fn finish(self, acc: f64, count: usize) -> f64 {
        match self {
            ReduceOp::Mean => acc / count as f64,
            _ => acc,
        }
    }
}

/// Which index reduction: position of the largest or smallest value (first on ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArgOp {
    /// index of the maximum
    ArgMax,
    /// index of the minimum
    ArgMin,
}

/// Pooling flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// maximum over the window
    Max,
    /// average over the window
    Avg,
}

/// How padding fills new elements.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub enum PadMode {
    /// a constant value
    Constant(f64),
    /// mirror without repeating the edge
    Reflect,
    /// repeat the edge
    Edge,
}

/// 2-D convolution parameters (NCHW input, OIHW weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Conv2dParams {
    /// stride along H, W
    pub stride: [usize; 2],
    /// padding: top, left, bottom, right
    pub pads: [usize; 4],
    /// dilation along H, W
    pub dilation: [usize; 2],
    /// channel groups
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            pads: [0; 4],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// 2-D pooling parameters (NCHW).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pool2dParams {
    /// max or average
    pub kind: PoolKind,
    /// window H, W
    pub kernel: [usize; 2],
    /// stride H, W
    pub stride: [usize; 2],
    /// padding: top, left, bottom, right
    pub pads: [usize; 4],
    /// dilation H, W
    pub dilation: [usize; 2],
    /// average counts padded elements
    pub count_include_pad: bool,
    /// output size rounds up instead of down
    pub ceil_mode: bool,
}

/// Attention masking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttnMask {
    /// no mask
    None,
    /// query i sees keys j <= i + (sk - sq)
    Causal,
    /// a fourth input added to the scores
    Additive,
}

/// A graph op. Inputs are the node's input list; attributes live here.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A run-time input, bound by name at every run.
    Input {
        /// input name
        name: String,
    },
    /// A weight bound by name once (at load or through `set_param`).
    Param {
        /// param name
        name: String,
    },
    /// A constant baked into the graph.
    Constant(Arc<Tensor>),
    /// Elementwise unary.
    Unary(UnaryOp),
    /// Elementwise binary with broadcasting.
    Binary(BinaryOp),
    /// `where(cond, a, b)` with broadcasting.
    Where,
    /// Elementwise dtype conversion.
    Cast(DType),
    /// Reinterprets each element's bits as another dtype of the same width (f32 <-> i32,
    /// f64 <-> i64, i8 <-> u8, bool -> u8, ...).
    BitCast(DType),
    /// Reduction over `axes`.
    Reduce {
        /// which reduction
        op: ReduceOp,
        /// reduced axes, sorted and unique
        axes: Vec<usize>,
        /// keep reduced axes as size 1
        keepdims: bool,
    },
    /// Index of the max/min along one axis (i64 result).
    ArgReduce {
        /// which index reduction
        op: ArgOp,
        /// the axis
        axis: usize,
        /// keep the axis as size 1
        keepdims: bool,
    },
    /// Softmax along an axis.
    Softmax {
        /// the axis
        axis: usize,
    },
    /// Log-softmax along an axis.
    LogSoftmax {
        /// the axis
        axis: usize,
    },
    /// Layer norm over dims `axis..`: inputs x, scale, bias.
    LayerNorm {
        /// first normalized axis
        axis: usize,
        /// epsilon inside the square root
        eps: f64,
    },
    /// RMS norm over dims `axis..`: inputs x, scale.
    RmsNorm {
        /// first normalized axis
        axis: usize,
        /// epsilon inside the square root
        eps: f64,
    },
    /// Matrix product over the last two dims, batch dims broadcast.
    MatMul,
    /// 2-D convolution: inputs x, w and optionally bias.
    Conv2d(Conv2dParams),
    /// 2-D max/avg pooling.
    Pool2d(Pool2dParams),
    /// Global max/avg pooling over H, W (NCHW → NC11).
    GlobalPool(PoolKind),
    /// Same elements, new shape.
    Reshape(Shape),
    /// Permute dims.
    Transpose(Vec<usize>),
    /// Strided slice (ONNX semantics: negative indices count from the end, clamped).
    Slice {
        /// sliced axes
        axes: Vec<usize>,
        /// start per axis
        starts: Vec<i64>,
        /// end per axis (exclusive)
        ends: Vec<i64>,
        /// step per axis (non-zero)
        steps: Vec<i64>,
    },
    /// Concatenate inputs along an axis.
    Concat {
        /// the axis
        axis: usize,
    },
    /// `data.take(indices, axis)`; negative indices count from the end.
    Gather {
        /// the axis of data
        axis: usize,
    },
    /// Broadcast to a shape (numpy rules).
    Expand(Shape),
    /// Pad each dim.
    Pad {
        /// (before, after) per dim
        pads: Vec<(usize, usize)>,
        /// fill rule
        mode: PadMode,
    },
    /// Scaled dot-product attention: q [.., sq, d], k [.., sk, d], v [.., sk, dv], optional
    /// additive mask broadcastable to [.., sq, sk].
    Attention {
        /// masking
        mask: AttnMask,
        /// score scale; None means 1/sqrt(d)
        scale: Option<f64>,
    },
    /// `x · dequantize(w)ᵀ`: x is f32 `[.., k]`, w is a u8 vector holding `n` rows of `k`
    /// values packed in `format` (see [`crate::quant`]); the result is f32 `[.., n]`.
    /// Weights stay packed; backends dequantize as they go.
    QuantMatMul {
        /// how w is packed
        format: QuantFormat,
        /// output features (rows of w)
        n: usize,
        /// input features (values per row of w)
        k: usize,
        /// a backend may round the activations to 8 bits for an integer dot (ONNX
        /// `MatMulNBits` with `accuracy_level` 4, GGUF models as llama.cpp runs them); false
        /// keeps them f32
        int8_activations: bool,
    },
    /// Integer matrix product `(a - a_zero) · (b - b_zero)` summed in i32, as ONNX
    /// `MatMulInteger` defines it; see [`crate::int_matmul`] for the inputs and modes.
    MatMulInteger(crate::IntMatMul),
    /// Integer convolution `(x - x_zero) ⊛ (w - w_zero)` summed in i32, optionally
    /// requantized to 8 bits (ONNX `ConvInteger`, `QLinearConv`); see [`crate::int_conv`].
    ConvInteger(crate::IntConv),
}

impl Op {
    /// The op's name in dumps, reports and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Param { .. } => "param",
            Op::Constant(_) => "constant",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Cast(_) => "cast",
            Op::BitCast(_) => "bitcast",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgReduce { op, .. } => match op {
                ArgOp::ArgMax => "argmax",
                ArgOp::ArgMin => "argmin",
            },
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::MatMul => "matmul",
            Op::Conv2d(_) => "conv2d",
            Op::Pool2d(p) => match p.kind {
                PoolKind::Max => "max_pool2d",
                PoolKind::Avg => "avg_pool2d",
            },
            Op::GlobalPool(k) => match k {
                PoolKind::Max => "global_max_pool",
                PoolKind::Avg => "global_avg_pool",
            },
            Op::Reshape(_) => "reshape",
            Op::Transpose(_) => "transpose",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Gather { .. } => "gather",
            Op::Expand(_) => "expand",
            Op::Pad { .. } => "pad",
            Op::Attention { .. } => "attention",
            Op::QuantMatMul { .. } => "quant_matmul",
            Op::MatMulInteger(_) => "matmul_integer",
            Op::ConvInteger(_) => "conv_integer",
        }
    }

    /// True for graph leaves (inputs, params, constants).
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Param { .. } | Op::Constant(_))
    }

    /// True for per-element ops that fuse into loop kernels.
    pub fn is_elementwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast(_))
    }

    /// Attribute summary for dumps, e.g. `axes=[1] keepdims=true`.
    pub fn attrs(&self) -> String {
        match self {
            Op::Input { name } | Op::Param { name } => format!("\"{name}\""),
            Op::Constant(t) => format!("{:?}", t),
            Op::Cast(d) | Op::BitCast(d) => format!("to={d}"),
            Op::Reduce { axes, keepdims, .. } => format!("axes={axes:?} keepdims={keepdims}"),
            Op::ArgReduce { axis, keepdims, .. } => format!("axis={axis} keepdims={keepdims}"),
            Op::Softmax { axis }
            | Op::LogSoftmax { axis }
            | Op::Concat { axis }
            | Op::Gather { axis } => {
                format!("axis={axis}")
            }
            Op::LayerNorm { axis, eps } | Op::RmsNorm { axis, eps } => {
                format!("axis={axis} eps={eps:e}")
            }
            Op::Conv2d(p) => format!(
                "stride={:?} pads={:?} dilation={:?} groups={}",
                p.stride, p.pads, p.dilation, p.groups
            ),
            Op::Pool2d(p) => format!(
                "kernel={:?} stride={:?} pads={:?} dilation={:?}{}{}",
                p.kernel,
                p.stride,
                p.pads,
                p.dilation,
                if p.count_include_pad {
                    " count_include_pad"
                } else {
                    ""
                },
                if p.ceil_mode { " ceil_mode" } else { "" }
            ),
            Op::Reshape(s) | Op::Expand(s) => format!("shape={s}"),
            Op::Transpose(p) => format!("perm={p:?}"),
            Op::Slice {
                axes,
                starts,
                ends,
                steps,
            } => {
                format!("axes={axes:?} starts={starts:?} ends={ends:?} steps={steps:?}")
            }
            Op::Pad { pads, mode } => format!("pads={pads:?} mode={mode:?}"),
            Op::Attention { mask, scale } => format!("mask={mask:?} scale={scale:?}"),
            Op::QuantMatMul {
                format,
                n,
                k,
                int8_activations,
            } => format!("format={format} n={n} k={k} int8_activations={int8_activations}"),
            Op::MatMulInteger(m) => format!("a={:?} scaled={}", m.a, m.scaled),
            Op::ConvInteger(c) => format!(
                "stride={:?} pads={:?} dilation={:?} groups={} requantize={}",
                c.conv.stride, c.conv.pads, c.conv.dilation, c.conv.groups, c.requantize
            ),
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::MatMul | Op::GlobalPool(_) => {
                String::new()
            }
        }
    }
}

/// Start and length of a strided slice of a dim of size `dim` (ONNX clamping rules).
pub fn slice_range(dim: usize, start: i64, end: i64, step: i64) -> (i64, usize) {
    let d = dim as i64;
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let norm = |v: i64| if v < 0 { v + d } else { v };
    if step > 0 {
        let s = clamp(norm(start), 0, d);
        let e = clamp(norm(end), 0, d);
        let len = if e > s { (e - s + step - 1) / step } else { 0 };
        (s, len as usize)
    } else {
        let s = clamp(norm(start), -1, d - 1);
        let e = clamp(norm(end), -1, d - 1);
        let len = if s > e {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        (s, len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for u in UnaryOp::ALL {
            assert!(names.insert(u.name()));
        }
        for b in BinaryOp::ALL {
            assert!(names.insert(b.name()));
        }
        for r in ReduceOp::ALL {
            assert!(names.insert(r.name()));
        }
    }

    #[test]
    fn hand_computed_semantics() {
        assert_eq!(BinaryOp::Mod.eval(-7.0, 3.0, DType::I32), 2.0);
        assert_eq!(BinaryOp::FMod.eval(-7.0, 3.0, DType::I32), -1.0);
        assert_eq!(BinaryOp::Div.eval(-7.0, 2.0, DType::I64), -3.0);
        assert_eq!(BinaryOp::Div.eval(-7.0, 2.0, DType::F32), -3.5);
        assert_eq!(UnaryOp::Round.eval(2.5), 2.0);
        assert_eq!(UnaryOp::Round.eval(-1.5), -2.0);
        assert_eq!(UnaryOp::Sign.eval(-0.3), -1.0);
        assert_eq!(UnaryOp::Relu.eval(-2.0), 0.0);
        assert!((UnaryOp::SILU.eval(1.0) - 0.731_058_578_630_004_9).abs() < 1e-15);
        assert_eq!(BinaryOp::Xor.eval(1.0, 1.0, DType::Bool), 0.0);
        assert_eq!(ReduceOp::Mean.finish(6.0, 4), 1.5);
    }

    #[test]
    fn bitwise_semantics() {
        let r = |op: BinaryOp, a: f64, b: f64, d: DType| d.round(op.eval(a, b, d));
        assert_eq!(r(BinaryOp::BitAnd, 12.0, 10.0, DType::U8), 8.0);
        assert_eq!(r(BinaryOp::BitOr, 12.0, 10.0, DType::U8), 14.0);
        assert_eq!(r(BinaryOp::BitXor, 12.0, 10.0, DType::U8), 6.0);
        assert_eq!(r(BinaryOp::BitAnd, -1.0, 300.0, DType::I16), 300.0);
        assert_eq!(r(BinaryOp::BitXor, -2.0, 1.0, DType::I32), -1.0);
        assert_eq!(r(BinaryOp::Shl, 16.0, 3.0, DType::U8), 128.0);
        assert_eq!(r(BinaryOp::Shl, 17.0, 4.0, DType::U8), 16.0);
        assert_eq!(r(BinaryOp::Shr, 16.0, 3.0, DType::U64), 2.0);
        assert_eq!(r(BinaryOp::Shr, -16.0, 2.0, DType::I32), -4.0);
        assert_eq!(r(BinaryOp::Shl, 1.0, 8.0, DType::U8), 0.0);
        assert_eq!(r(BinaryOp::Shr, -5.0, 40.0, DType::I32), -1.0);
        let big = 2f64.powi(40);
        assert_eq!(r(BinaryOp::BitOr, big, 1.0, DType::U64), big + 1.0);
        let not = |x: f64, d: DType| d.round(UnaryOp::BitNot.eval(x));
        assert_eq!(not(0.0, DType::U16), 65535.0);
        assert_eq!(not(5.0, DType::I8), -6.0);
        assert_eq!(not(255.0, DType::U8), 0.0);
        assert!(!BinaryOp::BitAnd.accepts(DType::F32));
        assert!(!BinaryOp::Add.accepts(DType::F8E4M3FN));
        assert!(BinaryOp::Shl.accepts(DType::U64));
    }

    #[test]
    fn slice_ranges() {
        assert_eq!(slice_range(10, 2, 8, 3), (2, 2));
        assert_eq!(slice_range(10, -3, i64::MAX, 1), (7, 3));
        assert_eq!(slice_range(5, -1, i64::MIN, -1), (4, 5));
        assert_eq!(slice_range(5, 4, 1, -2), (4, 2));
        assert_eq!(slice_range(5, 3, 1, 1), (3, 0));
    }
}
