//! The Rust side of the Python-overhead benchmark (`scripts/bench/python-overhead.py`): one
//! ONNX model run through `rlx_onnx::runtime::dynamic` on the CPU, as
//! `rlx.InferenceSession.run` runs it, with f32 inputs of ones; prints the median run in µs.
//!
//! `cargo run -p rlx-onnx --features runtime --example run_latency -- MODEL.onnx DIMS ITERS`
//! (DIMS: the inputs' shape, `1x4`).

use rlx_ir::Tensor;
use rlx_runtime::{CompileOptions, Session};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, dims, iters] = args.as_slice() else {
        return Err("usage: run_latency MODEL.onnx DIMS(1x4) ITERS".into());
    };
    let shape: Vec<usize> = dims.split('x').map(str::parse).collect::<Result<_, _>>()?;
    let iters: usize = iters.parse()?;
    let parsed = Arc::new(rlx_onnx::ParsedModel::open(path)?);
    let session = Session::new(rlx_driver::Device::Cpu)?;
    let graph = rlx_onnx::runtime::dynamic(&session, parsed.clone(), CompileOptions::default());
    let mut inputs = HashMap::new();
    for (name, _) in parsed.inputs() {
        inputs.insert(name.clone(), Tensor::full(rlx_ir::DType::F32, &shape, 1.0));
    }
    for _ in 0..iters.min(1000) {
        graph.run(&inputs)?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        let out = graph.run(&inputs)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        drop(out);
    }
    times.sort_by(f64::total_cmp);
    println!("{:.3}", times[times.len() / 2]);
    Ok(())
}
