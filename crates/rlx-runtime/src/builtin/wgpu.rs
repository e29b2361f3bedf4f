//! `rlx-wgpu` behind the kernel-IR adapter, for the devices wgpu serves: `gpu` (best adapter
//! of any backend), `vulkan`, `opengl` (EGL, headless), `webgpu` (WebGPU default limits and
//! features only) and, on Apple hosts, `metal`.

use super::kernel::{
    device_err, DeviceBuffers, DeviceProgram, KernelBackend, KernelDevice, KernelRuns,
};
use crate::{Backend, BoundValue, BufferStorage, DeviceBuffer, RawHandle, RuntimeError};
use rlx_driver::{Availability, Device, DeviceInfo};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Op, Tensor, TensorData, TensorType};
use rlx_wgpu::memory::DeviceBuffer as WgpuBuffer;
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{transfer, BoundInput, Flavor, WgpuError, WgpuOptions, WgpuProgram};
use std::any::Any;
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

    fn settings(&self) -> Vec<rlx_driver::Setting> {
        rlx_driver::settings::settings(rlx_wgpu::settings::KNOBS)
    }

    fn supports(&self, op: &Op, inputs: &[&TensorType]) -> bool {
        rlx_wgpu::caps::supports_on(self.flavor, op, inputs)
    }

    /// With SHADER_F16, `--precision f16` stores activations in f16 as on CUDA (norms and
    /// softmax still compute in f32 inside their kernels).
    fn low_precision_activations(&self) -> bool {
        rlx_wgpu::probe::context(self.flavor).is_ok_and(|c| c.facts.shader_f16)
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

    fn buffers(&self) -> Option<&dyn DeviceBuffers> {
        Some(self)
    }
}

fn wgpu_err(device: Device, e: WgpuError) -> RuntimeError {
    let reason = Wgpu::unavailable(&e);
    device_err(device, e, reason)
}

/// Pool memory: a range of one of the pool's wgpu buffers.
impl BufferStorage for WgpuBuffer {
    fn bytes(&self) -> usize {
        self.size() as usize
    }

