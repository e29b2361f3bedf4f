//! The Vulkan side of the zero-copy tests and the hand-off benchmark: a WGSL shader that
//! writes `x * 2 + 1` of a buffer's first half into its second half, and a readback.

use rlx_wgpu::wgpu;

/// A compiled `x * 2 + 1` pipeline for buffers of `2 * n` f32s.
pub struct Transform {
    pipeline: wgpu::ComputePipeline,
    n: u32,
}

impl Transform {
    /// Compiles the shader for `n` elements per half.
    pub fn new(device: &wgpu::Device, n: u32) -> Transform {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("x2p1"),
            source: wgpu::ShaderSource::Wgsl(
                "@group(0) @binding(0) var<storage, read_write> data: array<f32>;
                 override N: u32 = 1u;
                 @compute @workgroup_size(256)
                 fn main(@builtin(global_invocation_id) id: vec3<u32>,
                         @builtin(num_workgroups) groups: vec3<u32>) {
                     let i = id.x + id.y * groups.x * 256u;
                     if (i < N) { data[N + i] = data[i] * 2.0 + 1.0; }
                 }"
                .into(),
            ),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
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
        Transform { pipeline, n }
    }

    /// Encodes and submits one pass over `buffer`.
    pub fn submit(&self, device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer) {
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: buffer.as_entire_binding(),
            }],
        });
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &group, &[]);
            let groups = self.n.div_ceil(256);
            pass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
        }
        queue.submit([enc.finish()]);
    }
}

/// Reads `buffer` back to the host through a mappable copy.
pub fn read(device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer) -> Vec<u8> {
    let bytes = buffer.size();
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
    queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("map readback"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let out = staging
        .slice(..)
        .get_mapped_range()
        .expect("mapped")
        .to_vec();
    staging.unmap();
    out
}

/// `n` random-looking f32s, never zeros.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 3.9
        })
        .collect()
}

/// Little-endian bytes of `values`.
pub fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
