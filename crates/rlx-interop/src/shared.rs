//! One allocation, two views: a `wgpu::Buffer` on the pair's Vulkan device and a CUDA
//! device pointer over the same bytes.

use crate::{Interop, InteropError};
use rlx_cuda::interop::ExternalBuffer;
use rlx_wgpu::interop::ExportableBuffer;

/// Bytes both APIs read and write in place. Order the accesses with the pair's hand-offs
/// ([`Interop::cuda_to_vulkan`], [`Interop::vulkan_to_cuda`]).
pub struct SharedBuffer {
    // Field order is drop order: CUDA unmaps before Vulkan releases its memory.
    cuda: ExternalBuffer,
    vulkan: ExportableBuffer,
}

impl SharedBuffer {
    /// Allocates `bytes` (rounded up to 4) of exportable Vulkan memory and maps it into
    /// CUDA.
    ///
    /// # Errors
    /// The Vulkan allocation or export, or CUDA's import, is refused.
    pub fn new(interop: &Interop, bytes: u64) -> Result<SharedBuffer, InteropError> {
        let vulkan = ExportableBuffer::new(&interop.vulkan.device, bytes)?;
        let cuda = ExternalBuffer::import(
            &interop.cuda,
            vulkan.export_fd()?,
            vulkan.allocation_bytes(),
            vulkan.size(),
            true,
        )?;
        Ok(SharedBuffer { cuda, vulkan })
    }

    /// The Vulkan view, to bind in a pipeline or copy with the pair's queue.
    pub fn wgpu_buffer(&self) -> &rlx_wgpu::wgpu::Buffer {
        self.vulkan.buffer()
    }

    /// The CUDA view: a device pointer valid in the pair's CUDA context.
    pub fn cuda_ptr(&self) -> u64 {
        self.cuda.ptr()
    }

    /// Bytes shared.
    pub fn size(&self) -> u64 {
        self.vulkan.size()
    }
}
