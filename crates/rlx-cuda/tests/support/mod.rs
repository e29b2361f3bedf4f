//! Helpers shared by the integration tests: kernel IR builders and the NVRTC compile check.

#![allow(dead_code)]

use rlx_cuda::codegen::{program_source, EmittedKernel, Target};
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, KernelReduce, LoopKernel, View};
use rlx_ir::{DType, ReduceOp};

/// Contiguous strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1] as isize;
    }
    s
}

/// An input over `loop_dims` reading `buffer` contiguously.
pub fn input(buffer: usize, dtype: DType, view_strides: Vec<isize>) -> KernelInput {
    KernelInput {
        buffer,
        dtype,
        view: View {
            offset: 0,
            strides: view_strides,
        },
    }
}

/// A node.
pub fn node(expr: Expr, dtype: DType) -> ExprNode {
    ExprNode { expr, dtype }
}

/// A loop kernel from parts.
pub fn kernel(
    name: &str,
    shape: &[usize],
    reduce_shape: &[usize],
    inputs: Vec<KernelInput>,
    body: Vec<ExprNode>,
    reduce: Option<(ReduceOp, usize, DType)>,
    output: usize,
) -> LoopKernel {
    let result = body.len() - 1;
    LoopKernel {
        name: name.into(),
        shape: shape.to_vec(),
        reduce_shape: reduce_shape.to_vec(),
        inputs,
        body,
        reduce: reduce.map(|(op, value, dtype)| KernelReduce { op, value, dtype }),
        result,
        output,
    }
}

/// Where libnvrtc lives when installed by `pip install nvidia-cuda-nvrtc==13.0.88`.
pub fn nvrtc_ready(test: &str) -> bool {
    match rlx_cuda::nvrtc::nvrtc_present() {
        Ok(()) => true,
        Err(reason) => {
            rlx_driver::testing::skip(test, &format!("NVRTC absent: {reason}"));
            false
        }
    }
}

/// Compiles the kernels as one program with NVRTC for sm_90a (no GPU needed), panicking with
/// NVRTC's log and the numbered source on failure (`RLX_DUMP_SRC=DIR` also writes the source
/// to `DIR/<test>.cu`). Returns false when NVRTC is absent (the test was reported as skipped).
pub fn compile_check(test: &str, kernels: &[EmittedKernel]) -> bool {
    if !nvrtc_ready(test) {
        return false;
    }
    let src = program_source(kernels);
    if let Ok(d) = std::env::var("RLX_DUMP_SRC") {
        std::fs::write(format!("{d}/{test}.cu"), &src).unwrap();
    }
    let opts = rlx_cuda::nvrtc::options(&Target::h200().arch);
    if let Err(log) = rlx_cuda::nvrtc::compile(test, &src, &opts) {
        let numbered: Vec<String> = src
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:4} {l}", i + 1))
            .collect();
        panic!(
            "NVRTC rejected {test}:\n{log}\n--- source ---\n{}",
            numbered.join("\n")
        );
    }
    true
}

pub mod cases;
pub mod corpus;

use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Graph, Tensor};

/// The compile pipeline up to kernel IR for the CUDA capability list: optimize (folding
/// through the CPU reference), legalize, lower.
pub fn lower_for_cuda(graph: &Graph) -> Result<KernelProgram, String> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_cuda::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "cuda", &caps).map_err(|e| e.to_string())?;
    rlx_opt::lower(&legal).map_err(|e| e.to_string())
}

/// Relative L2 error of `got` against `want`.
pub fn rel_l2(got: &Tensor, want: &Tensor) -> f64 {
    let (a, b) = (got.to_f64_vec(), want.to_f64_vec());
    let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    if num == 0.0 {
        return 0.0;
    }
    (num / den.max(1e-30)).sqrt()
}

/// The tolerance of DESIGN.md §6 for a dtype (relative L2).
pub fn tolerance(dtype: DType, tf32: bool) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 if tf32 => 1e-3,
        _ => 1e-5,
    }
}

/// The CUDA device, bound to this thread; None (after printing `SKIPPED: <reason>`) when
/// there is none.
pub fn cuda_device(test: &str) -> Option<std::sync::Arc<rlx_cuda::device::CudaDevice>> {
    let a = rlx_cuda::probe::availability();
    if !a.available {
        rlx_driver::testing::skip(
            test,
            &format!("no CUDA device: {}", a.reason.unwrap_or_default()),
        );
        return None;
    }
    let device = rlx_cuda::device::CudaDevice::get().expect("open the device");
    device.bind().expect("bind");
    Some(device)
}
