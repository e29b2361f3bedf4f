//! Random graphs for differential testing, shared by every backend's suite: chains of
//! elementwise ops with broadcasting and size-1 dims, reductions, softmax, matmul, layout
//! ops, norms, convolution and pooling over random static shapes, with random non-zero
//! inputs and weights. Domains are kept safe (log/sqrt see positive values, exp sees
//! tanh-squashed ones) so every backend can be judged by relative error.

use rlx_ir::{
    BinaryOp, Conv2dParams, DType, Graph, NodeId, Pool2dParams, PoolKind, ReduceOp, Shape,
    SplitMix64, Tensor, UnaryOp,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A random graph with its run inputs, weights and the op names it used.
pub struct RandomGraph {
    /// the graph (outputs `out`, and `mid` when the graph is deep enough)
    pub graph: Graph,
    /// run inputs by name
    pub inputs: HashMap<String, Tensor>,
    /// weights by name
    pub params: HashMap<String, Arc<Tensor>>,
    /// op names in the order they were added, for failure messages
    pub ops: Vec<&'static str>,
}

/// The seeds a differential suite runs: `RLX_DIFF_GRAPHS` graphs (default 200) starting at
/// `RLX_DIFF_SEED` (default 0), so a failing seed reruns alone.
pub fn seeds_from_env() -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let first = var("RLX_DIFF_SEED", 0);
    first..first + var("RLX_DIFF_GRAPHS", 200)
}

/// The random graph for `seed` (deterministic).
pub fn random_graph(seed: u64) -> RandomGraph {
    let mut gen = Gen::new(seed);
    let s = gen.shape();
    gen.leaf(&s);
    let steps = 2 + gen.pick(7);
    for _ in 0..steps {
        gen.step();
    }
    gen.finish()
}

struct Gen {
    rng: SplitMix64,
    g: Graph,
    /// f32 values available as operands, with their static shapes.
    pool: Vec<(NodeId, Vec<usize>)>,
    inputs: HashMap<String, Tensor>,
    params: HashMap<String, Arc<Tensor>>,
    ops: Vec<&'static str>,
}

impl Gen {
    fn finish(mut self) -> RandomGraph {
        let (last, _) = self.pool[self.pool.len() - 1].clone();
        self.g.output("out", last);
        if self.pool.len() > 3 {
            let (other, _) = self.pool[self.pool.len() / 2].clone();
            if other != last {
                self.g.output("mid", other);
            }
        }
        RandomGraph {
            graph: self.g,
            inputs: self.inputs,
            params: self.params,
            ops: self.ops,
        }
    }

    fn new(seed: u64) -> Gen {
        Gen {
            rng: SplitMix64(seed),
            g: Graph::new(),
            pool: Vec::new(),
            inputs: HashMap::new(),
            params: HashMap::new(),
            ops: Vec::new(),
        }
    }

