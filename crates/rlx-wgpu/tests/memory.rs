//! The wgpu memory story on a real adapter (lavapipe/llvmpipe in CI): the staging pool moves
//! bytes unchanged at every size and pool setting, device memory is sub-allocated at the
//! binding alignment and reused across runs (the provider's allocation count stays flat),
//! statistics are reported, and outputs match the CPU backend on random inputs. Each test
//! prints `SKIPPED: <reason>` and returns when no Vulkan adapter exists.
//!
//! The pools are shared by the whole process, so the tests that assert on counters hold
//! `SERIAL` to keep the others' traffic out of their deltas.

use rlx_ir::{DType, Graph, Tensor};
use rlx_wgpu::memory::memory;
use rlx_wgpu::probe::Context;
use rlx_wgpu::transfer;
use rlx_wgpu::weights::WeightCache;
use rlx_wgpu::{Flavor, WgpuOptions, WgpuProgram};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

static SERIAL: Mutex<()> = Mutex::new(());

fn context(test: &str) -> Option<Arc<Context>> {
    match rlx_wgpu::probe::context(Flavor::Vulkan) {
        Ok(ctx) => Some(ctx),
        Err(reason) => {
            rlx_driver::testing::skip(test, &reason);
            None
        }
    }
}

/// xorshift64: deterministic random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }

    fn floats(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
            .collect()
    }
}

fn options(staging_bytes: usize) -> WgpuOptions {
    WgpuOptions {
        staging_bytes,
        ..WgpuOptions::builtin()
    }
}

#[test]
fn staging_round_trips_bytes_at_every_size_and_setting() {
    let test = "staging_round_trips_bytes_at_every_size_and_setting";
    let Some(ctx) = context(test) else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem = memory(&ctx);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // direct path, a tiny pool (8 KiB chunks), the default pool
    for staging in [0usize, 64 << 10, rlx_wgpu::DEFAULT_STAGING_BYTES] {
        let o = options(staging);
        for len in [
            1usize,
            3,
            4,
            255,
            8191,
            8192,
            8193,
            70_001,
            1 << 20,
            (5 << 20) + 6,
        ] {
            let dst = mem.alloc(len).unwrap();
            let data = rng.bytes(len);
            transfer::write(&ctx, &o, dst.buffer(), dst.offset(), &data).unwrap();
            let back = transfer::read(&ctx, &o, dst.buffer(), dst.offset(), len).unwrap();
            assert!(
                back == data,
                "staging {staging}: {len} bytes came back changed"
            );
        }
        // many small writes packed into one chunk, then one read of them all
        let n = 37;
        let dst = mem.alloc(n * 256).unwrap();
        let parts: Vec<Vec<u8>> = (0..n).map(|_| rng.bytes(256)).collect();
        for (i, p) in parts.iter().enumerate() {
            transfer::write(&ctx, &o, dst.buffer(), dst.offset() + (i * 256) as u64, p).unwrap();
        }
        let back = transfer::read(&ctx, &o, dst.buffer(), dst.offset(), n * 256).unwrap();
        assert!(
            back == parts.concat(),
            "staging {staging}: packed writes changed"
        );
        if staging > 0 {
            let s = mem.staging_stats();
            println!("staging {staging}: {s}");
            assert!(s.bytes_reserved <= staging, "{s}");
            assert!(s.bytes_reserved > 0 && s.allocs > 0, "{s}");
        }
    }
}

#[test]
fn sub_allocations_respect_the_binding_rules_and_are_reused() {
    let test = "sub_allocations_respect_the_binding_rules_and_are_reused";
    let Some(ctx) = context(test) else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem = memory(&ctx);
    let align = ctx.limits.min_storage_buffer_offset_alignment as u64;
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let before = mem.stats();
    let mut first_round_allocs = 0;
    for round in 0..6 {
        let mut live = Vec::new();
        for _ in 0..200 {
            let size = (rng.next() % 300_000) as usize + 1;
            let b = mem.alloc(size).unwrap();
            assert_eq!(b.offset() % align, 0, "offset {} unaligned", b.offset());
            assert_eq!(b.offset() % ctx.align() as u64, 0);
            assert!(b.size() >= size as u64 && b.size().is_multiple_of(4));
            assert!(b.offset() + b.size() <= b.buffer().size());
            assert!(b.size() <= ctx.limits.max_storage_buffer_binding_size);
            live.push(b);
        }
        // ranges in one buffer never overlap
        for (i, a) in live.iter().enumerate() {
            for b in &live[i + 1..] {
                if a.buffer() == b.buffer() {
                    let disjoint =
                        a.offset() + a.size() <= b.offset() || b.offset() + b.size() <= a.offset();
                    assert!(disjoint, "ranges overlap");
                }
            }
        }
        let mut buffers: Vec<&rlx_wgpu::wgpu::Buffer> = Vec::new();
        for b in &live {
            if !buffers.contains(&b.buffer()) {
                buffers.push(b.buffer());
            }
        }
        assert!(
            buffers.len() < 10,
            "{} buffers for 200 ranges",
            buffers.len()
        );
        drop(live);
        let now = mem.stats();
        if round == 0 {
            first_round_allocs = now.provider_allocs;
        }
        assert_eq!(
            now.bytes_in_use, before.bytes_in_use,
            "round {round} leaked"
        );
        assert_eq!(
            now.provider_allocs, first_round_allocs,
            "round {round} asked the provider again: {now}"
        );
    }
    // past the adapter's buffer size: a clear error, no panic
    let huge = usize::try_from(ctx.limits.max_buffer_size)
        .unwrap_or(usize::MAX)
        .saturating_mul(2);
    let err = mem
        .alloc(huge)
        .err()
        .expect("allocated past max_buffer_size");
    assert!(err.to_string().contains("max_buffer_size"), "{err}");
}

