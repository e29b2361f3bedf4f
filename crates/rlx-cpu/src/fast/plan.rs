//! The static memory planner: packs buffers whose lifetimes are known at compile time into
//! one arena by offset. Kept behind [`plan_memory`] so rlx-mem's planner can replace it.

/// One allocation request: its size and the steps (kernel indices, inclusive) during which
/// it must hold its contents, from its first write to its last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// bytes needed
    pub bytes: usize,
    /// first step it is live
    pub first: usize,
    /// last step it is live
    pub last: usize,
}

/// Where each request lives in the arena.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryPlan {
    /// byte offset per request, 64-byte aligned
    pub offsets: Vec<usize>,
    /// arena size in bytes
    pub total_bytes: usize,
}

/// Arena alignment: a cache line, and enough for every SIMD load.
pub const ALIGN: usize = 64;

/// Greedy planning: largest request first, each placed in the smallest gap (best fit) among
/// the requests already placed whose lifetimes overlap its own.
pub fn plan_memory(reqs: &[Interval]) -> MemoryPlan {
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(reqs[i].bytes), reqs[i].first, i));
    let size = |i: usize| reqs[i].bytes.div_ceil(ALIGN) * ALIGN;
    let mut offsets = vec![0usize; reqs.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0;
    for &i in &order {
        if reqs[i].bytes == 0 {
            continue;
        }
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| reqs[j].first <= reqs[i].last && reqs[i].first <= reqs[j].last)
            .map(|&j| (offsets[j], offsets[j] + size(j)))
            .collect();
        busy.sort();
        let need = size(i);
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut cursor = 0;
        for &(start, end) in &busy {
            if start >= cursor + need {
                let gap = start - cursor;
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        offsets[i] = best.map_or(cursor, |(_, off)| off);
        total = total.max(offsets[i] + need);
        placed.push(i);
    }
    MemoryPlan {
        offsets,
        total_bytes: total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(reqs: &[Interval], plan: &MemoryPlan) -> bool {
        for i in 0..reqs.len() {
            for j in 0..i {
                let (a, b) = (reqs[i], reqs[j]);
                let live = a.first <= b.last && b.first <= a.last;
                let (ai, bi) = (plan.offsets[i], plan.offsets[j]);
                let space = ai < bi + b.bytes && bi < ai + a.bytes;
                if live && space && a.bytes > 0 && b.bytes > 0 {
                    return true;
                }
            }
        }
        false
    }

    #[test]
    fn disjoint_lifetimes_share_memory() {
        let reqs = [
            Interval {
                bytes: 100,
                first: 0,
                last: 1,
            },
            Interval {
                bytes: 100,
                first: 1,
                last: 2,
            },
            Interval {
                bytes: 100,
                first: 2,
                last: 3,
            },
        ];
        let plan = plan_memory(&reqs);
        assert!(!overlaps(&reqs, &plan));
        assert_eq!(plan.offsets[0], plan.offsets[2]);
        assert_eq!(plan.total_bytes, 256);
        assert!(plan.offsets.iter().all(|o| o % ALIGN == 0));
    }

    #[test]
    fn random_requests_never_overlap() {
        let mut rng = rlx_ir::SplitMix64(3);
        for _ in 0..50 {
            let reqs: Vec<Interval> = (0..30)
                .map(|_| {
                    let first = rng.below(20);
                    Interval {
                        bytes: rng.below(5000),
                        first,
                        last: first + rng.below(6),
                    }
                })
                .collect();
            let plan = plan_memory(&reqs);
            assert!(!overlaps(&reqs, &plan));
            let peak: usize = (0..26)
                .map(|t| {
                    reqs.iter()
                        .filter(|r| r.first <= t && t <= r.last)
                        .map(|r| r.bytes)
                        .sum::<usize>()
                })
                .max()
                .unwrap();
            assert!(plan.total_bytes >= peak);
        }
    }
}