    fn pick(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    fn shape(&mut self) -> Vec<usize> {
        let rank = 1 + self.pick(4);
        (0..rank)
            .map(|_| [1, 2, 3, 4, 5, 7][self.pick(6)])
            .collect()
    }

    /// A shape that broadcasts against `s`: some dims become 1, some leading dims drop.
    fn broadcastable(&mut self, s: &[usize]) -> Vec<usize> {
        let drop = self.pick(s.len().min(2) + 1).min(s.len() - 1);
        s[drop..]
            .iter()
            .map(|&d| if self.pick(3) == 0 { 1 } else { d })
            .collect()
    }

    fn leaf(&mut self, shape: &[usize]) -> NodeId {
        let n = self.inputs.len() + self.params.len();
        let t = Tensor::random(DType::F32, shape, self.rng.next_u64());
        let id = if self.pick(3) == 0 {
            let name = format!("p{n}");
            let id = self.g.param(&name, DType::F32, Shape::of(shape));
            self.params.insert(name, Arc::new(t));
            id
        } else {
            let name = format!("x{n}");
            let id = self.g.input(&name, DType::F32, Shape::of(shape));
            self.inputs.insert(name, t);
            id
        };
        self.pool.push((id, shape.to_vec()));
        id
    }

    fn operand(&mut self) -> (NodeId, Vec<usize>) {
        let n = self.pool.len();
        // Prefer recent values so graphs grow deep rather than wide.
        let i = n - 1 - self.pick(n.min(3));
        self.pool[i].clone()
    }

    fn push(&mut self, id: NodeId) {
        let Some(shape) = self.g.ty(id).shape.as_static() else {
            return;
        };
        self.pool.push((id, shape));
    }

    fn positive(&mut self, x: NodeId) -> NodeId {
        let a = self.g.unary(UnaryOp::Abs, x).unwrap();
        let half = self.g.scalar(DType::F32, 0.5);
        self.g.add(a, half).unwrap()
    }

    fn step(&mut self) {
        let (mut x, mut xs) = self.operand();
        if xs.is_empty() {
            x = self.g.reshape(x, Shape::of(&[1])).unwrap();
            xs = vec![1];
        }
        let choice = self.pick(16);
        let r = match choice {
            0..=3 => {
                let u = [
                    UnaryOp::Neg,
                    UnaryOp::Abs,
                    UnaryOp::Tanh,
                    UnaryOp::Sigmoid,
                    UnaryOp::Relu,
                    UnaryOp::GELU,
                    UnaryOp::GELU_TANH,
                    UnaryOp::SILU,
                    UnaryOp::Erf,
                    UnaryOp::Sin,
                    UnaryOp::Cos,
                    UnaryOp::Exp,
                    UnaryOp::Log,
                    UnaryOp::Sqrt,
                    UnaryOp::Rsqrt,
                    UnaryOp::Reciprocal,
                ][self.pick(16)];
                self.ops.push(u.name());
                let arg = match u {
                    UnaryOp::Exp => self.g.unary(UnaryOp::Tanh, x).unwrap(),
                    UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => {
                        self.positive(x)
                    }
                    _ => x,
                };
                self.g.unary(u, arg)
            }
            4..=7 => {
                let b = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Max,
                    BinaryOp::Min,
                    BinaryOp::Pow,
                ][self.pick(7)];
                self.ops.push(b.name());
                let ys = self.broadcastable(&xs);
                let y = if self.pick(2) == 0 {
                    self.leaf(&ys)
                } else {
                    self.operand().0
                };
                let (lhs, rhs) = if self.pick(2) == 0 { (x, y) } else { (y, x) };
                match b {
                    BinaryOp::Div => {
                        let d = self.positive(rhs);
                        self.g.div(lhs, d)
                    }
                    BinaryOp::Pow => {
                        let base = self.positive(lhs);
                        let e = self.g.unary(UnaryOp::Tanh, rhs).unwrap();
                        self.g.binary(b, base, e)
                    }
                    _ => self.g.binary(b, lhs, rhs),
                }
            }
            8 => {
                self.ops.push("where");
                let ys = self.broadcastable(&xs);
                let y = self.leaf(&ys);
                let c = self.g.binary(BinaryOp::Gt, x, y).unwrap();
                let n = self.g.unary(UnaryOp::Neg, y).unwrap();
                self.g.where_(c, x, n)
            }
            9 => {
                let op = ReduceOp::ALL[self.pick(5)];
                self.ops.push(op.name());
                let axes: Vec<i64> = (0..xs.len() as i64).filter(|_| self.pick(2) == 0).collect();
                let axes = if axes.is_empty() { vec![-1] } else { axes };
                let keep = self.pick(2) == 0;
                self.g.reduce(op, x, &axes, keep)
            }
            10 => {
                self.ops.push("softmax");
                let axis = -1 - self.pick(xs.len()) as i64;
                self.g.softmax(x, axis)
            }
            11 => {
                self.ops.push("matmul");
                let m = [1, 3, 4][self.pick(3)];
                let k = *xs.last().unwrap();
                let ws = vec![k, m];
                let w = self.leaf(&ws);
                if xs.len() == 1 {
                    let x2 = self.g.reshape(x, Shape::of(&[1, k])).unwrap();
                    self.g.matmul(x2, w)
                } else {
                    self.g.matmul(x, w)
                }
            }
            12 => {
                self.ops.push("transpose");
                let mut perm: Vec<usize> = (0..xs.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.pick(i + 1);
                    perm.swap(i, j);
                }
                self.g.transpose(x, &perm)
            }
            13 => {
                let which = self.pick(3);
                if which == 0 {
                    self.ops.push("reshape");
                    let n: usize = xs.iter().product();
                    self.g.reshape(x, Shape::of(&[n]))
                } else if which == 1 {
                    self.ops.push("slice");
                    let axis = self.pick(xs.len());
                    let d = xs[axis] as i64;
                    let step = [1, 2, -1][self.pick(3)];
                    let (s, e) = if step > 0 {
                        (self.pick(d as usize) as i64, d)
                    } else {
                        (d - 1, -d - 1)
                    };
                    self.g.slice(x, axis, s, e, step)
                } else {
                    self.ops.push("concat");
                    let axis = self.pick(xs.len());
                    let mut ys = xs.clone();
                    ys[axis] = 1 + self.pick(3);
                    let y = self.leaf(&ys);
                    self.g.concat(&[x, y], axis)
                }
            }
            14 => {
                self.ops.push("layer_norm");
                let d = *xs.last().unwrap();
                let s = self.leaf(&[d]);
                let b = self.leaf(&[d]);
                if self.pick(2) == 0 {
                    self.g.layer_norm(x, s, b, 1e-5)
                } else {
                    self.g.rms_norm(x, s, 1e-5)
                }
            }
            _ => {
                // Convolution or pooling on a fresh NCHW input.
                let c = 1 + self.pick(3);
                let shape = [1 + self.pick(2), c, 3 + self.pick(4), 3 + self.pick(4)];
                let img = self.leaf(&shape);
                if self.pick(2) == 0 {
                    self.ops.push("conv2d");
                    let groups = if c > 1 && self.pick(2) == 0 { c } else { 1 };
                    let o = groups * (1 + self.pick(2));
                    let k = 1 + self.pick(3);
                    let w = self.leaf(&[o, c / groups, k, k]);
                    let b = self.leaf(&[o]);
                    let p = Conv2dParams {
                        stride: [1 + self.pick(2), 1 + self.pick(2)],
                        pads: [self.pick(2), self.pick(2), self.pick(2), self.pick(2)],
                        dilation: [1, 1],
                        groups,
                    };
                    self.g.conv2d(img, w, Some(b), p)
                } else {
                    self.ops.push("pool2d");
                    let p = Pool2dParams {
                        kind: if self.pick(2) == 0 {
                            PoolKind::Max
                        } else {
                            PoolKind::Avg
                        },
                        kernel: [2, 2],
                        stride: [1 + self.pick(2), 2],
                        pads: [self.pick(2), 0, 0, self.pick(2)],
                        dilation: [1, 1],
                        count_include_pad: self.pick(2) == 0,
                        ceil_mode: self.pick(2) == 0,
                    };
                    self.g.pool2d(img, p)
                }
            }
        };
        if let Ok(id) = r {
            self.push(id);
        }
    }
}

