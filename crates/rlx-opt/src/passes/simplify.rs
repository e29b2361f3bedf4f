//! `simplify`: algebraic identities that are exact in IEEE arithmetic, so the optimized graph
//! gives bit-identical results.
//!
//! Rules, with `c` a constant whose elements all hold the value shown, and each rule applied
//! only when the result keeps the node's type (a constant that broadcasts `x` to a larger
//! shape blocks it):
//! - `x * 1`, `1 * x`, `x / 1`, `pow(x, 1)` → `x`;
//! - `x + (-0.0)`, `(-0.0) + x`, `x - (+0.0)` → `x` for floats; `x + 0`, `x - 0` for
//!   integers. `x + (+0.0)` is *not* `x`: `-0.0 + 0.0 = +0.0`;
//! - `x * (-1)` → `neg(x)` for floats;
//! - `neg(neg(x))`, `not(not(x))` → `x`; `abs(abs(x))`, `abs(neg(x))` → `abs(x)`;
//!   `relu(relu(x))` → `relu(x)`;
//! - `op(x, x)` → `x` for idempotent ops (max, min, and, or); `where(c, x, x)` → `x`;
//! - `cast(x)` to x's own dtype → `x`;
//! - reshape to the same shape, identity transpose, expand to the same shape, a slice
//!   covering every element, a concat of one input → `x`;
//! - `reshape(reshape(x))` → one reshape; `transpose(transpose(x, p), q)` → one transpose
//!   with the composed permutation.
//!
//! Nodes bypassed by a rule are left for `dce`.

use crate::rebuild::Rebuild;
use rlx_ir::{slice_range, BinaryOp, DType, Graph, IrError, NodeId, Op, UnaryOp};

/// Applies the identities once, in graph order; a chain simplifies fully because each
/// node sees its already simplified inputs.
///
/// # Errors
/// Inference failures while rebuilding (a bug, reported with the node name).
pub fn simplify(graph: &Graph) -> Result<Graph, IrError> {
    let mut rb = Rebuild::new(graph);
    for (idx, node) in graph.nodes().iter().enumerate() {
        let old_id = NodeId(idx);
        if node.op.is_leaf() {
            rb.copy_leaf(old_id);
            continue;
        }
        let inputs = rb.inputs(node);
        let new_id = match rewrite(&rb.new, &node.op, &inputs) {
            Rewrite::Keep => rb.push(node.op.clone(), &inputs, &node.name)?,
            Rewrite::Reuse(id) if rb.new.ty(id) == &node.ty => id,
            Rewrite::Reuse(_) => rb.push(node.op.clone(), &inputs, &node.name)?,
            Rewrite::Replace(op, ins) => {
                let id = rb.push(op, &ins, &node.name)?;
                debug_assert_eq!(rb.new.ty(id), &node.ty, "simplify kept the type");
                id
            }
        };
        rb.set(old_id, new_id);
    }
    Ok(rb.finish())
}

enum Rewrite {
    /// no rule applies
    Keep,
    /// the node equals this existing node (used only when the types agree)
    Reuse(NodeId),
    /// the node equals this op over these inputs
    Replace(Op, Vec<NodeId>),
}

fn rewrite(g: &Graph, op: &Op, ins: &[NodeId]) -> Rewrite {
    match op {
        Op::Binary(b) => binary(g, *b, ins[0], ins[1]),
        Op::Unary(u) => unary(g, *u, ins[0]),
        Op::Where if ins[1] == ins[2] => Rewrite::Reuse(ins[1]),
        Op::Cast(to) if g.ty(ins[0]).dtype == *to => Rewrite::Reuse(ins[0]),
        Op::Reshape(shape) => {
            if &g.ty(ins[0]).shape == shape {
                return Rewrite::Reuse(ins[0]);
            }
            match &g.node(ins[0]).op {
                Op::Reshape(_) => {
                    Rewrite::Replace(Op::Reshape(shape.clone()), vec![g.node(ins[0]).inputs[0]])
                }
                _ => Rewrite::Keep,
            }
        }
        Op::Transpose(perm) => {
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return Rewrite::Reuse(ins[0]);
            }
            match &g.node(ins[0]).op {
                Op::Transpose(inner) => {
                    let composed: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
                    let src = g.node(ins[0]).inputs[0];
                    if composed.iter().enumerate().all(|(i, &p)| i == p) {
                        Rewrite::Reuse(src)
                    } else {
                        Rewrite::Replace(Op::Transpose(composed), vec![src])
                    }
                }
                _ => Rewrite::Keep,
            }
        }
        Op::Expand(_) | Op::Concat { .. } if ins.len() == 1 => Rewrite::Reuse(ins[0]),
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            let dims = g.ty(ins[0]).shape.as_static();
            let whole = dims.is_some_and(|dims| {
                axes.iter().enumerate().all(|(i, &a)| {
                    steps[i] == 1 && slice_range(dims[a], starts[i], ends[i], 1) == (0, dims[a])
                })
            });
            if whole {
                Rewrite::Reuse(ins[0])
            } else {
                Rewrite::Keep
            }
        }
        _ => Rewrite::Keep,
    }
}

