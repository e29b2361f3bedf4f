//! Half-precision activations: an f32 graph stored in f16 or bf16 from its matrix products on,
//! as PyTorch's `model.half()` runs it, so the tensors between products (residual stream,
//! norms, softmax, GELU) move half the bytes and no cast kernel sits between a product and
//! the elementwise work around it.
//!
//! Low precision starts at the products the backend takes ([`autocast`]'s rule) and at
//! gathers from a weight table (embeddings), and flows forward through every op the backend
//! runs in the low dtype: a node goes low when one of its float inputs is low. Reductions stay
//! f32 (their sums may leave the low range), and so does everything after them, which keeps
//! pooling and normalization tails exact. Backends compute inside each kernel in f32 (norms,
//! softmax and products accumulate in f32); only storage is low. The graph's inputs and
//! outputs keep their types; weights read only by low nodes become low params, converted once
//! when bound (see [`AutocastReport::params`]). Constants read by low nodes are converted
//! saturating, so `f32::MIN` used as an additive mask stays the most negative finite value.
//!
//! [`autocast`]: super::autocast::autocast

use super::autocast::{check_half, is_product, is_weight_input, low_param, AutocastReport};
use crate::rebuild::Rebuild;
use crate::OptError;
use rlx_ir::{DType, Graph, NodeId, Op, Tensor, TensorType};
use std::collections::HashMap;

/// Ops that may be stored low when an input is (or that start low precision): everything
/// whose kernels accumulate in f32 or only move data. Reductions, integer and quantized ops
/// are absent.
fn may_be_low(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::Reshape(_)
            | Op::Transpose(_)
            | Op::Slice { .. }
            | Op::Expand(_)
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::Pad { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::MatMul
            | Op::Conv2d(_)
            | Op::Attention { .. }
    )
}

