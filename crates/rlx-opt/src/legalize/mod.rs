//! Legalization: fit a graph to what one backend runs.
//!
//! A backend describes itself by a capability function ([`Caps`]): does it run this op
//! natively for these input types. Every op node is then *native*, *decomposed* (rewritten
//! by a rule of [`rules`] into primitives; each primitive is legalized again, so
//! decompositions nest) or *unsupported*. Unsupported nodes are collected and reported in
//! one error, never one at a time.

mod emitter;
mod report;
mod rules;
mod rules_int;
mod rules_nn;

pub use report::{DispatchEntry, DispatchReport, How, OpSummary};

use crate::error::{LegalizeError, UnsupportedNode};
use crate::rebuild::Rebuild;
use emitter::{Emitter, Failure};
use rlx_ir::{Graph, NodeId, TensorType};

/// A backend's capability function: true when it runs `op` natively on inputs of these
/// types.
pub type Caps<'a> = &'a dyn Fn(&rlx_ir::Op, &[&TensorType]) -> bool;

/// Rewrites `graph` so every op node runs natively on `device` according to `caps`, and
/// reports how each node was placed.
///
/// # Errors
/// [`LegalizeError::Unsupported`] listing every node that neither runs natively nor
/// decomposes into native primitives (with the full report attached);
/// [`LegalizeError::Graph`] when the input graph is invalid.
pub fn legalize(
    graph: &Graph,
    device: &str,
    caps: Caps<'_>,
) -> Result<(Graph, DispatchReport), LegalizeError> {
    let graph_err = |source| LegalizeError::Graph {
        device: device.to_string(),
        source,
    };
    graph.verify().map_err(graph_err)?;
    let mut rb = Rebuild::new(graph);
    let mut report = DispatchReport::new(device);
    let mut unsupported = Vec::new();
    for (idx, node) in graph.nodes().iter().enumerate() {
        let old_id = NodeId(idx);
        if node.op.is_leaf() {
            rb.copy_leaf(old_id);
            continue;
        }
        let inputs = rb.inputs(node);
        let tys: Vec<&TensorType> = inputs.iter().map(|&i| rb.new.ty(i)).collect();
        let mut entry = DispatchEntry {
            node: node.name.clone(),
            op: node.op.name(),
            device: device.to_string(),
            how: How::Native,
            detail: String::new(),
            dtype: node.ty.dtype,
            shape: node.ty.shape.clone(),
        };
        if caps(&node.op, &tys) {
            rb.copy(old_id).map_err(graph_err)?;
            report.entries.push(entry);
            continue;
        }
        let mut em = Emitter::new(&rb.new, caps, &node.name);
        match em.decompose_root(&node.op, &inputs, &node.ty) {
            Ok(result) => {
                let (pending, used) = em.finish();
                let base = rb.new.nodes().len();
                for (k, mut piece) in pending.into_iter().enumerate() {
                    if NodeId(base + k) == result {
                        piece.name = node.name.clone();
                    }
                    rb.new.push_node(piece);
                }
                rb.set(old_id, result);
                entry.how = How::Decomposed;
                entry.detail = format!("into {}", used.join(", "));
            }
            Err(failure) => {
                let reason = failure.reason(device);
                unsupported.push(UnsupportedNode {
                    node: node.name.clone(),
                    op: node.op.name(),
                    inputs: tys.iter().map(|t| t.to_string()).collect(),
                    output: node.ty.to_string(),
                    reason: reason.clone(),
                });
                // Keep the node so later nodes still see its type and get reported too.
                rb.copy(old_id).map_err(graph_err)?;
                entry.how = How::Unsupported;
                entry.detail = reason;
            }
        }
        report.entries.push(entry);
    }
    if !unsupported.is_empty() {
        return Err(LegalizeError::Unsupported {
            device: device.to_string(),
            nodes: unsupported,
            report: Box::new(report),
        });
    }
    let out = rb.finish();
    if cfg!(debug_assertions) {
        out.verify().map_err(graph_err)?;
    }
    Ok((out, report))
}

impl Failure {
    /// A sentence for the report and the error.
    fn reason(&self, device: &str) -> String {
        match self {
            Failure::NoRule => format!("`{device}` lacks it and no decomposition rule exists"),
            Failure::Missing { op, inputs } => {
                format!("its decomposition needs `{op}` on {inputs}, which `{device}` lacks")
            }
            Failure::Needs(what) => format!("cannot decompose: {what}"),
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_values;
