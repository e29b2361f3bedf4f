//! Reference execution of a whole [`KernelProgram`]: kernels run one after another on host
//! tensors, library kernels through [`eval_op`] and their epilogue through
//! [`run_loop_kernel`]. Aliases are row-major reinterpretations of their root's storage.

use super::{eval_op, run_loop_kernel};
use crate::check::{bind_leaves, check_program};
use crate::InterpError;
use rlx_ir::kernel::{BufferId, Kernel, KernelProgram};
use rlx_ir::{Tensor, TensorData};
use std::collections::HashMap;
use std::sync::Arc;

/// Runs every kernel of `p` on the interpreter and returns the named outputs in order.
///
/// # Errors
/// A malformed program (see the checks in this crate), a missing or mistyped input or
/// param, or a failing kernel (wrapped with its name).
pub fn run_program_reference(
    p: &KernelProgram,
    inputs: &HashMap<String, Tensor>,
    params: &HashMap<String, Arc<Tensor>>,
) -> Result<Vec<(String, Tensor)>, InterpError> {
    let info = check_program(p)?;
    let leaves = bind_leaves(p, inputs, params)?;
    let mut temps: Vec<Option<TensorData>> = vec![None; p.buffers.len()];
    let read = |temps: &[Option<TensorData>], b: BufferId| -> Tensor {
        let r = info.roots[b];
        let data = match leaves[r] {
            Some(t) => t.data().clone(),
            None => temps[r]
                .clone()
                .expect("checked: temps are written before reads"),
        };
        Tensor::new(info.shapes[b].clone(), data).expect("checked: aliases keep the size")
    };
    for k in &p.kernels {
        let result = match k {
            Kernel::Loop(l) => {
                let ins: Vec<Tensor> = l.inputs.iter().map(|i| read(&temps, i.buffer)).collect();
                let refs: Vec<&Tensor> = ins.iter().collect();
                run_loop_kernel(l, &refs)?
            }
            Kernel::Library(l) => {
                let ins: Vec<Tensor> = l.inputs.iter().map(|&b| read(&temps, b)).collect();
                let refs: Vec<&Tensor> = ins.iter().collect();
                let r = eval_op(&l.op, &refs).map_err(|e| e.in_kernel(&l.name))?;
                match &l.epilogue {
                    None => r,
                    Some(e) => {
                        let mut ins = vec![r.reshaped(&e.shape).expect("checked: same size")];
                        ins.extend(e.inputs[1..].iter().map(|i| read(&temps, i.buffer)));
                        let refs: Vec<&Tensor> = ins.iter().collect();
                        run_loop_kernel(e, &refs)?
                    }
                }
            }
        };
        temps[info.roots[k.output()]] = Some(result.into_data());
    }
    Ok(p.outputs
        .iter()
        .map(|(name, b)| (name.clone(), read(&temps, *b)))
        .collect())
}
