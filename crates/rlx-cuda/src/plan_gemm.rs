//! Planning of the GEMM-based library kernels: matmul (batched, broadcast batch dims folded
//! into rows when the right operand is shared) and convolution (im2col + one GEMM per
//! group). Epilogues fuse into cuBLASLt when they are `act(x + bias)`, else run as a
//! generated kernel, in place when the dtype allows.

use crate::codegen::store::{numel, LibCtx};
use crate::codegen::{conv, index::contiguous, loops, ArgRef};
use crate::gemm::{Activation, GemmSpec};
use crate::plan::{fused_bias, operand, root, scratch, Plan, Step};
use rlx_ir::kernel::{KernelProgram, LibraryKernel};
use rlx_ir::Conv2dParams;

/// Element offsets of each batch of an operand with batch dims `bd` (aligned right to the
/// output batch dims `ob`) and `mat` elements per matrix.
fn batch_offsets(bd: &[usize], ob: &[usize], mat: usize) -> Vec<usize> {
    let own = contiguous(bd);
    let lead = ob.len() - bd.len();
    let strides: Vec<usize> = (0..ob.len())
        .map(|d| {
            if d < lead || bd[d - lead] == 1 {
                0
            } else {
                own[d - lead] as usize * mat
            }
        })
        .collect();
    let total = numel(ob);
    (0..total)
        .map(|mut b| {
            let mut off = 0;
            for d in (0..ob.len()).rev() {
                off += (b % ob[d]) * strides[d];
                b /= ob[d];
            }
            off
        })
        .collect()
}

/// The stride when `offsets[b] == b * stride` for all b.
fn affine(offsets: &[usize]) -> Option<usize> {
    let s = offsets.get(1).copied().unwrap_or(0);
    offsets
        .iter()
        .enumerate()
        .all(|(b, &o)| o == b * s)
        .then_some(s)
}

/// Plans a matmul.
///
/// # Errors
/// An unsupported dtype or an epilogue no rule accepts.
pub fn matmul(
    program: &KernelProgram,
    k: &LibraryKernel,
    ctx: &LibCtx,
    plan: &mut Plan,
) -> Result<(), String> {
    let (dtype, a) = &ctx.inputs[0];
    let (_, b) = &ctx.inputs[1];
    if !crate::caps::gemm_dtype(*dtype) {
        return Err(format!("no cuBLASLt GEMM for {dtype}"));
    }
    let (ra, rb) = (a.len(), b.len());
    let (m, kk, n) = (a[ra - 2], a[ra - 1], b[rb - 1]);
    let out = &ctx.result.1;
    let ob = &out[..out.len() - 2];
    let (target, epilogue) = gemm_target(program, k, ctx, n, plan)?;
    let bias = fused_bias(k, ctx, n);
    let (bias_arg, activation) = bias.map_or((None, Activation::None), |(b, a)| (Some(b), a));
    let spec =
        |m: usize, batch: usize, ao: (usize, usize), bo: (usize, usize), co: (usize, usize)| {
            GemmSpec {
                label: k.name.clone(),
                dtype: *dtype,
                m,
                n,
                k: kk,
                batch,
                a: operand(ArgRef::Buffer(k.inputs[0]), ao.0, ao.1),
                b: operand(ArgRef::Buffer(k.inputs[1]), bo.0, bo.1),
                c: operand(target, co.0, co.1),
                bias: bias_arg,
                activation,
            }
        };
    let a_off = batch_offsets(&a[..ra - 2], ob, m * kk);
    let b_off = batch_offsets(&b[..rb - 2], ob, kk * n);
    let batch = numel(ob);
    if numel(&b[..rb - 2]) == 1 && affine(&a_off) == Some(m * kk) {
        // A shared right operand: all batches are one tall GEMM.
        plan.steps
            .push(Step::Gemm(spec(m * batch, 1, (0, 0), (0, 0), (0, 0))));
    } else if let (Some(sa), Some(sb)) = (affine(&a_off), affine(&b_off)) {
        plan.steps
            .push(Step::Gemm(spec(m, batch, (0, sa), (0, sb), (0, m * n))));
    } else {
        for i in 0..batch {
            plan.steps.push(Step::Gemm(spec(
                m,
                1,
                (a_off[i], 0),
                (b_off[i], 0),
                (i * m * n, 0),
            )));
        }
    }
    if let Some(step) = epilogue {
        plan.steps.push(step);
    }
    Ok(())
}

