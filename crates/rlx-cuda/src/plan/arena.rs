//! CUDA's buffer plan: `rlx_opt::buffers` over the plan's steps, with CUDA's arena rules.
//! Pure, so tests check layouts without a GPU.

use crate::codegen::ArgRef;
use crate::memory::ALIGN;
use crate::plan::Plan;
use crate::CudaError;
use rlx_ir::kernel::KernelProgram;
use rlx_opt::buffers::{plan_buffers, ArenaTarget, BufferPlan, OutputHome, Region};

/// CUDA's arena: offsets aligned as every device allocation is (cuBLASLt and vector loads
/// want 256 bytes), no region empty, outputs in the arena until the run copies them out.
pub const ARENA: ArenaTarget = ArenaTarget {
    align: ALIGN,
    min_bytes: 1,
    granule: 1,
    outputs: OutputHome::Arena,
};

/// Plans where every buffer of `program` lives when `plan` runs: temporaries and scratch
/// regions in one arena, each live from the first to the last step touching it (a fused
/// alternative counts at its first step, [`Plan::touches`]). Derived buffers (merged GEMM
/// weights) live outside the arena.
///
/// # Errors
/// [`CudaError::Invalid`] when the memory planner rejects the requests.
pub fn buffer_plan(program: &KernelProgram, plan: &Plan) -> Result<BufferPlan, CudaError> {
    let steps: Vec<Vec<Region>> = plan
        .touches()
        .iter()
        .map(|args| {
            args.iter()
                .filter_map(|a| match *a {
                    ArgRef::Buffer(b) => Some(Region::Buffer(b)),
                    ArgRef::Scratch(i) => Some(Region::Scratch(i)),
                    ArgRef::Derived(_) => None,
                })
                .collect()
        })
        .collect();
    plan_buffers(program, &steps, &plan.scratch, &ARENA)
        .map_err(|e| CudaError::Invalid(format!("memory plan: {e}")))
}