/// Rewrites `graph` so its activations are stored in `low` (f16 or bf16) from the products
/// on. `product(op, weight)` says which products the backend runs in `low` (as in
/// [`super::autocast::autocast_where`]); `runs(op, inputs)` whether it runs an op for
/// low-typed inputs at all, so nothing is made low that the backend would have to
/// decompose.
///
/// # Errors
/// `low` is not f16 or bf16, or a rebuilt node fails inference ([`OptError::Pass`] naming
/// `autocast_all`).
pub fn autocast_all(
    graph: &Graph,
    low: DType,
    product: &dyn Fn(&Op, bool) -> bool,
    runs: &dyn Fn(&Op, &[&TensorType]) -> bool,
) -> Result<(Graph, AutocastReport), OptError> {
    let err = |source| OptError::Pass {
        pass: "autocast_all",
        source,
    };
    check_half(low, "autocast_all")?;
    let max = low
        .max_finite()
        .expect("f16 and bf16 have a largest finite value");
    let nodes = graph.nodes();
    // Decide, in order, which nodes are stored low.
    let mut is_low = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if n.ty.dtype != DType::F32 || !may_be_low(&n.op) {
            continue;
        }
        let floats_f32 = n.inputs.iter().all(|&x| {
            let d = graph.ty(x).dtype;
            !d.is_float() || d == DType::F32
        });
        if !floats_f32 {
            continue;
        }
        let starts = if is_product(&n.op) {
            product(&n.op, is_weight_input(graph, n, 1))
        } else {
            matches!(n.op, Op::Gather { .. }) && is_weight_input(graph, n, 0)
        };
        if !starts && !n.inputs.iter().any(|&x| is_low[x.0]) {
            continue;
        }
        let tys: Vec<TensorType> = n
            .inputs
            .iter()
            .map(|&x| {
                let t = graph.ty(x);
                if t.dtype == DType::F32 {
                    TensorType::new(low, t.shape.clone())
                } else {
                    t.clone()
                }
            })
            .collect();
        let refs: Vec<&TensorType> = tys.iter().collect();
        is_low[i] = runs(&n.op, &refs);
    }
    // f32 params read only by low nodes become low params.
    let mut low_reader_only = vec![true; nodes.len()];
    let mut used = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &x in &n.inputs {
            used[x.0] = true;
            low_reader_only[x.0] &= is_low[i];
        }
    }
    for (_, id) in graph.outputs() {
        low_reader_only[id.0] = false;
    }

    let mut report = AutocastReport::default();
    let mut rb = Rebuild::new(graph);
    // the low form of an f32 node (the node itself when stored low, else one shared cast),
    // and the f32 form of a low node (one shared cast back)
    let mut as_low: HashMap<NodeId, NodeId> = HashMap::new();
    let mut as_f32: HashMap<NodeId, NodeId> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let id = NodeId(i);
        if let Op::Param { name } = &node.op {
            if node.ty.dtype == DType::F32 && used[i] && low_reader_only[i] {
                let new = low_param(&mut rb, id, node, low);
                as_low.insert(id, new);
                report.params.push(name.clone());
                continue;
            }
        }
        if !is_low[i] {
            let mut ins = Vec::with_capacity(node.inputs.len());
            for &x in &node.inputs {
                ins.push(f32_form(&mut rb, &mut as_f32, &is_low, x, graph).map_err(err)?);
            }
            if node.op.is_leaf() {
                rb.copy_leaf(id);
            } else {
                let new = rb.push(node.op.clone(), &ins, &node.name).map_err(err)?;
                rb.set(id, new);
            }
            continue;
        }
        let mut ins = Vec::with_capacity(node.inputs.len());
        for &x in &node.inputs {
            // non-float inputs pass as they are, low inputs are already low
            let new = if graph.ty(x).dtype != DType::F32 || is_low[x.0] {
                rb.get(x)
            } else if let Some(&c) = as_low.get(&x) {
                c
            } else {
                let src = graph.node(x);
                let c = match &src.op {
                    Op::Constant(t) => rb.new.constant(saturating(t, low, max)),
                    _ => {
                        let name = format!("{}.{low}", src.name);
                        rb.push(Op::Cast(low), &[rb.get(x)], &name).map_err(err)?
                    }
                };
                as_low.insert(x, c);
                c
            };
            ins.push(new);
        }
        if is_product(&node.op) {
            report.products += 1;
        }
        let new = rb.push(node.op.clone(), &ins, &node.name).map_err(err)?;
        rb.set(id, new);
    }
    let mut out = std::mem::replace(&mut rb.new, Graph::new());
    for (name, id) in graph.outputs() {
        let new = if is_low[id.0] {
            let low_id = rb.get(*id);
            out.push(
                Op::Cast(DType::F32),
                &[low_id],
                Some(&format!("{name}.f32")),
            )
            .map_err(err)?
        } else {
            rb.get(*id)
        };
        out.output(name, new);
    }
    out.verify().map_err(err)?;
    Ok((out, report))
}

/// The f32 form of old node `x` in the new graph: a cast back when `x` is stored low.
fn f32_form(
    rb: &mut Rebuild<'_>,
    as_f32: &mut HashMap<NodeId, NodeId>,
    is_low: &[bool],
    x: NodeId,
    graph: &Graph,
) -> Result<NodeId, rlx_ir::IrError> {
    if !is_low[x.0] {
        return Ok(rb.get(x));
    }
    if let Some(&c) = as_f32.get(&x) {
        return Ok(c);
    }
    let name = format!("{}.f32", graph.node(x).name);
    let c = rb.push(Op::Cast(DType::F32), &[rb.get(x)], &name)?;
    as_f32.insert(x, c);
    Ok(c)
}

