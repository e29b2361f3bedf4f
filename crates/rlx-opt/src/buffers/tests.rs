use super::*;
use rlx_ir::kernel::Buffer;
use rlx_ir::{DType, Shape, TensorType};

/// A program of temporary f32 buffers of `sizes` elements with the given outputs.
fn program(sizes: &[usize], outputs: &[BufferId]) -> KernelProgram {
    KernelProgram {
        buffers: sizes
            .iter()
            .map(|&n| Buffer {
                ty: TensorType::new(DType::F32, Shape::of(&[n])),
                kind: BufferKind::Temp,
                alias_of: None,
            })
            .collect(),
        kernels: Vec::new(),
        outputs: outputs
            .iter()
            .enumerate()
            .map(|(i, &b)| (format!("out{i}"), b))
            .collect(),
    }
}

const ARENA: ArenaTarget = ArenaTarget {
    align: 64,
    min_bytes: 0,
    granule: 64,
    outputs: OutputHome::Arena,
};

fn steps(touches: &[&[usize]]) -> Vec<Vec<Region>> {
    touches
        .iter()
        .map(|t| t.iter().map(|&b| Region::Buffer(b)).collect())
        .collect()
}

fn offset(plan: &BufferPlan, b: BufferId) -> usize {
    match plan.homes[b] {
        Home::Arena(o) => o,
        other => panic!("b{b} is {other:?}, not in the arena"),
    }
}

#[test]
fn lifetimes_run_from_the_first_to_the_last_touch() {
    // b0 written at 0, read at 2; b1 written at 1, read at 2
    let p = program(&[16, 16, 16], &[2]);
    let plan = plan_buffers(&p, &steps(&[&[0], &[1], &[0, 1, 2]]), &[], &ARENA).unwrap();
    let life = |first, last| Some(Lifetime { first, last });
    assert_eq!(plan.lifetimes[0], life(0, 2));
    assert_eq!(plan.lifetimes[1], life(1, 2));
    // an output in the arena lasts until the run ends, one past the last step
    assert_eq!(plan.lifetimes[2], life(2, 3));
}

#[test]
fn disjoint_lifetimes_share_bytes_and_overlapping_ones_do_not() {
    // a chain: each buffer read only by the next step
    let p = program(&[100, 100, 100, 100], &[3]);
    let plan = plan_buffers(&p, &steps(&[&[0], &[0, 1], &[1, 2], &[2, 3]]), &[], &ARENA).unwrap();
    assert_eq!(
        offset(&plan, 0),
        offset(&plan, 2),
        "b0 is dead when b2 is written"
    );
    assert_ne!(offset(&plan, 0), offset(&plan, 1));
    assert_ne!(offset(&plan, 2), offset(&plan, 3));
    // 400 bytes round up to 448; two live at a time
    assert_eq!(plan.arena_bytes, 2 * 448);
    assert_eq!(plan.lower_bound_bytes, 2 * 448);
}

#[test]
fn a_view_lives_in_its_roots_storage() {
    let mut p = program(&[16, 16, 16], &[1]);
    p.buffers[1].alias_of = Some(0);
    // b2 is written while the view of b0 is read: b0 must stay live
    let plan = plan_buffers(&p, &steps(&[&[0], &[2], &[1, 2]]), &[], &ARENA).unwrap();
    assert_eq!(plan.roots, vec![0, 0, 2]);
    assert_eq!(plan.homes[1], plan.homes[0]);
    assert_eq!(plan.lifetimes[0], Some(Lifetime { first: 0, last: 3 }));
    assert_ne!(offset(&plan, 0), offset(&plan, 2));
}

#[test]
fn offsets_are_aligned_and_sizes_rounded() {
    let target = ArenaTarget {
        align: 256,
        min_bytes: 4,
        granule: 4,
        outputs: OutputHome::Arena,
    };
    assert_eq!(target.region_bytes(0), 4);
    assert_eq!(target.region_bytes(6), 8);
    let p = program(&[3, 1, 5, 0], &[3]);
    let plan = plan_buffers(&p, &steps(&[&[0], &[0, 1], &[1, 2]]), &[10], &target).unwrap();
    for b in 0..4 {
        assert_eq!(offset(&plan, b) % 256, 0, "b{b}");
    }
    assert_eq!(
        plan.scratch,
        vec![0],
        "a scratch region no step touches is not placed"
    );
    let cpu = ArenaTarget {
        align: 64,
        min_bytes: 0,
        granule: 64,
        outputs: OutputHome::Owned,
    };
    assert_eq!(cpu.region_bytes(0), 0);
    assert_eq!(cpu.region_bytes(65), 128);
}

