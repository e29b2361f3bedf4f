//! The driver: decode a model, bind initializers and inputs, map every node in order, and
//! collect every unsupported node into one error.

use crate::ctx::{Ctx, Fail, R};
use crate::data::OutputLayout;
use crate::dtype::{onnx_type_name, to_dtype};
use crate::error::{OnnxError, UnsupportedNode};
use crate::node::{Env, NodeIn};
use crate::proto::{type_proto, GraphProto, ModelProto, ValueInfoProto};
use crate::stage::{Cut, Staging};
use crate::tensor::{to_tensor, ExternalData};
use crate::value::{declare_output, Value};
use crate::{ImportOptions, OnnxModel};
use rlx_ir::{Dim, Shape, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// The newest default-domain opset this importer knows (what onnx 1.23 emits).
pub const MAX_OPSET: i64 = 28;
/// The oldest default-domain opset this importer accepts. Opsets 7 and newer are the
/// target; 1 to 6 (the PyTorch-converted suites) work where an op's attributes say how.
pub const MIN_OPSET: i64 = 1;

/// A name's binding while mapping: a value, the output of a node that failed, or (in a
/// staged import, `crate::stage`) a graph input not declared yet or a value of a later stage.
#[derive(Clone)]
pub enum Slot {
    /// a value
    Val(Value),
    /// the output of a node that could not be mapped
    Poisoned,
    /// a graph input declared when first read ([`Ctx::lazy_input`]): a value an earlier
    /// stage computed, or a run input of a later stage
    Lazy,
    /// computed only after a data-dependent node of this stage runs on the host
    Pending,
}

/// Initializers decoded once into shared tensors, in file order.
pub type Initializers = Vec<(String, Arc<Tensor>)>;

/// An import's result with its weights still shared with the caller's initializers.
pub struct Imported {
    /// the graph
    pub graph: rlx_ir::Graph,
    /// weights bound by the graph's params
    pub params: Vec<(String, Arc<Tensor>)>,
    /// graph inputs whose given value was frozen
    pub frozen: Vec<String>,
    /// imported opsets, sorted
    pub opsets: Vec<(String, i64)>,
    /// producer name and version
    pub producer: String,
    /// data-dependent nodes left to the host (empty when the graph computes the outputs)
    pub cut: Cut,
    /// how each model output is put together from the graph's outputs (empty for a stage
    /// with a cut)
    pub outputs: Vec<(String, OutputLayout)>,
}

/// Imports a decoded model.
pub fn import(
    model: &ModelProto,
    file: &str,
    ext: &mut ExternalData,
    opts: &ImportOptions,
) -> Result<OnnxModel, OnnxError> {
    let inits = initializers(model, file, ext)?;
    let m = import_decoded(model, file, inits, opts, false)?;
    if !m.cut.is_empty() {
        return Err(cut_unsupported(model, file, &m.cut));
    }
    let params = m
        .params
        .into_iter()
        .map(|(n, t)| (n, Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone())))
        .collect();
    Ok(OnnxModel {
        graph: m.graph,
        params,
        frozen_inputs: m.frozen,
        opsets: m.opsets,
        producer: m.producer,
        outputs: m.outputs,
    })
}

/// The error for a one-graph import of a model whose shapes depend on run-time values.
fn cut_unsupported(model: &ModelProto, file: &str, cut: &Cut) -> OnnxError {
    let opset = opsets_of(model, file)
        .ok()
        .and_then(|o| o.get("ai.onnx").copied())
        .unwrap_or(0);
    let nodes = model.graph.as_ref().map(|g| &g.node[..]).unwrap_or(&[]);
    let nodes = cut
        .nodes
        .iter()
        .filter_map(|&i| nodes.get(i).map(|n| (i, n)))
        .map(|(i, n)| UnsupportedNode {
            node: if n.name().is_empty() {
                format!("{}#{i}", n.op_type())
            } else {
                n.name().to_string()
            },
            domain: "ai.onnx".into(),
            op_type: n.op_type().to_string(),
            opset,
            reason: "its output shape depends on values computed at run time; run the model \
                     through rlx_onnx::runtime (`rlx run`, Python's InferenceSession), which \
                     evaluates it between compiled stages"
                .into(),
        })
        .collect();
    OnnxError::Unsupported {
        file: file.to_string(),
        nodes,
    }
}

