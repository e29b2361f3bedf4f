//! Decompositions give the values of the ops they replace (on the validation interpreter),
//! both as graphs and after lowering to kernels.

use super::*;
use crate::lower::lower;
use crate::test_util::{assert_close, run, run_program};
use rlx_ir::{BinaryOp, DType, Op, PoolKind, Shape, UnaryOp};

/// A backend with a small primitive set: arithmetic, exp/log/sqrt/erf/tanh, rounding,
/// comparisons, where, reductions, matmul and transpose.
fn primitives(op: &Op, _: &[&TensorType]) -> bool {
    use BinaryOp as B;
    use UnaryOp as U;
    match op {
        Op::Binary(b) => matches!(
            b,
            B::Add | B::Mul | B::Div | B::Lt | B::Gt | B::Eq | B::Ne | B::And
        ),
        Op::Unary(u) => matches!(
            u,
            U::Exp | U::Log | U::Sqrt | U::Erf | U::Tanh | U::Floor | U::Ceil
        ),
        Op::Where | Op::Reduce { .. } | Op::MatMul | Op::Transpose(_) => true,
        _ => false,
    }
}

/// Legalizes `g` for [`primitives`]; every node must now be claimed, and both the
/// legalized graph and its kernels must match `g` on the interpreter.
fn check(g: &Graph) {
    g.verify().unwrap();
    let (lg, report) = legalize(g, "prim", &primitives).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.count(How::Decomposed) >= 1, "{report}");
    for n in lg.nodes().iter().filter(|n| !n.op.is_leaf()) {
        let tys: Vec<&TensorType> = n.inputs.iter().map(|&i| lg.ty(i)).collect();
        assert!(primitives(&n.op, &tys), "{} left in\n{lg}", n.op.name());
    }
    let program = lower(&lg).unwrap();
    for seed in [3, 4] {
        let want = run(g, seed);
        assert_close(&run(&lg, seed), &want, 1e-5);
        assert_close(&run_program(&program, &lg, seed), &want, 1e-5);
    }
}

fn unary_graph(u: UnaryOp, positive: bool) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 33]);
    let x = if positive {
        let sq = g.mul(x, x).unwrap();
        let half = g.scalar(DType::F32, 0.5);
        g.add(sq, half).unwrap()
    } else {
        let three = g.scalar(DType::F32, 3.0);
        g.mul(x, three).unwrap()
    };
    let y = g.unary(u, x).unwrap();
    g.output("y", y);
    g
}

#[test]
fn activations() {
    for u in [
        UnaryOp::GELU,
        UnaryOp::GELU_TANH,
        UnaryOp::SILU,
        UnaryOp::Sigmoid,
        UnaryOp::Reciprocal,
        UnaryOp::Neg,
        UnaryOp::Relu,
    ] {
        check(&unary_graph(u, false));
    }
    check(&unary_graph(UnaryOp::Rsqrt, true));
}

/// A backend with no native composite: every op but [`UnaryOp::Composite`].
fn no_composites(op: &Op, _: &[&TensorType]) -> bool {
    !matches!(op, Op::Unary(UnaryOp::Composite(_)))
}

#[test]
fn every_composite_is_expanded_where_not_native() {
    let composites = UnaryOp::ALL
        .into_iter()
        .filter(|u| matches!(u, UnaryOp::Composite(_)));
    for u in composites {
        let g = unary_graph(u, false);
        let (lg, report) = legalize(&g, "plain", &no_composites).unwrap();
        assert_eq!(report.count(How::Decomposed), 1, "{report}");
        assert!(lg.nodes().iter().all(|n| no_composites(&n.op, &[])), "{lg}");
        let program = lower(&lg).unwrap();
        for seed in [5, 6] {
            let want = run(&g, seed);
            assert!(
                want[0].1.to_f64_vec().iter().all(|v| *v != 0.0),
                "{}",
                u.name()
            );
            assert_close(&run(&lg, seed), &want, 1e-5);
            assert_close(&run_program(&program, &lg, seed), &want, 1e-5);
        }
    }
}

#[test]
fn softmax_and_log_softmax() {
    for log in [false, true] {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [3, 4, 7]);
        let op = if log {
            Op::LogSoftmax { axis: 1 }
        } else {
            Op::Softmax { axis: 1 }
        };
        let y = g.push(op, &[x], None).unwrap();
        g.output("y", y);
        check(&g);
    }
}

