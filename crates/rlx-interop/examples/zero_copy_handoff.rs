//! Hand-off time between CUDA and Vulkan over one shared allocation, against a staged copy.
//!
//! For each size (1 MiB, 16 MiB, 256 MiB, 1 GiB; `RLX_HANDOFF_SIZES_MIB=1,16` to choose) it
//! prints one JSON line with medians of 50 runs (after 5 warm-ups), in microseconds:
//! - `cuda_to_vulkan_us`: CUDA has written the buffer (stream idle), then
//!   `Interop::cuda_to_vulkan` and a one-workgroup Vulkan probe that reads the shared buffer,
//!   waited for on the host;
//! - `vulkan_probe_us`: the same probe with no hand-off (subtract it for the hand-off alone);
//! - `vulkan_to_cuda_us`: Vulkan has finished, then `Interop::vulkan_to_cuda` and a 4-byte
//!   CUDA copy out of the shared buffer, stream synchronized;
//! - `cuda_probe_us`: the same copy with no hand-off;
//! - `staged_cuda_to_vulkan_us`: the copy a zero-copy hand-off replaces: CUDA to host
//!   (`cuMemcpyDtoH`), `wgpu::Queue::write_buffer` into a Vulkan buffer, then the probe.
//!
//! Run: `cargo run --release -p rlx-interop --example zero_copy_handoff` on a machine with
//! CUDA and the NVIDIA Vulkan ICD.