/// The graphs every backend's arena-plan snapshot covers (`src/fast/arena_tests.rs` in
/// `rlx-cpu`, `tests/arena_plans.rs` in `rlx-cuda` and `rlx-wgpu`, each against its crate's
/// `tests/snapshots/arena_plans.txt`): random graphs of seeds 0 to 39, a two-layer
/// encoder in f32 and f16 (merged q/k/v projections, head-split attention) and BERT's
/// head-split attention alone, by name.
pub fn plan_corpus() -> Vec<(String, Graph)> {
    let mut corpus: Vec<(String, Graph)> = (0..40)
        .map(|seed| (format!("random {seed}"), random_graph(seed).graph))
        .collect();
    let shape = rlx_ir::sample::EncoderShape {
        hidden: 64,
        layers: 2,
        heads: 4,
        ffn: 128,
        seq: 16,
    };
    for dtype in [DType::F32, DType::F16] {
        let model = rlx_ir::sample::encoder(shape, 2, dtype);
        corpus.push((format!("encoder {dtype}"), model.graph));
    }
    let (batch, seq, heads, dim) = (2, 16, 4, 16);
    let mut g = Graph::new();
    let qkv = g.input("qkv", DType::F32, Shape::of(&[batch, seq, 3 * heads * dim]));
    let y = rlx_ir::sample::head_split_attention(&mut g, qkv, batch, seq, heads, dim, None, false)
        .expect("head-split shapes");
    g.output("out", y);
    corpus.push(("head-split attention".into(), g));
    corpus
}
