//! Adapter from the `rlx-cuda` crate to the [`Backend`] contract: lowers the legalized graph
//! to kernel IR with `rlx-opt` and compiles it with NVRTC-generated kernels and cuBLASLt.
//! Without a driver it behaves as the seam did: unavailable with the reason, no ops claimed,
//! and `compile` refuses with that reason.

use crate::{Backend, CompileOptions, Executable, ParamStore, RuntimeError};
use rlx_cuda::weights::WeightCache;
use rlx_cuda::{CudaError, CudaOptions, CudaProgram};
use rlx_driver::{Availability, Device, DeviceError, DeviceInfo};
use rlx_ir::{Graph, Op, Tensor, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// The CUDA backend. One instance per session, so its device weights are shared by every
/// graph the session compiles.
pub struct CudaBackend {
    weights: Arc<WeightCache>,
    options: CudaOptions,
}

pub(crate) fn factory() -> Box<dyn Backend> {
    let options = CudaOptions {
        tf32: std::env::var("RLX_CUDA_TF32").is_ok_and(|v| v == "1"),
        ..CudaOptions::default()
    };
    Box::new(CudaBackend {
        weights: Arc::new(WeightCache::new()),
        options,
    })
}

fn backend_err(e: CudaError) -> RuntimeError {
    match e {
        CudaError::Unavailable(reason) => RuntimeError::Device(DeviceError::Unavailable {
            device: Device::Cuda,
            reason,
        }),
        other => RuntimeError::Backend {
            device: Device::Cuda,
            message: other.to_string(),
        },
    }
}

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        Device::Cuda
    }

    fn availability(&self) -> Availability {
        rlx_cuda::probe::availability()
    }

    fn info(&self) -> Option<DeviceInfo> {
        rlx_cuda::probe::info()
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.availability().available && rlx_cuda::caps::supports(op, inputs)
    }

    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let avail = self.availability();
        if !avail.available {
            return Err(DeviceError::Unavailable {
                device: Device::Cuda,
                reason: avail.reason.unwrap_or_default(),
            }
            .into());
        }
        let program = rlx_opt::lower(graph)?;
        let program =
            CudaProgram::compile(program, &self.weights, &self.options).map_err(backend_err)?;
        Ok(Box::new(CudaExecutable { program }))
    }
}

struct CudaExecutable {
    program: CudaProgram,
}

impl Executable for CudaExecutable {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let params = params.snapshot();
        self.program.run(inputs, &params).map_err(backend_err)
    }

    fn kernel_count(&self) -> usize {
        self.program.stats.launches
    }

    fn arena_bytes(&self) -> usize {
        self.program.stats.arena_bytes
    }

    fn dump(&self) -> String {
        format!(
            "{}\n// generated CUDA C\n{}",
            self.program.dump(),
            self.program.source()
        )
    }
}
