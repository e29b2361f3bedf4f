//! The Vulkan half of CUDA↔Vulkan zero-copy on whatever Vulkan driver is here (lavapipe on
//! the CPU machines): an exportable buffer is written, transformed by a WGSL shader and
//! read back; its fd, imported as a second Vulkan buffer, sees the same bytes with no copy;
//! an exportable timeline semaphore is signalled and waited on by the queue. Without Vulkan
//! or its external memory extension each test prints `SKIPPED: <reason>`.
#![cfg(all(unix, not(target_vendor = "apple")))]

use ash::vk;
use rlx_wgpu::interop::{ExportableBuffer, ExportableSemaphore, InteropDevice, Ordering};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::time::Duration;
use wgpu::hal::api::Vulkan;

const N: usize = 1024;

fn open(test: &str) -> Option<InteropDevice> {
    match InteropDevice::open(None) {
        Ok(d) => Some(d),
        Err(e) => {
            rlx_driver::testing::skip(test, &e.to_string());
            None
        }
    }
}

/// Random-looking values, never zeros.
fn values() -> Vec<f32> {
    (0..N)
        .map(|i| ((i * 7919 % 1000) as f32) * 0.013 - 6.1)
        .collect()
}

/// Reads `bytes` bytes of `buffer` back through a mappable copy.
fn read(d: &InteropDevice, buffer: &wgpu::Buffer, bytes: u64) -> Vec<u8> {
    let staging = d.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = d.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
    d.queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    d.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let out = staging.slice(..).get_mapped_range().unwrap().to_vec();
    staging.unmap();
    out
}

/// Writes `x * 2 + 1` of the first half of `buffer` into its second half.
fn transform(d: &InteropDevice, buffer: &wgpu::Buffer, n: u32) {
    let module = d.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("x2p1"),
        source: wgpu::ShaderSource::Wgsl(
            "@group(0) @binding(0) var<storage, read_write> data: array<f32>;
                 override N: u32 = 1u;
                 @compute @workgroup_size(64)
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {
                     if (id.x < N) { data[N + id.x] = data[id.x] * 2.0 + 1.0; }
                 }"
            .into(),
        ),
    });
    let pipeline = d
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("x2p1"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[("N", n as f64)],
                ..Default::default()
            },
            cache: None,
        });
    let group = d.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buffer.as_entire_binding(),
        }],
    });
    let mut enc = d.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(n.div_ceil(64), 1, 1);
    }
    d.queue.submit([enc.finish()]);
}

#[test]
fn exportable_buffer_runs_a_shader_and_exports_fds() {
    let Some(d) = open("exportable_buffer_runs_a_shader_and_exports_fds") else {
        return;
    };
    let bytes = (2 * N * 4) as u64;
    let shared = ExportableBuffer::new(&d.device, bytes).unwrap();
    assert_eq!(shared.size(), bytes);
    assert!(shared.allocation_bytes() >= bytes);
    let input = values();
    let input_bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    d.queue.write_buffer(shared.buffer(), 0, &input_bytes);
    transform(&d, shared.buffer(), N as u32);
    let out = read(&d, shared.buffer(), bytes);
    let expected: Vec<u8> = input
        .iter()
        .chain(
            input
                .iter()
                .map(|v| v * 2.0 + 1.0)
                .collect::<Vec<_>>()
                .iter(),
        )
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(out, expected);
    let a = shared.export_fd().unwrap();
    let b = shared.export_fd().unwrap();
    assert_ne!(a.as_raw_fd(), b.as_raw_fd(), "each export gives a new fd");
}