/// The opsets a model imports, by domain (`ai.onnx` for the default one).
pub(crate) fn opsets_of(model: &ModelProto, file: &str) -> Result<HashMap<String, i64>, OnnxError> {
    if model.opset_import.is_empty() {
        return Err(OnnxError::Model {
            file: file.to_string(),
            message: "the model imports no opset".into(),
        });
    }
    let mut opsets: HashMap<String, i64> = HashMap::new();
    for o in &model.opset_import {
        let domain = match o.domain() {
            "" | "ai.onnx" => "ai.onnx",
            d => d,
        };
        opsets.insert(domain.to_string(), o.version());
    }
    Ok(opsets)
}

/// Decodes every initializer of the main graph (refusing sparse ones and duplicates).
pub fn initializers(
    model: &ModelProto,
    file: &str,
    ext: &mut ExternalData,
) -> Result<Initializers, OnnxError> {
    let model_err = |message: String| OnnxError::Model {
        file: file.to_string(),
        message,
    };
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| model_err("the model has no graph".into()))?;
    let opsets = opsets_of(model, file)?;
    let mut out: Initializers = Vec::with_capacity(graph.initializer.len());
    let mut seen = std::collections::HashSet::new();
    for init in &graph.initializer {
        let name = init.name().to_string();
        if name.is_empty() {
            return Err(model_err("an initializer has no name".into()));
        }
        let t = to_tensor(init, ext).map_err(|message| OnnxError::Tensor {
            file: file.to_string(),
            name: name.clone(),
            message,
        })?;
        if !seen.insert(name.clone()) {
            return Err(model_err(format!("initializer `{name}` is defined twice")));
        }
        out.push((name, Arc::new(t)));
    }
    if let Some(s) = graph.sparse_initializer.first() {
        let name = s.values.as_ref().map(|v| v.name()).unwrap_or("");
        return Err(OnnxError::Unsupported {
            file: file.to_string(),
            nodes: vec![UnsupportedNode {
                node: name.to_string(),
                domain: "ai.onnx".into(),
                op_type: "sparse_initializer".into(),
                opset: *opsets.get("ai.onnx").unwrap_or(&0),
                reason: "sparse initializers are not supported".into(),
            }],
        });
    }
    Ok(out)
}

/// The run-time inputs a model declares (graph inputs no initializer gives a value), with
/// dynamic dims as symbols or the sizes `dims` binds them to.
///
/// # Errors
/// An input whose type the importer cannot represent.
pub fn declared_inputs(
    model: &ModelProto,
    file: &str,
    dims: &HashMap<String, usize>,
) -> Result<Vec<(String, TensorType)>, OnnxError> {
    let Some(graph) = model.graph.as_ref() else {
        return Err(OnnxError::Model {
            file: file.to_string(),
            message: "the model has no graph".into(),
        });
    };
    let opsets = opsets_of(model, file)?;
    let inits: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|i| i.name()).collect();
    let mut out = Vec::new();
    for input in &graph.input {
        let name = input.name().to_string();
        if inits.contains(name.as_str()) || out.iter().any(|(n, _)| *n == name) {
            continue; // an initializer gives it a value (IR < 4 style)
        }
        if crate::value::value_kind(input).is_some() {
            continue; // a sequence, optional or string input: see `value_inputs`
        }
        let ty = value_type(input, &name, dims).map_err(|reason| OnnxError::Unsupported {
            file: file.to_string(),
            nodes: vec![UnsupportedNode {
                node: format!("graph input `{name}`"),
                domain: "ai.onnx".into(),
                op_type: "input".into(),
                opset: *opsets.get("ai.onnx").unwrap_or(&0),
                reason,
            }],
        })?;
        out.push((name, ty));
    }
    Ok(out)
}

/// The graph outputs in declared order with their types; `None` where the model leaves the
/// type or rank unknown (the import infers them).
pub fn declared_outputs(model: &ModelProto) -> Vec<(String, Option<TensorType>)> {
    let Some(graph) = model.graph.as_ref() else {
        return Vec::new();
    };
    graph
        .output
        .iter()
        .map(|o| {
            let name = o.name().to_string();
            let ty = value_type(o, &name, &HashMap::new()).ok();
            (name, ty)
        })
        .collect()
}

