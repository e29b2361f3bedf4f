//! The fast path against the reference interpreter on hand-built kernel programs, with
//! random non-zero inputs; relative L2 error at most 1e-5 in f32.

use rlx_cpu::testing::{broadcast_view, compare_with_reference, contiguous_view, ProgramBuilder};
use rlx_cpu::CpuOptions;
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, KernelReduce, LoopKernel, View};
use rlx_ir::{
    AttnMask, BinaryOp, Conv2dParams, DType, Op, PadMode, Pool2dParams, PoolKind, ReduceOp, UnaryOp,
};

const F: DType = DType::F32;

fn n(expr: Expr, dtype: DType) -> ExprNode {
    ExprNode { expr, dtype }
}

fn inp(buffer: usize, dtype: DType, view: View) -> KernelInput {
    KernelInput {
        buffer,
        dtype,
        view,
    }
}

fn kernel(
    name: &str,
    shape: &[usize],
    inputs: Vec<KernelInput>,
    body: Vec<ExprNode>,
) -> LoopKernel {
    LoopKernel {
        name: name.into(),
        shape: shape.to_vec(),
        reduce_shape: vec![],
        inputs,
        result: body.len() - 1,
        body,
        reduce: None,
        output: 0,
    }
}

fn check(b: ProgramBuilder, threads: Option<usize>) {
    let p = b.finish();
    for seed in [1, 2] {
        let err = compare_with_reference(
            &p,
            &CpuOptions {
                threads,
                ..Default::default()
            },
            seed,
        )
        .unwrap();
        assert!(err <= 1e-5, "rel l2 {err} (seed {seed})\n{p}");
    }
}

#[test]
fn elementwise_chain_with_broadcast_and_transposed_view() {
    let mut b = ProgramBuilder::new();
    let (r, c) = (64, 301);
    let x = b.input("x", F, &[r, c]);
    let y = b.input("y", F, &[c, r]);
    let bias = b.param("bias", F, &[c]);
    let k = kernel(
        "chain",
        &[r, c],
        vec![
            inp(x, F, contiguous_view(&[r, c])),
            inp(
                y,
                F,
                View {
                    offset: 0,
                    strides: vec![1, r as isize],
                },
            ),
            inp(bias, F, broadcast_view(&[c], &[r, c])),
        ],
        vec![
            n(Expr::Load(0), F),
            n(Expr::Load(1), F),
            n(Expr::Binary(BinaryOp::Mul, 0, 1), F),
            n(Expr::Load(2), F),
            n(Expr::Binary(BinaryOp::Add, 2, 3), F),
            n(Expr::Const(0.1), F),
            n(Expr::Binary(BinaryOp::Gt, 4, 5), DType::Bool),
            n(Expr::Unary(UnaryOp::GELU, 4), F),
            n(Expr::Unary(UnaryOp::Tanh, 4), F),
            n(Expr::Where(6, 7, 8), F),
            n(Expr::Unary(UnaryOp::Exp, 9), F),
        ],
    );
    let out = b.push_loop(k);
    b.output("y", out);
    check(b, None);
}

/// mean over the last dim of x*x, then rsqrt(m + eps) * s[row].
fn rms_kernel(b: &mut ProgramBuilder, rows: usize, cols: usize, reduce_axis0: bool) -> usize {
    let (shape, x_view) = if reduce_axis0 {
        // x is [cols, rows]; reduce over its first dim
        let x_view = View {
            offset: 0,
            strides: vec![1, rows as isize],
        };
        (vec![cols, rows], x_view)
    } else {
        (
            vec![rows, cols],
            View {
                offset: 0,
                strides: vec![cols as isize, 1],
            },
        )
    };
    let x = b.input("x", F, &shape);
    let s = b.param("s", F, &[rows]);
    let k = LoopKernel {
        name: "rms".into(),
        shape: vec![rows],
        reduce_shape: vec![cols],
        inputs: vec![
            inp(x, F, x_view),
            inp(
                s,
                F,
                View {
                    offset: 0,
                    strides: vec![1, 0],
                },
            ),
        ],
        body: vec![
            n(Expr::Load(0), F),
            n(Expr::Binary(BinaryOp::Mul, 0, 0), F),
            n(Expr::Reduced, F),
            n(Expr::Const(1e-5), F),
            n(Expr::Binary(BinaryOp::Add, 2, 3), F),
            n(Expr::Unary(UnaryOp::Rsqrt, 4), F),
            n(Expr::Load(1), F),
            n(Expr::Binary(BinaryOp::Mul, 5, 6), F),
        ],
        reduce: Some(KernelReduce {
            op: ReduceOp::Mean,
            value: 1,
            dtype: F,
        }),
        result: 7,
        output: 0,
    };
    b.push_loop(k)
}

