//! wgpu's buffer plan: `rlx_opt::buffers` over the plan's shaders, with wgpu's arena rules.
//! Pure, so tests check layouts without a device.

use crate::codegen::ArgRef;
use crate::plan::Plan;
use crate::WgpuError;
use rlx_ir::kernel::KernelProgram;
use rlx_opt::buffers::{plan_buffers, ArenaTarget, BufferPlan, OutputHome, Region};

/// wgpu's arena for an adapter whose storage bindings start at multiples of `align`:
/// bindings are whole 4-byte words and never empty, and outputs stay in the arena until
/// the run copies them out.
pub fn arena_target(align: usize) -> ArenaTarget {
    ArenaTarget {
        align,
        min_bytes: 4,
        granule: 4,
        outputs: OutputHome::Arena,
    }
}

/// Plans where every buffer of `program` lives when `plan` runs, with arena offsets that
/// are multiples of `align` (the adapter's storage offset alignment): temporaries and
/// scratch regions, each live from the first to the last shader binding it.
///
/// # Errors
/// [`WgpuError::Invalid`] when the memory planner rejects the requests.
pub fn buffer_plan(
    program: &KernelProgram,
    plan: &Plan,
    align: usize,
) -> Result<BufferPlan, WgpuError> {
    let steps: Vec<Vec<Region>> = plan
        .steps
        .iter()
        .map(|step| {
            step.bindings
                .iter()
                .map(|b| match b.arg {
                    ArgRef::Buffer(x) => Region::Buffer(x),
                    ArgRef::Scratch(i) => Region::Scratch(i),
                })
                .collect()
        })
        .collect();
    plan_buffers(program, &steps, &plan.scratch, &arena_target(align))
        .map_err(|e| WgpuError::Invalid(format!("memory plan: {e}")))
}