/// Imports a model whose initializers are already decoded (shared, not copied). With
/// `staged` (a runtime that evaluates data-dependent ops between stages), such an op whose
/// input is a graph input given in `opts.known_inputs` is cut rather than folded by
/// freezing that input: freezing would evaluate everything before it on the host.
pub fn import_decoded(
    model: &ModelProto,
    file: &str,
    inits: Initializers,
    opts: &ImportOptions,
    staged: bool,
) -> Result<Imported, OnnxError> {
    let model_err = |message: String| OnnxError::Model {
        file: file.to_string(),
        message,
    };
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| model_err("the model has no graph".into()))?;
    let opsets = opsets_of(model, file)?;
    let mut ctx = Ctx::new();
    let mut scope: HashMap<String, Slot> = HashMap::new();

    for (name, t) in inits {
        let v = crate::ctx::Val::Const {
            t,
            param: Some(name.clone()),
        };
        scope.insert(name, Slot::Val(v.into()));
    }
    // A later stage declares only the run inputs and carried values it reads.
    let later_stage = !opts.carried.is_empty();
    for (name, ty) in declared_inputs(model, file, &opts.dims)? {
        let known = opts.known_inputs.get(&name).map(|t| Arc::new(t.clone()));
        if later_stage {
            ctx.lazy_input(&name, ty, known);
            scope.insert(name, Slot::Lazy);
        } else {
            let v = ctx.input(&name, ty, known);
            scope.insert(name, Slot::Val(v.into()));
        }
    }
    let default_opset = opsets.get("ai.onnx").copied().unwrap_or(0);
    crate::value::declare_inputs(&mut ctx, graph, opts, &mut scope, file, default_opset)?;
    for (name, ty) in &opts.carried {
        ctx.lazy_input(name, ty.clone(), None);
        scope.insert(name.clone(), Slot::Lazy);
    }
    let mut staging = Staging::new(opts.carried.iter().map(|(n, _)| n.clone()));
    staging.freeze = !staged;

    let unsupported = map_nodes(
        &mut ctx,
        graph,
        &opsets,
        &mut scope,
        file,
        Some(&mut staging),
    )?;
    if !unsupported.is_empty() {
        return Err(OnnxError::Unsupported {
            file: file.to_string(),
            nodes: unsupported,
        });
    }

    let mut outputs = Vec::new();
    if staging.cut.is_empty() {
        for out in &graph.output {
            let name = out.name();
            let v = match resolve(&mut ctx, &mut scope, name) {
                Some(v) => v,
                None => {
                    return Err(model_err(format!(
                        "graph output `{name}` is never computed"
                    )))
                }
            };
            if let Value::Tensor(t) = &v {
                check_declared(&ctx, t, out).map_err(model_err)?;
            }
            ctx.cur = format!("output {name}");
            outputs.push((name.to_string(), declare_output(&mut ctx, name, &v)));
        }
    } else {
        // a model output computed here is carried to the last stage
        for out in &graph.output {
            if let Some(Slot::Val(Value::Tensor(v))) = scope.get(out.name()) {
                staging.export(&ctx, out.name(), v);
            }
        }
        for name in &staging.exports {
            if let Some(Slot::Val(Value::Tensor(v))) = scope.get(name) {
                ctx.cur = format!("output {name}");
                let id = ctx.node(v);
                ctx.graph.output(name, id);
            }
        }
    }
    // a stage whose cut reads only graph inputs computes nothing, nor does a model whose
    // outputs are all computed at import (strings): an empty graph
    let empty_stage =
        ctx.graph.outputs().is_empty() && (!staging.cut.is_empty() || !outputs.is_empty());
    if !empty_stage {
        ctx.graph.verify().map_err(|source| OnnxError::Ir {
            file: file.to_string(),
            node: "(whole graph)".into(),
            source: Box::new(source),
        })?;
    }
    let params = std::mem::take(&mut ctx.params);
    drop(scope);
    let mut opsets: Vec<(String, i64)> = opsets.into_iter().collect();
    opsets.sort();
    Ok(Imported {
        graph: ctx.graph,
        params,
        frozen: ctx.frozen,
        opsets,
        producer: format!("{} {}", model.producer_name(), model.producer_version()),
        cut: staging.cut,
        outputs,
    })
}

/// The value bound to `name`, declaring a lazy graph input on first read; `None` when the
/// name is unbound, poisoned or pending.
fn resolve(ctx: &mut Ctx, scope: &mut HashMap<String, Slot>, name: &str) -> Option<Value> {
    match scope.get(name)? {
        Slot::Val(v) => Some(v.clone()),
        Slot::Lazy => {
            let v = Value::from(ctx.read_lazy(name)?);
            scope.insert(name.to_string(), Slot::Val(v.clone()));
            Some(v)
        }
        Slot::Poisoned | Slot::Pending => None,
    }
}

