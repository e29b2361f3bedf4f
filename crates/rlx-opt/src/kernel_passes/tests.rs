//! The kernel-IR passes on a small encoder layer: what each decides, what a backend that
//! does not choose it gets, and that the pipeline stops at a named pass.

use super::elide_views::Views;
use super::merge_siblings::GemmEpilogues;
use super::*;
use rlx_ir::kernel::{Expr, Kernel};
use rlx_ir::{BinaryOp, DType, Graph, NodeId, Shape};

/// An f32 GEMM that fuses `x + bias` (either order) when `fuses_bias`, and nothing else.
struct BiasGemm {
    fuses_bias: bool,
}

impl GemmEpilogues for BiasGemm {
    type Activation = ();

    fn gemm_dtype(&self, dtype: DType) -> bool {
        dtype == DType::F32
    }

    fn fused(&self, e: &LoopKernel, _: DType, _: usize) -> Option<(Option<BufferId>, ())> {
        if !self.fuses_bias || e.inputs.len() != 2 || e.reduce.is_some() {
            return None;
        }
        let sum = matches!(e.body[e.result].expr,
            Expr::Binary(BinaryOp::Add, a, b)
                if matches!((&e.body[a].expr, &e.body[b].expr),
                    (Expr::Load(0), Expr::Load(1)) | (Expr::Load(1), Expr::Load(0))));
        sum.then_some((Some(e.inputs[1].buffer), ()))
    }
}

/// One encoder layer: q, k, v projections with bias of `x`, head splits, attention, and the
/// merge of the heads back, in f32.
fn encoder() -> Graph {
    let (batch, seq, heads, dim) = (2, 4, 2, 4);
    let hidden = heads * dim;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[batch, seq, hidden]));
    let proj = |g: &mut Graph, name: &str| -> NodeId {
        let w = g.param(
            &format!("{name}.w"),
            DType::F32,
            Shape::of(&[hidden, hidden]),
        );
        let b = g.param(&format!("{name}.b"), DType::F32, Shape::of(&[hidden]));
        let y = g.matmul(x, w).unwrap();
        let y = g.add(y, b).unwrap();
        let y = g.reshape(y, Shape::of(&[batch, seq, heads, dim])).unwrap();
        g.transpose(y, &[0, 2, 1, 3]).unwrap()
    };
    let q = proj(&mut g, "q");
    let k = proj(&mut g, "k");
    let v = proj(&mut g, "v");
    let a = g.attention(q, k, v, None, false, None).unwrap();
    let a = g.transpose(a, &[0, 2, 1, 3]).unwrap();
    let a = g.reshape(a, Shape::of(&[batch, seq, hidden])).unwrap();
    g.output("out", a);
    g
}

fn lowered() -> KernelProgram {
    crate::lower(&encoder()).unwrap()
}

fn every(_: usize) -> bool {
    true
}

fn all_caps() -> KernelCaps<'static, BiasGemm> {
    KernelCaps {
        attention_views: Some(&every),
        sibling_gemms: Some(&BiasGemm { fuses_bias: true }),
        gemm_norm: true,
    }
}

fn elided(views: &Views<()>) -> usize {
    views.elided.iter().filter(|&&e| e).count()
}

#[test]
fn elide_views_drops_the_head_split_copies_around_attention() {
    let p = lowered();
    let d: KernelDecisions<(), ()> =
        run_kernel_passes_until(&p, &all_caps(), "elide_views").unwrap();
    // three input splits and the output merge
    assert_eq!(elided(&d.views), 4, "{}", d.dump(&p));
    let attention = p
        .kernels
        .iter()
        .position(
            |k| matches!(k, Kernel::Library(l) if matches!(l.op, rlx_ir::Op::Attention { .. })),
        )
        .unwrap();
    let v = &d.views.attention[&attention];
    assert!(v.inputs.iter().all(Option::is_some) && v.output.is_some());
    assert!(
        d.siblings.is_empty(),
        "the pipeline stopped before merge_siblings"
    );
}

