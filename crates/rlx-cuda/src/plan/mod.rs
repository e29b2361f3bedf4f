//! Planning: a [`KernelProgram`] becomes an ordered list of [`Step`]s (generated kernels and
//! GEMMs) plus the scratch regions they need. Pure data, computed without a GPU, so tests
//! can check and NVRTC-compile every step of a program on any machine.

use crate::codegen::attention::Layouts;
use crate::codegen::store::{numel, LibCtx};
use crate::codegen::{self, loops, ArgRef, EmittedKernel, Target};
use crate::gemm::{match_gemm_epilogue, Activation, GemmSpec, Operand};
use crate::plan::views::AttentionViews;
use crate::CudaError;
use rlx_ir::kernel::{BufferId, Kernel, KernelProgram, LibraryKernel, LoopKernel};
use rlx_ir::{AttnMask, Op, TensorType};
use rlx_opt::kernel_passes::gemm_norm::GemmNorm;

pub mod arena;
mod gemm;
pub mod merge;
mod norm;
pub mod views;

/// One thing a run does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// launch a generated kernel
    Kernel(EmittedKernel),
    /// run a cuBLASLt GEMM
    Gemm(GemmSpec),
}

/// A program's steps and scratch needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// steps in execution order
    pub steps: Vec<Step>,
    /// bytes of each scratch region (`ArgRef::Scratch(i)`)
    pub scratch: Vec<usize>,
    /// buffers built from params or constants (`ArgRef::Derived(i)`): merged GEMM weights
    pub derived: Vec<crate::plan::merge::Derived>,
    /// fused kernels that may replace a run of steps, chosen by timing; two choices' step
    /// ranges are disjoint or one holds the other (decided in order, so the outer one is
    /// timed against whatever the inner one decided)
    pub choices: Vec<Choice>,
}

/// A measured alternative: one kernel that does what the steps `first..=last` do together
/// (a tensor-core GEMM storing through the epilogue kernel's work, or through a row norm,
/// or also applying the producer's epilogue to its A operand), emitted in several tilings.
/// Which runs (the steps, or one of the tilings) is decided at compile by timing them on the
/// device; without timing the steps run.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// index of the first step the fused kernel replaces (where it runs)
    pub first: usize,
    /// index of the last step it replaces
    pub last: usize,
    /// the fused kernel in each tiling (same arguments)
    pub fused: Vec<EmittedKernel>,
}

impl Choice {
    /// The steps the fused kernel replaces.
    pub fn steps(&self) -> std::ops::RangeInclusive<usize> {
        self.first..=self.last
    }
}

impl Plan {
    /// The generated kernels, in order.
    pub fn kernels(&self) -> impl Iterator<Item = &EmittedKernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Kernel(k) => Some(k),
            Step::Gemm(_) => None,
        })
    }

    /// Every generated kernel: the steps' and the fused alternatives of [`Plan::choices`]
    /// (all of them go into the program's module).
    pub fn all_kernels(&self) -> impl Iterator<Item = &EmittedKernel> {
        self.kernels()
            .chain(self.choices.iter().flat_map(|c| c.fused.iter()))
    }

    /// The buffers and scratches each step touches. A fused alternative counts at its first
    /// step, so whatever it reads or writes is live there whichever way the steps run.
    pub fn touches(&self) -> Vec<Vec<ArgRef>> {
        let mut touches: Vec<Vec<ArgRef>> = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Kernel(k) => k.args.clone(),
                Step::Gemm(g) => {
                    let mut v = vec![g.a.arg, g.b.arg, g.c.arg];
                    v.extend(g.bias);
                    v.extend(g.residual);
                    v
                }
            })
            .collect();
        for c in &self.choices {
            for k in &c.fused {
                touches[c.first].extend(k.args.iter().copied());
            }
        }
        touches
    }
}

pub use rlx_ir::kernel_views::root;

/// Plans every kernel; all kernels that cannot be lowered are reported together.
///
/// # Errors
/// [`CudaError::Unsupported`] listing every kernel that cannot be lowered, with op, dtypes
/// and shapes.
pub fn plan(program: &KernelProgram, target: &Target) -> Result<Plan, CudaError> {
    plan_with(program, target, true)
}

