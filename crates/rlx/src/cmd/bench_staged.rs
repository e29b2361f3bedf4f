//! `rlx bench` for ONNX models whose output shapes depend on values they compute
//! (`NonZero`, `NonMaxSuppression`, ...): they run as `rlx run` runs them, in compiled
//! stages with host work between them, so whole runs are timed (no per-kernel profile).

use super::CmdResult;
use rlx_driver::Device;
use rlx_ir::Tensor;
use rlx_runtime::{CompileOptions, Session};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// What to time: the model, where, with which inputs and options.
pub struct StagedBench<'a> {
    /// the ONNX file
    pub path: &'a str,
    /// the device every stage runs on
    pub device: Device,
    /// one run's inputs
    pub inputs: HashMap<String, Tensor>,
    /// untimed runs after the first (which compiles every stage)
    pub warmup: usize,
    /// timed runs
    pub iters: usize,
    /// print one JSON object
    pub json: bool,
    /// compile options of every stage
    pub options: CompileOptions,
    /// milliseconds spent reading the model
    pub load_ms: f64,
}

/// Times whole runs of a staged model; the first run compiles every stage (timed apart).
pub fn bench(b: StagedBench) -> CmdResult {
    let parsed = Arc::new(rlx_onnx::ParsedModel::open(b.path)?);
    let session = Session::new(b.device)?;
    let model = rlx::onnx::dynamic(&session, parsed, b.options);
    model.run(&b.inputs)?;
    let compile_ms = model.total_compile_ms();
    let stages = model.compiles();
    for _ in 0..b.warmup {
        model.run(&b.inputs)?;
    }
    let iters = b.iters.max(1);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        model.run(&b.inputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median_ms = super::bench::quantile(&times, 0.5);
    let p90_ms = super::bench::quantile(&times, 0.9);
    let shapes: BTreeMap<&String, &[usize]> =
        b.inputs.iter().map(|(n, t)| (n, t.shape())).collect();
    if b.json {
        let v = serde_json::json!({
            "model": b.path,
            "device": b.device.name(),
            "compile_ms": compile_ms,
            "stages": stages,
            "median_ms": median_ms,
            "p90_ms": p90_ms,
            "iters": iters,
            "warmup": b.warmup,
            "load_ms": b.load_ms,
            "min_ms": times[0],
            "inputs": shapes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("model     {}", b.path);
        println!("device    {}", b.device);
        let shapes: Vec<String> = shapes.iter().map(|(n, s)| format!("{n}{s:?}")).collect();
        println!("inputs    {}", shapes.join(" "));
        println!("load      {:.1} ms", b.load_ms);
        println!(
            "compile   {compile_ms:.1} ms ({stages} stages: shapes depend on computed values)"
        );
        println!(
            "run       median {median_ms:.3} ms, p90 {p90_ms:.3} ms, min {:.3} ms ({iters} runs after {} warm-up)",
            times[0], b.warmup
        );
    }
    Ok(())
}
