//! Params whose storage borrows memory someone else owns (a memory-mapped checkpoint) are
//! bound by reference on the CPU: binding copies nothing, and once warm a run copies
//! nothing either (a weight the GEMM packs is packed once, not per run).
//!
//! This binary counts every heap allocation, so it holds this one test only.

use rlx_driver::Device;
use rlx_ir::{Buffer, DType, Graph, Tensor, TensorData};
use rlx_runtime::{CompileOptions, Session};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The system allocator, counting bytes allocated.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only adds a counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn shared_matmul_weight_is_read_in_place() {
    const K: usize = 1024;
    const N: usize = 1024;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1, K]);
    let w = g.param("w", DType::F32, [K, N]);
    let y = g.matmul(x, w).unwrap();
    g.output("y", y);

    // the weight lives in memory the test owns, as a memory map would hold it
    let owner: Arc<Vec<f32>> =
        Arc::new((0..K * N).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect());
    // SAFETY: `owner` keeps the elements alive and nothing writes them.
    let buf = unsafe { Buffer::shared(owner.clone(), owner.as_ptr(), owner.len()) };
    let wt = Tensor::new(vec![K, N], TensorData::F32(buf)).unwrap();
    assert!(wt.is_shared());
    assert_eq!(Arc::strong_count(&owner), 2);

    let s = Session::new(Device::Cpu).unwrap();
    let c = s.compile(&g, CompileOptions::default()).unwrap();
    c.set_param("w", wt).unwrap();
    let bound = s.params().get("w").unwrap();
    assert!(bound.is_shared(), "binding keeps the shared buffer");
    assert_eq!(bound.as_f32().unwrap().as_ptr(), owner.as_ptr());
    assert_eq!(Arc::strong_count(&owner), 2, "bound by moving, not copying");
    drop(bound);

    let xv: Vec<f32> = (0..K).map(|i| ((i % 7) as f32 - 3.0) / 4.0).collect();
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::from_f32(&[1, K], xv.clone()).unwrap(),
    )]);
    // two warm-up runs: for products of 16 rows or more the CPU backend packs a weight into
    // its GEMM's panel layout once, on the second run with the same tensor; no run after
    // that copies or converts it
    for _ in 0..2 {
        c.run(&inputs).unwrap();
    }
    let before = ALLOCATED.load(Ordering::Relaxed);
    let out = c.run(&inputs).unwrap();
    let during = ALLOCATED.load(Ordering::Relaxed) - before;
    let weight_bytes = K * N * 4;
    assert!(during >= N * 4, "the counter sees at least the output");
    assert!(
        during < weight_bytes / 4,
        "a run allocated {during} bytes; the weight has {weight_bytes}"
    );
    assert_eq!(Arc::strong_count(&owner), 2);

    let got = out[0].1.as_f32().unwrap();
    for (j, &g) in got.iter().enumerate() {
        let want: f64 = (0..K).map(|k| xv[k] as f64 * owner[k * N + j] as f64).sum();
        assert!(
            (g as f64 - want).abs() <= 1e-3 * (1.0 + want.abs()),
            "{j}: {g} vs {want}"
        );
    }
}
