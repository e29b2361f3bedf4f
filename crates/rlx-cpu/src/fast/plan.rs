//! The static memory planner: packs buffers whose lifetimes are known at compile time into
//! one arena by offset. [`plan_memory`] adapts the kernel program's buffers to `rlx-mem`'s planner.

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
    /// most bytes live at one step: no plan can be smaller
    pub lower_bound_bytes: usize,
}

/// Arena alignment: a cache line, and enough for every SIMD load.
pub const ALIGN: usize = 64;

/// Packs the requests with `rlx-mem`'s static planner (largest or longest-lived first, each
/// into the best gap), every offset aligned to `ALIGN` (64 bytes).
pub fn plan_memory(reqs: &[Interval]) -> MemoryPlan {
    let requests: Vec<rlx_mem::PlanRequest> = reqs
        .iter()
        .map(|r| rlx_mem::PlanRequest {
            size: r.bytes.div_ceil(ALIGN) * ALIGN,
            align: ALIGN,
            first: r.first,
            last: r.last,
            inplace_of: None,
        })
        .collect();
    match rlx_mem::plan(&requests) {
        Ok(p) => MemoryPlan {
            offsets: p.offsets,
            total_bytes: p.arena_bytes,
            lower_bound_bytes: p.lower_bound_bytes,
        },
        // The requests are built here with valid alignments and no in-place hints, so the
        // planner has nothing to reject; fall back to one slot per request all the same.
        Err(_) => {
            let mut offsets = Vec::with_capacity(reqs.len());
            let mut total = 0;
            for r in &requests {
                offsets.push(total);
                total += r.size;
            }
            MemoryPlan {
                offsets,
                total_bytes: total,
                lower_bound_bytes: total,
            }
        }
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