fn binary(g: &Graph, b: BinaryOp, x: NodeId, y: NodeId) -> Rewrite {
    if x == y && b.is_idempotent() {
        return Rewrite::Reuse(x);
    }
    let float = g.ty(x).dtype.is_float();
    let is = |id: NodeId, v: f64| all_equal(g, id, v);
    match b {
        BinaryOp::Mul if is(y, 1.0) => Rewrite::Reuse(x),
        BinaryOp::Mul if is(x, 1.0) => Rewrite::Reuse(y),
        BinaryOp::Mul if float && is(y, -1.0) && g.ty(y).shape.rank() == 0 => {
            Rewrite::Replace(Op::Unary(UnaryOp::Neg), vec![x])
        }
        BinaryOp::Div | BinaryOp::Pow if is(y, 1.0) => Rewrite::Reuse(x),
        BinaryOp::Add if float && is_signed_zero(g, y, true) => Rewrite::Reuse(x),
        BinaryOp::Add if float && is_signed_zero(g, x, true) => Rewrite::Reuse(y),
        BinaryOp::Sub if float && is_signed_zero(g, y, false) => Rewrite::Reuse(x),
        BinaryOp::Add if !float && is(y, 0.0) => Rewrite::Reuse(x),
        BinaryOp::Add if !float && is(x, 0.0) => Rewrite::Reuse(y),
        BinaryOp::Sub if !float && is(y, 0.0) => Rewrite::Reuse(x),
        _ => Rewrite::Keep,
    }
}

fn unary(g: &Graph, u: UnaryOp, x: NodeId) -> Rewrite {
    let inner = &g.node(x);
    let inner_op = match inner.op {
        Op::Unary(v) => Some(v),
        _ => None,
    };
    match (u, inner_op) {
        (UnaryOp::Neg, Some(UnaryOp::Neg)) | (UnaryOp::Not, Some(UnaryOp::Not)) => {
            Rewrite::Reuse(inner.inputs[0])
        }
        (UnaryOp::Abs, Some(UnaryOp::Abs)) | (UnaryOp::Relu, Some(UnaryOp::Relu)) => {
            Rewrite::Reuse(x)
        }
        (UnaryOp::Abs, Some(UnaryOp::Neg)) => {
            Rewrite::Replace(Op::Unary(UnaryOp::Abs), vec![inner.inputs[0]])
        }
        _ => Rewrite::Keep,
    }
}

/// True when `id` is a constant whose elements all equal `v` (NaN never matches).
fn all_equal(g: &Graph, id: NodeId, v: f64) -> bool {
    match &g.node(id).op {
        Op::Constant(t) => t.numel() > 0 && (0..t.numel()).all(|i| t.get_f64(i) == v),
        _ => false,
    }
}

/// True when `id` is a float constant of zeros that all have the given sign bit.
fn is_signed_zero(g: &Graph, id: NodeId, negative: bool) -> bool {
    match &g.node(id).op {
        Op::Constant(t) if t.dtype() != DType::Bool => {
            t.numel() > 0
                && (0..t.numel()).all(|i| {
                    let v = t.get_f64(i);
                    v == 0.0 && v.is_sign_negative() == negative
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
