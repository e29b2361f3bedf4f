//! 2-D max/average pooling (one thread per output element, looping over its window) and
//! global pooling (a warp per (n, c) plane).

use super::dtype::{compute, literal, load};
use super::store::{numel, LibCtx};
use super::{finish, grid_for, EmittedKernel, Launch};
use rlx_ir::{Pool2dParams, PoolKind};

/// Emits a windowed pool over NCHW.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn pool2d(ctx: &LibCtx, p: &Pool2dParams) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let (h, w) = (shape[2], shape[3]);
    let out = &ctx.result.1;
    let (oh, ow) = (out[2], out[3]);
    let n = numel(out);
    let t = compute(*dtype);
    let ity = if n.max(numel(shape)) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let [kh, kw] = p.kernel;
    let (pt, pl, pb, pr) = (p.pads[0], p.pads[1], p.pads[2], p.pads[3]);
    let x = load(*dtype, "in0[plane + ih * W + iw]").replace('W', &w.to_string());
    let (init, fold, result) = match p.kind {
        PoolKind::Max => (
            format!("{t} acc = {};\n", literal(*dtype, f64::NEG_INFINITY)),
            format!("acc = rlx_max(acc, {x});\n"),
            "acc".to_string(),
        ),
        PoolKind::Avg => {
            // With count_include_pad, window positions inside the padded extent count.
            let count = if p.count_include_pad {
                "cnt_pad"
            } else {
                "cnt"
            };
            (
                format!(
                    "{t} acc = {};\nint cnt = 0;\nint cnt_pad = 0;\n",
                    literal(*dtype, 0.0)
                ),
                format!("acc += {x};\n++cnt;\n"),
                format!("({count} == 0 ? ({t})0 : acc / ({t}){count})"),
            )
        }
    };
    let count_pad = if p.kind == PoolKind::Avg {
        format!(
            "if (ih >= -{pt} && ih < {} && iw >= -{pl} && iw < {}) ++cnt_pad;\n",
            h + pb,
            w + pr
        )
    } else {
        String::new()
    };
    let store = ctx.store("idx", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} idx = blockIdx.x * 256 + threadIdx.x; idx < {n}; idx += gridDim.x * 256) {{\n\
         const {ity} ox = idx % {ow};\n\
         const {ity} oy = (idx / {ow}) % {oh};\n\
         const {ity} nc = idx / {ohw};\n\
         const {ity} plane = nc * {hw};\n\
         const int h0 = (int)oy * {sh} - {pt};\n\
         const int w0 = (int)ox * {sw} - {pl};\n\
         {init}\
         for (int a = 0; a < {kh}; ++a) {{\n\
         const int ih = h0 + a * {dh};\n\
         for (int b = 0; b < {kw}; ++b) {{\n\
         const int iw = w0 + b * {dw};\n\
         {count_pad}\
         if (ih < 0 || ih >= {h} || iw < 0 || iw >= {w}) continue;\n\
         {fold}}}\n}}\n\
         const {t} v = {result};\n{store}}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
        ohw = oh * ow,
        hw = h * w,
    );
    let family = match p.kind {
        PoolKind::Max => "max_pool2d",
        PoolKind::Avg => "avg_pool2d",
    };
    Ok(finish(
        &ctx.kernel.name,
        family,
        text,
        Launch::linear(grid_for(n, 256), 256),
        ctx.args(),
    ))
}

/// Emits a global pool over H, W (NCHW → NC11).
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn global(ctx: &LibCtx, kind: PoolKind) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let planes = shape[0] * shape[1];
    let hw = shape[2] * shape[3];
    let t = compute(*dtype);
    let ity = if numel(shape) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let x = load(*dtype, "in0[row * HW + j]").replace("HW", &hw.to_string());
    let (init, fold, reduce, result) = match kind {
        PoolKind::Max => (
            literal(*dtype, f64::NEG_INFINITY),
            format!("acc = rlx_max(acc, {x})"),
            "rlx_warp_max",
            "acc".to_string(),
        ),
        PoolKind::Avg => (
            literal(*dtype, 0.0),
            format!("acc += {x}"),
            "rlx_warp_sum",
            format!("acc / ({t}){hw}"),
        ),
    };
    let store = ctx.store("row", "v", ity)?;
    let text = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
         for ({ity} row = blockIdx.x * 8 + (threadIdx.x >> 5); row < {planes}; row += gridDim.x * 8) {{\n\
         {t} acc = {init};\n\
         for ({ity} j = threadIdx.x & 31; j < {hw}; j += 32) {fold};\n\
         acc = {reduce}(acc);\n\
         if ((threadIdx.x & 31) == 0) {{\nconst {t} v = {result};\n{store}}}\n}}\n}}\n",
        ins = ctx.in_params(),
        outs = ctx.out_params(),
    );
    let family = match kind {
        PoolKind::Max => "global_max_pool",
        PoolKind::Avg => "global_avg_pool",
    };
    Ok(finish(
        &ctx.kernel.name,
        family,
        text,
        Launch::linear(grid_for(planes, 8), 256),
        ctx.args(),
    ))
}
