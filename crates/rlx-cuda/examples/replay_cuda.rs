//! Replays allocation traces on the GPU: rlx-mem's sub-allocator over [`CudaProvider`], in
//! expandable mode (one reserved range, pieces created with `cuMemCreate` and mapped with
//! `cuMemMap`; the replay's online piece policy) and in block mode (`cuMemAlloc` blocks), plus
//! the raw driver (`cuMemAlloc`/`cuMemFree` per event) for the time per event. The
//! fragmentation of each mode is peak physical memory held / peak bytes in use.
//!
//! ```text
//! replay_cuda TRACE.jsonl.gz [TRACE...]
//! ```

use cudarc::driver::result;
use rlx_cuda::memory::CudaProvider;
use rlx_mem::{read_trace, replay_trace_on, BlockProvider, ReplayOptions, TraceEvent};
use std::time::Instant;

fn main() {
    let a = rlx_cuda::probe::availability();
    if !a.available {
        eprintln!("SKIPPED: no CUDA device: {}", a.reason.unwrap_or_default());
        return;
    }
    let device = rlx_cuda::device::CudaDevice::get().expect("device");
    device.bind().expect("bind");
    let make = || Box::new(CudaProvider::new()) as Box<dyn BlockProvider>;
    for path in std::env::args().skip(1) {
        let trace = match read_trace(std::path::Path::new(&path)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        };
        for (mode, expandable) in [("expandable", true), ("blocks", false)] {
            let opts = ReplayOptions {
                expandable,
                compare_system: false,
                ..ReplayOptions::default()
            };
            match replay_trace_on(&trace, &opts, &make) {
                Ok(r) => println!(
                    "cuda replay {path} mode={mode} events={} peak_live={} peak_reserved={} \
                     fragmentation={:.4} provider_allocs={} map_calls={} unmap_calls={} \
                     ns_per_event={:.1}",
                    r.events,
                    r.peak_live_bytes,
                    r.peak_reserved_bytes,
                    r.fragmentation,
                    r.provider_allocs,
                    r.map_calls,
                    r.unmap_calls,
                    r.ns_per_event
                ),
                Err(e) => println!("cuda replay {path} mode={mode} failed: {e}"),
            }
        }
        // The raw driver: one cuMemAlloc per alloc event, cuMemFree per free.
        let mut live: Vec<Option<u64>> = vec![None; trace.slots];
        let start = Instant::now();
        for ev in &trace.events {
            match *ev {
                TraceEvent::Alloc { slot, bytes } => {
                    // SAFETY: plain allocation on the bound context.
                    let p = unsafe { result::malloc_sync(bytes.max(1)) }.expect("cuMemAlloc");
                    live[slot as usize] = Some(p);
                }
                TraceEvent::Free { slot } => {
                    if let Some(p) = live[slot as usize].take() {
                        // SAFETY: allocated above, freed once.
                        unsafe { result::free_sync(p) }.expect("cuMemFree");
                    }
                }
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / trace.events.len().max(1) as f64;
        for p in live.into_iter().flatten() {
            // SAFETY: as above.
            unsafe { result::free_sync(p) }.expect("cuMemFree");
        }
        println!("cuda replay {path} mode=cuMemAlloc-per-event ns_per_event={ns:.1}");
    }
}
