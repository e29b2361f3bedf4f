//! Reference execution of a [`LoopKernel`], point by point, exactly as `rlx_ir::kernel`
//! documents it: every expression computes in f64 and rounds to its dtype; the prologue
//! runs per reduction point, [`Expr::Reduced`] is the finished reduction (Mean divided by
//! the reduction size), and the epilogue runs once per output point.

use super::index::unravel;
use crate::check::check_loop;
use crate::InterpError;
use rlx_ir::kernel::{Expr, LoopKernel};
use rlx_ir::{Tensor, TensorData};

/// Runs a loop kernel on host tensors (`inputs[i]` is read through `k.inputs[i].view`; the
/// `buffer` fields are ignored). The result has shape `k.shape`.
///
/// # Errors
/// A kernel that fails [`LoopKernel::verify`], the wrong number of inputs, an input whose
/// dtype differs from its declaration, or a view reading outside its tensor.
pub fn run_loop_kernel(k: &LoopKernel, inputs: &[&Tensor]) -> Result<Tensor, InterpError> {
    let info: Vec<_> = inputs.iter().map(|t| (t.dtype(), t.numel())).collect();
    check_loop(k, &info)?;
    let data: Vec<&TensorData> = inputs.iter().map(|t| t.data()).collect();
    let n_red = k.reduce_numel();
    let pro = k.reduce.as_ref().map(|r| k.needed(&[r.value]));
    let epi = k.needed(&[k.result]);
    let mut vals = vec![0.0f64; k.body.len()];
    let zeros = vec![0usize; k.reduce_shape.len()];
    let mut out = Vec::with_capacity(k.numel());
    for o in 0..k.numel() {
        let oidx = unravel(o, &k.shape);
        let mut reduced = 0.0;
        if let (Some(r), Some(pro)) = (&k.reduce, &pro) {
            let mut acc = r.op.identity();
            for ri in 0..n_red {
                let ridx = unravel(ri, &k.reduce_shape);
                eval(k, &data, pro, &oidx, &ridx, 0.0, &mut vals);
                acc = r.op.combine(acc, vals[r.value]);
            }
            reduced = r.dtype.round(r.op.finish(acc, n_red));
        }
        eval(k, &data, &epi, &oidx, &zeros, reduced, &mut vals);
        out.push(vals[k.result]);
    }
    let data = TensorData::from_f64(k.out_dtype(), out);
    Ok(Tensor::new(k.shape.clone(), data).expect("one value per output point"))
}

/// Evaluates the `need`ed nodes at one loop point.
fn eval(
    k: &LoopKernel,
    data: &[&TensorData],
    need: &[bool],
    oidx: &[usize],
    ridx: &[usize],
    reduced: f64,
    vals: &mut [f64],
) {
    for (i, node) in k.body.iter().enumerate() {
        if !need[i] {
            continue;
        }
        let d = node.dtype;
        vals[i] = match &node.expr {
            Expr::Load(n) => {
                let v = &k.inputs[*n].view;
                let pos = oidx
                    .iter()
                    .chain(ridx)
                    .zip(&v.strides)
                    .fold(v.offset as isize, |acc, (&i, &s)| acc + i as isize * s);
                data[*n].get_f64(pos as usize)
            }
            Expr::Const(c) => d.round(*c),
            Expr::Unary(u, a) => d.round(u.eval(vals[*a])),
            Expr::Binary(b, x, y) => d.round(b.eval(vals[*x], vals[*y], k.body[*x].dtype)),
            Expr::Where(c, a, b) => d.round(if vals[*c] != 0.0 { vals[*a] } else { vals[*b] }),
            Expr::Cast(a) => d.round(vals[*a]),
            Expr::Reduced => reduced,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::kernel::{ExprNode, KernelInput, KernelReduce, View};
    use rlx_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

    #[test]
    fn mean_of_squares_then_rsqrt_by_hand() {
        let f = DType::F32;
        let n = |expr, dtype| ExprNode { expr, dtype };
        let k = LoopKernel {
            name: "rms".into(),
            shape: vec![2],
            reduce_shape: vec![2],
            inputs: vec![KernelInput {
                buffer: 0,
                dtype: f,
                view: View {
                    offset: 0,
                    strides: vec![2, 1],
                },
            }],
            body: vec![
                n(Expr::Load(0), f),
                n(Expr::Binary(BinaryOp::Mul, 0, 0), f),
                n(Expr::Reduced, f),
                n(Expr::Unary(UnaryOp::Rsqrt, 2), f),
            ],
            reduce: Some(KernelReduce {
                op: ReduceOp::Mean,
                value: 1,
                dtype: f,
            }),
            result: 3,
            output: 0,
        };
        let x = Tensor::from_f32(&[2, 2], vec![1., 2., 3., 4.]).unwrap();
        let r = run_loop_kernel(&k, &[&x]).unwrap();
        let want = [1.0 / 2.5f64.sqrt(), 1.0 / 12.5f64.sqrt()];
        for (g, w) in r.to_f64_vec().iter().zip(want) {
            assert!((g - w).abs() < 1e-7);
        }
        // a view that walks off the end is an error naming the kernel
        let mut bad = k.clone();
        bad.inputs[0].view.offset = 1;
        let e = run_loop_kernel(&bad, &[&x]).unwrap_err().to_string();
        assert!(e.starts_with("kernel `rms` input 0: view offset=1"), "{e}");
    }
}
