//! Planning of the GEMM-based library kernels: matmul (batched, broadcast batch dims folded
//! into rows when the right operand is shared) and convolution (im2col + one GEMM per
//! group). Epilogues fuse into cuBLASLt when they are `act(x + bias)`, else run as a
//! generated kernel, in place when the dtype allows.

use crate::codegen::attention::{Layout, Layouts};
use crate::codegen::gemm_mma::{self, MmaGemm};
use crate::codegen::gemm_wgmma;
use crate::codegen::store::{numel, LibCtx};
use crate::codegen::{conv, index::contiguous, loops, ArgRef};
use crate::gemm::{Activation, GemmSpec, Operand};
use crate::plan::{fused_epilogue, operand, root, scratch, Choice, Plan, Step};
use rlx_ir::kernel::{KernelProgram, LibraryKernel};
use rlx_ir::{AttnMask, Conv2dParams, DType};

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
    let (bias_arg, residual, activation) =
        fused_epilogue(k, ctx, n).unwrap_or((None, None, Activation::None));
    let spec =
        |m: usize, batch: usize, ao: (usize, usize), bo: (usize, usize), co: (usize, usize)| {
            GemmSpec {
                label: k.name.clone(),
                dtype: *dtype,
                m,
                n,
                k: kk,
                batch,
                outer: 1,
                a: operand(ArgRef::Buffer(k.inputs[0]), ao.0, ao.1),
                b: operand(ArgRef::Buffer(k.inputs[1]), bo.0, bo.1),
                c: operand(target, co.0, co.1),
                bias: bias_arg,
                activation,
                residual,
                trans_b: false,
                alpha: 1.0,
            }
        };
    let a_off = batch_offsets(&a[..ra - 2], ob, m * kk);
    let b_off = batch_offsets(&b[..rb - 2], ob, kk * n);
    let batch = numel(ob);
    if numel(&b[..rb - 2]) == 1 && (batch == 1 || affine(&a_off) == Some(m * kk)) {
        // A shared right operand: all batches are one tall GEMM.
        plan.steps
            .push(Step::Gemm(spec(m * batch, 1, (0, 0), (0, 0), (0, 0))));
        if let Some(step) = epilogue {
            let gemm = plan.steps.len() - 1;
            plan.steps.push(step);
            fused_choice(program, k, ctx, (m * batch, n, kk), gemm, plan);
        }
        return Ok(());
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

/// Offers the tensor-core GEMMs with the epilogue fused into their store as alternatives to
/// GEMM step `gemm` plus the epilogue step after it, in every tiling that applies: the
/// `mma.sync` kernel ([`gemm_mma`]) and, on `sm_90a`, the Hopper one ([`gemm_wgmma`]).
/// Skipped when the epilogue does not fuse into a library kernel, reads the result's own
/// buffer through another input, or the result is larger than [`gemm_mma::MAX_OUTPUT`]
/// elements (beyond, cuBLASLt plus the epilogue kernel wins: measured in both kernels' docs).
fn fused_choice(
    program: &KernelProgram,
    k: &LibraryKernel,
    ctx: &LibCtx,
    (m, n, kk): (usize, usize, usize),
    gemm: usize,
    plan: &mut Plan,
) {
    let Some(e) = &ctx.epilogue else { return };
    if m * n > ctx.target.tuning.fused_gemm_max {
        return;
    }
    let out = root(program, k.output);
    if e.args().iter().any(|a| match *a {
        ArgRef::Buffer(b) => root(program, b) == out,
        _ => true,
    }) {
        return;
    }
    let g = MmaGemm {
        m,
        n,
        k: kk,
        a: (ArgRef::Buffer(k.inputs[0]), 0, kk),
        b: (ArgRef::Buffer(k.inputs[1]), 0, n),
    };
    let mut fused: Vec<_> = gemm_mma::MMA_TILES
        .iter()
        .filter(|t| gemm_mma::applies(ctx, &g, t))
        .filter_map(|t| gemm_mma::emit(ctx, &g, t).ok())
        .collect();
    if ctx.target.tuning.wgmma {
        fused.extend(
            gemm_wgmma::WGMMA_TILES
                .iter()
                .filter(|t| gemm_wgmma::applies(ctx, &g, t))
                .filter_map(|t| gemm_wgmma::emit(ctx, &g, t).ok()),
        );
    }
    if !fused.is_empty() {
        plan.choices.push(Choice {
            first: gemm,
            last: gemm + 1,
            fused,
        });
    }
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
    if fused_epilogue(k, ctx, n).is_some() {
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
    // The GEMM writes `src` front to back just before this step reads it.
    let back =
        crate::plan::walks_back(ctx.target, numel(&ctx.result.1) * ctx.result.0.size_bytes());
    let mut emitted = loops::emit(&e, ctx.target, restrict, back)?;
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
            outer: 1,
            a: operand(ArgRef::Buffer(k.inputs[1]), g * geo.og * geo.k, 0),
            b: operand(
                col,
                g * geo.k * geo.spatial,
                geo.groups * geo.k * geo.spatial,
            ),
            c: operand(target, g * geo.og * geo.spatial, geo.o * geo.spatial),
            bias: None,
            activation: Activation::None,
            residual: None,
            trans_b: false,
            alpha: 1.0,
        }));
    }
    if post {
        plan.steps.push(Step::Kernel(conv::bias_epilogue(
            &k.name, ctx, &geo, target, has_bias,
        )?));
    }
    Ok(())
}

