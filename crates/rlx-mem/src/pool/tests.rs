use super::*;
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
