//! What `rlx dump --after <kernel pass>` prints: a graph taken through [`crate::Session`]'s
//! pipeline to the kernel program a backend would compile, and what the kernel-IR passes that
//! backend chooses decide for it, up to a named pass. Nothing is compiled or run, so a
//! backend whose planner needs no device (CPU, CUDA) answers on any machine.

use crate::{CompileOptions, RuntimeError};
use rlx_driver::Device;
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Op, TensorType};

/// What lowering and the kernel-IR passes decided for one graph on one device.
#[derive(Debug, Clone)]
pub struct KernelsAfter {
    /// the kernel program the backend would compile
    pub program: KernelProgram,
    /// lowering's `fuse_bias` decisions (every device)
    pub fused_biases: Vec<rlx_opt::FusedBias>,
    /// the decisions of the kernel-IR passes the backend chooses, one line each
    /// ([`rlx_opt::KernelDecisions::dump`])
    pub decisions: String,
}

/// The kernel program `device`'s backend would compile for `graph` (verified, bound with
/// `options.bindings`, rewritten, optimized, legalized by what the backend lowers, lowered)
/// with lowering's decisions and those of the kernel-IR passes the backend chooses, up to
/// and including `pass` (one of [`rlx_opt::KERNEL_PASSES`]).
///
/// # Errors
/// No backend registered for `device`, an unknown pass, a malformed graph, a failing pass,
/// an op the backend does not lower, or symbolic dims left unbound.
pub fn kernels_after(
    device: Device,
    graph: &Graph,
    options: &CompileOptions,
    pass: &str,
) -> Result<KernelsAfter, RuntimeError> {
    if !rlx_opt::KERNEL_PASSES.contains(&pass) {
        return Err(rlx_opt::OptError::UnknownPass {
            name: pass.to_string(),
            known: rlx_opt::KERNEL_PASSES.join(", "),
        }
        .into());
    }
    let (backend, optimized) = crate::session::optimized_on(device, graph, options)?;
    let caps = |op: &Op, ins: &[&TensorType]| backend.lowers(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, device.name(), &caps)?;
    let program = rlx_opt::lower(&legal)?;
    let decisions = backend.kernel_decisions(&program, pass)?;
    Ok(KernelsAfter {
        program,
        fused_biases: rlx_opt::fused_biases(&legal)?,
        decisions,
    })
}
