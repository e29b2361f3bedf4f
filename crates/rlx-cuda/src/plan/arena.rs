//! Where a plan's temporaries and scratch regions live: one arena, each region placed by
//! its lifetime over the plan's steps. Pure, so tests check layouts without a GPU.

use crate::codegen::ArgRef;
use crate::memory::ALIGN;
use crate::plan::{root, Plan};
use crate::CudaError;
use rlx_ir::kernel::{BufferKind, KernelProgram};

/// Byte offsets in a program's arena.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArenaLayout {
    /// per program buffer: its offset when it is a temporary root that some step touches
    pub buffers: Vec<Option<usize>>,
    /// per scratch region of the plan
    pub scratch: Vec<usize>,
    /// bytes of the arena
    pub bytes: usize,
}

fn bytes_of(program: &KernelProgram, b: usize) -> usize {
    let t = &program.buffers[b].ty;
    t.shape
        .as_static()
        .map_or(0, |s| s.iter().product::<usize>())
        * t.dtype.size_bytes()
}

/// Plans the arena of `plan`: temporaries and scratch regions, each live from the first to
/// the last step touching it (program outputs until the run ends).
///
/// # Errors
/// [`CudaError::Invalid`] when the memory planner rejects the requests.
pub fn arena_layout(program: &KernelProgram, plan: &Plan) -> Result<ArenaLayout, CudaError> {
    let n_steps = plan.steps.len();
    let touches = plan.touches();
    let n_buf = program.buffers.len();
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n_buf + plan.scratch.len()];
    for (s, refs) in touches.iter().enumerate() {
        for r in refs {
            let slot = match *r {
                ArgRef::Buffer(b) => root(program, b),
                ArgRef::Scratch(i) => n_buf + i,
                ArgRef::Derived(_) => continue,
            };
            let l = life[slot].get_or_insert((s, s));
            l.1 = s;
        }
    }
    for (_, b) in &program.outputs {
        if let Some(l) = life[root(program, *b)].as_mut() {
            l.1 = n_steps;
        }
    }
    let mut requests = Vec::new();
    let mut owners = Vec::new();
    for (slot, l) in life.iter().enumerate() {
        let temp = slot >= n_buf || matches!(program.buffers[slot].kind, BufferKind::Temp);
        if let (Some((first, last)), true) = (l, temp) {
            let size = if slot >= n_buf {
                plan.scratch[slot - n_buf]
            } else {
                bytes_of(program, slot)
            };
            requests.push(rlx_mem::PlanRequest {
                size: size.max(1),
                align: ALIGN,
                first: *first,
                last: *last,
                inplace_of: None,
            });
            owners.push(slot);
        }
    }
    let mem_plan =
        rlx_mem::plan(&requests).map_err(|e| CudaError::Invalid(format!("memory plan: {e}")))?;
    let mut layout = ArenaLayout {
        buffers: vec![None; n_buf],
        scratch: vec![0; plan.scratch.len()],
        bytes: mem_plan.arena_bytes,
    };
    for (slot, off) in owners.iter().zip(&mem_plan.offsets) {
        if *slot >= n_buf {
            layout.scratch[slot - n_buf] = *off;
        } else {
            layout.buffers[*slot] = Some(*off);
        }
    }
    Ok(layout)
}
