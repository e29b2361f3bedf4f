//! Times cached alloc + free pairs in an expandable segment with the online piece policy: the
//! segment is first grown by a generated 8B-class trace, then each pair reuses mapped pieces
//! (no provider call). Prints nanoseconds per pair (target: at most 1 µs).
//!
//! `cached_alloc [PAIRS] [--proportional]` (`--proportional`: the previous online policy).

use std::time::Instant;

use rlx_mem::{
    AllocatorConfig, CountingProvider, ExpandableConfig, GranulePolicy, SubAllocator, TraceEvent,
    TraceSpec,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pairs: usize = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let policy = if args.iter().any(|a| a == "--proportional") {
        GranulePolicy::proportional()
    } else {
        GranulePolicy::online()
    };
    let mut alloc = SubAllocator::new(
        Box::new(CountingProvider::new()),
        AllocatorConfig {
            expandable: Some(ExpandableConfig {
                granules: policy,
                ..ExpandableConfig::default()
            }),
            ..AllocatorConfig::default()
        },
    );
    // Grow the segment with a trace, keeping a few of its allocations live as a background.
    let trace = TraceSpec::llama8b().generate();
    let mut live = Vec::new();
    live.resize_with(trace.slots, || None);
    for event in &trace.events {
        match *event {
            TraceEvent::Alloc { slot, bytes } => {
                live[slot as usize] = Some(alloc.alloc(bytes, 256).expect("alloc"))
            }
            TraceEvent::Free { slot } => alloc
                .free(live[slot as usize].take().expect("live"))
                .expect("free"),
        }
    }
    let before = alloc.stats();
    // Sizes of a decode step's activations and KV caches: small to tens of MiB.
    let sizes = [8 << 10, 16 << 10, 28 << 10, 2 << 20, 12 << 20, 33 << 20];
    let start = Instant::now();
    for i in 0..pairs {
        let a = alloc.alloc(sizes[i % sizes.len()], 256).expect("alloc");
        alloc.free(a).expect("free");
    }
    let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
    let after = alloc.stats();
    println!(
        "{policy}: {pairs} cached alloc+free pairs: {ns:.1} ns per pair; provider calls during the loop: \
         {} creations, {} map calls",
        after.physical_creates - before.physical_creates,
        after.map_calls - before.map_calls
    );
}
