//! Softmax and log-softmax along one axis. Rows along the last axis are spread over a warp
//! or a block (max, then sum of exponentials, then the write); rows along an inner axis run
//! one thread per row, so neighbouring threads read neighbouring elements.

use super::dtype::{compute, literal, load};
use super::group::RowGroup;
use super::store::{numel, LibCtx};
use super::{finish, grid_for, EmittedKernel, Launch};

/// Emits softmax (`log == false`) or log-softmax over `axis`.
///
/// # Errors
/// An epilogue node no rule accepts.
pub fn emit(ctx: &LibCtx, axis: usize, log: bool) -> Result<EmittedKernel, String> {
    let (dtype, shape) = &ctx.inputs[0];
    let outer = numel(&shape[..axis]);
    let len = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let rows = outer * inner;
    let t = compute(*dtype);
    let ity = if numel(shape) < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let ninf = literal(*dtype, f64::NEG_INFINITY);
    let zero = literal(*dtype, 0.0);
    let exp = if t == "float" { "expf" } else { "exp" };
    let logf = if t == "float" { "logf" } else { "log" };
    let x = |j: &str| load(*dtype, &format!("in0[base + {j} * {inner}]"));
    let value = if log {
        format!("{} - lse", x("j"))
    } else {
        format!("{exp}({} - m) * inv", x("j"))
    };
    let store = ctx.store(&format!("base + j * {inner}"), "v", ity)?;
    let finish_row = if log {
        format!("const {t} lse = m + {logf}(sum);\n")
    } else {
        format!("const {t} inv = ({t})1 / sum;\n")
    };
    let (text, launch) = if inner == 1 {
        let g = RowGroup::pick(rows, len, ctx.target);
        let (start, step) = g.rows();
        let text = format!(
            "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
             for ({ity} row = {start}; row < {rows}; row += {step}) {{\n\
             const {ity} base = row * {len};\n\
             {t} m = {ninf};\n\
             for ({ity} j = {lane}; j < {len}; j += {gs}) m = rlx_max(m, {xj});\n\
             m = {rmax}(m);\n\
             {t} sum = {zero};\n\
             for ({ity} j = {lane}; j < {len}; j += {gs}) sum += {exp}({xj} - m);\n\
             sum = {rsum}(sum);\n{finish_row}\
             for ({ity} j = {lane}; j < {len}; j += {gs}) {{\nconst {t} v = {value};\n{store}}}\n}}\n}}\n",
            ins = ctx.in_params(),
            outs = ctx.out_params(),
            lane = g.lane(),
            gs = g.size,
            xj = x("j"),
            rmax = g.reduce("max"),
            rsum = g.reduce("sum"),
        );
        (text, g.launch(rows))
    } else {
        let text = format!(
            "extern \"C\" __global__ void __launch_bounds__(256) RLX_FN({ins}{outs}) {{\n\
             for ({ity} row = blockIdx.x * 256 + threadIdx.x; row < {rows}; row += gridDim.x * 256) {{\n\
             const {ity} base = (row / {inner}) * {span} + row % {inner};\n\
             {t} m = {ninf};\n\
             for ({ity} j = 0; j < {len}; ++j) m = rlx_max(m, {xj});\n\
             {t} sum = {zero};\n\
             for ({ity} j = 0; j < {len}; ++j) sum += {exp}({xj} - m);\n{finish_row}\
             for ({ity} j = 0; j < {len}; ++j) {{\nconst {t} v = {value};\n{store}}}\n}}\n}}\n",
            ins = ctx.in_params(),
            outs = ctx.out_params(),
            span = len * inner,
            xj = x("j"),
        );
        (text, Launch::linear(grid_for(rows, 256), 256))
    };
    let family = if log { "log_softmax" } else { "softmax" };
    Ok(finish(&ctx.kernel.name, family, text, launch, ctx.args()))
}
