//! Host <-> device bandwidth through the staging pool against plain copies of the same sizes
//! (1 MiB to 1 GiB): `cuMemcpyAsync` from pinned memory (the ceiling) and from pageable memory
//! (what uploads did before the pool). Every copy through the pool is checked byte for byte.
//!
//! ```text
//! cargo run --release -p rlx-cuda --example staging_bw -- [--pool 64M] [--chunk 4M] [--max 1G] [--reps N]
//! ```
//! `--pool` / `--chunk` default to `RLX_CUDA_STAGING` / `RLX_CUDA_STAGING_CHUNK`; each cell is
//! the median of `--reps` timed copies (default: enough for about 2 GiB moved, 3 to 50).

mod common;

use common::{arg, quantile, require_device};
use cudarc::driver::result;
use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::{DeviceMemory, Pinned};
use rlx_cuda::settings::{parse_bytes, MemoryKind, MemorySettings};
use rlx_cuda::staging::StagingPool;
use std::time::Instant;

/// Median seconds of `reps` runs of `f` (after one untimed run).
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    quantile(&mut t, 0.5)
}

fn bytes_arg(name: &str, default: usize) -> usize {
    let text = arg(name, "");
    if text.is_empty() {
        return default;
    }
    parse_bytes(&text).unwrap_or_else(|| {
        eprintln!("{name} {text:?}: expected a byte count such as 64M");
        std::process::exit(2)
    })
}

fn main() {
    require_device("staging_bw");
    let settings = MemorySettings::get().expect("settings");
    let capacity = bytes_arg("--pool", settings.staging_bytes);
    let chunk = bytes_arg("--chunk", settings.staging_chunk);
    let max = bytes_arg("--max", 1 << 30);
    let reps_arg: Option<usize> = arg("--reps", "").parse().ok();
    let device = CudaDevice::get().expect("device");
    device.bind().expect("bind");
    let pool = StagingPool::new(&device, capacity, chunk).expect("staging pool");
    let mem = DeviceMemory::of(MemoryKind::Device).expect("device memory");
    let stream = device.stream();
    println!(
        "device: {} | pool {} in chunks of {} | host copy threads {} from {}",
        device.facts.name,
        rlx_mem::human_bytes(pool.capacity()),
        rlx_mem::human_bytes(pool.chunk()),
        rlx_cuda::staging::pipeline::COPY_THREADS,
        rlx_mem::human_bytes(rlx_cuda::staging::pipeline::PARALLEL_COPY),
    );
    println!(
        "| size | reps | pool H2D GB/s | pinned H2D GB/s | pageable H2D GB/s | pool D2H GB/s | pinned D2H GB/s | pageable D2H GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut pinned = Pinned::new(&device, max).expect("pinned host memory");
    let mut size = 1usize << 20;
    while size <= max {
        let reps = reps_arg.unwrap_or(((2usize << 30) / size).clamp(3, 50));
        let buf = mem.alloc(size).expect("device buffer");
        let src: Vec<u8> = (0..size)
            .map(|i| (i as u8).wrapping_mul(37) ^ 0x5A)
            .collect();
        let mut dst = vec![1u8; size];
        let _queue = device.queue();
        let gbs = |s: f64| size as f64 / s / 1e9;
        // pool upload, then checked through the pinned buffer
        let pool_h2d = time(reps, || {
            pool.upload(&[(buf.ptr(), &src)]).expect("pool upload");
            device.sync().expect("sync");
        });
        // SAFETY: `buf` holds `size` bytes; the pinned buffer at least as many.
        unsafe { result::memcpy_dtoh_async(&mut pinned.as_mut_slice()[..size], buf.ptr(), stream) }
            .expect("check copy");
        device.sync().expect("sync");
        assert!(
            pinned.as_slice()[..size] == src[..],
            "pool upload of {size} bytes differs"
        );
        let pinned_h2d = time(reps, || {
            // SAFETY: as above.
            unsafe { result::memcpy_htod_async(buf.ptr(), &pinned.as_slice()[..size], stream) }
                .expect("pinned upload");
            device.sync().expect("sync");
        });
        let pageable_h2d = time(reps, || {
            device.upload(buf.ptr(), &src).expect("pageable upload");
            device.sync().expect("sync");
        });
        let pool_d2h = time(reps, || {
            pool.download(&mut [(buf.ptr(), &mut dst[..])])
                .expect("pool download");
        });
        assert!(dst == src, "pool download of {size} bytes differs");
        let pinned_d2h = time(reps, || {
            // SAFETY: as above.
            unsafe {
                result::memcpy_dtoh_async(&mut pinned.as_mut_slice()[..size], buf.ptr(), stream)
            }
            .expect("pinned download");
            device.sync().expect("sync");
        });
        let pageable_d2h = time(reps, || {
            device
                .download(&mut dst, buf.ptr())
                .expect("pageable download");
            device.sync().expect("sync");
        });
        println!(
            "| {} | {reps} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            rlx_mem::human_bytes(size),
            gbs(pool_h2d),
            gbs(pinned_h2d),
            gbs(pageable_h2d),
            gbs(pool_d2h),
            gbs(pinned_d2h),
            gbs(pageable_d2h),
        );
        size *= 2;
    }
    println!("pool: {:?} (every pool copy verified)", pool.stats());
}
