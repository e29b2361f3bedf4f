//! The builder decomposition rules write with. Every op a rule emits is legalized in turn:
//! kept when the backend claims it, decomposed again when a rule exists, and otherwise the
//! whole decomposition is abandoned and rolled back.
//!
//! Emitted nodes are staged after the graph's last node and only committed by the caller
//! when the whole decomposition succeeds, so a failed attempt leaves no trace.

use super::rules;
use super::Caps;
use rlx_ir::{infer, BinaryOp, DType, Graph, Node, NodeId, Op, ReduceOp, Tensor, TensorType};

/// How deep decompositions may nest (a rule's pieces decomposed, and so on).
const MAX_DEPTH: usize = 8;

/// Why a decomposition did not work out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// the op has no decomposition rule
    NoRule,
    /// a piece neither runs natively nor decomposes
    Missing {
        /// the piece's op name
        op: &'static str,
        /// the piece's input types, formatted
        inputs: String,
    },
    /// the rule needs something the graph does not give (e.g. static shapes)
    Needs(String),
}

/// Staged nodes plus the capability function they are checked against.
pub(crate) struct Emitter<'a> {
    graph: &'a Graph,
    caps: Caps<'a>,
    prefix: &'a str,
    pending: Vec<Node>,
    used: Vec<&'static str>,
    depth: usize,
}

impl<'a> Emitter<'a> {
    /// Stages nodes after the end of `graph`; pieces are named `prefix/op_k`.
    pub fn new(graph: &'a Graph, caps: Caps<'a>, prefix: &'a str) -> Self {
        Emitter {
            graph,
            caps,
            prefix,
            pending: Vec::new(),
            used: Vec::new(),
            depth: 0,
        }
    }

    /// Decomposes one node of the original graph (which the backend does not claim).
    pub fn decompose_root(
        &mut self,
        op: &Op,
        inputs: &[NodeId],
        ty: &TensorType,
    ) -> Result<NodeId, Failure> {
        self.depth = 1;
        let id = rules::decompose(self, op, inputs, ty)?;
        if self.ty(id) != ty {
            return Err(Failure::Needs(format!(
                "the `{}` rule built {} instead of {ty} (a bug in the rule)",
                op.name(),
                self.ty(id)
            )));
        }
        Ok(id)
    }

    /// The staged nodes, in order, and the native primitives they use (sorted).
    pub fn finish(self) -> (Vec<Node>, Vec<&'static str>) {
        let mut used = self.used;
        used.sort();
        used.dedup();
        (self.pending, used)
    }

    /// The type of a graph node or a staged node.
    pub fn ty(&self, id: NodeId) -> &TensorType {
        let base = self.graph.nodes().len();
        if id.0 < base {
            self.graph.ty(id)
        } else {
            &self.pending[id.0 - base].ty
        }
    }

    /// Emits `op`, legalized: native if claimed, else decomposed by its rule.
    pub fn emit(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId, Failure> {
        let tys: Vec<TensorType> = inputs.iter().map(|&i| self.ty(i).clone()).collect();
        let refs: Vec<&TensorType> = tys.iter().collect();
        let ty = infer(&op, &refs).map_err(|m| {
            Failure::Needs(format!("a `{}` piece does not type-check: {m}", op.name()))
        })?;
        if (self.caps)(&op, &refs) {
            self.used.push(op.name());
            return Ok(self.stage(op, inputs, ty));
        }
        let missing = || Failure::Missing {
            op: op.name(),
            inputs: fmt_types(&tys),
        };
        if self.depth >= MAX_DEPTH {
            return Err(missing());
        }
        let mark = self.mark();
        self.depth += 1;
        let result = rules::decompose(self, &op, inputs, &ty);
        self.depth -= 1;
        match result {
            Ok(id) if self.ty(id) == &ty => Ok(id),
            other => {
                self.rewind(mark);
                match other {
                    Err(Failure::NoRule) | Ok(_) => Err(missing()),
                    Err(f) => Err(f),
                }
            }
        }
    }

    /// Where the emitted pieces stand now, for [`Emitter::rewind`].
    pub fn mark(&self) -> (usize, usize) {
        (self.pending.len(), self.used.len())
    }

    /// Forgets everything emitted since `mark` (an alternative that did not legalize).
    pub fn rewind(&mut self, mark: (usize, usize)) {
        self.pending.truncate(mark.0);
        self.used.truncate(mark.1);
    }

    /// Runs `f`; when it fails, forgets everything it emitted and returns `None`. For
    /// optional refinements of a rule.
    pub fn attempt(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<NodeId, Failure>,
    ) -> Option<NodeId> {
        let mark = self.mark();
        let result = f(self).ok();
        if result.is_none() {
            self.rewind(mark);
        }
        result
    }

    /// A constant (constants are leaves: always allowed).
    pub fn constant(&mut self, t: Tensor) -> NodeId {
        let ty = TensorType::new(t.dtype(), t.shape());
        self.stage(Op::Constant(std::sync::Arc::new(t)), &[], ty)
    }

    /// A rank-0 constant.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> NodeId {
        self.constant(Tensor::scalar(dtype, v))
    }

    /// Unary op.
    pub fn unary(&mut self, u: rlx_ir::UnaryOp, x: NodeId) -> Result<NodeId, Failure> {
        self.emit(Op::Unary(u), &[x])
    }

    /// Binary op.
    pub fn binary(&mut self, b: BinaryOp, x: NodeId, y: NodeId) -> Result<NodeId, Failure> {
        self.emit(Op::Binary(b), &[x, y])
    }

    /// Binary op with a scalar constant of `x`'s dtype on the right.
    pub fn binary_scalar(&mut self, b: BinaryOp, x: NodeId, v: f64) -> Result<NodeId, Failure> {
        let c = self.scalar(self.ty(x).dtype, v);
        self.binary(b, x, c)
    }

    /// Reduction over sorted axes.
    pub fn reduce(
        &mut self,
        op: ReduceOp,
        x: NodeId,
        axes: Vec<usize>,
        keepdims: bool,
    ) -> Result<NodeId, Failure> {
        self.emit(Op::Reduce { op, axes, keepdims }, &[x])
    }

    fn stage(&mut self, op: Op, inputs: &[NodeId], ty: TensorType) -> NodeId {
        let id = NodeId(self.graph.nodes().len() + self.pending.len());
        let name = format!("{}/{}_{}", self.prefix, op.name(), self.pending.len());
        self.pending.push(Node {
            op,
            inputs: inputs.to_vec(),
            ty,
            name,
        });
        id
    }
}

fn fmt_types(tys: &[TensorType]) -> String {
    tys.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Composite expansions (`rlx_ir::composite`) write their pieces through the emitter, so
/// each piece is legalized in turn like a rule's.
impl rlx_ir::composite::Expand for Emitter<'_> {
    type Value = NodeId;
    type Error = Failure;

    fn unary(&mut self, op: rlx_ir::UnaryOp, x: NodeId) -> Result<NodeId, Failure> {
        Emitter::unary(self, op, x)
    }

    fn binary(&mut self, op: BinaryOp, x: NodeId, y: NodeId) -> Result<NodeId, Failure> {
        Emitter::binary(self, op, x, y)
    }

    fn binary_scalar(&mut self, op: BinaryOp, x: NodeId, v: f64) -> Result<NodeId, Failure> {
        Emitter::binary_scalar(self, op, x, v)
    }
}