/// Score elements (batch x sq x sk) from which attention runs as two tensor-core GEMMs around
/// a softmax kernel instead of the fused kernel; `RLX_CUDA_ATTN_GEMM=1` forces it (tests),
/// `=0` turns it off.
const ATTN_GEMM_MIN_SCORES: usize = 1 << 20;

/// Plans attention as `S = scale * Q K^T` (cuBLASLt, K used transposed), the masked softmax
/// of `S` in place (one generated kernel), and `O = S V` (cuBLASLt) — on tensor cores, for
/// f16/bf16 when the score matrix is large enough that the extra traffic is cheaper than the
/// fused kernel's CUDA-core arithmetic. Returns false (nothing planned) when it does not
/// apply: another dtype, broadcast batch dims, a fused epilogue, a small problem, or layouts
/// no GEMM walks (columns not contiguous, or batch dims that do not merge into two levels).
///
/// Q, K, V and the result are read and written through `layouts`, so `[batch, seq, heads,
/// dim]` tensors are used in place: rows are padded (the leading dimension is `heads * dim`)
/// and the (batch, head) pairs are two batch levels. cuBLASLt takes one batch stride per
/// matrix, so the two levels run as one pointer-array GEMM (`blas::Batching`); that moves no
/// data, where the alternatives either copy Q, K, V and the result through a transpose
/// kernel (4 x 2 x the tensor's bytes of traffic, the cost this removes) or loop over one
/// level (`heads` launches, each too small to fill the GPU at small batch). The loop remains
/// the fallback when cuBLASLt has no pointer-array algorithm. S is our own scratch, packed
/// `[batch..., sq, sk]`, so the softmax kernel is unchanged.
///
/// # Errors
/// None today; the signature matches the other planners.
pub fn attention(
    k: &LibraryKernel,
    ctx: &LibCtx,
    mask: AttnMask,
    scale: Option<f64>,
    layouts: &Layouts,
    plan: &mut Plan,
) -> Result<bool, String> {
    let (dtype, q) = &ctx.inputs[0];
    let (_, kk) = &ctx.inputs[1];
    let (_, v) = &ctx.inputs[2];
    let r = q.len();
    let out = &ctx.result.1;
    if !matches!(dtype, DType::F16 | DType::BF16)
        || k.epilogue.is_some()
        || r < 2
        || kk.len() != r
        || v.len() != r
        || out.len() != r
    {
        return Ok(false);
    }
    let ob = &out[..r - 2];
    if q[..r - 2] != *ob || kk[..r - 2] != *ob || v[..r - 2] != *ob {
        return Ok(false);
    }
    let (sq, d, sk, dv) = (q[r - 2], q[r - 1], kk[r - 2], v[r - 1]);
    let batch = numel(ob);
    let wanted = ctx
        .target
        .tuning
        .attn_gemm
        .unwrap_or(batch * sq * sk >= ATTN_GEMM_MIN_SCORES);
    // The softmax keeps a row in registers (sk / 32 per lane): long rows stay fused.
    if !wanted || kk[r - 1] != d || v[r - 2] != sk || sk > 32 * 64 {
        return Ok(false);
    }
    let Some(levels) = BatchLevels::of(ob, sq * sk, layouts) else {
        return Ok(false);
    };
    let ops = [
        levels.operand(&layouts.q, 0, sq, d),
        levels.operand(&layouts.k, 1, sk, d),
        levels.operand(&layouts.v, 2, sk, dv),
        levels.operand(&layouts.out, 3, sq, dv),
    ];
    let [Some(qo), Some(ko), Some(vo), Some(oo)] = ops else {
        return Ok(false);
    };
    let s_arg = scratch(plan, batch * sq * sk * dtype.size_bytes());
    let so = levels.operand(
        &Layout::packed(s_arg, &[batch, sq, sk], &[batch]),
        4,
        sq,
        sk,
    );
    let Some(so) = so else {
        return Ok(false);
    };
    let gemm = |m, n, kd, a, b, c, trans_b, alpha| GemmSpec {
        label: k.name.clone(),
        dtype: *dtype,
        m,
        n,
        k: kd,
        batch: levels.inner,
        outer: levels.outer,
        a,
        b,
        c,
        bias: None,
        activation: Activation::None,
        residual: None,
        trans_b,
        alpha,
    };
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    plan.steps
        .push(Step::Gemm(gemm(sq, sk, d, qo, ko, so, true, scale)));
    plan.steps
        .push(Step::Kernel(crate::codegen::attention::gemm_softmax(
            ctx, mask, s_arg,
        )));
    plan.steps
        .push(Step::Gemm(gemm(sq, dv, sk, so, vo, oo, false, 1.0)));
    Ok(true)
}

