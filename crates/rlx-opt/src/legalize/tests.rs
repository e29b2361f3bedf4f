use super::*;
use rlx_ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};

/// A backend that runs only add, mul, div and exp on floats, plus reductions.
fn tiny(op: &Op, tys: &[&TensorType]) -> bool {
    let float = tys.iter().all(|t| t.dtype.is_float());
    float
        && matches!(
            op,
            Op::Binary(BinaryOp::Add | BinaryOp::Mul | BinaryOp::Div)
                | Op::Unary(UnaryOp::Exp)
                | Op::Reduce { .. }
        )
}

fn ops(g: &Graph) -> Vec<&'static str> {
    g.nodes()
        .iter()
        .filter(|n| !n.op.is_leaf())
        .map(|n| n.op.name())
        .collect()
}

#[test]
fn native_nodes_pass_through() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let y = g.unary(UnaryOp::Exp, x).unwrap();
    let s = g.reduce(ReduceOp::Sum, y, &[1], false).unwrap();
    g.output("s", s);
    let (out, report) = legalize(&g, "tiny", &tiny).unwrap();
    assert_eq!(out, g);
    assert_eq!(report.count(How::Native), 2);
    assert_eq!(report.entries.len(), 2, "leaves are not reported");
}

#[test]
fn nested_decomposition_sigmoid_via_neg_and_reciprocal() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let y = g.unary(UnaryOp::Sigmoid, x).unwrap();
    g.set_name(y, "act");
    g.output("y", y);
    let (out, report) = legalize(&g, "tiny", &tiny).unwrap();
    out.verify().unwrap();
    // neg -> mul by -1, reciprocal -> div(1, x).
    assert_eq!(ops(&out), vec!["mul", "exp", "add", "div"]);
    assert_eq!(out.node(out.outputs()[0].1).name, "act");
    let e = &report.entries[0];
    assert_eq!((e.node.as_str(), e.how), ("act", How::Decomposed));
    assert_eq!(e.detail, "into add, div, exp, mul");
}

#[test]
fn one_error_lists_every_unsupported_node() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let w = g.param("w", DType::F32, [3, 5]);
    let m = g.matmul(x, w).unwrap();
    let t = g.unary(UnaryOp::Tanh, m).unwrap();
    let s = g.unary(UnaryOp::GELU, t).unwrap();
    let i = g.input("i", DType::I32, [2]);
    let j = g.binary(BinaryOp::Add, i, i).unwrap();
    g.output("s", s);
    g.output("j", j);
    let never = |_: &Op, _: &[&TensorType]| false;
    let err = legalize(&g, "tpu", &never).unwrap_err();
    let LegalizeError::Unsupported {
        device,
        nodes,
        report,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(device, "tpu");
    let names: Vec<&str> = nodes.iter().map(|n| n.op).collect();
    assert_eq!(names, vec!["matmul", "tanh", "gelu", "add"]);
    assert_eq!(report.count(How::Unsupported), 4);
    let msg = err.to_string();
    assert!(msg.starts_with("4 nodes cannot run on `tpu`: "), "{msg}");
    for needle in [
        "f32[2,3], f32[3,5] -> f32[2,5]",
        "`gelu_4` (gelu: f32[2,5] -> f32[2,5]; its decomposition needs `mul`",
        "i32[2], i32[2] -> i32[2]",
        "no decomposition rule",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in {msg}");
    }
}

#[test]
fn partially_supported_graph_reports_only_the_missing_piece() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]);
    let a = g.unary(UnaryOp::GELU, x).unwrap(); // needs erf: missing
    let b = g.unary(UnaryOp::SILU, a).unwrap(); // decomposes fully
    g.output("y", b);
    let err = legalize(&g, "tiny", &tiny).unwrap_err();
    let LegalizeError::Unsupported { nodes, report, .. } = err else {
        panic!()
    };
    assert_eq!(nodes.len(), 1);
    assert!(
        nodes[0].reason.contains("needs `erf` on f32[4]"),
        "{}",
        nodes[0].reason
    );
    assert_eq!(report.count(How::Decomposed), 1);
}

#[test]
fn report_table_and_json() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 8]);
    let s = g.softmax(x, 1).unwrap();
    let e = g.unary(UnaryOp::Exp, s).unwrap();
    g.output("y", e);
    let (_, report) = legalize(&g, "tiny", &tiny).unwrap();
    let text = report.to_string();
    assert!(
        text.starts_with("dispatch report for `tiny`: 1 native, 1 decomposed, 0 unsupported"),
        "{text}"
    );
    assert!(text.contains("softmax_1"), "{text}");
    assert!(text.contains("decomposed"), "{text}");
    let json = report.to_json();
    assert_eq!(json["device"], "tiny");
    assert_eq!(json["nodes"][0]["how"], "decomposed");
    assert_eq!(json["nodes"][0]["shape"], "[2,8]");
    assert_eq!(json["summary"]["exp"]["native"], 1);
    assert_eq!(json["totals"]["decomposed"], 1);
}

#[test]
fn quant_matmul_is_reported_unsupported_where_not_claimed() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1, 32]);
    let w = g.param("w", DType::U8, [2 * 20]);
    let fmt = rlx_ir::QuantFormat::Q4_1;
    let op = Op::QuantMatMul {
        format: fmt,
        n: 2,
        k: 32,
        int8_activations: true,
    };
    let y = g.push(op, &[x, w], None).unwrap();
    g.output("y", y);
    let err = legalize(&g, "tiny", &tiny).unwrap_err().to_string();
    assert!(err.contains("quant_matmul"), "{err}");
}
