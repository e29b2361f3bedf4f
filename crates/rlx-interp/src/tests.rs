//! Hand-computed checks of the interpreter, one per op family, plus shape properties.

use super::*;
use rlx_ir::{
    ArgOp, AttnMask, BinaryOp, Conv2dParams, Graph, PadMode, Pool2dParams, PoolKind, ReduceOp,
    UnaryOp,
};
use std::collections::HashMap;
use std::sync::Arc;

fn t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(DType::F32, shape, v).unwrap()
}

fn check(op: Op, inputs: &[&Tensor], shape: &[usize], want: &[f64]) {
    let r = eval_op(&op, inputs).unwrap();
    assert_eq!(r.shape(), shape, "{op:?}");
    let got = r.to_f64_vec();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{op:?}: got {got:?} want {want:?}"
        );
    }
}

#[test]
fn matmul_2x3_by_3x2() {
    let a = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = t(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
    check(Op::MatMul, &[&a, &b], &[2, 2], &[58., 64., 139., 154.]);
    let batched = t(&[2, 1, 3], &[1., 2., 3., 4., 5., 6.]);
    check(
        Op::MatMul,
        &[&batched, &b],
        &[2, 1, 2],
        &[58., 64., 139., 154.],
    );
}

#[test]
fn conv_with_padding_stride_groups_and_bias() {
    let x: Vec<f64> = (1..=18).map(f64::from).collect();
    let x = t(&[1, 2, 3, 3], &x);
    let w = t(&[2, 1, 2, 2], &[1., 1., 1., 1., 1., 0., 0., -1.]);
    let b = t(&[2], &[0.5, -1.0]);
    let p = Conv2dParams {
        stride: [2, 2],
        pads: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 2,
    };
    let want = [1.5, 5.5, 11.5, 28.5, -11., -13., -17., -5.];
    check(Op::Conv2d(p), &[&x, &w, &b], &[1, 2, 2, 2], &want);
}

fn pool(kind: PoolKind, k: usize, s: usize, pads: [usize; 4], cip: bool, ceil: bool) -> Op {
    Op::Pool2d(Pool2dParams {
        kind,
        kernel: [k, k],
        stride: [s, s],
        pads,
        dilation: [1, 1],
        count_include_pad: cip,
        ceil_mode: ceil,
    })
}

#[test]
fn pools_ceil_mode_and_count_include_pad() {
    let x: Vec<f64> = (1..=9).map(f64::from).collect();
    let x = t(&[1, 1, 3, 3], &x);
    let avg_ceil = pool(PoolKind::Avg, 2, 2, [0; 4], false, true);
    check(avg_ceil, &[&x], &[1, 1, 2, 2], &[3., 4.5, 7.5, 9.]);
    let max_ceil = pool(PoolKind::Max, 2, 2, [0; 4], false, true);
    check(max_ceil, &[&x], &[1, 1, 2, 2], &[5., 6., 8., 9.]);
    let floor = pool(PoolKind::Max, 2, 2, [0; 4], false, false);
    check(floor, &[&x], &[1, 1, 1, 1], &[5.]);
    let y = t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let inc = pool(PoolKind::Avg, 2, 1, [1, 1, 0, 0], true, false);
    check(inc, &[&y], &[1, 1, 2, 2], &[0.25, 0.75, 1., 2.5]);
    let exc = pool(PoolKind::Avg, 2, 1, [1, 1, 0, 0], false, false);
    check(exc, &[&y], &[1, 1, 2, 2], &[1., 1.5, 2., 2.5]);
    check(Op::GlobalPool(PoolKind::Avg), &[&y], &[1, 1, 1, 1], &[2.5]);
    check(Op::GlobalPool(PoolKind::Max), &[&y], &[1, 1, 1, 1], &[4.]);
}

#[test]
fn attention_causal_equals_explicit_mask() {
    let q = Tensor::random(DType::F64, &[2, 3, 4], 1);
    let k = Tensor::random(DType::F64, &[2, 5, 4], 2);
    let v = Tensor::random(DType::F64, &[2, 5, 3], 3);
    let causal = Op::Attention {
        mask: AttnMask::Causal,
        scale: None,
    };
    let additive = Op::Attention {
        mask: AttnMask::Additive,
        scale: None,
    };
    // sq=3, sk=5: query i sees keys j <= i + 2.
    let m: Vec<f64> = (0..15)
        .map(|p| {
            if p % 5 <= p / 5 + 2 {
                0.0
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let mask = Tensor::from_f64(DType::F64, &[3, 5], &m).unwrap();
    let a = eval_op(&causal, &[&q, &k, &v]).unwrap();
    let b = eval_op(&additive, &[&q, &k, &v, &mask]).unwrap();
    assert_eq!(a, b);
    let none = Op::Attention {
        mask: AttnMask::None,
        scale: Some(0.5),
    };
    let zero = Tensor::full(DType::F64, &[1, 1], 0.0);
    let c = eval_op(&none, &[&q, &k, &v]).unwrap();
    let d = eval_op(
        &Op::Attention {
            mask: AttnMask::Additive,
            scale: Some(0.5),
        },
        &[&q, &k, &v, &zero],
    )
    .unwrap();
    assert_eq!(c, d);
    // One key: the output is v itself.
    let k1 = Tensor::random(DType::F64, &[1, 4], 4);
    let v1 = t(&[1, 2], &[3., -2.]);
    let q1 = Tensor::random(DType::F64, &[2, 4], 5).cast(DType::F32);
    let r = eval_op(&none, &[&q1, &k1.cast(DType::F32), &v1]).unwrap();
    assert_eq!(r.to_f64_vec(), [3., -2., 3., -2.]);
}

#[test]
fn layer_and_rms_norm() {
    let x = t(&[1, 4], &[1., 2., 3., 4.]);
    let s = t(&[4], &[1., 2., 1., 1.]);
    let b = t(&[4], &[0., 0., 1., 0.]);
    let r = 1.0 / 1.25f64.sqrt();
    let want = [-1.5 * r, -0.5 * r * 2.0, 0.5 * r + 1.0, 1.5 * r];
    check(
        Op::LayerNorm { axis: 1, eps: 0.0 },
        &[&x, &s, &b],
        &[1, 4],
        &want,
    );
    let rms = 1.0 / 7.5f64.sqrt();
    let want = [rms, 4. * rms, 3. * rms, 4. * rms];
    check(Op::RmsNorm { axis: 1, eps: 0.0 }, &[&x, &s], &[1, 4], &want);
}

#[test]
fn softmax_and_log_softmax() {
    let x = t(&[1, 3], &[1., 2., 3.]);
    let e: Vec<f64> = [1f64, 2., 3.].iter().map(|v| v.exp()).collect();
    let sum: f64 = e.iter().sum();
    let want: Vec<f64> = e.iter().map(|v| v / sum).collect();
    check(Op::Softmax { axis: 1 }, &[&x], &[1, 3], &want);
    let logw: Vec<f64> = want.iter().map(|v| v.ln()).collect();
    check(Op::LogSoftmax { axis: 1 }, &[&x], &[1, 3], &logw);
    let big = t(&[2], &[1000., 1000.]);
    check(Op::Softmax { axis: 0 }, &[&big], &[2], &[0.5, 0.5]);
}

#[test]
fn gather_wraps_negative_indices_and_rejects_out_of_range() {
    let d = t(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
    let i = Tensor::new(vec![2], rlx_ir::TensorData::I64(vec![-1, 0].into())).unwrap();
    check(
        Op::Gather { axis: 0 },
        &[&d, &i],
        &[2, 2],
        &[5., 6., 1., 2.],
    );
    let i = Tensor::new(vec![1], rlx_ir::TensorData::I32(vec![1].into())).unwrap();
    check(Op::Gather { axis: 1 }, &[&d, &i], &[3, 1], &[2., 4., 6.]);
    let bad = Tensor::new(vec![1], rlx_ir::TensorData::I64(vec![3].into())).unwrap();
    let e = eval_op(&Op::Gather { axis: 0 }, &[&d, &bad]).unwrap_err();
    assert!(e.to_string().contains("index 3 out of range"), "{e}");
}

#[test]
fn pad_modes() {
    let x = t(&[1, 3], &[1., 2., 3.]);
    let pads = vec![(0, 0), (2, 1)];
    let p = |mode| Op::Pad {
        pads: pads.clone(),
        mode,
    };
    check(
        p(PadMode::Reflect),
        &[&x],
        &[1, 6],
        &[3., 2., 1., 2., 3., 2.],
    );
    check(p(PadMode::Edge), &[&x], &[1, 6], &[1., 1., 1., 2., 3., 3.]);
    check(
        p(PadMode::Constant(9.)),
        &[&x],
        &[1, 6],
        &[9., 9., 1., 2., 3., 9.],
    );
}

#[test]
fn slice_with_negative_step_and_transpose() {
    let x = t(&[5], &[0., 1., 2., 3., 4.]);
    let s = Op::Slice {
        axes: vec![0],
        starts: vec![-1],
        ends: vec![i64::MIN],
        steps: vec![-2],
    };
    check(s, &[&x], &[3], &[4., 2., 0.]);
    let m = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    check(
        Op::Transpose(vec![1, 0]),
        &[&m],
        &[3, 2],
        &[1., 4., 2., 5., 3., 6.],
    );
    let c = Op::Concat { axis: 1 };
    check(
        c,
        &[&m, &m],
        &[2, 6],
        &[1., 2., 3., 1., 2., 3., 4., 5., 6., 4., 5., 6.],
    );
    let e = Op::Expand(rlx_ir::Shape::of(&[2, 2]));
    check(e, &[&t(&[2, 1], &[7., 8.])], &[2, 2], &[7., 7., 8., 8.]);
}

#[test]
fn reductions_and_arg_reductions() {
    let m = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let sum = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![1],
        keepdims: true,
    };
    check(sum, &[&m], &[2, 1], &[6., 15.]);
    let mean = Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![0],
        keepdims: false,
    };
    check(mean, &[&m], &[3], &[2.5, 3.5, 4.5]);
    let v = t(&[4], &[1., 3., 3., 2.]);
    let am = |op| Op::ArgReduce {
        op,
        axis: 0,
        keepdims: false,
    };
    check(am(ArgOp::ArgMax), &[&v], &[], &[1.]);
    check(am(ArgOp::ArgMin), &[&v], &[], &[0.]);
}

#[test]
fn elementwise_broadcast_and_integer_semantics() {
    let a = t(&[2, 1], &[1., 2.]);
    let b = t(&[3], &[10., 20., 30.]);
    check(
        Op::Binary(BinaryOp::Add),
        &[&a, &b],
        &[2, 3],
        &[11., 21., 31., 12., 22., 32.],
    );
    let i = Tensor::from_f64(DType::I32, &[2], &[-7., 7.]).unwrap();
    let two = Tensor::from_f64(DType::I32, &[], &[2.]).unwrap();
    check(Op::Binary(BinaryOp::Div), &[&i, &two], &[2], &[-3., 3.]);
    check(Op::Unary(UnaryOp::Relu), &[&a], &[2, 1], &[1., 2.]);
    let c = Tensor::from_f64(DType::Bool, &[2, 1], &[1., 0.]).unwrap();
    check(
        Op::Where,
        &[&c, &a, &b],
        &[2, 3],
        &[1., 1., 1., 10., 20., 30.],
    );
    let r = eval_op(&Op::Cast(DType::I64), &[&t(&[2], &[2.7, -2.7])]).unwrap();
    assert_eq!(r.data(), &rlx_ir::TensorData::I64(vec![2, -2].into()));
}

#[test]
fn eval_op_rejects_bad_operands() {
    let a = t(&[2, 3], &[0.; 6]);
    let e = eval_op(&Op::MatMul, &[&a, &a]).unwrap_err();
    assert!(
        e.to_string().contains("matmul") && e.to_string().contains("f32[2,3]"),
        "{e}"
    );
    let e = eval_op(&Op::Input { name: "x".into() }, &[]).unwrap_err();
    assert!(e.to_string().contains("bound by name"));
}

#[test]
fn run_graph_binds_and_reports_bad_inputs() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]);
    let w = g.param("w", DType::F32, [3, 2]);
    let y = g.matmul(x, w).unwrap();
    let z = g.relu(y).unwrap();
    g.output("z", z);
    let mut inputs = HashMap::new();
    let mut params = HashMap::new();
    let e = run_graph(&g, &inputs, &params).unwrap_err();
    assert_eq!(e.to_string(), "missing input `x`");
    inputs.insert("x".to_string(), t(&[2, 2], &[0.; 4]));
    params.insert("w".to_string(), Arc::new(t(&[3, 2], &[1.; 6])));
    let e = run_graph(&g, &inputs, &params).unwrap_err();
    assert_eq!(e.to_string(), "input `x`: expected f32[2,3], got f32[2,2]");
    inputs.insert("x".to_string(), t(&[2, 3], &[1., -2., 0., 1., 1., 1.]));
    let out = run_graph(&g, &inputs, &params).unwrap();
    assert_eq!(out[0].0, "z");
    assert_eq!(out[0].1.to_f64_vec(), [0., 0., 3., 3.]);
}

