//! Shared by the benchmark examples: the compile pipeline, statistics, argument parsing.

#![allow(dead_code)]

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Tensor};

/// optimize (folding through the CPU reference) → legalize for CUDA → lower.
pub fn lower_for_cuda(graph: &Graph) -> Result<KernelProgram, String> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_cuda::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "cuda", &caps).map_err(|e| e.to_string())?;
    rlx_opt::lower(&legal).map_err(|e| e.to_string())
}

/// The `q`-quantile of `v` (sorted in place).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The value after `--name` on the command line, or `default`.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// True when `--name` is on the command line.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Exits with `SKIPPED: <reason>` when no CUDA device is present.
pub fn require_device(what: &str) {
    let a = rlx_cuda::probe::availability();
    if !a.available {
        println!(
            "SKIPPED: {what}: no CUDA device: {}",
            a.reason.unwrap_or_default()
        );
        std::process::exit(0);
    }
}
