//! The RLX CPU backend.
//!
//! The **fast path** ([`CpuProgram`]): a [`KernelProgram`](rlx_ir::kernel::KernelProgram)
//! compiled once (loop kernels to a small lane bytecode, library kernels to gemm-backed
//! implementations, temporaries planned into one arena) and run many times, from many
//! threads at once. Its reference is the validation interpreter, which lives in the
//! device-free `rlx-interp` crate; it is re-exported here ([`interp`], [`eval_op`],
//! [`run_graph`], [`run_loop_kernel`], [`run_program_reference`]) for existing callers.
//!
//! This crate knows nothing of the runtime: the runtime wraps it in its backend adapter.

#![warn(missing_docs)]

mod error;
mod fast;
pub mod random_graph;
pub mod settings;
pub mod testing;

pub use error::CpuError;
pub use fast::{kernel_decisions, CpuOptions, CpuProgram, KernelTiming, ProfiledRun};
/// The validation interpreter, now the `rlx-interp` crate, under its former path.
pub use rlx_interp as interp;
pub use rlx_interp::{eval_op, run_graph, run_loop_kernel, run_program_reference};

/// True when the fast path runs `op` natively: every compiled op except composites
/// without a native form in the f32 lanes, which legalization expands into primitives.
pub fn supports(op: &rlx_ir::Op) -> bool {
    match op {
        rlx_ir::Op::Input { .. } | rlx_ir::Op::Param { .. } => false,
        rlx_ir::Op::Unary(rlx_ir::UnaryOp::Composite(c)) => {
            fast::loops::lanes::native_composite(*c)
        }
        _ => true,
    }
}

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
