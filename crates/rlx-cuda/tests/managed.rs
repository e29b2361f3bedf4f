//! Managed memory (`RLX_CUDA_MEMORY=managed`) on a real device: compiled graphs give the same
//! outputs, bit for bit, in managed memory as in device memory, with a device budget large
//! enough for everything, one that splits the program's blocks between device and host, and
//! one so small that every block prefers the host (a model larger than the device,
//! simulated); blocks past the budget carry the driver's host preference and are not
//! prefetched; prefetch runs never, once or before every run as its setting says; freed
//! blocks leave the counters at zero. Prints `SKIPPED: <reason>` without a CUDA device.

mod support;

use rlx_cuda::device::CudaDevice;
use rlx_cuda::mem_calls::{self, ManagedCaps, Place};
use rlx_cuda::memory::DeviceMemory;
use rlx_cuda::settings::{ManagedOptions, MemoryKind, Prefetch};
use rlx_cuda::staging::StagingPool;
use rlx_cuda::weights::WeightCache;
use rlx_cuda::{CudaOptions, CudaProgram, FusedGemm};
use rlx_ir::{BinaryOp, DType, Tensor, UnaryOp};
use std::sync::Arc;
use support::cases::{library_cases, Builder, Case};
use support::{lower_for_cuda, rel_l2, tolerance};

const MIB: usize = 1 << 20;

fn device_ready(test: &str) -> Option<Arc<CudaDevice>> {
    let device = support::cuda_device(test)?;
    let caps = ManagedCaps::query(device.raw()).expect("managed caps");
    if !caps.managed {
        rlx_driver::testing::skip(test, "the device has no managed memory");
        return None;
    }
    println!("{test}: {caps:?}");
    Some(device)
}

fn managed(budget: Option<usize>) -> MemoryKind {
    MemoryKind::Managed(ManagedOptions {
        device_budget: budget,
        prefetch: Prefetch::EveryRun,
        advise: true,
    })
}

/// Options that make two compiles of one graph choose the same kernels and GEMM algorithms.
fn options(memory: MemoryKind) -> CudaOptions {
    CudaOptions {
        autotune: false,
        fused_gemm: FusedGemm::Off,
        memory,
        ..CudaOptions::default()
    }
}

/// Compiles `case` with `memory` and runs it twice (the second run replays the graph).
fn run(case: &Case, memory: MemoryKind) -> Vec<(String, Tensor)> {
    run_then(case, memory, || ()).0
}

/// [`run`], and `inspect`'s answer taken while the program still holds its memory (once it
/// is dropped, the pool may hand emptied blocks back to the driver).
fn run_then<T>(
    case: &Case,
    memory: MemoryKind,
    inspect: impl FnOnce() -> T,
) -> (Vec<(String, Tensor)>, T) {
    let program = lower_for_cuda(&case.graph).expect("lower");
    let compiled = CudaProgram::compile(program, &WeightCache::new(), &options(memory))
        .unwrap_or_else(|e| panic!("{} in {memory:?}: compile: {e}", case.name));
    let first = compiled.run(&case.inputs, &case.params).expect("run 1");
    let second = compiled.run(&case.inputs, &case.params).expect("run 2");
    assert_same(&case.name, "run 2 against run 1", &first, &second);
    let seen = inspect();
    (second, seen)
}

fn assert_same(name: &str, what: &str, a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len(), "{name}: {what}: output count");
    for ((an, at), (bn, bt)) in a.iter().zip(b) {
        assert_eq!(an, bn, "{name}: {what}");
        assert_eq!(at.shape(), bt.shape(), "{name} {an}: {what}");
        let (x, y) = (at.to_f64_vec(), bt.to_f64_vec());
        let first = x
            .iter()
            .zip(&y)
            .position(|(p, q)| p.to_bits() != q.to_bits());
        if let Some(i) = first {
            panic!(
                "{name} output {an}: {what}: element {i} is {} against {} ({} elements)",
                x[i],
                y[i],
                x.len()
            );
        }
    }
}

