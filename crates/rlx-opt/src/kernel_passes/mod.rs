//! The kernel-IR passes, one per file, and the pipeline that runs the ones a backend
//! chooses, in a fixed, named order ([`KERNEL_PASSES`]).
//!
//! They run after [`crate::lower()`], on the [`KernelProgram`], and decide what a backend's
//! planner would otherwise decide by itself: which copies attention reads or writes through
//! strided views (`elide_views`), which sibling GEMMs run as one (`merge_siblings`) and
//! which GEMMs may run with the norm of their result as one kernel (`gemm_norm`). A pass
//! does not rewrite the program: it returns its decisions ([`KernelDecisions`]), which the
//! backend's planner follows. A backend chooses passes by what it declares it can do
//! ([`KernelCaps`]); a pass it does not choose decides nothing for it.
//!
//! Not a pass here: the bias of a merged q/k/v projection becoming its GEMM's epilogue
//! (`fuse_bias`, [`crate::fused_biases`]). It decides which kernels the program has (the
//! GEMM's epilogue; each reader a plain copy rather than a loop adding its slice of the
//! bias), which every backend runs as lowered, so it stays a rule of lowering (see
//! `lower/plan.rs`); `rlx dump --after` shows its decisions before these passes'.

pub mod elide_views;
pub mod gemm_norm;
pub mod merge_siblings;

use crate::OptError;
use elide_views::Views;
use gemm_norm::GemmNorm;
use merge_siblings::{GemmEpilogues, SiblingGroup};
use rlx_ir::kernel::{BufferId, KernelProgram, LoopKernel};
use rlx_ir::DType;
use std::collections::HashMap;
use std::fmt::Write;

/// The kernel-IR passes, in the order they run. The same names appear in
/// [`KernelDecisions::dump`] and in `ARCHITECTURE.md`.
///
/// `merge_siblings` runs after `elide_views`: it merges only GEMMs whose results attention
/// reads through the views `elide_views` decided. `gemm_norm` runs last (a GEMM merged with
/// its siblings has no norm reading its result alone).
pub const KERNEL_PASSES: &[&str] = &["elide_views", "merge_siblings", "gemm_norm"];

/// What a backend's planner can take from the kernel-IR passes. Each field chooses one pass
/// of [`KERNEL_PASSES`]; None leaves it out for this backend. `G` is the backend's GEMM
/// ([`NoGemms`] for a backend that merges none).
pub struct KernelCaps<'a, G> {
    /// `elide_views`: whether the backend runs attention kernel `i` (a kernel index) through
    /// strided views of the copies around it
    pub attention_views: Option<&'a dyn Fn(usize) -> bool>,
    /// `merge_siblings`: the backend's GEMM, which runs each group of siblings as one
    pub sibling_gemms: Option<&'a G>,
    /// `gemm_norm`: whether the backend has a kernel that runs a GEMM and the layer or RMS
    /// norm of its result as one
    pub gemm_norm: bool,
}

/// The GEMM of a backend that merges no siblings (its [`KernelCaps::sibling_gemms`] is None).
pub struct NoGemms;

impl GemmEpilogues for NoGemms {
    type Activation = ();

    fn gemm_dtype(&self, _: DType) -> bool {
        false
    }

    fn fused(&self, _: &LoopKernel, _: DType, _: usize) -> Option<(Option<BufferId>, ())> {
        None
    }
}

/// What the chosen kernel-IR passes decided for one program. `T` is what the backend
/// relocates a view to, `A` its GEMM's activation.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelDecisions<T, A> {
    /// `elide_views`: the copies not run and the views attention reads and writes instead
    /// (nothing elided when the pass did not run)
    pub views: Views<T>,
    /// `merge_siblings`: the groups of GEMMs that run as one (none when the pass did not run)
    pub siblings: Vec<SiblingGroup<A>>,
    /// `gemm_norm`: the GEMMs whose result only a norm reads (none when the pass did not run)
    pub gemm_norms: Vec<GemmNorm>,
}

impl<T, A: std::fmt::Debug> KernelDecisions<T, A> {
    /// The decisions as text, one line each, by kernel name: `elide <copy> (<attention>)`,
    /// `merge <matmul>+<matmul>+... (n <columns>, <activation>)` and `norm <matmul>+<norm>`.
    pub fn dump(&self, program: &KernelProgram) -> String {
        let mut out = String::new();
        let mut attention: Vec<_> = self.views.attention.iter().collect();
        attention.sort_by_key(|(i, _)| **i);
        for (ai, v) in attention {
            for copy in &v.replaces {
                let _ = writeln!(out, "elide {copy} ({})", program.kernels[*ai].name());
            }
        }
        for g in &self.siblings {
            let names: Vec<&str> = g.members.iter().map(|m| m.name.as_str()).collect();
            let _ = writeln!(
                out,
                "merge {} (n {}, {:?})",
                names.join("+"),
                g.n(),
                g.activation
            );
        }
        for p in &self.gemm_norms {
            let name = |i: usize| program.kernels[i].name();
            let _ = writeln!(out, "norm {}+{}", name(p.gemm), name(p.norm));
        }
        out
    }
}

/// Runs every pass of [`KERNEL_PASSES`] that `caps` chooses, in order.
pub fn run_kernel_passes<T: Clone, G: GemmEpilogues>(
    program: &KernelProgram,
    caps: &KernelCaps<'_, G>,
) -> KernelDecisions<T, G::Activation> {
    let last = KERNEL_PASSES[KERNEL_PASSES.len() - 1];
    run_kernel_passes_until(program, caps, last).expect("the last pass is known")
}

/// Runs the passes of [`KERNEL_PASSES`] that `caps` chooses, in order, up to and including
/// `last`, and stops there (to see what each pass decided).
///
/// # Errors
/// [`OptError::UnknownPass`] for a name not in [`KERNEL_PASSES`].
pub fn run_kernel_passes_until<T: Clone, G: GemmEpilogues>(
    program: &KernelProgram,
    caps: &KernelCaps<'_, G>,
    last: &str,
) -> Result<KernelDecisions<T, G::Activation>, OptError> {
    let Some(n) = KERNEL_PASSES.iter().position(|p| *p == last) else {
        return Err(OptError::UnknownPass {
            name: last.to_string(),
            known: KERNEL_PASSES.join(", "),
        });
    };
    let mut decisions = KernelDecisions {
        views: Views {
            elided: vec![false; program.kernels.len()],
            attention: HashMap::new(),
        },
        siblings: Vec::new(),
        gemm_norms: Vec::new(),
    };
    for name in &KERNEL_PASSES[..=n] {
        match *name {
            "elide_views" => {
                if let Some(takes) = caps.attention_views {
                    decisions.views = elide_views::attention_views(program, takes);
                }
            }
            "merge_siblings" => {
                if let Some(gemm) = caps.sibling_gemms {
                    decisions.siblings =
                        merge_siblings::merge_siblings(program, &decisions.views, gemm);
                }
            }
            "gemm_norm" => {
                if caps.gemm_norm {
                    decisions.gemm_norms = gemm_norm::gemm_norms(program);
                }
            }
            _ => unreachable!("KERNEL_PASSES names every pass matched here"),
        }
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests;