/// The output batch dims of a GEMM-form attention merged into at most two levels that every
/// operand walks with one stride each: `inner` batches per call (or per pointer table row)
/// and `outer` of those.
struct BatchLevels {
    inner: usize,
    outer: usize,
    /// per operand (q, k, v, out, scores): (inner stride, outer stride)
    strides: [(usize, usize); 5],
}

impl BatchLevels {
    /// Merges `ob` over the strides of q, k, v, the result and the packed score scratch
    /// (`scores` elements per matrix); None when more than two levels remain or a stride is
    /// negative.
    fn of(ob: &[usize], scores: usize, layouts: &Layouts) -> Option<BatchLevels> {
        let s: Vec<isize> = contiguous(ob).iter().map(|x| x * scores as isize).collect();
        let all = [
            layouts.q.batch.clone(),
            layouts.k.batch.clone(),
            layouts.v.batch.clone(),
            layouts.out.batch.clone(),
            s,
        ];
        let space = rlx_ir::kernel::IndexSpace::merge(ob, &all);
        // (inner, outer) stride per operand with dim `inner` as the inner level.
        let level = |inner: usize, outer: Option<usize>| -> Option<[(usize, usize); 5]> {
            let mut st = [(0, 0); 5];
            for (o, strides) in space.strides.iter().enumerate() {
                let i = usize::try_from(strides[inner]).ok()?;
                let j = match outer {
                    Some(d) => usize::try_from(strides[d]).ok()?,
                    None => 0,
                };
                st[o] = (i, j);
            }
            Some(st)
        };
        match *space.dims.as_slice() {
            [] => Some(BatchLevels {
                inner: 1,
                outer: 1,
                strides: [(0, 0); 5],
            }),
            [n] => Some(BatchLevels {
                inner: n,
                outer: 1,
                strides: level(0, None)?,
            }),
            // The larger level is the inner one, so the loop fallback makes few, large calls.
            [o, n] if o > n => Some(BatchLevels {
                inner: o,
                outer: n,
                strides: level(0, Some(1))?,
            }),
            [o, n] => Some(BatchLevels {
                inner: n,
                outer: o,
                strides: level(1, Some(0))?,
            }),
            _ => None,
        }
    }

    /// The GEMM operand of `l` (index `which` in q, k, v, out, scores) with `rows x cols`
    /// matrices; None when its columns are not contiguous or its rows overlap.
    fn operand(&self, l: &Layout, which: usize, rows: usize, cols: usize) -> Option<Operand> {
        let row = usize::try_from(l.row).ok()?;
        if (cols > 1 && l.col != 1) || (rows > 1 && row < cols) {
            return None;
        }
        let (batch_stride, outer_stride) = self.strides[which];
        Some(Operand {
            arg: l.arg,
            offset: l.offset,
            batch_stride,
            outer_stride,
            row_stride: (rows > 1 && row != cols).then_some(row),
        })
    }
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

    #[test]
    fn head_split_batches_merge_into_two_levels_larger_inner() {
        // [256, 128, 12, 64] operands seen as [256, 12] batches of [128, 64] matrices.
        let ob = [256, 12];
        let l = |b: usize| Layout {
            arg: ArgRef::Buffer(b),
            offset: 0,
            batch: vec![128 * 768, 64],
            row: 768,
            col: 1,
        };
        let layouts = Layouts {
            q: l(0),
            k: l(1),
            v: l(2),
            out: l(3),
        };
        let levels = BatchLevels::of(&ob, 128 * 128, &layouts).unwrap();
        assert_eq!((levels.inner, levels.outer), (256, 12));
        assert_eq!(levels.strides[0], (128 * 768, 64));
        assert_eq!(levels.strides[4], (12 * 128 * 128, 128 * 128));
        let q = levels.operand(&layouts.q, 0, 128, 64).unwrap();
        assert_eq!(q.row_stride, Some(768));
        // Packed operands merge into one level.
        let packed = Layouts {
            q: Layout::packed(ArgRef::Buffer(0), &[256, 12, 128, 64], &ob),
            k: Layout::packed(ArgRef::Buffer(1), &[256, 12, 128, 64], &ob),
            v: Layout::packed(ArgRef::Buffer(2), &[256, 12, 128, 64], &ob),
            out: Layout::packed(ArgRef::Buffer(3), &[256, 12, 128, 64], &ob),
        };
        let levels = BatchLevels::of(&ob, 128 * 128, &packed).unwrap();
        assert_eq!((levels.inner, levels.outer), (256 * 12, 1));
        assert_eq!(levels.strides[0], (128 * 64, 0));
    }
}
