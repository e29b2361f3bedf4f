use super::*;
use crate::expandable::{ExpandableConfig, GranulePolicy};
use crate::provider::TestProvider;
use crate::stream::FakeTimeline;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Sizes spread over many orders of magnitude, never zero.
    fn size(&mut self, max_log: u64) -> usize {
        let log = self.next() % max_log + 1;
        (self.next() % (1 << log)) as usize + 1
    }
}

fn config(block_size: usize, grow: bool) -> AllocatorConfig {
    AllocatorConfig {
        block_size,
        grow_in_place: grow,
        granule: 64 << 10,
        ..AllocatorConfig::default()
    }
}

fn assert_disjoint(live: &[Allocation]) {
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|a| (a.addr(), a.addr() + a.size()))
        .collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "allocations overlap: {pair:?}");
    }
}

/// Random traffic over blocks that cannot grow (dedicated path on) and blocks that can.
#[test]
fn random_traffic_is_disjoint_aligned_and_returns_everything() {
    for grow in [false, true] {
        let probe = TestProvider::new().growable(grow);
        let mut alloc = SubAllocator::new(Box::new(probe.clone()), config(1 << 20, grow));
        let mut rng = Rng(0x5eed_0000_0000_0001 + grow as u64);
        let mut live: Vec<Allocation> = Vec::new();
        let mut in_use = 0usize;
        for step in 0..6000 {
            if live.is_empty() || rng.next() % 100 < 52 {
                let size = rng.size(21);
                let align = 1 << (rng.next() % 13);
                let a = alloc.alloc(size, align).unwrap();
                assert_eq!(a.addr() % align, 0);
                assert_eq!(a.size(), size);
                in_use += size;
                live.push(a);
            } else {
                let idx = rng.next() as usize % live.len();
                let a = live.swap_remove(idx);
                in_use -= a.size();
                alloc.free(a).unwrap();
            }
            if step % 500 == 0 {
                assert_disjoint(&live);
                alloc.tlsf.check();
                let stats = alloc.stats();
                assert_eq!(stats.bytes_in_use, in_use);
                assert!(stats.bytes_reserved >= in_use);
                assert_eq!(stats.bytes_reserved, probe.stats().live_bytes);
            }
        }
        let stats = alloc.stats();
        assert!(stats.fragmentation >= 1.0);
        if grow {
            assert_eq!(stats.provider_allocs, 1, "one block, grown in place");
            assert!(stats.provider_grows > 0);
        } else {
            assert!(stats.dedicated_bytes > 0 || stats.provider_allocs > 1);
        }
        // Dropping with live allocations still returns every block.
        drop(alloc);
        let after = probe.stats();
        assert_eq!((after.live_blocks, after.live_bytes), (0, 0));
        assert_eq!(after.allocs, after.frees);
        assert_eq!(probe.bad_frees(), 0);
    }
}

#[test]
fn empty_blocks_are_released_keeping_one_and_trim_returns_the_rest() {
    let probe = TestProvider::new();
    let mut alloc = SubAllocator::new(Box::new(probe.clone()), config(1 << 20, false));
    let mut rng = Rng(42);
    // Fill several blocks with mid-sized allocations.
    let mut live: Vec<Allocation> = (0..40)
        .map(|_| alloc.alloc(rng.size(17) + 100_000, 256).unwrap())
        .collect();
    let blocks = probe.stats().live_blocks;
    assert!(blocks >= 4, "expected several blocks, got {blocks}");
    while let Some(a) = live.pop() {
        alloc.free(a).unwrap();
    }
    assert_eq!(
        probe.stats().live_blocks,
        1,
        "one empty block kept in reserve"
    );
    let stats = alloc.stats();
    assert_eq!(stats.bytes_in_use, 0);
    assert_eq!(stats.provider_frees, blocks - 1);
    assert!(alloc.trim() > 0);
    assert_eq!(probe.stats().live_blocks, 0);
    assert_eq!(alloc.stats().bytes_reserved, 0);
    assert!(alloc.stats().peak_bytes_reserved >= blocks as usize * (1 << 20));
}

#[test]
fn dedicated_blocks_are_exact_reused_and_released() {
    let probe = TestProvider::new();
    let mut cfg = config(1 << 20, false);
    cfg.dedicated_threshold = Some(300_000);
    let mut alloc = SubAllocator::new(Box::new(probe.clone()), cfg);
    let big = alloc.alloc(5_000_001, 4096).unwrap();
    assert!(big.is_dedicated());
    assert_eq!(big.addr() % 4096, 0);
    assert_eq!(
        probe.stats().live_bytes,
        5_000_192,
        "sized exactly, rounded to 256"
    );
    let small = alloc.alloc(299_000, 256).unwrap();
    assert!(!small.is_dedicated());
    let block = alloc.block_of(&big).unwrap();
    assert_eq!((block.addr, block.size), (big.addr(), 5_000_192));
    let block = alloc.block_of(&small).unwrap();
    assert!(small.addr() >= block.addr && small.addr() + small.size() <= block.addr + block.size);
    alloc.free(big).unwrap();
    // A slightly smaller request reuses the cached block; no provider call.
    let allocs = probe.stats().allocs;
    let again = alloc.alloc(4_700_000, 256).unwrap();
    assert!(again.is_dedicated());
    assert_eq!(probe.stats().allocs, allocs);
    alloc.free(again).unwrap();
    // A much smaller one does not waste it: the idle block is returned, a new one sized exactly.
    let other = alloc.alloc(1_000_000, 256).unwrap();
    assert_eq!(probe.stats().frees, 1);
    assert_eq!(alloc.stats().dedicated_bytes, 1_000_192);
    alloc.free(other).unwrap();
    alloc.free(small).unwrap();
    alloc.trim();
    assert_eq!(probe.stats().live_bytes, 0);
}

