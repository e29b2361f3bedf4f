//! `rlx-cuda` behind the kernel-IR adapter: NVRTC-generated kernels and cuBLASLt.

use super::kernel::{DeviceProgram, KernelBackend, KernelDevice, KernelRuns};
use crate::Backend;
use rlx_cuda::weights::WeightCache;
use rlx_cuda::{CudaError, CudaOptions, CudaProgram};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// The CUDA device crate with the session's device weights.
struct Cuda {
    weights: WeightCache,
    options: CudaOptions,
}

pub(crate) fn factory() -> Box<dyn Backend> {
    let options = CudaOptions {
        tf32: std::env::var("RLX_CUDA_TF32").is_ok_and(|v| v == "1"),
        ..CudaOptions::default()
    };
    KernelBackend::boxed(
        Device::Cuda,
        Cuda {
            weights: WeightCache::new(),
            options,
        },
    )
}

impl KernelDevice for Cuda {
    type Program = CudaProgram;
    type Error = CudaError;

    fn availability(&self) -> Availability {
        rlx_cuda::probe::availability()
    }

    fn info(&self) -> Option<DeviceInfo> {
        rlx_cuda::probe::info()
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        rlx_cuda::caps::supports(op, inputs)
    }

    fn compile(&self, program: KernelProgram) -> Result<CudaProgram, CudaError> {
        CudaProgram::compile(program, &self.weights, &self.options)
    }

    fn unavailable(e: &CudaError) -> Option<String> {
        match e {
            CudaError::Unavailable(reason) => Some(reason.clone()),
            _ => None,
        }
    }
}

impl DeviceProgram for CudaProgram {
    type Error = CudaError;

    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, CudaError> {
        CudaProgram::run(self, inputs, weights)
    }

    fn kernel_count(&self) -> usize {
        self.stats.launches
    }

    fn arena_bytes(&self) -> usize {
        self.stats.arena_bytes
    }

    fn dump(&self) -> String {
        format!(
            "{}\n// generated CUDA C\n{}",
            CudaProgram::dump(self),
            self.source()
        )
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        rlx_cuda::memory::DeviceMemory::get()
            .ok()
            .map(|m| m.stats())
    }

    fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
        runs: usize,
    ) -> Result<Option<(KernelRuns, &'static str)>, CudaError> {
        CudaProgram::run(self, inputs, weights)?;
        // medians per step already: one run of them
        let run = self
            .profile_steps(runs)?
            .into_iter()
            .map(|(label, ms)| {
                let kind = if label.starts_with("gemm ") {
                    "gemm"
                } else {
                    "kernel"
                };
                (label, kind.to_string(), ms * 1e3)
            })
            .collect();
        Ok(Some((vec![run], "cuda events")))
    }
}
