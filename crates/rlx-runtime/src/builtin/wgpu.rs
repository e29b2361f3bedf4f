//! `rlx-wgpu` behind the kernel-IR adapter, for the devices wgpu serves: `gpu` (best adapter
//! of any backend), `vulkan`, `opengl` (EGL, headless), `webgpu` (WebGPU default limits and
//! features only) and, on Apple hosts, `metal`.

use super::kernel::{DeviceProgram, KernelBackend, KernelDevice, KernelRuns};
use crate::Backend;
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{Op, Tensor, TensorType};
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuError, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::sync::Arc;

/// The wgpu device crate for one flavour, with the session's device weights.
struct Wgpu {
    flavor: Flavor,
    weights: WeightCache,
    options: WgpuOptions,
}

fn make(device: Device, flavor: Flavor) -> Box<dyn Backend> {
    KernelBackend::boxed(
        device,
        Wgpu {
            flavor,
            weights: WeightCache::new(),
            options: WgpuOptions::default(),
        },
    )
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

impl KernelDevice for Wgpu {
    type Program = WgpuProgram;
    type Error = WgpuError;

    fn availability(&self) -> Availability {
        rlx_wgpu::probe::availability(self.flavor)
    }

    fn info(&self) -> Option<DeviceInfo> {
        rlx_wgpu::probe::info(self.flavor)
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        rlx_wgpu::caps::supports_on(self.flavor, op, inputs)
    }

    fn compile(&self, program: KernelProgram) -> Result<WgpuProgram, WgpuError> {
        WgpuProgram::compile(self.flavor, program, &self.weights, &self.options)
    }

    fn unavailable(e: &WgpuError) -> Option<String> {
        match e {
            WgpuError::Unavailable(reason) => Some(reason.clone()),
            _ => None,
        }
    }
}

impl DeviceProgram for WgpuProgram {
    type Error = WgpuError;

    fn run(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
    ) -> Result<Vec<(String, Tensor)>, WgpuError> {
        WgpuProgram::run(self, inputs, weights)
    }

    fn kernel_count(&self) -> usize {
        self.stats.dispatches
    }

    fn arena_bytes(&self) -> usize {
        self.stats.arena_bytes
    }

    fn dump(&self) -> String {
        format!(
            "{}\n// generated WGSL\n{}",
            WgpuProgram::dump(self),
            self.source()
        )
    }

    fn profile(
        &self,
        inputs: &HashMap<String, Tensor>,
        weights: &HashMap<String, Arc<Tensor>>,
        runs: usize,
    ) -> Result<Option<(KernelRuns, &'static str)>, WgpuError> {
        WgpuProgram::run(self, inputs, weights)?;
        let (timed, clock) = self.profile_dispatches(runs)?;
        let runs = timed
            .into_iter()
            .map(|run| {
                run.into_iter()
                    .map(|(label, us)| (label, "dispatch".to_string(), us))
                    .collect()
            })
            .collect();
        Ok(Some((runs, clock)))
    }
}
