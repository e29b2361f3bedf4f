//! Staged import: a model whose later shapes depend on values it computes (`NonZero`,
//! `NonMaxSuppression`, `Unique`, `TopK` with a computed `k`, `Compress` with a computed
//! condition) is cut at those nodes.
//!
//! One import maps the graph up to the data-dependent nodes whose deciding inputs are only
//! known at run time (the *cut*); the nodes after them are *pending*. The graph's outputs
//! are then the values later stages read (the cut's inputs, and what pending nodes read).
//! After it runs, [`run_host`] evaluates the cut nodes on the host with the same mappers
//! that fold them at import (`crate::host`), and the next import treats every value
//! computed so far as a *carried* graph input of known shape: the nodes that computed them
//! are not mapped again, and the shapes after the cut are static. The last import, with no
//! cut, outputs the model's outputs. `rlx_onnx::runtime` drives this loop through the
//! runtime's `DynamicGraph`, which compiles each stage once per signature.

use crate::ctx::{Ctx, Fail, Val};
use crate::import::Slot;
use crate::node::{Env, NodeIn};
use crate::proto::{GraphProto, ModelProto, NodeProto};
use crate::value::Value;
use crate::OnnxError;
use rlx_ir::{Op, Tensor};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The inputs that decide the output shape of a data-dependent op (`None` for other ops):
/// when one of them is computed at run time, the op is evaluated on the host between
/// stages.
pub fn deciding_inputs(domain: &str, op_type: &str) -> Option<&'static [usize]> {
    if domain != "ai.onnx" {
        return None;
    }
    match op_type {
        "NonZero" | "Unique" => Some(&[0]),
        "Compress" | "TopK" => Some(&[1]),
        "NonMaxSuppression" => Some(&[0, 1, 2, 3, 4]),
        _ => None,
    }
}

/// What one import leaves to the host after its graph runs.
#[derive(Debug, Clone, Default)]
pub struct Cut {
    /// data-dependent nodes (indices into the main graph's nodes), in graph order; none of
    /// them reads another's result
    pub nodes: Vec<usize>,
    /// their inputs known at import, by value name (the rest are graph inputs or outputs)
    pub consts: Vec<(String, Arc<Tensor>)>,
    /// their inputs that are another name of a graph input (an `Identity` of it): value
    /// name and graph input name
    pub aliases: Vec<(String, String)>,
}

impl Cut {
    /// True when the import computes the model's outputs.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// A staged import of the main graph in progress.
#[derive(Default)]
pub struct Staging {
    /// names of values earlier stages computed
    pub carried: HashSet<String>,
    /// what is left to the host
    pub cut: Cut,
    /// values computed here that later stages read, in order of first need
    pub exports: Vec<String>,
    /// data-dependent ops fold by freezing given graph inputs (a one-graph import)
    pub freeze: bool,
    exported: HashSet<String>,
}

impl Staging {
    /// Staging with the names of the values earlier stages computed.
    pub fn new(carried: impl IntoIterator<Item = String>) -> Staging {
        Staging {
            carried: carried.into_iter().collect(),
            ..Staging::default()
        }
    }

    /// True when every named output of `node` was computed by an earlier stage.
    pub fn computed_before(&self, node: &NodeProto) -> bool {
        let mut outs = node.output.iter().filter(|o| !o.is_empty()).peekable();
        outs.peek().is_some() && outs.all(|o| self.carried.contains(o))
    }

    /// Records that a later stage reads `name` (bound to `v` here): a value this graph
    /// computes becomes one of its outputs. Graph inputs (the run's, or carried ones) are
    /// available to later stages already.
    pub fn export(&mut self, ctx: &Ctx, name: &str, v: &Val) {
        let Val::Node(id) = v else {
            return; // a constant: the next import derives it again
        };
        if matches!(ctx.graph.node(*id).op, Op::Input { .. }) {
            return;
        }
        if self.exported.insert(name.to_string()) {
            self.exports.push(name.to_string());
        }
    }

    /// Handles `node` (index `idx` in the main graph) if staging decides it: skipped when
    /// an earlier stage computed its outputs, left pending when it reads a pending value,
    /// cut when it is a data-dependent op whose deciding inputs are only known at run time.
    /// Returns false for a node to map as usual.
    pub fn defer(
        &mut self,
        ctx: &mut Ctx,
        scope: &mut HashMap<String, Slot>,
        idx: usize,
        node: &NodeProto,
        domain: &str,
    ) -> bool {
        if self.computed_before(node) {
            return true; // its outputs are lazy graph inputs already
        }
        let reads = node.input.iter().map(|i| i.as_str()).chain(captured(node));
        let reads: Vec<&str> = reads.filter(|i| !i.is_empty()).collect();
        let pending = reads
            .iter()
            .any(|i| matches!(scope.get(*i), Some(Slot::Pending)));
        let cut = !pending && is_cut(ctx, scope, node, domain, self.freeze);
        if !pending && !cut {
            return false;
        }
        for i in &reads {
            if let Some(Slot::Val(Value::Tensor(v))) = scope.get(*i) {
                if cut {
                    self.cut_input(ctx, i, v);
                } else {
                    self.export(ctx, i, v);
                }
            }
        }
        if cut {
            self.cut.nodes.push(idx);
        }
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            scope.insert(out.clone(), Slot::Pending);
        }
        true
    }

