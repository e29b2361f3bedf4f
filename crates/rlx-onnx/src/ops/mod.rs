//! The op registry: one line per ONNX op, naming the mapper that turns it into IR ops.
//! Mappers live in files named after their op family. Ops that take or make sequences,
//! optionals or strings, and control flow, have their own registry in [`values`].

pub mod attention;
pub mod control;
pub mod conv;
pub mod conv3d;
pub mod elementwise;
pub mod gather;
pub mod label_encoder;
pub mod linalg;
pub mod loss;
pub mod misc;
pub mod ml;
pub mod movement;
pub mod norm;
pub mod optional;
pub mod pool_index;
pub mod quant;
pub mod quant_conv;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod roi_align;
pub mod rotary;
pub mod sampling;
pub mod sequence;
pub mod shape;
pub mod spectral;
pub mod stateful;
pub mod string;
pub mod tfidf;
pub mod training;
pub mod trig;
pub mod values;

use crate::ctx::{Ctx, Val, R};
use crate::node::NodeIn;
use elementwise as ew;
use rlx_ir::{BinaryOp as B, UnaryOp as U};

/// Maps one node to the values of its outputs.
pub type Mapper = fn(&mut Ctx, &NodeIn) -> R<Vec<Val>>;

/// The mapper for an op of a domain (`ai.onnx` is the default domain), if there is one.
pub fn lookup(domain: &str, op_type: &str) -> Option<Mapper> {
    if domain == "com.microsoft" {
        return crate::contrib::lookup(op_type);
    }
    if domain == "ai.onnx.ml" {
        return ml::lookup(op_type);
    }
    if domain == "ai.onnx.preview.training" {
        return training::lookup(op_type);
    }
    if domain != "ai.onnx" {
        return None;
    }
    Some(match op_type {
        // elementwise: IR rows
        "Abs" => |c, n| ew::unary(c, n, U::Abs),
        "Neg" => |c, n| ew::unary(c, n, U::Neg),
        "Exp" => |c, n| ew::unary(c, n, U::Exp),
        "Log" => |c, n| ew::unary(c, n, U::Log),
        "Sqrt" => |c, n| ew::unary(c, n, U::Sqrt),
        "Reciprocal" => |c, n| ew::unary(c, n, U::Reciprocal),
        "Tanh" => |c, n| ew::unary(c, n, U::Tanh),
        "Sigmoid" => |c, n| ew::unary(c, n, U::Sigmoid),
        "Relu" => |c, n| ew::unary(c, n, U::Relu),
        "Erf" => |c, n| ew::unary(c, n, U::Erf),
        "Sin" => |c, n| ew::unary(c, n, U::Sin),
        "Cos" => |c, n| ew::unary(c, n, U::Cos),
        "Floor" => |c, n| ew::unary(c, n, U::Floor),
        "Ceil" => |c, n| ew::unary(c, n, U::Ceil),
        "Round" => |c, n| ew::unary(c, n, U::Round),
        "Sign" => |c, n| ew::unary(c, n, U::Sign),
        "Not" => |c, n| ew::unary(c, n, U::Not),
        "Add" => |c, n| ew::binary(c, n, B::Add),
        "Sub" => |c, n| ew::binary(c, n, B::Sub),
        "Mul" => |c, n| ew::binary(c, n, B::Mul),
        "Div" => |c, n| ew::binary(c, n, B::Div),
        "Equal" => |c, n| ew::binary(c, n, B::Eq),
        "Less" => |c, n| ew::binary(c, n, B::Lt),
        "LessOrEqual" => |c, n| ew::binary(c, n, B::Le),
        "Greater" => |c, n| ew::binary(c, n, B::Gt),
        "GreaterOrEqual" => |c, n| ew::binary(c, n, B::Ge),
        "And" => |c, n| ew::binary(c, n, B::And),
        "Or" => |c, n| ew::binary(c, n, B::Or),
        "Xor" => |c, n| ew::binary(c, n, B::Xor),
        "Pow" => ew::pow,
        "Mod" => ew::modulo,
        "Max" => |c, n| ew::variadic(c, n, B::Max, false),
        "Min" => |c, n| ew::variadic(c, n, B::Min, false),
        "Sum" => |c, n| ew::variadic(c, n, B::Add, false),
        "Mean" => |c, n| ew::variadic(c, n, B::Add, true),
        "Where" => ew::where_,
        "Cast" => ew::cast,
        "CastLike" => ew::cast_like,
        "Identity" => ew::identity,
        "Clip" => ew::clip,
        "IsNaN" => ew::is_nan,
        "IsInf" => ew::is_inf,
        "BitShift" => ew::bit_shift,
        "BitwiseAnd" => |c, n| ew::binary(c, n, B::BitAnd),
        "BitwiseOr" => |c, n| ew::binary(c, n, B::BitOr),
        "BitwiseXor" => |c, n| ew::binary(c, n, B::BitXor),
        "BitwiseNot" => |c, n| ew::unary(c, n, U::BitNot),
        "BitCast" => ew::bit_cast,
        "PRelu" => ew::prelu,
        "SwiGLU" => ew::swiglu,
        // elementwise: closed forms
        "LeakyRelu" | "Elu" | "Celu" | "Selu" | "HardSigmoid" | "HardSwish" | "Softplus"
        | "Softsign" | "ThresholdedRelu" | "Shrink" | "Mish" | "Swish" | "Gelu" => ew::activation,
        "Tan" | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh" | "Asin" | "Acos" | "Atan" => {
            trig::trig
        }
        // shapes and constants
        "Shape" => shape::shape,
        "Size" => shape::size,
        "Reshape" => shape::reshape,
        "Flatten" => shape::flatten,
        "Squeeze" => shape::squeeze,
        "Unsqueeze" => shape::unsqueeze,
        "Constant" => shape::constant,
        "ConstantOfShape" => shape::constant_of_shape,
        "EyeLike" => shape::eye_like,
        "Range" => shape::range,
        "CenterCropPad" => movement::center_crop_pad,
        // data movement
        "Transpose" => movement::transpose,
        "Concat" => movement::concat,
        "Split" => movement::split,
        "Slice" => movement::slice,
        "Gather" => movement::gather,
        "Expand" => movement::expand,
        "Tile" => movement::tile,
        "Pad" => movement::pad,
        "DepthToSpace" | "SpaceToDepth" => movement::depth_space,
        "ReverseSequence" => movement::reverse_sequence,
        // reductions
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => reduce::reduce,
        "ArgMax" | "ArgMin" => reduce::arg,
        "Softmax" | "LogSoftmax" | "Hardmax" => reduce::softmax,
        "CumSum" | "CumProd" => reduce::cumulative,
        "TopK" => reduce::top_k,
        // linear algebra
        "MatMul" => linalg::matmul,
        "Gemm" => linalg::gemm,
        "Einsum" => linalg::einsum,
        "Det" => linalg::det,
        // convolution and pooling
        "Conv" => conv::conv,
        "ConvTranspose" => conv::conv_transpose,
        "MaxPool" | "AveragePool" => conv::pool,
        "LpPool" => conv::lp_pool,
        "GlobalAveragePool" | "GlobalMaxPool" => conv::global_pool,
        // normalization
        "BatchNormalization" => norm::batch_norm,
        "InstanceNormalization" => norm::instance_norm,
        "GroupNormalization" => norm::group_norm,
        "LayerNormalization" | "RMSNormalization" => norm::layer_norm,
        "LpNormalization" => norm::lp_norm,
        "MeanVarianceNormalization" => norm::mvn,
        "LRN" => norm::lrn,
        "Attention" => attention::attention,
        "RotaryEmbedding" => rotary::rotary,
        "LinearAttention" => stateful::linear_attention,
        "CausalConvWithState" => stateful::causal_conv_with_state,
        "TensorScatter" => stateful::tensor_scatter,
        "RNN" | "GRU" | "LSTM" => rnn::recurrent,
        "NegativeLogLikelihoodLoss" => loss::nll_loss,
        "SoftmaxCrossEntropyLoss" => loss::softmax_ce,
        "GatherElements" => gather::gather_elements,
        "GatherND" => gather::gather_nd,
        "ScatterElements" | "Scatter" => gather::scatter_elements,
        "ScatterND" => gather::scatter_nd,
        "Resize" | "Upsample" => resize::resize,
        "GridSample" => sampling::grid_sample,
        "AffineGrid" => sampling::affine_grid,
        "Col2Im" => sampling::col2im,
        "RoiAlign" => roi_align::roi_align,
        // quantization
        "QuantizeLinear" => quant::quantize,
        "DequantizeLinear" => quant::dequantize,
        "DynamicQuantizeLinear" => quant::dynamic_quantize,
        "QLinearMatMul" => quant::qlinear_matmul,
        "MatMulInteger" => quant::matmul_integer,
        "ConvInteger" => quant_conv::conv_integer,
        "QLinearConv" => quant_conv::qlinear_conv,
        // spectral
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => spectral::window,
        "DFT" => spectral::dft,
        // control flow (`If` and `Loop` are in `values`: their values may be sequences)
        "Scan" => control::scan,
        // masks and selections
        "Dropout" => misc::dropout,
        "Trilu" => misc::trilu,
        "OneHot" => misc::one_hot,
        "NonZero" => misc::non_zero,
        "Compress" => misc::compress,
        "Unique" => misc::unique,
        "NonMaxSuppression" => misc::non_max_suppression,
        "TfIdfVectorizer" => tfidf::tfidf_vectorizer,
        "MaxUnpool" => misc::max_unpool,
        _ => return None,
    })
}