/// Maps every node of `graph` in order; returns the unsupported ones. With `staging` (the
/// main graph of a staged import), nodes earlier stages computed are skipped, and
/// data-dependent nodes whose deciding inputs are only known at run time are cut, with
/// everything after them left pending (see `crate::stage`).
fn map_nodes(
    ctx: &mut Ctx,
    graph: &GraphProto,
    opsets: &HashMap<String, i64>,
    scope: &mut HashMap<String, Slot>,
    file: &str,
    mut staging: Option<&mut Staging>,
) -> Result<Vec<UnsupportedNode>, OnnxError> {
    let mut unsupported = Vec::new();
    for (idx, node) in graph.node.iter().enumerate() {
        let name = if node.name().is_empty() {
            format!("{}#{idx}", node.op_type())
        } else {
            node.name().to_string()
        };
        let domain = match node.domain() {
            "" | "ai.onnx" => "ai.onnx",
            d => d,
        };
        let opset = opsets.get(domain).copied().unwrap_or(0);
        let unsupported_node = |reason: String| UnsupportedNode {
            node: name.clone(),
            domain: domain.to_string(),
            op_type: node.op_type().to_string(),
            opset,
            reason,
        };
        let node_err = |message: String| OnnxError::Model {
            file: file.to_string(),
            message: format!(
                "node `{name}` ({domain}:{} opset {opset}): {message}",
                node.op_type()
            ),
        };
        if let Some(st) = staging.as_deref_mut() {
            if st.defer(ctx, scope, idx, node, domain) {
                continue;
            }
        }
        let mut inputs = Vec::with_capacity(node.input.len());
        let mut poisoned = false;
        for i in &node.input {
            if i.is_empty() {
                inputs.push(None);
                continue;
            }
            match scope.get(i) {
                Some(Slot::Poisoned) => poisoned = true,
                Some(Slot::Pending) => {
                    return Err(node_err(format!(
                        "input `{i}` is only known after a data-dependent op runs, which a \
                         subgraph cannot wait for"
                    )))
                }
                Some(_) => match resolve(ctx, scope, i) {
                    Some(v) => inputs.push(Some(v)),
                    None => poisoned = true,
                },
                None => {
                    return Err(node_err(format!(
                        "input `{i}` is not defined before this node"
                    )))
                }
            }
        }
        let result = if poisoned {
            Err(None)
        } else if !opsets.contains_key(domain) {
            Err(Some(format!(
                "domain `{domain}` is not imported by the model"
            )))
        } else if let Some(handler) = crate::ops::values::Handler::find(domain, node, &inputs) {
            if domain == "ai.onnx" && !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
                Err(Some(format!(
                    "opset {opset} is outside the supported range {MIN_OPSET}..={MAX_OPSET}"
                )))
            } else {
                ctx.cur = name.clone();
                let env = Env {
                    scope: &*scope,
                    opsets,
                    file,
                };
                let n = NodeIn::new(node, name.clone(), opset, inputs, env);
                let result = handler.run(ctx, &n);
                let unread = n.unread();
                drop(n);
                match result {
                    Ok(outs) => {
                        if !unread.is_empty() {
                            Err(Some(format!(
                                "attribute(s) {} not implemented",
                                unread.join(", ")
                            )))
                        } else {
                            Ok(outs)
                        }
                    }
                    Err(Fail::Unsupported(m)) => Err(Some(m)),
                    Err(Fail::Invalid(m)) => return Err(node_err(m)),
                }
            }
        } else {
            Err(Some(format!("op `{}` is not supported", node.op_type())))
        };
        // outputs an earlier stage computed keep their (lazy) values
        let carried = |o: &str| staging.as_deref().is_some_and(|st| st.carried.contains(o));
        match result {
            Ok(outs) => {
                for (i, out) in node.output.iter().enumerate() {
                    if out.is_empty() || carried(out) {
                        continue;
                    }
                    match outs.get(i) {
                        Some(v) => {
                            scope.insert(out.clone(), Slot::Val(v.clone()));
                        }
                        None => {
                            unsupported
                                .push(unsupported_node(format!("output {i} is not implemented")));
                            scope.insert(out.clone(), Slot::Poisoned);
                        }
                    }
                }
            }
            Err(reason) => {
                if let Some(reason) = reason {
                    unsupported.push(unsupported_node(reason));
                }
                for out in &node.output {
                    if !carried(out) {
                        scope.insert(out.clone(), Slot::Poisoned);
                    }
                }
            }
        }
    }
    Ok(unsupported)
}

