//! Elementwise ops: unary, binary and `where` with numpy broadcasting, and casts.

use super::from_f64;
use super::index::broadcast_map;
use rlx_ir::{BinaryOp, DType, Tensor, TensorData, UnaryOp};

pub(super) fn unary(op: UnaryOp, x: &Tensor) -> TensorData {
    from_f64(x.dtype(), x.to_f64_vec().into_iter().map(|v| op.eval(v)))
}

pub(super) fn binary(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
    dtype: DType,
) -> TensorData {
    let (va, vb) = (a.to_f64_vec(), b.to_f64_vec());
    let (ma, mb) = (
        broadcast_map(a.shape(), shape),
        broadcast_map(b.shape(), shape),
    );
    let operand = a.dtype();
    from_f64(
        dtype,
        ma.iter()
            .zip(&mb)
            .map(|(&i, &j)| op.eval(va[i], vb[j], operand)),
    )
}

pub(super) fn where_(inputs: &[&Tensor], shape: &[usize], dtype: DType) -> TensorData {
    let v: Vec<Vec<f64>> = inputs.iter().map(|t| t.to_f64_vec()).collect();
    let m: Vec<Vec<usize>> = inputs
        .iter()
        .map(|t| broadcast_map(t.shape(), shape))
        .collect();
    from_f64(
        dtype,
        (0..m[0].len()).map(|i| {
            if v[0][m[0][i]] != 0.0 {
                v[1][m[1][i]]
            } else {
                v[2][m[2][i]]
            }
        }),
    )
}

pub(super) fn cast(x: &Tensor, to: DType) -> TensorData {
    if x.dtype() == to {
        return x.data().clone();
    }
    from_f64(to, x.to_f64_vec())
}

/// Reinterprets the elements' bytes (widths are checked equal by inference).
pub(super) fn bitcast(x: &Tensor, to: DType) -> TensorData {
    TensorData::from_le_bytes(to, &x.data().to_le_bytes())
        .expect("inference checked equal element widths")
}