    /// Records an input `name` (bound to `v`) of a cut node: a constant is kept for the
    /// host, a graph input under another name is remembered as an alias, and a value this
    /// graph computes becomes an output.
    pub fn cut_input(&mut self, ctx: &Ctx, name: &str, v: &Val) {
        match v {
            Val::Const { t, .. } => self.cut.consts.push((name.to_string(), t.clone())),
            Val::Node(id) => match &ctx.graph.node(*id).op {
                Op::Input { name: input } if input != name => {
                    self.cut.aliases.push((name.to_string(), input.clone()))
                }
                _ => self.export(ctx, name, v),
            },
        }
    }
}

/// True when `node` is a data-dependent op (see `crate::stage::deciding_inputs`) one of
/// whose deciding inputs is only known at run time (`freeze`: given values of graph inputs
/// count as known).
fn is_cut(
    ctx: &mut Ctx,
    scope: &HashMap<String, Slot>,
    node: &NodeProto,
    domain: &str,
    freeze: bool,
) -> bool {
    let Some(deciding) = crate::stage::deciding_inputs(domain, node.op_type()) else {
        return false;
    };
    deciding.iter().any(|&i| {
        let Some(name) = node.input.get(i).filter(|n| !n.is_empty()) else {
            return false;
        };
        match scope.get(name) {
            Some(Slot::Val(Value::Tensor(v))) if freeze => ctx.try_const(v).is_none(),
            Some(Slot::Val(Value::Tensor(v))) => ctx.try_const_unfrozen(v).is_none(),
            Some(Slot::Lazy) => true,
            _ => false,
        }
    })
}

/// Names a node's subgraphs (If branches, Loop and Scan bodies) read from enclosing scopes,
/// at any depth (a superset: names they define themselves are included too).
pub fn captured(node: &NodeProto) -> Vec<&str> {
    fn walk<'a>(g: &'a GraphProto, out: &mut Vec<&'a str>) {
        for n in &g.node {
            out.extend(n.input.iter().filter(|i| !i.is_empty()).map(|i| i.as_str()));
            for a in &n.attribute {
                a.g.iter().chain(&a.graphs).for_each(|g| walk(g, out));
            }
        }
        out.extend(g.output.iter().map(|o| o.name()));
    }
    let mut out = Vec::new();
    for a in &node.attribute {
        a.g.iter().chain(&a.graphs).for_each(|g| walk(g, &mut out));
    }
    out
}

/// Evaluates the cut's nodes on the host, in order: inputs come from `carried` (values
/// earlier stages computed), the run's `inputs` or the cut's constants; every named output
/// is added to `carried`.
///
/// # Errors
/// An input that is missing, or values the op refuses (wrong shapes, `K` out of range, ...),
/// naming the node, the op and the problem.
pub fn run_host(
    model: &ModelProto,
    file: &str,
    cut: &Cut,
    inputs: &HashMap<String, Tensor>,
    carried: &mut HashMap<String, Tensor>,
) -> Result<(), OnnxError> {
    let opsets = crate::import::opsets_of(model, file)?;
    let Some(graph) = model.graph.as_ref() else {
        return Err(OnnxError::Model {
            file: file.to_string(),
            message: "the model has no graph".into(),
        });
    };
    let mut results: Vec<(String, Tensor)> = Vec::new();
    for &idx in &cut.nodes {
        let Some(node) = graph.node.get(idx) else {
            continue;
        };
        let name = if node.name().is_empty() {
            format!("{}#{idx}", node.op_type())
        } else {
            node.name().to_string()
        };
        let opset = opsets.get("ai.onnx").copied().unwrap_or(0);
        let err = |message: String| OnnxError::Model {
            file: file.to_string(),
            message: format!(
                "node `{name}` (ai.onnx:{} opset {opset}): {message}",
                node.op_type()
            ),
        };
        let mut ins = Vec::with_capacity(node.input.len());
        for i in &node.input {
            if i.is_empty() {
                ins.push(None);
                continue;
            }
            let source = cut
                .aliases
                .iter()
                .find(|(n, _)| n == i)
                .map_or(i.as_str(), |(_, input)| input.as_str());
            let t = if let Some(t) = carried.get(source).or_else(|| inputs.get(source)) {
                Arc::new(t.clone())
            } else if let Some((_, t)) = cut.consts.iter().find(|(n, _)| n == i) {
                t.clone()
            } else {
                return Err(err(format!("input `{i}` has no value on the host")));
            };
            ins.push(Some(Val::Const { t, param: None }.into()));
        }
        let Some(handler) = crate::ops::lookup("ai.onnx", node.op_type()) else {
            return Err(err(format!("op `{}` is not supported", node.op_type())));
        };
        let mut ctx = Ctx::new();
        ctx.cur = name.clone();
        let scope = HashMap::new();
        let env = Env {
            scope: &scope,
            opsets: &opsets,
            file,
        };
        let n = NodeIn::new(node, name.clone(), opset, ins, env);
        let outs = handler(&mut ctx, &n).map_err(|f| match f {
            Fail::Invalid(m) | Fail::Unsupported(m) => err(m),
        })?;
        let unread = n.unread();
        if !unread.is_empty() {
            return Err(err(format!(
                "attribute(s) {} not implemented",
                unread.join(", ")
            )));
        }
        drop(ctx);
        let mut outs: Vec<Option<Val>> = outs.into_iter().map(Some).collect();
        for (i, out) in node.output.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            match outs.get_mut(i).and_then(Option::take) {
                Some(Val::Const { t, .. }) => {
                    let t = Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone());
                    results.push((out.clone(), t));
                }
                _ => return Err(err(format!("output {i} was not computed on the host"))),
            }
        }
    }
    carried.extend(results);
    Ok(())
}
