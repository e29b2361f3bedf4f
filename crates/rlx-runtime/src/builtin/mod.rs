//! Builtin registrations: one line per backend, each behind its Cargo feature. This is the
//! only place in the runtime that names a backend.

#[cfg(feature = "cpu")]
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cpu")]
mod host_memory;
#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod kernel;
mod seam;
#[cfg(feature = "wgpu")]
mod wgpu;

#[allow(unused_imports)]
use crate::registry::BackendFactory;
#[allow(unused_imports)]
use rlx_driver::Device;

/// Calls `add` for every builtin compiled in.
pub(crate) fn register_builtins(add: &mut dyn FnMut(Device, BackendFactory)) {
    #[cfg(feature = "cpu")]
    add(Device::Cpu, cpu::factory);
    #[cfg(all(feature = "metal", not(all(feature = "wgpu", target_vendor = "apple"))))]
    add(Device::Metal, seam::metal);
    #[cfg(all(feature = "wgpu", target_vendor = "apple"))]
    add(Device::Metal, wgpu::metal);
    #[cfg(feature = "mlx")]
    add(Device::Mlx, seam::mlx);
    #[cfg(feature = "coreml")]
    add(Device::Ane, seam::ane);
    #[cfg(all(feature = "gpu", not(feature = "wgpu")))]
    add(Device::Gpu, seam::gpu);
    #[cfg(feature = "wgpu")]
    add(Device::Gpu, wgpu::gpu);
    #[cfg(all(feature = "webgpu", not(feature = "wgpu")))]
    add(Device::WebGpu, seam::webgpu);
    #[cfg(feature = "wgpu")]
    add(Device::WebGpu, wgpu::webgpu);
    #[cfg(all(feature = "opengl", not(feature = "wgpu")))]
    add(Device::OpenGl, seam::opengl);
    #[cfg(feature = "wgpu")]
    add(Device::OpenGl, wgpu::opengl);
    #[cfg(all(feature = "vulkan", not(feature = "wgpu")))]
    add(Device::Vulkan, seam::vulkan);
    #[cfg(feature = "wgpu")]
    add(Device::Vulkan, wgpu::vulkan);
    #[cfg(feature = "cuda")]
    add(Device::Cuda, cuda::factory);
    #[cfg(feature = "rocm")]
    add(Device::Rocm, seam::rocm);
    #[cfg(feature = "oneapi")]
    add(Device::OneApi, seam::oneapi);
    #[cfg(feature = "tpu")]
    add(Device::Tpu, seam::tpu);
    #[cfg(feature = "qnn")]
    add(Device::Hexagon, seam::hexagon);
    #[cfg(feature = "xdna")]
    add(Device::Xdna, seam::xdna);
    #[cfg(feature = "egpu")]
    add(Device::Egpu, seam::egpu);
}