#[test]
fn norms() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 8]);
    let s = g.param("scale", DType::F32, [8]);
    let b = g.param("bias", DType::F32, [8]);
    let ln = g.layer_norm(x, s, b, 1e-5).unwrap();
    let rms = g.rms_norm(x, s, 1e-6).unwrap();
    let wide = g
        .push(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x, s, b], None)
        .unwrap();
    g.output("ln", ln);
    g.output("rms", rms);
    g.output("wide", wide);
    check(&g);
}

#[test]
fn attention_with_each_mask() {
    for (mask, scale) in [(0, None), (1, Some(0.3)), (2, None)] {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, [2, 3, 4]);
        let k = g.input("k", DType::F32, [2, 5, 4]);
        let v = g.input("v", DType::F32, [1, 5, 6]);
        let m = (mask == 2).then(|| g.input("m", DType::F32, [3, 5]));
        let y = g.attention(q, k, v, m, mask == 1, scale).unwrap();
        g.output("y", y);
        check(&g);
    }
}

#[test]
fn attention_rows_that_see_no_key_give_zeros() {
    // Causal with more queries than keys: the first two queries see nothing.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [5, 4]);
    let k = g.input("k", DType::F32, [3, 4]);
    let v = g.input("v", DType::F32, [3, 2]);
    let y = g.attention(q, k, v, None, true, None).unwrap();
    g.output("y", y);
    check(&g);
    // An additive mask with a fully masked row.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [2, 3, 4]);
    let k = g.input("k", DType::F32, [2, 3, 4]);
    let v = g.input("v", DType::F32, [2, 3, 2]);
    let inf = f64::NEG_INFINITY;
    let mask = [0.0, inf, 0.0, inf, inf, inf, 0.0, 0.0, 0.0];
    let m = g.constant(rlx_ir::Tensor::from_f64(DType::F32, &[3, 3], &mask).unwrap());
    let y = g.attention(q, k, v, Some(m), false, None).unwrap();
    g.output("y", y);
    check(&g);
    let out = run(&g, 1);
    assert!(out[0].1.to_f64_vec().iter().all(|x| x.is_finite()));
}

#[test]
fn global_pools() {
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [2, 3, 4, 5]);
        let y = g.push(Op::GlobalPool(kind), &[x], None).unwrap();
        g.output("y", y);
        check(&g);
    }
}

#[test]
fn expand_numeric_and_bool() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 1]);
    let b = g.input("b", DType::Bool, [1, 4]);
    let xe = g
        .push(Op::Expand(Shape::of(&[2, 3, 4])), &[x], None)
        .unwrap();
    let be = g.push(Op::Expand(Shape::of(&[3, 4])), &[b], None).unwrap();
    g.output("xe", xe);
    g.output("be", be);
    check(&g);
}

#[test]
fn modulo_float_and_int() {
    for dtype in [DType::F32, DType::I32] {
        for b in [BinaryOp::Mod, BinaryOp::FMod, BinaryOp::Sub] {
            let mut g = Graph::new();
            let x = g.input("x", dtype, [5, 7]);
            let y = g.input("y", dtype, [7]);
            let r = g.binary(b, x, y).unwrap();
            g.output("r", r);
            check(&g);
        }
    }
}

/// A backend (caps) without integer products: no `MatMulInteger`/`ConvInteger`, and when
/// `gpu`, as wgpu, no integer matmul and nothing in f64 either.
fn no_int(gpu: bool) -> impl Fn(&Op, &[&TensorType]) -> bool {
    move |op: &Op, ins: &[&TensorType]| {
        let int_product = matches!(op, Op::MatMulInteger(_) | Op::ConvInteger(_))
            || (matches!(op, Op::MatMul) && ins.iter().any(|t| t.dtype.is_int()));
        let f64 = ins.iter().any(|t| t.dtype == DType::F64) || matches!(op, Op::Cast(DType::F64));
        !matches!(op, Op::MatMulInteger(_) | Op::ConvInteger(_)) && !(gpu && (int_product || f64))
    }
}

/// What the GPU-like caps leave: no integer product and nothing in f64.
fn assert_gpu_like(lg: &Graph) {
    for n in lg.nodes() {
        let int_matmul = matches!(n.op, Op::MatMul) && n.ty.dtype.is_int();
        assert!(!int_matmul && n.ty.dtype != DType::F64, "{lg}");
    }
}