#[test]
fn reduction_with_prologue_and_epilogue() {
    for (rows, cols, axis0) in [
        (37, 513, false),
        (1000, 7, false),
        (300, 20, true),
        (3, 70_000, false),
        (1, 1, false),
    ] {
        let mut b = ProgramBuilder::new();
        let out = rms_kernel(&mut b, rows, cols, axis0);
        b.output("r", out);
        check(b, None);
    }
}

#[test]
fn every_reduce_op_in_both_strategies() {
    for op in ReduceOp::ALL {
        for (rows, cols) in [(5, 300), (700, 3)] {
            let mut b = ProgramBuilder::new();
            let x = b.input("x", F, &[rows, cols]);
            let k = LoopKernel {
                name: "r".into(),
                shape: vec![rows],
                reduce_shape: vec![cols],
                inputs: vec![inp(x, F, contiguous_view(&[rows, cols]))],
                body: vec![
                    n(Expr::Load(0), F),
                    n(Expr::Unary(UnaryOp::Abs, 0), F),
                    n(Expr::Const(0.5), F),
                    n(Expr::Binary(BinaryOp::Add, 1, 2), F),
                    n(Expr::Reduced, F),
                ],
                reduce: Some(KernelReduce {
                    op,
                    value: 3,
                    dtype: F,
                }),
                result: 4,
                output: 0,
            };
            let out = b.push_loop(k);
            b.output("r", out);
            check(b, None);
        }
    }
}

fn bias_gelu_epilogue(shape: &[usize], bias: usize) -> LoopKernel {
    let r = shape.len();
    let mut bias_view = vec![0isize; r];
    bias_view[r - 1] = 1;
    kernel(
        "bias_gelu",
        shape,
        vec![
            inp(0, F, contiguous_view(shape)),
            inp(
                bias,
                F,
                View {
                    offset: 0,
                    strides: bias_view,
                },
            ),
        ],
        vec![
            n(Expr::Load(0), F),
            n(Expr::Load(1), F),
            n(Expr::Binary(BinaryOp::Add, 0, 1), F),
            n(Expr::Unary(UnaryOp::GELU, 2), F),
        ],
    )
}

#[test]
fn matmul_with_bias_gelu_epilogue() {
    let mut b = ProgramBuilder::new();
    let a = b.input("a", F, &[3, 17, 33]);
    let w = b.param("w", F, &[33, 29]);
    let bias = b.param("bias", F, &[29]);
    let epi = bias_gelu_epilogue(&[3, 17, 29], bias);
    let y = b
        .push_library("mm", Op::MatMul, &[a, w], Some(epi))
        .unwrap();
    b.output("y", y);
    check(b, None);
}