/// The kernel-IR passes CUDA chooses ([`rlx_opt::KERNEL_PASSES`]): `elide_views` for every
/// attention kernel unless [`crate::settings::Tuning::elide`] is off, `merge_siblings`
/// over cuBLASLt's GEMM when `merge` is on, and `gemm_norm` unless
/// [`crate::settings::Tuning::gemm_norm`] or [`crate::settings::Tuning::wgmma`] is off (its
/// pairs are offered on `sm_90a` only, see `plan::norm::offer`).
pub fn kernel_decisions(
    program: &KernelProgram,
    target: &Target,
    merge: bool,
) -> rlx_opt::KernelDecisions<ArgRef, crate::gemm::Activation> {
    let last = rlx_opt::KERNEL_PASSES[rlx_opt::KERNEL_PASSES.len() - 1];
    kernel_decisions_until(program, &target.tuning, merge, last).expect("the last pass is known")
}

/// [`kernel_decisions`] up to and including the pass `last`. Needs only the planner's
/// switches, no device, so `rlx dump --after` shows CUDA's decisions on any machine.
///
/// # Errors
/// `last` is not one of [`rlx_opt::KERNEL_PASSES`].
pub fn kernel_decisions_until(
    program: &KernelProgram,
    tuning: &crate::settings::Tuning,
    merge: bool,
    last: &str,
) -> Result<rlx_opt::KernelDecisions<ArgRef, crate::gemm::Activation>, rlx_opt::OptError> {
    let every = |_: usize| true;
    let caps = rlx_opt::KernelCaps {
        attention_views: tuning.elide.then_some(&every as &dyn Fn(usize) -> bool),
        sibling_gemms: merge.then_some(&crate::plan::merge::CudaGemm),
        gemm_norm: tuning.gemm_norm && tuning.wgmma,
    };
    rlx_opt::run_kernel_passes_until(program, &caps, last)
}

/// [`plan`] with sibling GEMMs merged (the `merge_siblings` kernel pass, see
/// [`crate::plan::merge`]; [`crate::CudaOptions::merge_gemms`]) or not.
///
/// # Errors
/// As [`plan`].
pub fn plan_with(program: &KernelProgram, target: &Target, merge: bool) -> Result<Plan, CudaError> {
    let mut plan = Plan::default();
    let mut problems = Vec::new();
    let decisions = kernel_decisions(program, target, merge);
    let gemm_norms = decisions.gemm_norms;
    let mut views = decisions.views;
    let merges = crate::plan::merge::Merges::new(decisions.siblings);
    let mut merged = crate::plan::merge::prepare(program, &merges, &mut views, &mut plan)
        .into_iter()
        .map(Some)
        .collect::<Vec<_>>();
    // the kernel that planned exactly the last step, and that step's index
    let mut last: Option<(usize, usize)> = None;
    // the steps each kernel planned (start, end)
    let mut spans = vec![(0, 0); program.kernels.len()];
    for (i, kernel) in program.kernels.iter().enumerate() {
        if views.elided[i] {
            continue;
        }
        let before = plan.steps.len();
        if let Some(first) = merges.at(i) {
            // A merged GEMM runs where its first member did; later members run in it.
            if let Some(step) = first.and_then(|g| merged[g].take()) {
                plan.steps.push(step);
            }
            last = None;
            continue;
        }
        let r = match kernel {
            Kernel::Loop(k) => plan_loop(program, k, target, &mut plan),
            Kernel::Library(k) => {
                plan_library(program, k, views.attention.get(&i), target, &mut plan)
            }
        };
        spans[i] = (before, plan.steps.len());
        match r {
            Err(e) => problems.push(format!("kernel `{}`: {e}", kernel.name())),
            Ok(()) if plan.steps.len() == before + 1 => {
                let pair = last
                    .filter(|&(_, s)| s + 1 == before)
                    .map(|(j, _)| GemmNorm { gemm: j, norm: i })
                    .filter(|p| gemm_norms.contains(p));
                if let Some(p) = pair {
                    crate::plan::norm::offer(program, (p.gemm, p.norm), &spans, target, &mut plan);
                }
            }
            Ok(()) => {}
        }
        last = (plan.steps.len() == before + 1).then_some((i, before));
    }
    if problems.is_empty() {
        Ok(plan)
    } else {
        Err(CudaError::Unsupported(problems))
    }
}