/// A model of `layers` dense layers of `width` x `width` f32 weights, each with bias, GELU
/// and a layer norm (which keeps values bounded): `layers * width^2 * 4` bytes of weights.
fn mlp(rows: usize, width: usize, layers: usize) -> Case {
    let mut b = Builder::new(&format!("mlp_{rows}x{width}x{layers}"), DType::F32);
    let mut h = b.input(DType::F32, &[rows, width]);
    for _ in 0..layers {
        let w = b.param(DType::F32, &[width, width]);
        let bias = b.param(DType::F32, &[width]);
        let scale = b.param(DType::F32, &[width]);
        let shift = b.param(DType::F32, &[width]);
        h = b.g().matmul(h, w).unwrap();
        h = b.g().binary(BinaryOp::Add, h, bias).unwrap();
        h = b.g().unary(UnaryOp::GELU, h).unwrap();
        h = b.g().layer_norm(h, scale, shift, 1e-5).unwrap();
    }
    b.done(h)
}

#[test]
fn library_cases_match_device_memory_bit_for_bit() {
    if device_ready("library_cases_match_device_memory_bit_for_bit").is_none() {
        return;
    }
    let cases = library_cases();
    let mut ran = 0;
    for case in cases.iter().filter(|c| c.dtype == DType::F32).take(24) {
        let want = run(case, MemoryKind::Device);
        let got = run(case, managed(None));
        assert_same(&case.name, "managed against device memory", &got, &want);
        ran += 1;
    }
    println!("{ran} library cases identical in managed memory");
    assert!(ran >= 10, "only {ran} f32 library cases");
    let mem = DeviceMemory::of(managed(None)).unwrap();
    let r = mem.residency().expect("a managed pool").stats();
    println!("managed pool: {r:?}");
    if r.hinted {
        assert!(r.prefetches > 0 && r.prefetched_bytes > 0, "{r:?}");
    }
}

