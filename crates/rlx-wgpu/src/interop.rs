//! CUDA↔Vulkan zero-copy, the Vulkan half: buffers whose memory is exported as an opaque
//! fd (`VK_KHR_external_memory_fd`) and timeline semaphores exported the same way
//! (`VK_KHR_external_semaphore_fd`), so another API (CUDA, through `crates/rlx-interop`)
//! maps the same bytes and orders its stream against this queue without a copy.
//!
//! wgpu enables `VK_KHR_external_memory_fd` by itself where the driver offers it, so an
//! [`ExportableBuffer`] works on any Vulkan wgpu device, the shared `vulkan` context
//! included. wgpu never enables the semaphore extension, so [`InteropDevice::open`] opens
//! a Vulkan device of its own that has it; where the driver lacks it, hand-offs fall back
//! to host-side waits ([`Ordering::Host`]).

use crate::WgpuError;
use ash::{khr, vk};
use std::os::fd::{FromRawFd, OwnedFd};
use wgpu::hal::api::Vulkan;

/// How a hand-off orders the two APIs' queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    /// Exported timeline semaphores: the GPU waits, the host does not.
    Semaphore,
    /// The host waits for one side to finish (`device.poll`, stream synchronize) before the
    /// other starts: the fallback where `VK_KHR_external_semaphore_fd` is missing.
    Host,
}

/// A Vulkan wgpu device opened for interop: `VK_KHR_external_memory_fd` always, and
/// `VK_KHR_external_semaphore_fd` where the driver offers it (see [`InteropDevice::ordering`]).
pub struct InteropDevice {
    /// the wgpu device (Vulkan backend)
    pub device: wgpu::Device,
    /// its queue
    pub queue: wgpu::Queue,
    /// the adapter's name, e.g. "NVIDIA H200"
    pub adapter_name: String,
    /// the physical device's UUID (`VkPhysicalDeviceIDProperties::deviceUUID`), which CUDA's
    /// `cuDeviceGetUuid` must match for an import to be valid
    pub device_uuid: [u8; 16],
    /// semaphores where the extension is enabled, host waits otherwise
    pub ordering: Ordering,
    _adapter: wgpu::Adapter,
    _instance: wgpu::Instance,
}

