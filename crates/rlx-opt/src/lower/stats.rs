//! Counts over a kernel program, for reports, benchmarks and fusion tests.

use rlx_ir::kernel::{Expr, Kernel, KernelProgram, LoopKernel};
use std::fmt;

/// What a lowered program is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowerStats {
    /// kernels launched (loop + library)
    pub kernels: usize,
    /// fused loop kernels
    pub loop_kernels: usize,
    /// library kernels
    pub library_kernels: usize,
    /// library kernels carrying a fused elementwise epilogue
    pub epilogues: usize,
    /// loop kernels with a reduction
    pub reductions: usize,
    /// buffers that alias another (reshapes without a copy)
    pub aliases: usize,
    /// scalar ops (unary, binary, where, cast) fused into loop bodies and epilogues
    pub fused_ops: usize,
}

/// Counts kernels, aliases and fused scalar ops of `p`.
pub fn lower_stats(p: &KernelProgram) -> LowerStats {
    let mut s = LowerStats {
        kernels: p.kernels.len(),
        aliases: p.buffers.iter().filter(|b| b.alias_of.is_some()).count(),
        ..LowerStats::default()
    };
    for k in &p.kernels {
        match k {
            Kernel::Loop(l) => {
                s.loop_kernels += 1;
                s.reductions += l.reduce.is_some() as usize;
                s.fused_ops += scalar_ops(l);
            }
            Kernel::Library(l) => {
                s.library_kernels += 1;
                if let Some(e) = &l.epilogue {
                    s.epilogues += 1;
                    s.fused_ops += scalar_ops(e);
                }
            }
        }
    }
    s
}

fn scalar_ops(k: &LoopKernel) -> usize {
    k.body
        .iter()
        .filter(|n| {
            matches!(
                n.expr,
                Expr::Unary(..) | Expr::Binary(..) | Expr::Where(..) | Expr::Cast(_)
            )
        })
        .count()
}

impl fmt::Display for LowerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} kernels ({} loop, {} library, {} with epilogue, {} reductions), {} aliases, {} fused ops",
            self.kernels,
            self.loop_kernels,
            self.library_kernels,
            self.epilogues,
            self.reductions,
            self.aliases,
            self.fused_ops
        )
    }
}
