//! The import context: ONNX value names bound to [`Val`]s, and the graph being built.
//!
//! Values known at import time stay host tensors ([`Val::Const`]) so that shape computations
//! fold as the model is read; a value becomes a graph node only when a run-time op consumes
//! it. Constant folding uses the validation interpreter's reference semantics
//! ([`rlx_interp::eval_op`]), so folded and run-time results agree bit for bit.

use rlx_ir::{infer, DType, Dim, Graph, Node, NodeId, Op, Shape, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// Results folded at import are capped at this many elements, so a huge initializer is
/// never duplicated on the host just to transpose it.
const FOLD_LIMIT: usize = 1 << 20;

/// No value may have more elements than this (2^48): a model declaring more is refused
/// before any size arithmetic could overflow.
pub const MAX_ELEMENTS: usize = 1 << 48;

/// Host allocations made while importing (masks, weight matrices, ranges) are capped here.
pub const HOST_LIMIT: usize = 1 << 24;

/// The element count of static `dims`, `None` past [`MAX_ELEMENTS`] (or on overflow).
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
}

/// Static element count of a possibly symbolic shape (symbols count as 1), bounded.
pub fn shape_numel(shape: &Shape) -> Option<usize> {
    let dims: Vec<usize> = shape
        .dims()
        .iter()
        .map(|d| d.as_static().unwrap_or(1))
        .collect();
    checked_numel(&dims)
}

/// Why mapping one node failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Fail {
    /// Valid ONNX the importer does not implement (op, attribute value, dtype, dynamic
    /// value where the IR needs a static one).
    Unsupported(String),
    /// The model is wrong: arity, attribute types, shapes that do not agree.
    Invalid(String),
}

/// Result of mapping steps.
pub type R<T> = Result<T, Fail>;

/// Returns `Fail::Unsupported` with a formatted message.
macro_rules! unsupported {
    ($($t:tt)*) => { return Err($crate::ctx::Fail::Unsupported(format!($($t)*))) };
}
/// Returns `Fail::Invalid` with a formatted message.
macro_rules! invalid {
    ($($t:tt)*) => { return Err($crate::ctx::Fail::Invalid(format!($($t)*))) };
}
pub(crate) use {invalid, unsupported};

/// A value during import: a graph node, or a tensor known now.
#[derive(Debug, Clone)]
pub enum Val {
    /// computed at run time by this node
    Node(NodeId),
    /// known at import; `param` names an initializer, bound as a weight when used at run time
    Const {
        /// the value
        t: Arc<Tensor>,
        /// the initializer name, when it is one
        param: Option<String>,
    },
}

impl Val {
    /// A constant with no initializer name.
    pub fn konst(t: Tensor) -> Val {
        Val::Const {
            t: Arc::new(t),
            param: None,
        }
    }
}

/// A graph input declared when first read: its type, a value that may be frozen, and its
/// node once declared.
type LazyInput = (TensorType, Option<Arc<Tensor>>, Option<NodeId>);

/// The graph under construction and everything needed to materialize values into it.
pub struct Ctx {
    /// the graph
    pub graph: Graph,
    /// weights bound by the graph's params, in order of first use
    pub params: Vec<(String, Arc<Tensor>)>,
    param_nodes: HashMap<String, NodeId>,
    /// values of graph inputs that may be frozen when an op needs them static
    known_inputs: HashMap<NodeId, (String, Arc<Tensor>)>,
    /// graph inputs that were frozen, by name
    pub frozen: Vec<String>,
    /// values computed for nodes by [`Ctx::const_of`]
    node_values: HashMap<NodeId, Arc<Tensor>>,
    /// name given to the nodes being created (the ONNX node's name)
    pub cur: String,
    /// `DynamicQuantizeLinear` results: the u8 node → (its f32 source, scale, zero point),
    /// so a `MatMulInteger` reading them quantizes the source itself
    pub dynamic_quantized: HashMap<NodeId, (Val, Val, Val)>,
    /// integer products of a `DynamicQuantizeLinear` result (i32 sums): the product node →
    /// (the f32 source, `b`, `b`'s zero point as the op takes it, the source's scale), so
    /// `Cast(product) * (scale * s)` becomes one product that finds the scale itself
    pub dynamic_products: HashMap<NodeId, [Val; 4]>,
    /// graph inputs declared when first read
    lazy: HashMap<String, LazyInput>,
}

