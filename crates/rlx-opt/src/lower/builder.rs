//! Builds the body of one loop kernel: walks from the kernel's root node down through
//! inline elementwise nodes and layout views to buffer loads, composing index maps on the
//! way, and emits one scalar expression per (node, index map) pair.

use super::index_map::IndexMap;
use super::plan::{kind, Role};
use super::Lowering;
use rlx_ir::kernel::{BufferId, Expr, ExprId, ExprNode, KernelInput, View};
use rlx_ir::{DType, NodeId, Op};
use std::collections::HashMap;

/// What a fused reduction or library op looks like from inside the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absorbed {
    /// the finished reduction value ([`Expr::Reduced`])
    Reduce(NodeId),
    /// the library result, read as kernel input 0
    Library(NodeId),
}

/// The inputs and expression DAG of a loop kernel under construction.
pub(crate) struct BodyBuilder<'l, 'g> {
    low: &'l mut Lowering<'g>,
    root: NodeId,
    absorbed: Option<Absorbed>,
    n_loop: usize,
    pub inputs: Vec<KernelInput>,
    pub body: Vec<ExprNode>,
    memo: HashMap<(NodeId, IndexMap), ExprId>,
    loads: HashMap<(BufferId, View), ExprId>,
}

impl<'l, 'g> BodyBuilder<'l, 'g> {
    /// A builder for the kernel computing `root` over `n_loop` loop dims.
    pub fn new(
        low: &'l mut Lowering<'g>,
        root: NodeId,
        absorbed: Option<Absorbed>,
        n_loop: usize,
    ) -> Self {
        BodyBuilder {
            low,
            root,
            absorbed,
            n_loop,
            inputs: Vec::new(),
            body: Vec::new(),
            memo: HashMap::new(),
            loads: HashMap::new(),
        }
    }

    /// Adds an input without a load (a library epilogue's input 0).
    pub fn add_input(&mut self, input: KernelInput) -> usize {
        self.inputs.push(input);
        self.inputs.len() - 1
    }

    /// Appends an expression.
    pub fn push(&mut self, expr: Expr, dtype: DType) -> ExprId {
        self.body.push(ExprNode { expr, dtype });
        self.body.len() - 1
    }

    /// The expression for node `id` at the index `map` gives.
    pub fn build(&mut self, id: NodeId, map: &IndexMap) -> ExprId {
        let key = (id, map.clone());
        if let Some(&e) = self.memo.get(&key) {
            return e;
        }
        let e = self.build_uncached(id, map);
        self.memo.insert(key, e);
        e
    }

    fn build_uncached(&mut self, id: NodeId, map: &IndexMap) -> ExprId {
        let g = self.low.graph;
        let node = g.node(id);
        let dtype = node.ty.dtype;
        match self.absorbed {
            Some(Absorbed::Reduce(r)) if r == id => return self.push(Expr::Reduced, dtype),
            Some(Absorbed::Library(l)) if l == id => return self.push(Expr::Load(0), dtype),
            _ => {}
        }
        if let Op::Constant(t) = &node.op {
            if t.numel() == 1 {
                return self.push(Expr::Const(t.get_f64(0)), dtype);
            }
        }
        let computed_here = id == self.root || self.low.plan.roles[id.0] == Role::Inline;
        let shape = self.low.dims(id);
        if !computed_here {
            let buffer = self.low.buffer_for(id);
            return self.load(buffer, dtype, map, &shape);
        }
        match &node.op {
            Op::Unary(u) => {
                let a = self.operand(id, 0, map);
                self.push(Expr::Unary(*u, a), dtype)
            }
            Op::Binary(b) => {
                let x = self.operand(id, 0, map);
                let y = self.operand(id, 1, map);
                self.push(Expr::Binary(*b, x, y), dtype)
            }
            Op::Where => {
                let c = self.operand(id, 0, map);
                let x = self.operand(id, 1, map);
                let y = self.operand(id, 2, map);
                self.push(Expr::Where(c, x, y), dtype)
            }
            Op::Cast(_) => {
                let a = self.operand(id, 0, map);
                self.push(Expr::Cast(a), dtype)
            }
            Op::Transpose(perm) => self.build(node.inputs[0], &map.through_transpose(perm)),
            Op::Expand(_) => self.operand(id, 0, map),
            Op::Slice {
                axes,
                starts,
                ends,
                steps,
            } => {
                let src = node.inputs[0];
                let m = map.through_slice(&self.low.dims(src), axes, starts, ends, steps);
                self.build(src, &m)
            }
            Op::Reshape(_) => {
                let src = node.inputs[0];
                if let Some(buffer) = self.low.existing_buffer(src) {
                    // The source is row-major, so the reshaped node is too: read it with
                    // its own contiguous strides.
                    return self.load(buffer, dtype, map, &shape);
                }
                let m = map
                    .through_reshape(&shape, &self.low.dims(src))
                    .expect("the plan puts the source of a merging reshape in a buffer");
                self.build(src, &m)
            }
            op => unreachable!(
                "{} ({:?} kind) is never computed inside a loop kernel",
                op.name(),
                kind(op)
            ),
        }
    }

    /// Operand `k` of elementwise or expand node `id`, broadcast to the node's shape.
    fn operand(&mut self, id: NodeId, k: usize, map: &IndexMap) -> ExprId {
        let src = self.low.graph.node(id).inputs[k];
        let m = map.broadcast_to(&self.low.dims(id), &self.low.dims(src));
        self.build(src, &m)
    }

    /// A load of `buffer` (holding a row-major value of `shape`) through `map`.
    fn load(&mut self, buffer: BufferId, dtype: DType, map: &IndexMap, shape: &[usize]) -> ExprId {
        let base = self.low.base_buffer(buffer);
        let view = map.view(shape);
        debug_assert_eq!(view.strides.len(), self.n_loop);
        let key = (base, view.clone());
        if let Some(&e) = self.loads.get(&key) {
            return e;
        }
        let k = self.add_input(KernelInput {
            buffer: base,
            dtype,
            view,
        });
        let e = self.push(Expr::Load(k), dtype);
        self.loads.insert(key, e);
        e
    }
}
