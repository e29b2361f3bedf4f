//! Random graphs for the differential suite: chains of elementwise ops with broadcasting,
//! reductions, softmax, matmul, transposes, slices, concat and norms over random shapes.

use rlx_ir::{BinaryOp, DType, Graph, NodeId, ReduceOp, Shape, SplitMix64, Tensor, UnaryOp};
use std::collections::HashMap;
use std::sync::Arc;

/// A random graph with inputs, weights and the ops it used.
pub struct RandomGraph {
    /// the graph
    pub graph: Graph,
    /// run inputs
    pub inputs: HashMap<String, Tensor>,
    /// weights
    pub params: HashMap<String, Arc<Tensor>>,
    /// op names, for messages
    pub ops: Vec<&'static str>,
}

struct Gen {
    rng: SplitMix64,
    r: RandomGraph,
    pool: Vec<(NodeId, Vec<usize>)>,
}

impl Gen {
    fn pick(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    fn leaf(&mut self, shape: &[usize]) -> NodeId {
        let n = self.r.inputs.len() + self.r.params.len();
        let t = Tensor::random(DType::F32, shape, self.rng.next_u64());
        let id = if self.pick(3) == 0 {
            let name = format!("p{n}");
            self.r.params.insert(name.clone(), Arc::new(t));
            self.r.graph.param(&name, DType::F32, Shape::of(shape))
        } else {
            let name = format!("x{n}");
            self.r.inputs.insert(name.clone(), t);
            self.r.graph.input(&name, DType::F32, Shape::of(shape))
        };
        self.pool.push((id, shape.to_vec()));
        id
    }

    fn operand(&mut self) -> (NodeId, Vec<usize>) {
        let n = self.pool.len();
        let i = n - 1 - self.pick(n.min(3));
        self.pool[i].clone()
    }

    fn positive(&mut self, x: NodeId) -> NodeId {
        let g = &mut self.r.graph;
        let a = g.unary(UnaryOp::Abs, x).unwrap();
        let half = g.scalar(DType::F32, 0.5);
        g.add(a, half).unwrap()
    }

    fn step(&mut self) {
        let (x, xs) = self.operand();
        let r = match self.pick(10) {
            0..=2 => {
                let u = [
                    UnaryOp::Neg,
                    UnaryOp::Tanh,
                    UnaryOp::Sigmoid,
                    UnaryOp::Relu,
                    UnaryOp::Gelu,
                    UnaryOp::Silu,
                    UnaryOp::Exp,
                    UnaryOp::Sqrt,
                ][self.pick(8)];
                self.r.ops.push(u.name());
                let arg = match u {
                    UnaryOp::Exp => self.r.graph.unary(UnaryOp::Tanh, x).unwrap(),
                    UnaryOp::Sqrt => self.positive(x),
                    _ => x,
                };
                self.r.graph.unary(u, arg)
            }
            3..=4 => {
                let b = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max][self.pick(4)];
                self.r.ops.push(b.name());
                let drop = self.pick(xs.len().min(2) + 1).min(xs.len() - 1);
                let ys: Vec<usize> = xs[drop..]
                    .iter()
                    .map(|&d| if self.pick(3) == 0 { 1 } else { d })
                    .collect();
                let y = self.leaf(&ys);
                self.r.graph.binary(b, x, y)
            }
            5 => {
                let op = ReduceOp::ALL[self.pick(5)];
                self.r.ops.push(op.name());
                let axes: Vec<i64> = (0..xs.len() as i64).filter(|_| self.pick(2) == 0).collect();
                let axes = if axes.is_empty() { vec![-1] } else { axes };
                let keep = self.pick(2) == 0;
                self.r.graph.reduce(op, x, &axes, keep)
            }
            6 => {
                self.r.ops.push("softmax");
                let axis = -1 - self.pick(xs.len()) as i64;
                self.r.graph.softmax(x, axis)
            }
            7 => {
                self.r.ops.push("matmul");
                let k = *xs.last().unwrap();
                let n = [1, 3, 4][self.pick(3)];
                let w = self.leaf(&[k, n]);
                let lhs = if xs.len() == 1 {
                    self.r.graph.reshape(x, Shape::of(&[1, k])).unwrap()
                } else {
                    x
                };
                self.r.graph.matmul(lhs, w)
            }
            8 => {
                self.r.ops.push("transpose");
                let mut perm: Vec<usize> = (0..xs.len()).collect();
                perm.reverse();
                self.r.graph.transpose(x, &perm)
            }
            _ => {
                self.r.ops.push("layer_norm");
                let d = *xs.last().unwrap();
                let s = self.leaf(&[d]);
                let b = self.leaf(&[d]);
                self.r.graph.layer_norm(x, s, b, 1e-5)
            }
        };
        if let Ok(id) = r {
            let shape = self.r.graph.ty(id).shape.as_static().expect("static");
            self.pool.push((id, shape));
        }
    }
}

/// The random graph for `seed`.
pub fn random_graph(seed: u64) -> RandomGraph {
    let mut g = Gen {
        rng: SplitMix64(seed),
        r: RandomGraph {
            graph: Graph::new(),
            inputs: HashMap::new(),
            params: HashMap::new(),
            ops: Vec::new(),
        },
        pool: Vec::new(),
    };
    let rank = 1 + g.pick(4);
    let shape: Vec<usize> = (0..rank).map(|_| [1, 2, 3, 5, 7, 33][g.pick(6)]).collect();
    g.leaf(&shape);
    for _ in 0..2 + g.pick(7) {
        g.step();
    }
    let (last, _) = *g.pool.last().unwrap();
    g.r.graph.output("out", last);
    g.r
}
