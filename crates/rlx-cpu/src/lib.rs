//! The RLX CPU backend.
//!
//! Two executors of the same semantics:
//! - the **validation interpreter** ([`interp`]): plain f64 evaluation of graph ops
//!   ([`eval_op`], [`run_graph`]) and of kernel IR ([`run_loop_kernel`],
//!   [`run_program_reference`]). It is the reference every emitter is tested against, so it
//!   stays obviously correct rather than fast;
//! - the **fast path** ([`CpuProgram`]): a [`KernelProgram`](rlx_ir::kernel::KernelProgram)
//!   compiled once (loop kernels to a small lane bytecode, library kernels to gemm-backed
//!   implementations, temporaries planned into one arena) and run many times, from many
//!   threads at once.
//!
//! This crate knows nothing of the runtime: the runtime wraps it in its backend adapter.

#![warn(missing_docs)]

mod check;
mod error;
mod fast;
pub mod interp;
pub mod random_graph;
pub mod settings;
pub mod testing;

pub use error::CpuError;
pub use fast::{CpuOptions, CpuProgram, KernelTiming, ProfiledRun};
pub use interp::{eval_op, run_graph, run_loop_kernel, run_program_reference};

/// Number of threads the fast path uses by default: `RLX_CPU_THREADS`, else
/// `RAYON_NUM_THREADS`, else the available cores.
pub fn thread_count() -> usize {
    fast::pool::default_threads()
}

/// The CPU model name from `/proc/cpuinfo` ("model name"), or "cpu" when unknown.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cpu".to_string())
}