#[test]
fn matmul_batched_broadcast_transposed_epilogue_and_dtypes() {
    let mut b = ProgramBuilder::new();
    let a = b.input("a", F, &[2, 1, 5, 7]);
    let w = b.input("w", F, &[3, 7, 4]);
    // the epilogue reads the result transposed: it cannot run in place
    let epi = kernel(
        "t",
        &[2, 3, 4, 5],
        vec![inp(
            0,
            F,
            View {
                offset: 0,
                strides: vec![60, 20, 1, 4],
            },
        )],
        vec![n(Expr::Load(0), F), n(Expr::Unary(UnaryOp::Sigmoid, 0), F)],
    );
    let y = b
        .push_library("mm", Op::MatMul, &[a, w], Some(epi))
        .unwrap();
    b.output("y", y);
    let big_a = b.input("big_a", F, &[16, 8, 8]);
    let big_b = b.input("big_b", F, &[16, 8, 8]);
    let z = b
        .push_library("mm_many", Op::MatMul, &[big_a, big_b], None)
        .unwrap();
    b.output("z", z);
    check(b, Some(2));
    for dt in [DType::F64, DType::F16, DType::BF16, DType::I32] {
        let mut b = ProgramBuilder::new();
        let a = b.input("a", dt, &[4, 6]);
        let w = b.input("w", dt, &[6, 5]);
        let y = b.push_library("mm", Op::MatMul, &[a, w], None).unwrap();
        b.output("y", y);
        let tol = if matches!(dt, DType::F16 | DType::BF16) {
            1e-2
        } else {
            1e-12
        };
        let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 3).unwrap();
        assert!(err <= tol, "{dt}: {err}");
    }
}

#[test]
fn convolutions() {
    let cases = [
        (
            [2, 4, 9, 9],
            [6, 2, 3, 3],
            Conv2dParams {
                stride: [2, 1],
                pads: [1, 0, 1, 2],
                dilation: [1, 2],
                groups: 2,
            },
            true,
        ),
        ([4, 3, 5, 6], [8, 3, 1, 1], Conv2dParams::default(), false),
        // depthwise and few channels a group: summed tap by tap (no column matrix)
        (
            [2, 6, 11, 10],
            [6, 1, 3, 3],
            Conv2dParams {
                stride: [2, 2],
                pads: [1, 2, 0, 1],
                dilation: [2, 1],
                groups: 6,
            },
            true,
        ),
        (
            [1, 4, 5, 5],
            [8, 1, 5, 5],
            Conv2dParams {
                stride: [1, 1],
                pads: [2; 4],
                dilation: [1, 1],
                groups: 4,
            },
            false,
        ),
        (
            [1, 3, 2, 2],
            [3, 1, 3, 3],
            Conv2dParams {
                stride: [3, 3],
                pads: [1; 4],
                dilation: [1, 1],
                groups: 3,
            },
            true,
        ),
        // more channels than one block of vector lanes
        (
            [2, 20, 6, 7],
            [20, 1, 3, 3],
            Conv2dParams {
                stride: [1, 2],
                pads: [1, 1, 2, 0],
                dilation: [1, 1],
                groups: 20,
            },
            true,
        ),
        // many channels a group: one GEMM a group
        (
            [1, 16, 6, 6],
            [8, 8, 3, 3],
            Conv2dParams {
                stride: [1, 1],
                pads: [1; 4],
                dilation: [1, 1],
                groups: 2,
            },
            true,
        ),
        (
            [5, 2, 7, 7],
            [4, 2, 3, 3],
            Conv2dParams {
                stride: [1, 1],
                pads: [1; 4],
                dilation: [1, 1],
                groups: 1,
            },
            true,
        ),
    ];
    for (x, w, p, bias) in cases {
        let mut b = ProgramBuilder::new();
        let xb = b.input("x", F, &x);
        let wb = b.param("w", F, &w);
        let mut ins = vec![xb, wb];
        if bias {
            ins.push(b.param("b", F, &[w[0]]));
        }
        let y = b.push_library("conv", Op::Conv2d(p), &ins, None).unwrap();
        b.output("y", y);
        check(b, Some(2));
    }
}