fn plan_loop(
    program: &KernelProgram,
    k: &LoopKernel,
    target: &Target,
    plan: &mut Plan,
) -> Result<(), String> {
    if k.numel() == 0 {
        return Ok(());
    }
    let out = root(program, k.output);
    let restrict = !k.inputs.iter().any(|i| root(program, i.buffer) == out);
    let reads: Vec<ArgRef> = k.inputs.iter().map(|i| ArgRef::Buffer(i.buffer)).collect();
    let back = fresh_stream(program, plan, &reads).is_some_and(|b| walks_back(target, b));
    plan.steps
        .push(Step::Kernel(loops::emit(k, target, restrict, back)?));
    Ok(())
}

/// Whether a streaming kernel should walk back to front over what the step just before it
/// wrote front to back, `written` bytes ([`Target::walk_back_above`]): when that is more than
/// about half the L2, only its end is still there, and a forward walk would evict that end
/// before reaching it. Walking back, the kernel reads that end from L2 and writes its own
/// output's start last, which the next step (a GEMM reading front to back) then finds in L2.
pub(crate) fn walks_back(target: &Target, written: usize) -> bool {
    target.walk_back_above.is_some_and(|t| written > t)
}

/// The bytes of the argument among `reads` that the plan's last step wrote front to back
/// (a cuBLASLt GEMM, or a kernel that did not walk back), if any.
fn fresh_stream(program: &KernelProgram, plan: &Plan, reads: &[ArgRef]) -> Option<usize> {
    let written = match plan.steps.last()? {
        Step::Gemm(g) => g.c.arg,
        Step::Kernel(k) if !k.walks_back => *k.args.last()?,
        Step::Kernel(_) => return None,
    };
    let same = |a: &ArgRef| match (a, written) {
        (ArgRef::Buffer(a), ArgRef::Buffer(w)) => root(program, *a) == root(program, w),
        (a, w) => *a == w,
    };
    reads.iter().any(same).then_some(())?;
    match written {
        ArgRef::Buffer(w) => {
            let ty = &program.buffers[root(program, w)].ty;
            Some(ty.shape.numel()? * ty.dtype.size_bytes())
        }
        ArgRef::Scratch(i) => plan.scratch.get(i).copied(),
        _ => None,
    }
}

pub(crate) fn types<'a>(program: &'a KernelProgram, ids: &[BufferId]) -> Vec<&'a TensorType> {
    ids.iter().map(|&b| &program.buffers[b].ty).collect()
}

/// Describes a library kernel's operands for messages: `matmul(f32[2, 3], f32[3, 4])`.
fn describe(program: &KernelProgram, k: &LibraryKernel) -> String {
    let ins: Vec<String> = types(program, &k.inputs)
        .iter()
        .map(|t| t.to_string())
        .collect();
    format!("{}({})", k.op.name(), ins.join(", "))
}

fn plan_library(
    program: &KernelProgram,
    k: &LibraryKernel,
    views: Option<&AttentionViews>,
    target: &Target,
    plan: &mut Plan,
) -> Result<(), String> {
    let ins = types(program, &k.inputs);
    let result = library_result(program, k)?;
    let ctx = LibCtx::new(k, &ins, &result, target)?;
    if numel(&ctx.result.1) == 0 {
        return Ok(());
    }
    let with = |e: String| format!("{}: {e}", describe(program, k));
    let templated = !matches!(k.op, Op::MatMul | Op::Conv2d(_));
    if templated && ctx.unfused_epilogue() {
        return Err(with(
            "its epilogue does not read the result contiguously".into(),
        ));
    }
    let kernel = match &k.op {
        Op::Softmax { axis } => codegen::softmax::emit(&ctx, *axis, false),
        Op::LogSoftmax { axis } => codegen::softmax::emit(&ctx, *axis, true),
        Op::LayerNorm { axis, eps } => codegen::norm::emit(&ctx, *axis, *eps, true),
        Op::RmsNorm { axis, eps } => codegen::norm::emit(&ctx, *axis, *eps, false),
        Op::Gather { axis } => codegen::gather::emit(&ctx, *axis),
        Op::Concat { axis } => codegen::movement::concat(&ctx, *axis),
        Op::Pad { pads, mode } => codegen::movement::pad(&ctx, pads, *mode),
        Op::Pool2d(p) => codegen::pool::pool2d(&ctx, p),
        Op::GlobalPool(kind) => codegen::pool::global(&ctx, *kind),
        Op::ArgReduce { op, axis, .. } => codegen::argreduce::emit(&ctx, *op, *axis),
        Op::Attention { mask, scale } => {
            return plan_attention(program, k, &ctx, *mask, *scale, views, plan).map_err(with);
        }
        Op::MatMul => return crate::plan::gemm::matmul(program, k, &ctx, plan).map_err(with),
        Op::Conv2d(p) => return crate::plan::gemm::conv2d(k, &ctx, p, plan).map_err(with),
        Op::QuantMatMul { .. } => Err("no quantized matmul kernel (caps do not claim it)".into()),
        Op::MatMulInteger(_) => Err("no integer matmul kernel (caps do not claim it)".into()),
        Op::ConvInteger(_) => Err("no integer convolution kernel (caps do not claim it)".into()),
        Op::BitCast(_) => Err("no bitcast kernel (caps do not claim it)".into()),
        Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant(_)
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast(_)
        | Op::Reduce { .. }
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Expand(_) => {
            Err("lowering emits this op as a loop kernel, not a library kernel".into())
        }
    };
    plan.steps.push(Step::Kernel(kernel.map_err(with)?));
    Ok(())
}

