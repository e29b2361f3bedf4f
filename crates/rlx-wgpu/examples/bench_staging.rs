//! Host<->device copy bandwidth on one wgpu device: the staging pool against the direct path.
//!
//! - H2D: `transfer::write` through the pool (copies queued without waiting; the pool is
//!   waited for once at the end of the repetitions), the same writes staged together and
//!   submitted once (as a run's inputs are), against `transfer::write_direct`
//!   (`queue.write_buffer`, wgpu stages each call in a fresh buffer, then a wait);
//! - D2H: `transfer::read` through the pool (one submission per chunk, each read out while
//!   the next is copied) against `transfer::read_direct` (a fresh mapped buffer per read);
//! - a run of one elementwise kernel at `--batch` (4 MiB of input and of output per 4096
//!   rows) with the pool and without: upload, dispatch and readback of each run.
//!
//! GB/s are bytes moved / median wall time, 1 GB = 1e9 bytes.
//!
//! `cargo run --release -p rlx-wgpu --example bench_staging -- --device vulkan
//! --sizes 65536,1048576,16777216,134217728 --iters 10 --batch 16384 [--staging-mb 64]`

use rlx_ir::{DType, Graph, Shape, Tensor};
use rlx_wgpu::memory::memory;
use rlx_wgpu::probe::Context;
use rlx_wgpu::transfer;
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `iters` calls of `f` after one warm-up call.
fn time(iters: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    f()?;
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(median(times))
}

fn bandwidth(
    ctx: &Arc<Context>,
    pool: &WgpuOptions,
    size: usize,
    iters: usize,
) -> Result<(), String> {
    let e = |e: rlx_wgpu::WgpuError| e.to_string();
    let mem = memory(ctx);
    let dst = mem.alloc(size).map_err(e)?;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let (buf, off) = (dst.buffer(), dst.offset());
    // four writes per timed call, so queued copies overlap the next write's memcpy
    let h2d_pool = time(iters, || {
        for _ in 0..4 {
            transfer::write(ctx, pool, buf, off, &data).map_err(e)?;
        }
        let mut p = mem.staging(pool.staging_bytes).map_err(e)?;
        p.wait_idle(ctx).map_err(e)
    })?;
    // the same four writes staged together and submitted once, as a run's inputs are
    let h2d_batched = time(iters, || {
        let mut p = mem.staging(pool.staging_bytes).map_err(e)?;
        for _ in 0..4 {
            p.write(ctx, buf, off, &data).map_err(e)?;
        }
        p.wait_idle(ctx).map_err(e)
    })?;
    let h2d_direct = time(iters, || {
        for _ in 0..4 {
            transfer::write_direct(ctx, buf, off, &data).map_err(e)?;
        }
        Ok(())
    })?;
    let d2h_pool = time(iters, || {
        let back = transfer::read(ctx, pool, buf, off, size).map_err(e)?;
        (back == data)
            .then_some(())
            .ok_or("pool read changed the bytes".into())
    })?;
    let d2h_direct = time(iters, || {
        let back = transfer::read_direct(ctx, buf, off, size).map_err(e)?;
        (back == data)
            .then_some(())
            .ok_or("direct read changed the bytes".into())
    })?;
    let gbs = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    println!(
        "{:>10} B | H2D pool {:6.2}  batched {:6.2}  direct {:6.2} GB/s ({:4.2}x) | D2H pool {:6.2}  direct {:6.2} GB/s ({:4.2}x)",
        size,
        gbs(4 * size, h2d_pool),
        gbs(4 * size, h2d_batched),
        gbs(4 * size, h2d_direct),
        h2d_direct / h2d_pool,
        gbs(size, d2h_pool),
        gbs(size, d2h_direct),
        d2h_direct / d2h_pool,
    );
    Ok(())
}