#[test]
fn pools_norms_softmax_attention() {
    let mut b = ProgramBuilder::new();
    let x = b.input("x", F, &[2, 3, 9, 8]);
    for (kind, ceil, cip) in [
        (PoolKind::Max, true, false),
        (PoolKind::Avg, true, true),
        (PoolKind::Avg, false, false),
    ] {
        let p = Pool2dParams {
            kind,
            kernel: [3, 2],
            stride: [2, 2],
            pads: [1, 1, 1, 0],
            dilation: [1, 1],
            count_include_pad: cip,
            ceil_mode: ceil,
        };
        let y = b.push_library("pool", Op::Pool2d(p), &[x], None).unwrap();
        b.output(&format!("pool{}", b.program.outputs.len()), y);
    }
    let g = b
        .push_library("gap", Op::GlobalPool(PoolKind::Avg), &[x], None)
        .unwrap();
    b.output("gap", g);
    let s = b.input("s", F, &[7, 300]);
    for op in [
        Op::Softmax { axis: 1 },
        Op::LogSoftmax { axis: 1 },
        Op::Softmax { axis: 0 },
    ] {
        let y = b.push_library("softmax", op, &[s], None).unwrap();
        b.output(&format!("sm{}", b.program.outputs.len()), y);
    }
    let scale = b.param("scale", F, &[300]);
    let bias = b.param("bias", F, &[1]);
    let ln = b
        .push_library(
            "ln",
            Op::LayerNorm { axis: 1, eps: 1e-5 },
            &[s, scale, bias],
            None,
        )
        .unwrap();
    b.output("ln", ln);
    let rms = b
        .push_library("rms", Op::RmsNorm { axis: 1, eps: 1e-6 }, &[s, scale], None)
        .unwrap();
    b.output("rms", rms);
    let q = b.input("q", F, &[2, 3, 5, 8]);
    let k = b.input("k", F, &[2, 1, 7, 8]);
    let v = b.input("v", F, &[1, 3, 7, 6]);
    let mask = b.input("mask", F, &[5, 1]);
    for (m, ins) in [
        (AttnMask::Causal, vec![q, k, v]),
        (AttnMask::Additive, vec![q, k, v, mask]),
        (AttnMask::None, vec![q, k, v]),
    ] {
        let y = b
            .push_library(
                "attn",
                Op::Attention {
                    mask: m,
                    scale: None,
                },
                &ins,
                None,
            )
            .unwrap();
        b.output(&format!("attn{}", b.program.outputs.len()), y);
    }
    // full register tiles, several key panels, a full-size mask, queries fewer than keys
    let q = b.input("q2", F, &[1, 3, 37, 40]);
    let k = b.input("k2", F, &[1, 3, 70, 40]);
    let v = b.input("v2", F, &[1, 3, 70, 20]);
    let mask = b.input("mask2", F, &[37, 70]);
    for (m, ins) in [
        (AttnMask::Causal, vec![q, k, v]),
        (AttnMask::Additive, vec![q, k, v, mask]),
    ] {
        let y = b
            .push_library(
                "attn",
                Op::Attention {
                    mask: m,
                    scale: Some(0.3),
                },
                &ins,
                None,
            )
            .unwrap();
        b.output(&format!("attn{}", b.program.outputs.len()), y);
    }
    check(b, None);
}