/// The IR type of a graph input: dynamic dims become symbols (named by the model, or
/// `NAME_dI` when it leaves them unnamed), or the size `bound` gives that name.
fn value_type(
    v: &ValueInfoProto,
    name: &str,
    bound: &HashMap<String, usize>,
) -> Result<TensorType, String> {
    let Some(ty) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err("has no type".into());
    };
    let type_proto::Value::TensorType(tt) = ty else {
        return Err(format!(
            "is a {} value; only tensors are supported",
            match ty {
                type_proto::Value::SequenceType(_) => "sequence",
                type_proto::Value::MapType(_) => "map",
                type_proto::Value::OptionalType(_) => "optional",
                type_proto::Value::SparseTensorType(_) => "sparse tensor",
                type_proto::Value::TensorType(_) => "tensor",
                type_proto::Value::OpaqueType(_) => "opaque",
            }
        ));
    };
    let dtype = to_dtype(tt.elem_type())?;
    let Some(shape) = tt.shape.as_ref() else {
        return Err("has no shape (unknown rank is not supported)".into());
    };
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        use crate::proto::tensor_shape_proto::dimension::Value as D;
        dims.push(match &d.value {
            Some(D::DimValue(n)) if *n >= 0 => Dim::Static(*n as usize),
            Some(D::DimValue(n)) => return Err(format!("dim {i} is negative ({n})")),
            Some(D::DimParam(p)) if !p.is_empty() => match bound.get(p.as_str()) {
                Some(&n) => Dim::Static(n),
                None => Dim::sym(p),
            },
            _ => {
                let sym = format!("{name}_d{i}");
                match bound.get(&sym) {
                    Some(&n) => Dim::Static(n),
                    None => Dim::sym(&sym),
                }
            }
        });
    }
    let shape = Shape(dims);
    if crate::ctx::shape_numel(&shape).is_none() {
        return Err(format!("shape {shape} has more than 2^48 elements"));
    }
    Ok(TensorType::new(dtype, shape))
}

/// Checks an output against the type the model declares (dtype and static dims).
fn check_declared(ctx: &Ctx, v: &crate::ctx::Val, decl: &ValueInfoProto) -> Result<(), String> {
    let Some(type_proto::Value::TensorType(tt)) =
        decl.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok(());
    };
    let got = ctx.ty(v);
    if tt.elem_type() != 0 {
        match to_dtype(tt.elem_type()) {
            Ok(d) if d == got.dtype => {}
            _ => {
                return Err(format!(
                    "output `{}` is declared {} but computes {}",
                    decl.name(),
                    onnx_type_name(tt.elem_type()),
                    got.dtype
                ))
            }
        }
    }
    if let Some(shape) = &tt.shape {
        use crate::proto::tensor_shape_proto::dimension::Value as D;
        let mismatch = shape.dim.len() != got.shape.rank()
            || shape.dim.iter().zip(got.shape.dims()).any(|(d, g)| {
                matches!((&d.value, g), (Some(D::DimValue(n)), Dim::Static(s)) if *n as usize != *s)
            });
        if mismatch {
            return Err(format!(
                "output `{}` computes shape {} which disagrees with its declaration",
                decl.name(),
                got.shape
            ));
        }
    }
    Ok(())
}

/// Maps a subgraph (a branch or loop body) whose inputs are bound to `inputs`, seeing the
/// enclosing names; returns its outputs.
///
/// # Errors
/// Unsupported nodes inside (listed), or an invalid body.
pub fn subgraph(ctx: &mut Ctx, env: &Env, g: &GraphProto, inputs: &[Value]) -> R<Vec<Value>> {
    let mut scope = env.scope.clone();
    for init in &g.initializer {
        let t = to_tensor(init, &mut ExternalData::new(None)).map_err(Fail::Unsupported)?;
        scope.insert(
            init.name().to_string(),
            Slot::Val(crate::ctx::Val::konst(t).into()),
        );
    }
    if g.input.len() != inputs.len() {
        return Err(Fail::Invalid(format!(
            "subgraph `{}` takes {} inputs, given {}",
            g.name(),
            g.input.len(),
            inputs.len()
        )));
    }
    for (vi, v) in g.input.iter().zip(inputs) {
        scope.insert(vi.name().to_string(), Slot::Val(v.clone()));
    }
    let cur = ctx.cur.clone();
    let unsupported = map_nodes(ctx, g, env.opsets, &mut scope, env.file, None)
        .map_err(|e| Fail::Invalid(format!("in subgraph `{}`: {e}", g.name())))?;
    ctx.cur = cur;
    if !unsupported.is_empty() {
        let list: Vec<String> = unsupported.iter().map(|u| u.to_string()).collect();
        return Err(Fail::Unsupported(format!(
            "subgraph `{}`: {}",
            g.name(),
            list.join("; ")
        )));
    }
    g.output
        .iter()
        .map(|o| match resolve(ctx, &mut scope, o.name()) {
            Some(v) => Ok(v),
            None => Err(Fail::Invalid(format!(
                "subgraph output `{}` is never computed",
                o.name()
            ))),
        })
        .collect()
}
