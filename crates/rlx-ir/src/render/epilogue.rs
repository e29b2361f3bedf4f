//! A library kernel's fused elementwise epilogue, applied to one result element inside the
//! library kernel (which epilogues qualify: [`LoopKernel::fusable_epilogue`]).

use super::{emit_nodes, Dialect, Operand};
use crate::kernel::{IndexSpace, LoopKernel};

/// The epilogue's index space: its dims merged where every input's view allows. The
/// coordinates `q0, q1, ...` of a result element over these dims address input `i` through
/// `strides[i]`.
pub fn epilogue_space(k: &LoopKernel) -> IndexSpace {
    let mut dims = k.shape.clone();
    dims.extend(&k.reduce_shape);
    let strides: Vec<Vec<isize>> = k.inputs.iter().map(|i| i.view.strides.clone()).collect();
    IndexSpace::merge(&dims, &strides)
}

/// Declarations `p{i}` of the epilogue nodes its result needs, for one element whose
/// coordinates `q*` over `space` are already declared: input 0 is the library's compute
/// value `value`, input `i` is `read(i, strides)` with its strides over `space`.
///
/// # Errors
/// As [`emit_nodes`].
pub fn epilogue_nodes(
    d: &dyn Dialect,
    k: &LoopKernel,
    space: &IndexSpace,
    value: &str,
    read: &mut dyn FnMut(usize, &[isize]) -> Operand,
) -> Result<String, String> {
    let mut elem = |i: usize| {
        if i == 0 {
            Operand::Value(value.to_string())
        } else {
            read(i, &space.strides[i])
        }
    };
    emit_nodes(d, k, &k.needed(&[k.result]), "p", &mut elem, None)
}