impl Ctx {
    /// An empty context.
    pub fn new() -> Ctx {
        Ctx {
            graph: Graph::new(),
            params: Vec::new(),
            param_nodes: HashMap::new(),
            known_inputs: HashMap::new(),
            frozen: Vec::new(),
            node_values: HashMap::new(),
            cur: String::new(),
            dynamic_quantized: HashMap::new(),
            dynamic_products: HashMap::new(),
            lazy: HashMap::new(),
        }
    }

    /// Declares a run-time input whose value may be frozen when needed statically.
    pub fn input(&mut self, name: &str, ty: TensorType, known: Option<Arc<Tensor>>) -> Val {
        let id = self.graph.input(name, ty.dtype, ty.shape);
        if let Some(t) = known {
            self.known_inputs.insert(id, (name.to_string(), t));
        }
        Val::Node(id)
    }

    /// Registers a graph input that is declared only if something reads it
    /// ([`Ctx::read_lazy`]): a later stage of a staged import reads few of the values
    /// earlier stages computed, and each one declared is one copied into the run.
    pub fn lazy_input(&mut self, name: &str, ty: TensorType, known: Option<Arc<Tensor>>) {
        self.lazy.insert(name.to_string(), (ty, known, None));
    }

    /// The value of a lazy input, declaring it on first read; `None` for unknown names.
    pub fn read_lazy(&mut self, name: &str) -> Option<Val> {
        let (ty, known, id) = self.lazy.get(name)?.clone();
        if let Some(id) = id {
            return Some(Val::Node(id));
        }
        let v = self.input(name, ty, known);
        if let (Val::Node(id), Some(entry)) = (&v, self.lazy.get_mut(name)) {
            entry.2 = Some(*id);
        }
        Some(v)
    }

    /// The type of a value.
    pub fn ty(&self, v: &Val) -> TensorType {
        match v {
            Val::Node(id) => self.graph.ty(*id).clone(),
            Val::Const { t, .. } => TensorType::new(t.dtype(), Shape::of(t.shape())),
        }
    }

    /// The dtype of a value.
    pub fn dtype(&self, v: &Val) -> DType {
        match v {
            Val::Node(id) => self.graph.ty(*id).dtype,
            Val::Const { t, .. } => t.dtype(),
        }
    }

    /// The rank of a value.
    pub fn rank(&self, v: &Val) -> usize {
        match v {
            Val::Node(id) => self.graph.ty(*id).shape.rank(),
            Val::Const { t, .. } => t.shape().len(),
        }
    }

    /// The dims of a value, possibly symbolic.
    pub fn dims(&self, v: &Val) -> Vec<Dim> {
        self.ty(v).shape.0
    }

    /// The static shape of a value.
    ///
    /// # Errors
    /// Unsupported when a dim is symbolic.
    pub fn shape(&self, v: &Val) -> R<Vec<usize>> {
        let ty = self.ty(v);
        match ty.shape.as_static() {
            Some(s) => Ok(s),
            None => unsupported!("needs static dims, got {}", ty.shape),
        }
    }

    /// The graph node of a value, creating a param or constant node for known values.
    pub fn node(&mut self, v: &Val) -> NodeId {
        match v {
            Val::Node(id) => *id,
            Val::Const {
                t,
                param: Some(name),
            } => {
                if let Some(&id) = self.param_nodes.get(name) {
                    return id;
                }
                let id = self.graph.param(name, t.dtype(), Shape::of(t.shape()));
                self.param_nodes.insert(name.clone(), id);
                self.params.push((name.clone(), t.clone()));
                id
            }
            Val::Const { t, param: None } => {
                let ty = TensorType::new(t.dtype(), Shape::of(t.shape()));
                let id = self.graph.push_node(Node {
                    op: Op::Constant(t.clone()),
                    inputs: vec![],
                    ty,
                    name: format!("{}/constant", self.cur),
                });
                self.node_values.insert(id, t.clone());
                id
            }
        }
    }

    /// The value of `v` if it is known at import: a constant, an initializer, a graph input
    /// whose value was given (frozen from then on), or a node computed only from those.
    pub fn try_const(&mut self, v: &Val) -> Option<Arc<Tensor>> {
        match v {
            Val::Const { t, .. } => Some(t.clone()),
            Val::Node(id) => self.node_const(*id),
        }
    }