    fn handle(&self) -> RawHandle {
        RawHandle::Wgpu {
            offset: self.offset(),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The wgpu buffer and byte offset of a device buffer. wgpu copies whole 4-byte words: the
/// offset must be one, and a range written (`writes`) whose size is not must end its
/// storage, so that the padding lands in the allocation's slack, not in a neighbour view.
fn range<'a>(
    b: &'a DeviceBuffer,
    what: &str,
    writes: bool,
) -> Result<(&'a rlx_wgpu::wgpu::Buffer, u64), RuntimeError> {
    let storage = b.storage_as::<WgpuBuffer>(what)?;
    let RawHandle::Wgpu { offset } = b.handle() else {
        return Err(RuntimeError::Buffer(format!("{what}: not a wgpu buffer")));
    };
    let padded = b.byte_size().next_multiple_of(4);
    let ends_storage = b.offset() + padded <= b.storage_bytes()
        && (b.byte_size().is_multiple_of(4) || b.offset() + padded == b.storage_bytes());
    if offset % 4 != 0 || (writes && !ends_storage) || b.offset() + padded > b.storage_bytes() {
        return Err(RuntimeError::Buffer(format!(
            "{what}: wgpu copies whole 4-byte words; a view of {} bytes at byte {} of its buffer \
             is not word-aligned there",
            b.byte_size(),
            b.offset()
        )));
    }
    Ok((storage.buffer(), offset))
}

impl Wgpu {
    fn context(&self) -> Result<Arc<rlx_wgpu::probe::Context>, RuntimeError> {
        let device = flavor_device(self.flavor);
        transfer::context(self.flavor).map_err(|e| wgpu_err(device, e))
    }
}

/// The device a flavour serves (for errors).
fn flavor_device(flavor: Flavor) -> Device {
    match flavor {
        Flavor::Gpu => Device::Gpu,
        Flavor::Vulkan => Device::Vulkan,
        Flavor::OpenGl => Device::OpenGl,
        Flavor::WebGpu => Device::WebGpu,
        Flavor::Metal => Device::Metal,
    }
}

impl DeviceBuffers for Wgpu {
    fn alloc(
        &self,
        device: Device,
        dtype: DType,
        shape: &[usize],
    ) -> Result<DeviceBuffer, RuntimeError> {
        let ctx = self.context()?;
        let bytes = shape.iter().product::<usize>() * dtype.size_bytes();
        let b = rlx_wgpu::memory::memory(&ctx)
            .alloc(bytes)
            .map_err(|e| wgpu_err(device, e))?;
        DeviceBuffer::new(device, dtype, shape, Arc::new(b))
    }

    unsafe fn wrap(
        &self,
        device: Device,
        handle: RawHandle,
        _dtype: DType,
        _shape: &[usize],
        _owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DeviceBuffer, RuntimeError> {
        Err(RuntimeError::Unsupported {
            device: device.to_string(),
            what: format!("wrapping foreign memory ({handle:?})"),
        })
    }

    fn upload(&self, dst: &DeviceBuffer, src: &Tensor) -> Result<(), RuntimeError> {
        let (buffer, offset) = range(dst, "upload", true)?;
        let ctx = self.context()?;
        transfer::write(&ctx, &self.options, buffer, offset, src.data().as_bytes())
            .map_err(|e| wgpu_err(dst.device(), e))
    }

    fn download(&self, src: &DeviceBuffer) -> Result<Tensor, RuntimeError> {
        let (buffer, offset) = range(src, "download", false)?;
        let ctx = self.context()?;
        let bytes = transfer::read(&ctx, &self.options, buffer, offset, src.byte_size())
            .map_err(|e| wgpu_err(src.device(), e))?;
        let data = TensorData::from_le_bytes(src.dtype(), &bytes)
            .ok_or_else(|| RuntimeError::Buffer(format!("unreadable {} bytes", src.dtype())))?;
        Tensor::new(src.shape().to_vec(), data).map_err(|e| RuntimeError::Buffer(e.to_string()))
    }

    fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer) -> Result<(), RuntimeError> {
        let from = range(src, "copy", false)?;
        let to = range(dst, "copy", true)?;
        let ctx = self.context()?;
        transfer::copy(&ctx, from, to, src.byte_size() as u64)
            .map_err(|e| wgpu_err(dst.device(), e))
    }

    fn memory(&self) -> Option<rlx_mem::Stats> {
        let ctx = transfer::context(self.flavor).ok()?;
        Some(rlx_wgpu::memory::memory(&ctx).stats())
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

    fn run_bound(
        &self,
        device: Device,
        inputs: &HashMap<String, BoundValue>,
        weights: &HashMap<String, Arc<Tensor>>,
        outputs: &[(String, DeviceBuffer)],
    ) -> Result<(), RuntimeError> {
        let mut bound = HashMap::with_capacity(inputs.len());
        for (name, v) in inputs {
            let input = match v {
                BoundValue::Host(t) => BoundInput::Host(t),
                BoundValue::Device(b) => {
                    let (buffer, offset) = range(b, &format!("input `{name}`"), false)?;
                    BoundInput::Device {
                        buffer,
                        offset,
                        dtype: b.dtype(),
                        shape: b.shape(),
                    }
                }
            };
            bound.insert(name.clone(), input);
        }
        let mut outs = Vec::with_capacity(outputs.len());
        for (name, b) in outputs {
            let (buffer, offset) = range(b, &format!("output `{name}`"), true)?;
            outs.push((name.clone(), buffer, offset));
        }
        WgpuProgram::run_bound(self, &bound, weights, &outs).map_err(|e| wgpu_err(device, e))
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

    fn memory(&self) -> Option<rlx_mem::Stats> {
        Some(self.memory_stats())
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
