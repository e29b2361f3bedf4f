//! wgpu micro-benchmarks and the MiniLM-shaped encoder, timed on one wgpu device.
//!
//! - SGEMM n³ (and f16 storage GEMM): TFLOP/s from the median wall time of one command
//!   buffer holding `--reps` dispatches, submitted and waited for;
//! - an elementwise chain over `--elems` f32 (`ew`) or f16 (`ew16`) (one fused kernel: read
//!   once, write once) in GB/s against a wgpu `copy_buffer_to_buffer` of the same bytes,
//!   timed the same way;
//! - the MiniLM-shaped encoder (hidden 384, 6 layers, 12 heads, FFN 1536, seq 128; the graph
//!   of `rlx-cuda`'s `bench_encoder`) at `--batch`, median and p90 of the dispatches alone
//!   and of a whole run with uploads and readback.
//!
//! `cargo run --release -p rlx-wgpu --example bench_wgpu -- --device vulkan --size 4096
//! --elems 67108864 --batch 32 --iters 20 --warmup 3 [--only sgemm,hgemm,ew,ew16,encoder]
//! [--dtype f16|f32]`
//!
//! The options are [`WgpuOptions::default`]'s: unchecked shaders on native adapters
//! (`RLX_WGPU_CHECKED=1` for checked), the adapter's f16 and subgroups, vec4 paths
//! (`RLX_WGPU_NO_F16=1`, `RLX_WGPU_NO_SUBGROUPS=1`, `RLX_WGPU_NO_VEC4=1` turn each off); the
//! first line printed says which are in use.

use rlx_ir::kernel::KernelProgram;
use rlx_ir::sample::{self, EncoderShape, SampleModel};
use rlx_ir::{DType, Graph, Shape, Tensor, UnaryOp};
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::time::Instant;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn lower(graph: &Graph) -> Result<KernelProgram, String> {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).map_err(|e| e.to_string())?;
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| rlx_wgpu::caps::supports(op, ins);
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).map_err(|e| e.to_string())?;
    rlx_opt::lower(&legal).map_err(|e| e.to_string())
}

fn compile(flavor: Flavor, g: &Graph) -> Result<WgpuProgram, String> {
    let p = lower(g)?;
    WgpuProgram::compile(flavor, p, &WeightCache::new(), &WgpuOptions::default())
        .map_err(|e| e.to_string())
}

fn gemm(flavor: Flavor, n: usize, dtype: DType, iters: usize, warmup: usize, reps: usize) {
    let mut g = Graph::new();
    let a = g.input("a", dtype, Shape::of(&[n, n]));
    let b = g.input("b", dtype, Shape::of(&[n, n]));
    let c = g.matmul(a, b).expect("matmul");
    g.output("c", c);
    let p = match compile(flavor, &g) {
        Ok(p) => p,
        Err(e) => {
            println!("gemm {n}^3 {dtype}: FAILED to compile: {e}");
            return;
        }
    };
    let inputs = HashMap::from([
        ("a".to_string(), Tensor::random(dtype, &[n, n], 1)),
        ("b".to_string(), Tensor::random(dtype, &[n, n], 2)),
    ]);
    if let Err(e) = p.run(&inputs, &HashMap::new()) {
        println!("gemm {n}^3 {dtype}: FAILED to run: {e}");
        return;
    }
    let _ = p.time_steps_batched(warmup, reps);
    let mut t = p.time_steps_batched(iters, reps).unwrap_or_default();
    let ms = quantile(&mut t, 0.5);
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "gemm {n}^3 {dtype}: median_ms={ms:.3} p90_ms={:.3} tflops={:.3} (reps={reps})",
        quantile(&mut t, 0.9),
        flops / (ms * 1e-3) / 1e12
    );
}

fn elementwise(
    flavor: Flavor,
    dtype: DType,
    elems: usize,
    iters: usize,
    warmup: usize,
    reps: usize,
) {
    let mut g = Graph::new();
    let x = g.input("x", dtype, Shape::of(&[elems]));
    let s = g.scalar(dtype, 1.5);
    let o = g.scalar(dtype, 0.25);
    let y = g.mul(x, s).expect("mul");
    let y = g.add(y, o).expect("add");
    let y = g.unary(UnaryOp::Tanh, y).expect("tanh");
    let y = g.mul(y, x).expect("mul");
    g.output("y", y);
    let p = match compile(flavor, &g) {
        Ok(p) => p,
        Err(e) => {
            println!("elementwise: FAILED to compile: {e}");
            return;
        }
    };
    let inputs = HashMap::from([("x".to_string(), Tensor::random(dtype, &[elems], 3))]);
    if let Err(e) = p.run(&inputs, &HashMap::new()) {
        println!("elementwise: FAILED to run: {e}");
        return;
    }
    let _ = p.time_steps_batched(warmup, reps);
    let mut t = p.time_steps_batched(iters, reps).unwrap_or_default();
    let ms = quantile(&mut t, 0.5);
    let width = dtype.size_bytes();
    let bytes = 2.0 * width as f64 * elems as f64;
    let ew = bytes / (ms * 1e-3) / 1e9;
    // The peer: a wgpu buffer copy of the same bytes, same timing.
    let ctx = p.context();
    let size = (elems * width).next_multiple_of(4) as u64;
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let mk = |label| {
        ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let (src, dst) = (mk("copy src"), mk("copy dst"));
    let mut copy = Vec::new();
    for i in 0..warmup + iters {
        let start = Instant::now();
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        for _ in 0..reps {
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, size);
        }
        ctx.queue.submit([enc.finish()]);
        let _ = ctx.device.poll(wgpu::PollType::wait_indefinitely());
        if i >= warmup {
            copy.push(start.elapsed().as_secs_f64() * 1e3 / reps as f64);
        }
    }
    let cms = quantile(&mut copy, 0.5);
    let cgb = bytes / (cms * 1e-3) / 1e9;
    println!(
        "elementwise chain {elems} {dtype} (1 kernel): median_ms={ms:.3} gbps={ew:.1} | wgpu copy median_ms={cms:.3} gbps={cgb:.1} | ratio={:.2}",
        ew / cgb
    );
}

