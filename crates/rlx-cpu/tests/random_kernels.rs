//! Random loop kernels (random shapes, strided, broadcast, transposed and backwards views,
//! reductions in every strategy) on the fast path against the interpreter. The expressions
//! use exactly rounded ops only, so any difference is an indexing or reduction bug rather
//! than the accuracy of a transcendental approximation (tested on its own).

use rlx_cpu::testing::{compare_with_reference, ProgramBuilder};
use rlx_cpu::CpuOptions;
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, KernelReduce, LoopKernel, View};
use rlx_ir::{BinaryOp, DType, ReduceOp, SplitMix64, UnaryOp};

/// Random strides over `dims`: row-major, reversed, partly broadcast, or small integers
/// (possibly negative).
fn strides(rng: &mut SplitMix64, dims: &[usize]) -> Vec<isize> {
    let row_major = |order: &mut dyn Iterator<Item = usize>| {
        let mut s = vec![0isize; dims.len()];
        let mut acc = 1isize;
        for d in order {
            s[d] = acc;
            acc *= dims[d] as isize;
        }
        s
    };
    match rng.below(4) {
        0 => row_major(&mut (0..dims.len()).rev()),
        1 => row_major(&mut (0..dims.len())),
        2 => {
            let mut s = row_major(&mut (0..dims.len()).rev());
            s.iter_mut().for_each(|x| {
                if rng.below(2) == 0 {
                    *x = 0
                }
            });
            s
        }
        _ => (0..dims.len()).map(|_| rng.below(7) as isize - 3).collect(),
    }
}

/// An input buffer just large enough for `strides` over `dims`, and its view.
fn input(
    b: &mut ProgramBuilder,
    name: &str,
    dt: DType,
    dims: &[usize],
    strides: Vec<isize>,
) -> KernelInput {
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&d, &s) in dims.iter().zip(&strides) {
        let span = (d as isize - 1) * s;
        if span < 0 {
            lo += span
        } else {
            hi += span
        }
    }
    let buffer = b.input(name, dt, &[(hi - lo + 1) as usize]);
    KernelInput {
        buffer,
        dtype: dt,
        view: View {
            offset: (-lo) as usize,
            strides,
        },
    }
}

/// Combines `a` and `b` with a random exactly rounded op.
fn combine(rng: &mut SplitMix64, body: &mut Vec<ExprNode>, dt: DType, a: usize, b: usize) -> usize {
    let n = |expr| ExprNode { expr, dtype: dt };
    let e = match rng.below(6) {
        0 => n(Expr::Binary(BinaryOp::Add, a, b)),
        1 => n(Expr::Binary(BinaryOp::Mul, a, b)),
        2 => n(Expr::Binary(BinaryOp::Max, a, b)),
        3 => n(Expr::Binary(BinaryOp::Min, a, b)),
        4 => {
            body.push(ExprNode {
                expr: Expr::Binary(BinaryOp::Gt, a, b),
                dtype: DType::Bool,
            });
            n(Expr::Where(body.len() - 1, b, a))
        }
        _ => {
            let u = [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Sign][rng.below(4)];
            body.push(n(Expr::Unary(u, a)));
            n(Expr::Binary(BinaryOp::Add, body.len() - 1, b))
        }
    };
    body.push(e);
    body.len() - 1
}

fn random_program(seed: u64, dt: DType) -> rlx_ir::kernel::KernelProgram {
    let mut rng = SplitMix64(seed);
    let mut b = ProgramBuilder::new();
    let shape: Vec<usize> = (0..rng.below(4))
        .map(|_| {
            let max = if rng.below(3) == 0 { 12 } else { 5 };
            1 + rng.below(max)
        })
        .collect();
    let reduce = rng.below(3) != 0;
    let reduce_shape: Vec<usize> = if reduce {
        (0..1 + rng.below(2))
            .map(|_| {
                let max = if rng.below(4) == 0 { 300 } else { 9 };
                1 + rng.below(max)
            })
            .collect()
    } else {
        vec![]
    };
    let mut dims = shape.clone();
    dims.extend(&reduce_shape);
    let mut inputs = Vec::new();
    let mut body = Vec::new();
    let n_pro = 1 + rng.below(3);
    for i in 0..n_pro {
        let s = strides(&mut rng, &dims);
        inputs.push(input(&mut b, &format!("p{i}"), dt, &dims, s));
        body.push(ExprNode {
            expr: Expr::Load(i),
            dtype: dt,
        });
    }
    let mut cur = 0;
    for i in 1..n_pro {
        cur = combine(&mut rng, &mut body, dt, cur, i);
    }
    let mut reduce_spec = None;
    if reduce {
        let ops: &[ReduceOp] = if dt == DType::I32 {
            &ReduceOp::ALL[..4]
        } else {
            &ReduceOp::ALL
        };
        let op = ops[rng.below(ops.len())];
        // a positive per-point value keeps sums and products well conditioned
        body.push(ExprNode {
            expr: Expr::Unary(UnaryOp::Abs, cur),
            dtype: dt,
        });
        body.push(ExprNode {
            expr: Expr::Const(1.0),
            dtype: dt,
        });
        body.push(ExprNode {
            expr: Expr::Binary(BinaryOp::Add, body.len() - 2, body.len() - 1),
            dtype: dt,
        });
        reduce_spec = Some(KernelReduce {
            op,
            value: body.len() - 1,
            dtype: dt,
        });
        body.push(ExprNode {
            expr: Expr::Reduced,
            dtype: dt,
        });
        cur = body.len() - 1;
    }
    for j in 0..rng.below(3) {
        let mut s = strides(&mut rng, &shape);
        s.extend(std::iter::repeat_n(0, reduce_shape.len()));
        let k = inputs.len();
        inputs.push(input(&mut b, &format!("e{j}"), dt, &dims, s));
        body.push(ExprNode {
            expr: Expr::Load(k),
            dtype: dt,
        });
        let last = body.len() - 1;
        cur = combine(&mut rng, &mut body, dt, cur, last);
    }
    let k = LoopKernel {
        name: format!("random{seed}"),
        shape,
        reduce_shape,
        inputs,
        result: cur,
        body,
        reduce: reduce_spec,
        output: 0,
    };
    let out = b.push_loop(k);
    b.output("out", out);
    b.finish()
}

#[test]
fn random_loop_kernels_match_the_interpreter() {
    for seed in 0..200u64 {
        for (dt, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-12), (DType::I32, 0.0)] {
            let p = random_program(seed, dt);
            let threads = Some(1 + (seed % 3) as usize);
            let err = compare_with_reference(
                &p,
                &CpuOptions {
                    threads,
                    ..Default::default()
                },
                seed,
            )
            .unwrap();
            assert!(err <= tol, "seed {seed} {dt}: rel l2 {err}\n{p}");
        }
    }
}
