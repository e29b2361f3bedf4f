//! Micro-benchmarks of the CUDA backend against the device's own limits, in one command:
//! GEMM 4096^3 and 8192^3 in f16 and bf16 (TFLOP/s; `encoder_torch.py --gemm` gives
//! torch.matmul in the same command), a fused elementwise chain over 1 GiB against the
//! device copy bandwidth, and cached device alloc + free against cuMemAlloc + cuMemFree.

mod common;

use common::{lower_for_cuda, quantile, require_device};
use rlx_cuda::device::CudaDevice;
use rlx_cuda::memory::DeviceMemory;
use rlx_cuda::weights::WeightCache;
use rlx_cuda::{CudaOptions, CudaProgram};
use rlx_ir::{BinaryOp, DType, Graph, Shape, Tensor, UnaryOp};
use std::collections::HashMap;
use std::time::Instant;

fn compile(g: &Graph) -> CudaProgram {
    let p = lower_for_cuda(g).expect("lowers");
    CudaProgram::compile(p, &WeightCache::new(), &CudaOptions::default()).expect("compiles")
}

fn gemm(n: usize, dtype: DType) {
    let mut g = Graph::new();
    let a = g.input("a", dtype, Shape::of(&[n, n]));
    let b = g.input("b", dtype, Shape::of(&[n, n]));
    let c = g.matmul(a, b).unwrap();
    g.output("c", c);
    let program = compile(&g);
    let inputs = HashMap::from([
        ("a".to_string(), Tensor::full(dtype, &[n, n], 0.01)),
        ("b".to_string(), Tensor::full(dtype, &[n, n], 0.02)),
    ]);
    program.run(&inputs, &HashMap::new()).expect("runs");
    let _ = program.time_steps(10);
    let mut t = program.time_steps(50).expect("times");
    let med = quantile(&mut t, 0.5);
    println!(
        "rlx gemm n={n} dtype={dtype} median_ms={med:.4} tflops={:.1}",
        2.0 * (n as f64).powi(3) / med / 1e9
    );
}

fn elementwise_chain() {
    let n = 1usize << 28;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[n]));
    let s = g.scalar(DType::F32, 1.5);
    let h = g.scalar(DType::F32, 0.5);
    let y = g.mul(x, s).unwrap();
    let y = g.add(y, h).unwrap();
    let y = g.unary(UnaryOp::Tanh, y).unwrap();
    let y = g.binary(BinaryOp::Max, y, x).unwrap();
    g.output("y", y);
    let program = compile(&g);
    println!(
        "rlx elementwise chain: {} launch(es)",
        program.stats.launches
    );
    let inputs = HashMap::from([("x".to_string(), Tensor::full(DType::F32, &[n], 0.25))]);
    program.run(&inputs, &HashMap::new()).expect("runs");
    let _ = program.time_steps(5);
    let mut t = program.time_steps(30).expect("times");
    let med = quantile(&mut t, 0.5);
    println!(
        "rlx elementwise 1GiB f32 median_ms={med:.4} gbps_rw={:.1}",
        2.0 * 4.0 * n as f64 / med / 1e6
    );
    let dev = CudaDevice::get().unwrap();
    let mem = DeviceMemory::get().unwrap();
    let (a, b) = (mem.alloc(4 * n).unwrap(), mem.alloc(4 * n).unwrap());
    let mut times = Vec::new();
    for i in 0..40 {
        let s = dev.record().unwrap();
        dev.copy(b.ptr(), a.ptr(), 4 * n).unwrap();
        let e = dev.record().unwrap();
        let ms = dev.elapsed_ms(&s, &e).unwrap() as f64;
        if i >= 10 {
            times.push(ms);
        }
    }
    let med = quantile(&mut times, 0.5);
    println!(
        "device copy 1GiB median_ms={med:.4} gbps_rw={:.1}",
        2.0 * 4.0 * n as f64 / med / 1e6
    );
}

fn alloc_latency() {
    let mem = DeviceMemory::get().unwrap();
    let dev = CudaDevice::get().unwrap();
    let warm = mem.alloc(1 << 20).unwrap();
    drop(warm);
    let mut cached = Vec::new();
    for _ in 0..10000 {
        let t = Instant::now();
        let b = mem.alloc(1 << 20).unwrap();
        drop(b);
        cached.push(t.elapsed().as_secs_f64() * 1e6);
    }
    dev.bind().unwrap();
    let mut raw = Vec::new();
    for _ in 0..1000 {
        let t = Instant::now();
        // SAFETY: allocate and free 1 MiB on the current context.
        unsafe {
            let p = cudarc::driver::result::malloc_sync(1 << 20).unwrap();
            cudarc::driver::result::free_sync(p).unwrap();
        }
        raw.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "alloc+free 1MiB cached_median_us={:.3} cuMemAlloc+cuMemFree_median_us={:.3}",
        quantile(&mut cached, 0.5),
        quantile(&mut raw, 0.5)
    );
}

fn main() {
    require_device("bench_micro");
    for n in [4096, 8192] {
        for dt in [DType::F16, DType::BF16] {
            gemm(n, dt);
        }
    }
    elementwise_chain();
    alloc_latency();
}
