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

/// Compiles the kernels as one program with NVRTC for sm_90 (no GPU needed), panicking with
/// NVRTC's log and the numbered source on failure. Returns false when NVRTC is absent (the
/// test was reported as skipped).
pub fn compile_check(test: &str, kernels: &[EmittedKernel]) -> bool {
    if !nvrtc_ready(test) {
        return false;
    }
    let src = program_source(kernels);
    let opts = rlx_cuda::nvrtc::options(&Target::h200().arch);
    if let Err(log) = rlx_cuda::nvrtc::compile(test, &src, &opts) {
        let numbered: Vec<String> = src.lines().enumerate().map(|(i, l)| format!("{:4} {l}", i + 1)).collect();
        panic!("NVRTC rejected {test}:\n{log}\n--- source ---\n{}", numbered.join("\n"));
    }
    true
}
