//! Helpers for differential tests against the interpreter, reusable by other crates'
//! tests: error metrics and random bindings for a program's inputs and params.

use rlx_ir::kernel::{BufferKind, KernelProgram};
use rlx_ir::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// Relative L2 error `||a - b|| / max(||b||, tiny)` over all elements (as f64), with `b`
/// the reference. Shapes must match (otherwise infinity). NaN anywhere gives NaN unless
/// both tensors hold NaN at the same positions, which are then skipped.
pub fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    if a.shape() != b.shape() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for i in 0..a.numel() {
        let (x, y) = (a.get_f64(i), b.get_f64(i));
        if x.is_nan() && y.is_nan() {
            continue;
        }
        if x == y {
            den += y * y;
            continue;
        }
        let d = x - y;
        num += d * d;
        den += y * y;
    }
    if num == 0.0 {
        return 0.0;
    }
    num.sqrt() / den.sqrt().max(1e-30)
}

/// Random, never-zero tensors for every input and param of a program (seeded).
pub fn random_bindings(
    p: &KernelProgram,
    seed: u64,
) -> (HashMap<String, Tensor>, HashMap<String, Arc<Tensor>>) {
    let mut inputs = HashMap::new();
    let mut params = HashMap::new();
    for (i, b) in p.buffers.iter().enumerate() {
        let shape = b.ty.shape.as_static().unwrap_or_default();
        let t = Tensor::random(b.ty.dtype, &shape, seed.wrapping_add(i as u64 * 7919));
        match &b.kind {
            BufferKind::Input(n) => {
                inputs.insert(n.clone(), t);
            }
            BufferKind::Param(n) => {
                params.insert(n.clone(), Arc::new(t));
            }
            _ => {}
        }
    }
    (inputs, params)
}
