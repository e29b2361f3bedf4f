//! Session and CompiledGraph on the CPU: runs, symbolic dims, params, threads, and every
//! kind of bad input giving a clear error.

use rlx_driver::Device;
use rlx_ir::{DType, Dim, Graph, Node, Op, Shape, Tensor, TensorType, UnaryOp};
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::sync::Arc;

/// y = relu(x @ w + b) with x: f32[batch, 3], w: f32[3, 2], b: f32[2].
fn mlp() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape(vec![Dim::sym("batch"), 3.into()]));
    let w = g.param("w", DType::F32, [3, 2]);
    let b = g.param("b", DType::F32, [2]);
    let h = g.matmul(x, w).unwrap();
    let h = g.add(h, b).unwrap();
    let y = g.relu(h).unwrap();
    g.output("y", y);
    g
}

/// x @ w + b in f64 (x: [rows, 3], w: [3, 2], b: [2]).
fn affine(x: &Tensor, w: &Tensor, b: &Tensor) -> Vec<f64> {
    let (x, w, b) = (x.to_f64_vec(), w.to_f64_vec(), b.to_f64_vec());
    let rows = x.len() / 3;
    let mut out = Vec::new();
    for r in 0..rows {
        for c in 0..2 {
            out.push((0..3).map(|k| x[r * 3 + k] * w[k * 2 + c]).sum::<f64>() + b[c]);
        }
    }
    out
}

/// What [`mlp`] computes: relu(x @ w + b).
fn reference(x: &Tensor, w: &Tensor, b: &Tensor) -> Vec<f64> {
    affine(x, w, b).into_iter().map(|s| s.max(0.0)).collect()
}

fn session_with_params() -> (Session, Tensor, Tensor) {
    let s = Session::new(Device::Cpu).unwrap();
    let w = Tensor::random(DType::F32, &[3, 2], 1);
    let b = Tensor::random(DType::F32, &[2], 2);
    s.set_param("w", w.clone());
    s.set_param("b", b.clone());
    (s, w, b)
}