impl InteropDevice {
    /// Opens the Vulkan adapter whose UUID is `uuid` (CUDA's device, for an import to be
    /// valid), or with `None` the best one (discrete GPUs first), with the external memory
    /// and, where offered, external semaphore extensions.
    ///
    /// # Errors
    /// No (matching) Vulkan adapter, the driver lacks `VK_KHR_external_memory_fd`, or the
    /// device could not be opened; the message names what is missing.
    pub fn open(uuid: Option<[u8; 16]>) -> Result<InteropDevice, WgpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        desc.flags = wgpu::InstanceFlags::empty();
        let instance = wgpu::Instance::new(desc);
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        adapters.retain(|a| a.get_info().backend == wgpu::Backend::Vulkan);
        adapters.sort_by_key(|a| device_type_rank(a.get_info().device_type));
        if adapters.is_empty() {
            return Err(WgpuError::Unavailable(
                "interop: no Vulkan adapter: install a GPU driver with its Vulkan ICD and \
                 libvulkan1 (the loader)"
                    .into(),
            ));
        }
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| format!("{} ({})", a.get_info().name, hex(&adapter_uuid(a))))
            .collect();
        let adapter = match uuid {
            None => adapters.into_iter().next(),
            Some(want) => adapters.into_iter().find(|a| adapter_uuid(a) == want),
        }
        .ok_or_else(|| {
            WgpuError::Unavailable(format!(
                "interop: no Vulkan adapter has device UUID {} (CUDA's device); seen: {}",
                hex(&uuid.unwrap_or_default()),
                seen.join(", ")
            ))
        })?;
        let info = adapter.get_info();
        let features = adapter.features()
            & (wgpu::Features::SHADER_F16
                | wgpu::Features::SUBGROUP
                | wgpu::Features::TIMESTAMP_QUERY);
        let limits = adapter.limits();
        // SAFETY: the guard is only read, and dropped before the adapter is used again.
        let (memory_ext, semaphore_ext) = unsafe {
            let hal = adapter
                .as_hal::<Vulkan>()
                .ok_or_else(|| not_vulkan(&info.name))?;
            let caps = hal.physical_device_capabilities();
            (
                caps.supports_extension(khr::external_memory_fd::NAME),
                caps.supports_extension(khr::external_semaphore_fd::NAME),
            )
        };
        let device_uuid = adapter_uuid(&adapter);
        if !memory_ext {
            return Err(WgpuError::Unavailable(format!(
                "interop: the Vulkan driver of {} lacks VK_KHR_external_memory_fd, so its \
                 memory cannot be exported",
                info.name
            )));
        }
        let device_desc = wgpu::DeviceDescriptor {
            label: Some("rlx-interop"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        // Always through wgpu-hal, so the path that adds the semaphore extension is the one
        // every driver (lavapipe in CI included) exercises.
        // SAFETY: the callback only adds an extension the adapter reports; the hal device
        // comes from this adapter and is created with `features`, which `device_desc` names.
        let opened = unsafe {
            let open = {
                let hal = adapter
                    .as_hal::<Vulkan>()
                    .ok_or_else(|| not_vulkan(&info.name))?;
                hal.open_with_callback(
                    features,
                    &limits,
                    &wgpu::MemoryHints::Performance,
                    Some(Box::new(move |args| {
                        let name = khr::external_semaphore_fd::NAME;
                        if semaphore_ext && !args.extensions.contains(&name) {
                            args.extensions.push(name);
                        }
                    })),
                )
                .map_err(|e| device_error("vkCreateDevice (interop)", e))?
            };
            adapter.create_device_from_hal(open, &device_desc)
        };
        let (device, queue) = opened.map_err(|e| device_error("request_device (interop)", e))?;
        Ok(InteropDevice {
            device,
            queue,
            adapter_name: info.name,
            device_uuid,
            ordering: if semaphore_ext {
                Ordering::Semaphore
            } else {
                Ordering::Host
            },
            _adapter: adapter,
            _instance: instance,
        })
    }
}

