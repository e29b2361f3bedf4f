//! Sibling GEMMs sharing their A operand planned as one (no GPU needed): the encoder's q, k,
//! v projections become one GEMM over concatenated weights whose result attention reads in
//! place, and nothing merges when a condition fails. The merged plans' kernels compile with
//! NVRTC (skipped with a reason when NVRTC is absent). Also which kernel-IR passes CUDA
//! chooses, and that a GEMM + norm kernel is offered only for the `gemm_norm` pass's pairs.

mod support;

use rlx_cuda::codegen::{ArgRef, Target};
use rlx_cuda::gemm::GemmSpec;
use rlx_cuda::plan::{plan_with, Plan, Step};
use rlx_ir::kernel::KernelProgram;
use rlx_ir::{DType, Graph, NodeId, Shape};
use support::cases::{merge_cases, merge_refused_cases, Case};
use support::{compile_check, lower_for_cuda};

fn gemms(p: &Plan) -> Vec<&GemmSpec> {
    p.steps
        .iter()
        .filter_map(|s| if let Step::Gemm(g) = s { Some(g) } else { None })
        .collect()
}

fn both(program: &KernelProgram, target: &Target) -> (Plan, Plan) {
    (
        plan_with(program, target, true).unwrap(),
        plan_with(program, target, false).unwrap(),
    )
}

fn lowered(c: &Case) -> KernelProgram {
    lower_for_cuda(&c.graph).unwrap_or_else(|e| panic!("{}: {e}", c.name))
}

/// `layers` encoder-shaped blocks (q, k, v projections with bias, head-split attention,
/// output projection with residual) in `dt`.
fn encoder(layers: usize, dt: DType) -> Graph {
    let (batch, seq, heads, dim) = (2, 16, 4, 32);
    let hidden = heads * dim;
    let mut g = Graph::new();
    let mut x = g.input("x", dt, Shape::of(&[batch, seq, hidden]));
    for l in 0..layers {
        let proj = |g: &mut Graph, x: NodeId, name: &str| {
            let w = g.param(&format!("l{l}.{name}.w"), dt, Shape::of(&[hidden, hidden]));
            let b = g.param(&format!("l{l}.{name}.b"), dt, Shape::of(&[hidden]));
            let y = g.matmul(x, w).unwrap();
            g.add(y, b).unwrap()
        };
        let split = |g: &mut Graph, t: NodeId| {
            let t = g.reshape(t, Shape::of(&[batch, seq, heads, dim])).unwrap();
            g.transpose(t, &[0, 2, 1, 3]).unwrap()
        };
        let q = proj(&mut g, x, "q");
        let q = split(&mut g, q);
        let k = proj(&mut g, x, "k");
        let k = split(&mut g, k);
        let v = proj(&mut g, x, "v");
        let v = split(&mut g, v);
        let a = g.attention(q, k, v, None, false, None).unwrap();
        let a = g.transpose(a, &[0, 2, 1, 3]).unwrap();
        let a = g.reshape(a, Shape::of(&[batch, seq, hidden])).unwrap();
        let o = proj(&mut g, a, "o");
        x = g.add(o, x).unwrap();
    }
    g.output("out", x);
    g
}