#[test]
fn a_model_past_the_device_budget_runs_and_matches() {
    let Some(_device) = device_ready("a_model_past_the_device_budget_runs_and_matches") else {
        return;
    };
    // 24 layers of 4 MiB weights and a 32 MiB cuBLASLt workspace: about 130 MiB in 64 MiB
    // pool blocks, so an 80 MiB budget keeps the first block on the device and puts the
    // others on the host, and a 1 MiB budget puts every block on the host.
    let case = mlp(256, 1024, 24);
    let want = run(&case, MemoryKind::Device);
    let reference = rlx_cpu::run_graph(&case.graph, &case.inputs, &case.params).unwrap();
    for ((n, w), (_, g)) in reference.iter().zip(&want) {
        let err = rel_l2(g, w);
        assert!(err <= tolerance(DType::F32, false), "{n}: {err:e}");
    }
    for budget in [None, Some(80 * MIB), Some(MIB)] {
        let kind = managed(budget);
        let (got, r) = run_then(&case, kind, || {
            DeviceMemory::of(kind).unwrap().residency().unwrap().stats()
        });
        assert_same(&case.name, &format!("budget {budget:?}"), &got, &want);
        println!("budget {budget:?}: {r:?}");
        assert!(r.device_bytes <= r.budget, "{r:?}");
        if budget.is_some() {
            assert!(
                r.host_bytes > 0,
                "nothing went past a budget of {budget:?}: {r:?}"
            );
        }
        if budget == Some(MIB) {
            assert_eq!(r.device_bytes, 0, "{r:?}");
            assert_eq!(r.prefetched_bytes, 0, "host blocks were prefetched: {r:?}");
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn blocks_past_the_budget_prefer_the_host_and_still_hold_data() {
    let Some(device) = device_ready("blocks_past_the_budget_prefer_the_host_and_still_hold_data")
    else {
        return;
    };
    let kind = managed(Some(96 * MIB));
    let mem = DeviceMemory::of(kind).unwrap();
    let residency = mem.residency().unwrap().clone();
    // Five 40 MiB buffers, each a dedicated block: two fit the budget, three go past it.
    let size = 40 * MIB;
    let bufs: Vec<_> = (0..5).map(|_| mem.alloc(size).unwrap()).collect();
    let r = residency.stats();
    println!("{r:?}");
    assert!(
        r.device_bytes <= 96 * MIB && r.device_bytes >= 2 * size,
        "{r:?}"
    );
    assert!(r.host_bytes >= 3 * size, "{r:?}");
    for (i, b) in bufs.iter().enumerate() {
        let (_, _, place) = residency.block_of(b.ptr()).expect("a known block");
        let want = if i < 2 { Place::Device(0) } else { Place::Host };
        assert_eq!(place, want, "buffer {i}");
        if r.hinted {
            let driver = mem_calls::preferred_location(b.ptr(), size).unwrap();
            assert_eq!(
                driver,
                Some(want),
                "buffer {i}: the driver's preferred location"
            );
        }
    }
    let staging = StagingPool::get().unwrap();
    let _queue = device.queue();
    let data: Vec<Vec<u8>> = (0..5).map(|i| pattern(100 + i, size)).collect();
    let uploads: Vec<(u64, &[u8])> = bufs
        .iter()
        .zip(&data)
        .map(|(b, d)| (b.ptr(), &d[..]))
        .collect();
    staging.upload(&uploads).unwrap();
    // Each buffer's first half is copied over the next buffer's second half, on the device.
    let half = size / 2;
    let mut model = data.clone();
    for i in 0..5 {
        let j = (i + 1) % 5;
        device
            .copy(bufs[j].ptr() + half as u64, bufs[i].ptr(), half)
            .unwrap();
        let src = model[i][..half].to_vec();
        model[j][half..].copy_from_slice(&src);
    }
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr()).collect();
    let asked = mem.prefetch(&ptrs).unwrap();
    if r.hinted {
        assert!(
            asked >= 2 * size && asked <= 96 * MIB,
            "prefetched {asked} bytes"
        );
    }
    device.sync().unwrap();
    if r.hinted {
        let last = mem_calls::last_prefetch_location(bufs[0].ptr(), size).unwrap();
        assert_eq!(last, Some(Place::Device(0)));
    }
    let mut back: Vec<Vec<u8>> = (0..5).map(|_| vec![0u8; size]).collect();
    let mut copies: Vec<(u64, &mut [u8])> = ptrs
        .iter()
        .zip(back.iter_mut())
        .map(|(&p, d)| (p, &mut d[..]))
        .collect();
    staging.download(&mut copies).unwrap();
    for i in 0..5 {
        assert!(
            back[i] == model[i],
            "buffer {i} differs after the device copies"
        );
    }
    drop(bufs);
    mem.trim();
    let r = residency.stats();
    assert_eq!((r.device_bytes, r.host_bytes), (0, 0), "{r:?}");
}

#[test]
fn prefetch_modes_prefetch_when_they_say() {
    if device_ready("prefetch_modes_prefetch_when_they_say").is_none() {
        return;
    }
    let case = mlp(64, 256, 2);
    let want = run(&case, MemoryKind::Device);
    for prefetch in [Prefetch::Off, Prefetch::Once, Prefetch::EveryRun] {
        // a budget of its own per mode, so each mode has a pool (and counters) of its own
        let kind = MemoryKind::Managed(ManagedOptions {
            device_budget: Some((1 << 30) + prefetch as usize),
            prefetch,
            advise: true,
        });
        let program = lower_for_cuda(&case.graph).unwrap();
        let compiled = CudaProgram::compile(program, &WeightCache::new(), &options(kind)).unwrap();
        let stats = || DeviceMemory::of(kind).unwrap().residency().unwrap().stats();
        let mut counts = Vec::new();
        for _ in 0..3 {
            let got = compiled.run(&case.inputs, &case.params).unwrap();
            assert_same(&case.name, &format!("{prefetch:?}"), &got, &want);
            counts.push(stats().prefetches);
        }
        println!("{prefetch:?}: prefetch calls after each run {counts:?}");
        if !stats().hinted {
            assert_eq!(counts, [0, 0, 0]);
            continue;
        }
        match prefetch {
            Prefetch::Off => assert_eq!(counts, [0, 0, 0]),
            Prefetch::Once => assert!(counts[0] > 0 && counts[2] == counts[0], "{counts:?}"),
            Prefetch::EveryRun => {
                assert!(counts[0] > 0 && counts[1] == 2 * counts[0] && counts[2] == 3 * counts[0])
            }
        }
    }
}