#[test]
fn data_movement_every_dtype() {
    for dt in [
        F,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::U8,
        DType::I16,
        DType::U32,
        DType::U64,
        DType::F8E4M3FN,
        DType::F8E5M2FNUZ,
        DType::F4E2M1,
        DType::I4,
        DType::U2,
    ] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", dt, &[5, 4, 3]);
        let idx = b.constant(
            rlx_ir::Tensor::new(
                vec![2, 2],
                rlx_ir::TensorData::I64(vec![-1, 0, 2, 2].into()),
            )
            .unwrap(),
        );
        for (i, op) in [Op::Gather { axis: 0 }, Op::Gather { axis: 2 }]
            .into_iter()
            .enumerate()
        {
            let y = b.push_library("gather", op, &[x, idx], None).unwrap();
            b.output(&format!("g{i}"), y);
        }
        let c = b
            .push_library("concat", Op::Concat { axis: 1 }, &[x, x, x], None)
            .unwrap();
        b.output("c", c);
        for (i, mode) in [PadMode::Reflect, PadMode::Edge, PadMode::Constant(2.0)]
            .into_iter()
            .enumerate()
        {
            let pads = vec![(1, 2), (0, 0), (2, 1)];
            let y = b
                .push_library("pad", Op::Pad { pads, mode }, &[x], None)
                .unwrap();
            b.output(&format!("p{i}"), y);
        }
        let t = b
            .push_library("transpose", Op::Transpose(vec![2, 0, 1]), &[x], None)
            .unwrap();
        b.output("t", t);
        let sl = Op::Slice {
            axes: vec![0, 2],
            starts: vec![-1, 0],
            ends: vec![i64::MIN, 3],
            steps: vec![-2, 2],
        };
        let s = b.push_library("slice", sl, &[x], None).unwrap();
        b.output("s", s);
        let e = b
            .push_library(
                "expand",
                Op::Expand(rlx_ir::Shape::of(&[2, 5, 4, 3])),
                &[x],
                None,
            )
            .unwrap();
        b.output("e", e);
        let r = b
            .push_library(
                "reshape",
                Op::Reshape(rlx_ir::Shape::of(&[20, 3])),
                &[x],
                None,
            )
            .unwrap();
        let r2 = b.alias(r, &[60]);
        b.output("r", r2);
        if dt != DType::Bool && !dt.is_narrow() {
            let am = b
                .push_library(
                    "argmax",
                    Op::ArgReduce {
                        op: rlx_ir::ArgOp::ArgMax,
                        axis: 1,
                        keepdims: true,
                    },
                    &[x],
                    None,
                )
                .unwrap();
            b.output("am", am);
            let sum = b
                .push_library(
                    "sum",
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: vec![0, 2],
                        keepdims: true,
                    },
                    &[x],
                    None,
                )
                .unwrap();
            b.output("sum", sum);
            let cast = b
                .push_library("cast", Op::Cast(DType::F32), &[x], None)
                .unwrap();
            b.output("cast", cast);
        }
        let p = b.finish();
        let err = compare_with_reference(&p, &CpuOptions::default(), 5).unwrap();
        assert!(err <= 1e-6, "{dt}: {err}");
    }
}

#[test]
fn integer_and_half_loop_kernels_match_exactly() {
    for dt in [DType::I64, DType::I32, DType::F16, DType::F64, DType::I8] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", dt, &[10, 30]);
        let y = b.input("y", dt, &[30]);
        let k = kernel(
            "int",
            &[10, 30],
            vec![
                inp(x, dt, contiguous_view(&[10, 30])),
                inp(y, dt, broadcast_view(&[30], &[10, 30])),
            ],
            vec![
                n(Expr::Load(0), dt),
                n(Expr::Load(1), dt),
                n(Expr::Binary(BinaryOp::Mul, 0, 1), dt),
                n(Expr::Const(3.0), dt),
                n(Expr::Binary(BinaryOp::Mod, 2, 3), dt),
                n(Expr::Binary(BinaryOp::Div, 2, 1), dt),
                n(Expr::Binary(BinaryOp::Sub, 4, 5), dt),
                n(Expr::Binary(BinaryOp::Lt, 6, 0), DType::Bool),
                n(Expr::Cast(6), F),
                n(Expr::Const(0.5), F),
                n(Expr::Binary(BinaryOp::Add, 8, 9), F),
                n(Expr::Where(7, 10, 9), F),
            ],
        );
        let out = b.push_loop(k);
        b.output("o", out);
        let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 9).unwrap();
        assert_eq!(err, 0.0, "{dt}");
    }
}

