//! rlx-interop: CUDA↔Vulkan zero-copy. One dedicated Vulkan allocation, exported as an
//! opaque fd (`crates/rlx-wgpu/src/interop.rs`) and imported into CUDA
//! (`crates/rlx-cuda/src/interop.rs`), is a `wgpu::Buffer` and a CUDA device pointer at once
//! ([`SharedBuffer`]); [`Interop::cuda_to_vulkan`] and [`Interop::vulkan_to_cuda`] order the
//! CUDA stream and the wgpu queue around a hand-off without copying a byte.
//!
//! Ordering ([`Interop::ordering`]): where the Vulkan driver has
//! `VK_KHR_external_semaphore_fd`, two exported timeline semaphores (one per direction) are
//! signalled by one side and waited on by the other on the GPU, and the host never blocks;
//! otherwise each hand-off waits on the host for the producing side to finish (CUDA stream
//! synchronize, `wgpu::Device::poll`).
//!
//! Linux only (opaque fds); on other hosts the crate is empty.

#![warn(missing_docs)]
#![cfg(all(unix, not(target_vendor = "apple")))]

mod pair;
mod shared;

pub use pair::Interop;
pub use rlx_wgpu::interop::Ordering;
pub use shared::SharedBuffer;

/// Why opening the device pair or sharing a buffer failed.
#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    /// The CUDA side: unavailable, or the driver refused an import, signal or wait.
    #[error("interop (CUDA side): {0}")]
    Cuda(#[from] rlx_cuda::CudaError),
    /// The Vulkan side: no adapter, a missing extension, or the driver refused an export.
    #[error("interop (Vulkan side): {0}")]
    Vulkan(#[from] rlx_wgpu::WgpuError),
}