/// A small MLP head with a softmax: matmul, bias, relu, matmul, softmax.
fn mlp(batch: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[batch, 64][..]);
    let w0 = g.param("w0", DType::F32, &[64, 96][..]);
    let b0 = g.param("b0", DType::F32, &[96][..]);
    let w1 = g.param("w1", DType::F32, &[96, 10][..]);
    let h = g.matmul(x, w0).unwrap();
    let h = g.add(h, b0).unwrap();
    let h = g.relu(h).unwrap();
    let y = g.matmul(h, w1).unwrap();
    let p = g.softmax(y, -1).unwrap();
    g.output("logits", y);
    g.output("p", p);
    g
}

fn lower(graph: &Graph) -> rlx_ir::kernel::KernelProgram {
    let fold = |op: &rlx_ir::Op, ins: &[&Tensor]| rlx_cpu::eval_op(op, ins).ok();
    let optimized = rlx_opt::optimize(graph, &fold).unwrap();
    let caps = |op: &rlx_ir::Op, ins: &[&rlx_ir::TensorType]| {
        rlx_wgpu::caps::supports_on(Flavor::Vulkan, op, ins)
    };
    let (legal, _) = rlx_opt::legalize(&optimized, "wgpu", &caps).unwrap();
    rlx_opt::lower(&legal).unwrap()
}

fn tensor(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f64(DType::F32, shape, &rng.floats(n)).unwrap()
}

#[test]
fn runs_reuse_memory_and_match_the_cpu() {
    let test = "runs_reuse_memory_and_match_the_cpu";
    let Some(ctx) = context(test) else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem = memory(&ctx);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // the default pool, a tiny one that splits outputs across chunks, and none
    for staging in [rlx_wgpu::DEFAULT_STAGING_BYTES, 4 << 10, 0] {
        let batch = 33;
        let graph = mlp(batch);
        let cache = WeightCache::new();
        let program =
            WgpuProgram::compile(Flavor::Vulkan, lower(&graph), &cache, &options(staging)).unwrap();
        let params: HashMap<String, Arc<Tensor>> =
            [("w0", &[64, 96][..]), ("b0", &[96]), ("w1", &[96, 10])]
                .into_iter()
                .map(|(n, s)| (n.to_string(), Arc::new(tensor(&mut rng, s))))
                .collect();
        let mut after_first = None;
        for run in 0..40 {
            let inputs = HashMap::from([("x".to_string(), tensor(&mut rng, &[batch, 64]))]);
            let got = program.run(&inputs, &params).unwrap();
            let want = rlx_cpu::run_graph(&graph, &inputs, &params).unwrap();
            for ((name, g), (_, w)) in got.iter().zip(&want) {
                let err = rlx_cpu::testing::rel_l2(g, w);
                assert!(
                    err < 1e-5,
                    "staging {staging} run {run} `{name}`: rel l2 {err}"
                );
            }
            let counts = (
                program.memory_stats().provider_allocs,
                mem.staging_stats().provider_allocs,
            );
            match after_first {
                None => after_first = Some(counts),
                Some(first) => assert_eq!(counts, first, "run {run} allocated again"),
            }
        }
        let s = program.memory_stats();
        println!(
            "staging {staging}: device pool {s}\nstaging pool {}",
            program.staging_stats()
        );
        assert!(s.bytes_reserved >= s.bytes_in_use && s.peak_bytes_reserved > 0);
        assert!(s.provider_allocs <= 8, "{s}");
        assert!(program.stats.arena_bytes > 0);
    }
}
