//! Opt-in approximations a user can ask for at compile time. Today one: exact GELU
//! (`x Φ(x)`, erf-based) run as its tanh approximation, which backends fuse where exact
//! GELU cannot go (cuBLASLt's GEMM epilogue has only the tanh form), at a documented cost in
//! accuracy. Never applied unless asked for.

use crate::rebuild::Rebuild;
use crate::OptError;
use rlx_ir::{Graph, NodeId, Op, UnaryOp};

/// Largest absolute difference between tanh-approximated and exact GELU (at x ≈ 2.70, in
/// f64). In the negative tail the relative difference grows: 47% at x = −4.06, where
/// |GELU| ≈ 1.2e-4.
pub const GELU_TANH_MAX_ABS_ERROR: f64 = 4.74e-4;

/// Rewrites every exact GELU of `graph` as the tanh approximation
/// `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))` and returns the graph with the number of
/// nodes rewritten.
///
/// # Errors
/// A rebuilt node fails inference (a pass bug, reported as [`OptError::Pass`] naming
/// `approximate_gelu`).
pub fn approximate_gelu(graph: &Graph) -> Result<(Graph, usize), OptError> {
    let err = |source| OptError::Pass {
        pass: "approximate_gelu",
        source,
    };
    let mut rb = Rebuild::new(graph);
    let mut rewritten = 0;
    for (i, node) in graph.nodes().iter().enumerate() {
        let id = NodeId(i);
        if let Op::Unary(UnaryOp::GELU) = node.op {
            let input = rb.get(node.inputs[0]);
            let new = rb
                .push(Op::Unary(UnaryOp::GELU_TANH), &[input], &node.name)
                .map_err(err)?;
            rb.set(id, new);
            rewritten += 1;
        } else {
            rb.copy(id).map_err(err)?;
        }
    }
    let out = rb.finish();
    out.verify().map_err(err)?;
    Ok((out, rewritten))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::run;
    use rlx_ir::{DType, Shape};

    #[test]
    fn gelu_becomes_its_tanh_form_within_the_documented_error() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, Shape::of(&[4, 64]));
        let y = g.unary(UnaryOp::GELU, x).unwrap();
        let z = g.unary(UnaryOp::GELU, y).unwrap();
        let w = g.unary(UnaryOp::Relu, z).unwrap();
        g.output("w", w);
        let (a, n) = approximate_gelu(&g).unwrap();
        assert_eq!(n, 2);
        let ops: Vec<&Op> = a.nodes().iter().map(|n| &n.op).collect();
        assert!(!ops.contains(&&Op::Unary(UnaryOp::GELU)));
        assert_eq!(
            ops.iter()
                .filter(|o| ***o == Op::Unary(UnaryOp::GELU_TANH))
                .count(),
            2
        );
        assert!(ops.contains(&&Op::Unary(UnaryOp::Relu)));
        // Same seed, same random inputs: the outputs differ, but by less than twice the
        // bound (two GELUs in a row, the second's slope at most ~1.13).
        let (exact, approx) = (run(&g, 3), run(&a, 3));
        let (e, p) = (exact[0].1.to_f64_vec(), approx[0].1.to_f64_vec());
        let worst = e
            .iter()
            .zip(&p)
            .map(|(e, p)| (e - p).abs())
            .fold(0.0, f64::max);
        assert!(
            worst > 0.0 && worst < 2.2 * GELU_TANH_MAX_ABS_ERROR,
            "{worst}"
        );
        // A graph without GELU comes back unchanged.
        let (b, n) = approximate_gelu(&a).unwrap();
        assert_eq!((n, b.nodes().len()), (0, a.nodes().len()));
    }
}
