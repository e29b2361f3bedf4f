//! `fold`: constant folding. A node whose inputs are all constants is evaluated once at
//! compile time and replaced by a constant.
//!
//! The evaluator is supplied by the caller (the runtime passes the validation interpreter,
//! `rlx-interp`, on every device), so folding uses exactly the reference semantics of the
//! backend tests.
//! [`elementwise_eval`] is a small evaluator for elementwise ops built on the scalar tables
//! of `rlx-ir`, for callers without an interpreter.

use crate::rebuild::Rebuild;
use rlx_ir::{DType, Graph, IrError, NodeId, Op, Tensor, TensorData};

/// Results larger than this many elements are not folded: a folded constant is stored in the
/// compiled graph, and a large broadcast is cheaper to compute than to store.
pub const FOLD_MAX_ELEMENTS: usize = 1 << 20;

/// An evaluator of one op on host tensors; `None` when it cannot evaluate the op.
pub type Evaluator<'a> = &'a dyn Fn(&Op, &[&Tensor]) -> Option<Tensor>;

/// Folds every node whose inputs are all constants, through `eval`.
///
/// # Errors
/// Inference failures while rebuilding (a bug, reported with the node name).
pub fn fold(graph: &Graph, eval: Evaluator<'_>) -> Result<Graph, IrError> {
    let mut rb = Rebuild::new(graph);
    for (idx, node) in graph.nodes().iter().enumerate() {
        let old_id = NodeId(idx);
        if node.op.is_leaf() {
            rb.copy_leaf(old_id);
            continue;
        }
        let inputs = rb.inputs(node);
        let consts: Option<Vec<&Tensor>> = inputs
            .iter()
            .map(|&i| match &rb.new.node(i).op {
                Op::Constant(t) => Some(&**t),
                _ => None,
            })
            .collect();
        let small = node
            .ty
            .shape
            .numel()
            .is_some_and(|n| n <= FOLD_MAX_ELEMENTS);
        let folded = match consts {
            Some(ts) if small && !ts.is_empty() => eval(&node.op, &ts).filter(|t| {
                t.dtype() == node.ty.dtype
                    && node.ty.shape.as_static().as_deref() == Some(t.shape())
            }),
            _ => None,
        };
        let new_id = match folded {
            Some(t) => {
                let id = rb.new.constant(t);
                rb.new.set_name(id, node.name.clone());
                id
            }
            None => rb.push(node.op.clone(), &inputs, &node.name)?,
        };
        rb.set(old_id, new_id);
    }
    Ok(rb.finish())
}