/// Imports `fd` as a second Vulkan buffer on the same device: the path another API takes.
fn import(d: &InteropDevice, fd: std::os::fd::OwnedFd, allocation: u64, size: u64) -> wgpu::Buffer {
    // SAFETY: handles used while the device lives; the imported memory is handed to wgpu,
    // which frees it with the buffer.
    unsafe {
        let hal = d.device.as_hal::<Vulkan>().unwrap();
        let raw = hal.raw_device();
        let handle = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC)
            .push_next(&mut external);
        let buffer = raw.create_buffer(&info, None).unwrap();
        let needs = raw.get_buffer_memory_requirements(buffer);
        let types = hal
            .shared_instance()
            .raw_instance()
            .get_physical_device_memory_properties(hal.raw_physical_device());
        let type_idx = (0..types.memory_type_count)
            .find(|&i| {
                needs.memory_type_bits & (1 << i) != 0
                    && types.memory_types[i as usize]
                        .property_flags
                        .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
            })
            .unwrap();
        let mut import = vk::ImportMemoryFdInfoKHR::default()
            .handle_type(handle)
            .fd(fd.into_raw_fd());
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(allocation)
            .memory_type_index(type_idx)
            .push_next(&mut import)
            .push_next(&mut dedicated);
        let memory = raw.allocate_memory(&alloc, None).unwrap();
        raw.bind_buffer_memory(buffer, memory, 0).unwrap();
        drop(hal);
        let hal_buffer = wgpu::hal::vulkan::Buffer::from_raw_managed(buffer, memory, 0, allocation);
        d.device.create_buffer_from_hal::<Vulkan>(
            hal_buffer,
            &wgpu::BufferDescriptor {
                label: Some("imported"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            },
        )
    }
}

#[test]
fn an_imported_fd_sees_the_same_bytes_without_a_copy() {
    let Some(d) = open("an_imported_fd_sees_the_same_bytes_without_a_copy") else {
        return;
    };
    let bytes = (2 * N * 4) as u64;
    let shared = ExportableBuffer::new(&d.device, bytes).unwrap();
    let imported = import(
        &d,
        shared.export_fd().unwrap(),
        shared.allocation_bytes(),
        bytes,
    );
    let input = values();
    let input_bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    d.queue.write_buffer(shared.buffer(), 0, &input_bytes);
    transform(&d, shared.buffer(), N as u32);
    let through_import = read(&d, &imported, bytes);
    let through_export = read(&d, shared.buffer(), bytes);
    assert_eq!(through_import, through_export);
    assert_eq!(&through_import[..input_bytes.len()], &input_bytes[..]);
}

#[test]
fn exportable_semaphore_orders_the_queue() {
    let Some(d) = open("exportable_semaphore_orders_the_queue") else {
        return;
    };
    if d.ordering == Ordering::Host {
        let e = ExportableSemaphore::new(&d.device, &d.queue).err().unwrap();
        assert!(
            e.to_string().contains("VK_KHR_external_semaphore_fd"),
            "{e}"
        );
        rlx_driver::testing::skip(
            "exportable_semaphore_orders_the_queue",
            &format!("{}: no VK_KHR_external_semaphore_fd ({e})", d.adapter_name),
        );
        return;
    }
    let mut sem = ExportableSemaphore::new(&d.device, &d.queue).unwrap();
    let _fd = sem.export_fd().unwrap();
    assert_eq!(sem.value().unwrap(), 0);
    let first = sem.next_value();
    sem.signal_after_submitted(first).unwrap();
    sem.host_wait(first, Duration::from_secs(30)).unwrap();
    assert!(sem.value().unwrap() >= first);
    // A submit that waits for a reached value runs; the next signal lands after it.
    let shared = ExportableBuffer::new(&d.device, (2 * N * 4) as u64).unwrap();
    sem.wait_on_next_submit(first).unwrap();
    transform(&d, shared.buffer(), N as u32);
    let second = sem.next_value();
    sem.signal_after_submitted(second).unwrap();
    sem.host_wait(second, Duration::from_secs(30)).unwrap();
    assert_eq!(sem.value().unwrap(), second);
}

#[test]
fn a_gl_device_is_refused_with_a_reason() {
    // The shared OpenGL context, where there is one, cannot export Vulkan memory.
    let Ok(ctx) = rlx_wgpu::probe::context(rlx_wgpu::Flavor::OpenGl) else {
        rlx_driver::testing::skip("a_gl_device_is_refused_with_a_reason", "no OpenGL adapter");
        return;
    };
    let e = ExportableBuffer::new(&ctx.device, 64).err().unwrap();
    assert!(e.to_string().contains("Vulkan"), "{e}");
}
