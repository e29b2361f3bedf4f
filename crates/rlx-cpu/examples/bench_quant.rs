//! Quantized matrix-vector product (`Op::QuantMatMul`, one activation row: the decode
//! shape; or a few rows: a batched decode step) per block format, on the default path (the
//! integer dot where it covers the format) and with `CpuOptions::exact_quant` (the f32 dot):
//! microseconds per product and the weight bytes read per second.
//!
//! Run with `cargo run --release -p rlx-cpu --example bench_quant [THREADS] [N] [K]
//! [FORMAT,..|all] [ROWS]` (defaults: 2 threads, a 4096 x 4096 weight, every block format,
//! one activation row).

use rlx_cpu::testing::ProgramBuilder;
use rlx_cpu::{cpu_name, CpuOptions, CpuProgram};
use rlx_ir::{DType, Op, QuantFormat, SplitMix64, Tensor, TensorData};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Random blocks of `format` whose f16 scales are small and finite.
fn random_weight(format: QuantFormat, n: usize, k: usize) -> Vec<u8> {
    let mut rng = SplitMix64(7);
    let mut w: Vec<u8> = (0..format.bytes_for(n * k).unwrap())
        .map(|_| (rng.next_u64() >> 13) as u8)
        .collect();
    let scales = format.f16_fields();
    for blk in w.chunks_exact_mut(format.block_bytes()) {
        for &s in scales {
            let v = (rng.next_u64() % 1000) as f32 / 1e4;
            blk[s..s + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

/// Median seconds of one product of `format` with `m` activation rows at `threads`.
fn product(format: QuantFormat, m: usize, n: usize, k: usize, threads: usize, exact: bool) -> f64 {
    let w = random_weight(format, n, k);
    let mut b = ProgramBuilder::new();
    let x = b.input("x", DType::F32, &[m, k]);
    let wb = b.param("w", DType::U8, &[w.len()]);
    let op = Op::QuantMatMul {
        format,
        n,
        k,
        int8_activations: true,
    };
    let y = b.push_library("qmm", op, &[x, wb], None).unwrap();
    b.output("y", y);
    let opts = CpuOptions {
        threads: Some(threads),
        exact_quant: exact,
    };
    let p = CpuProgram::compile(b.finish(), &opts).unwrap();
    let inputs = HashMap::from([("x".to_string(), Tensor::random(DType::F32, &[m, k], 1))]);
    let wt = Tensor::new(vec![w.len()], TensorData::U8(w.into())).unwrap();
    let params = HashMap::from([("w".to_string(), Arc::new(wt))]);
    for _ in 0..5 {
        p.run(&inputs, &params).unwrap();
    }
    let mut t: Vec<f64> = (0..41)
        .map(|_| {
            let s = Instant::now();
            p.run(&inputs, &params).unwrap();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .map_or(d, |s| s.parse().expect("a number"))
    };
    let (threads, n, k) = (arg(1, 2), arg(2, 4096), arg(3, 4096));
    let only = std::env::args()
        .nth(4)
        .filter(|s| s != "all")
        .unwrap_or_default();
    let m = arg(5, 1);
    println!(
        "rlx-cpu quantized matvec: {} ({threads} threads)",
        cpu_name()
    );
    println!("{n} x {k} weight, {m} activation row(s); median of 41 runs\n");
    println!(
        "{:<8} {:>12} {:>10} {:>12} {:>10}",
        "format", "default µs", "GB/s", "exact µs", "GB/s"
    );
    for format in QuantFormat::ALL {
        if format.block() == 1 || !(only.is_empty() || only.split(',').any(|f| f == format.name()))
        {
            continue;
        }
        let bytes = format.bytes_for(n * k).unwrap() as f64;
        let fast = product(format, m, n, k, threads, false);
        let exact = product(format, m, n, k, threads, true);
        println!(
            "{:<8} {:>12.1} {:>10.1} {:>12.1} {:>10.1}",
            format.name(),
            fast * 1e6,
            bytes / fast / 1e9,
            exact * 1e6,
            bytes / exact / 1e9
        );
    }
}