/// Evaluates elementwise ops (unary, binary, where, cast) with numpy broadcasting, using the
/// reference scalar semantics of `rlx-ir` (compute in f64, round to the result dtype).
/// Returns `None` for every other op.
pub fn elementwise_eval(op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let out_shape = broadcast_all(&shapes)?;
    let (dtype, f): (DType, ScalarFn) = match op {
        Op::Unary(u) => {
            let u = *u;
            (inputs.first()?.dtype(), Box::new(move |v| u.eval(v[0])))
        }
        Op::Binary(b) => {
            let b = *b;
            let operand = inputs.first()?.dtype();
            (
                b.result_dtype(operand),
                Box::new(move |v| b.eval(v[0], v[1], operand)),
            )
        }
        Op::Where => (
            inputs.get(1)?.dtype(),
            Box::new(|v| if v[0] != 0.0 { v[1] } else { v[2] }),
        ),
        Op::Cast(to) => (*to, Box::new(|v| v[0])),
        _ => return None,
    };
    let n: usize = out_shape.iter().product();
    let mut idx = vec![0usize; out_shape.len()];
    let mut values = Vec::with_capacity(n);
    let mut args = vec![0.0; inputs.len()];
    for _ in 0..n {
        for (arg, t) in args.iter_mut().zip(inputs) {
            *arg = t.get_f64(broadcast_offset(&idx, t.shape()));
        }
        values.push(f(&args));
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Tensor::new(out_shape, TensorData::from_f64(dtype, values)).ok()
}

/// One element of the result from the operands' elements.
type ScalarFn = Box<dyn Fn(&[f64]) -> f64>;

fn broadcast_all(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// Row-major offset into a tensor of `shape` broadcast to the index `idx` (aligned right).
fn broadcast_offset(idx: &[usize], shape: &[usize]) -> usize {
    let skip = idx.len() - shape.len();
    let mut off = 0;
    for (i, &d) in shape.iter().enumerate() {
        let k = if d == 1 { 0 } else { idx[skip + i] };
        off = off * d + k;
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::UnaryOp;

    #[test]
    fn folds_constant_chains_and_keeps_names() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [3]);
        let a = g.constant(Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap());
        let b = g.scalar(DType::F32, 2.0);
        let ab = g.mul(a, b).unwrap();
        g.set_name(ab, "scaled");
        let e = g.unary(UnaryOp::Neg, ab).unwrap();
        let y = g.add(x, e).unwrap();
        g.output("y", y);
        let f = fold(&g, &elementwise_eval).unwrap();
        f.verify().unwrap();
        let text = f.to_string();
        assert!(text.contains("# scaled"), "{text}");
        assert_eq!(
            f.nodes()
                .iter()
                .filter(|n| !n.op.is_leaf())
                .map(|n| n.op.name())
                .collect::<Vec<_>>(),
            vec!["add"]
        );
        let Op::Constant(t) = &f.node(f.node(f.outputs()[0].1).inputs[1]).op else {
            panic!("expected a folded constant in {text}");
        };
        assert_eq!(t.to_f64_vec(), vec![-2.0, -4.0, -6.0]);
    }

    #[test]
    fn respects_the_size_cap_and_a_declining_evaluator() {
        let mut g = Graph::new();
        let one = g.scalar(DType::F32, 1.0);
        let big = g
            .push(
                Op::Expand(rlx_ir::Shape::of(&[FOLD_MAX_ELEMENTS + 1])),
                &[one],
                None,
            )
            .unwrap();
        let c = g.scalar(DType::F32, 3.0);
        let e = g.unary(UnaryOp::Exp, c).unwrap();
        g.output("big", big);
        g.output("e", e);
        let count_nonleaf = |g: &Graph| g.nodes().iter().filter(|n| !n.op.is_leaf()).count();
        let never = |_: &Op, _: &[&Tensor]| -> Option<Tensor> { None };
        assert_eq!(count_nonleaf(&fold(&g, &never).unwrap()), 2);
        let always = |_: &Op, _: &[&Tensor]| Some(Tensor::scalar(DType::F32, 7.0));
        // The expand is over the cap; the exp folds (to whatever the evaluator says).
        assert_eq!(count_nonleaf(&fold(&g, &always).unwrap()), 1);
    }

    #[test]
    fn folds_any_op_the_evaluator_knows() {
        let mut g = Graph::new();
        let a = g.constant(Tensor::random(DType::F32, &[2, 3], 1));
        let b = g.constant(Tensor::random(DType::F32, &[3, 2], 2));
        let m = g.matmul(a, b).unwrap();
        g.output("m", m);
        let f = fold(&g, &crate::test_util::cpu_eval).unwrap();
        assert!(
            matches!(f.node(f.outputs()[0].1).op, Op::Constant(_)),
            "{f}"
        );
        assert!(fold(&g, &elementwise_eval)
            .unwrap()
            .to_string()
            .contains("matmul"));
    }

    #[test]
    fn elementwise_eval_broadcasts() {
        let a = Tensor::from_f32(&[2, 1], vec![1.0, 2.0]).unwrap();
        let b = Tensor::from_f32(&[3], vec![10.0, 20.0, 30.0]).unwrap();
        let r = elementwise_eval(&Op::Binary(rlx_ir::BinaryOp::Add), &[&a, &b]).unwrap();
        assert_eq!(r.shape(), &[2, 3]);
        assert_eq!(r.to_f64_vec(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
        let c = Tensor::from_f64(DType::Bool, &[2], &[1.0, 0.0]).unwrap();
        let col = b.clone().reshaped(&[3, 1]).unwrap();
        let minus = Tensor::scalar(DType::F32, -1.0);
        let w = elementwise_eval(&Op::Where, &[&c, &col, &minus]).unwrap();
        assert_eq!(w.shape(), &[3, 2]);
        assert_eq!(w.to_f64_vec(), vec![10.0, -1.0, 20.0, -1.0, 30.0, -1.0]);
        assert!(elementwise_eval(&Op::Where, &[&c, &col, &a]).is_none());
    }
}
