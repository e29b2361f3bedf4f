//! Mixed precision: matrix products (matmul, conv2d, attention) of an f32 graph computed in
//! f16 or bf16, everything else (norms, softmax, reductions, elementwise) left in f32.
//!
//! Each product reads its operands in the low dtype and its result is cast back to f32, so
//! the graph's inputs and outputs keep their types; backends accumulate products in f32
//! (cuBLASLt compute type, the CPU's f32 GEMM). A weight used only by products becomes a
//! low-precision param, converted once when it is bound instead of cast on every run: the
//! runtime converts the f32 weights it is given (see [`AutocastReport::params`]).

use crate::rebuild::Rebuild;
use crate::OptError;
use rlx_ir::{DType, Graph, Node, NodeId, Op, TensorType};
use std::collections::HashMap;

/// What [`autocast`] changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AutocastReport {
    /// f32 params now declared in the low dtype (bind f32 values converted to it)
    pub params: Vec<String>,
    /// products now computed in the low dtype
    pub products: usize,
}

/// True for the ops autocast runs in low precision.
pub(super) fn is_product(op: &Op) -> bool {
    matches!(op, Op::MatMul | Op::Conv2d(_) | Op::Attention { .. })
}

/// True when input `i` of `n` is a weight (a param or a constant).
pub(super) fn is_weight_input(graph: &Graph, n: &Node, i: usize) -> bool {
    n.inputs
        .get(i)
        .is_some_and(|&w| matches!(graph.node(w).op, Op::Param { .. } | Op::Constant(_)))
}

/// Refuses a `low` that is not f16 or bf16, naming `pass`.
pub(super) fn check_half(low: DType, pass: &'static str) -> Result<(), OptError> {
    if matches!(low, DType::F16 | DType::BF16) {
        return Ok(());
    }
    Err(OptError::Pass {
        pass,
        source: rlx_ir::IrError::Infer {
            node: "graph".into(),
            op: pass,
            inputs: String::new(),
            message: format!("mixed precision computes in f16 or bf16, not {low}"),
        },
    })
}

/// Re-declares f32 param `node` (old id `id`) in `low` on the new graph.
pub(super) fn low_param(rb: &mut Rebuild<'_>, id: NodeId, node: &Node, low: DType) -> NodeId {
    let new = rb.new.push_node(Node {
        op: node.op.clone(),
        inputs: Vec::new(),
        ty: TensorType::new(low, node.ty.shape.clone()),
        name: node.name.clone(),
    });
    rb.set(id, new);
    new
}

/// Rewrites `graph` so its f32 matrix products run in `low` (f16 or bf16).
///
/// # Errors
/// `low` is not f16 or bf16, or a rebuilt node fails inference (a pass bug, reported as
/// [`OptError::Pass`] naming `autocast`).
pub fn autocast(graph: &Graph, low: DType) -> Result<(Graph, AutocastReport), OptError> {
    autocast_where(graph, low, &|_, _| true)
}

