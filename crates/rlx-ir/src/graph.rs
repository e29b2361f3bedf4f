//! The graph: nodes in topological order, each with an op, inputs and an inferred type.
//! Builder methods infer types as nodes are added, so a graph built through them is typed.

use crate::infer::infer;
use crate::op::{AttnMask, BinaryOp, Conv2dParams, Op, Pool2dParams, ReduceOp, UnaryOp};
use crate::{DType, IrError, Shape, Tensor};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

/// Index of a node in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The dtype and shape of a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// element type
    pub dtype: DType,
    /// shape, possibly symbolic
    pub shape: Shape,
}

impl TensorType {
    /// A type from dtype and shape.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// One node: an op applied to earlier nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// what it computes
    pub op: Op,
    /// operands, all earlier in the graph
    pub inputs: Vec<NodeId>,
    /// result type
    pub ty: TensorType,
    /// a name for errors and dumps (from the model file when imported)
    pub name: String,
}

/// A dataflow graph with named outputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<(String, NodeId)>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// All nodes in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// Mutable access to one node's name.
    pub fn set_name(&mut self, id: NodeId, name: impl Into<String>) {
        self.nodes[id.0].name = name.into();
    }

    /// The type of a node's value.
    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.nodes[id.0].ty
    }

    /// Named outputs in declaration order.
    pub fn outputs(&self) -> &[(String, NodeId)] {
        &self.outputs
    }

    /// Run-time inputs: name and node, in declaration order.
    pub fn inputs(&self) -> Vec<(String, NodeId)> {
        self.leaves(|op| match op {
            Op::Input { name } => Some(name),
            _ => None,
        })
    }

    /// Params (weights): name and node, in declaration order.
    pub fn params(&self) -> Vec<(String, NodeId)> {
        self.leaves(|op| match op {
            Op::Param { name } => Some(name),
            _ => None,
        })
    }

    fn leaves(&self, f: impl Fn(&Op) -> Option<&String>) -> Vec<(String, NodeId)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| f(&n.op).map(|name| (name.clone(), NodeId(i))))
            .collect()
    }

    /// Adds a node with an explicit type and no checks. Importers and passes that build
    /// nodes wholesale use it; [`Graph::verify`] then checks the result.
    pub fn push_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() - 1)
    }

    /// Adds a node, inferring its type from its inputs.
    ///
    /// # Errors
    /// An input that does not exist yet, or an inference failure naming the node.
    pub fn push(
        &mut self,
        op: Op,
        inputs: &[NodeId],
        name: Option<&str>,
    ) -> Result<NodeId, IrError> {
        let id = self.nodes.len();
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}_{id}", op.name()));
        if let Some(bad) = inputs.iter().find(|i| i.0 >= id) {
            return Err(IrError::BadReference {
                node: name,
                op: op.name(),
                input: bad.0,
            });
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|i| &self.nodes[i.0].ty).collect();
        let ty = infer(&op, &tys).map_err(|message| IrError::Infer {
            node: name.clone(),
            op: op.name(),
            inputs: fmt_types(&tys),
            message,
        })?;
        Ok(self.push_node(Node {
            op,
            inputs: inputs.to_vec(),
            ty,
            name,
        }))
    }

    /// Declares a run-time input.
    pub fn input(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> NodeId {
        self.push_node(Node {
            op: Op::Input { name: name.into() },
            inputs: vec![],
            ty: TensorType::new(dtype, shape),
            name: name.into(),
        })
    }

    /// Declares a weight, bound by name.
    pub fn param(&mut self, name: &str, dtype: DType, shape: impl Into<Shape>) -> NodeId {
        self.push_node(Node {
            op: Op::Param { name: name.into() },
            inputs: vec![],
            ty: TensorType::new(dtype, shape),
            name: name.into(),
        })
    }

    /// Adds a constant.
    pub fn constant(&mut self, t: Tensor) -> NodeId {
        let ty = TensorType::new(t.dtype(), Shape::of(t.shape()));
        let id = self.nodes.len();
        self.push_node(Node {
            op: Op::Constant(Arc::new(t)),
            inputs: vec![],
            ty,
            name: format!("constant_{id}"),
        })
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, value: f64) -> NodeId {
        self.constant(Tensor::scalar(dtype, value))
    }

    /// Marks a node as a named output.
    pub fn output(&mut self, name: &str, id: NodeId) {
        self.outputs.push((name.to_string(), id));
    }

    /// Removes all outputs (passes rebuilding a graph use it).
    pub fn clear_outputs(&mut self) {
        self.outputs.clear();
    }

    /// Elementwise unary op.
    pub fn unary(&mut self, op: UnaryOp, x: NodeId) -> Result<NodeId, IrError> {
        self.push(Op::Unary(op), &[x], None)
    }

    /// Elementwise binary op with broadcasting.
    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.push(Op::Binary(op), &[a, b], None)
    }

    /// a + b
    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// a - b
    pub fn sub(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.binary(BinaryOp::Sub, a, b)
    }

    /// a * b
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// a / b
    pub fn div(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// max(x, 0)
    pub fn relu(&mut self, x: NodeId) -> Result<NodeId, IrError> {
        self.unary(UnaryOp::Relu, x)
    }

    /// `where(cond, a, b)`
    pub fn where_(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.push(Op::Where, &[cond, a, b], None)
    }

    /// Converts to `dtype`.
    pub fn cast(&mut self, x: NodeId, dtype: DType) -> Result<NodeId, IrError> {
        self.push(Op::Cast(dtype), &[x], None)
    }

    /// Reduction over axes (negative axes count from the end).
    pub fn reduce(
        &mut self,
        op: ReduceOp,
        x: NodeId,
        axes: &[i64],
        keepdims: bool,
    ) -> Result<NodeId, IrError> {
        let axes = self.norm_axes(x, axes, op.name())?;
        self.push(Op::Reduce { op, axes, keepdims }, &[x], None)
    }

    /// Softmax along an axis.
    pub fn softmax(&mut self, x: NodeId, axis: i64) -> Result<NodeId, IrError> {
        let axis = self.norm_axes(x, &[axis], "softmax")?[0];
        self.push(Op::Softmax { axis }, &[x], None)
    }

    /// Layer norm over the last dim with scale and bias.
    pub fn layer_norm(
        &mut self,
        x: NodeId,
        scale: NodeId,
        bias: NodeId,
        eps: f64,
    ) -> Result<NodeId, IrError> {
        let axis = self.ty(x).shape.rank().saturating_sub(1);
        self.push(Op::LayerNorm { axis, eps }, &[x, scale, bias], None)
    }

    /// RMS norm over the last dim with scale.
    pub fn rms_norm(&mut self, x: NodeId, scale: NodeId, eps: f64) -> Result<NodeId, IrError> {
        let axis = self.ty(x).shape.rank().saturating_sub(1);
        self.push(Op::RmsNorm { axis, eps }, &[x, scale], None)
    }

    /// Matrix product with batch broadcasting.
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, IrError> {
        self.push(Op::MatMul, &[a, b], None)
    }

    /// 2-D convolution with optional bias.
    pub fn conv2d(
        &mut self,
        x: NodeId,
        w: NodeId,
        bias: Option<NodeId>,
        p: Conv2dParams,
    ) -> Result<NodeId, IrError> {
        let mut ins = vec![x, w];
        ins.extend(bias);
        self.push(Op::Conv2d(p), &ins, None)
    }

    /// 2-D pooling.
    pub fn pool2d(&mut self, x: NodeId, p: Pool2dParams) -> Result<NodeId, IrError> {
        self.push(Op::Pool2d(p), &[x], None)
    }

    /// Reshape to a shape with the same element count.
    pub fn reshape(&mut self, x: NodeId, shape: impl Into<Shape>) -> Result<NodeId, IrError> {
        self.push(Op::Reshape(shape.into()), &[x], None)
    }

    /// Permute dims.
    pub fn transpose(&mut self, x: NodeId, perm: &[usize]) -> Result<NodeId, IrError> {
        self.push(Op::Transpose(perm.to_vec()), &[x], None)
    }

    /// Strided slice of one axis.
    pub fn slice(
        &mut self,
        x: NodeId,
        axis: usize,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<NodeId, IrError> {
        self.push(
            Op::Slice {
                axes: vec![axis],
                starts: vec![start],
                ends: vec![end],
                steps: vec![step],
            },
            &[x],
            None,
        )
    }

    /// Concatenate along an axis.
    pub fn concat(&mut self, xs: &[NodeId], axis: usize) -> Result<NodeId, IrError> {
        self.push(Op::Concat { axis }, xs, None)
    }

    /// Splits along an axis into pieces of the given sizes (one slice node each).
    pub fn split(
        &mut self,
        x: NodeId,
        axis: usize,
        sizes: &[usize],
    ) -> Result<Vec<NodeId>, IrError> {
        let mut start = 0i64;
        let mut out = Vec::with_capacity(sizes.len());
        for &s in sizes {
            out.push(self.slice(x, axis, start, start + s as i64, 1)?);
            start += s as i64;
        }
        Ok(out)
    }

    /// `data.take(indices, axis)`.
    pub fn gather(
        &mut self,
        data: NodeId,
        indices: NodeId,
        axis: usize,
    ) -> Result<NodeId, IrError> {
        self.push(Op::Gather { axis }, &[data, indices], None)
    }

    /// Scaled dot-product attention.
    pub fn attention(
        &mut self,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        mask: Option<NodeId>,
        causal: bool,
        scale: Option<f64>,
    ) -> Result<NodeId, IrError> {
        let (m, ins) = match (mask, causal) {
            (Some(m), _) => (AttnMask::Additive, vec![q, k, v, m]),
            (None, true) => (AttnMask::Causal, vec![q, k, v]),
            (None, false) => (AttnMask::None, vec![q, k, v]),
        };
        self.push(Op::Attention { mask: m, scale }, &ins, None)
    }

    fn norm_axes(&self, x: NodeId, axes: &[i64], op: &'static str) -> Result<Vec<usize>, IrError> {
        let shape = &self.ty(x).shape;
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let Some(n) = shape.axis(a) else {
                return Err(IrError::Infer {
                    node: format!("{op}_{}", self.nodes.len()),
                    op,
                    inputs: self.ty(x).to_string(),
                    message: format!("axis {a} out of range for rank {}", shape.rank()),
                });
            };
            out.push(n);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Checks the whole graph: references point backwards, leaves have no inputs, every
    /// recorded type matches inference, names are unique, outputs exist.
    ///
    /// # Errors
    /// The first problem found, naming the node and op.
    pub fn verify(&self) -> Result<(), IrError> {
        let mut names: HashSet<&String> = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(bad) = n.inputs.iter().find(|x| x.0 >= i) {
                return Err(IrError::BadReference {
                    node: n.name.clone(),
                    op: n.op.name(),
                    input: bad.0,
                });
            }
            match &n.op {
                op if op.is_leaf() && !n.inputs.is_empty() => {
                    return Err(IrError::LeafWithInputs {
                        node: n.name.clone(),
                        op: n.op.name(),
                        count: n.inputs.len(),
                    });
                }
                Op::Input { name } | Op::Param { name } => {
                    if name.is_empty() || !names.insert(name) {
                        return Err(IrError::DuplicateName {
                            kind: n.op.name(),
                            name: name.clone(),
                        });
                    }
                }
                _ => {
                    let tys: Vec<&TensorType> =
                        n.inputs.iter().map(|x| &self.nodes[x.0].ty).collect();
                    let inferred = infer(&n.op, &tys).map_err(|message| IrError::Infer {
                        node: n.name.clone(),
                        op: n.op.name(),
                        inputs: fmt_types(&tys),
                        message,
                    })?;
                    if inferred != n.ty {
                        return Err(IrError::TypeMismatch {
                            node: n.name.clone(),
                            op: n.op.name(),
                            recorded: n.ty.to_string(),
                            inferred: inferred.to_string(),
                        });
                    }
                }
            }
        }
        if self.outputs.is_empty() {
            return Err(IrError::NoOutputs);
        }
        let mut out_names = HashSet::new();
        for (name, id) in &self.outputs {
            if id.0 >= self.nodes.len() {
                return Err(IrError::BadOutput {
                    name: name.clone(),
                    node: id.0,
                    count: self.nodes.len(),
                });
            }
            if name.is_empty() || !out_names.insert(name) {
                return Err(IrError::DuplicateName {
                    kind: "output",
                    name: name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Symbol names used anywhere in the graph's types, sorted.
    pub fn symbols(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| n.ty.shape.symbols())
            .map(|s| s.to_string())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// A copy with symbolic dims replaced by their bound sizes and every type re-inferred.
    ///
    /// # Errors
    /// Inference failures that only show once sizes are known (e.g. mismatched dims).
    pub fn bind(&self, bindings: &HashMap<String, usize>) -> Result<Graph, IrError> {
        let mut g = Graph::new();
        for n in &self.nodes {
            let op = match &n.op {
                Op::Reshape(s) => Op::Reshape(s.bind(bindings)),
                Op::Expand(s) => Op::Expand(s.bind(bindings)),
                op => op.clone(),
            };
            if op.is_leaf() {
                g.push_node(Node {
                    op,
                    inputs: vec![],
                    ty: TensorType::new(n.ty.dtype, n.ty.shape.bind(bindings)),
                    name: n.name.clone(),
                });
            } else {
                g.push(op, &n.inputs, Some(&n.name))?;
            }
        }
        g.outputs = self.outputs.clone();
        Ok(g)
    }

    /// Counts how many times each node is used (as an input or an output).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for i in &n.inputs {
                uses[i.0] += 1;
            }
        }
        for (_, o) in &self.outputs {
            uses[o.0] += 1;
        }
        uses
    }
}

fn fmt_types(tys: &[&TensorType]) -> String {
    if tys.is_empty() {
        return "none".into();
    }
    tys.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The text dump: one line per node, `%3 = add(%1, %2) : f32[batch,4]  # name`.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes.iter().enumerate() {
            let args: Vec<String> = n.inputs.iter().map(|x| x.to_string()).collect();
            let attrs = n.op.attrs();
            let sep = if !attrs.is_empty() && !args.is_empty() {
                ", "
            } else {
                ""
            };
            writeln!(
                f,
                "%{i} = {}({}{sep}{attrs}) : {}  # {}",
                n.op.name(),
                args.join(", "),
                n.ty,
                n.name
            )?;
        }
        for (name, id) in &self.outputs {
            writeln!(f, "output \"{name}\" = {id}")?;
        }
        Ok(())
    }
}
