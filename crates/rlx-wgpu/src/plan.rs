//! Planning: a [`KernelProgram`] becomes an ordered list of generated shaders plus the
//! scratch regions they need. Pure data, computed without a device, so tests can validate
//! every shader with naga on any machine.

use crate::codegen::library::{self, numel, LibCtx};
use crate::codegen::loops::{self, Epilogue};
use crate::codegen::{gemm, ArgRef, Emitted, Target};
use crate::WgpuError;
use rlx_ir::kernel::{BufferId, Kernel, KernelProgram, LibraryKernel, LoopKernel};
use rlx_ir::{Op, TensorType};

/// A program's shaders and scratch needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// shaders in execution order
    pub steps: Vec<Emitted>,
    /// bytes of each scratch region (`ArgRef::Scratch(i)`)
    pub scratch: Vec<usize>,
}

/// Plans every kernel; all kernels that cannot be lowered are reported together.
///
/// # Errors
/// [`WgpuError::Unsupported`] listing every kernel that cannot be lowered.
pub fn plan(program: &KernelProgram, target: &Target) -> Result<Plan, WgpuError> {
    let mut plan = Plan::default();
    let mut problems = Vec::new();
    for kernel in &program.kernels {
        let r = match kernel {
            Kernel::Loop(k) => plan_loop(k, target, &mut plan),
            Kernel::Library(k) => plan_library(program, k, target, &mut plan),
        };
        if let Err(e) = r {
            problems.push(format!("kernel `{}`: {e}", kernel.name()));
        }
    }
    if problems.is_empty() {
        Ok(plan)
    } else {
        Err(WgpuError::Unsupported(problems))
    }
}

fn plan_loop(k: &LoopKernel, target: &Target, plan: &mut Plan) -> Result<(), String> {
    if k.numel() == 0 {
        return Ok(());
    }
    let args: Vec<ArgRef> = k.inputs.iter().map(|i| ArgRef::Buffer(i.buffer)).collect();
    plan.steps
        .push(loops::emit(k, &args, ArgRef::Buffer(k.output), target)?);
    Ok(())
}

fn types<'a>(program: &'a KernelProgram, ids: &[BufferId]) -> Vec<&'a TensorType> {
    ids.iter().map(|&b| &program.buffers[b].ty).collect()
}

fn describe(program: &KernelProgram, k: &LibraryKernel) -> String {
    let ins: Vec<String> = types(program, &k.inputs)
        .iter()
        .map(|t| t.to_string())
        .collect();
    format!("{}({})", k.op.name(), ins.join(", "))
}

fn stat(t: &TensorType) -> Result<(rlx_ir::DType, Vec<usize>), String> {
    t.shape
        .as_static()
        .map(|s| (t.dtype, s))
        .ok_or_else(|| format!("symbolic shape {t}"))
}

fn plan_library(
    program: &KernelProgram,
    k: &LibraryKernel,
    target: &Target,
    plan: &mut Plan,
) -> Result<(), String> {
    let with = |e: String| format!("{}: {e}", describe(program, k));
    let inputs = types(program, &k.inputs)
        .into_iter()
        .map(stat)
        .collect::<Result<Vec<_>, _>>()
        .map_err(with)?;
    let result = match &k.epilogue {
        None => stat(&program.buffers[k.output].ty).map_err(with)?,
        Some(e) => {
            let d = e
                .inputs
                .first()
                .ok_or_else(|| with("an epilogue without inputs".into()))?
                .dtype;
            (d, e.shape.clone())
        }
    };
    if numel(&result.1) == 0 {
        return Ok(());
    }
    for (d, _) in inputs.iter().chain(std::iter::once(&result)) {
        if !crate::codegen::scalar::storable(*d) {
            return Err(with(format!("{d} is not supported by WGSL kernels")));
        }
    }
    let fused = k.epilogue.as_ref().and_then(Epilogue::fusable);
    let unfused = k.epilogue.is_some() && fused.is_none();
    let out = if unfused {
        plan.scratch
            .push(numel(&result.1) * result.0.size_bytes().max(1));
        ArgRef::Scratch(plan.scratch.len() - 1)
    } else {
        ArgRef::Buffer(k.output)
    };
    let ctx = LibCtx {
        kernel: k,
        inputs,
        result,
        epilogue: fused,
        out,
        target,
    };
    let emitted = match &k.op {
        Op::Softmax { axis } => library::softmax(&ctx, *axis, false),
        Op::LogSoftmax { axis } => library::softmax(&ctx, *axis, true),
        Op::LayerNorm { axis, eps } => library::norm(&ctx, *axis, *eps, true),
        Op::RmsNorm { axis, eps } => library::norm(&ctx, *axis, *eps, false),
        Op::Gather { axis } => library::gather(&ctx, *axis),
        Op::Concat { axis } => library::concat(&ctx, *axis),
        Op::Pad { pads, mode } => library::pad(&ctx, pads, *mode),
        Op::Pool2d(p) => library::pool2d(&ctx, p),
        Op::GlobalPool(kind) => library::global_pool(&ctx, *kind),
        Op::ArgReduce { op, axis, .. } => library::argreduce(&ctx, *op, *axis),
        Op::Attention { mask, scale } => library::attention(&ctx, *mask, *scale),
        Op::MatMul => gemm::matmul(&ctx),
        Op::Conv2d(p) => library::conv2d(&ctx, p),
        other => Err(format!(
            "the wgpu backend has no kernel for `{}`",
            other.name()
        )),
    }
    .map_err(with)?;
    plan.steps.push(emitted);
    if let (true, Some(e)) = (unfused, &k.epilogue) {
        let mut args: Vec<ArgRef> = e.inputs.iter().map(|i| ArgRef::Buffer(i.buffer)).collect();
        args[0] = out;
        plan.steps
            .push(loops::emit(e, &args, ArgRef::Buffer(k.output), target).map_err(with)?);
    }
    Ok(())
}
