//! `cse`: common subexpression elimination. Two nodes with the same op, attributes and
//! inputs compute the same value; the later one is replaced by the earlier.
//!
//! Commutative binary ops ([`rlx_ir::BinaryOp::is_commutative`]) compare with sorted inputs, so
//! `a + b` and `b + a` merge. Constants merge when they are equal bit for bit (so `0.0` and
//! `-0.0` stay apart) and hold at most [`CSE_MAX_CONSTANT_ELEMENTS`] elements.

use crate::rebuild::Rebuild;
use rlx_ir::{Graph, IrError, NodeId, Op};
use std::collections::HashMap;

/// Constants larger than this are never compared (hashing them costs more than it saves).
pub const CSE_MAX_CONSTANT_ELEMENTS: usize = 4096;

/// Merges identical nodes.
///
/// # Errors
/// Inference failures while rebuilding (a bug, reported with the node name).
pub fn cse(graph: &Graph) -> Result<Graph, IrError> {
    let mut rb = Rebuild::new(graph);
    let mut seen: HashMap<Key, NodeId> = HashMap::new();
    for (idx, node) in graph.nodes().iter().enumerate() {
        let old_id = NodeId(idx);
        let inputs = rb.inputs(node);
        let key = match &node.op {
            Op::Input { .. } | Op::Param { .. } => None,
            Op::Constant(t) if t.numel() <= CSE_MAX_CONSTANT_ELEMENTS => Some(Key::Constant(
                t.dtype().name(),
                t.shape().to_vec(),
                t.data().to_le_bytes(),
            )),
            Op::Constant(_) => None,
            op => {
                let mut key_inputs = inputs.clone();
                if let Op::Binary(b) = op {
                    if b.is_commutative() {
                        key_inputs.sort();
                    }
                }
                // `Debug` of a non-constant op prints every attribute exactly (f64 `Debug`
                // round-trips), so it is a faithful key.
                Some(Key::Op(format!("{op:?}"), key_inputs))
            }
        };
        if let Some(&existing) = key.as_ref().and_then(|k| seen.get(k)) {
            rb.set(old_id, existing);
            continue;
        }
        let new_id = if node.op.is_leaf() {
            rb.copy_leaf(old_id)
        } else {
            let id = rb.push(node.op.clone(), &inputs, &node.name)?;
            rb.set(old_id, id);
            id
        };
        if let Some(k) = key {
            seen.insert(k, new_id);
        }
    }
    Ok(rb.finish())
}

#[derive(PartialEq, Eq, Hash)]
enum Key {
    Constant(&'static str, Vec<usize>, Vec<u8>),
    Op(String, Vec<NodeId>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{BinaryOp, DType, Tensor, UnaryOp};

    fn ops(g: &Graph) -> Vec<&'static str> {
        g.nodes().iter().map(|n| n.op.name()).collect()
    }

    #[test]
    fn merges_commuted_and_repeated_nodes() {
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, [4]);
        let b = g.input("b", DType::F32, [4]);
        let s1 = g.add(a, b).unwrap();
        let s2 = g.add(b, a).unwrap();
        let d1 = g.sub(a, b).unwrap();
        let d2 = g.sub(b, a).unwrap();
        let e1 = g.unary(UnaryOp::Exp, s1).unwrap();
        let e2 = g.unary(UnaryOp::Exp, s2).unwrap();
        let m = g.binary(BinaryOp::Mul, e1, e2).unwrap();
        let out = g.add(m, d1).unwrap();
        let out = g.add(out, d2).unwrap();
        g.output("y", out);
        let c = cse(&g).unwrap();
        c.verify().unwrap();
        assert_eq!(
            ops(&c),
            vec!["input", "input", "add", "sub", "sub", "exp", "mul", "add", "add"]
        );
        let mul = &c.nodes()[6];
        assert_eq!(mul.inputs[0], mul.inputs[1], "exp(a+b) is computed once");
    }

    #[test]
    fn constants_merge_by_value_but_not_signed_zeros() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [2]);
        let c1 = g.constant(Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap());
        let c2 = g.constant(Tensor::from_f32(&[2], vec![1.0, 2.0]).unwrap());
        let z1 = g.scalar(DType::F32, 0.0);
        let z2 = g.scalar(DType::F32, -0.0);
        let a = g.add(x, c1).unwrap();
        let b = g.add(x, c2).unwrap();
        let p = g.add(x, z1).unwrap();
        let q = g.add(x, z2).unwrap();
        let y = g.mul(a, b).unwrap();
        let y = g.mul(y, p).unwrap();
        let y = g.mul(y, q).unwrap();
        g.output("y", y);
        let c = cse(&g).unwrap();
        c.verify().unwrap();
        let n_const = c
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Constant(_)))
            .count();
        assert_eq!(n_const, 3);
        assert_eq!(c.nodes().iter().filter(|n| n.op.name() == "add").count(), 3);
    }

    #[test]
    fn attributes_distinguish_nodes() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [2, 3]);
        let r1 = g.reduce(rlx_ir::ReduceOp::Sum, x, &[0], true).unwrap();
        let r2 = g.reduce(rlx_ir::ReduceOp::Sum, x, &[0], true).unwrap();
        let r3 = g.reduce(rlx_ir::ReduceOp::Sum, x, &[1], true).unwrap();
        let r4 = g.reduce(rlx_ir::ReduceOp::Max, x, &[0], true).unwrap();
        let y = g.add(r1, r2).unwrap();
        let y = g.add(y, r4).unwrap();
        g.output("y", y);
        g.output("z", r3);
        let c = cse(&g).unwrap();
        assert_eq!(c.nodes().len(), g.nodes().len() - 1);
        // Outputs keep their names and order.
        assert_eq!(c.outputs()[0].0, "y");
        assert_eq!(c.outputs()[1].0, "z");
    }
}
