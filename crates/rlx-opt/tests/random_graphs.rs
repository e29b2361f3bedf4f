//! Property tests over random small graphs of elementwise, reduce and layout ops: the graph
//! passes, legalization and lowering never change values on the validation interpreter.

#[path = "../src/test_util.rs"]
#[allow(dead_code)]
mod test_util;

use proptest::prelude::*;
use rlx_ir::{
    broadcast_shapes, slice_range, BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, SplitMix64,
    Tensor, TensorType, UnaryOp,
};
use rlx_opt::{legalize, lower, lower_stats, optimize};
use test_util::{assert_close, cpu_eval, run, run_program};

struct Gen {
    rng: SplitMix64,
    g: Graph,
    pool: Vec<NodeId>,
}

impl Gen {
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.rng.below(xs.len())]
    }

    fn dims(&self, id: NodeId) -> Vec<usize> {
        self.g.ty(id).shape.as_static().unwrap()
    }

    /// A variant of `base` that broadcasts against it: some leading dims dropped, some set
    /// to 1.
    fn variant(&mut self, base: &[usize]) -> Vec<usize> {
        let drop = if self.rng.below(3) == 0 {
            self.rng.below(base.len() + 1)
        } else {
            0
        };
        base[drop..]
            .iter()
            .map(|&d| if self.rng.below(4) == 0 { 1 } else { d })
            .collect()
    }

    fn step(&mut self) -> Option<NodeId> {
        let a = self.pick(&self.pool.clone());
        let dims = self.dims(a);
        let g = &mut self.g;
        match self.rng.below(12) {
            0 | 1 => {
                let u = [
                    UnaryOp::Neg,
                    UnaryOp::Abs,
                    UnaryOp::Tanh,
                    UnaryOp::Sigmoid,
                    UnaryOp::Relu,
                    UnaryOp::Sin,
                    UnaryOp::Exp,
                    UnaryOp::GELU,
                    UnaryOp::SILU,
                ][self.rng.below(9)];
                g.unary(u, a).ok()
            }
            2..=4 => {
                let b = self.partner(a);
                let op = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Max,
                    BinaryOp::Min,
                ][self.rng.below(5)];
                self.g.binary(op, a, b).ok()
            }
            5 if !dims.is_empty() => {
                let mut axes: Vec<i64> = (0..dims.len() as i64)
                    .filter(|_| self.rng.below(2) == 0)
                    .collect();
                if axes.is_empty() {
                    axes.push(self.rng.below(dims.len()) as i64);
                }
                let op = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min]
                    [self.rng.below(4)];
                let keep = self.rng.below(2) == 0;
                self.g.reduce(op, a, &axes, keep).ok()
            }
            6 => {
                let mut perm: Vec<usize> = (0..dims.len()).collect();
                for i in (1..perm.len()).rev() {
                    perm.swap(i, self.rng.below(i + 1));
                }
                g.transpose(a, &perm).ok()
            }
            7 if !dims.is_empty() => {
                let axis = self.rng.below(dims.len());
                let d = dims[axis] as i64;
                let step = [1, 2, -1, -2][self.rng.below(4)];
                let start = self.rng.below(2 * d as usize + 3) as i64 - d - 1;
                let end = self.rng.below(2 * d as usize + 3) as i64 - d - 1;
                if slice_range(dims[axis], start, end, step).1 == 0 {
                    return None;
                }
                g.slice(a, axis, start, end, step).ok()
            }
            8 => {
                let mut to = dims.clone();
                match self.rng.below(3) {
                    0 => to = vec![dims.iter().product()],
                    1 => to.insert(self.rng.below(dims.len() + 1), 1),
                    _ => match dims.iter().position(|&d| d % 2 == 0) {
                        Some(i) => {
                            to[i] /= 2;
                            to.insert(i, 2);
                        }
                        None => return None,
                    },
                }
                g.reshape(a, Shape::of(&to)).ok()
            }
            10 if dims.len() >= 2 => {
                let k = *dims.last().unwrap();
                let n = 1 + self.rng.below(4);
                let name = format!("w{}", self.g.nodes().len());
                let w = self.g.param(&name, DType::F32, Shape::of(&[k, n]));
                self.g.matmul(a, w).ok()
            }
            11 if !dims.is_empty() => {
                let axis = self.rng.below(dims.len());
                match self.rng.below(3) {
                    0 => self.g.softmax(a, axis as i64).ok(),
                    1 => self.g.concat(&[a, a], axis).ok(),
                    _ => self.g.push(Op::LogSoftmax { axis }, &[a], None).ok(),
                }
            }
            _ => {
                if self.rng.below(2) == 0 {
                    let b = self.partner(a);
                    let c = self.g.binary(BinaryOp::Gt, a, b).ok()?;
                    self.g.where_(c, a, b).ok()
                } else {
                    let mut to: Vec<usize> = dims
                        .iter()
                        .map(|&d| if d == 1 { 2 + self.rng.below(2) } else { d })
                        .collect();
                    if self.rng.below(3) == 0 {
                        to.insert(0, 2);
                    }
                    self.g.push(Op::Expand(Shape::of(&to)), &[a], None).ok()
                }
            }
        }
    }

    /// Another pool node (or a fresh constant) whose shape broadcasts with `a`.
    fn partner(&mut self, a: NodeId) -> NodeId {
        let sa = self.g.ty(a).shape.clone();
        let fits: Vec<NodeId> = self
            .pool
            .iter()
            .copied()
            .filter(|&b| broadcast_shapes(&sa, &self.g.ty(b).shape).is_some())
            .collect();
        match self.rng.below(4) {
            0 => self.g.scalar(DType::F32, self.rng.next_f64() * 2.0 - 1.0),
            1 => {
                let dims = self.dims(a);
                let shape = self.variant(&dims);
                let seed = self.rng.next_u64();
                self.g.constant(Tensor::random(DType::F32, &shape, seed))
            }
            _ => self.pick(&fits),
        }
    }
}