#[test]
fn out_of_memory_trims_retries_then_reports_sizes_and_stays_usable() {
    let cap = 8 << 20;
    let probe = TestProvider::with_capacity(cap);
    let mut alloc = SubAllocator::new(Box::new(probe.clone()), config(1 << 20, false));
    let mut rng = Rng(7);
    let mut live = Vec::new();
    let failure = loop {
        match alloc.alloc(rng.size(18) + 1000, 256) {
            Ok(a) => live.push(a),
            Err(err) => break err,
        }
    };
    let in_use: usize = live.iter().map(Allocation::size).sum();
    match &failure {
        MemError::OutOfMemory {
            device,
            requested,
            in_use: reported,
            reserved,
            capacity,
        } => {
            assert_eq!(device, "test");
            assert!(*requested > 1000);
            assert_eq!(*reported, in_use);
            assert!(*reserved <= cap && *reserved >= in_use);
            assert_eq!(*capacity, Some(cap));
        }
        other => panic!("expected out of memory, got {other}"),
    }
    assert!(failure.to_string().starts_with("out of memory on test"));
    // Still usable: free half, allocate again.
    for a in live.drain(..live.len() / 2) {
        alloc.free(a).unwrap();
    }
    live.push(alloc.alloc(200_000, 256).unwrap());
    // A cached empty block is returned to make room (trim, then retry once).
    for a in live.drain(..) {
        alloc.free(a).unwrap();
    }
    assert_eq!(probe.stats().live_blocks, 1);
    let whole = alloc.alloc(cap - 300_000, 256).unwrap();
    assert_eq!(probe.stats().live_blocks, 1);
    alloc.free(whole).unwrap();
}

#[test]
fn injected_failures_are_retried_once() {
    let probe = TestProvider::new();
    let mut alloc = SubAllocator::new(Box::new(probe.clone()), config(1 << 20, true));
    probe.fail_next_allocs(1);
    let a = alloc.alloc(3000, 256).unwrap();
    probe.fail_next_allocs(2);
    let mut cfg = config(1 << 20, false);
    cfg.dedicated_threshold = Some(1 << 19);
    let mut dedicated = SubAllocator::new(Box::new(probe.clone()), cfg);
    let err = dedicated.alloc(900_000, 256).unwrap_err();
    assert!(matches!(
        err,
        MemError::OutOfMemory {
            requested: 900_000,
            ..
        }
    ));
    assert!(
        dedicated.alloc(900_000, 256).is_ok(),
        "usable after the failure"
    );
    // Growth failures take the same path.
    let growable = TestProvider::new().growable(true);
    let mut grower = SubAllocator::new(Box::new(growable.clone()), config(1 << 20, true));
    let first = grower.alloc(900_000, 256).unwrap();
    growable.fail_next_grows(2);
    growable.fail_next_allocs(2);
    assert!(grower.alloc(900_000, 256).is_err());
    let second = grower.alloc(900_000, 256).unwrap();
    assert!(second.addr() > first.addr());
    grower.free(first).unwrap();
    grower.free(second).unwrap();
    alloc.free(a).unwrap();
    drop((alloc, dedicated, grower));
    assert_eq!(probe.stats().live_bytes, 0);
    assert_eq!(growable.stats().live_bytes, 0);
}

