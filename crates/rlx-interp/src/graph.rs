//! Whole-graph evaluation: binds inputs and params by name, evaluates nodes in order and
//! drops each intermediate after its last use.

use super::{eval_op, type_of};
use crate::InterpError;
use rlx_ir::{Graph, Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// Checks a bound tensor against its declared type.
pub(crate) fn check_bound(
    kind: &'static str,
    name: &str,
    declared: &TensorType,
    t: &Tensor,
) -> Result<(), InterpError> {
    let got = type_of(t);
    if &got != declared {
        return Err(InterpError::Mismatch {
            kind,
            name: name.to_string(),
            expected: declared.to_string(),
            got: got.to_string(),
        });
    }
    Ok(())
}

/// Evaluates a graph with static shapes on the interpreter and returns its outputs in
/// declaration order.
///
/// # Errors
/// A symbolic shape, a missing input or param, a bound tensor whose dtype or shape differs
/// from the declaration, or a node whose op fails (wrapped with the node name).
pub fn run_graph(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    params: &HashMap<String, Arc<Tensor>>,
) -> Result<Vec<(String, Tensor)>, InterpError> {
    let nodes = graph.nodes();
    if let Some(n) = nodes.iter().find(|n| !n.ty.shape.is_static()) {
        return Err(InterpError::Invalid(format!(
            "node `{}` has symbolic type {}; bind its dims before running",
            n.name, n.ty
        )));
    }
    for (name, id) in graph.outputs() {
        if id.0 >= nodes.len() {
            return Err(InterpError::Invalid(format!(
                "output `{name}` refers to node #{} of {}",
                id.0,
                nodes.len()
            )));
        }
    }
    let mut uses = graph.use_counts();
    let mut values: Vec<Option<Arc<Tensor>>> = vec![None; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let value = match &node.op {
            Op::Input { name } => {
                let t = inputs.get(name).ok_or_else(|| InterpError::Missing {
                    kind: "input",
                    name: name.clone(),
                })?;
                check_bound("input", name, &node.ty, t)?;
                Arc::new(t.clone())
            }
            Op::Param { name } => {
                let t = params.get(name).ok_or_else(|| InterpError::Missing {
                    kind: "param",
                    name: name.clone(),
                })?;
                check_bound("param", name, &node.ty, t)?;
                t.clone()
            }
            op => {
                let mut args = Vec::with_capacity(node.inputs.len());
                for x in &node.inputs {
                    let v = values.get(x.0).and_then(|v| v.as_ref()).ok_or_else(|| {
                        InterpError::Invalid(format!(
                            "node `{}` uses node #{} before it is computed",
                            node.name, x.0
                        ))
                    })?;
                    args.push(v.clone());
                }
                let refs: Vec<&Tensor> = args.iter().map(|a| &**a).collect();
                let t = eval_op(op, &refs).map_err(|e| InterpError::Node {
                    node: node.name.clone(),
                    source: Box::new(e),
                })?;
                for x in &node.inputs {
                    uses[x.0] -= 1;
                    if uses[x.0] == 0 {
                        values[x.0] = None;
                    }
                }
                Arc::new(t)
            }
        };
        values[i] = Some(value);
    }
    Ok(graph
        .outputs()
        .iter()
        .map(|(name, id)| {
            let t = values[id.0]
                .as_ref()
                .expect("outputs are kept alive by their use");
            (name.clone(), (**t).clone())
        })
        .collect())
}
