//! Sequences, optionals and strings as real exports use them, resolved at import into a
//! plain tensor graph and run on the CPU against references computed here: a loop-carried
//! sequence grown by `SequenceInsert` (torch's `torch.stack` over a Python loop), a
//! `SequenceAt` at a run-time position, a tokenizer-style string pipeline feeding a
//! gather, an `If` on an optional; and the errors for what cannot be resolved.

mod support;

use proptest::prelude::*;
use rlx_ir::{DType, Tensor};
use rlx_onnx::proto::{
    attribute_proto::AttributeType, type_proto, AttributeProto, GraphProto, NodeProto, TensorProto,
    TypeProto, ValueInfoProto,
};
use rlx_onnx::{ImportOptions, OnnxModel, OnnxValue, StringTensor};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use support::*;

fn with(mut n: NodeProto, attrs: Vec<AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    }
}

fn strings_attr(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Strings as i32),
        strings: v.iter().map(|s| s.as_bytes().to_vec().into()).collect(),
        ..Default::default()
    }
}

/// A sequence-of-f32-tensors value info.
fn seq_value(name: &str) -> ValueInfoProto {
    let elem = TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(1),
            shape: None,
        })),
        ..Default::default()
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence {
                    elem_type: Some(Box::new(elem)),
                },
            ))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn i64_scalar(name: &str, v: i64) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(7),
        int64_data: vec![v],
        ..Default::default()
    }
}

/// Imports `m` with the given values, compiles it on the CPU and runs it with `feeds`
/// (tensor inputs and the tensors of value inputs); returns the model's outputs.
fn run(
    m: &rlx_onnx::proto::ModelProto,
    opts: &ImportOptions,
    feeds: &[(String, Tensor)],
) -> (OnnxModel, Vec<(String, OnnxValue)>) {
    let model = rlx_onnx::load_bytes(bytes(m), None, "test.onnx", opts).unwrap();
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    for (name, t) in &model.params {
        session.set_param(name, t.clone());
    }
    let outs = if model.graph.outputs().is_empty() {
        Vec::new()
    } else {
        let compiled = session
            .compile(&model.graph, CompileOptions::default())
            .unwrap();
        let feed: HashMap<String, Tensor> = feeds.iter().cloned().collect();
        compiled.run(&feed).unwrap()
    };
    let values = model
        .outputs
        .iter()
        .map(|(n, l)| (n.clone(), l.assemble(&outs).unwrap()))
        .collect();
    (model, values)
}

fn tensor(v: &OnnxValue) -> &Tensor {
    match v {
        OnnxValue::Tensor(t) => t,
        other => panic!("expected a tensor, got a {}", other.kind()),
    }
}

fn close(got: &Tensor, want: &[f64]) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (a, b) in g.iter().zip(want) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} != {b}");
    }
}

/// `torch.stack([2 * chunk for chunk in x.split(2)], dim=1)` as torch exports it: the
/// chunks in a sequence, a Loop of static trip count that reads chunk `i` and appends to a
/// loop-carried sequence, and a ConcatFromSequence with a new axis.
fn stack_loop(trips: i64) -> rlx_onnx::proto::ModelProto {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("Identity", "c", &["cond_in"], &["cond_out"]),
            node("SequenceAt", "at", &["chunks", "i"], &["chunk"]),
            node("Mul", "twice", &["chunk", "two"], &["scaled"]),
            node(
                "SequenceInsert",
                "append",
                &["acc_in", "scaled"],
                &["acc_out"],
            ),
        ],
        input: vec![
            value("i", 7, &[]),
            value("cond_in", 9, &[]),
            seq_value("acc_in"),
        ],
        output: vec![value("cond_out", 9, &[]), seq_value("acc_out")],
        initializer: vec![f32_init("two", &[], &[2.0])],
        ..Default::default()
    };
    model(
        vec![
            node("SplitToSequence", "split", &["x", "size"], &["chunks"]),
            with(node("SequenceEmpty", "empty", &[], &["acc0"]), vec![]),
            with(
                node("Loop", "loop", &["trips", "", "acc0"], &["acc"]),
                vec![graph_attr("body", body)],
            ),
            with(
                node("ConcatFromSequence", "stack", &["acc"], &["y"]),
                vec![int_attr("axis", 1), int_attr("new_axis", 1)],
            ),
        ],
        vec![value("x", 1, &[-1, -2])],
        vec![value("y", 1, &[2, 3, -3])],
        vec![i64_scalar("size", 2), i64_scalar("trips", trips)],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn a_loop_carried_sequence_stacks_like_torch(
        cols in 1usize..5,
        vals in proptest::collection::vec(0.1f32..4.0, 24),
    ) {
        let rows = 6;
        let x: Vec<f32> = vals.iter().take(rows * cols).cycle().take(rows * cols).copied().collect();
        let opts = ImportOptions {
            dims: HashMap::from([("s1".into(), rows), ("s2".into(), cols)]),
            ..ImportOptions::default()
        };
        let xt = Tensor::from_f32(&[rows, cols], x.clone()).unwrap();
        let (_, outs) = run(&stack_loop(3), &opts, &[("x".into(), xt)]);
        let y = tensor(&outs[0].1);
        // y[r, k, c] = 2 * x[2k + r, c]
        prop_assert_eq!(y.shape(), &[2, 3, cols][..]);
        let mut want = Vec::new();
        for r in 0..2 {
            for k in 0..3 {
                for c in 0..cols {
                    want.push(2.0 * x[(2 * k + r) * cols + c] as f64);
                }
            }
        }
        close(y, &want);
    }
}