#[test]
fn stream_ordered_reuse_waits_for_tokens_across_streams() {
    let timeline = FakeTimeline::new();
    let probe = TestProvider::new();
    let mut alloc = SubAllocator::new(Box::new(probe.clone()), config(4 << 20, false));
    alloc.set_token_source(Box::new(timeline.clone()));
    let (s0, s1) = (StreamId(0), StreamId(1));
    let mut rng = Rng(99);
    for round in 1..=50u64 {
        let size = rng.size(19) + 256;
        let a = alloc.alloc_on(s0, size, 256).unwrap();
        let addr = a.addr();
        alloc
            .free_on(
                a,
                CompletionToken {
                    stream: s0,
                    value: round,
                },
            )
            .unwrap();
        assert!(alloc.stats().pending_bytes >= size);
        // Another stream must not get the range while stream 0 may still use it.
        let other = alloc.alloc_on(s1, size, 256).unwrap();
        assert!(other.addr() + other.size() <= addr || other.addr() >= addr + size);
        // The same stream may reuse it at once.
        let same = alloc.alloc_on(s0, size, 256).unwrap();
        assert_eq!(same.addr(), addr);
        alloc
            .free_on(
                same,
                CompletionToken {
                    stream: s0,
                    value: round,
                },
            )
            .unwrap();
        timeline.complete(s0, round);
        alloc.process_completions();
        assert_eq!(alloc.stats().pending_bytes, 0);
        alloc.free(other).unwrap();
        // Once complete, any stream may get it.
        let later = alloc.alloc_on(s1, size, 256).unwrap();
        alloc.free(later).unwrap();
    }
    alloc.tlsf.check();
    // Pending ranges keep their block alive until completion, then it can be released.
    let a = alloc.alloc_on(s1, 1 << 20, 256).unwrap();
    assert!(!a.is_dedicated());
    alloc
        .free_on(
            a,
            CompletionToken {
                stream: s1,
                value: 1,
            },
        )
        .unwrap();
    assert_eq!(alloc.trim(), 0);
    assert_eq!(probe.stats().live_blocks, 1);
    timeline.complete(s1, 1);
    alloc.trim();
    assert_eq!(probe.stats().live_blocks, 0);
}