/// A backend without the integer product gets it widened to an i32 matmul (or, without
/// integer matmuls or f64, to an f32 one), in every mode, with the same values (the
/// interpreter runs both).
#[test]
fn matmul_integer_widens_where_not_claimed() {
    use rlx_ir::{AInput, IntMatMul, Tensor};
    let modes = [AInput::Integer, AInput::Quantize, AInput::Dynamic];
    let cases = modes.into_iter().flat_map(|m| [(m, false), (m, true)]);
    for ((a_mode, scaled), gpu) in cases.flat_map(|c| [(c, false), (c, true)]) {
        let all_but = no_int(gpu);
        let p = IntMatMul { a: a_mode, scaled };
        let mut g = Graph::new();
        let a_dtype = if a_mode == AInput::Integer {
            DType::U8
        } else {
            DType::F32
        };
        let a = g.input("a", a_dtype, [3, 5, 7]);
        let b = g.param("b", DType::I8, [7, 4]);
        let za = g.constant(Tensor::scalar(DType::U8, 3.0));
        let zb = g.param("zb", DType::I8, [4]);
        let mut ins = vec![a, b];
        if a_mode != AInput::Dynamic {
            ins.push(za);
        }
        ins.push(zb);
        if a_mode == AInput::Quantize {
            ins.push(g.constant(Tensor::scalar(DType::F32, 0.01)));
        }
        if scaled {
            ins.push(g.param("s", DType::F32, [4]));
        }
        let y = g.push(Op::MatMulInteger(p), &ins, None).unwrap();
        g.output("y", y);
        let (lg, report) = legalize(&g, "no-int", &all_but).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.count(How::Decomposed) >= 1, "{report}");
        assert!(
            lg.nodes()
                .iter()
                .all(|n| !matches!(n.op, Op::MatMulInteger(_))),
            "{lg}"
        );
        if gpu {
            assert_gpu_like(&lg);
        }
        for seed in [3, 4] {
            assert_close(&run(&lg, seed), &run(&g, seed), 0.0);
        }
    }
}

/// A backend without the integer convolution gets it widened to an f64 convolution (f32
/// without f64), plain and requantized (with and without bias, per-channel and
/// per-tensor), with the same values.
#[test]
fn conv_integer_widens_where_not_claimed() {
    use rlx_ir::{Conv2dParams, IntConv, Tensor};
    let conv = Conv2dParams {
        stride: [2, 1],
        pads: [1, 0, 1, 2],
        dilation: [1, 2],
        groups: 2,
    };
    let cases = [
        (false, false, true),
        (true, false, false),
        (true, true, true),
    ];
    for ((requantize, bias, per_channel), gpu) in
        cases.into_iter().flat_map(|c| [(c, false), (c, true)])
    {
        let all_but = no_int(gpu);
        let p = IntConv { conv, requantize };
        let mut g = Graph::new();
        let x = g.input("x", DType::U8, [2, 4, 7, 6]);
        let w = g.param("w", DType::I8, [6, 2, 3, 2]);
        let xz = g.constant(Tensor::scalar(DType::U8, 131.0));
        let wz = if per_channel {
            g.param("wz", DType::I8, [6])
        } else {
            g.constant(Tensor::scalar(DType::I8, -3.0))
        };
        let mut ins = vec![x, w, xz, wz];
        if requantize {
            let m = Tensor::from_f32(&[6], vec![0.003, 0.002, 0.004, 0.001, 0.0025, 0.0035]);
            ins.push(g.constant(m.unwrap()));
            ins.push(g.constant(Tensor::scalar(DType::I8, 5.0)));
        }
        if bias {
            ins.push(g.param("b", DType::I32, [6]));
        }
        let y = g.push(Op::ConvInteger(p), &ins, None).unwrap();
        g.output("y", y);
        let (lg, report) = legalize(&g, "no-int", &all_but).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.count(How::Decomposed) >= 1, "{report}");
        assert!(
            lg.nodes()
                .iter()
                .all(|n| !matches!(n.op, Op::ConvInteger(_))),
            "{lg}"
        );
        if gpu {
            assert_gpu_like(&lg);
        }
        for seed in [3, 4] {
            assert_close(&run(&lg, seed), &run(&g, seed), 0.0);
        }
    }
}