#[test]
fn merge_siblings_groups_q_k_v() {
    let p = lowered();
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &all_caps());
    assert_eq!(d.siblings.len(), 1, "{}", d.dump(&p));
    let g = &d.siblings[0];
    assert_eq!(g.members.len(), 3);
    assert_eq!((g.m, g.k, g.n()), (8, 8, 24));
    assert!(g
        .members
        .iter()
        .all(|m| m.bias.is_some() && m.views.len() == 1));
    let text = d.dump(&p);
    assert_eq!(text.lines().filter(|l| l.starts_with("elide ")).count(), 4);
    assert!(
        text.lines()
            .any(|l| l.starts_with("merge ") && l.contains("(n 24, ())")),
        "{text}"
    );
}

#[test]
fn a_backend_that_does_not_choose_a_pass_does_not_get_it() {
    let p = lowered();
    // no elide_views: nothing elided, and merge_siblings finds no result read through views
    let caps = KernelCaps {
        attention_views: None,
        sibling_gemms: Some(&BiasGemm { fuses_bias: true }),
        gemm_norm: false,
    };
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &caps);
    assert_eq!(elided(&d.views), 0);
    assert_eq!(d.views.elided.len(), p.kernels.len());
    assert!(d.siblings.is_empty());
    // elide_views only (the CPU's choice)
    let caps = KernelCaps::<NoGemms> {
        attention_views: Some(&every),
        sibling_gemms: None,
        gemm_norm: false,
    };
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &caps);
    assert_eq!(elided(&d.views), 4);
    assert!(d.siblings.is_empty());
    assert!(d.dump(&p).lines().all(|l| l.starts_with("elide ")));
}

#[test]
fn siblings_the_backend_gemm_cannot_fuse_stay_apart() {
    let p = lowered();
    let caps = KernelCaps {
        attention_views: Some(&every),
        sibling_gemms: Some(&BiasGemm { fuses_bias: false }),
        gemm_norm: false,
    };
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &caps);
    assert!(d.siblings.is_empty());
}

#[test]
fn an_unknown_pass_names_the_known_ones() {
    let p = lowered();
    let e = run_kernel_passes_until::<(), _>(&p, &all_caps(), "fuse_everything").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown pass `fuse_everything`; known passes: elide_views, merge_siblings, gemm_norm"
    );
}

/// `layer_norm(x @ w)`, the product's result also an output when `shared`.
fn gemm_then_norm(shared: bool) -> KernelProgram {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape::of(&[4, 8]));
    let w = g.param("w", DType::F32, Shape::of(&[8, 16]));
    let m = g.matmul(x, w).unwrap();
    let scale = g.param("scale", DType::F32, Shape::of(&[16]));
    let bias = g.param("bias", DType::F32, Shape::of(&[16]));
    let y = g.layer_norm(m, scale, bias, 1e-5).unwrap();
    g.output("y", y);
    if shared {
        g.output("m", m);
    }
    crate::lower(&g).unwrap()
}

#[test]
fn gemm_norm_pairs_a_gemm_with_the_norm_that_alone_reads_it() {
    let p = gemm_then_norm(false);
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &all_caps());
    assert_eq!(d.gemm_norms.len(), 1, "{p}");
    let pair = d.gemm_norms[0];
    assert!(pair.gemm < pair.norm);
    assert!(
        d.dump(&p).lines().any(|l| l.starts_with("norm ")),
        "{}",
        d.dump(&p)
    );
    // stopped before it, or not chosen: no pair
    let d: KernelDecisions<(), ()> =
        run_kernel_passes_until(&p, &all_caps(), "merge_siblings").unwrap();
    assert!(d.gemm_norms.is_empty());
    let caps = KernelCaps::<NoGemms> {
        attention_views: None,
        sibling_gemms: None,
        gemm_norm: false,
    };
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &caps);
    assert!(d.gemm_norms.is_empty());
    // the product is also an output: the fused kernel would not write it
    let p = gemm_then_norm(true);
    let d: KernelDecisions<(), ()> = run_kernel_passes(&p, &all_caps());
    assert!(d.gemm_norms.is_empty(), "{p}");
}