#[test]
fn outputs_are_owned_outside_the_arena_when_the_backend_asks() {
    let p = program(&[16, 16, 16], &[2, 0]);
    let target = ArenaTarget {
        outputs: OutputHome::Owned,
        ..ARENA
    };
    let plan = plan_buffers(&p, &steps(&[&[0], &[0, 1], &[1, 2]]), &[], &target).unwrap();
    assert_eq!(plan.homes[0], Home::Owned(0));
    assert_eq!(plan.homes[2], Home::Owned(1));
    assert_eq!(plan.owned, vec![0, 2]);
    assert_eq!(plan.homes[1], Home::Arena(0));
    assert_eq!(plan.arena_bytes, 64);
}

#[test]
fn an_untouched_output_in_the_arena_still_gets_a_place() {
    let p = program(&[16, 16], &[1]);
    let plan = plan_buffers(&p, &steps(&[&[0]]), &[], &ARENA).unwrap();
    assert_eq!(plan.lifetimes[1], Some(Lifetime { first: 1, last: 1 }));
    assert!(matches!(plan.homes[1], Home::Arena(_)));
}

#[test]
fn leaves_keep_their_kind_and_untouched_temps_need_no_storage() {
    let mut p = program(&[16, 16, 16, 16, 16], &[3]);
    p.buffers[0].kind = BufferKind::Input("x".into());
    p.buffers[1].kind = BufferKind::Param("w".into());
    p.buffers[2].kind = BufferKind::Constant(std::sync::Arc::new(
        rlx_ir::Tensor::from_f64(DType::F32, &[16], &[1.0; 16]).unwrap(),
    ));
    let plan = plan_buffers(&p, &steps(&[&[0, 1, 2, 3]]), &[], &ARENA).unwrap();
    assert_eq!(
        plan.homes,
        vec![
            Home::Input,
            Home::Weight,
            Home::Constant,
            Home::Arena(0),
            Home::Unused
        ]
    );
    assert_eq!(plan.lifetimes[4], None);
    assert_eq!(plan.arena_bytes, 64, "only the temporary is in the arena");
}

#[test]
fn scratch_regions_share_the_arena_with_temporaries() {
    let p = program(&[16, 16], &[1]);
    let steps = vec![
        vec![Region::Buffer(0), Region::Scratch(0)],
        vec![Region::Buffer(0), Region::Buffer(1), Region::Scratch(1)],
    ];
    let plan = plan_buffers(&p, &steps, &[64, 64], &ARENA).unwrap();
    assert_ne!(plan.scratch[0], offset(&plan, 0));
    assert_ne!(plan.scratch[1], offset(&plan, 0));
    assert_ne!(plan.scratch[1], offset(&plan, 1));
    // three regions live at step 1; scratch 0, dead by then, fits beside b0 at step 0
    assert_eq!(plan.arena_bytes, 3 * 64);
}

#[test]
fn a_bad_alignment_is_an_error() {
    let p = program(&[16], &[0]);
    let target = ArenaTarget { align: 48, ..ARENA };
    assert!(plan_buffers(&p, &steps(&[&[0]]), &[], &target).is_err());
}

#[test]
fn random_plans_never_overlap_live_regions() {
    let mut rng = rlx_ir::SplitMix64(3);
    for _ in 0..50 {
        let n = 2 + rng.below(20);
        let sizes: Vec<usize> = (0..n).map(|_| rng.below(500)).collect();
        let p = program(&sizes, &[n - 1]);
        let touches: Vec<Vec<Region>> = (0..10)
            .map(|_| {
                (0..1 + rng.below(3))
                    .map(|_| Region::Buffer(rng.below(n)))
                    .collect()
            })
            .collect();
        let plan = plan_buffers(&p, &touches, &[], &ARENA).unwrap();
        for a in 0..n {
            for b in 0..a {
                let (Some(la), Some(lb)) = (plan.lifetimes[a], plan.lifetimes[b]) else {
                    continue;
                };
                let live = la.first <= lb.last && lb.first <= la.last;
                let (oa, ob) = (offset(&plan, a), offset(&plan, b));
                let (sa, sb) = (
                    ARENA.region_bytes(sizes[a] * 4),
                    ARENA.region_bytes(sizes[b] * 4),
                );
                let space = oa < ob + sb && ob < oa + sa;
                assert!(
                    !(live && space && sa > 0 && sb > 0),
                    "b{a} and b{b} overlap"
                );
            }
        }
        assert!(plan.arena_bytes >= plan.lower_bound_bytes);
    }
}