#[test]
fn the_encoder_runs_q_k_v_as_one_gemm_per_layer() {
    for dt in [DType::F16, DType::BF16, DType::F32] {
        let layers = 3;
        let program = lower_for_cuda(&encoder(layers, dt)).unwrap();
        let (merged, plain) = both(&program, &Target::h200());
        assert_eq!(
            plain.steps.len() - merged.steps.len(),
            2 * layers,
            "{dt}: two fewer steps per layer"
        );
        let g = gemms(&merged);
        let qkv: Vec<_> = g.iter().filter(|g| g.label.contains('+')).collect();
        assert_eq!(qkv.len(), layers, "{dt}: {:?}", g);
        for s in &qkv {
            assert_eq!(s.label.matches('+').count(), 2, "{}", s.label);
            assert_eq!((s.m, s.n, s.k), (2 * 16, 3 * 128, 128));
            assert!(matches!(s.b.arg, ArgRef::Derived(_)));
            assert!(matches!(s.bias, Some(ArgRef::Derived(_))));
            assert!(matches!(s.c.arg, ArgRef::Scratch(_)));
            assert!(s.residual.is_none());
        }
        // Weights [128, 384] and biases [1, 384], from the q, k, v params in that order.
        assert_eq!(merged.derived.len(), 2 * layers);
        assert_eq!(merged.derived[0].rows, 128);
        assert_eq!(merged.derived[0].cols(), 384);
        assert_eq!(merged.derived[1].rows, 1);
        let names: Vec<String> = merged.derived[0]
            .sources
            .iter()
            .map(|s| match &program.buffers[s.0].kind {
                rlx_ir::kernel::BufferKind::Param(n) => n.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names, ["l0.q.w", "l0.k.w", "l0.v.w"]);
        // Attention reads the merged result: the step after each merged GEMM takes its
        // scratch as an argument.
        for (i, s) in merged.steps.iter().enumerate() {
            if let Step::Gemm(g) = s {
                if g.label.contains('+') {
                    let next = &merged.steps[i + 1];
                    let reads = match next {
                        Step::Kernel(k) => k.args.contains(&g.c.arg),
                        Step::Gemm(a) => a.a.arg == g.c.arg || a.b.arg == g.c.arg,
                    };
                    assert!(reads, "{dt}: attention reads the merged result: {next:?}");
                }
            }
        }
        if dt != DType::F32 {
            let k: Vec<_> = merged.kernels().cloned().collect();
            if !compile_check(&format!("merged_encoder_{dt}"), &k) {
                return;
            }
        }
    }
}

#[test]
fn merge_cases_plan_one_gemm_on_every_attention_path() {
    let no_flash = Target {
        flash_attention: false,
        ..Target::h200()
    };
    for c in merge_cases() {
        for target in [Target::h200(), no_flash.clone()] {
            let program = lowered(&c);
            let (merged, plain) = both(&program, &target);
            assert_eq!(plain.steps.len() - merged.steps.len(), 2, "{}", c.name);
            let bias = c.name.contains("biastrue");
            let g = gemms(&merged);
            let m = g.iter().find(|g| g.label.contains('+')).expect("merged");
            assert_eq!(m.bias.is_some(), bias, "{}", c.name);
            assert_eq!(merged.derived.len(), if bias { 2 } else { 1 });
            let k: Vec<_> = merged.kernels().cloned().collect();
            if !compile_check(&c.name, &k) {
                return;
            }
        }
    }
}

#[test]
fn nothing_merges_past_a_failed_condition() {
    for c in merge_refused_cases() {
        let program = lowered(&c);
        let (merged, plain) = both(&program, &Target::h200());
        // The refused projection runs alone; the other two still merge.
        let refused = match c.name.as_str() {
            "merge_refused_second_reader" => 0,
            "merge_refused_different_a" | "merge_refused_residual" => 1,
            "merge_refused_computed_weight" => 2,
            other => panic!("unknown case {other}"),
        };
        let matmuls: Vec<String> = gemms(&plain).iter().map(|g| g.label.clone()).collect();
        assert_eq!(matmuls.len(), 3, "{}: {matmuls:?}", c.name);
        let labels: Vec<String> = gemms(&merged).iter().map(|g| g.label.clone()).collect();
        let mut others: Vec<&str> = matmuls
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != refused)
            .map(|(_, l)| l.as_str())
            .collect();
        others.sort_unstable();
        assert!(labels.contains(&matmuls[refused]), "{}: {labels:?}", c.name);
        let merged_label = labels.iter().find(|l| l.contains('+')).expect("a merge");
        let mut parts: Vec<&str> = merged_label.split('+').collect();
        parts.sort_unstable();
        assert_eq!(parts, others, "{}", c.name);
        assert_eq!(plain.steps.len() - merged.steps.len(), 1, "{}", c.name);
    }
    // Two separate A operands of the same shape never merge with each other.
    let (batch, seq, hidden) = (2, 8, 32);
    let mut g = Graph::new();
    let dt = DType::F16;
    let mut outs = Vec::new();
    for i in 0..2 {
        let x = g.input(&format!("x{i}"), dt, Shape::of(&[batch, seq, hidden]));
        let w = g.param(&format!("w{i}"), dt, Shape::of(&[hidden, hidden]));
        outs.push(g.matmul(x, w).unwrap());
    }
    let s = g.add(outs[0], outs[1]).unwrap();
    g.output("out", s);
    let program = lower_for_cuda(&g).unwrap();
    let (merged, plain) = both(&program, &Target::h200());
    assert_eq!(merged, plain);
    // Results read by something other than an attention view (an add) never merge.
    let mut g = Graph::new();
    let x = g.input("x", dt, Shape::of(&[batch, seq, hidden]));
    let mut outs = Vec::new();
    for i in 0..2 {
        let w = g.param(&format!("w{i}"), dt, Shape::of(&[hidden, hidden]));
        outs.push(g.matmul(x, w).unwrap());
    }
    let s = g.add(outs[0], outs[1]).unwrap();
    g.output("out", s);
    let program = lower_for_cuda(&g).unwrap();
    let (merged, plain) = both(&program, &Target::h200());
    assert_eq!(merged, plain);
}

#[test]
fn cuda_chooses_its_kernel_passes_by_its_settings() {
    use rlx_cuda::plan::kernel_decisions;
    let program = lower_for_cuda(&encoder(2, DType::F16)).unwrap();
    let mut target = Target::h200();
    let all = kernel_decisions(&program, &target, true);
    assert_eq!(all.siblings.len(), 2, "one q/k/v group per layer");
    assert!(all.views.elided.iter().any(|&e| e));
    // without merge_gemms, merge_siblings does not run; elide_views still does
    let unmerged = kernel_decisions(&program, &target, false);
    assert!(unmerged.siblings.is_empty());
    assert_eq!(unmerged.views, all.views);
    // without elide, neither: merge_siblings merges only results read through views
    target.tuning.elide = false;
    let none = kernel_decisions(&program, &target, true);
    assert!(none.views.elided.iter().all(|&e| !e));
    assert!(none.siblings.is_empty());
}

#[test]
fn cuda_offers_gemm_and_norm_only_for_the_pairs_of_the_gemm_norm_pass() {
    use rlx_cuda::plan::kernel_decisions;
    for c in support::cases::gemm_norm_cases() {
        let program = lowered(&c);
        let mut target = Target::h200();
        let d = kernel_decisions(&program, &target, true);
        assert_eq!(d.gemm_norms.len(), 1, "{}", c.name);
        let offered = plan_with(&program, &target, true).unwrap().choices.len();
        // without RLX_CUDA_GEMM_NORM the pass does not run, and nothing is offered for it
        target.tuning.gemm_norm = false;
        let d = kernel_decisions(&program, &target, true);
        assert!(d.gemm_norms.is_empty(), "{}", c.name);
        let without = plan_with(&program, &target, true).unwrap().choices.len();
        assert!(without < offered, "{}: {offered} and {without}", c.name);
    }
}