#[test]
fn bitwise_ops_and_narrow_casts_match_exactly() {
    for dt in [
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::U64,
    ] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", dt, &[6, 7]);
        let y = b.input("y", dt, &[7]);
        let k = kernel(
            "bits",
            &[6, 7],
            vec![
                inp(x, dt, contiguous_view(&[6, 7])),
                inp(y, dt, broadcast_view(&[7], &[6, 7])),
            ],
            vec![
                n(Expr::Load(0), dt),
                n(Expr::Load(1), dt),
                n(Expr::Binary(BinaryOp::BitAnd, 0, 1), dt),
                n(Expr::Binary(BinaryOp::BitXor, 2, 0), dt),
                n(Expr::Unary(UnaryOp::BitNot, 3), dt),
                n(Expr::Const(3.0), dt),
                n(Expr::Binary(BinaryOp::Shl, 4, 5), dt),
                n(Expr::Binary(BinaryOp::Shr, 6, 5), dt),
                n(Expr::Binary(BinaryOp::BitOr, 7, 1), dt),
            ],
        );
        let out = b.push_loop(k);
        b.output("o", out);
        let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 3).unwrap();
        assert_eq!(err, 0.0, "{dt}");
    }
    for narrow in [
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
    ] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", F, &[40]);
        let k = kernel(
            "narrow",
            &[40],
            vec![inp(x, F, contiguous_view(&[40]))],
            vec![
                n(Expr::Load(0), F),
                n(Expr::Const(200.0), F),
                n(Expr::Binary(BinaryOp::Mul, 0, 1), F),
                n(Expr::Cast(2), narrow),
            ],
        );
        let q = b.push_loop(k);
        b.output("q", q);
        let back = b.push_library("back", Op::Cast(F), &[q], None).unwrap();
        b.output("back", back);
        let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 4).unwrap();
        assert_eq!(err, 0.0, "{narrow}");
    }
}

#[test]
fn bitcast_reinterprets_bytes() {
    for (from, to) in [
        (F, DType::I32),
        (DType::F64, DType::I64),
        (DType::I8, DType::U8),
        (DType::U16, DType::I16),
        (DType::F8E4M3FN, DType::U8),
    ] {
        let mut b = ProgramBuilder::new();
        let x = b.input("x", from, &[3, 5]);
        let y = b
            .push_library("bitcast", Op::BitCast(to), &[x], None)
            .unwrap();
        b.output("y", y);
        let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 6).unwrap();
        assert_eq!(err, 0.0, "{from} -> {to}");
    }
}

/// Quantization's `x / scale → round → + zero → clamp → cast` into 8- and 16-bit integers
/// (f32 lanes), and bare casts of values far outside the target's range (wrapping through
/// i64 as the interpreter does, also past ±2^31 and ±2^63), equal the interpreter exactly.
#[test]
fn casts_to_small_integers_match_exactly() {
    for (dt, lo, hi) in [
        (DType::U8, 0.0, 255.0),
        (DType::I8, -128.0, 127.0),
        (DType::U16, 0.0, 65535.0),
        (DType::I16, -32768.0, 32767.0),
    ] {
        for scale in [0.01, 1e-3, 1e-12, 1e-20] {
            let mut b = ProgramBuilder::new();
            let x = b.input("x", F, &[7, 301]);
            let q = kernel(
                "quantize",
                &[7, 301],
                vec![inp(x, F, contiguous_view(&[7, 301]))],
                vec![
                    n(Expr::Load(0), F),
                    n(Expr::Const(scale), F),
                    n(Expr::Binary(BinaryOp::Div, 0, 1), F),
                    n(Expr::Unary(UnaryOp::Round, 2), F),
                    n(Expr::Const(3.0), F),
                    n(Expr::Binary(BinaryOp::Add, 3, 4), F),
                    n(Expr::Const(lo), F),
                    n(Expr::Binary(BinaryOp::Max, 5, 6), F),
                    n(Expr::Const(hi), F),
                    n(Expr::Binary(BinaryOp::Min, 7, 8), F),
                    n(Expr::Cast(9), dt),
                ],
            );
            let q = b.push_loop(q);
            b.output("q", q);
            // an unclamped cast, read back as f32 inside the kernel
            let w = kernel(
                "wrap",
                &[7, 301],
                vec![inp(x, F, contiguous_view(&[7, 301]))],
                vec![
                    n(Expr::Load(0), F),
                    n(Expr::Const(scale), F),
                    n(Expr::Binary(BinaryOp::Div, 0, 1), F),
                    n(Expr::Cast(2), dt),
                    n(Expr::Cast(3), F),
                    n(Expr::Const(0.5), F),
                    n(Expr::Binary(BinaryOp::Add, 4, 5), F),
                ],
            );
            let w = b.push_loop(w);
            b.output("w", w);
            let err = compare_with_reference(&b.finish(), &CpuOptions::default(), 11).unwrap();
            assert_eq!(err, 0.0, "{dt}, scale {scale}");
        }
    }
}
