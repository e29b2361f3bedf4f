//! Planning of a GEMM and the layer norm (or RMS norm) of its result as one kernel
//! ([`crate::codegen::gemm_norm`]): offered as a [`Choice`] against the two planned steps
//! for the pairs `rlx-opt`'s `gemm_norm` pass decided (the norm reads the GEMM's result as
//! its x alone, and nothing else reads that result) when they run as consecutive steps,
//! row by row. Timing at compile decides, as for the other fused GEMMs.

use crate::codegen::gemm_mma::MmaGemm;
use crate::codegen::gemm_norm::{self, RowNorm};
use crate::codegen::store::{numel, LibCtx};
use crate::codegen::{gemm_wgmma, ArgRef, EpilogueCtx, Target};
use crate::plan::{library_result, root, types, Choice, Plan, Step};
use rlx_ir::kernel::{Kernel, KernelProgram};
use rlx_ir::Op;
use rlx_opt::kernel_passes::gemm_norm::sole_reader;

/// Offers the GEMM + norm kernel for a pair of the `gemm_norm` pass: kernel `norm_at`
/// (planned as the last step) reading the result of kernel `gemm_at` (planned as the one
/// step before it). Nothing is offered unless `gemm_at` is a matmul run as one plain GEMM
/// (no batch, no strides, its epilogue fused into cuBLASLt or absent), `norm_at` a layer or
/// RMS norm over exactly the GEMM's rows, and the target has `wgmma`.
/// With [`Target::a_prologue`], a second choice also takes in the epilogue step of the GEMM
/// that produced A (see [`producer_map`]). `spans` holds the steps each kernel planned.
pub fn offer(
    program: &KernelProgram,
    (gemm_at, norm_at): (usize, usize),
    spans: &[(usize, usize)],
    target: &Target,
    plan: &mut Plan,
) {
    if target.arch != gemm_wgmma::ARCH {
        return;
    }
    let (Kernel::Library(gk), Kernel::Library(nk)) =
        (&program.kernels[gemm_at], &program.kernels[norm_at])
    else {
        return;
    };
    let (axis, eps, layer) = match nk.op {
        Op::LayerNorm { axis, eps } => (axis, eps, true),
        Op::RmsNorm { axis, eps } => (axis, eps, false),
        _ => return,
    };
    let steps = plan.steps.len();
    if gk.op != Op::MatMul || steps < 2 || !matches!(plan.steps[steps - 1], Step::Kernel(_)) {
        return;
    }
    let Step::Gemm(spec) = &plan.steps[steps - 2] else {
        return;
    };
    let plain = |o: &crate::gemm::Operand, b| {
        o.arg == ArgRef::Buffer(b) && o.offset == 0 && o.row_stride.is_none()
    };
    let result = root(program, gk.output);
    if spec.batch != 1
        || spec.outer != 1
        || spec.trans_b
        || spec.alpha != 1.0
        || !plain(&spec.a, gk.inputs[0])
        || !plain(&spec.b, gk.inputs[1])
        || !plain(&spec.c, gk.output)
        || root(program, nk.inputs[0]) != result
    {
        return;
    }
    let (g_ins, n_ins) = (types(program, &gk.inputs), types(program, &nk.inputs));
    let (Ok(g_res), Ok(n_res)) = (library_result(program, gk), library_result(program, nk)) else {
        return;
    };
    let (Ok(gctx), Ok(nctx)) = (
        LibCtx::new(gk, &g_ins, &g_res, target),
        LibCtx::new(nk, &n_ins, &n_res, target),
    ) else {
        return;
    };
    if gctx.unfused_epilogue()
        || nctx.unfused_epilogue()
        || numel(&nctx.inputs[0].1[axis.min(nctx.inputs[0].1.len())..]) != spec.n
    {
        return;
    }
    let g = MmaGemm {
        m: spec.m,
        n: spec.n,
        k: spec.k,
        a: (spec.a.arg, 0, spec.k),
        b: (spec.b.arg, 0, spec.n),
    };
    let norm = |ctx| RowNorm { ctx, eps, layer };
    let emit_all = |map: Option<&EpilogueCtx>| -> Vec<_> {
        gemm_norm::tiles(spec.n)
            .iter()
            .filter(|t| gemm_norm::applies(&gctx, &norm(nctx.clone()), &g, t))
            .filter_map(|t| gemm_norm::emit(&gctx, norm(nctx.clone()), &g, t, map).ok())
            .collect()
    };
    let fused = emit_all(None);
    if !fused.is_empty() {
        plan.choices.push(Choice {
            first: steps - 2,
            last: steps - 1,
            fused,
        });
    }
    if let Some(map) = producer_map(program, (gk.inputs[0], gemm_at), spans, target, plan) {
        let fused = emit_all(Some(&map));
        if !fused.is_empty() {
            plan.choices.push(Choice {
                first: steps - 3,
                last: steps - 1,
                fused,
            });
        }
    }
}

/// The epilogue a GEMM may apply to its A operand `a` in place of the epilogue step of the
/// GEMM that produced it ([`Target::a_prologue`]), when the plan's last three steps are that
/// epilogue step, the GEMM reading `a` (kernel `reader`) and one more: `a` is the result of
/// a matmul planned as a cuBLASLt GEMM plus its elementwise epilogue run in place over the
/// result (same dtype), that epilogue reads nothing else of `a`, `reader` is the only kernel
/// that reads `a`, `a` is no output, and no other choice takes in that epilogue step. The
/// fused kernel then reads the GEMM's raw result and the epilogue step does not run.
fn producer_map<'a>(
    program: &'a KernelProgram,
    (a, reader): (usize, usize),
    spans: &[(usize, usize)],
    target: &Target,
    plan: &Plan,
) -> Option<EpilogueCtx<'a>> {
    let steps = plan.steps.len();
    if !target.a_prologue || steps < 4 {
        return None;
    }
    let x = root(program, a);
    let producer = program
        .kernels
        .iter()
        .position(|k| root(program, k.output()) == x)?;
    let Kernel::Library(pk) = &program.kernels[producer] else {
        return None;
    };
    let epi = pk.epilogue.as_ref()?;
    let map = EpilogueCtx::fusable(epi)?;
    let out = ArgRef::Buffer(pk.output);
    let in_place = |k: &crate::codegen::EmittedKernel| {
        k.args.first() == Some(&out) && k.args.last() == Some(&out)
    };
    let planned = spans[producer] == (steps - 4, steps - 2)
        && matches!(&plan.steps[steps - 4], Step::Gemm(s) if s.c.arg == out)
        && matches!(&plan.steps[steps - 3], Step::Kernel(k) if in_place(k));
    let ok = pk.op == Op::MatMul
        && planned
        && map.input_dtype() == map.out_dtype()
        && epi.inputs[1..].iter().all(|i| root(program, i.buffer) != x)
        && sole_reader(program, x, reader)
        && !plan
            .choices
            .iter()
            .any(|c| c.steps().contains(&(steps - 3)));
    ok.then_some(map)
}
