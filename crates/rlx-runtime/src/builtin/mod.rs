//! Builtin registrations: one line per backend, each behind its Cargo feature. This is the
//! only place in the runtime that names a backend.

#[cfg(feature = "cpu")]
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod seam;

#[allow(unused_imports)]
use crate::registry::BackendFactory;
#[allow(unused_imports)]
use rlx_driver::Device;

/// Calls `add` for every builtin compiled in.
pub(crate) fn register_builtins(add: &mut dyn FnMut(Device, BackendFactory)) {
    #[cfg(feature = "cpu")]
    add(Device::Cpu, cpu::factory);
    #[cfg(feature = "metal")]
    add(Device::Metal, seam::metal);
    #[cfg(feature = "mlx")]
    add(Device::Mlx, seam::mlx);
    #[cfg(feature = "coreml")]
    add(Device::Ane, seam::ane);
    #[cfg(feature = "gpu")]
    add(Device::Gpu, seam::gpu);
    #[cfg(feature = "webgpu")]
    add(Device::WebGpu, seam::webgpu);
    #[cfg(feature = "opengl")]
    add(Device::OpenGl, seam::opengl);
    #[cfg(feature = "vulkan")]
    add(Device::Vulkan, seam::vulkan);
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