/// `t` in `low`, finite values clamped to its range first.
fn saturating(t: &Tensor, low: DType, max: f64) -> Tensor {
    let values: Vec<f64> = t
        .to_f64_vec()
        .into_iter()
        .map(|v| if v.is_finite() { v.clamp(-max, max) } else { v })
        .collect();
    Tensor::from_f64(low, t.shape(), &values).expect("same element count")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::{BinaryOp, ReduceOp, Shape};

    fn every_product(_: &Op, _: bool) -> bool {
        true
    }

    fn runs_all(_: &Op, _: &[&TensorType]) -> bool {
        true
    }

    /// A BERT-like block: embedding gather, a masked attention-free layer with a residual,
    /// LayerNorm, then a pooled sum.
    fn block() -> Graph {
        let mut g = Graph::new();
        let ids = g.input("ids", DType::I64, [2, 4]);
        let table = g.param("table", DType::F32, [10, 8]);
        let w = g.param("w", DType::F32, [8, 8]);
        let b = g.param("b", DType::F32, [8]);
        let gamma = g.param("gamma", DType::F32, [8]);
        let beta = g.param("beta", DType::F32, [8]);
        let x = g.gather(table, ids, 0).unwrap();
        let h = g.matmul(x, w).unwrap();
        let h = g.add(h, b).unwrap();
        let minv = g.scalar(DType::F32, f32::MIN as f64);
        let h = g.binary(BinaryOp::Max, h, minv).unwrap();
        let r = g.add(h, x).unwrap();
        let y = g.layer_norm(r, gamma, beta, 1e-5).unwrap();
        g.output("hidden", y);
        let s = g.reduce(ReduceOp::Sum, y, &[1], false).unwrap();
        let half = g.scalar(DType::F32, 0.5);
        let s = g.mul(s, half).unwrap();
        g.output("pooled", s);
        g
    }

    #[test]
    fn activations_go_low_from_products_and_gathers_and_edges_keep_types() {
        let g = block();
        let (out, report) = autocast_all(&g, DType::F16, &every_product, &runs_all).unwrap();
        assert_eq!(report.products, 1);
        let mut params = report.params.clone();
        params.sort();
        assert_eq!(params, ["b", "beta", "gamma", "table", "w"]);
        for (_, id) in out.outputs() {
            assert_eq!(out.ty(*id).dtype, DType::F32);
        }
        let low_of = |pred: &dyn Fn(&Op) -> bool| {
            out.nodes()
                .iter()
                .filter(|n| pred(&n.op))
                .map(|n| n.ty.dtype)
                .collect::<Vec<_>>()
        };
        assert_eq!(low_of(&|op| matches!(op, Op::Gather { .. })), [DType::F16]);
        assert_eq!(
            low_of(&|op| matches!(op, Op::LayerNorm { .. })),
            [DType::F16]
        );
        // the reduction and what follows it stay f32
        assert_eq!(low_of(&|op| matches!(op, Op::Reduce { .. })), [DType::F32]);
        assert!(out
            .nodes()
            .iter()
            .filter(|n| n.op == Op::Binary(BinaryOp::Mul))
            .all(|n| n.ty.dtype == DType::F32));
        // f32::MIN became f16's most negative finite value, not -inf
        let mins: Vec<f64> = out
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Constant(t) if t.dtype() == DType::F16 => Some(t.to_f64_vec()[0]),
                _ => None,
            })
            .collect();
        assert_eq!(mins, [-65504.0]);
        assert_eq!(out.ty(out.outputs()[0].1).shape, Shape::of(&[2, 4, 8]));
    }

    #[test]
    fn ops_the_backend_declines_stay_f32_with_casts_around_them() {
        let g = block();
        let no_norm = |op: &Op, _: &[&TensorType]| !matches!(op, Op::LayerNorm { .. });
        let (out, report) = autocast_all(&g, DType::BF16, &every_product, &no_norm).unwrap();
        assert!(!report.params.contains(&"gamma".to_string()));
        let norm = out
            .nodes()
            .iter()
            .find(|n| matches!(n.op, Op::LayerNorm { .. }))
            .unwrap();
        assert_eq!(norm.ty.dtype, DType::F32);
        assert!(out
            .nodes()
            .iter()
            .any(|n| n.op == Op::Cast(DType::F32) && n.ty.dtype == DType::F32));
        assert!(out
            .nodes()
            .iter()
            .any(|n| n.op == Op::MatMul && n.ty.dtype == DType::BF16));
    }

    #[test]
    fn a_graph_without_products_or_gathers_is_unchanged_in_types() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [4]);
        let y = g.unary(rlx_ir::UnaryOp::Exp, x).unwrap();
        g.output("y", y);
        let (out, report) = autocast_all(&g, DType::F16, &every_product, &runs_all).unwrap();
        assert_eq!(report, AutocastReport::default());
        assert!(out.nodes().iter().all(|n| n.ty.dtype != DType::F16));
        assert!(autocast_all(&g, DType::F32, &every_product, &runs_all).is_err());
    }
}