fn inputs(x: Tensor) -> HashMap<String, Tensor> {
    HashMap::from([("x".to_string(), x)])
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn symbolic_batch_compiles_per_binding() {
    let (s, w, b) = session_with_params();
    let c = s.compile(&mlp(), CompileOptions::default()).unwrap();
    for batch in [1, 5, 2] {
        let x = Tensor::random(DType::F32, &[batch, 3], batch as u64);
        let out = c.run(&inputs(x.clone())).unwrap();
        assert_eq!(out[0].0, "y");
        assert_eq!(out[0].1.shape(), &[batch, 2]);
        close(&out[0].1.to_f64_vec(), &reference(&x, &w, &b));
    }
}

#[test]
fn runs_from_several_threads_at_once() {
    let (s, w, b) = session_with_params();
    let options = CompileOptions {
        bindings: HashMap::from([("batch".to_string(), 64)]),
        ..CompileOptions::default()
    };
    let c = Arc::new(s.compile(&mlp(), options).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (c, w, b) = (c.clone(), w.clone(), b.clone());
            std::thread::spawn(move || {
                for i in 0..20 {
                    let x = Tensor::random(DType::F32, &[64, 3], t * 100 + i);
                    let out = c.run(&inputs(x.clone())).unwrap();
                    close(&out[0].1.to_f64_vec(), &reference(&x, &w, &b));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn set_param_checks_and_replaces() {
    let (s, w, _) = session_with_params();
    let c = s.compile(&mlp(), CompileOptions::default()).unwrap();
    let err = c
        .set_param("w", Tensor::random(DType::F32, &[2, 3], 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("param `w`") && err.contains("f32[3,2]"),
        "{err}"
    );
    let err = c.set_param("nope", w.clone()).unwrap_err().to_string();
    assert!(
        err.contains("no such param") && err.contains("w, b"),
        "{err}"
    );
    let b2 = Tensor::full(DType::F32, &[2], 100.0);
    c.set_param("b", b2.clone()).unwrap();
    let x = Tensor::random(DType::F32, &[2, 3], 9);
    let out = c.run(&inputs(x.clone())).unwrap();
    close(&out[0].1.to_f64_vec(), &reference(&x, &w, &b2));
}

#[test]
fn bad_inputs_are_clear_errors() {
    let (s, _, _) = session_with_params();
    let c = s.compile(&mlp(), CompileOptions::default()).unwrap();
    let err = |m: HashMap<String, Tensor>| c.run(&m).unwrap_err().to_string();

    let e = err(HashMap::new());
    assert!(
        e.contains("input `x`") && e.contains("missing") && e.contains("f32[batch,3]"),
        "{e}"
    );
    let e = err(inputs(Tensor::random(DType::F64, &[2, 3], 1)));
    assert!(
        e.contains("dtype differs") && e.contains("f64[2, 3]"),
        "{e}"
    );
    let e = err(inputs(Tensor::random(DType::F32, &[2, 4], 1)));
    assert!(e.contains("dim 1 is 4, expected 3"), "{e}");
    let e = err(inputs(Tensor::random(DType::F32, &[2, 3, 1], 1)));
    assert!(e.contains("rank differs"), "{e}");
    let mut m = inputs(Tensor::random(DType::F32, &[2, 3], 1));
    m.insert("z".into(), Tensor::scalar(DType::F32, 1.0));
    let e = err(m);
    assert!(
        e.contains("input `z`") && e.contains("no such input"),
        "{e}"
    );
}

#[test]
fn missing_param_is_named() {
    let s = Session::new(Device::Cpu).unwrap();
    let c = s.compile(&mlp(), CompileOptions::default()).unwrap();
    let e = c
        .run(&inputs(Tensor::random(DType::F32, &[2, 3], 1)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("param `w`") && e.contains("not set"), "{e}");
}

#[test]
fn malformed_graphs_are_rejected_with_the_node_named() {
    let s = Session::new(Device::Cpu).unwrap();
    // A node that refers forward (a cycle in a topologically ordered list).
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    g.push_node(Node {
        op: Op::Unary(UnaryOp::Exp),
        inputs: vec![rlx_ir::NodeId(2)],
        ty: TensorType::new(DType::F32, [2]),
        name: "loop_a".into(),
    });
    let b = g.push_node(Node {
        op: Op::Unary(UnaryOp::Exp),
        inputs: vec![rlx_ir::NodeId(1)],
        ty: TensorType::new(DType::F32, [2]),
        name: "loop_b".into(),
    });
    let _ = x;
    g.output("y", b);
    let e = s
        .compile(&g, CompileOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("loop_a") && e.contains("not defined before it"),
        "{e}"
    );

    // A recorded type that inference contradicts.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    let y = g.push_node(Node {
        op: Op::Unary(UnaryOp::Exp),
        inputs: vec![x],
        ty: TensorType::new(DType::F32, [3]),
        name: "bad_exp".into(),
    });
    g.output("y", y);
    let e = s
        .compile(&g, CompileOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("bad_exp") && e.contains("f32[3]") && e.contains("f32[2]"),
        "{e}"
    );

    // No outputs.
    let mut g = Graph::new();
    g.input("x", DType::F32, [2]);
    let e = s
        .compile(&g, CompileOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no outputs"), "{e}");

    // Shape errors at build time name op and shapes.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 3]);
    let b = g.input("b", DType::F32, [4, 5]);
    let e = g.matmul(a, b).unwrap_err().to_string();
    assert!(
        e.contains("matmul") && e.contains("f32[2,3]") && e.contains("f32[4,5]"),
        "{e}"
    );
}

#[test]
fn unknown_and_unavailable_devices() {
    let e = "quantum".parse::<Device>().unwrap_err().to_string();
    assert!(
        e.contains("unknown device `quantum`") && e.contains("cuda"),
        "{e}"
    );
    // a device this machine lacks says so (CUDA here, unless the machine has a GPU; a seam
    // never has one)
    let absent = if Session::new(Device::Cuda).is_err() {
        Device::Cuda
    } else {
        Device::Xdna
    };
    let e = Session::new(absent).err().unwrap().to_string();
    assert!(
        e.contains(absent.name()) && e.contains("not available"),
        "{e}"
    );
}

#[test]
fn approximate_gelu_is_opt_in_and_stays_within_its_bound() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[8, 3]));
    let w = g.param("w", DType::F32, [3, 2]);
    let b = g.param("b", DType::F32, [2]);
    let h = g.matmul(x, w).unwrap();
    let h = g.add(h, b).unwrap();
    let y = g.unary(UnaryOp::GELU, h).unwrap();
    g.output("y", y);
    let (s, w, b) = session_with_params();
    let x = Tensor::random(DType::F32, &[8, 3], 9);
    let exact = s.compile(&g, CompileOptions::default()).unwrap();
    let approx = s
        .compile(
            &g,
            CompileOptions {
                approximate_gelu: true,
                ..CompileOptions::default()
            },
        )
        .unwrap();
    let none = std::collections::BTreeMap::new();
    let has = |c: &rlx_runtime::CompiledGraph, op: UnaryOp| {
        let v = c.variant(&none).unwrap();
        v.graph.nodes().iter().any(|n| n.op == Op::Unary(op))
    };
    assert!(has(&exact, UnaryOp::GELU) && !has(&exact, UnaryOp::GELU_TANH));
    assert!(has(&approx, UnaryOp::GELU_TANH) && !has(&approx, UnaryOp::GELU));
    // The exact graph matches an f64 reference; the approximate one stays within the bound.
    let pre = affine(&x, &w, &b);
    let want: Vec<f64> = pre.iter().map(|&v| rlx_ir::scalar::gelu(v)).collect();
    close(
        &exact.run(&inputs(x.clone())).unwrap()[0].1.to_f64_vec(),
        &want,
    );
    let got = approx.run(&inputs(x)).unwrap()[0].1.to_f64_vec();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    assert!(
        worst <= rlx_opt::GELU_TANH_MAX_ABS_ERROR + 1e-6,
        "worst {worst}"
    );
}

#[test]
fn graph_after_stops_at_the_named_pass() {
    let session = Session::new(Device::Cpu).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    let one = g.scalar(DType::F32, 1.0);
    let two = g.add(one, one).unwrap();
    let y = g.mul(x, two).unwrap();
    let unused = g.relu(x).unwrap();
    g.set_name(unused, "unused");
    g.output("y", y);
    let options = CompileOptions::default();
    let after_fold = session.graph_after(&g, &options, "fold").unwrap();
    assert!(
        after_fold
            .nodes()
            .iter()
            .all(|n| n.op != Op::Binary(rlx_ir::BinaryOp::Add)),
        "{after_fold}"
    );
    assert!(
        after_fold.nodes().iter().any(|n| n.name == "unused"),
        "dce has not run yet: {after_fold}"
    );
    let after_dce = session.graph_after(&g, &options, "dce").unwrap();
    assert!(
        after_dce.nodes().iter().all(|n| n.name != "unused"),
        "{after_dce}"
    );
    let err = session
        .graph_after(&g, &options, "nope")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nope") && err.contains("fold, cse, simplify, dce"),
        "{err}"
    );
}
