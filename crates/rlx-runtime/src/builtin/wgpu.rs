//! Adapter from the `rlx-wgpu` crate to the [`Backend`] contract, for the devices wgpu
//! serves: `gpu` (best adapter of any backend), `vulkan`, `opengl` (EGL, headless),
//! `webgpu` (WebGPU default limits and features only) and, on Apple hosts, `metal`.
//! Without an adapter it behaves as the seam did: unavailable with the reason, no ops
//! claimed, and `compile` refuses with that reason.

use crate::{Backend, CompileOptions, Executable, ParamStore, RuntimeError};
use rlx_driver::{Availability, Device, DeviceError, DeviceInfo};
use rlx_ir::{Graph, Op, Tensor, TensorType};
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuError, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::sync::Arc;

/// A wgpu backend for one device flavour. One instance per session, so its device weights
/// are shared by every graph the session compiles.
pub struct WgpuBackend {
    device: Device,
    flavor: Flavor,
    weights: Arc<WeightCache>,
    options: WgpuOptions,
}

fn make(device: Device, flavor: Flavor) -> Box<dyn Backend> {
    Box::new(WgpuBackend {
        device,
        flavor,
        weights: Arc::new(WeightCache::new()),
        options: WgpuOptions::default(),
    })
}

pub(crate) fn gpu() -> Box<dyn Backend> {
    make(Device::Gpu, Flavor::Gpu)
}

pub(crate) fn vulkan() -> Box<dyn Backend> {
    make(Device::Vulkan, Flavor::Vulkan)
}

pub(crate) fn opengl() -> Box<dyn Backend> {
    make(Device::OpenGl, Flavor::OpenGl)
}

pub(crate) fn webgpu() -> Box<dyn Backend> {
    make(Device::WebGpu, Flavor::WebGpu)
}

#[allow(dead_code)]
pub(crate) fn metal() -> Box<dyn Backend> {
    make(Device::Metal, Flavor::Metal)
}

impl WgpuBackend {
    fn err(&self, e: WgpuError) -> RuntimeError {
        match e {
            WgpuError::Unavailable(reason) => RuntimeError::Device(DeviceError::Unavailable {
                device: self.device,
                reason,
            }),
            other => RuntimeError::Backend {
                device: self.device,
                message: other.to_string(),
            },
        }
    }
}

impl Backend for WgpuBackend {
    fn device(&self) -> Device {
        self.device
    }

    fn availability(&self) -> Availability {
        rlx_wgpu::probe::availability(self.flavor)
    }

    fn info(&self) -> Option<DeviceInfo> {
        rlx_wgpu::probe::info(self.flavor)
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        self.availability().available && rlx_wgpu::caps::supports_on(self.flavor, op, inputs)
    }

    fn compile(
        &self,
        graph: &Graph,
        _options: &CompileOptions,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let avail = self.availability();
        if !avail.available {
            return Err(DeviceError::Unavailable {
                device: self.device,
                reason: avail.reason.unwrap_or_default(),
            }
            .into());
        }
        let program = rlx_opt::lower(graph)?;
        let program = WgpuProgram::compile(self.flavor, program, &self.weights, &self.options)
            .map_err(|e| self.err(e))?;
        Ok(Box::new(WgpuExecutable {
            device: self.device,
            program,
        }))
    }
}

struct WgpuExecutable {
    device: Device,
    program: WgpuProgram,
}

impl Executable for WgpuExecutable {
    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        params: &ParamStore,
    ) -> Result<Vec<(String, Tensor)>, RuntimeError> {
        let params = params.snapshot();
        self.program
            .run(inputs, &params)
            .map_err(|e| RuntimeError::Backend {
                device: self.device,
                message: e.to_string(),
            })
    }

    fn kernel_count(&self) -> usize {
        self.program.stats.dispatches
    }

    fn arena_bytes(&self) -> usize {
        self.program.stats.arena_bytes
    }

    fn dump(&self) -> String {
        format!(
            "{}\n// generated WGSL\n{}",
            self.program.dump(),
            self.program.source()
        )
    }
}