/// A device UUID as CUDA and Vulkan tools print it (hex, no dashes).
pub fn hex(uuid: &[u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

fn adapter_uuid(adapter: &wgpu::Adapter) -> [u8; 16] {
    // SAFETY: the guard is only read.
    unsafe {
        adapter
            .as_hal::<Vulkan>()
            .map(|hal| {
                physical_device_uuid(
                    hal.shared_instance().raw_instance(),
                    hal.raw_physical_device(),
                )
            })
            .unwrap_or_default()
    }
}

fn device_type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn not_vulkan(what: &str) -> WgpuError {
    WgpuError::Unavailable(format!(
        "interop: {what} is not on wgpu's Vulkan backend; exporting memory needs Vulkan"
    ))
}

fn device_error(call: &str, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Device {
        call: call.into(),
        message: e.to_string(),
    }
}

/// # Safety
/// `physical` belongs to `instance`.
unsafe fn physical_device_uuid(instance: &ash::Instance, physical: vk::PhysicalDevice) -> [u8; 16] {
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
    // SAFETY: Vulkan 1.1 core, which wgpu requires of its Vulkan adapters.
    unsafe { instance.get_physical_device_properties2(physical, &mut props) };
    id.device_uuid
}

/// The raw handles an export needs, taken from a wgpu device that must be on Vulkan with
/// `extension` enabled.
struct Raw {
    device: ash::Device,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
}

fn raw_of(device: &wgpu::Device, extension: &std::ffi::CStr) -> Result<Raw, WgpuError> {
    // SAFETY: the handles are cloned out and used while `device` lives (callers keep a clone).
    let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan("the device"))?;
    if !hal.enabled_device_extensions().contains(&extension) {
        return Err(WgpuError::Unavailable(format!(
            "interop: {} is not enabled on this Vulkan device (the driver lacks it, or the \
             device was not opened with InteropDevice::open)",
            extension.to_string_lossy()
        )));
    }
    Ok(Raw {
        device: hal.raw_device().clone(),
        instance: hal.shared_instance().raw_instance().clone(),
        physical: hal.raw_physical_device(),
    })
}

/// A storage buffer on dedicated, exportable, device-local Vulkan memory, wrapped as a
/// `wgpu::Buffer`. wgpu owns the `VkBuffer` and its memory and frees both once the GPU is
/// done with them; CUDA's import holds its own reference to the memory.
pub struct ExportableBuffer {
    buffer: wgpu::Buffer,
    memory: vk::DeviceMemory,
    allocation_bytes: u64,
    fd_api: khr::external_memory_fd::Device,
}

impl ExportableBuffer {
    /// Allocates `bytes` (rounded up to 4) of exportable memory on `device`.
    ///
    /// # Errors
    /// Not a Vulkan device, `VK_KHR_external_memory_fd` not enabled, no device-local
    /// memory type accepts the buffer, or the allocation fails.
    pub fn new(device: &wgpu::Device, bytes: u64) -> Result<ExportableBuffer, WgpuError> {
        let raw = raw_of(device, khr::external_memory_fd::NAME)?;
        let size = bytes.max(4).div_ceil(4) * 4;
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: valid create info on a live device.
        let vk_buffer = unsafe { raw.device.create_buffer(&info, None) }
            .map_err(|e| device_error("vkCreateBuffer (exportable)", e))?;
        let fail = |e: WgpuError| {
            // SAFETY: the buffer was created above and never handed to wgpu.
            unsafe { raw.device.destroy_buffer(vk_buffer, None) };
            e
        };
        // SAFETY: the buffer is live.
        let needs = unsafe { raw.device.get_buffer_memory_requirements(vk_buffer) };
        // SAFETY: `physical` belongs to `instance`.
        let types = unsafe {
            raw.instance
                .get_physical_device_memory_properties(raw.physical)
        };
        let Some(type_idx) = memory_type(&types, needs.memory_type_bits) else {
            return Err(fail(WgpuError::Unavailable(format!(
                "interop: no device-local memory type accepts an exportable buffer (type bits \
                 {:#x})",
                needs.memory_type_bits
            ))));
        };
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(vk_buffer);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(type_idx)
            .push_next(&mut export)
            .push_next(&mut dedicated);
        // SAFETY: valid allocate info; the dedicated buffer is live.
        let memory = match unsafe { raw.device.allocate_memory(&alloc, None) } {
            Ok(m) => m,
            Err(e) => {
                return Err(fail(WgpuError::OutOfMemory {
                    requested: needs.size as usize,
                    in_use: 0,
                    message: format!("vkAllocateMemory (exportable, dedicated): {e}"),
                }))
            }
        };
        // SAFETY: fresh buffer and memory of the required size and type.
        if let Err(e) = unsafe { raw.device.bind_buffer_memory(vk_buffer, memory, 0) } {
            // SAFETY: nothing uses the memory yet.
            unsafe { raw.device.free_memory(memory, None) };
            return Err(fail(device_error("vkBindBufferMemory (exportable)", e)));
        }
        // SAFETY: the buffer is bound to `memory` at offset 0 and made with the usages the
        // descriptor names; wgpu frees both when the wgpu buffer is destroyed and idle.
        let buffer = unsafe {
            let hal = wgpu::hal::vulkan::Buffer::from_raw_managed(vk_buffer, memory, 0, needs.size);
            device.create_buffer_from_hal::<Vulkan>(
                hal,
                &wgpu::BufferDescriptor {
                    label: Some("rlx-interop exportable"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                },
            )
        };
        Ok(ExportableBuffer {
            buffer,
            memory,
            allocation_bytes: needs.size,
            fd_api: khr::external_memory_fd::Device::new(&raw.instance, &raw.device),
        })
    }

    /// The buffer as wgpu sees it (bind it, copy to and from it).
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Bytes the buffer holds (the requested size rounded up to 4).
    pub fn size(&self) -> u64 {
        self.buffer.size()
    }

    /// Bytes of the dedicated allocation, which an importer must name (at least `size`).
    pub fn allocation_bytes(&self) -> u64 {
        self.allocation_bytes
    }

    /// A new opaque fd for the memory (each call gives a new one; the importer takes it).
    ///
    /// # Errors
    /// The driver refuses `vkGetMemoryFdKHR`.
    pub fn export_fd(&self) -> Result<OwnedFd, WgpuError> {
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(self.memory)
            .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the memory is live (wgpu frees it only after `self.buffer` is dropped).
        let fd = unsafe { self.fd_api.get_memory_fd(&info) }
            .map_err(|e| device_error("vkGetMemoryFdKHR", e))?;
        // SAFETY: the driver returned a new fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn memory_type(types: &vk::PhysicalDeviceMemoryProperties, bits: u32) -> Option<u32> {
    (0..types.memory_type_count).find(|&i| {
        bits & (1 << i) != 0
            && types.memory_types[i as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
    })
}

/// An exportable timeline semaphore: the GPU of one API signals a value that the other's
/// queue waits for. Values must increase; [`ExportableSemaphore::next_value`] hands them out.
pub struct ExportableSemaphore {
    semaphore: vk::Semaphore,
    device: wgpu::Device,
    queue: wgpu::Queue,
    raw: ash::Device,
    fd_api: khr::external_semaphore_fd::Device,
    last: u64,
}

impl ExportableSemaphore {
    /// Creates a timeline semaphore at 0 on `device`, exportable as an opaque fd, that
    /// orders work on `queue`.
    ///
    /// # Errors
    /// Not a Vulkan device, or `VK_KHR_external_semaphore_fd` not enabled on it (open it with
    /// [`InteropDevice::open`]), or the driver refuses.
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<ExportableSemaphore, WgpuError> {
        let raw = raw_of(device, khr::external_semaphore_fd::NAME)?;
        ExportableSemaphore::create(device, queue, raw, true)
    }

    /// The semaphore, exportable or (for tests on drivers without the extension) not.
    fn create(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        raw: Raw,
        exportable: bool,
    ) -> Result<ExportableSemaphore, WgpuError> {
        let mut timeline = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let mut export = vk::ExportSemaphoreCreateInfo::default()
            .handle_types(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut timeline);
        if exportable {
            info = info.push_next(&mut export);
        }
        // SAFETY: valid create info on a live device.
        let semaphore = unsafe { raw.device.create_semaphore(&info, None) }
            .map_err(|e| device_error("vkCreateSemaphore (exportable timeline)", e))?;
        Ok(ExportableSemaphore {
            semaphore,
            device: device.clone(),
            queue: queue.clone(),
            fd_api: khr::external_semaphore_fd::Device::new(&raw.instance, &raw.device),
            raw: raw.device,
            last: 0,
        })
    }

    /// The next value to signal (one past the last handed out).
    pub fn next_value(&mut self) -> u64 {
        self.last += 1;
        self.last
    }

    /// A new opaque fd for the semaphore (each call gives a new one; the importer takes it).
    ///
    /// # Errors
    /// The driver refuses `vkGetSemaphoreFdKHR`.
    pub fn export_fd(&self) -> Result<OwnedFd, WgpuError> {
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the semaphore is live.
        let fd = unsafe { self.fd_api.get_semaphore_fd(&info) }
            .map_err(|e| device_error("vkGetSemaphoreFdKHR", e))?;
        // SAFETY: the driver returned a new fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Makes the next submit on the queue wait (on the GPU) until the semaphore reaches
    /// `value`.
    ///
    /// # Errors
    /// The queue is not on Vulkan.
    pub fn wait_on_next_submit(&self, value: u64) -> Result<(), WgpuError> {
        // SAFETY: the semaphore outlives the submit (dropping it unstages it and waits for
        // the device).
        let hal =
            unsafe { self.queue.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan("the queue"))?;
        hal.add_wait_semaphore(
            self.semaphore,
            Some(value),
            vk::PipelineStageFlags::ALL_COMMANDS,
        );
        Ok(())
    }

    /// Signals `value` once all work submitted to the queue so far is done (an empty submit
    /// carries the signal).
    ///
    /// # Errors
    /// The queue is not on Vulkan.
    pub fn signal_after_submitted(&self, value: u64) -> Result<(), WgpuError> {
        {
            // SAFETY: as in `wait_on_next_submit`.
            let hal =
                unsafe { self.queue.as_hal::<Vulkan>() }.ok_or_else(|| not_vulkan("the queue"))?;
            hal.add_signal_semaphore(self.semaphore, Some(value));
        }
        self.queue.submit([]);
        Ok(())
    }

    /// The value the semaphore holds now, read on the host.
    ///
    /// # Errors
    /// The device is lost.
    pub fn value(&self) -> Result<u64, WgpuError> {
        // SAFETY: the semaphore is a live timeline semaphore.
        unsafe { self.raw.get_semaphore_counter_value(self.semaphore) }
            .map_err(|e| device_error("vkGetSemaphoreCounterValue", e))
    }

    /// Blocks the host until the semaphore reaches `value` or `timeout` passes.
    ///
    /// # Errors
    /// Timeout or a lost device.
    pub fn host_wait(&self, value: u64, timeout: std::time::Duration) -> Result<(), WgpuError> {
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: the semaphore is live.
        unsafe {
            self.raw
                .wait_semaphores(&info, timeout.as_nanos().min(u64::MAX as u128) as u64)
        }
        .map_err(|e| device_error(&format!("vkWaitSemaphores (value {value})"), e))
    }
}

impl Drop for ExportableSemaphore {
    fn drop(&mut self) {
        // A staged wait or signal must not outlive the semaphore, and submitted ones must
        // finish first.
        // SAFETY: only the staged lists are touched.
        if let Some(hal) = unsafe { self.queue.as_hal::<Vulkan>() } {
            hal.remove_wait_semaphore(self.semaphore);
            hal.remove_signal_semaphore(self.semaphore);
        }
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        // SAFETY: no submitted work uses the semaphore any more.
        unsafe { self.raw.destroy_semaphore(self.semaphore, None) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The ordering half of [`ExportableSemaphore`] on any Vulkan driver: a timeline
    /// semaphore (not exported where the driver cannot) signalled after submitted work and
    /// waited on by the next submit.
    #[test]
    fn a_timeline_semaphore_orders_the_queue() {
        let d = match InteropDevice::open(None) {
            Ok(d) => d,
            Err(e) => {
                rlx_driver::testing::skip("a_timeline_semaphore_orders_the_queue", &e.to_string());
                return;
            }
        };
        let raw = raw_of(&d.device, khr::external_memory_fd::NAME).unwrap();
        let exportable = d.ordering == Ordering::Semaphore;
        let mut sem = ExportableSemaphore::create(&d.device, &d.queue, raw, exportable).unwrap();
        assert_eq!(sem.value().unwrap(), 0);
        let first = sem.next_value();
        sem.signal_after_submitted(first).unwrap();
        sem.host_wait(first, Duration::from_secs(30)).unwrap();
        assert_eq!(sem.value().unwrap(), first);
        // A staged wait for a value not yet reached holds the submit back until the host
        // signals it.
        let second = sem.next_value();
        sem.wait_on_next_submit(second).unwrap();
        let third = sem.next_value();
        {
            let hal = unsafe { d.queue.as_hal::<Vulkan>() }.unwrap();
            hal.add_signal_semaphore(sem.semaphore, Some(third));
        }
        d.queue.submit([]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(sem.value().unwrap(), first, "the submit waits for {second}");
        let signal = vk::SemaphoreSignalInfo::default()
            .semaphore(sem.semaphore)
            .value(second);
        // SAFETY: a live timeline semaphore, signalled to a larger value.
        unsafe { sem.raw.signal_semaphore(&signal) }.unwrap();
        sem.host_wait(third, Duration::from_secs(30)).unwrap();
        assert_eq!(sem.value().unwrap(), third);
    }

    #[test]
    fn memory_type_takes_the_first_device_local_type_in_the_mask() {
        let mut types = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: 3,
            ..Default::default()
        };
        types.memory_types[0].property_flags = vk::MemoryPropertyFlags::HOST_VISIBLE;
        types.memory_types[1].property_flags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        types.memory_types[2].property_flags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        assert_eq!(memory_type(&types, 0b111), Some(1));
        assert_eq!(memory_type(&types, 0b101), Some(2));
        assert_eq!(memory_type(&types, 0b001), None);
    }
}
