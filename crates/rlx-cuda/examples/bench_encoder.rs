//! A BERT-shaped encoder (all-MiniLM-L6-v2 shapes: hidden 384, 6 layers, 12 heads, FFN
//! 1536, sequence 128) built with the rlx-ir builder, fp16, random weights, timed on the
//! CUDA device: median and p90 of device time per run (CUDA-graph replay, inputs resident)
//! and of a whole run with copies, launches per run and compile time.
//!
//! `cargo run --release -p rlx-cuda --example bench_encoder -- --batches 1,32,256
//! --iters 100 --warmup 20 [--dump DIR] [--profile]`. `--profile` times every step of a run
//! alone and prints the first layer's, then attention's total and which path ran it
//! (`RLX_CUDA_FLASH=0` turns the tensor-core flash kernel off, `RLX_CUDA_ATTN_GEMM=1`
//! forces the GEMM form; `RLX_CUDA_MERGE_GEMM=0` runs q, k, v as three GEMMs instead of one
//! `gemm matmul_3+matmul_9+matmul_15`; `RLX_CUDA_AUTOTUNE=0` keeps cuBLASLt's first heuristic
//! algorithm per GEMM instead of timing up to eight at compile, `tune_ms`). `--dump` writes the weights, the batch-1 input and
//! RLX's batch-1 output as raw little-endian files plus `manifest.txt`, so
//! `scripts/bench/encoder_torch.py --weights DIR` runs PyTorch on the same numbers.
//! `--nvrtc` (no GPU needed) times NVRTC on the plan's kernels: one module against the
//! parts `CudaProgram::compile` compiles in parallel.

mod common;

use common::{arg, lower_for_cuda, quantile, require_device};
use rlx_cuda::weights::{tensor_bytes, WeightCache};
use rlx_cuda::{CudaOptions, CudaProgram};
use rlx_ir::sample::{self, EncoderShape, SampleModel};
use rlx_ir::{DType, Tensor};
use std::collections::HashMap;
use std::time::Instant;

const SHAPE: EncoderShape = EncoderShape::MINILM;
const HIDDEN: usize = SHAPE.hidden;
const LAYERS: usize = SHAPE.layers;
const SEQ: usize = SHAPE.seq;

/// The encoder for `batch` sequences, fp16; weights from a fixed seed (same for every batch).
/// `--approximate-gelu` runs its GELUs in the tanh form (`rlx_opt::approximate_gelu`, which
/// cuBLASLt fuses into the FFN GEMM), to measure what a fused activation would save.
fn encoder(batch: usize) -> SampleModel {
    let mut m = sample::encoder(SHAPE, batch, DType::F16);
    if common::flag("--approximate-gelu") {
        m.graph = rlx_opt::approximate_gelu(&m.graph)
            .expect("the encoder's GELUs rewrite")
            .0;
    }
    m
}

fn dump(dir: &str, m: &SampleModel, input: &Tensor, out: &Tensor) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut manifest = String::new();
    let mut write = |name: &str, t: &Tensor| -> std::io::Result<()> {
        std::fs::write(format!("{dir}/{name}.bin"), tensor_bytes(t))?;
        let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
        manifest += &format!("{name} {} {}\n", t.dtype(), dims.join(","));
        Ok(())
    };
    for name in &m.order {
        write(name, &m.params[name])?;
    }
    write("input", input)?;
    write("rlx_output", out)?;
    std::fs::write(format!("{dir}/manifest.txt"), manifest)
}

/// The encoder's plan for an H200 at `batch`, made without a GPU (the environment's
/// switches apply), and that target.
fn offline_plan(batch: usize) -> (rlx_cuda::codegen::Target, rlx_cuda::plan::Plan) {
    let m = encoder(batch);
    let program = lower_for_cuda(&m.graph).expect("lowers");
    let target = rlx_cuda::codegen::Target {
        flash_attention: rlx_cuda::settings::FLASH.switch(),
        ..rlx_cuda::codegen::Target::h200()
    };
    let plan = rlx_cuda::plan::plan(&program, &target).expect("plans");
    (target, plan)
}

/// Prints the plan (no GPU needed): kernels and GEMMs per run.
fn print_plan(batch: usize) {
    let (_, plan) = offline_plan(batch);
    for step in &plan.steps {
        match step {
            rlx_cuda::plan::Step::Kernel(k) => {
                println!(
                    "kernel {} {} grid={:?} block={}",
                    k.label, k.function, k.launch.grid, k.launch.block
                );
                if common::flag("--source") {
                    println!("{}", k.source);
                }
            }
            rlx_cuda::plan::Step::Gemm(g) => println!(
                "gemm {} bias={} act={:?}",
                g.describe(),
                g.bias.is_some(),
                g.activation
            ),
        }
    }
    for c in &plan.choices {
        println!(
            "choice: steps {} to {} or one of {} fused kernels, chosen by timing",
            c.first,
            c.last,
            c.fused.len()
        );
        for k in &c.fused {
            println!(
                "  kernel {} {} grid={:?} block={} shared={}",
                k.label, k.function, k.launch.grid, k.launch.block, k.launch.shared_bytes
            );
            if common::flag("--source") {
                println!("{}", k.source);
            }
        }
    }
    println!(
        "{} steps (launches per run), {} scratch regions",
        plan.steps.len(),
        plan.scratch.len()
    );
}