    /// The value of `v` if it is known at import without freezing a graph input: what a
    /// data-dependent op needs to fold rather than run between stages (freezing would
    /// evaluate everything before it on the host interpreter).
    pub fn try_const_unfrozen(&mut self, v: &Val) -> Option<Arc<Tensor>> {
        match v {
            Val::Const { t, .. } => Some(t.clone()),
            Val::Node(id) => self.node_const_with(*id, false),
        }
    }

    fn node_const(&mut self, id: NodeId) -> Option<Arc<Tensor>> {
        self.node_const_with(id, true)
    }

    fn node_const_with(&mut self, id: NodeId, freeze: bool) -> Option<Arc<Tensor>> {
        if let Some(t) = self.node_values.get(&id) {
            return Some(t.clone());
        }
        if let Some((name, t)) = self.known_inputs.get(&id).filter(|_| freeze) {
            let t = t.clone();
            if !self.frozen.contains(name) {
                self.frozen.push(name.clone());
            }
            self.node_values.insert(id, t.clone());
            return Some(t);
        }
        let node = self.graph.node(id).clone();
        let t = match &node.op {
            Op::Input { .. } => return None,
            Op::Param { name } => self.params.iter().find(|(n, _)| n == name)?.1.clone(),
            op => {
                let mut ins = Vec::with_capacity(node.inputs.len());
                for &i in &node.inputs {
                    ins.push(self.node_const_with(i, freeze)?);
                }
                let refs: Vec<&Tensor> = ins.iter().map(|t| &**t).collect();
                Arc::new(rlx_interp::eval_op(op, &refs).ok()?)
            }
        };
        self.node_values.insert(id, t.clone());
        Some(t)
    }

    /// The value of `v`, which the IR needs at import (a shape, axes, pads, ...).
    ///
    /// # Errors
    /// Unsupported when the value is only known at run time; `what` names the operand.
    pub fn const_of(&mut self, v: &Val, what: &str) -> R<Arc<Tensor>> {
        match self.try_const(v) {
            Some(t) => Ok(t),
            None => unsupported!(
                "{what} must be known at import (the IR needs it static), but it is computed at run time"
            ),
        }
    }

    /// Refuses an import-time host allocation of `n` elements past [`HOST_LIMIT`].
    pub fn host_alloc(&self, n: Option<usize>, what: &str) -> R<usize> {
        match n {
            Some(n) if n <= HOST_LIMIT => Ok(n),
            _ => unsupported!("{what} would need more than 2^24 elements at import"),
        }
    }

    /// A known integer vector (shape, axes, pads, ...), any integer dtype.
    pub fn const_ints(&mut self, v: &Val, what: &str) -> R<Vec<i64>> {
        let t = self.const_of(v, what)?;
        if !(t.dtype().is_int()) {
            invalid!("{what} must be an integer tensor, got {}", t.dtype());
        }
        Ok(t.to_f64_vec().into_iter().map(|x| x as i64).collect())
    }

    /// Adds `op` applied to `inputs`, folding it at import when every input is known.
    ///
    /// # Errors
    /// Invalid when shape/dtype inference rejects the operands.
    pub fn op(&mut self, op: Op, inputs: &[&Val]) -> R<Val> {
        let tys: Vec<TensorType> = inputs.iter().map(|v| self.ty(v)).collect();
        let refs: Vec<&TensorType> = tys.iter().collect();
        let out = infer(&op, &refs).map_err(|m| {
            let types: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
            Fail::Invalid(format!(
                "{}: {m} (operands {})",
                op.name(),
                types.join(", ")
            ))
        })?;
        let Some(numel) = shape_numel(&out.shape) else {
            unsupported!(
                "{} would produce {} (more than 2^48 elements)",
                op.name(),
                out.shape
            );
        };
        let all_const = inputs.iter().all(|v| matches!(v, Val::Const { .. }));
        if all_const && out.shape.is_static() && numel <= FOLD_LIMIT {
            let ts: Vec<&Tensor> = inputs
                .iter()
                .map(|v| match v {
                    Val::Const { t, .. } => &**t,
                    Val::Node(_) => unreachable!("checked all_const"),
                })
                .collect();
            match rlx_interp::eval_op(&op, &ts) {
                Ok(t) => return Ok(Val::konst(t)),
                Err(e) => invalid!("{e}"),
            }
        }
        let ids: Vec<NodeId> = inputs.iter().map(|v| self.node(v)).collect();
        let id = self.graph.push_node(Node {
            op,
            inputs: ids,
            ty: out,
            name: self.cur.clone(),
        });
        Ok(Val::Node(id))
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx::new()
    }
}