const SHAPE: EncoderShape = EncoderShape::MINILM;

/// The encoder of `rlx-cuda`'s `bench_encoder` (same shapes, same weights), in `dt`.
fn encoder(batch: usize, dt: DType) -> SampleModel {
    sample::encoder(SHAPE, batch, dt)
}

fn bench_encoder(flavor: Flavor, batch: usize, dt: DType, iters: usize, warmup: usize) {
    let m = encoder(batch, dt);
    let start = Instant::now();
    let p = match compile(flavor, &m.graph) {
        Ok(p) => p,
        Err(e) => {
            println!("encoder batch={batch}: FAILED to compile: {e}");
            return;
        }
    };
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let input = Tensor::random(dt, &[batch, SHAPE.seq, SHAPE.hidden], 7);
    let inputs = HashMap::from([("hidden".to_string(), input)]);
    let mut e2e = Vec::new();
    let mut out = None;
    for i in 0..warmup + iters {
        let t = Instant::now();
        match p.run(&inputs, &m.params) {
            Ok(o) => out = Some(o),
            Err(e) => {
                println!("encoder batch={batch}: FAILED to run: {e}");
                return;
            }
        }
        if i >= warmup {
            e2e.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let Some(out) = out else { return };
    let mut dev = p.time_steps(iters).unwrap_or_default();
    // Accuracy against the CPU interpreter at batch 1 only (it is slow).
    let finite = out[0].1.to_f64_vec().iter().all(|v| v.is_finite());
    println!(
        "encoder batch={batch} {dt} steps_median_ms={:.3} steps_p90_ms={:.3} run_median_ms={:.3} dispatches={} pipelines={} compile_ms={:.0} arena_mib={:.1} finite={finite}",
        quantile(&mut dev, 0.5),
        quantile(&mut dev, 0.9),
        quantile(&mut e2e, 0.5),
        p.stats.dispatches,
        p.stats.pipelines,
        compile_ms,
        p.stats.arena_bytes as f64 / (1 << 20) as f64,
    );
}

fn main() {
    let flavor = match arg("--device", "vulkan").as_str() {
        "gpu" => Flavor::Gpu,
        "opengl" => Flavor::OpenGl,
        "webgpu" => Flavor::WebGpu,
        "metal" => Flavor::Metal,
        _ => Flavor::Vulkan,
    };
    let a = rlx_wgpu::probe::availability(flavor);
    if !a.available {
        println!("SKIPPED: bench_wgpu: {}", a.reason.unwrap_or_default());
        return;
    }
    println!("device {}: {}", flavor.name(), a.reason.unwrap_or_default());
    if let Ok(ctx) = rlx_wgpu::probe::context(flavor) {
        let o = WgpuOptions::default();
        let t = rlx_wgpu::target_with(&ctx, &o);
        println!(
            "options: checked={} shader_f16={} subgroups={} vec4={}",
            o.checked_on(flavor),
            t.shader_f16,
            t.subgroups,
            t.vec4
        );
    }
    let n: usize = arg("--size", "4096").parse().unwrap_or(4096);
    let elems: usize = arg("--elems", "67108864").parse().unwrap_or(1 << 26);
    let batch: usize = arg("--batch", "32").parse().unwrap_or(32);
    let iters: usize = arg("--iters", "20").parse().unwrap_or(20);
    let warmup: usize = arg("--warmup", "3").parse().unwrap_or(3);
    let reps: usize = arg("--reps", "10").parse().unwrap_or(10);
    let only = arg("--only", "sgemm,hgemm,ew,ew16,encoder");
    let dt = if arg("--dtype", "f16") == "f32" {
        DType::F32
    } else {
        DType::F16
    };
    for what in only.split(',') {
        match what {
            "sgemm" => gemm(flavor, n, DType::F32, iters, warmup, reps),
            "hgemm" => gemm(flavor, n, DType::F16, iters, warmup, reps),
            "ew" => elementwise(flavor, DType::F32, elems, iters, warmup, reps),
            "ew16" => elementwise(flavor, DType::F16, elems, iters, warmup, reps),
            "encoder" => bench_encoder(flavor, batch, dt, iters, warmup),
            other => println!("unknown benchmark `{other}`"),
        }
    }
}