#[cfg(all(unix, not(target_vendor = "apple")))]
fn main() {
    if let Err(e) = bench::run() {
        eprintln!("zero_copy_handoff: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(all(unix, not(target_vendor = "apple"))))]
fn main() {
    eprintln!("zero_copy_handoff: CUDA↔Vulkan interop needs Linux (opaque fds)");
}

#[cfg(all(unix, not(target_vendor = "apple")))]
mod bench {
    use rlx_interop::{Interop, SharedBuffer};
    use rlx_wgpu::wgpu;
    use std::time::Instant;

    const RUNS: usize = 50;
    const WARMUP: usize = 5;
    const MIB: u64 = 1 << 20;

    /// A one-workgroup shader that copies the first word of `src` into `dst`: a reader of
    /// the shared buffer whose own cost does not grow with the buffer.
    struct Probe {
        pipeline: wgpu::ComputePipeline,
        out: wgpu::Buffer,
    }

    impl Probe {
        fn new(device: &wgpu::Device) -> Probe {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("probe"),
                source: wgpu::ShaderSource::Wgsl(
                    "@group(0) @binding(0) var<storage, read> src: array<u32>;
                     @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
                     @compute @workgroup_size(1)
                     fn main() { dst[0] = src[0]; }"
                        .into(),
                ),
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("probe"),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
            let out = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("probe out"),
                size: 256,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            Probe { pipeline, out }
        }

        fn group(&self, device: &wgpu::Device, src: &wgpu::Buffer) -> wgpu::BindGroup {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &self.pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: src,
                            offset: 0,
                            size: wgpu::BufferSize::new(256),
                        }),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: self.out.as_entire_binding(),
                    },
                ],
            })
        }

        fn run(&self, pair: &Interop, group: &wgpu::BindGroup) -> Result<(), String> {
            let device = &pair.vulkan.device;
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
            pair.vulkan.queue.submit([enc.finish()]);
            device
                .poll(wgpu::PollType::wait_indefinitely())
                .map(|_| ())
                .map_err(|e| format!("poll: {e}"))
        }

        /// The word the last run read.
        fn read(&self, pair: &Interop) -> Result<u32, String> {
            let device = &pair.vulkan.device;
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("probe readback"),
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&self.out, 0, &staging, 0, 4);
            pair.vulkan.queue.submit([enc.finish()]);
            staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
            device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| format!("poll: {e}"))?;
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| format!("map: {e}"))?;
            Ok(u32::from_le_bytes([view[0], view[1], view[2], view[3]]))
        }
    }

    fn median(mut xs: Vec<f64>) -> f64 {
        xs.sort_by(|a, b| a.total_cmp(b));
        xs[xs.len() / 2]
    }

    /// Median microseconds of `RUNS` timed calls of `body`, each after `prepare`.
    fn time(
        mut prepare: impl FnMut(usize) -> Result<(), String>,
        mut body: impl FnMut(usize) -> Result<(), String>,
    ) -> Result<f64, String> {
        let mut us = Vec::with_capacity(RUNS);
        for i in 0..WARMUP + RUNS {
            prepare(i)?;
            let t0 = Instant::now();
            body(i)?;
            if i >= WARMUP {
                us.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(median(us))
    }

    fn sizes() -> Vec<u64> {
        match std::env::var("RLX_HANDOFF_SIZES_MIB") {
            Ok(list) => list
                .split(',')
                .filter_map(|s| s.trim().parse::<u64>().ok())
                .map(|m| m * MIB)
                .collect(),
            Err(_) => vec![MIB, 16 * MIB, 256 * MIB, 1024 * MIB],
        }
    }

    pub fn run() -> Result<(), String> {
        let pair = Interop::open().map_err(|e| e.to_string())?;
        if let Some(reason) = pair.host_ordering_reason() {
            eprintln!("zero_copy_handoff: host ordering: {reason}");
        }
        let probe = Probe::new(&pair.vulkan.device);
        let err = |e: rlx_interop::InteropError| e.to_string();
        let cuda_err = |e: rlx_cuda::CudaError| e.to_string();
        for bytes in sizes() {
            let shared = SharedBuffer::new(&pair, bytes).map_err(err)?;
            let shared_group = probe.group(&pair.vulkan.device, shared.wgpu_buffer());
            let ptr = shared.cuda_ptr();
            let cuda = &pair.cuda;
            // CUDA writes the whole buffer once; each run rewrites the first word the probe reads.
            let fill: Vec<u8> = (0..bytes / 4)
                .flat_map(|i| (i as u32).to_le_bytes())
                .collect();
            cuda.upload(ptr, &fill).map_err(cuda_err)?;
            cuda.sync().map_err(cuda_err)?;
            let mut word = [0u8; 4];

            let cuda_to_vulkan = time(
                |i| {
                    word = (0xC0DE_0000u32 + i as u32).to_le_bytes();
                    cuda.upload(ptr, &word).map_err(cuda_err)?;
                    cuda.sync().map_err(cuda_err)
                },
                |_| {
                    pair.cuda_to_vulkan().map_err(err)?;
                    probe.run(&pair, &shared_group)
                },
            )?;
            let seen = probe.read(&pair)?;
            let want = 0xC0DE_0000u32 + (WARMUP + RUNS - 1) as u32;
            if seen != want {
                return Err(format!(
                    "{bytes} bytes: Vulkan read {seen:#x} where CUDA wrote {want:#x}"
                ));
            }
            let vulkan_probe = time(|_| Ok(()), |_| probe.run(&pair, &shared_group))?;
            let mut sink = [0u8; 4];
            let vulkan_to_cuda = time(
                |_| probe.run(&pair, &shared_group),
                |_| {
                    pair.vulkan_to_cuda().map_err(err)?;
                    cuda.copy(ptr + 4, ptr, 4).map_err(cuda_err)?;
                    cuda.sync().map_err(cuda_err)
                },
            )?;
            let cuda_probe = time(
                |_| Ok(()),
                |_| {
                    cuda.copy(ptr + 4, ptr, 4).map_err(cuda_err)?;
                    cuda.sync().map_err(cuda_err)
                },
            )?;
            cuda.download(&mut sink, ptr).map_err(cuda_err)?;

            // The copy zero-copy replaces: CUDA -> host -> wgpu buffer, then the same probe.
            let target = pair.vulkan.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staged target"),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let target_group = probe.group(&pair.vulkan.device, &target);
            let mut host = vec![0u8; bytes as usize];
            let staged = time(
                |_| cuda.sync().map_err(cuda_err),
                |_| {
                    cuda.download(&mut host, ptr).map_err(cuda_err)?;
                    cuda.sync().map_err(cuda_err)?;
                    pair.vulkan.queue.write_buffer(&target, 0, &host);
                    probe.run(&pair, &target_group)
                },
            )?;
            drop(target_group);
            drop(target);
            println!(
                "{{\"bench\":\"zero_copy_handoff\",\"device\":\"{}\",\"ordering\":\"{:?}\",\
                 \"bytes\":{bytes},\"runs\":{RUNS},\"cuda_to_vulkan_us\":{cuda_to_vulkan:.1},\
                 \"vulkan_probe_us\":{vulkan_probe:.1},\"vulkan_to_cuda_us\":{vulkan_to_cuda:.1},\
                 \"cuda_probe_us\":{cuda_probe:.1},\"staged_cuda_to_vulkan_us\":{staged:.1},\
                 \"staged_gib_s\":{:.2}}}",
                pair.vulkan.adapter_name,
                pair.ordering(),
                bytes as f64 / (1u64 << 30) as f64 / (staged * 1e-6),
            );
        }
        Ok(())
    }
}
