//! A GEMM and the layer norm (or RMS norm) of its result as one kernel: the `gemm_norm`
//! kernel-IR pass.
//!
//! A backend with a kernel that stores a GEMM's rows through a row norm (CUDA's
//! `codegen/gemm_norm.rs`) runs the two without writing the GEMM's result to memory and
//! reading it back, when nothing but the norm's x reads that result. This pass finds those
//! pairs in the program; the backend's planner decides the rest (that the two run as
//! consecutive steps, the GEMM's dtype, shape and layout, its target) and offers the fused
//! kernel against the two steps, so a pair is a candidate, not an offer.

use rlx_ir::kernel::{BufferId, Kernel, KernelProgram};
use rlx_ir::kernel_views::root;
use rlx_ir::Op;

/// A matmul kernel whose result only a norm kernel reads, as its x.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmNorm {
    /// the matmul's kernel index
    pub gemm: usize,
    /// the layer or RMS norm's kernel index (after `gemm`)
    pub norm: usize,
}

/// Finds every matmul library kernel whose result (through any alias) is read by one layer
/// or RMS norm library kernel alone, as its x and nowhere else (not as a parameter, nor in
/// its epilogue), and is no program output.
pub fn gemm_norms(program: &KernelProgram) -> Vec<GemmNorm> {
    let mut found = Vec::new();
    for (norm, k) in program.kernels.iter().enumerate() {
        let Kernel::Library(nk) = k else { continue };
        if !matches!(nk.op, Op::LayerNorm { .. } | Op::RmsNorm { .. }) {
            continue;
        }
        let x = root(program, nk.inputs[0]);
        let writes_x = |g: &Kernel| match g {
            Kernel::Library(gk) => gk.op == Op::MatMul && root(program, gk.output) == x,
            Kernel::Loop(_) => false,
        };
        let Some(gemm) = program.kernels[..norm].iter().rposition(writes_x) else {
            continue;
        };
        let only_x = k.reads()[1..].iter().all(|&b| root(program, b) != x);
        if only_x && sole_reader(program, x, norm) {
            found.push(GemmNorm { gemm, norm });
        }
    }
    found
}

/// True when kernel `reader` is the only kernel that reads buffer `b` (through any alias)
/// and `b` is no program output.
pub fn sole_reader(program: &KernelProgram, b: BufferId, reader: usize) -> bool {
    program.outputs.iter().all(|(_, o)| root(program, *o) != b)
        && program
            .kernels
            .iter()
            .enumerate()
            .all(|(i, k)| i == reader || k.reads().iter().all(|&r| root(program, r) != b))
}
