//! Integer products of a `DynamicQuantizeLinear` result as quantize_dynamic writes them
//! (`MatMulInteger → Cast → Mul(scale · w_scale)`, and ONNX Runtime's
//! `MatMulIntegerToFloat` with that scale) import as one product that quantizes its f32
//! source from the source's own range (`AInput::Dynamic`), so no whole-tensor range
//! reduction is left in the graph; the CPU's results equal, bit for bit, the ONNX
//! definition computed here directly (f32 scale and zero point, exact integer sums, the
//! sums cast to f32 times the f32 product of the scales).

mod support;

use rlx_ir::{AInput, Op, Tensor};
use rlx_onnx::proto::{ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use rlx_onnx::{load_bytes, ImportOptions};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use support::*;

const M: usize = 9;
const K: usize = 37;
const N: usize = 20;

fn u8_init(name: &str, dims: &[i64], v: &[u8]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(2),
        raw_data: Some(v.to_vec().into()),
        ..Default::default()
    }
}

fn ms(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut n = node(op, name, inputs, outputs);
    n.domain = Some("com.microsoft".into());
    n
}

/// `y1 = Cast(MatMulInteger(q, w, z, wz)) * (s * ws)` and
/// `y2 = MatMulIntegerToFloat(q, w, s, ws_col, z, wz)` with `q, s, z = DQL(x)`.
fn model(w: &[u8], wz: u8, ws: f32, ws_col: &[f32]) -> ModelProto {
    let mut cast = node("Cast", "cast", &["p"], &["pf"]);
    cast.attribute = vec![int_attr("to", 1)];
    let mut m = support::model(
        vec![
            node("DynamicQuantizeLinear", "dql", &["x"], &["q", "s", "z"]),
            node("Mul", "scales", &["s", "ws"], &["k"]),
            node("MatMulInteger", "mmi", &["q", "w", "z", "wz"], &["p"]),
            cast,
            node("Mul", "rescale", &["pf", "k"], &["y1"]),
            ms(
                "MatMulIntegerToFloat",
                "mmitf",
                &["q", "w", "s", "ws_col", "z", "wz"],
                &["y2"],
            ),
        ],
        vec![value("x", 1, &[M as i64, K as i64])],
        vec![
            value("y1", 1, &[M as i64, N as i64]),
            value("y2", 1, &[M as i64, N as i64]),
        ],
        vec![
            u8_init("w", &[K as i64, N as i64], w),
            u8_init("wz", &[], &[wz]),
            f32_init("ws", &[], &[ws]),
            f32_init("ws_col", &[N as i64], ws_col),
        ],
    );
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("com.microsoft".into()),
        version: Some(1),
    });
    m
}

/// ONNX's `DynamicQuantizeLinear` then the product, each step in the precision the
/// operators define: `[y1, y2]`.
fn reference(x: &[f32], w: &[u8], wz: u8, ws: f32, ws_col: &[f32]) -> [Vec<f32>; 2] {
    let mn = x.iter().fold(0f32, |m, &v| if v < m { v } else { m });
    let mx = x.iter().fold(0f32, |m, &v| if v > m { v } else { m });
    let span = if mx == mn { 1.0 } else { mx - mn };
    let scale = span / 255.0;
    let zero = (0.0 - mn / scale).clamp(0.0, 255.0).round_ties_even();
    let q: Vec<i64> = x
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zero).clamp(0.0, 255.0) as i64)
        .collect();
    let mut y1 = vec![0f32; M * N];
    let mut y2 = vec![0f32; M * N];
    for i in 0..M {
        for j in 0..N {
            let sum: i64 = (0..K)
                .map(|l| (q[i * K + l] - zero as i64) * (i64::from(w[l * N + j]) - i64::from(wz)))
                .sum();
            let sum = sum as i32 as f32;
            y1[i * N + j] = sum * (scale * ws);
            y2[i * N + j] = sum * (scale * ws_col[j]);
        }
    }
    [y1, y2]
}

#[test]
fn products_of_dynamic_quantization_find_their_own_scale() {
    let mut rng = rlx_ir::SplitMix64(24);
    let w: Vec<u8> = (0..K * N).map(|_| rng.below(256) as u8).collect();
    let ws_col: Vec<f32> = (0..N).map(|j| 0.001 + j as f32 * 3e-4).collect();
    let (wz, ws) = (131u8, 0.0071f32);
    let m = model(&w, wz, ws, &ws_col);
    let model = load_bytes(bytes(&m), None, "dyn.onnx", &ImportOptions::default()).unwrap();
    let ops: Vec<&Op> = model.graph.nodes().iter().map(|n| &n.op).collect();
    let dynamic = ops
        .iter()
        .filter(|op| matches!(op, Op::MatMulInteger(p) if p.a == AInput::Dynamic))
        .count();
    assert_eq!(dynamic, 2, "{ops:?}");
    let session = Session::new(rlx_driver::Device::Cpu).unwrap();
    for (n, t) in model.params {
        session.set_param(&n, t);
    }
    let compiled = session
        .compile(&model.graph, CompileOptions::default())
        .unwrap();
    // the range reductions of the quantization are gone once dead code is removed
    let variant = compiled
        .first_variant()
        .expect("a static graph compiles at once");
    assert!(
        !variant
            .graph
            .nodes()
            .iter()
            .any(|n| matches!(n.op, Op::Reduce { .. })),
        "{}",
        variant.graph
    );
    // ranges that hold 0, sit on one side of it, and are empty
    for (seed, lo, hi) in [
        (1, -2.0, 3.0),
        (2, 0.5, 4.0),
        (3, -7.0, -0.25),
        (4, 0.0, 0.0),
    ] {
        let mut r = rlx_ir::SplitMix64(seed);
        let x: Vec<f32> = (0..M * K)
            .map(|_| lo + (hi - lo) * (r.below(1 << 24) as f32 / (1 << 24) as f32))
            .collect();
        let t = Tensor::from_f32(&[M, K], x.clone()).unwrap();
        let inputs: HashMap<String, Tensor> = [("x".to_string(), t)].into();
        let out = compiled.run(&inputs).unwrap();
        let want = reference(&x, &w, wz, ws, &ws_col);
        for (name, want) in ["y1", "y2"].iter().zip(want) {
            let got = out.iter().find(|(n, _)| n == name).unwrap().1.to_f64_vec();
            let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
            assert_eq!(got, want, "{name}, x in [{lo}, {hi}]");
        }
    }
}
