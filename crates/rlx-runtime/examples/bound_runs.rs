//! Host runs against bound runs on one device: a small MLP (x: f32[batch, 512], two 512x512
//! layers with GELU) run in a loop with host tensors in and out (`CompiledGraph::run`), then
//! over one `Binding` with the input in a device buffer and the output left on the device,
//! then with a host input and a device output. Prints the median and p90 microseconds of
//! each.
//!
//! `cargo run --release -p rlx-runtime --example bound_runs -- [DEVICE] [BATCH] [ITERS]`

use rlx_driver::Device;
use rlx_ir::{DType, Graph, Tensor, UnaryOp};
use rlx_runtime::{Binding, CompileOptions, Session};
use std::collections::HashMap;
use std::time::Instant;

fn model(batch: usize, d: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [batch, d]);
    let mut h = x;
    for i in 0..2 {
        let w = g.param(&format!("w{i}"), DType::F32, [d, d]);
        let m = g.matmul(h, w).unwrap();
        h = g.unary(UnaryOp::GELU, m).unwrap();
    }
    g.output("y", h);
    g
}

fn stats(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[us.len() * 9 / 10])
}

fn time(iters: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..10 {
        f();
    }
    let mut us = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        f();
        us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    stats(us)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let device: Device = args.get(1).map_or("cpu", |s| s.as_str()).parse().unwrap();
    let batch: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(500);
    let d = 512;
    let s = match Session::new(device) {
        Ok(s) => s,
        Err(e) => {
            println!("SKIPPED: {device}: {e}");
            return;
        }
    };
    for i in 0..2 {
        s.set_param(
            &format!("w{i}"),
            Tensor::random(DType::F32, &[d, d], i as u64),
        );
    }
    let c = s
        .compile(&model(batch, d), CompileOptions::default())
        .unwrap();
    let x = Tensor::random(DType::F32, &[batch, d], 9);
    let inputs = HashMap::from([("x".to_string(), x.clone())]);
    let host = time(iters, || {
        c.run(&inputs).unwrap();
    });
    let mut bound = Binding::new();
    bound.bind_input_buffer("x", s.to_device(&x).unwrap());
    bound.bind_output_to_device("y");
    let device_io = time(iters, || c.run_with(&mut bound).unwrap());
    let mut half = Binding::new();
    half.bind_input("x", x.clone());
    half.bind_output_to_device("y");
    let host_in = time(iters, || c.run_with(&mut half).unwrap());
    let want = c.run(&inputs).unwrap().remove(0).1;
    let got = s.download(bound.output("y").unwrap()).unwrap();
    assert_eq!(want.to_f64_vec(), got.to_f64_vec(), "bound run differs");
    println!(
        "{device}, batch {batch}, {iters} runs (median / p90 us): host in+out {:.1} / {:.1}; \
         device in+out {:.1} / {:.1}; host in, device out {:.1} / {:.1}",
        host.0, host.1, device_io.0, device_io.1, host_in.0, host_in.1
    );
}