#[test]
fn foreign_allocations_are_refused() {
    let mut one = SubAllocator::new(Box::new(TestProvider::new()), AllocatorConfig::default());
    let mut two = SubAllocator::new(Box::new(TestProvider::new()), AllocatorConfig::default());
    let a = one.alloc(1234, 64).unwrap();
    let b = one.alloc(4321, 64).unwrap();
    assert!(matches!(
        two.free(a),
        Err(MemError::ForeignAllocation { .. })
    ));
    assert!(one.free(b).is_ok());
    assert!(matches!(
        one.alloc(8, 12),
        Err(MemError::BadAlignment { align: 12 })
    ));
    assert!(matches!(
        one.alloc(usize::MAX - 10, 64),
        Err(MemError::SizeOverflow { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Expandable mode
// ---------------------------------------------------------------------------------------------

const G: usize = 64 << 10;

fn expandable(probe: &TestProvider, cfg: ExpandableConfig) -> SubAllocator {
    let alloc = SubAllocator::new(
        Box::new(probe.clone()),
        AllocatorConfig {
            expandable: Some(cfg),
            ..AllocatorConfig::default()
        },
    );
    assert!(alloc.is_expandable());
    assert_eq!(alloc.granule_size(), Some(G));
    alloc
}

fn small_segments() -> ExpandableConfig {
    ExpandableConfig {
        segment_size: 64 << 20,
        ..ExpandableConfig::default()
    }
}

/// Busy (live) TLSF ranges of the given allocations, for the granule-state check.
fn busy(alloc: &SubAllocator, live: &[Allocation]) -> Vec<(usize, usize)> {
    live.iter()
        .filter_map(|a| match a.place {
            Place::Pooled(node) => {
                let (addr, size, _) = alloc.tlsf.node(node);
                Some((addr, size))
            }
            Place::Dedicated(_) => None,
        })
        .collect()
}

fn check_expandable(alloc: &SubAllocator, probe: &TestProvider, live: &[Allocation]) {
    alloc.tlsf.check();
    alloc.vm.as_ref().unwrap().check(&busy(alloc, live));
    let stats = alloc.stats();
    let provider = probe.stats();
    assert_eq!(
        stats.bytes_reserved, provider.live_bytes,
        "reserved = physical held"
    );
    assert_eq!(stats.bytes_mapped, provider.mapped_bytes);
    assert!(stats.bytes_mapped <= stats.bytes_reserved);
    assert_eq!(stats.map_calls, provider.map_calls);
    assert_eq!(stats.unmap_calls, provider.unmap_calls);
    assert_eq!(stats.physical_creates, provider.physical_creates);
    for a in live {
        assert!(
            probe.is_mapped(a.addr(), a.size()),
            "live range {a:?} unmapped"
        );
    }
    assert_eq!(probe.bad_vm_calls(), 0);
}

#[test]
fn granules_are_mapped_on_demand_cached_on_free_and_trimmed() {
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(&probe, small_segments());
    // Three granules and a bit: one map call for four granules.
    let mut live = vec![alloc.alloc(3 * G + 100, 256).unwrap()];
    let stats = alloc.stats();
    assert_eq!((stats.map_calls, stats.granules_mapped), (1, 4));
    assert_eq!((stats.physical_creates, stats.bytes_reserved), (4, 4 * G));
    assert_eq!(stats.provider_allocs, 1, "one virtual reservation");
    // The next allocation shares the fourth granule and maps one more.
    live.push(alloc.alloc(G, 256).unwrap());
    assert_eq!(live[1].addr(), live[0].addr() + 3 * G + 256);
    assert_eq!(alloc.stats().granules_mapped, 5);
    check_expandable(&alloc, &probe, &live);
    // Freeing the first frees granules 0..3 wholly (the fourth is shared): they stay mapped.
    alloc.free(live.remove(0)).unwrap();
    let stats = alloc.stats();
    assert_eq!((stats.unmap_calls, stats.bytes_mapped), (0, 5 * G));
    check_expandable(&alloc, &probe, &live);
    // Reusing the same place costs no call.
    live.push(alloc.alloc(2 * G, 256).unwrap());
    assert_eq!(alloc.stats().map_calls, 2);
    assert_eq!(alloc.stats().physical_creates, 5);
    check_expandable(&alloc, &probe, &live);
    // Trim unmaps and releases the one granule nothing uses.
    alloc.trim();
    let stats = alloc.stats();
    assert_eq!((stats.bytes_mapped, stats.bytes_reserved), (4 * G, 4 * G));
    assert_eq!((stats.unmap_calls, stats.physical_releases), (1, 1));
    check_expandable(&alloc, &probe, &live);
    for a in live.drain(..) {
        alloc.free(a).unwrap();
    }
    alloc.trim();
    let stats = alloc.stats();
    assert_eq!(
        (stats.bytes_in_use, stats.bytes_reserved, stats.bytes_mapped),
        (0, 0, 0)
    );
    let provider = probe.stats();
    assert_eq!((provider.live_bytes, provider.mapped_bytes), (0, 0));
    assert_eq!(provider.vm_releases, 1, "the empty segment went back too");
    assert_eq!(stats.peak_bytes_reserved, 5 * G);
    drop(alloc);
    assert_eq!(probe.bad_vm_calls(), 0);
}

#[test]
fn cached_granules_are_remapped_before_new_ones_are_created() {
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(&probe, small_segments());
    let low = alloc.alloc(4 * G, 256).unwrap();
    let pin = alloc.alloc(G, 256).unwrap();
    let high = alloc.alloc(4 * G, 256).unwrap();
    assert_eq!(alloc.stats().physical_creates, 9);
    // Free the top range: its four granules (the last shared with nothing) become cached.
    alloc.free(high).unwrap();
    // A request that fits in no free range lands above; it takes the cached granules over
    // (unmapped from the top, mapped at the new place) instead of creating new ones.
    let big = alloc.alloc(6 * G, 256).unwrap();
    let stats = alloc.stats();
    assert_eq!(
        stats.bytes_reserved,
        9 * G + 2 * G,
        "four remapped, two created"
    );
    assert_eq!(stats.physical_creates, 11);
    assert_eq!(
        stats.granules_unmapped, 0,
        "the freed range is reused in place first"
    );
    let live = vec![low, pin, big];
    check_expandable(&alloc, &probe, &live);
    let mut live = live;
    // Now free the bottom: four cached granules below `pin`. A new range above them maps
    // by moving them (highest cached first), with no new physical granule.
    alloc.free(live.remove(0)).unwrap();
    let creates = alloc.stats().physical_creates;
    let unmaps = alloc.stats().unmap_calls;
    live.push(alloc.alloc(7 * G, 256).unwrap());
    let stats = alloc.stats();
    assert_eq!(stats.physical_creates, creates + 3, "4 moved, 3 created");
    assert_eq!(
        stats.unmap_calls,
        unmaps + 1,
        "one run unmapped in one call"
    );
    assert_eq!(stats.granules_unmapped, 4);
    check_expandable(&alloc, &probe, &live);
    assert!(stats.peak_bytes_reserved <= stats.peak_bytes_in_use + 4 * G);
    drop(live);
}

#[test]
fn cache_and_pool_limits_give_memory_back_at_free() {
    let probe = TestProvider::new().with_granule(Some(G));
    let cfg = ExpandableConfig {
        max_cached_bytes: G,
        max_pooled_bytes: 2 * G,
        ..small_segments()
    };
    let mut alloc = expandable(&probe, cfg);
    let a = alloc.alloc(6 * G, 256).unwrap();
    let b = alloc.alloc(G, 256).unwrap();
    alloc.free(a).unwrap();
    // Six granules freed: one stays mapped, five are unmapped, two of those kept as physical.
    let stats = alloc.stats();
    assert_eq!(stats.bytes_mapped, 2 * G, "b's granule plus one cached");
    assert_eq!(stats.bytes_reserved, 4 * G, "plus two pooled");
    assert_eq!(stats.physical_releases, 3);
    assert_eq!(stats.granules_unmapped, 5);
    let live = vec![b];
    check_expandable(&alloc, &probe, &live);
    // Pooled granules are mapped again before anything is created.
    let mut live = live;
    live.push(alloc.alloc(3 * G, 256).unwrap());
    assert_eq!(alloc.stats().physical_creates, 7);
    check_expandable(&alloc, &probe, &live);
}

#[test]
fn expandable_out_of_memory_trims_retries_and_stays_usable() {
    let cap = 16 * G;
    let probe = TestProvider::with_capacity(cap).with_granule(Some(G));
    let mut alloc = expandable(&probe, small_segments());
    // An injected map failure is retried once after trimming: the allocation succeeds.
    probe.fail_next_maps(1);
    let mut live = vec![alloc.alloc(2 * G, 256).unwrap()];
    check_expandable(&alloc, &probe, &live);
    // Two failures in a row: out of memory, with the sizes, and nothing left half-mapped.
    probe.fail_next_maps(2);
    let err = alloc.alloc(3 * G, 256).unwrap_err();
    match &err {
        MemError::OutOfMemory {
            device,
            requested,
            in_use,
            capacity,
            ..
        } => {
            assert_eq!(device, "test");
            assert_eq!((*requested, *in_use), (3 * G, 2 * G));
            assert_eq!(*capacity, Some(cap));
        }
        other => panic!("expected out of memory, got {other}"),
    }
    check_expandable(&alloc, &probe, &live);
    assert_eq!(alloc.stats().bytes_in_use, 2 * G);
    // The granules created for the failed attempt wait in the pool; trim gives them back.
    assert_eq!(alloc.stats().bytes_reserved, 5 * G);
    assert_eq!(alloc.trim(), 3 * G);
    assert_eq!(probe.stats().live_bytes, 2 * G);
    // Physical creation failures take the same path.
    probe.fail_next_creates(2);
    assert!(matches!(
        alloc.alloc(G, 256),
        Err(MemError::OutOfMemory { .. })
    ));
    check_expandable(&alloc, &probe, &live);
    // Fill to the capacity, then one more granule fails.
    while let Ok(a) = alloc.alloc(G, 256) {
        live.push(a);
    }
    assert_eq!(probe.stats().live_bytes, cap);
    check_expandable(&alloc, &probe, &live);
    // Free everything but the first: cached granules are remapped for a request elsewhere,
    // even one larger than any free range below.
    for a in live.drain(1..) {
        alloc.free(a).unwrap();
    }
    let whole = alloc.alloc(cap - 3 * G, 4096).unwrap();
    assert!(probe.is_mapped(whole.addr(), whole.size()));
    live.push(whole);
    check_expandable(&alloc, &probe, &live);
    assert!(probe.stats().live_bytes <= cap);
    drop(alloc);
    let provider = probe.stats();
    assert_eq!((provider.live_bytes, provider.mapped_bytes), (0, 0));
    assert_eq!(provider.vm_reserves, provider.vm_releases);
    assert_eq!(probe.bad_vm_calls(), 0);
    drop(live);
}

#[test]
fn proportional_piece_sizes_grow_with_what_is_held() {
    let online = GranulePolicy::proportional();
    let mib = 1usize << 20;
    assert_eq!(online.piece_size(0, 2 * mib), 8 * mib, "the floor");
    assert_eq!(online.piece_size(191 * mib, 2 * mib), 8 * mib);
    assert_eq!(online.piece_size(192 * mib, 2 * mib), 16 * mib, "held / 12");
    assert_eq!(online.piece_size(800 * mib, 2 * mib), 64 * mib);
    assert_eq!(online.piece_size(2600 * mib, 2 * mib), 128 * mib);
    assert_eq!(online.piece_size(1 << 40, 2 * mib), 1 << 30, "the ceiling");
    // Never below the provider's granule, always a power of two.
    assert_eq!(online.piece_size(0, 32 * mib), 32 * mib);
    assert_eq!(
        GranulePolicy::Provider.piece_size(1 << 30, 2 * mib),
        2 * mib
    );
    let fixed = GranulePolicy::Fixed { bytes: 3 * mib };
    assert_eq!(fixed.piece_size(0, 2 * mib), 4 * mib);
    assert_eq!(online.to_string(), "online: held/12, 8.00 MiB..1.00 GiB");
}

#[test]
fn online_targets_follow_held_with_a_4_mib_floor() {
    let online = GranulePolicy::online();
    let mib = 1usize << 20;
    assert_eq!(online.piece_size(0, 2 * mib), 4 * mib, "the floor");
    assert_eq!(online.piece_size(159 * mib, 2 * mib), 4 * mib);
    assert_eq!(online.piece_size(160 * mib, 2 * mib), 8 * mib, "held / 20");
    assert_eq!(online.piece_size(1 << 40, 2 * mib), 1 << 30, "the ceiling");
    assert_eq!(
        online.to_string(),
        "online, fitted to requests: target held/20 (4.00 MiB..), pieces up to peak/6 and \
         1.00 GiB"
    );
}

/// Pieces fitted to requests: target one granule whatever is held (held / 1000), pieces up to
/// the peak in use (`G..64G`).
fn fitted() -> ExpandableConfig {
    ExpandableConfig {
        granules: GranulePolicy::Spanning {
            divisor: 1000,
            min_bytes: G,
            max_bytes: 64 * G,
            peak_divisor: 1,
        },
        ..small_segments()
    }
}

#[test]
fn fitted_pieces_cover_a_large_request_at_once() {
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(&probe, fitted());
    // 8 granules at the start of the segment: one piece of 8.
    let a = alloc.alloc(8 * G, 256).unwrap();
    assert_eq!(alloc.granules_created(), vec![(8 * G, 1)]);
    // 3 granules after it (units 8..11): a piece of 2 and one of 1, none sticking out.
    let b = alloc.alloc(3 * G, 256).unwrap();
    assert_eq!(
        alloc.granules_created(),
        vec![(G, 1), (2 * G, 1), (8 * G, 1)]
    );
    assert_eq!(alloc.stats().bytes_reserved, 11 * G);
    alloc.free(a).unwrap();
    alloc.free(b).unwrap();
    assert_eq!(probe.bad_vm_calls(), 0);
}

#[test]
fn fitted_pieces_with_an_unbounded_maximum_stay_in_range() {
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(
        &probe,
        ExpandableConfig {
            granules: GranulePolicy::Spanning {
                divisor: 1,
                min_bytes: G,
                max_bytes: usize::MAX,
                peak_divisor: 1,
            },
            ..small_segments()
        },
    );
    let a = alloc.alloc(40 * G, 256).unwrap();
    assert!(probe.is_mapped(a.addr(), a.size()));
    alloc.free(a).unwrap();
    drop(alloc);
    assert_eq!(probe.stats().live_bytes, 0);
    assert_eq!(probe.bad_vm_calls(), 0);
}

#[test]
fn fitted_class_sticks_out_by_less_than_the_target() {
    use crate::expandable::fitted_class;
    // Span of units 0..=5, target 1 unit: 4 (0..4) fits inside, 8 would stick out by 2.
    assert_eq!(fitted_class(0, 5, 10, 0), 2);
    // Target 4 units: 8 sticks out by 2 < 4.
    assert_eq!(fitted_class(0, 5, 10, 2), 3);
    // The aligned free block limits it.
    assert_eq!(fitted_class(0, 5, 1, 2), 1);
    // Unit 3 with 0..4 free: that block sticks out below by 3 units, too much for a 1-unit
    // target.
    assert_eq!(fitted_class(3, 20, 2, 0), 0);
}

/// Doubling pieces (held / 1, `G..8G`) over 64 KiB granules.
fn doubling() -> ExpandableConfig {
    ExpandableConfig {
        granules: GranulePolicy::Proportional {
            divisor: 1,
            min_bytes: G,
            max_bytes: 8 * G,
        },
        ..small_segments()
    }
}

#[test]
fn online_pieces_grow_and_smaller_cached_pieces_fill_larger_spans() {
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(&probe, doubling());
    let a = alloc.alloc(G, 256).unwrap();
    let b = alloc.alloc(G, 256).unwrap();
    let pin = alloc.alloc(2 * G, 256).unwrap();
    let d = alloc.alloc(4 * G, 256).unwrap();
    // Each piece as large as what was held before it (and as fits aligned around the unit).
    assert_eq!(
        alloc.granules_created(),
        vec![(G, 2), (2 * G, 1), (4 * G, 1)]
    );
    assert_eq!(alloc.stats().bytes_reserved, 8 * G);
    let mut live = vec![a, b, pin, d];
    check_expandable(&alloc, &probe, &live);
    // Free the two unit pieces at the bottom and the 4G piece: a 3G request above `pin`
    // reuses the cached 4G piece in place (no call).
    alloc.free(live.remove(3)).unwrap();
    alloc.free(live.remove(0)).unwrap();
    alloc.free(live.remove(0)).unwrap();
    let calls = (alloc.stats().map_calls, alloc.stats().unmap_calls);
    live.push(alloc.alloc(3 * G, 256).unwrap());
    assert_eq!((alloc.stats().map_calls, alloc.stats().unmap_calls), calls);
    // A 6G request lands right above it (units 7..12; unit 7 is in the busy 4G piece). The
    // policy's piece is 8G, more than the request needs beyond what is held, so for units 8
    // and 12 the cached unit pieces at the bottom are moved (one unmap each); units 9 and
    // 10..11 get new pieces of the largest size that fits aligned next to them (1G, 2G)
    // while held memory stays within what is in use. All adjacent: one map call.
    live.push(alloc.alloc(6 * G, 256).unwrap());
    let stats = alloc.stats();
    assert_eq!(stats.unmap_calls, calls.1 + 2);
    assert_eq!(
        stats.map_calls,
        calls.0 + 1,
        "adjacent pieces: one map call"
    );
    assert_eq!(
        alloc.granules_created(),
        vec![(G, 3), (2 * G, 2), (4 * G, 1)]
    );
    assert_eq!(stats.bytes_reserved, 11 * G);
    assert_eq!(stats.bytes_in_use, 11 * G);
    check_expandable(&alloc, &probe, &live);
    for a in live.drain(..) {
        alloc.free(a).unwrap();
    }
    assert_eq!(alloc.trim(), 11 * G);
    check_expandable(&alloc, &probe, &live);
    drop(alloc);
    assert_eq!(probe.stats().live_bytes, 0);
    assert_eq!(probe.bad_vm_calls(), 0);
}

#[test]
fn online_pieces_shrink_to_fit_the_capacity_before_out_of_memory() {
    let cap = 6 * G;
    let probe = TestProvider::with_capacity(cap).with_granule(Some(G));
    let mut alloc = expandable(&probe, doubling());
    let mut live = vec![
        alloc.alloc(G, 256).unwrap(),
        alloc.alloc(G, 256).unwrap(),
        alloc.alloc(2 * G, 256).unwrap(),
    ];
    assert_eq!(alloc.stats().bytes_reserved, 4 * G);
    // The policy asks for a 4G piece; the device has 2G left: a 2G piece is created instead.
    live.push(alloc.alloc(2 * G, 256).unwrap());
    assert_eq!(alloc.granules_created(), vec![(G, 2), (2 * G, 2)]);
    assert_eq!(probe.stats().live_bytes, cap);
    check_expandable(&alloc, &probe, &live);
    // Now nothing fits: out of memory with the sizes, nothing half-mapped, still usable.
    match alloc.alloc(G, 256) {
        Err(MemError::OutOfMemory {
            requested,
            in_use,
            capacity,
            ..
        }) => assert_eq!((requested, in_use, capacity), (G, 6 * G, Some(cap))),
        other => panic!("expected out of memory, got {other:?}"),
    }
    check_expandable(&alloc, &probe, &live);
    alloc.free(live.remove(0)).unwrap();
    live.push(alloc.alloc(G, 256).unwrap());
    assert_eq!(probe.stats().live_bytes, cap);
    check_expandable(&alloc, &probe, &live);
}

#[test]
fn expandable_falls_back_to_blocks_without_virtual_memory() {
    let probe = TestProvider::new().with_granule(None);
    let mut alloc = SubAllocator::new(
        Box::new(probe.clone()),
        AllocatorConfig {
            expandable: Some(ExpandableConfig::default()),
            ..AllocatorConfig::default()
        },
    );
    assert!(!alloc.is_expandable());
    assert_eq!(alloc.granule_size(), None);
    let a = alloc.alloc(5000, 256).unwrap();
    assert_eq!(probe.stats().allocs, 1, "a block");
    assert_eq!(probe.stats().map_calls, 0);
    alloc.free(a).unwrap();
}

#[test]
fn expandable_stream_frees_keep_granules_until_completion() {
    let timeline = FakeTimeline::new();
    let probe = TestProvider::new().with_granule(Some(G));
    let mut alloc = expandable(&probe, small_segments());
    alloc.set_token_source(Box::new(timeline.clone()));
    let s0 = StreamId(0);
    let a = alloc.alloc_on(s0, 3 * G, 256).unwrap();
    let (addr, size) = (a.addr(), a.size());
    let token = CompletionToken {
        stream: s0,
        value: 1,
    };
    alloc.free_on(a, token).unwrap();
    // Pending: still mapped and needed, even through a trim.
    alloc.trim();
    assert!(probe.is_mapped(addr, size));
    assert_eq!(alloc.stats().bytes_mapped, 3 * G);
    timeline.complete(s0, 1);
    alloc.process_completions();
    alloc.vm.as_ref().unwrap().check(&[]);
    alloc.trim();
    assert_eq!(alloc.stats().bytes_reserved, 0);
    assert_eq!(probe.stats().live_bytes, 0);
}

mod properties {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Alloc { size: usize, align_log: u32 },
        Free(usize),
        FailMaps(usize),
        FailCreates(usize),
        FailAllocs(usize),
        Trim,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (1usize..(1 << 20), 0u32..14)
                .prop_map(|(size, align_log)| Op::Alloc { size, align_log }),
            6 => any::<usize>().prop_map(Op::Free),
            1 => (1usize..3).prop_map(Op::FailMaps),
            1 => (1usize..3).prop_map(Op::FailCreates),
            1 => (1usize..3).prop_map(Op::FailAllocs),
            1 => Just(Op::Trim),
        ]
    }

    /// Piece policies: the provider's granule, fixed multiples, and online ones (divisor 1
    /// doubles the piece with everything held; pieces up to the whole 32-granule segment).
    fn policy() -> impl Strategy<Value = GranulePolicy> {
        prop_oneof![
            Just(GranulePolicy::Provider),
            (0u32..4).prop_map(|k| GranulePolicy::Fixed { bytes: G << k }),
            (1usize..24, 0u32..3, 2u32..7).prop_map(|(divisor, lo, hi)| {
                GranulePolicy::Proportional {
                    divisor,
                    min_bytes: G << lo,
                    max_bytes: G << hi,
                }
            }),
            (1usize..24, 0u32..3, 2u32..7, 1usize..8).prop_map(|(divisor, lo, hi, peak)| {
                GranulePolicy::Spanning {
                    divisor,
                    min_bytes: G << lo,
                    max_bytes: G << hi,
                    peak_divisor: peak,
                }
            }),
            Just(GranulePolicy::online()),
            Just(GranulePolicy::proportional()),
        ]
    }

    /// Runs `ops`, checking after each step: live ranges disjoint, aligned and (expandable)
    /// mapped; stats consistent with the provider; out of memory reported with the sizes and
    /// leaving the allocator usable. At the end everything goes back to zero.
    fn run(mut alloc: SubAllocator, probe: &TestProvider, ops: Vec<Op>) {
        let expandable = alloc.is_expandable();
        let mut live: Vec<Allocation> = Vec::new();
        let mut in_use = 0usize;
        for op in ops {
            match op {
                Op::Alloc { size, align_log } => {
                    let align = 1usize << align_log;
                    let injected = probe.pending_failures() > 0;
                    match alloc.alloc(size, align) {
                        Ok(a) => {
                            assert_eq!(a.addr() % align, 0);
                            assert_eq!(a.size(), size);
                            in_use += size;
                            live.push(a);
                        }
                        Err(MemError::OutOfMemory {
                            requested,
                            in_use: reported,
                            reserved,
                            capacity,
                            ..
                        }) => {
                            assert_eq!((requested, reported), (size, in_use));
                            assert!(reserved >= in_use);
                            assert_eq!(capacity, probe.capacity());
                            if expandable && !injected {
                                // Only a full device: with what the failed attempt pooled
                                // given back, less room than the granules the request spans
                                // (pieces of the policy's size shrink before giving up).
                                let cap = capacity.expect("no failure without a cap");
                                alloc.trim();
                                let room = cap - probe.stats().live_bytes;
                                assert!(room < (size.div_ceil(G) + 1) * G, "room {room} left");
                            }
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let a = live.swap_remove(i % live.len());
                    in_use -= a.size();
                    alloc.free(a).unwrap();
                }
                Op::Free(_) => {}
                Op::FailMaps(n) => probe.fail_next_maps(n),
                Op::FailCreates(n) => probe.fail_next_creates(n),
                Op::FailAllocs(n) => probe.fail_next_allocs(n),
                Op::Trim => {
                    alloc.trim();
                }
            }
            assert_disjoint(&live);
            let stats = alloc.stats();
            assert_eq!(stats.bytes_in_use, in_use);
            assert!(stats.peak_bytes_in_use >= in_use);
            assert!(stats.peak_bytes_reserved >= stats.bytes_reserved);
            assert!(stats.bytes_reserved >= in_use);
            if let Some(cap) = probe.capacity() {
                assert!(stats.bytes_reserved <= cap);
            }
            if expandable {
                check_expandable(&alloc, probe, &live);
            } else {
                alloc.tlsf.check();
                assert_eq!(stats.bytes_reserved, probe.stats().live_bytes);
            }
        }
        probe.fail_next_maps(0);
        probe.fail_next_creates(0);
        probe.fail_next_allocs(0);
        for a in live.drain(..) {
            alloc.free(a).unwrap();
        }
        alloc.trim();
        let stats = alloc.stats();
        assert_eq!((stats.bytes_in_use, stats.bytes_reserved), (0, 0));
        assert_eq!(stats.bytes_mapped, 0);
        assert_eq!(probe.stats().live_bytes, 0);
        drop(alloc);
        let after = probe.stats();
        assert_eq!((after.live_bytes, after.mapped_bytes), (0, 0));
        assert_eq!(after.live_blocks, 0);
        assert_eq!(after.vm_reserves, after.vm_releases);
        assert_eq!(after.physical_creates, after.physical_releases);
        assert_eq!(probe.bad_vm_calls(), 0);
        assert_eq!(probe.bad_frees(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn expandable_random_traffic_keeps_invariants(
            ops in vec(op(), 1..160),
            cap_granules in prop::option::of(6usize..80),
            cached in prop::option::of(0usize..6),
            pooled in prop::option::of(0usize..6),
            headroom in 0u32..200,
            granules in policy(),
        ) {
            let probe = match cap_granules {
                Some(n) => TestProvider::with_capacity(n * G),
                None => TestProvider::new(),
            }
            .with_granule(Some(G));
            let cfg = ExpandableConfig {
                // Small segments, so large requests and full segments add more of them.
                segment_size: 2 << 20,
                max_cached_bytes: cached.map_or(usize::MAX, |n| n * G),
                max_pooled_bytes: pooled.map_or(usize::MAX, |n| n * G),
                headroom_permille: headroom,
                granules,
            };
            run(expandable(&probe, cfg), &probe, ops);
        }

        #[test]
        fn block_random_traffic_keeps_invariants(
            ops in vec(op(), 1..160),
            cap in prop::option::of((1usize << 20)..(8 << 20)),
            grow in any::<bool>(),
        ) {
            let probe = match cap {
                Some(bytes) => TestProvider::with_capacity(bytes),
                None => TestProvider::new(),
            }
            .growable(grow);
            let alloc = SubAllocator::new(Box::new(probe.clone()), config(1 << 20, grow));
            run(alloc, &probe, ops);
        }
    }
}
