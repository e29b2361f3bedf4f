//! `dce`: dead code elimination. Drops every node from which no output can be reached.
//!
//! Run-time inputs are kept even when unused: the user declared them, and keeping them
//! keeps input validation (names, dtypes, shapes) the same before and after optimization.
//! Unused params and constants are dropped.

use crate::rebuild::Rebuild;
use rlx_ir::{Graph, IrError, NodeId, Op};

/// Removes nodes that do not reach an output.
///
/// # Errors
/// Inference failures while rebuilding (a bug, reported with the node name).
pub fn dce(graph: &Graph) -> Result<Graph, IrError> {
    let nodes = graph.nodes();
    let mut live = vec![false; nodes.len()];
    for (_, id) in graph.outputs() {
        live[id.0] = true;
    }
    for idx in (0..nodes.len()).rev() {
        if matches!(nodes[idx].op, Op::Input { .. }) {
            live[idx] = true;
        }
        if live[idx] {
            for i in &nodes[idx].inputs {
                live[i.0] = true;
            }
        }
    }
    let mut rb = Rebuild::new(graph);
    for (idx, is_live) in live.iter().enumerate() {
        if *is_live {
            rb.copy(NodeId(idx))?;
        }
    }
    Ok(rb.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{DType, UnaryOp};

    #[test]
    fn drops_dead_nodes_keeps_inputs() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [4]);
        let unused = g.input("unused", DType::F32, [2]);
        let w = g.param("w", DType::F32, [4]);
        let _dead_param = g.param("dead", DType::F32, [4]);
        let dead = g.unary(UnaryOp::Exp, unused).unwrap();
        let _dead2 = g.unary(UnaryOp::Log, dead).unwrap();
        let y = g.mul(x, w).unwrap();
        g.output("y", y);
        let d = dce(&g).unwrap();
        d.verify().unwrap();
        assert_eq!(
            d.to_string(),
            "%0 = input(\"x\") : f32[4]  # x\n\
             %1 = input(\"unused\") : f32[2]  # unused\n\
             %2 = param(\"w\") : f32[4]  # w\n\
             %3 = mul(%0, %2) : f32[4]  # mul_6\n\
             output \"y\" = %3\n"
        );
    }
}
