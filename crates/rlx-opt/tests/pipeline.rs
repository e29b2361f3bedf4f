//! The whole optimizer pipeline on small models: optimize, legalize, lower, and compare
//! with the graph on the validation interpreter.

#[path = "../src/test_util.rs"]
#[allow(dead_code)]
mod test_util;

use rlx_ir::{BinaryOp, DType, Graph, Op, ReduceOp, Tensor, TensorType, UnaryOp};
use rlx_opt::{
    dump_kernels, legalize, lower, lower_stats, optimize, optimize_until, optimize_with, How,
    OptError, PASSES,
};
use test_util::{assert_close, cpu_eval, run, run_program};

/// Everything but the fused norms and activations, as a GPU backend without them.
fn gpu_like(op: &Op, _: &[&TensorType]) -> bool {
    !matches!(
        op,
        Op::LayerNorm { .. } | Op::Softmax { .. } | Op::Unary(UnaryOp::GELU)
    )
}

/// A transformer-style block: layer norm, projection, attention, gelu MLP, residuals; with
/// a constant subgraph to fold and redundant work for cse and simplify.
fn block() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 5, 8]);
    let ln_s = g.param("ln.scale", DType::F32, [8]);
    let ln_b = g.param("ln.bias", DType::F32, [8]);
    let wq = g.param("wq", DType::F32, [8, 8]);
    let wk = g.param("wk", DType::F32, [8, 8]);
    let w1 = g.param("w1", DType::F32, [8, 16]);
    let b1 = g.param("b1", DType::F32, [16]);
    let w2 = g.param("w2", DType::F32, [16, 8]);
    let h = g.layer_norm(x, ln_s, ln_b, 1e-5).unwrap();
    let q = g.matmul(h, wq).unwrap();
    let k = g.matmul(h, wk).unwrap();
    let a = g.attention(q, k, h, None, true, None).unwrap();
    let one = g.scalar(DType::F32, 1.0);
    let a = g.mul(a, one).unwrap(); // simplify removes it
    let r = g.add(x, a).unwrap();
    let m = g.matmul(r, w1).unwrap();
    let m = g.add(m, b1).unwrap();
    let m = g.unary(UnaryOp::GELU, m).unwrap();
    let m = g.matmul(m, w2).unwrap();
    // A constant subgraph: 2 * exp(0) = 2, folded.
    let z = g.scalar(DType::F32, 0.0);
    let e = g.unary(UnaryOp::Exp, z).unwrap();
    let two = g.scalar(DType::F32, 2.0);
    let c = g.mul(e, two).unwrap();
    let m = g.div(m, c).unwrap();
    let y = g.add(r, m).unwrap();
    let y2 = g.add(m, r).unwrap(); // cse merges it with y
    let s = g.reduce(ReduceOp::Sum, y2, &[2], false).unwrap();
    g.output("y", y);
    g.output("s", s);
    g
}

#[test]
fn block_through_the_pipeline() {
    let g = block();
    let want = run(&g, 11);
    let o = optimize(&g, &cpu_eval).unwrap();
    assert_close(&run(&o, 11), &want, 1e-6);
    let n_ops = |g: &Graph| g.nodes().iter().filter(|n| !n.op.is_leaf()).count();
    // Removed: `* 1` (simplify), exp and mul of constants (fold), `m + r` (cse).
    assert_eq!(n_ops(&o), n_ops(&g) - 4, "{o}");
    let (l, report) = legalize(&o, "gpu", &gpu_like).unwrap();
    assert_eq!(report.count(How::Decomposed), 2, "{report}");
    assert_eq!(report.count(How::Unsupported), 0);
    let p = lower(&l).unwrap();
    assert_close(&run_program(&p, &l, 11), &want, 1e-5);
    let s = lower_stats(&p);
    // Matmuls with a bias/gelu/residual epilogue fuse; the attention softmax and the
    // layer norm decompose into reductions with fused prologues and epilogues.
    assert!(s.epilogues >= 2, "{s}\n{p}");
    assert!(s.kernels < n_ops(&l), "{s}\n{p}");
}

#[test]
fn folding_uses_the_callers_evaluator_for_any_op() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let a = g.constant(Tensor::random(DType::F32, &[3, 4], 1));
    let b = g.constant(Tensor::random(DType::F32, &[4, 3], 2));
    let w = g.matmul(a, b).unwrap();
    let w = g.softmax(w, 1).unwrap();
    let y = g.matmul(x, w).unwrap();
    g.output("y", y);
    let o = optimize(&g, &cpu_eval).unwrap();
    assert_eq!(
        o.nodes().iter().filter(|n| !n.op.is_leaf()).count(),
        1,
        "{o}"
    );
    assert_close(&run(&o, 5), &run(&g, 5), 1e-6);
}

#[test]
fn pass_names_are_checked_and_named_in_errors() {
    assert_eq!(PASSES, &["fold", "cse", "simplify", "dce"]);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]);
    let y = g.binary(BinaryOp::Add, x, x).unwrap();
    g.output("y", y);
    let err = optimize_with(&g, &cpu_eval, &["cse", "inline"]).unwrap_err();
    assert!(matches!(err, OptError::UnknownPass { .. }), "{err}");
    assert!(
        err.to_string().contains("fold, cse, simplify, dce"),
        "{err}"
    );
    let only_dce = optimize_with(&g, &cpu_eval, &["dce"]).unwrap();
    assert_eq!(only_dce, g);
    let err = optimize_until(&g, &cpu_eval, "inline").unwrap_err();
    assert!(matches!(err, OptError::UnknownPass { .. }), "{err}");
    assert!(
        err.to_string().contains("fold, cse, simplify, dce"),
        "{err}"
    );
    let mut bad = Graph::new();
    let x = bad.input("x", DType::F32, [2]);
    bad.output("y", x);
    bad.output("y", x);
    let err = optimize(&bad, &cpu_eval).unwrap_err();
    assert!(err.to_string().starts_with("pass `input`: "), "{err}");
}

#[test]
fn optimize_until_stops_after_the_named_pass() {
    let g = block();
    let after_cse = optimize_until(&g, &cpu_eval, "cse").unwrap();
    assert_eq!(
        after_cse,
        optimize_with(&g, &cpu_eval, &["fold", "cse"]).unwrap()
    );
    assert_ne!(
        after_cse,
        optimize(&g, &cpu_eval).unwrap(),
        "simplify not run yet"
    );
    assert_eq!(
        optimize_until(&g, &cpu_eval, "dce").unwrap(),
        optimize(&g, &cpu_eval).unwrap()
    );
}

#[test]
fn kernel_dump_is_readable() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 4]);
    let w = g.param("w", DType::F32, [4, 3]);
    let m = g.matmul(x, w).unwrap();
    let y = g.relu(m).unwrap();
    g.output("y", y);
    let text = dump_kernels(&g).unwrap();
    assert_eq!(
        text,
        "b0: f32[2,4] input \"x\"\n\
         b1: f32[4,3] param \"w\"\n\
         b2: f32[2,3] temp\n\
         library matmul_2 matmul(b0, b1)  -> b2\n  \
         epilogue loop relu_3_epilogue shape=[2, 3] reduce=[] -> b2\n  \
         in0 = b2 f32 offset=0 strides=[3, 1]\n  \
         e0: f32 = load in0\n  \
         e1: f32 = relu(e0)\n  \
         store e1\n\
         output \"y\" = b2\n"
    );
}