#[test]
fn sequence_at_a_run_time_position_gathers_from_the_stacked_elements() {
    let m = model(
        vec![
            node("SequenceConstruct", "seq", &["a", "b", "c"], &["s"]),
            node("SequenceAt", "at", &["s", "p"], &["y"]),
        ],
        vec![
            value("a", 1, &[2, 3]),
            value("b", 1, &[2, 3]),
            value("c", 1, &[2, 3]),
            value("p", 7, &[]),
        ],
        vec![value("y", 1, &[2, 3])],
        vec![],
    );
    let vals: Vec<Vec<f32>> = (0..3)
        .map(|k| (0..6).map(|i| 0.37 * (i + 7 * k) as f32 + 0.11).collect())
        .collect();
    let mut feeds: Vec<(String, Tensor)> = ["a", "b", "c"]
        .iter()
        .zip(&vals)
        .map(|(n, v)| (n.to_string(), Tensor::from_f32(&[2, 3], v.clone()).unwrap()))
        .collect();
    for (p, want) in [(1i64, 1usize), (-1, 2), (0, 0), (-3, 0)] {
        feeds.retain(|(n, _)| n != "p");
        feeds.push(("p".into(), Tensor::scalar(DType::I64, p as f64)));
        let (_, outs) = run(&m, &ImportOptions::default(), &feeds);
        let want: Vec<f64> = vals[want].iter().map(|&v| v as f64).collect();
        close(tensor(&outs[0].1), &want);
    }
}

#[test]
fn a_sequence_output_is_assembled_from_element_outputs() {
    let m = model(
        vec![with(
            node("SplitToSequence", "split", &["x"], &["s"]),
            vec![int_attr("axis", 1), int_attr("keepdims", 0)],
        )],
        vec![value("x", 1, &[2, 3])],
        vec![seq_value("s")],
        vec![],
    );
    let x: Vec<f32> = vec![1.5, -2.25, 3.0, 0.5, 7.0, -1.0];
    let xt = Tensor::from_f32(&[2, 3], x.clone()).unwrap();
    let (model, outs) = run(&m, &ImportOptions::default(), &[("x".into(), xt)]);
    let names: Vec<&str> = model
        .graph
        .outputs()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["s[0]", "s[1]", "s[2]"]);
    let OnnxValue::Sequence(items) = &outs[0].1 else {
        panic!("expected a sequence");
    };
    for (c, item) in items.iter().enumerate() {
        assert_eq!(tensor(item).shape(), &[2]);
        close(tensor(item), &[x[c] as f64, x[3 + c] as f64]);
    }
}

