//! The RLX optimizer: everything between a verified [`rlx_ir::Graph`] and the kernel IR a
//! backend emits code from.
//!
//! ```text
//! Graph -> optimize (fold, cse, simplify, dce) -> legalize for a device -> lower (fusion)
//!       -> KernelProgram -> kernel passes a backend chooses (elide_views, merge_siblings,
//!          gemm_norm)
//! ```
//!
//! - [`optimize`] runs the named graph passes of [`PASSES`], each verified in debug builds;
//! - [`legalize()`] fits a graph to a backend's capability function, decomposing what the
//!   backend lacks and reporting every node in a [`DispatchReport`];
//! - [`lower()`] fuses elementwise chains, reductions with their prologue and epilogue, and
//!   library ops with their elementwise epilogue into a [`rlx_ir::kernel::KernelProgram`];
//! - [`run_kernel_passes`] runs the kernel-IR passes of [`KERNEL_PASSES`] that a backend
//!   chooses by its [`KernelCaps`], and returns their decisions for its planner;
//! - [`buffers::plan_buffers`] decides, for a backend's steps over that program, where every
//!   buffer lives and lays out the one arena of temporaries and scratch.
//!
//! This crate runs nothing: constant folding takes the evaluator as an argument (the
//! runtime passes the device-free validation interpreter, `rlx-interp`, for every device),
//! and backends describe themselves by a capability function.

#![warn(missing_docs)]

pub mod buffers;
mod error;
pub mod kernel_passes;
mod legalize;
mod lower;
mod passes;
mod rebuild;

pub use error::{LegalizeError, OptError, UnsupportedNode};
pub use kernel_passes::{
    run_kernel_passes, run_kernel_passes_until, KernelCaps, KernelDecisions, NoGemms, KERNEL_PASSES,
};
pub use legalize::{legalize, Caps, DispatchEntry, DispatchReport, How, OpSummary};
pub use lower::{dump_kernels, fused_biases, lower, lower_stats, FusedBias, LowerStats};
pub use passes::approximate::{approximate_gelu, GELU_TANH_MAX_ABS_ERROR};
pub use passes::autocast::{autocast, autocast_where, AutocastReport};
pub use passes::autocast_all::autocast_all;
pub use passes::cse::{cse, CSE_MAX_CONSTANT_ELEMENTS};
pub use passes::dce::dce;
pub use passes::fold::{elementwise_eval, fold, Evaluator, FOLD_MAX_ELEMENTS};
pub use passes::simplify::simplify;
pub use passes::{optimize, optimize_until, optimize_with, PASSES};

#[cfg(test)]
mod test_util;