/// Where a GEMM writes and the epilogue step that follows it, if any: no epilogue or a
/// cuBLASLt-fused one write the output; a same-dtype epilogue runs in place over the
/// output; otherwise the GEMM writes a scratch the epilogue reads.
fn gemm_target(
    program: &KernelProgram,
    k: &LibraryKernel,
    ctx: &LibCtx,
    n: usize,
    plan: &mut Plan,
) -> Result<(ArgRef, Option<Step>), String> {
    let out = ArgRef::Buffer(k.output);
    let Some(e) = &k.epilogue else {
        return Ok((out, None));
    };
    if fused_bias(k, ctx, n).is_some() {
        return Ok((out, None));
    }
    let mut e = e.clone();
    let in_place = e.out_dtype() == ctx.result.0;
    let src = if in_place {
        out
    } else {
        scratch(plan, numel(&ctx.result.1) * ctx.result.0.size_bytes())
    };
    e.inputs[0].buffer = k.output;
    let restrict = !in_place
        && !e
            .inputs
            .iter()
            .skip(1)
            .any(|i| root(program, i.buffer) == root(program, k.output));
    let mut emitted = loops::emit(&e, ctx.target, restrict)?;
    emitted.args[0] = src;
    Ok((src, Some(Step::Kernel(emitted))))
}

/// Plans a convolution.
///
/// # Errors
/// An unsupported dtype or an epilogue no rule accepts.
pub fn conv2d(
    k: &LibraryKernel,
    ctx: &LibCtx,
    p: &Conv2dParams,
    plan: &mut Plan,
) -> Result<(), String> {
    let (dtype, x) = &ctx.inputs[0];
    if !crate::caps::gemm_dtype(*dtype) {
        return Err(format!("no cuBLASLt GEMM for {dtype}"));
    }
    if ctx.unfused_epilogue() {
        return Err("its epilogue does not read the result contiguously".into());
    }
    let geo = conv::geometry(x, &ctx.inputs[1].1, &ctx.result.1, p);
    let col = if geo.direct {
        ArgRef::Buffer(k.inputs[0])
    } else {
        let col = scratch(
            plan,
            geo.n * geo.groups * geo.k * geo.spatial * dtype.size_bytes(),
        );
        plan.steps
            .push(Step::Kernel(conv::im2col(&k.name, ctx, p, col)));
        col
    };
    let has_bias = k.inputs.len() == 3;
    let post = has_bias || ctx.epilogue.is_some();
    let in_place = ctx.out_dtype() == *dtype;
    let target = if !post || in_place {
        ArgRef::Buffer(k.output)
    } else {
        scratch(plan, numel(&ctx.result.1) * dtype.size_bytes())
    };
    for g in 0..geo.groups {
        plan.steps.push(Step::Gemm(GemmSpec {
            label: k.name.clone(),
            dtype: *dtype,
            m: geo.og,
            n: geo.spatial,
            k: geo.k,
            batch: geo.n,
            a: operand(ArgRef::Buffer(k.inputs[1]), g * geo.og * geo.k, 0),
            b: operand(
                col,
                g * geo.k * geo.spatial,
                geo.groups * geo.k * geo.spatial,
            ),
            c: operand(target, g * geo.og * geo.spatial, geo.o * geo.spatial),
            bias: None,
            activation: Activation::None,
        }));
    }
    if post {
        plan.steps.push(Step::Kernel(conv::bias_epilogue(
            &k.name, ctx, &geo, target, has_bias,
        )?));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_offsets_broadcast_and_detect_affine_strides() {
        let o = batch_offsets(&[2, 3], &[2, 3], 10);
        assert_eq!(affine(&o), Some(10));
        let o = batch_offsets(&[1, 3], &[2, 3], 10);
        assert_eq!(o, vec![0, 10, 20, 0, 10, 20]);
        assert_eq!(affine(&o), None);
        let o = batch_offsets(&[], &[4], 10);
        assert_eq!(affine(&o), Some(0));
    }
}