/// A random graph of about `n_ops` ops over one to three broadcast-compatible inputs.
fn random_graph(seed: u64, n_ops: usize) -> Graph {
    let mut gen = Gen {
        rng: SplitMix64(seed),
        g: Graph::new(),
        pool: Vec::new(),
    };
    let rank = gen.rng.below(4);
    let base: Vec<usize> = (0..rank).map(|_| 1 + gen.rng.below(4)).collect();
    for i in 0..1 + gen.rng.below(3) {
        let shape = gen.variant(&base);
        let id = if i == 1 {
            gen.g.param(&format!("p{i}"), DType::F32, Shape::of(&shape))
        } else {
            gen.g.input(&format!("x{i}"), DType::F32, Shape::of(&shape))
        };
        gen.pool.push(id);
    }
    for _ in 0..n_ops {
        if let Some(id) = gen.step() {
            gen.pool.push(id);
        }
    }
    let last = *gen.pool.last().unwrap();
    gen.g.output("out", last);
    for k in 0..gen.rng.below(3) {
        let id = gen.pick(&gen.pool.clone());
        gen.g.output(&format!("extra{k}"), id);
    }
    gen.g
}

/// A backend without sub, neg, sigmoid, gelu, silu, tanh or expand: they get decomposed.
fn no_fancy_ops(op: &Op, _: &[&TensorType]) -> bool {
    !matches!(
        op,
        Op::Binary(BinaryOp::Sub)
            | Op::Unary(
                UnaryOp::Neg | UnaryOp::Sigmoid | UnaryOp::GELU | UnaryOp::SILU | UnaryOp::Relu
            )
            | Op::Expand(_)
    )
}

/// The case CI once failed on (1181dd9): a one-element output gelu(0.92) - 0.758 where the
/// decomposed GELU differs from the fused one by one f32 rounding of 0.75 (6e-8), which was
/// 2.8e-5 relative to the cancelled result. Judged against the scale of its inputs it passes.
#[test]
fn a_cancelling_output_is_judged_at_the_scale_of_its_inputs() {
    let (seed, n_ops) = (17_621_738_781_822_999_303, 13);
    let g = random_graph(seed, n_ops);
    let want = run(&g, seed);
    let o = optimize(&g, &cpu_eval).unwrap_or_else(|e| panic!("{e}\n{g}"));
    assert_close(&run(&o, seed), &want, 1e-6);
    let (l, _) = legalize(&o, "fake", &no_fancy_ops).unwrap_or_else(|e| panic!("{e}\n{o}"));
    let p = lower(&l).unwrap_or_else(|e| panic!("{e}\n{l}"));
    assert_close(&run_program(&p, &l, seed), &want, 1e-5);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn lowering_keeps_values(seed in any::<u64>(), n_ops in 1usize..14) {
        let g = random_graph(seed, n_ops);
        g.verify().unwrap();
        let want = run(&g, seed);
        let p = lower(&g).unwrap_or_else(|e| panic!("{e}\n{g}"));
        assert_close(&run_program(&p, &g, seed), &want, 1e-5);
        let stats = lower_stats(&p);
        prop_assert!(stats.kernels <= g.nodes().len());
    }

    #[test]
    fn passes_and_legalization_keep_values(seed in any::<u64>(), n_ops in 1usize..14) {
        let g = random_graph(seed, n_ops);
        let want = run(&g, seed);
        let o = optimize(&g, &cpu_eval).unwrap_or_else(|e| panic!("{e}\n{g}"));
        prop_assert_eq!(o.inputs().len(), g.inputs().len());
        assert_close(&run(&o, seed), &want, 1e-6);
        let (l, _) = legalize(&o, "fake", &no_fancy_ops).unwrap_or_else(|e| panic!("{e}\n{o}"));
        let p = lower(&l).unwrap_or_else(|e| panic!("{e}\n{l}"));
        assert_close(&run_program(&p, &l, seed), &want, 1e-5);
    }
}
