//! CPU backend micro-benchmarks: SGEMM through the library matmul kernel, and a fused
//! elementwise chain `gelu(x * a + b)` against a plain memcpy of the same bytes.
//!
//! Run with `cargo run --release -p rlx-cpu --example bench_cpu`.

use rlx_cpu::testing::{contiguous_view, ProgramBuilder};
use rlx_cpu::{cpu_name, thread_count, CpuOptions, CpuProgram};
use rlx_ir::kernel::{Expr, ExprNode, KernelInput, LoopKernel, View};
use rlx_ir::{BinaryOp, DType, Op, Tensor, UnaryOp};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(warmup: usize, iters: usize, mut f: impl FnMut() -> Option<f64>) -> f64 {
    for _ in 0..warmup {
        f();
    }
    median(
        (0..iters)
            .map(|_| {
                let t = Instant::now();
                let inner = f();
                inner.unwrap_or_else(|| t.elapsed().as_secs_f64())
            })
            .collect(),
    )
}

fn sgemm(n: usize) -> (f64, f64) {
    let mut b = ProgramBuilder::new();
    let x = b.input("a", DType::F32, &[n, n]);
    let w = b.param("b", DType::F32, &[n, n]);
    let y = b.push_library("sgemm", Op::MatMul, &[x, w], None).unwrap();
    b.output("c", y);
    let p = CpuProgram::compile(b.finish(), &CpuOptions::default()).unwrap();
    let inputs = HashMap::from([("a".to_string(), Tensor::random(DType::F32, &[n, n], 1))]);
    let params = HashMap::from([(
        "b".to_string(),
        Arc::new(Tensor::random(DType::F32, &[n, n], 2)),
    )]);
    let flop = 2.0 * (n as f64).powi(3);
    let iters = ((4e10 / flop) as usize).clamp(5, 50);
    let run = time(2, iters, || {
        p.run(&inputs, &params).unwrap();
        None
    });
    let kernel = time(1, iters, || {
        Some(p.run_profiled(&inputs, &params).unwrap().timings[0].seconds)
    });
    (flop / run / 1e9, flop / kernel / 1e9)
}

fn chain(len: usize, out: usize) -> LoopKernel {
    let f = DType::F32;
    let node = |expr, dtype| ExprNode { expr, dtype };
    let scalar = |buffer| KernelInput {
        buffer,
        dtype: f,
        view: View {
            offset: 0,
            strides: vec![0],
        },
    };
    LoopKernel {
        name: "gelu_axb".into(),
        shape: vec![len],
        reduce_shape: vec![],
        inputs: vec![
            KernelInput {
                buffer: 0,
                dtype: f,
                view: contiguous_view(&[len]),
            },
            scalar(1),
            scalar(2),
        ],
        body: vec![
            node(Expr::Load(0), f),
            node(Expr::Load(1), f),
            node(Expr::Binary(BinaryOp::Mul, 0, 1), f),
            node(Expr::Load(2), f),
            node(Expr::Binary(BinaryOp::Add, 2, 3), f),
            node(Expr::Unary(UnaryOp::GELU, 4), f),
        ],
        reduce: None,
        result: 5,
        output: out,
    }
}

/// The chain as a program. With `to_arena`, its result is a temp (warm arena memory) and a
/// one-element kernel reads it back, so the chain's kernel time excludes page faults of a
/// fresh output.
fn chain_program(len: usize, to_arena: bool) -> CpuProgram {
    let mut b = ProgramBuilder::new();
    b.input("x", DType::F32, &[len]);
    b.param("a", DType::F32, &[]);
    b.param("b", DType::F32, &[]);
    let y = b.push_loop(chain(len, 0));
    if to_arena {
        let mut first = chain(1, 0);
        first.inputs[0].buffer = y;
        first.inputs[0].view = View {
            offset: 0,
            strides: vec![1],
        };
        let z = b.push_loop(first);
        b.output("z", z);
    } else {
        b.output("y", y);
    }
    CpuProgram::compile(b.finish(), &CpuOptions::default()).unwrap()
}

fn main() {
    println!(
        "rlx-cpu bench: {} ({} threads)\n",
        cpu_name(),
        thread_count()
    );
    println!(
        "{:<28} {:>12} {:>12}",
        "sgemm (library matmul)", "run GFLOP/s", "kernel"
    );
    for n in [256, 512, 1024, 2048] {
        let (run, kernel) = sgemm(n);
        println!(
            "{:<28} {:>12.1} {:>12.1}",
            format!("{n}x{n}x{n}"),
            run,
            kernel
        );
    }

    let len = 64 << 20;
    let bytes = 2.0 * 4.0 * len as f64;
    let x = Tensor::random(DType::F32, &[len], 3);
    let inputs = HashMap::from([("x".to_string(), x.clone())]);
    let params = HashMap::from([
        ("a".to_string(), Arc::new(Tensor::scalar(DType::F32, 1.25))),
        ("b".to_string(), Arc::new(Tensor::scalar(DType::F32, -0.5))),
    ]);
    let warm = chain_program(len, true);
    let fresh = chain_program(len, false);
    let chain_kernel = time(1, 5, || {
        Some(warm.run_profiled(&inputs, &params).unwrap().timings[0].seconds)
    });
    let chain_run = time(1, 5, || {
        fresh.run(&inputs, &params).unwrap();
        None
    });
    let src = x.as_f32().unwrap();
    let mut dst = vec![1.0f32; len];
    let copy = time(1, 5, || {
        dst.copy_from_slice(src);
        std::hint::black_box(&dst);
        None
    });
    let par_copy = time(1, 5, || {
        use rayon::prelude::*;
        dst.par_chunks_mut(1 << 16)
            .zip(src.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        std::hint::black_box(&dst);
        None
    });
    println!(
        "\n{:<44} {:>8} {:>10}",
        "64M f32, bytes read + written", "GB/s", "ms"
    );
    let row =
        |name: &str, t: f64| println!("{:<44} {:>8.1} {:>10.1}", name, bytes / t / 1e9, t * 1e3);
    row("memcpy (copy_from_slice, warm dst)", copy);
    row("memcpy, all threads (rayon chunks)", par_copy);
    row("gelu(x*a+b) kernel, warm arena output", chain_kernel);
    row("gelu(x*a+b) run(), fresh output tensor", chain_run);
}
