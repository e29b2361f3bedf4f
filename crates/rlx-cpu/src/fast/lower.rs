//! Simple graph ops met as library kernels (elementwise, casts, reductions, transposes,
//! slices, expands, reshapes) rewritten as loop kernels, so they take the compiled lane
//! path instead of the interpreter.

use rlx_interp::index::{broadcast_strides, strides};
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, KernelReduce, LoopKernel, View};
use rlx_ir::{slice_range, DType, Op};

fn input(dtype: DType, offset: usize, strides: Vec<isize>) -> KernelInput {
    KernelInput {
        buffer: 0,
        dtype,
        view: View { offset, strides },
    }
}

fn node(expr: Expr, dtype: DType) -> ExprNode {
    ExprNode { expr, dtype }
}

fn isize_vec(v: Vec<usize>) -> Vec<isize> {
    v.into_iter().map(|s| s as isize).collect()
}

/// The loop kernel computing `op` on operands of the given types, or None when the op is
/// not a simple loop.
pub(crate) fn lower(
    name: &str,
    op: &Op,
    ins: &[(DType, Vec<usize>)],
    out: &(DType, Vec<usize>),
) -> Option<LoopKernel> {
    let (odt, oshape) = (out.0, &out.1);
    let bcast = |k: usize| input(ins[k].0, 0, isize_vec(broadcast_strides(&ins[k].1, oshape)));
    let loads =
        |n: usize| -> Vec<ExprNode> { (0..n).map(|k| node(Expr::Load(k), ins[k].0)).collect() };
    let elementwise = |n_in: usize, last: Expr| {
        let mut body = loads(n_in);
        body.push(node(last, odt));
        LoopKernel {
            name: name.to_string(),
            shape: oshape.clone(),
            reduce_shape: vec![],
            inputs: (0..n_in).map(bcast).collect(),
            result: body.len() - 1,
            body,
            reduce: None,
            output: 0,
        }
    };
    let view = |offset: usize, s: Vec<isize>| LoopKernel {
        name: name.to_string(),
        shape: oshape.clone(),
        reduce_shape: vec![],
        inputs: vec![input(ins[0].0, offset, s)],
        body: loads(1),
        reduce: None,
        result: 0,
        output: 0,
    };
    let in_strides = || strides(&ins[0].1);
    Some(match op {
        Op::Unary(u) => elementwise(1, Expr::Unary(*u, 0)),
        Op::Binary(b) => elementwise(2, Expr::Binary(*b, 0, 1)),
        Op::Where => elementwise(3, Expr::Where(0, 1, 2)),
        Op::Cast(_) => elementwise(1, Expr::Cast(0)),
        Op::Expand(_) => view(0, isize_vec(broadcast_strides(&ins[0].1, oshape))),
        Op::Reshape(_) => view(0, isize_vec(strides(oshape))),
        Op::Transpose(perm) => {
            let s = in_strides();
            view(0, perm.iter().map(|&p| s[p] as isize).collect())
        }
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            if oshape.contains(&0) {
                return None;
            }
            let s = in_strides();
            let mut st: Vec<isize> = isize_vec(s.clone());
            let mut offset = 0isize;
            for (i, &a) in axes.iter().enumerate() {
                let (start, _) = slice_range(ins[0].1[a], starts[i], ends[i], steps[i]);
                offset += start as isize * s[a] as isize;
                st[a] = steps[i] as isize * s[a] as isize;
            }
            view(offset as usize, st)
        }
        Op::Reduce { op, axes, keepdims } => {
            let s = in_strides();
            let shape = &ins[0].1;
            let out_strides: Vec<isize> = (0..shape.len())
                .filter_map(|d| match (axes.contains(&d), keepdims) {
                    (false, _) => Some(s[d] as isize),
                    (true, true) => Some(0),
                    (true, false) => None,
                })
                .collect();
            let mut view_strides = out_strides;
            view_strides.extend(axes.iter().map(|&a| s[a] as isize));
            LoopKernel {
                name: name.to_string(),
                shape: oshape.clone(),
                reduce_shape: axes.iter().map(|&a| shape[a]).collect(),
                inputs: vec![input(ins[0].0, 0, view_strides)],
                body: vec![node(Expr::Load(0), ins[0].0), node(Expr::Reduced, odt)],
                reduce: Some(KernelReduce {
                    op: *op,
                    value: 0,
                    dtype: odt,
                }),
                result: 1,
                output: 0,
            }
        }
        _ => return None,
    })
}