/// lower-case words, look them up in a vocabulary, embed: the strings resolve at import
/// and only the gather runs.
#[test]
fn a_string_pipeline_feeds_a_gather() {
    let ml = rlx_onnx::proto::OperatorSetIdProto {
        domain: Some("ai.onnx.ml".into()),
        version: Some(4),
    };
    let mut lookup = node("LabelEncoder", "vocab", &["lower"], &["ids"]);
    lookup.domain = Some("ai.onnx.ml".into());
    lookup.attribute = vec![
        strings_attr("keys_strings", &["the", "cat", "sat"]),
        ints_attr("values_int64s", &[2, 0, 1]),
        int_attr("default_int64", 3),
    ];
    let emb: Vec<f32> = (0..8).map(|i| 0.25 * i as f32 - 0.6).collect();
    let mut m = model(
        vec![
            with(
                node("StringNormalizer", "norm", &["words"], &["lower"]),
                vec![string_attr("case_change_action", "LOWER")],
            ),
            lookup,
            node("Gather", "embed", &["emb", "ids"], &["y"]),
        ],
        vec![value("words", 8, &[4])],
        vec![value("y", 1, &[4, 2])],
        vec![f32_init("emb", &[4, 2], &emb)],
    );
    m.opset_import.push(ml);
    let words = StringTensor::new(
        vec![4],
        ["The", "CAT", "sat", "dog"].map(String::from).to_vec(),
    )
    .unwrap();
    let opts = ImportOptions {
        known_values: HashMap::from([("words".into(), OnnxValue::Strings(words))]),
        ..ImportOptions::default()
    };
    let (_, outs) = run(&m, &opts, &[]);
    let ids = [2usize, 0, 1, 3];
    let want: Vec<f64> = ids
        .iter()
        .flat_map(|&i| [emb[2 * i] as f64, emb[2 * i + 1] as f64])
        .collect();
    close(tensor(&outs[0].1), &want);
}

/// An `If` on whether an optional holds a value takes one branch at import.
#[test]
fn an_if_on_an_optional_folds() {
    let then_g = GraphProto {
        name: Some("then".into()),
        node: vec![
            node("OptionalGetElement", "get", &["o"], &["v"]),
            node("Relu", "relu", &["v"], &["r"]),
        ],
        output: vec![value("r", 1, &[3])],
        ..Default::default()
    };
    let else_g = GraphProto {
        name: Some("else".into()),
        node: vec![node("Neg", "neg", &["x"], &["r"])],
        output: vec![value("r", 1, &[3])],
        ..Default::default()
    };
    let m = model(
        vec![
            node("Optional", "wrap", &["x"], &["o"]),
            node("OptionalHasElement", "has", &["o"], &["h"]),
            with(
                node("If", "if", &["h"], &["y"]),
                vec![
                    graph_attr("then_branch", then_g),
                    graph_attr("else_branch", else_g),
                ],
            ),
        ],
        vec![value("x", 1, &[3])],
        vec![value("y", 1, &[3])],
        vec![],
    );
    let x = Tensor::from_f32(&[3], vec![-1.5, 2.5, 0.75]).unwrap();
    let (model, outs) = run(&m, &ImportOptions::default(), &[("x".into(), x)]);
    assert!(model.frozen_inputs.is_empty());
    close(tensor(&outs[0].1), &[0.0, 2.5, 0.75]);
}

/// What cannot be resolved at import is listed, every node at once, naming node and op.
#[test]
fn unresolvable_values_are_listed_not_panicked_on() {
    // a sequence graph input without a given value
    let m = model(
        vec![node("SequenceLength", "len", &["s"], &["n"])],
        vec![seq_value("s")],
        vec![value("n", 7, &[])],
        vec![],
    );
    let e = rlx_onnx::load_bytes(bytes(&m), None, "t.onnx", &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("graph input `s`") && e.contains("sequence"),
        "{e}"
    );

    // a run-time insert position, and a string reaching a tensor op: both listed
    let m = model(
        vec![
            node("SequenceConstruct", "seq", &["x"], &["s"]),
            node("SequenceInsert", "ins", &["s", "x", "p"], &["s2"]),
            node("ConcatFromSequence", "cat", &["s2"], &["y"]),
            node("Relu", "relu", &["w"], &["z"]),
        ],
        vec![value("x", 1, &[2]), value("p", 7, &[]), value("w", 8, &[2])],
        vec![value("y", 1, &[4]), value("z", 1, &[2])],
        vec![],
    );
    let words = StringTensor::new(vec![2], vec!["a".into(), "b".into()]).unwrap();
    let opts = ImportOptions {
        known_values: HashMap::from([("w".into(), OnnxValue::Strings(words))]),
        ..ImportOptions::default()
    };
    let e = rlx_onnx::load_bytes(bytes(&m), None, "t.onnx", &opts).unwrap_err();
    assert!(e.is_unsupported());
    let text = e.to_string();
    assert!(text.contains("`ins` (ai.onnx:SequenceInsert"), "{text}");
    assert!(text.contains("run time"), "{text}");
    assert!(text.contains("`relu` (ai.onnx:Relu"), "{text}");
    assert!(text.contains("string tensor"), "{text}");
}