mod shapes {
    //! Property: every result has exactly the shape and dtype `rlx_ir::infer` gives.
    use super::*;
    use proptest::prelude::*;

    fn ops_for(shape: &[usize], pick: usize, seed: u64) -> Vec<(Op, Vec<Tensor>)> {
        let mut rng = rlx_ir::SplitMix64(seed);
        let x = Tensor::random(DType::F32, shape, seed);
        let r = shape.len();
        let mut v: Vec<(Op, Vec<Tensor>)> = vec![
            (Op::Unary(UnaryOp::ALL[pick % 20]), vec![x.clone()]),
            (
                Op::Binary(BinaryOp::ALL[pick % 15]),
                vec![
                    x.clone(),
                    Tensor::random(DType::F32, &shape[r.min(pick % (r + 1))..], 9),
                ],
            ),
            (Op::Cast(DType::ALL[pick % 9]), vec![x.clone()]),
            (
                Op::Reshape(rlx_ir::Shape::of(&[x.numel()])),
                vec![x.clone()],
            ),
        ];
        if r > 0 {
            let axis = pick % r;
            let mut perm: Vec<usize> = (0..r).collect();
            perm.rotate_left(pick % r);
            let mut axes: Vec<usize> = (0..r).filter(|_| rng.below(2) == 0).collect();
            axes.dedup();
            let idx = Tensor::from_f64(DType::I64, &[2], &[-1.0, 0.0]).unwrap();
            let pads: Vec<(usize, usize)> = shape
                .iter()
                .map(|&d| (rng.below(d), rng.below(d)))
                .collect();
            v.extend([
                (
                    Op::Reduce {
                        op: ReduceOp::ALL[pick % 5],
                        axes,
                        keepdims: pick.is_multiple_of(2),
                    },
                    vec![x.clone()],
                ),
                (
                    Op::ArgReduce {
                        op: ArgOp::ArgMax,
                        axis,
                        keepdims: pick % 2 == 1,
                    },
                    vec![x.clone()],
                ),
                (Op::Softmax { axis }, vec![x.clone()]),
                (Op::LogSoftmax { axis }, vec![x.clone()]),
                (
                    Op::LayerNorm { axis, eps: 1e-5 },
                    vec![
                        x.clone(),
                        Tensor::random(DType::F32, &shape[axis..], 1),
                        Tensor::random(DType::F32, &shape[r - 1..], 2),
                    ],
                ),
                (
                    Op::RmsNorm { axis, eps: 1e-5 },
                    vec![x.clone(), Tensor::random(DType::F32, &shape[axis..], 1)],
                ),
                (Op::Transpose(perm), vec![x.clone()]),
                (
                    Op::Slice {
                        axes: vec![axis],
                        starts: vec![rng.below(4) as i64 - 2],
                        ends: vec![i64::MAX],
                        steps: vec![if pick.is_multiple_of(2) { 1 } else { -1 }],
                    },
                    vec![x.clone()],
                ),
                (Op::Concat { axis }, vec![x.clone(), x.clone()]),
                (Op::Gather { axis }, vec![x.clone(), idx]),
                (
                    Op::Pad {
                        pads: pads.clone(),
                        mode: PadMode::Reflect,
                    },
                    vec![x.clone()],
                ),
                (
                    Op::Pad {
                        pads,
                        mode: PadMode::Constant(1.5),
                    },
                    vec![x.clone()],
                ),
            ]);
            let mut big = shape.to_vec();
            big.insert(0, 2);
            v.push((Op::Expand(rlx_ir::Shape::of(&big)), vec![x.clone()]));
        }
        if r >= 2 {
            let mut bs = shape.to_vec();
            bs.swap(r - 1, r - 2);
            let y = Tensor::random(DType::F32, &bs[pick % (r - 1)..], 3);
            v.push((Op::MatMul, vec![x.clone(), y]));
            let kv = Tensor::random(DType::F32, &shape[r - 2..], 4);
            v.push((
                Op::Attention {
                    mask: AttnMask::Causal,
                    scale: None,
                },
                vec![x.clone(), kv.clone(), kv],
            ));
        }
        if r == 4 {
            let k = 1 + pick % 2;
            let w = Tensor::random(DType::F32, &[3, shape[1], k, k], 5);
            let p = Conv2dParams {
                stride: [1 + pick % 2, 1],
                pads: [pick % 2, 0, 1, pick % 2],
                dilation: [1, 1],
                groups: 1,
            };
            v.push((Op::Conv2d(p), vec![x.clone(), w]));
            let pp = Pool2dParams {
                kind: PoolKind::Avg,
                kernel: [k, k],
                stride: [2, 1],
                pads: [0, 0, k - 1, 0],
                dilation: [1, 1],
                count_include_pad: false,
                ceil_mode: pick.is_multiple_of(2),
            };
            v.push((Op::Pool2d(pp), vec![x.clone()]));
            v.push((Op::GlobalPool(PoolKind::Max), vec![x.clone()]));
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn results_match_inferred_types(
            shape in proptest::collection::vec(1usize..4, 0..5),
            pick in 0usize..1000,
            seed in 0u64..1000,
        ) {
            for (op, ins) in ops_for(&shape, pick, seed) {
                let refs: Vec<&Tensor> = ins.iter().collect();
                let tys: Vec<TensorType> = refs.iter().map(|t| type_of(t)).collect();
                let trefs: Vec<&TensorType> = tys.iter().collect();
                match rlx_ir::infer(&op, &trefs) {
                    Ok(want) => {
                        let got = eval_op(&op, &refs).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
                        prop_assert_eq!(type_of(&got), want, "{:?}", op);
                    }
                    Err(_) => prop_assert!(eval_op(&op, &refs).is_err()),
                }
            }
        }
    }
}