/// Plans attention through the layouts of its views: the tensor-core flash kernel where it
/// applies (f16/bf16 on sm_80+, unless `RLX_CUDA_FLASH=0` or `RLX_CUDA_ATTN_GEMM=1`), else
/// the GEMM form for large half-precision problems, else the CUDA-core fused kernel. Steps
/// that replace copies say so in their labels, which profiles print.
fn plan_attention(
    program: &KernelProgram,
    k: &LibraryKernel,
    ctx: &LibCtx,
    mask: AttnMask,
    scale: Option<f64>,
    views: Option<&AttentionViews>,
    plan: &mut Plan,
) -> Result<(), String> {
    let layouts = views.map_or_else(
        || Layouts::packed(ctx),
        |v| crate::plan::views::layouts(v, ctx),
    );
    let first = plan.steps.len();
    let gemm_forced = ctx.target.tuning.attn_gemm == Some(true);
    if !gemm_forced && codegen::attention::flash_applies(ctx, &layouts) {
        let reads = [layouts.q.arg, layouts.k.arg, layouts.v.arg];
        let back = fresh_stream(program, plan, &reads).is_some_and(|b| walks_back(ctx.target, b));
        let kernel = codegen::attention::flash_mma(ctx, mask, scale, &layouts, back)?;
        plan.steps.push(Step::Kernel(kernel));
    } else if !crate::plan::gemm::attention(k, ctx, mask, scale, &layouts, plan)? {
        let kernel = codegen::attention::emit(ctx, mask, scale, &layouts)?;
        plan.steps.push(Step::Kernel(kernel));
    }
    if let Some(v) = views.filter(|v| !v.replaces.is_empty()) {
        let note = format!(" [in place of {}]", v.replaces.join(", "));
        for step in &mut plan.steps[first..] {
            match step {
                Step::Kernel(e) => e.label += &note,
                Step::Gemm(g) => g.label += &note,
            }
        }
    }
    Ok(())
}

/// The op's own result type: the output buffer's type, or with an epilogue, the epilogue's
/// input 0 dtype over the result shape.
pub(crate) fn library_result(
    program: &KernelProgram,
    k: &LibraryKernel,
) -> Result<TensorType, String> {
    let out = &program.buffers[k.output].ty;
    Ok(match &k.epilogue {
        None => out.clone(),
        Some(e) => {
            let d = e.inputs.first().ok_or("an epilogue without inputs")?.dtype;
            TensorType::new(d, rlx_ir::Shape::of(&e.shape))
        }
    })
}

/// Adds a scratch region and returns its reference.
pub fn scratch(plan: &mut Plan, bytes: usize) -> ArgRef {
    plan.scratch.push(bytes);
    ArgRef::Scratch(plan.scratch.len() - 1)
}

/// The epilogue of a GEMM when cuBLASLt fuses it: bias, residual and activation.
pub fn fused_epilogue(
    k: &LibraryKernel,
    ctx: &LibCtx,
    n: usize,
) -> Option<(Option<ArgRef>, Option<ArgRef>, Activation)> {
    let e = k.epilogue.as_ref()?;
    match_gemm_epilogue(e, ctx.result.0, n).map(|f| {
        (
            f.bias.map(ArgRef::Buffer),
            f.residual.map(ArgRef::Buffer),
            f.activation,
        )
    })
}

/// Constructs an operand with packed rows and no outer batch level.
pub fn operand(arg: ArgRef, offset: usize, batch_stride: usize) -> Operand {
    Operand {
        arg,
        offset,
        batch_stride,
        outer_stride: 0,
        row_stride: None,
    }
}