/// Compiles the plan's kernels with NVRTC twice, each into an empty cache folder (no GPU
/// needed): as one module, and as the parts `CudaProgram::compile` compiles in parallel
/// (`nvrtc::compile_all_cached`); prints both wall times.
fn time_nvrtc(batch: usize) {
    let (target, plan) = offline_plan(batch);
    let kernels = || plan.all_kernels();
    let timed = |sources: &[String]| {
        let dir = std::env::temp_dir().join(format!("rlx-nvrtc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var("RLX_CUDA_CACHE", &dir);
        let start = Instant::now();
        let r = rlx_cuda::nvrtc::compile_all_cached("rlx_program", sources, &target.arch);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let _ = std::fs::remove_dir_all(&dir);
        r.map(|_| ms)
    };
    let one = vec![rlx_cuda::codegen::program_source(kernels())];
    let parts: Vec<String> = rlx_cuda::codegen::program_sources(kernels())
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    match (timed(&one), timed(&parts)) {
        (Ok(serial), Ok(parallel)) => println!(
            "nvrtc batch={batch} functions={} one_module_ms={serial:.0} parts={} parallel_ms={parallel:.0} cores={} source_kib={}",
            kernels().map(|k| &k.function).collect::<std::collections::HashSet<_>>().len(),
            parts.len(),
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            one[0].len() / 1024
        ),
        (Err(e), _) | (_, Err(e)) => println!("SKIPPED: nvrtc: {e}"),
    }
}

fn main() {
    if common::flag("--nvrtc") {
        for b in arg("--batches", "1,32,256")
            .split(',')
            .filter_map(|s| s.parse().ok())
        {
            time_nvrtc(b);
        }
        return;
    }
    if common::flag("--plan") {
        print_plan(
            arg("--batches", "1")
                .split(',')
                .next()
                .and_then(|b| b.parse().ok())
                .unwrap_or(1),
        );
        return;
    }
    require_device("bench_encoder");
    let batches: Vec<usize> = arg("--batches", "1,32,256")
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let iters: usize = arg("--iters", "100").parse().unwrap_or(100);
    let warmup: usize = arg("--warmup", "20").parse().unwrap_or(20);
    let dump_dir = arg("--dump", "");
    let profile = common::flag("--profile");
    for &batch in &batches {
        let m = encoder(batch);
        let start = Instant::now();
        let program = match lower_for_cuda(&m.graph)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                CudaProgram::compile(p, &WeightCache::new(), &CudaOptions::default())
                    .map_err(|e| e.to_string())
            }) {
            Ok(p) => p,
            Err(e) => {
                println!("encoder batch={batch}: FAILED to compile: {e}");
                continue;
            }
        };
        let compile_ms = start.elapsed().as_secs_f64() * 1e3;
        let input = Tensor::random(DType::F16, &[batch, SEQ, HIDDEN], 7);
        let inputs = HashMap::from([("hidden".to_string(), input.clone())]);
        let mut e2e = Vec::new();
        let mut out = None;
        for i in 0..warmup + iters {
            let t = Instant::now();
            match program.run(&inputs, &m.params) {
                Ok(o) => out = Some(o),
                Err(e) => {
                    println!("encoder batch={batch}: FAILED to run: {e}");
                    break;
                }
            }
            if i >= warmup {
                e2e.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let Some(out) = out else { continue };
        let _ = program.time_steps(warmup);
        let mut dev = program.time_steps(iters).unwrap_or_default();
        let finite = out[0].1.to_f64_vec().iter().all(|v| v.is_finite());
        println!(
            "encoder batch={batch} fp16 device_median_ms={:.4} device_p90_ms={:.4} run_median_ms={:.4} launches={} functions={} modules={} compile_ms={:.1} nvrtc_ms={:.1} tune_ms={:.1} tuned_gemms={} fused_gemms={} cached={} cuda_graph={} arena_mib={:.1} finite={finite}",
            quantile(&mut dev, 0.5),
            quantile(&mut dev, 0.9),
            quantile(&mut e2e, 0.5),
            program.stats.launches,
            program.stats.functions,
            program.stats.modules,
            compile_ms,
            program.stats.nvrtc_ms,
            program.stats.tune_ms,
            program.stats.tuned_gemms,
            program.stats.fused_gemms,
            program.stats.cached,
            program.uses_graph(),
            program.stats.arena_bytes as f64 / (1 << 20) as f64,
        );
        if profile {
            // The first layer's steps (the rest repeat them), each timed alone.
            match program.profile_steps(20) {
                Ok(steps) => {
                    let total: f64 = steps.iter().map(|s| s.1).sum();
                    println!("profile batch={batch}: sum of steps alone {total:.4} ms");
                    for (label, ms) in steps.iter().take(steps.len() / LAYERS + 2) {
                        println!("  {ms:8.4} ms  {label}");
                    }
                    // Attention of all layers: the flash kernel, or the GEMM form's three
                    // steps, or the CUDA-core fused kernel.
                    let attention: f64 = steps
                        .iter()
                        .filter(|(l, _)| l.contains("attention"))
                        .map(|s| s.1)
                        .sum();
                    let path = if steps.iter().any(|(l, _)| l.starts_with("rlx_flash_mma_")) {
                        "tensor-core flash"
                    } else if steps
                        .iter()
                        .any(|(l, _)| l.starts_with("rlx_attn_softmax_"))
                    {
                        "GEMM form"
                    } else {
                        "fused CUDA-core"
                    };
                    println!(
                        "profile batch={batch}: attention ({path}) {attention:.4} ms over {LAYERS} layers"
                    );
                }
                Err(e) => println!("profile batch={batch}: FAILED: {e}"),
            }
        }
        if batch == 1 && !dump_dir.is_empty() {
            if let Err(e) = dump(&dump_dir, &m, &input, &out[0].1) {
                println!("dump to {dump_dir} failed: {e}");
            }
        }
    }
}
