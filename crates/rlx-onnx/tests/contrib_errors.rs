//! ONNX Runtime contrib ops given variants they do not implement, or malformed input: every
//! unsupported node is listed at once with its node name, op and the attribute or input
//! that selects the variant; malformed attributes and inputs are errors naming the node,
//! never panics.

mod support;

use rlx_onnx::proto::{AttributeProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use rlx_onnx::{load_bytes, ImportOptions, OnnxError};
use support::*;

fn ms(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    let mut n = node(op, name, inputs, outputs);
    n.domain = Some("com.microsoft".into());
    n.attribute = attrs;
    n
}

fn with_ms(mut m: ModelProto) -> ModelProto {
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("com.microsoft".into()),
        version: Some(1),
    });
    m
}

fn import(m: &ModelProto) -> Result<rlx_onnx::OnnxModel, OnnxError> {
    load_bytes(bytes(m), None, "contrib.onnx", &ImportOptions::default())
}

fn u8_init(name: &str, dims: &[i64], v: &[u8]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(2),
        raw_data: Some(v.to_vec().into()),
        ..Default::default()
    }
}

#[test]
fn unsupported_variants_are_listed_together() {
    let w = f32_init("w", &[8, 24], &[0.1; 8 * 24]);
    let m = with_ms(model(
        vec![
            ms(
                "Attention",
                "att_rotary",
                &["x", "w"],
                &["a"],
                vec![int_attr("num_heads", 2), int_attr("do_rotary", 1)],
            ),
            ms(
                "FusedMatMul",
                "fmm",
                &["x", "x"],
                &["b"],
                vec![int_attr("transBatchA", 1)],
            ),
            ms(
                "GroupQueryAttention",
                "gqa",
                &["x", "x", "x", "", "", "sl", "tot"],
                &["c"],
                vec![
                    int_attr("num_heads", 2),
                    int_attr("kv_num_heads", 2),
                    int_attr("smooth_softmax", 1),
                ],
            ),
            ms("NotAContribOp", "nope", &["x"], &["d"], vec![]),
            node("Add", "add", &["a", "b"], &["y"]),
        ],
        vec![
            value("x", 1, &[1, 3, 8]),
            value("sl", 6, &[1]),
            value("tot", 6, &[1]),
        ],
        vec![value("y", 1, &[1, 3, 8])],
        vec![w],
    ));
    let e = import(&m).unwrap_err();
    let OnnxError::Unsupported { nodes, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(nodes.len(), 4, "{e}");
    let text = e.to_string();
    for want in [
        "`att_rotary` (com.microsoft:Attention opset 1): do_rotary = 1",
        "`fmm` (com.microsoft:FusedMatMul opset 1): transBatchA = 1",
        "`gqa` (com.microsoft:GroupQueryAttention opset 1): smooth_softmax != 0",
        "`nope` (com.microsoft:NotAContribOp opset 1): op `NotAContribOp` is not supported",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn malformed_contrib_nodes_are_errors_naming_the_node() {
    let cases: Vec<(NodeProto, Vec<TensorProto>, &str)> = vec![
        (
            ms("Attention", "att", &["x", "w"], &["y"], vec![]),
            vec![f32_init("w", &[8, 24], &[0.1; 8 * 24])],
            "num_heads must be given and positive",
        ),
        (
            ms(
                "Attention",
                "att_sizes",
                &["x", "w"],
                &["y"],
                vec![
                    int_attr("num_heads", 2),
                    ints_attr("qkv_hidden_sizes", &[8, 4, 12]),
                ],
            ),
            vec![f32_init("w", &[8, 24], &[0.1; 8 * 24])],
            "qkv_hidden_sizes",
        ),
        (
            ms(
                "MatMulNBits",
                "nbits_size",
                &["x", "b", "s"],
                &["y"],
                vec![
                    int_attr("K", 8),
                    int_attr("N", 4),
                    int_attr("block_size", 16),
                ],
            ),
            vec![
                u8_init("b", &[4, 1, 3], &[0; 12]),
                f32_init("s", &[4], &[1.0; 4]),
            ],
            "B must be u8",
        ),
        (
            ms(
                "MatMulNBits",
                "nbits_block",
                &["x", "b", "s"],
                &["y"],
                vec![
                    int_attr("K", 8),
                    int_attr("N", 4),
                    int_attr("block_size", 24),
                ],
            ),
            vec![
                u8_init("b", &[4, 1, 12], &[0; 48]),
                f32_init("s", &[4], &[1.0; 4]),
            ],
            "block_size 24 must be a power of two",
        ),
        (
            ms("SkipLayerNormalization", "sln", &["x"], &["y"], vec![]),
            vec![],
            "input 1 is required but missing",
        ),
        (
            ms(
                "QLinearConcat",
                "qcat",
                &["x", "x", "x"],
                &["y"],
                vec![int_attr("axis", 0)],
            ),
            vec![],
            "triples",
        ),
    ];
    for (n, inits, want) in cases {
        let name = n.name().to_string();
        let m = with_ms(model(
            vec![n],
            vec![value("x", 1, &[1, 3, 8])],
            vec![value("y", 1, &[1, 3, 8])],
            inits,
        ));
        let e = import(&m).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{name}`")) && e.contains(want),
            "{name}: {e}"
        );
    }
}
