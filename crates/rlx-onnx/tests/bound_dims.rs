//! Symbolic input dims bound at import (`ImportOptions::dims`, `rlx bench --dim NAME=N`):
//! an op that needs a static length (CumSum over a named `sequence` dim) is refused while the
//! dim is symbolic, naming it, and imports and computes once the dim is bound.

mod support;

use rlx_onnx::proto::TensorProto;
use rlx_onnx::{load_bytes, ImportOptions};
use std::collections::HashMap;
use support::*;

/// `y = CumSum(x, axis = 1)` over `x: f32[s1, s2]`.
fn cumsum_model() -> rlx_onnx::proto::ModelProto {
    let axis = TensorProto {
        name: Some("axis".into()),
        dims: vec![],
        data_type: Some(7), // int64
        raw_data: Some(1i64.to_le_bytes().to_vec().into()),
        ..Default::default()
    };
    model(
        vec![node("CumSum", "cs", &["x", "axis"], &["y"])],
        vec![value("x", 1, &[-1, -2])],
        vec![value("y", 1, &[-1, -2])],
        vec![axis],
    )
}

#[test]
fn a_bound_dim_lets_cumsum_import_and_compute() {
    let m = cumsum_model();
    let err = load_bytes(bytes(&m), None, "cs.onnx", &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("CumSum") && err.contains("static"), "{err}");

    let opts = ImportOptions {
        dims: HashMap::from([("s1".to_string(), 2), ("s2".to_string(), 3)]),
        ..ImportOptions::default()
    };
    let imported = load_bytes(bytes(&m), None, "cs.onnx", &opts).unwrap();
    let (_, x_id) = imported.graph.inputs().into_iter().next().unwrap();
    assert_eq!(imported.graph.ty(x_id).shape.to_string(), "[2,3]");
    let xs = [0.5f32, -1.25, 2.0, 3.0, 0.125, -4.0];
    let x = rlx_ir::Tensor::from_f32(&[2, 3], xs.to_vec()).unwrap();
    let out = rlx_interp::run_graph(
        &imported.graph,
        &HashMap::from([("x".to_string(), x)]),
        &HashMap::new(),
    )
    .unwrap();
    let got = out
        .iter()
        .find(|(n, _)| n == "y")
        .unwrap()
        .1
        .as_f32()
        .unwrap();
    let mut want = [0f64; 6];
    for r in 0..2 {
        let mut acc = 0f64;
        for c in 0..3 {
            acc += xs[r * 3 + c] as f64;
            want[r * 3 + c] = acc;
        }
    }
    for (g, w) in got.iter().zip(want) {
        assert!((*g as f64 - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}
