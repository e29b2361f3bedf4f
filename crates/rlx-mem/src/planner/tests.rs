use super::*;
use proptest::prelude::*;

fn req(size: usize, first: usize, last: usize) -> PlanRequest {
    PlanRequest {
        size,
        align: 256,
        first,
        last,
        inplace_of: None,
    }
}

/// Random requests; about a third carry a valid in-place hint on an earlier tensor.
fn requests() -> impl Strategy<Value = Vec<PlanRequest>> {
    prop::collection::vec(
        (
            1usize..1_000_000,
            0usize..40,
            0usize..12,
            0u32..8,
            any::<bool>(),
        ),
        1..60,
    )
    .prop_map(|raw| {
        let mut out: Vec<PlanRequest> = Vec::new();
        let mut taken = Vec::new();
        for (i, (size, first, span, align_log, inplace)) in raw.into_iter().enumerate() {
            let mut r = PlanRequest {
                size,
                align: 1 << (align_log + 2),
                first,
                last: first + span,
                inplace_of: None,
            };
            if inplace && i > 0 {
                let input = size % i;
                if !taken.contains(&input) {
                    taken.push(input);
                    let src = out[input];
                    r.first = src.last;
                    r.last = src.last + span;
                    r.size = size.min(src.size);
                    r.inplace_of = Some(input);
                }
            }
            out.push(r);
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_plans_verify_and_respect_the_lower_bound(reqs in requests()) {
        let plan = plan(&reqs).unwrap();
        prop_assert!(verify_plan(&reqs, &plan).is_ok(), "{:?}", verify_plan(&reqs, &plan));
        prop_assert!(plan.arena_bytes >= plan.lower_bound_bytes);
        let total: usize = reqs.iter().map(|r| r.size + r.align).sum();
        prop_assert!(plan.arena_bytes <= total);
        for (i, r) in reqs.iter().enumerate() {
            if let Some(input) = r.inplace_of {
                prop_assert_eq!(plan.offsets[i], plan.offsets[input]);
            }
        }
    }
}

#[test]
fn plans_stay_close_to_the_lower_bound_on_random_graphs() {
    let mut x: u64 = 0x1357_9bdf_2468_ace0;
    let mut ratios = Vec::new();
    for _ in 0..40 {
        let mut reqs = Vec::new();
        for step in 0..200usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = ((x >> 40) as usize % 4_000_000) + 1024;
            let span = (x % 6) as usize + (if x % 17 == 0 { 50 } else { 0 });
            reqs.push(req(size, step, step + span));
        }
        let plan = plan(&reqs).unwrap();
        verify_plan(&reqs, &plan).unwrap();
        ratios.push(plan.arena_bytes as f64 / plan.lower_bound_bytes as f64);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(mean < 1.25, "mean arena / lower bound {mean:.3}");
}

#[test]
fn chain_of_inplace_ops_shares_one_offset() {
    // x -> relu(x) in place -> scale in place, beside a tensor that lives throughout.
    let reqs = vec![
        req(1000, 0, 1),
        PlanRequest {
            inplace_of: Some(0),
            ..req(1000, 1, 2)
        },
        PlanRequest {
            inplace_of: Some(1),
            ..req(800, 2, 3)
        },
        req(5000, 0, 3),
    ];
    let plan = plan(&reqs).unwrap();
    verify_plan(&reqs, &plan).unwrap();
    assert_eq!(plan.offsets[0], plan.offsets[1]);
    assert_eq!(plan.offsets[1], plan.offsets[2]);
    assert_eq!(plan.inplace_shared, 2);
    assert_eq!(plan.lower_bound_bytes, 6000);
    // 5000 bytes at 0, the in-place chain at the next 256-byte boundary.
    assert_eq!(plan.arena_bytes, 5120 + 1000);
}

#[test]
fn disjoint_lifetimes_reuse_memory() {
    let reqs: Vec<_> = (0..10).map(|i| req(4096 * (i + 1), i, i)).collect();
    let plan = plan(&reqs).unwrap();
    assert!(plan.offsets.iter().all(|&o| o == 0));
    assert_eq!(plan.arena_bytes, 40960);
    assert_eq!(plan.lower_bound_bytes, 40960);
}

#[test]
fn bad_requests_are_named() {
    let cases = [
        (
            vec![PlanRequest {
                align: 3,
                ..req(10, 0, 0)
            }],
            "alignment 3",
        ),
        (vec![req(10, 5, 4)], "first use 5 after last use 4"),
        (
            vec![
                req(10, 0, 3),
                PlanRequest {
                    inplace_of: Some(0),
                    ..req(10, 2, 4)
                },
            ],
            "last used at step 3",
        ),
        (
            vec![
                req(10, 0, 3),
                PlanRequest {
                    inplace_of: Some(0),
                    ..req(11, 3, 4)
                },
            ],
            "do not fit",
        ),
        (
            vec![
                req(10, 0, 3),
                PlanRequest {
                    inplace_of: Some(5),
                    ..req(10, 3, 4)
                },
            ],
            "earlier request",
        ),
        (
            vec![
                req(10, 0, 3),
                PlanRequest {
                    inplace_of: Some(0),
                    ..req(10, 3, 4)
                },
                PlanRequest {
                    inplace_of: Some(0),
                    ..req(10, 3, 5)
                },
            ],
            "already overwritten",
        ),
    ];
    for (reqs, needle) in cases {
        let err = plan(&reqs).unwrap_err().to_string();
        assert!(err.contains(needle), "{err} lacks {needle}");
    }
}

#[test]
fn verify_catches_overlaps() {
    let reqs = vec![req(1000, 0, 5), req(1000, 3, 8)];
    let mut bad = plan(&reqs).unwrap();
    bad.offsets[1] = bad.offsets[0] + 256;
    let err = verify_plan(&reqs, &bad).unwrap_err().to_string();
    assert!(err.contains("overlaps tensor 0"), "{err}");
    bad.offsets[1] = 100;
    assert!(verify_plan(&reqs, &bad)
        .unwrap_err()
        .to_string()
        .contains("not aligned"));
}
