//! Convolution by im2col + GEMM: the kernels around the GEMM. `im2col` unfolds each
//! receptive field of an NCHW input into a column (`[N, G, Cg*KH*KW, OH*OW]`), the GEMMs
//! (one per group, batched over N) multiply by the weights, and `bias_epilogue` adds the
//! bias and applies the fused epilogue in one pass over the result.

use super::dtype::{compute, literal, load, storage};
use super::store::{numel, LibCtx};
use super::{finish, grid_for, ArgRef, EmittedKernel, Launch};
use rlx_ir::Conv2dParams;

/// The GEMM view of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// batch
    pub n: usize,
    /// groups
    pub groups: usize,
    /// output channels per group
    pub og: usize,
    /// `Cg * KH * KW`: the GEMM's inner dim
    pub k: usize,
    /// `OH * OW`
    pub spatial: usize,
    /// input channels
    pub c: usize,
    /// output channels
    pub o: usize,
    /// true when the input already is its own column matrix (1x1, stride 1, no padding)
    pub direct: bool,
}

/// The GEMM geometry of a convolution with input `x`, weight `w` and output `out` shapes.
pub fn geometry(x: &[usize], w: &[usize], out: &[usize], p: &Conv2dParams) -> ConvGeometry {
    let spatial = out[2] * out[3];
    let direct =
        w[2] == 1 && w[3] == 1 && p.stride == [1, 1] && p.pads == [0; 4] && spatial == x[2] * x[3];
    ConvGeometry {
        n: x[0],
        groups: p.groups,
        og: w[0] / p.groups,
        k: w[1] * w[2] * w[3],
        spatial,
        c: x[1],
        o: w[0],
        direct,
    }
}

/// Emits the unfold of `x` into the column scratch `col`.
pub fn im2col(label: &str, ctx: &LibCtx, p: &Conv2dParams, col: ArgRef) -> EmittedKernel {
    let (dtype, x) = &ctx.inputs[0];
    let w = &ctx.inputs[1].1;
    let out = &ctx.result.1;
    let (h, wd) = (x[2], x[3]);
    let (kh, kw) = (w[2], w[3]);
    let (oh, ow) = (out[2], out[3]);
    let total = x[0] * x[1] * kh * kw * oh * ow;
    let ity = if total.max(numel(x)) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let s = storage(*dtype);
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN(const {s}* __restrict__ x, {s}* __restrict__ col) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {total}; idx += gridDim.x * 256) {{\n\
         const {ity} ox = idx % {ow};\n\
         const {ity} oy = (idx / {ow}) % {oh};\n\
         const {ity} b = (idx / {ohw}) % {kw};\n\
         const {ity} a = (idx / {ohw_kw}) % {kh};\n\
         const {ity} nc = idx / {ohw_kk};\n\
         const int ih = (int)oy * {sh} - {pt} + (int)a * {dh};\n\
         const int iw = (int)ox * {sw} - {pl} + (int)b * {dw};\n\
         col[idx] = (ih >= 0 && ih < {h} && iw >= 0 && iw < {wd}) ? x[nc * {hw} + ih * {wd} + iw] : ({s})0;\n}}\n}}\n",
        ohw = oh * ow,
        ohw_kw = oh * ow * kw,
        ohw_kk = oh * ow * kw * kh,
        hw = h * wd,
        sh = p.stride[0],
        sw = p.stride[1],
        pt = p.pads[0],
        pl = p.pads[1],
        dh = p.dilation[0],
        dw = p.dilation[1],
    );
    finish(
        label,
        "im2col",
        text,
        Launch::linear(grid_for(total, 256), 256),
        vec![ArgRef::Buffer(ctx.kernel.inputs[0]), col],
    )
}

/// Emits `out = epilogue(gemm + bias[o])` over the NCHW result held in `src` (which may be
/// the output buffer itself: each element is read and written by the same thread).
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn bias_epilogue(
    label: &str,
    ctx: &LibCtx,
    geo: &ConvGeometry,
    src: ArgRef,
    has_bias: bool,
) -> Result<EmittedKernel, String> {
    let dtype = ctx.result.0;
    let n = numel(&ctx.result.1);
    let ity = if n < (1 << 30) { "int" } else { "long long" };
    let t = compute(dtype);
    let s = storage(dtype);
    let bias = if has_bias {
        format!(
            " + {}",
            load(dtype, &format!("bias[(idx / {}) % {}]", geo.spatial, geo.o))
        )
    } else {
        format!(" + {}", literal(dtype, 0.0))
    };
    let store_text = ctx.store("idx", "v", ity)?;
    let bias_param = if has_bias {
        format!(", const {s}* __restrict__ bias")
    } else {
        String::new()
    };
    // `src` may alias `out`, so neither is restrict-qualified.
    let outs = ctx.out_params().replace("* __restrict__ out", "* out");
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN(const {s}* src{bias_param}{outs}) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {n}; idx += gridDim.x * 256) {{\n\
         const {t} v = {}{bias};\n{store_text}}}\n}}\n",
        load(dtype, "src[idx]"),
    );
    let mut args = vec![src];
    if has_bias {
        args.push(ArgRef::Buffer(ctx.kernel.inputs[2]));
    }
    args.push(ArgRef::Buffer(ctx.kernel.output));
    if let Some(e) = &ctx.epilogue {
        args.extend(e.args());
    }
    Ok(finish(
        label,
        "conv_bias",
        text,
        Launch::linear(grid_for(n, 256), 256),
        args,
    ))
}
