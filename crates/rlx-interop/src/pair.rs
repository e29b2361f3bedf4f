//! The device pair: CUDA's device 0 and the Vulkan adapter with the same UUID, and the
//! hand-offs that order the CUDA stream and the wgpu queue.

use crate::InteropError;
use rlx_cuda::device::CudaDevice;
use rlx_cuda::interop::{device_uuid, ExternalSemaphore};
use rlx_wgpu::interop::{ExportableSemaphore, InteropDevice, Ordering};
use std::sync::{Arc, Mutex};

/// One direction's timeline semaphore, seen from both APIs.
struct Link {
    // Field order is drop order: CUDA's import goes (after its stream drains) first.
    cuda: ExternalSemaphore,
    vulkan: ExportableSemaphore,
}

impl Link {
    fn new(vulkan: &InteropDevice, cuda: &Arc<CudaDevice>) -> Result<Link, InteropError> {
        let semaphore = ExportableSemaphore::new(&vulkan.device, &vulkan.queue)?;
        let imported = ExternalSemaphore::import(cuda, semaphore.export_fd()?)?;
        Ok(Link {
            cuda: imported,
            vulkan: semaphore,
        })
    }
}

/// CUDA's device and a Vulkan wgpu device on the same GPU, with what orders them.
pub struct Interop {
    /// the Vulkan side: bind [`crate::SharedBuffer::wgpu_buffer`] on its device, submit to
    /// its queue
    pub vulkan: InteropDevice,
    /// the CUDA side: enqueue work on its stream
    pub cuda: Arc<CudaDevice>,
    /// CUDA signals, Vulkan waits; then Vulkan signals, CUDA waits (semaphore ordering only)
    links: Option<Mutex<(Link, Link)>>,
    /// why the hand-offs wait on the host, when they do
    host_reason: Option<String>,
}

impl Interop {
    /// Opens CUDA's device 0 and the Vulkan adapter with its UUID, and, where the Vulkan
    /// driver can export semaphores and CUDA imports them, one timeline semaphore per
    /// direction; otherwise hand-offs wait on the host ([`Interop::host_ordering_reason`]).
    ///
    /// # Errors
    /// CUDA unavailable, no Vulkan adapter on the same GPU, or no
    /// `VK_KHR_external_memory_fd`.
    pub fn open() -> Result<Interop, InteropError> {
        let cuda = CudaDevice::get()?;
        // The opening thread uses the context first (imports, the caller's copies).
        cuda.bind()?;
        let uuid = device_uuid(&cuda)?;
        let vulkan = InteropDevice::open(Some(uuid))?;
        let (links, host_reason) = match vulkan.ordering {
            Ordering::Semaphore => {
                match Link::new(&vulkan, &cuda).and_then(|a| Ok((a, Link::new(&vulkan, &cuda)?))) {
                    Ok(pair) => (Some(Mutex::new(pair)), None),
                    Err(e) => (None, Some(format!("semaphore sharing failed: {e}"))),
                }
            }
            Ordering::Host => (
                None,
                Some(format!(
                    "{} has no VK_KHR_external_semaphore_fd",
                    vulkan.adapter_name
                )),
            ),
        };
        Ok(Interop {
            vulkan,
            cuda,
            links,
            host_reason,
        })
    }

    /// Why hand-offs wait on the host instead of on semaphores; `None` with semaphores.
    pub fn host_ordering_reason(&self) -> Option<&str> {
        self.host_reason.as_deref()
    }

    /// Semaphores on the GPU, or host waits where the driver lacks the semaphore extension.
    pub fn ordering(&self) -> Ordering {
        if self.links.is_some() {
            Ordering::Semaphore
        } else {
            Ordering::Host
        }
    }

    /// Everything enqueued on the CUDA stream so far happens before the next submit on the
    /// Vulkan queue (the GPU waits; with host ordering the stream is synchronized here).
    ///
    /// # Errors
    /// A driver refuses the signal or wait, or a CUDA kernel failed (host ordering).
    pub fn cuda_to_vulkan(&self) -> Result<(), InteropError> {
        let Some(links) = &self.links else {
            self.cuda.sync()?;
            return Ok(());
        };
        let mut links = links.lock().unwrap_or_else(|e| e.into_inner());
        let link = &mut links.0;
        let value = link.vulkan.next_value();
        link.cuda.signal(value)?;
        link.vulkan.wait_on_next_submit(value)?;
        Ok(())
    }

    /// Everything submitted to the Vulkan queue so far happens before the next work
    /// enqueued on the CUDA stream (the GPU waits; with host ordering the device is polled
    /// until idle here).
    ///
    /// # Errors
    /// A driver refuses the signal or wait, or the Vulkan device is lost (host ordering).
    pub fn vulkan_to_cuda(&self) -> Result<(), InteropError> {
        let Some(links) = &self.links else {
            self.vulkan
                .device
                .poll(rlx_wgpu::wgpu::PollType::wait_indefinitely())
                .map_err(|e| rlx_wgpu::WgpuError::Device {
                    call: "poll (vulkan_to_cuda)".into(),
                    message: e.to_string(),
                })?;
            return Ok(());
        };
        let mut links = links.lock().unwrap_or_else(|e| e.into_inner());
        let link = &mut links.1;
        let value = link.vulkan.next_value();
        link.vulkan.signal_after_submitted(value)?;
        link.cuda.wait(value)?;
        Ok(())
    }
}
