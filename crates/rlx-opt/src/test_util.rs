//! Helpers for unit tests: random inputs, the validation interpreter (`rlx-interp`) as
//! reference, and relative-L2 comparison.

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Op, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// Random non-zero inputs and params for every leaf the graph declares. Values depend on
/// the seed and the leaf's name only, so a rewritten graph gets the same bindings.
pub fn random_bindings(
    g: &Graph,
    seed: u64,
) -> (HashMap<String, Tensor>, HashMap<String, Arc<Tensor>>) {
    let mut inputs = HashMap::new();
    let mut params = HashMap::new();
    for node in g.nodes() {
        let shape = node.ty.shape.as_static().expect("static test graphs");
        let name_hash = node.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let t = Tensor::random(node.ty.dtype, &shape, seed ^ name_hash);
        match &node.op {
            Op::Input { name } => {
                inputs.insert(name.clone(), t);
            }
            Op::Param { name } => {
                params.insert(name.clone(), Arc::new(t));
            }
            _ => {}
        }
    }
    (inputs, params)
}

/// The interpreter as a constant-folding evaluator.
pub fn cpu_eval(op: &Op, inputs: &[&Tensor]) -> Option<Tensor> {
    rlx_interp::eval_op(op, inputs).ok()
}

/// Runs a graph on the interpreter.
pub fn run(g: &Graph, seed: u64) -> Vec<(String, Tensor)> {
    let (i, p) = random_bindings(g, seed);
    rlx_interp::run_graph(g, &i, &p).unwrap_or_else(|e| panic!("run_graph: {e}\n{g}"))
}

/// Runs a kernel program on the interpreter with the bindings `g` would get.
pub fn run_program(p: &KernelProgram, g: &Graph, seed: u64) -> Vec<(String, Tensor)> {
    let (i, pa) = random_bindings(g, seed);
    rlx_interp::run_program_reference(p, &i, &pa)
        .unwrap_or_else(|e| panic!("run_program_reference: {e}\n{p}"))
}

/// Relative L2 distance of `a` from `b` (non-finite values must match exactly), with the
/// reference's RMS taken as at least `floor`: an output that cancels
/// to a small value (gelu(0.92) - 0.758 ≈ -0.002 in one random graph) is judged against
/// the scale of the values it came from, so one f32 rounding of an O(1) intermediate
/// (6e-8 there) does not read as a 3e-5 relative error.
pub fn rel_l2_floored(a: &Tensor, b: &Tensor, floor: f64) -> f64 {
    assert_eq!(a.shape(), b.shape(), "shapes differ");
    assert_eq!(a.dtype(), b.dtype(), "dtypes differ");
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in a.to_f64_vec().into_iter().zip(b.to_f64_vec()) {
        if !x.is_finite() || !y.is_finite() {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "{x} vs {y}"
            );
            continue;
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    let den = den.max(b.numel() as f64 * floor * floor);
    if num == 0.0 {
        0.0
    } else {
        (num / den.max(1e-30)).sqrt()
    }
}

/// Reference RMS below which [`assert_close`] measures errors absolutely: the random
/// graphs' inputs and intermediates are O(1).
const RMS_FLOOR: f64 = 1e-2;

/// Asserts that two output lists agree within `tol` relative L2, output by output (the
/// reference RMS floored at [`RMS_FLOOR`], see [`rel_l2_floored`]).
pub fn assert_close(got: &[(String, Tensor)], want: &[(String, Tensor)], tol: f64) {
    assert_eq!(got.len(), want.len());
    for ((gn, gt), (wn, wt)) in got.iter().zip(want) {
        assert_eq!(gn, wn);
        let e = rel_l2_floored(gt, wt, RMS_FLOOR);
        assert!(e <= tol, "output `{gn}`: relative L2 {e:e} > {tol:e}");
    }
}
