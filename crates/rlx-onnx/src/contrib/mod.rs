//! ONNX Runtime's contrib ops (the `com.microsoft` domain), as its transformer optimizer and
//! quantization tools write them: each one decomposed into IR ops here, one line per op in
//! [`lookup`], so no backend needs a rule for them. Mappers live in files named after their
//! op family; variants an op does not implement fail with the node, the op and the
//! attribute or input that selects the variant.

pub mod activation;
pub mod attention;
pub mod matmul;
pub mod nbits;
pub mod norm;
pub mod qlinear;
pub mod rotary;

use crate::ops::Mapper;

/// The mapper for a `com.microsoft` op, if there is one.
pub fn lookup(op_type: &str) -> Option<Mapper> {
    Some(match op_type {
        // activations and bias fusions
        "Gelu" => activation::gelu,
        "BiasGelu" => activation::bias_gelu,
        "FastGelu" => activation::fast_gelu,
        "QuickGelu" => activation::quick_gelu,
        "BiasAdd" => activation::bias_add,
        "BiasSplitGelu" => activation::bias_split_gelu,
        // normalizations
        "SkipLayerNormalization" => |c, n| norm::skip_layer_norm(c, n, false),
        "SkipSimplifiedLayerNormalization" => |c, n| norm::skip_layer_norm(c, n, true),
        "EmbedLayerNormalization" => norm::embed_layer_norm,
        // attention
        "Attention" => attention::attention,
        "MultiHeadAttention" => attention::multi_head_attention,
        "GroupQueryAttention" => attention::group_query_attention,
        "RotaryEmbedding" => rotary::rotary_embedding,
        // products
        "FusedMatMul" => matmul::fused_matmul,
        "MatMulNBits" => nbits::matmul_nbits,
        "DynamicQuantizeMatMul" => matmul::dynamic_quantize_matmul,
        "MatMulIntegerToFloat" => matmul::matmul_integer_to_float,
        // int8 elementwise, pooling and concatenation
        "QLinearAdd" => |c, n| qlinear::binary(c, n, rlx_ir::BinaryOp::Add),
        "QLinearMul" => |c, n| qlinear::binary(c, n, rlx_ir::BinaryOp::Mul),
        "QLinearSigmoid" => qlinear::sigmoid,
        "QLinearLeakyRelu" => qlinear::leaky_relu,
        "QLinearGlobalAveragePool" => qlinear::global_average_pool,
        "QLinearConcat" => qlinear::concat,
        _ => return None,
    })
}