/// `relu(x * w)` with `w` one row broadcast: one elementwise kernel, so the run is mostly
/// its copies.
fn elementwise(batch: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[batch, 256]));
    let w = g.param("w", DType::F32, Shape::of(&[256]));
    let h = g.mul(x, w).unwrap();
    let h = g.relu(h).unwrap();
    g.output("y", h);
    g
}

/// Median seconds per run of [`elementwise`] compiled with each of `options`, the programs
/// taking turns run by run so that a noisy host slows both alike.
fn run_times(
    flavor: Flavor,
    batch: usize,
    options: &[WgpuOptions],
    iters: usize,
) -> Result<Vec<f64>, String> {
    let graph = elementwise(batch);
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(&graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).map_err(|e| e.to_string())?;
    let kernels = rlx_opt::lower(&legal).map_err(|e| e.to_string())?;
    let programs = options
        .iter()
        .map(|o| WgpuProgram::compile(flavor, kernels.clone(), &WeightCache::new(), o))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let values = |n: usize| {
        (0..n)
            .map(|i| ((i % 97) as f64 - 48.0) / 64.0)
            .collect::<Vec<_>>()
    };
    let x = Tensor::from_f64(DType::F32, &[batch, 256], &values(batch * 256))
        .map_err(|e| e.to_string())?;
    let w = Tensor::from_f64(DType::F32, &[256], &values(256)).map_err(|e| e.to_string())?;
    let inputs = HashMap::from([("x".to_string(), x)]);
    let weights = HashMap::from([("w".to_string(), Arc::new(w))]);
    let mut times = vec![Vec::with_capacity(iters); programs.len()];
    for i in 0..=iters {
        for (program, t) in programs.iter().zip(times.iter_mut()) {
            let start = Instant::now();
            program.run(&inputs, &weights).map_err(|e| e.to_string())?;
            // the first round warms up
            if i > 0 {
                t.push(start.elapsed().as_secs_f64());
            }
        }
    }
    Ok(times.into_iter().map(median).collect())
}

fn main() -> Result<(), String> {
    let flavor = match arg("--device", "vulkan").as_str() {
        "gpu" => Flavor::Gpu,
        "opengl" => Flavor::OpenGl,
        "webgpu" => Flavor::WebGpu,
        "metal" => Flavor::Metal,
        _ => Flavor::Vulkan,
    };
    let ctx = rlx_wgpu::probe::context(flavor)?;
    let iters: usize = arg("--iters", "10").parse().map_err(|_| "bad --iters")?;
    let batch: usize = arg("--batch", "16384").parse().map_err(|_| "bad --batch")?;
    let staging_mb: usize = arg("--staging-mb", "64")
        .parse()
        .map_err(|_| "bad --staging-mb")?;
    let pool = WgpuOptions {
        staging_bytes: staging_mb << 20,
        ..WgpuOptions::builtin()
    };
    println!(
        "device {} | staging pool {} MiB, chunks of {} bytes",
        ctx.label(),
        staging_mb,
        memory(&ctx)
            .staging(pool.staging_bytes)
            .map_err(|e| e.to_string())?
            .chunk_bytes()
    );
    for size in arg("--sizes", "65536,1048576,16777216,134217728").split(',') {
        let size: usize = size
            .trim()
            .parse()
            .map_err(|_| format!("bad size {size}"))?;
        bandwidth(&ctx, &pool, size, iters)?;
    }
    let direct = WgpuOptions {
        staging_bytes: 0,
        ..pool.clone()
    };
    let times = run_times(flavor, batch, &[pool.clone(), direct], iters)?;
    let (with_pool, without) = (times[0], times[1]);
    println!(
        "run of relu(x * w) at batch {batch} ({} MiB in, {} MiB out): pool {:.2} ms, direct {:.2} ms ({:.2}x)",
        (batch * 256 * 4) >> 20,
        (batch * 256 * 4) >> 20,
        with_pool * 1e3,
        without * 1e3,
        without / with_pool
    );
    let mem = memory(&ctx);
    println!("staging pool: {}", mem.staging_stats());
    println!("device pool:  {}", mem.stats());
    Ok(())
}