/// [`autocast`] for the products `takes` accepts, given the op and whether its right
/// operand is a weight (a param or a constant): a backend without low-precision kernels for
/// some products keeps those in f32, since casting their operands would only add rounding.
///
/// # Errors
/// As [`autocast`].
pub fn autocast_where(
    graph: &Graph,
    low: DType,
    takes: &dyn Fn(&Op, bool) -> bool,
) -> Result<(Graph, AutocastReport), OptError> {
    let err = |source| OptError::Pass {
        pass: "autocast",
        source,
    };
    check_half(low, "autocast")?;
    let nodes = graph.nodes();
    let f32_product = |n: &Node| {
        is_product(&n.op)
            && takes(&n.op, is_weight_input(graph, n, 1))
            && n.ty.dtype == DType::F32
            && n.inputs.iter().all(|&i| graph.ty(i).dtype == DType::F32)
    };
    // Params whose every use is an f32 product are retyped.
    let mut only_products = vec![true; nodes.len()];
    let mut used = vec![false; nodes.len()];
    for n in nodes {
        for &i in &n.inputs {
            used[i.0] = true;
            only_products[i.0] &= f32_product(n);
        }
    }
    for (name, id) in graph.outputs() {
        let _ = name;
        only_products[id.0] = false;
    }
    let mut report = AutocastReport::default();
    let mut rb = Rebuild::new(graph);
    // one cast per source node, shared by every product that reads it
    let mut low_of: HashMap<NodeId, NodeId> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let id = NodeId(i);
        match &node.op {
            Op::Param { name } if node.ty.dtype == DType::F32 && used[i] && only_products[i] => {
                let new = low_param(&mut rb, id, node, low);
                low_of.insert(id, new);
                report.params.push(name.clone());
            }
            _ if f32_product(node) => {
                let mut ins = Vec::with_capacity(node.inputs.len());
                for &src in &node.inputs {
                    let cast = match low_of.get(&src) {
                        Some(&c) => c,
                        None => {
                            let from = rb.get(src);
                            let name = format!("{}.{low}", graph.node(src).name);
                            let c = rb.push(Op::Cast(low), &[from], &name).map_err(err)?;
                            low_of.insert(src, c);
                            c
                        }
                    };
                    ins.push(cast);
                }
                let name = format!("{}.{low}", node.name);
                let product = rb.push(node.op.clone(), &ins, &name).map_err(err)?;
                let back = rb
                    .push(Op::Cast(DType::F32), &[product], &node.name)
                    .map_err(err)?;
                rb.set(id, back);
                report.products += 1;
            }
            _ => {
                rb.copy(id).map_err(err)?;
            }
        }
    }
    let out = rb.finish();
    out.verify().map_err(err)?;
    Ok((out, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Graph;

    fn mlp() -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [4, 8]);
        let w1 = g.param("w1", DType::F32, [8, 16]);
        let b1 = g.param("b1", DType::F32, [16]);
        let w2 = g.param("w2", DType::F32, [16, 8]);
        let h = g.matmul(x, w1).unwrap();
        let h = g.add(h, b1).unwrap();
        let h = g.relu(h).unwrap();
        let y = g.matmul(h, w2).unwrap();
        // w2 is also read outside a product: it must stay f32
        let s = g.reduce(rlx_ir::ReduceOp::Sum, w2, &[0, 1], false).unwrap();
        let y = g.add(y, s).unwrap();
        g.output("y", y);
        g
    }

    #[test]
    fn products_run_low_and_types_at_the_edges_stay() {
        let (g, report) = autocast(&mlp(), DType::F16).unwrap();
        assert_eq!(report.products, 2);
        assert_eq!(report.params, vec!["w1".to_string()]);
        let ty = |name: &str| {
            let (_, id) = g.params().into_iter().find(|(n, _)| n == name).unwrap();
            g.ty(id).dtype
        };
        assert_eq!(ty("w1"), DType::F16);
        assert_eq!(ty("w2"), DType::F32);
        assert_eq!(ty("b1"), DType::F32);
        let (_, y) = g.outputs()[0].clone();
        assert_eq!(g.ty(y).dtype, DType::F32);
        let matmuls: Vec<&Node> = g.nodes().iter().filter(|n| n.op == Op::MatMul).collect();
        assert!(matmuls.iter().all(|n| n.ty.dtype == DType::F16));
    }

    #[test]
    fn attention_and_bf16() {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, [1, 2, 4, 8]);
        let k = g.param("k", DType::F32, [1, 2, 4, 8]);
        let a = g.attention(q, k, k, None, false, None).unwrap();
        g.output("a", a);
        let (g, report) = autocast(&g, DType::BF16).unwrap();
        assert_eq!(report.products, 1);
        assert_eq!(report.params, vec!["k".to_string()]);
        assert!(g
            .nodes()
            .iter()
            .any(|n| matches!(n.op, Op::Attention { .. }) && n.ty.dtype == DType::BF16));
    }

    #[test]
    fn only_half_types() {
        assert!(autocast(&mlp(), DType::F64).is_err());
    }
}
